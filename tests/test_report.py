"""The training report: routing arrays against an oracle built from the float64 forward pass, the
page (every figure, embedded and decodable, nothing external, escaped text), the command from a
checkpoint, failures that never cost the model, and the estimator with scikit-learn's displays."""
import base64
import io
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import reference as ref
from conftest import ROOT, run_without, tiny_npz

import numbacnn as nc
from numbacnn import analysis as A
from numbacnn.cli import main

FIGURES = ["learning_curves", "confusion", "worst_examples", "saliency", "filters", "feature_maps",
           "routing_example", "routing_counts", "routing_shares"]

# (layers, oracle spec up to and including each pooling stage, input shape)
ROUTING_NETS = {
    "fused wide 2x2": (lambda: [nc.Conv2D(1, 3, 3), nc.ReLU(), nc.MaxPool2D(2), nc.Flatten(),
                                nc.Dense(3 * 4 * 4, 2)], (1, 11, 10)),
    "fused positions 2x2, then overlapping padded": (
        lambda: [nc.Conv2D(2, 12, 3, padding=1), nc.ReLU(), nc.Conv2D(12, 8, 3), nc.ReLU(),
                 nc.MaxPool2D(2), nc.MaxPool2D(3, stride=2, padding=1), nc.Flatten(),
                 nc.Dense(8 * 2 * 2, 2)], (2, 9, 9)),
    "fused wide, rectangular 2x3 windows": (
        lambda: [nc.Conv2D(1, 3, 3), nc.ReLU(), nc.MaxPool2D((2, 3)), nc.Flatten(),
                 nc.Dense(3 * 4 * 2, 2)], (1, 10, 10)),
    "unfused overlapping after tanh, odd sizes": (
        lambda: [nc.Conv2D(1, 2, 2), nc.Tanh(), nc.MaxPool2D(3, stride=2), nc.Flatten(),
                 nc.Dense(2 * 3 * 3, 2)], (1, 8, 9)),
}


def _oracle_stages(net, x):
    """(pooling input, argmax) of every MaxPool2D, from the float64 oracle forward."""
    h, out = np.asarray(x, np.float64), []
    params = iter(v.astype(np.float64) for v in net.state_dict().values())
    for layer in net.layers:
        if isinstance(layer, nc.Conv2D):
            h = ref.conv2d_forward(h, next(params), next(params), layer.stride, layer.padding)
        elif isinstance(layer, nc.ReLU):
            h = np.maximum(h, 0.0)
        elif isinstance(layer, nc.Tanh):
            h = np.tanh(h)
        elif isinstance(layer, nc.MaxPool2D):
            pooled, arg = ref.maxpool2d_forward(h, layer.kernel_size, layer.stride, layer.padding)
            out.append((h, arg))
            h = pooled
        else:
            break
    return out


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("name", list(ROUTING_NETS))
def test_routing_matches_the_oracle(rng, name, ties):
    make, shape = ROUTING_NETS[name]
    net = nc.Sequential(make(), seed=0)
    if ties:  # small integers: exact in float32 and float64, and many windows with equal maxima
        net.load_state_dict({k: rng.integers(-2, 3, v.shape) * 0.25 for k, v in net.state_dict().items()})
        x = rng.integers(-2, 3, (5,) + shape).astype(np.float32)
    else:
        x = rng.standard_normal((5,) + shape).astype(np.float32)
    stages = A.routing(net, x)
    oracle = _oracle_stages(net, x)
    assert len(stages) == len(oracle) == sum(isinstance(la, nc.MaxPool2D) for la in net.layers)
    assert any(s.fused for s in stages) == name.startswith("fused")
    for st, (h, arg) in zip(stages, oracle):
        np.testing.assert_array_equal(st.argmax, arg)
        np.testing.assert_allclose(st.feature_maps, h, rtol=1e-5, atol=1e-5)
        counts = np.zeros(h.shape[1:], np.int64)
        for n in range(len(x)):
            won = np.zeros(h.shape[1:], bool)
            for c in range(h.shape[1]):
                for a in arg[n, c].ravel():
                    won[c].flat[a] = True
            np.testing.assert_array_equal(st.winners(n), won)
            counts += won
        np.testing.assert_array_equal(st.counts(), counts)
        assert st.never_won() == pytest.approx((counts == 0).mean())


