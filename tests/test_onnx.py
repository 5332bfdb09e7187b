"""ONNX export checked by onnx.checker and run by onnxruntime against numbacnn's own forward."""
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, run_without

import numbacnn as nc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ARCHS = [  # (spec, input shape): strides, paddings, same, overlapping and padded pools, avgpool, tanh
    ("conv(4,3,stride=2,padding=1),relu,maxpool(3,stride=1,padding=1),conv(8,3,padding=same),tanh,"
     "avgpool(3,stride=2,padding=1),dense(16),relu,dropout(0.3)", (2, 13, 11)),
    ("mnistcnn", (1, 28, 28)),
    ("lenet5", (1, 28, 28)),
    ("conv(6,5,padding=2),tanh,avgpool(2),conv(16,(3,5),stride=(1,2)),relu,maxpool((3,2),stride=(2,1)),"
     "dense(20)", (3, 16, 15)),
    # groups, depthwise with a multiplier, dilation, per-side padding, the mobile gates
    ("conv(8,3,padding=1,bias=False),bn,relu6,dwconv(3,multiplier=2,stride=2,padding=1),hardswish,"
     "conv(8,1,groups=4),silu,dwconv((3,2),dilation=(2,1),padding=((2,1),(0,1))),sigmoid,"
     "conv(8,3,padding=same,dilation=2),hardsigmoid,dense(12)", (3, 13, 12)),
]


def _run(proto, feeds):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("spec,shape", ARCHS)
def test_onnxruntime_matches_the_network(tmp_path, rng, spec, shape):
    net = nc.build_network(spec, shape, 7, seed=0)
    path = str(tmp_path / "m.onnx")
    nc.export_onnx(net, path)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    names = [i.name for i in model.graph.initializer]  # the parameters' state_dict names, in order
    assert [k for k in names if k in net.grad_dict()] == list(net.grad_dict())
    assert all(k in net.state_dict() or k.startswith("const") for k in names)
    x = rng.standard_normal((5,) + shape).astype(np.float32)
    np.testing.assert_allclose(_run(model, {"input": x}), net.forward(x), rtol=1e-5, atol=1e-5)


def test_the_export_declares_the_oldest_ir_version_its_opset_allows():
    """IR version 8 (what opset 17 needs), not the onnx package's newest: onnxruntime 1.30 refused
    onnx 1.23's IR 14 ("Unsupported model IR version: 14, max supported IR version: 13")."""
    from numbacnn.onnx_export import OPSET, to_onnx

    proto = to_onnx(nc.build_network("lenet5", (1, 28, 28), 10, seed=0))
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", OPSET)]
    assert proto.ir_version == onnx.helper.find_min_ir_version_for(list(proto.opset_import)) == 8


def test_estimator_graph_takes_raw_rows_and_returns_predict_proba(rng):
    from sklearn.datasets import load_digits

    from numbacnn.onnx_export import to_onnx

    X, y = load_digits(return_X_y=True)
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    clf = nc.CNNClassifier(max_epochs=2, random_state=0).fit(X, names[y])
    proto = to_onnx(clf)
    onnx.checker.check_model(proto)
    proba = _run(proto, {"X": X.astype(np.float32)})
    np.testing.assert_allclose(proba, clf.predict_proba(X), rtol=1e-5, atol=1e-5)
    classes = json.loads({p.key: p.value for p in proto.metadata_props}["classes"])
    np.testing.assert_array_equal(np.array(classes)[proba.argmax(1)], clf.predict(X))


def test_export_command_from_a_checkpoint(tmp_path):
    ck, out = str(tmp_path / "ck.npz"), str(tmp_path / "m.onnx")
    net = nc.build_network("conv(4,3),relu,maxpool(2),dense(8)", (1, 8, 8), 3, seed=0)
    nc.save(net, ck)
    r = subprocess.run([sys.executable, "-m", "numbacnn", "export", ck, out], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(_run(onnx.load(out), {"input": x}), net.forward(x), rtol=1e-5, atol=1e-5)
    r = subprocess.run([sys.executable, "-m", "numbacnn", "export", str(tmp_path / "none.npz"), out],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_export_without_the_extra_names_it(tmp_path):
    ck = str(tmp_path / "ck.npz")
    nc.save(nc.build_network("dense(4)", (1, 4, 4), 2, seed=0), ck)
    r = run_without("onnx", "run_export", [ck, str(tmp_path / "m.onnx")])
    assert r.returncode == 2 and "pip install 'numbacnn[onnx]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_network_remembers_its_input_shape_for_export(tmp_path, rng):
    """The README's flow: a network built from layers exports once it has seen a batch; before
    that, input_shape= works and the error names both ways."""
    def layers():
        return nc.Sequential([nc.Conv2D(3, 4, 3), nc.ReLU(), nc.Flatten(), nc.Dense(4 * 6 * 6, 5)], seed=0)

    path = str(tmp_path / "m.onnx")
    fresh = layers()
    with pytest.raises(ValueError, match=r"run it on a batch first.*input_shape=\(C, H, W\)"):
        nc.export_onnx(fresh, path)
    with pytest.raises(ValueError, match="expected input"):  # a shape the layers cannot take
        nc.export_onnx(fresh, path, input_shape=(3, 5, 5))
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    nc.export_onnx(fresh, path, input_shape=(3, 8, 8))
    np.testing.assert_allclose(_run(onnx.load(path), {"input": x}), fresh.forward(x), rtol=1e-5, atol=1e-5)
    seen = layers()
    seen.forward(x, training=True)
    assert seen.input_shape == (3, 8, 8)
    nc.export_onnx(seen, path)
    np.testing.assert_allclose(_run(onnx.load(path), {"input": x}), seen.forward(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eps", [1e-2, 1e-3])
def test_batchnorm_exports_its_own_epsilon(tmp_path, rng, eps):
    """With a small running variance eps matters: an export that kept ONNX's default 1e-5 gave
    outputs that differed by 6.5."""
    net = nc.Sequential([nc.Conv2D(2, 4, 3), nc.BatchNorm2D(4, eps=eps), nc.ReLU(), nc.Flatten(),
                         nc.Dense(4 * 6 * 6, 5), nc.BatchNorm1D(5, eps=eps)], seed=0)
    state = net.state_dict()
    for name in state:
        if name.endswith("running_var"):
            state[name] = rng.uniform(1e-4, 1e-3, state[name].shape).astype(np.float32)
        elif name.endswith("running_mean"):
            state[name] = rng.standard_normal(state[name].shape).astype(np.float32) * 0.01
    net.load_state_dict(state)
    path = str(tmp_path / "bn.onnx")
    nc.export_onnx(net, path, input_shape=(2, 8, 8))
    x = rng.standard_normal((4, 2, 8, 8)).astype(np.float32)
    want = net.forward(x, training=False)
    np.testing.assert_allclose(_run(onnx.load(path), {"input": x}), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())
