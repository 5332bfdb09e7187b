"""The training report: matplotlib figures of the arrays in ``analysis`` and one self-contained HTML page.

``write_report(out_dir, model, x, y, ...)`` writes ``index.html`` (images embedded, no script, no
network) and the same figures as PNG files beside it. Every figure function takes a ``Sequential`` or a
fitted ``CNNClassifier`` and returns a matplotlib ``Figure``. Needs the [plot] extra (matplotlib).
"""
from __future__ import annotations

import base64
import html
import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import analysis as A
from ._text import install_hint, plural

EXTRA = install_hint("plot")


class ReportError(RuntimeError):
    """The report cannot be made here (matplotlib missing, directory not writable, ...)."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportError(f"the report needs matplotlib: {EXTRA}") from None


def figure(w: float, h: float):
    """A matplotlib Figure of w x h inches (constrained layout, no pyplot); needs [plot]."""
    require_matplotlib()
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    return Figure(figsize=(w, h), dpi=90, layout="constrained")


def _image(ax, a: np.ndarray, title: str = "", cmap: str = "gray", **kw) -> Any:
    img = a.transpose(1, 2, 0) if a.ndim == 3 and a.shape[0] == 3 else a.reshape(a.shape[-2:]) \
        if a.ndim == 3 and a.shape[0] == 1 else a
    im = ax.imshow(img, cmap=cmap, interpolation="nearest", **kw)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)
    return im


# --- figures -------------------------------------------------------------------------------------
def plot_learning_curves(history: list[dict[str, Any]]):
    """Loss and accuracy per epoch (train, validation, test: whichever the history holds)."""
    fig = figure(8, 3)
    axes = fig.subplots(1, 2)
    epochs = [h.get("epoch", i + 1) for i, h in enumerate(history)]
    for ax, metric in zip(axes, ("loss", "accuracy")):
        for split in ("train", "val", "test"):
            values = [h.get(f"{split}_{metric}") for h in history]
            if any(v is not None for v in values):
                ax.plot(epochs, values, marker="o", label=split)
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.legend(fontsize=8)
    fig.suptitle("Learning curves")
    return fig


def plot_confusion(model: Any, x: np.ndarray, y: np.ndarray, class_names: list[str] | None = None):
    """scikit-learn's ConfusionMatrixDisplay of the model's predictions on (x, y)."""
    from sklearn.metrics import ConfusionMatrixDisplay

    net, images, labels = A.as_net(model, x, y)
    n_classes = net.output_shape(images.shape[1:])[0]
    pred = net.predict(images)
    fig = figure(6, 5.5)
    ax = fig.subplots()
    ConfusionMatrixDisplay.from_predictions(labels, pred, labels=list(range(n_classes)),
                                            display_labels=class_names, ax=ax, colorbar=False)
    ax.set_title("Confusion matrix (rows: true, columns: predicted)")
    return fig


def plot_worst_examples(model: Any, x: np.ndarray, y: np.ndarray, class_names: list[str] | None = None,
                        k: int = 16):
    """The k highest-loss examples with their true and predicted labels and probability."""
    worst = A.top_losses(model, x, y, k)
    _, images, _ = A.as_net(model, x)
    names = class_names or [str(i) for i in range(int(max(worst["true"].max(), worst["pred"].max())) + 1)]
    cols = min(8, len(worst["index"]))
    rows = -(-len(worst["index"]) // cols)
    fig = figure(1.4 * cols, 1.6 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax in axes:
        ax.axis("off")
    for ax, i, t, p, pr in zip(axes, worst["index"], worst["true"], worst["pred"], worst["prob"]):
        _image(ax, images[i], f"true {names[t]}\npred {names[p]} ({pr:.2f})")
    fig.suptitle("Highest-loss test examples")
    return fig


def plot_saliency(model: Any, x: np.ndarray, y: np.ndarray, k: int = 4):
    """For the k highest-loss examples: the image and |dL/dx| summed over channels."""
    worst = A.top_losses(model, x, y, k)
    _, images, _ = A.as_net(model, x)
    sal = A.saliency(model, np.asarray(x)[worst["index"]], np.asarray(y)[worst["index"]])
    fig = figure(2.6 * len(worst["index"]), 2.8)
    axes = np.atleast_2d(fig.subplots(2, len(worst["index"])).T)
    for (a_img, a_sal), i, s in zip(axes, worst["index"], sal):
        _image(a_img, images[i], f"example {i}")
        _image(a_sal, np.abs(s).sum(0), "|dL/dx|", cmap="inferno")
    fig.suptitle("Saliency of the worst examples")
    return fig


def plot_filters(model: Any, max_filters: int = 32):
    """The first convolution's filters (first input channel, or RGB for 3 channels)."""
    w = A.first_layer_filters(model)[:max_filters]
    cols = min(8, len(w))
    rows = -(-len(w) // cols)
    fig = figure(1.1 * cols, 1.1 * rows + 0.4)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax in axes:
        ax.axis("off")
    for ax, f in zip(axes, w):
        img = f if f.shape[0] == 3 else f[0]
        if f.shape[0] == 3:
            img = (img - img.min()) / max(float(img.max() - img.min()), 1e-12)
        _image(ax, img, cmap="coolwarm")
    fig.suptitle("First-layer filters")
    return fig


def plot_feature_maps(model: Any, x1: np.ndarray, channels: int = 8):
    """One example's activations after each convolution and pooling stage (first channels)."""
    maps = A.feature_maps(model, x1)
    if not maps:
        raise ReportError("the network has no convolution or pooling stage")
    fig = figure(1.2 * channels + 1.6, 1.3 * len(maps) + 0.4)
    axes = np.atleast_2d(fig.subplots(len(maps), channels))
    for row, (name, a) in zip(axes, maps):
        for c, ax in enumerate(row):
            ax.axis("off")
            if c < len(a):
                _image(ax, a[c], "", cmap="viridis")
        # the stage and its shape, whole, left of the row ("3 MaxPool2D (16x14x14)" on two lines)
        row[0].text(-0.12, 0.5, name.replace(" (", "\n("), transform=row[0].transAxes, ha="right",
                    va="center", fontsize=8)
    fig.suptitle("Feature maps of one example")
    return fig


def plot_routing_example(model: Any, x: np.ndarray, n: int = 0, stages=None):
    """For example n and each pooling stage: its feature map (first channel) with the positions that
    won a window marked, and the input pixels those winners route gradient to."""
    stages = A.routing(model, x) if stages is None else stages
    traces = A.trace_to_input(model, x, n, stages)
    _, images, _ = A.as_net(model, x)
    fig = figure(7.5, 2.6 * len(stages))
    axes = np.atleast_2d(fig.subplots(len(stages), 3))
    for (a_map, a_win, a_in), st, tr in zip(axes, stages, traces):
        ch = int(np.argmax(st.winners(n).sum((1, 2))))
        _image(a_map, st.feature_maps[n, ch], f"{st.name}\nchannel {ch}", cmap="viridis")
        _image(a_win, st.feature_maps[n, ch], "winners (red)", cmap="gray")
        wy, wx = np.nonzero(st.winners(n)[ch])
        a_win.scatter(wx, wy, s=12, c="red", marker="s")
        _image(a_in, images[n], "routed to input pixels")
        a_in.imshow(np.ma.masked_equal(tr, 0), cmap="autumn", alpha=0.6, interpolation="nearest")
    fig.suptitle(f"Max-pool gradient routing of example {n}")
    return fig


def plot_routing_counts(model: Any, x: np.ndarray, stages=None, channels: int = 8):
    """Per pooling stage and channel: how many examples of the batch route gradient to each
    position (0: the position never wins a window in this batch)."""
    stages = A.routing(model, x) if stages is None else stages
    fig = figure(1.3 * channels + 0.8, 1.5 * len(stages) + 0.4)
    axes = np.atleast_2d(fig.subplots(len(stages), channels))
    n = len(stages[0].argmax)
    for row, st in zip(axes, stages):
        counts = st.counts()
        for c, ax in enumerate(row):
            ax.axis("off")
            if c < len(counts):
                im = _image(ax, counts[c], f"{st.name.split(' (')[0]} ch {c}" if c == 0 else f"ch {c}",
                            cmap="magma", vmin=0, vmax=n)
        fig.colorbar(im, ax=row[-1], fraction=0.5)
    fig.suptitle(f"Examples (of {n}) routing gradient to each position")
    return fig


def plot_routing_shares(stages, change: list[float] | None = None):
    """Per pooling stage: the share of positions that never win in the batch, and (given the routing
    after the first epoch) the share of winners that moved since."""
    names = [st.name.split(" (")[0] for st in stages]
    fig = figure(7, 2.8)
    axes = fig.subplots(1, 2)
    axes[0].bar(names, [st.never_won() for st in stages], color="tab:gray")
    axes[0].set_ylim(0, 1)
    axes[0].set_title("positions that never win", fontsize=9)
    if change is not None:
        axes[1].bar(names, change, color="tab:orange")
        axes[1].set_ylim(0, 1)
        axes[1].set_title("winners moved, first -> last epoch", fontsize=9)
    else:
        axes[1].axis("off")
        axes[1].text(0.5, 0.5, "routing after the first epoch\nnot recorded", ha="center", va="center")
    fig.suptitle("Routing across the batch")
    return fig


# --- the page ------------------------------------------------------------------------------------
@dataclass
class Section:
    key: str
    title: str
    caption: str
    figure: Any = None  # a matplotlib Figure, or None with ``note`` instead
    note: str = ""


def sections(model: Any, x: np.ndarray, y: np.ndarray, history: list[dict[str, Any]] | None = None,
             class_names: list[str] | None = None, routing_first=None, batch: int = 64) -> list[Section]:
    """Every figure of the report, with its title and caption, for test data (x, y)."""
    xb = np.asarray(x)[:batch]  # the routing batch
    out = []
    if class_names is None and isinstance(model, A.Sequential):
        class_names = model.classes  # from the data's folders or a checkpoint, if known
    if history:
        out.append(Section("learning_curves", "Learning curves", "Loss and accuracy after each "
                           "epoch: a test curve that turns up while training keeps falling is overfitting.",
                           plot_learning_curves(history)))
    net, images, labels = A.as_net(model, x, y)
    from .training import confusion_matrix

    assert labels is not None
    m = confusion_matrix(net, images, labels, net.output_shape(images.shape[1:])[0])
    names = class_names or [str(i) for i in range(len(m))]
    pairs = "; ".join(f"{names[t]} taken for {names[p]} {plural(c, 'time')}"
                      for t, p, c in A.most_confused(m))
    out.append(Section("confusion", "Confusion matrix", "Counts of each true class (rows) predicted as "
                       "each class (columns); most confused: " + (pairs or "none") + ".",
                       plot_confusion(model, x, y, class_names)))
    out.append(Section("worst_examples", "Worst test examples", "The test images with the highest loss, "
                       "with their true and predicted label and the predicted probability.",
                       plot_worst_examples(model, x, y, class_names)))
    out.append(Section("saliency", "Saliency", "Where the loss of the worst examples is most sensitive to "
                       "the input (|dL/dx| from the backward pass): the pixels the mistake hinges on.",
                       plot_saliency(model, x, y)))
    out.append(Section("filters", "First-layer filters", "The first convolution's weights (blue "
                       "negative, red positive): edge and stroke detectors once trained.",
                       plot_filters(model)))
    out.append(Section("feature_maps", "Feature maps", "One test example after each convolution and "
                       "pooling stage (first channels): how the image is turned into features.",
                       plot_feature_maps(model, np.asarray(x)[:1])))
    stages = A.routing(model, xb)
    if not stages:
        out.append(Section("routing", "Max-pool gradient routing", "", None,
                           "This network has no max-pooling layer, so there is no routing to show."))
        return out
    out.append(Section("routing_example", "Max-pool gradient routing: one example", "Each window sends "
                       "the example's gradient only to its maximum: the winners (red) of one channel, and "
                       "the input pixels reached through every pooling stage's winners.",
                       plot_routing_example(model, xb, 0, stages)))
    out.append(Section("routing_counts", "Max-pool gradient routing: the batch", f"How many of the "
                       f"{len(xb)} examples route gradient to each position: each example reaches "
                       "different positions, and dark cells receive gradient from none.",
                       plot_routing_counts(model, xb, stages)))
    change = A.routing_change(routing_first, stages) if routing_first else None
    names = [st.name.split(" (")[0] for st in stages]
    never = ", ".join(f"{n} {st.never_won():.0%}" for n, st in zip(names, stages))
    moved = (", ".join(f"{n} {c:.0%}" for n, c in zip(names, change)) if change is not None
             else "not recorded (only a report written during training has the first epoch's routing)")
    out.append(Section("routing_shares", "Max-pool gradient routing: shares", "Positions that never win "
                       f"a window in this batch: {never}; winners that moved between the first and the "
                       f"last epoch: {moved}.", plot_routing_shares(stages, change)))
    return out


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_report(out_dir: str, model: Any, x: np.ndarray, y: np.ndarray,
                 history: list[dict[str, Any]] | None = None, class_names: list[str] | None = None,
                 routing_first=None, info: dict[str, Any] | None = None) -> str:
    """Write ``out_dir/index.html`` and one PNG per figure; returns the page's path."""
    require_matplotlib()
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise ReportError(f"cannot write the report to {out_dir}: {e.strerror or e}") from None
    if not os.access(out_dir, os.W_OK):
        raise ReportError(f"cannot write the report to {out_dir}: permission denied")
    esc = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>numbacnn training report</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}figure{margin:1em 0}"
             "img{max-width:100%}figcaption{color:#444}td{padding:0 1em}</style></head><body>",
             "<h1>numbacnn training report</h1><table>"]
    for k, v in (info or {}).items():
        shown = f"{v:.4f}" if isinstance(v, float) else str(v)
        parts.append(f"<tr><td>{esc(str(k))}</td><td>{esc(shown)}</td></tr>")
    parts.append("</table>")
    for sec in sections(model, x, y, history, class_names, routing_first):
        parts.append(f"<h2 id='{sec.key}'>{esc(sec.title)}</h2>")
        if sec.figure is None:
            parts.append(f"<p>{esc(sec.note)}</p>")
            continue
        png = _png(sec.figure)
        with open(os.path.join(out_dir, f"{sec.key}.png"), "wb") as f:
            f.write(png)
        parts.append(f"<figure><img alt='{esc(sec.title)}' src='data:image/png;base64,"
                     f"{base64.b64encode(png).decode()}'><figcaption>{esc(sec.caption)}</figcaption></figure>")
    parts.append("</body></html>")
    page = os.path.join(out_dir, "index.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return page