def _trace_oracle(net, stages, k, n, in_shape):
    """Loops: from every pooled output of stage k, through each layer's windows, to the input."""
    shapes = [tuple(in_shape)]
    for layer in net.layers:
        shapes.append(layer.output_shape(shapes[-1]))
    by_layer = {s.layer: s for s in stages}

    def through_pool(g, st):
        new = np.zeros(st.in_shape, np.int64)
        for c in range(st.in_shape[0]):
            for i, a in enumerate(st.argmax[n, c].ravel()):
                new[c].flat[a] += g[c].flat[i]
        return new

    stage = stages[k]
    g = through_pool(np.ones(stage.argmax.shape[1:], np.int64), stage)
    for j in range(stage.layer - 1, -1, -1):
        layer, ins = net.layers[j], shapes[j]
        if isinstance(layer, nc.MaxPool2D):
            g = through_pool(g, by_layer[j])
        elif isinstance(layer, nc.Conv2D):
            new = np.zeros(ins, np.int64)
            (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
            for co, oy, ox in np.ndindex(*g.shape):
                for ci, ky, kx in np.ndindex(ins[0], kh, kw):
                    iy, ix = oy * sh - ph + ky, ox * sw - pw + kx
                    if 0 <= iy < ins[1] and 0 <= ix < ins[2]:
                        new[ci, iy, ix] += g[co, oy, ox]
            g = new
    return g.sum(0)


@pytest.mark.parametrize("name", list(ROUTING_NETS)[:2])
def test_routing_traced_to_the_input_matches_loops(rng, name):
    make, shape = ROUTING_NETS[name]
    net = nc.Sequential(make(), seed=1)
    x = rng.standard_normal((3,) + shape).astype(np.float32)
    stages = A.routing(net, x)
    for n in (0, 2):
        traces = A.trace_to_input(net, x, n, stages)
        for k, t in enumerate(traces):
            assert t.shape == shape[1:]
            np.testing.assert_array_equal(t, _trace_oracle(net, stages, k, n, shape))


def test_routing_change_counts_moved_winners(rng):
    make, shape = ROUTING_NETS["fused wide 2x2"]
    net = nc.Sequential(make(), seed=0)
    x = rng.standard_normal((4,) + shape).astype(np.float32)
    before = A.routing(net, x)
    net.load_state_dict({k: -v for k, v in net.state_dict().items()})
    after = A.routing(net, x)
    assert A.routing_change(before, before) == [0.0]
    assert A.routing_change(before, after) == [float((before[0].argmax != after[0].argmax).mean())] != [0.0]


@pytest.fixture
def npz(tmp_path):
    return tiny_npz(tmp_path / "tiny.npz", 90)


ARCH = "conv(4,3,padding=same),relu,maxpool(2),conv(8,3,padding=1),relu,maxpool(3,stride=1),dense(16),relu"


def _check_page(out_dir, expect=FIGURES):
    page = open(os.path.join(out_dir, "index.html"), encoding="utf-8").read()
    for key in expect:
        assert f"<h2 id='{key}'>" in page, key
        png = open(os.path.join(out_dir, f"{key}.png"), "rb").read()
        m = re.search(rf"<h2 id='{key}'>.*?src='data:image/png;base64,([^']+)'>"
                      r"<figcaption>([^<]+)</figcaption>", page, re.S)
        assert m and len(m.group(2)) > 20, key  # every figure has a caption
        embedded = base64.b64decode(m.group(1))
        assert embedded == png
        import matplotlib.image

        img = matplotlib.image.imread(io.BytesIO(embedded), format="png")
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100, key
    assert not re.search(r"https?://|<script|<link|src='(?!data:)", page)  # self-contained, no scripts
    return page


@pytest.mark.slow
def test_report_after_training_and_from_the_checkpoint(tmp_path, npz):
    pytest.importorskip("matplotlib")
    out, ck = str(tmp_path / "report"), str(tmp_path / "ck.npz")
    args = ["--quiet", "--data", npz, "--arch", ARCH, "--epochs", "2", "--save", ck]
    assert main(args + ["--report", out]) == 0
    page = _check_page(out)
    assert re.search(r"moved between the first and the last epoch: layer 2 \d+%, layer 5 \d+%", page)
    r = subprocess.run([sys.executable, "-m", "numbacnn", "report", ck, "--data", npz, "--out",
                        str(tmp_path / "again")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "epoch: not recorded" in _check_page(str(tmp_path / "again"))


@pytest.mark.slow
def test_report_on_ctrl_c_with_what_exists(tmp_path, npz, monkeypatch):
    pytest.importorskip("matplotlib")
    orig = nc.Trainer.train_epoch

    def stop_after_first(self, *a, **k):
        stats = orig(self, *a, **k)
        self.stop_signal = signal.SIGINT
        return stats
    monkeypatch.setattr(nc.Trainer, "train_epoch", stop_after_first)
    out = str(tmp_path / "r")
    assert main(["--quiet", "--data", npz, "--arch", ARCH, "--epochs", "5", "--report", out]) == 130
    _check_page(out)


def test_labels_and_names_are_escaped_in_the_page(tmp_path, rng):
    pytest.importorskip("matplotlib")
    from numbacnn.report import write_report

    X = rng.random((60, 36))
    y = np.array(["<script>alert(1)</script>", "a&b"])[np.arange(60) % 2]
    clf = nc.CNNClassifier(architecture="conv(2,3),relu,maxpool(2),dense(8)", max_epochs=1,
                           random_state=0).fit(X, y)
    page = open(write_report(str(tmp_path), clf, X, y, class_names=[str(c) for c in clf.classes_],
                             info={"dataset": "<b>data</b>", "test accuracy": 2 / 3}),
                encoding="utf-8").read()
    assert "<script" not in page and "<b>" not in page
    assert "<td>0.6667</td>" in page and "0.66666" not in page  # numbers as a reader wants them
    assert " 1 times" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a&amp;b" in page
    assert "&lt;b&gt;data&lt;/b&gt;" in page


def test_failures_are_clear_and_never_cost_the_model(tmp_path, npz, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    # no matplotlib: refused before training, naming the extra
    ck = tmp_path / "ck.npz"
    r = run_without("matplotlib", "run", ["--quiet", "--data", npz, "--report", str(tmp_path / "r"),
                                          "--save", str(ck)])
    assert r.returncode == 2 and "pip install 'numbacnn[plot]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not ck.exists()
    # a directory that cannot be written: refused before training
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["--quiet", "--data", npz, "--report", str(blocker / "sub"), "--save", str(ck)]) == 2
    assert "--report: cannot write" in capsys.readouterr().err and not ck.exists()
    # the report fails after training: exit 1, one line, and the checkpoint is there
    import numbacnn.report as R

    def broken(*a, **k):
        raise R.ReportError("disk full")
    monkeypatch.setattr(R, "write_report", broken)
    assert main(["--quiet", "--data", npz, "--arch", ARCH, "--epochs", "1", "--report", str(tmp_path / "r"),
                 "--save", str(ck)]) == 1
    err = capsys.readouterr().err.strip()
    assert "the report failed: disk full; the model is saved in" in err and len(err.splitlines()) == 1
    assert nc.load(str(ck)).n_params > 0
    monkeypatch.undo()
    # no pooling layer: the routing section says so
    net = nc.build_network("conv(2,3),relu,dense(8)", (1, 8, 8), 3, seed=0)
    ds = nc.load_dataset(npz)
    R.write_report(str(tmp_path / "nopool"), net, ds.x_test, ds.y_test)
    page = _check_page(str(tmp_path / "nopool"), FIGURES[1:6])
    assert "This network has no max-pooling layer" in page


def test_estimator_with_scikit_learn_displays(rng):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from sklearn.datasets import load_digits
    from sklearn.metrics import ConfusionMatrixDisplay, confusion_matrix
    from sklearn.model_selection import LearningCurveDisplay

    X, y = load_digits(return_X_y=True)
    X, y = X[:300], y[:300]
    clf = nc.CNNClassifier(architecture="conv(4,3,padding=same),relu,maxpool(2),dense(16)", max_epochs=3,
                           early_stopping=True, n_iter_no_change=5, random_state=0).fit(X, y)
    disp = ConfusionMatrixDisplay.from_estimator(clf, X, y)
    np.testing.assert_array_equal(disp.confusion_matrix, confusion_matrix(y, clf.predict(X)))
    curve = LearningCurveDisplay.from_estimator(clf, X, y, train_sizes=[0.5, 1.0], cv=2)
    assert curve.train_scores.shape == (2, 2) and np.all((0 <= curve.test_scores) & (curve.test_scores <= 1))
    assert len(clf.loss_curve_) == len(clf.validation_scores_) == clf.n_iter_ == 3
    # the figure functions take the estimator and its raw X directly
    from numbacnn.report import plot_confusion, plot_routing_counts

    assert plot_confusion(clf, X[:50], y[:50], [str(c) for c in clf.classes_]).axes
    assert plot_routing_counts(clf, X[:20]).axes


def _tensorboard_events(logdir):
    """Every Event in the logdir's event files (TFRecord: length, crc, payload, crc)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    events = []
    for name in sorted(os.listdir(logdir)):
        data = open(os.path.join(logdir, name), "rb").read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            events.append(Event.FromString(data[pos + 12:pos + 12 + length]))
            pos += 12 + length + 4
    return events


def test_tensorboard_scalars_and_histograms(tmp_path, npz):
    pytest.importorskip("tensorboardX")
    import json

    logdir, metrics = tmp_path / "tb", tmp_path / "m.json"
    assert main(["--quiet", "--data", npz, "--arch", ARCH, "--epochs", "2", "--val-size", "0.2",
                 "--tensorboard", str(logdir), "--metrics-out", str(metrics)]) == 0
    scalars, histograms = {}, {}
    for e in _tensorboard_events(logdir):
        for v in e.summary.value:
            if v.HasField("histo"):
                histograms.setdefault(v.tag, []).append((e.step, v.histo.num))
            else:
                scalars[(v.tag, e.step)] = v.simple_value
    for epoch in json.loads(metrics.read_text())["epochs"]:
        for key, tag in (("train_loss", "loss/train"), ("test_accuracy", "accuracy/test"),
                         ("val_loss", "loss/val")):
            assert scalars[(tag, epoch["epoch"])] == pytest.approx(epoch[key], rel=1e-6)
    net = nc.build_network(ARCH, (1, 8, 8), 3, seed=0)
    assert set(histograms) == set(net.state_dict())
    for name, entries in histograms.items():
        assert entries == [(1, net.state_dict()[name].size), (2, net.state_dict()[name].size)]


def test_tensorboard_without_the_extra_is_refused_before_training(tmp_path, npz):
    r = run_without("tensorboardX", "run", ["--quiet", "--data", npz, "--tensorboard", str(tmp_path)])
    assert r.returncode == 2 and "pip install 'numbacnn[tensorboard]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
