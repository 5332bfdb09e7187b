"""The arrays behind the training report, without matplotlib: max-pool gradient routing (which input
positions win their windows, per example and across a batch, traced back to the input pixels), the
worst examples, saliency, confusion, filters and feature maps. Each function takes a ``Sequential``
or a fitted ``CNNClassifier`` (with raw X as the estimator takes it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .loss import softmax_cross_entropy
from .network import Sequential


def as_net(model: Any, x: np.ndarray, y: np.ndarray | None = None
           ) -> tuple[Sequential, np.ndarray, np.ndarray | None]:
    """(network, (N, C, H, W) float32 images, class indices) for a Sequential or a fitted estimator."""
    if isinstance(model, Sequential):
        return model, np.ascontiguousarray(x, dtype=np.float32), None if y is None else np.asarray(y)
    if not hasattr(model, "net_"):
        raise ValueError("expected a numbacnn Sequential or a fitted CNNClassifier, got "
                         f"{type(model).__name__}")
    X, _ = model._validate_X(x, reset=False)
    labels = None if y is None else model._encode(np.asarray(y))
    return model.net_, model._images(X, model.input_shape_), labels


@dataclass
class PoolRouting:
    """How one max-pooling stage routes gradient, for a batch of examples.

    ``argmax[n, c, oy, ox]`` is the flat index iy * W + ix, in example n's (C, H, W) feature map at the
    pooling input, of the position that won window (oy, ox): the only position of that window that
    receives gradient (ties to the first, as in the kernels)."""

    layer: int  # index of the MaxPool2D in net.layers
    name: str
    fused: bool  # pooled inside the preceding convolution's kernels
    in_shape: tuple[int, int, int]  # (C, H, W) at the pooling input
    argmax: np.ndarray  # (N, C, OH, OW) int64
    feature_maps: np.ndarray  # (N, C, H, W) the pooling input (after the fused ReLU when fused)

    def winners(self, n: int) -> np.ndarray:
        """(C, H, W) bool: positions of example n that won at least one window."""
        c, h, w = self.in_shape
        out = np.zeros((c, h * w), bool)
        for ch in range(c):
            out[ch, self.argmax[n, ch].ravel()] = True
        return out.reshape(c, h, w)

    def counts(self) -> np.ndarray:
        """(C, H, W) int: for each position, the number of examples that route gradient to it."""
        total = np.zeros(self.in_shape, np.int64)
        for n in range(len(self.argmax)):
            total += self.winners(n)
        return total

    def never_won(self) -> float:
        """Share of the (channel, position) cells that won no window for any example of the batch."""
        return float((self.counts() == 0).mean())


def routing(model: Any, x: np.ndarray) -> list[PoolRouting]:
    """The routing of every max-pooling stage (fused ones included) for the batch x, from one
    inference-mode forward pass in which every layer runs on its own (``Sequential.unfused``:
    the values the fused kernels compute, with each pool's input and argmax there to read)."""
    net, images, _ = as_net(model, x)
    fused = {i for i, layer in enumerate(net.layers) if layer.keeps_argmax and layer.writes_nothing()}
    out = []

    def visit(i: int, layer: Any, h_in: Any, h_out: Any) -> None:
        if layer.keeps_argmax:
            maps = np.array(net.backend.to_host(h_in))
            out.append(PoolRouting(i, layer.name, i in fused, maps.shape[1:], layer.argmax, maps))

    with net.unfused():
        net.forward(images, visit=visit)
    return out


def routing_change(before: list[PoolRouting], after: list[PoolRouting]) -> list[float]:
    """Per pooling stage, the share of windows (over the batch) whose winner moved between two
    routings of the same examples (e.g. after the first and the last epoch)."""
    return [float((a.argmax != b.argmax).mean()) for a, b in zip(before, after)]


def trace_to_input(model: Any, x: np.ndarray, n: int = 0,
                   stages: list[PoolRouting] | None = None) -> list[np.ndarray]:
    """For example n and each pooling stage, an (H, W) map over the input image: how many routed
    paths from that stage's pooled outputs reach each input pixel, through the winners of that stage
    and of every earlier pooling stage, the receptive fields of the convolutions and the windows of
    average pools. Zero means the pixel gets no gradient through that stage's pooled outputs."""
    net, images, _ = as_net(model, x)
    stages = routing(net, images) if stages is None else stages
    by_layer = {s.layer: s for s in stages}
    shapes = [tuple(images.shape[1:])]
    for layer in net.layers:
        shapes.append(layer.output_shape(shapes[-1]))
    maps = []
    for stage in stages:
        g = _through_pool(np.ones(stage.argmax.shape[1:], np.int64), stage, n)
        for j in range(stage.layer - 1, -1, -1):
            if j in by_layer:
                g = _through_pool(g, by_layer[j], n)
            else:
                g = net.layers[j].trace_back(g, shapes[j])
        maps.append(g.sum(0))
    return maps


def _through_pool(g: np.ndarray, stage: PoolRouting, n: int) -> np.ndarray:
    """Counts at a pooling stage's outputs (C, OH, OW) -> its input (C, H, W), each to its winner."""
    c, h, w = stage.in_shape
    out = np.zeros((c, h * w), np.int64)
    for ch in range(c):
        np.add.at(out[ch], stage.argmax[n, ch].ravel(), g[ch].ravel())
    return out.reshape(c, h, w)


def top_losses(model: Any, x: np.ndarray, y: np.ndarray, k: int = 16) -> dict[str, np.ndarray]:
    """The k examples with the highest loss: their indices, losses, true and predicted classes and
    the predicted class's probability (class indices; an estimator's labels are ``classes_[i]``)."""
    net, images, labels = as_net(model, x, y)
    assert labels is not None
    logits = net.forward(images)
    z = logits.astype(np.float64) - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    losses = -logp[np.arange(len(labels)), labels]
    order = np.argsort(-losses, kind="stable")[:k]
    pred = logp.argmax(1)
    return {"index": order, "loss": losses[order], "true": labels[order], "pred": pred[order],
            "prob": np.exp(logp[order, pred[order]])}


def saliency(model: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dL/dx (N, C, H, W) of each example's own loss (inference mode: no dropout)."""
    net, images, labels = as_net(model, x, y)
    assert labels is not None
    logits = net.forward(images, keep=True)
    _, d = softmax_cross_entropy(logits, labels)
    dx = net.backward(d * np.float32(len(labels)))  # per-example losses, not their mean
    assert dx is not None
    return dx


def most_confused(matrix: np.ndarray, k: int = 5) -> list[tuple[int, int, int]]:
    """The k largest off-diagonal cells of a confusion matrix: (true, predicted, count)."""
    m = np.array(matrix, np.int64)
    np.fill_diagonal(m, 0)
    flat = np.argsort(-m, axis=None, kind="stable")[:k]
    return [(int(i), int(j), int(m[i, j])) for i, j in zip(*np.unravel_index(flat, m.shape)) if m[i, j] > 0]


def first_layer_filters(model: Any) -> np.ndarray:
    """The first convolution's weight (C_out, C_in, KH, KW)."""
    net = model if isinstance(model, Sequential) else model.net_
    for layer in net.layers:
        if layer.role == "conv":
            return np.array(net.backend.to_host(layer.weight))  # type: ignore[union-attr]
    raise ValueError("the network has no convolution")


def feature_maps(model: Any, x1: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """One example's (C, H, W) activations after each convolution stage (with its activation; a
    fused pool shows as the pooling stage) and each pooling stage, named after the layer."""
    net, images, _ = as_net(model, x1)
    layers = net.layers
    out = []

    def visit(i: int, layer: Any, h_in: Any, h: Any) -> None:
        prev = layers[i - 1] if i else None
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        conv_stage = (layer.role == "activation" and prev is not None and prev.role == "conv"
                      and not prev.fusion.pool) \
            or (layer.role == "conv" and (nxt is None or nxt.role != "activation"))
        if (conv_stage or layer.role == "pool") and np.ndim(h) == 4:
            out.append((layer.name, np.array(net.backend.to_host(h))[0]))

    net.forward(images[:1], visit=visit)
    return out
