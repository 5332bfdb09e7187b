"""Parameters: layers without a bias, frozen parameters, optimizer groups with their own learning-rate
scale and weight decay; each against the float64 oracle's formulas (tests/reference.py)."""
import numpy as np
import pytest
import reference as ref
from conftest import f32

import numbacnn as nc


def _unbiased_net(seed=0):
    return nc.Sequential([nc.Conv2D(2, 3, 3, padding=1, bias=False), nc.BatchNorm2D(3), nc.ReLU(),
                          nc.MaxPool2D(2), nc.Flatten(), nc.Dense(12, 4, bias=False), nc.Tanh(),
                          nc.Dense(4, 3)], seed=seed)


def test_layers_without_bias_have_no_bias_parameter_and_match_the_oracle(rng):
    net = _unbiased_net()
    assert list(net.state_dict())[:2] == ["0.weight", "1.weight"]
    assert "5.bias" not in net.state_dict() and "7.bias" in net.state_dict()
    assert repr(net.layers[0]) == "Conv2D(2, 3, 3, padding=1, bias=False)"
    assert repr(net.layers[5]) == "Dense(12, 4, bias=False)"
    conv = nc.Conv2D(2, 3, 3, stride=2, padding=1, bias=False).initialize(0)
    x = f32(rng.standard_normal((2, 2, 7, 6)))
    w = conv.weight.astype(np.float64)
    want = ref.conv2d_forward(x.astype(np.float64), w, np.zeros(3), (2, 2), (1, 1))
    np.testing.assert_allclose(conv.forward(x, training=True), want, rtol=1e-5, atol=1e-5)
    dy = f32(rng.standard_normal(want.shape))
    dx = conv.backward(dy)
    edx, edw, _ = ref.conv2d_backward(dy.astype(np.float64), x.astype(np.float64), w, (2, 2), (1, 1))
    np.testing.assert_allclose(dx, edx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(conv.dweight, edw, rtol=1e-5, atol=1e-5)
    dense = nc.Dense(5, 4, bias=False).initialize(1)
    xd = f32(rng.standard_normal((3, 5)))
    np.testing.assert_allclose(dense.forward(xd), xd.astype(np.float64) @ dense.weight.T.astype(np.float64),
                               rtol=1e-6, atol=1e-6)


def test_layers_without_bias_in_the_grammar_checkpoints_pytorch_and_onnx(tmp_path, rng):
    net = nc.build_network("conv(4,3,bias=False),bn,relu,dense(6,bias=False),relu", (1, 8, 8), 3, seed=0)
    assert [layer.use_bias for layer in (net.layers[0], net.layers[4], net.layers[6])] == [False, False, True]
    path = str(tmp_path / "nb.npz")
    nc.save(net, path)
    back = nc.load(path)
    x = f32(rng.standard_normal((4, 1, 8, 8)))
    np.testing.assert_array_equal(back.forward(x), net.forward(x))
    torch = pytest.importorskip("torch")
    from numbacnn.bench import torch_twin

    twin = torch_twin(net).eval()
    with torch.no_grad():
        np.testing.assert_allclose(twin(torch.from_numpy(x)).numpy(), net.forward(x), rtol=1e-5, atol=1e-5)
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    nc.export_onnx(net, str(tmp_path / "nb.onnx"))
    model = onnx.load(str(tmp_path / "nb.onnx"))
    onnx.checker.check_model(model)
    names = {i.name for i in model.graph.initializer}
    assert names == {k for k in net.state_dict() if not k.endswith("num_batches_tracked")}
    assert "0.bias" not in names and "4.bias" not in names
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": x})[0], net.forward(x), rtol=1e-5, atol=1e-5)


def _steps(net, opt, rng, n=3):
    """n training steps; returns each step's gradients (state_dict names) before the update."""
    x = f32(rng.standard_normal((6, 2, 4, 4)))
    y = rng.integers(0, 3, 6)
    grads = []
    for _ in range(n):
        _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        net.backward(d)
        grads.append(net.grad_dict())
        opt.step()
    return grads


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_frozen_parameters_stay_and_the_others_follow_the_update_formula(rng, opt_name):
    net = _unbiased_net(seed=3)
    net.layers[0].freeze()          # the convolution's weight (its only parameter)
    net.layers[1].freeze("weight")  # BatchNorm's scale fixed, its shift trains
    assert net.frozen() == ["0.weight", "1.weight"] and not net.layers[0].trainable
    start = net.state_dict()
    kw = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3) if opt_name == "sgd" else \
        dict(lr=0.01, weight_decay=1e-3)
    opt = nc.make_optimizer(opt_name, net, **kw)
    grads = _steps(net, opt, rng)
    end = net.state_dict()
    for name in ("0.weight", "1.weight"):
        np.testing.assert_array_equal(end[name], start[name])
    for name, sl in net.param_slices():
        if name in ("0.weight", "1.weight"):
            for state in opt.state.values():
                assert not np.any(state[sl]), name  # no state for a frozen parameter
            continue
        p = start[name].astype(np.float64)
        s1, s2 = np.zeros_like(p), np.zeros_like(p)
        for t, g in enumerate(grads, start=1):
            if opt_name == "sgd":
                p, s1 = ref.sgd(p, g[name], s1, 0.05, 0.9, 0.0, 1e-3, True, t == 1)
            else:
                p, s1, s2 = ref.adam(p, g[name], s1, s2, 0.01, 0.9, 0.999, 1e-8, 1e-3, t)
        np.testing.assert_allclose(end[name], p, rtol=1e-5, atol=1e-6, err_msg=name)


TRUNK = "conv(6,3,padding=same),bn,relu,maxpool(2),conv(8,3,padding=same),relu,dense(12),relu"


def test_a_frozen_trunk_costs_no_backward_and_the_head_gets_the_same_gradients(rng, monkeypatch):
    """Freezing the first layers (fine-tuning a pretrained trunk): the backward stops at the first
    layer that trains, which skips its input gradient; the head's gradients are the full backward's
    bit for bit and the trunk's are zeros (also after a backward that reached them)."""
    x = f32(rng.random((5, 1, 8, 8)))
    y = np.arange(5) % 3
    net = nc.build_network(TRUNK, (1, 8, 8), 3, seed=2)
    _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    net.backward(d, need_input_grad=False)
    full = net.grad_dict()
    for layer in net.layers[:4]:
        layer.trainable = False
    assert net.backward_start(False) == 4 and net.backward_start(True) == 0
    calls = []
    for i, layer in enumerate(net.layers):
        monkeypatch.setattr(layer, "backward", lambda g, need_dx=True, i=i, f=layer.backward:
                            calls.append((i, need_dx)) or f(g, need_dx))
    net.forward(x, training=True)
    assert net.backward(d, need_input_grad=False) is None
    assert calls == [(9, True), (8, True), (7, True), (6, True), (5, True), (4, False)]  # not the trunk's
    got = net.grad_dict()
    for name, g in full.items():
        layer = int(name.split(".")[0])
        np.testing.assert_array_equal(got[name], g if layer >= 4 else np.zeros_like(g), err_msg=name)
    for layer in net.layers[:4]:  # nothing trains: no backward at all
        layer.trainable = True
    net.layers[7].freeze("bias")
    assert net.backward_start(False) == 0 and net.backward_start(True) == 0
    net.layers[0].freeze()
    assert net.backward_start(False) == 1  # BatchNorm trains: the conv below it runs no backward
    for layer in net.layers:
        layer.trainable = False
    calls.clear()
    assert net.backward(d, need_input_grad=False) is None and calls == []
    assert not np.any(net.grads)


def test_recorded_steps_follow_a_freeze_and_an_unfreeze_as_the_layers_do():
    """A trainer's recorded step (replayed kernel calls) records anew when the frozen set changes:
    the same weights as the layers' own steps, bit for bit, and a trunk unfrozen again trains; so
    does a weight above the first trained layer (the backward's extent is the same: the step's
    calls then differ only in whether that weight is differentiated)."""
    rng = np.random.default_rng(7)
    x = f32(rng.random((12, 1, 8, 8)))
    y = np.arange(12) % 3
    runs = []
    for programs in (True, False):
        net = nc.build_network(TRUNK, (1, 8, 8), 3, seed=4)
        tr = nc.Trainer(net, nc.SGD(net, lr=0.05, momentum=0.9), batch_size=6, seed=0, progress=False,
                        step_programs=programs)
        start = net.state_dict()["0.weight"]
        net.layers[0].freeze()
        tr.fit(x, y, 1)  # recorded with the conv frozen: from the BatchNorm down
        frozen = net.state_dict()["0.weight"]
        np.testing.assert_array_equal(frozen, start)
        net.layers[0].unfreeze()
        tr.fit(x, y, 2)  # (to two epochs in all)
        trained = net.state_dict()["0.weight"]
        assert not np.array_equal(trained, frozen)
        net.layers[0].freeze()
        tr.fit(x, y, 3)
        np.testing.assert_array_equal(net.state_dict()["0.weight"], trained)
        net.layers[0].unfreeze()
        net.layers[4].freeze("weight")  # the second convolution's weight
        before = net.state_dict()
        tr.fit(x, y, 4)
        after = net.state_dict()
        np.testing.assert_array_equal(after["4.weight"], before["4.weight"])
        assert not np.array_equal(after["4.bias"], before["4.bias"])
        net.layers[4].unfreeze()  # the backward's extent is the same, its calls are not
        tr.fit(x, y, 5)
        assert not np.array_equal(net.state_dict()["4.weight"], after["4.weight"])
        runs.append(net.state_dict())
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k], err_msg=k)


def test_groups_give_their_parameters_their_own_learning_rate_and_weight_decay(rng):
    net = _unbiased_net(seed=4)
    groups = [{"params": ["1.bias"], "lr_scale": 64.0, "weight_decay": 0.5},
              {"params": ["*.weight"], "weight_decay": 0.0}]
    opt = nc.SGD(net, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1, groups=groups)
    # 0.weight (54) and 1.weight (3) share group 1; 1.bias (3); 5.weight (48) and 7.weight (12);
    # 7.bias (3) in no group
    assert [(p.start, p.stop, s, wd) for p, s, wd in opt.parts()] == [
        (0, 57, 1.0, 0.0), (57, 60, 64.0, 0.5), (60, 120, 1.0, 0.0), (120, 123, 1.0, None)]
    start = net.state_dict()
    grads = _steps(net, opt, rng)
    end = net.state_dict()
    settings = {"1.bias": (0.64, 0.5), "7.bias": (0.01, 0.1)}  # weights: (0.01, 0.0)
    for name, _ in net.param_slices():
        lr, wd = settings.get(name, (0.01, 0.0))
        p, buf = start[name].astype(np.float64), np.zeros(start[name].shape)
        for t, g in enumerate(grads, start=1):
            p, buf = ref.sgd(p, g[name], buf, lr, 0.9, 0.0, wd, True, t == 1)
        np.testing.assert_allclose(end[name], p, rtol=1e-5, atol=1e-6, err_msg=name)
    assert opt.hyperparameters()["groups"][0] == groups[0]


def test_frozen_parameters_and_groups_survive_a_checkpoint(tmp_path, rng):
    net = _unbiased_net(seed=5)
    net.layers[1].freeze("weight")
    opt = nc.SGD(net, lr=0.01, momentum=0.9, groups=[{"params": ["*.bias"], "lr_scale": 8.0}])
    _steps(net, opt, rng, 1)
    path = str(tmp_path / "f.npz")
    nc.save(net, path, optimizer=opt)
    ck = nc.load_checkpoint(path)
    assert ck.net.frozen() == ["1.weight"]
    assert ck.meta["optimizer"]["hyperparameters"]["groups"] == [{"params": ["*.bias"], "lr_scale": 8.0}]


@pytest.mark.parametrize("call,message", [
    (lambda net: net.layers[1].freeze("gamma"), "cannot freeze 'gamma': the layer has weight, bias"),
    (lambda net: net.layers[2].freeze("weight"), "cannot freeze 'weight': the layer has no parameters"),
    (lambda net: nc.SGD(net, lr=0.1, groups=[{"params": ["9.*"]}]), "group 0: 9.* matches no parameter"),
    (lambda net: nc.SGD(net, lr=0.1, groups=[{"params": ["*"], "lr": 3}]), "group 0: unknown key 'lr'"),
    (lambda net: nc.SGD(net, lr=0.1, groups=[{"params": ["*"], "lr_scale": 0}]), "lr_scale must lie in"),
    (lambda net: nc.SGD(net, lr=0.1, groups={"params": ["*"]}), "groups must be a list of dicts"),
    (lambda net: nc.Conv2D(1, 2, 3, bias="no"), "bias must be True or False"),
])
def test_bad_freezes_and_groups_are_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace("(", r"\(")):
        call(_unbiased_net())


def test_lookahead_follows_its_formula_over_the_wrapped_updates(rng):
    net = _unbiased_net(seed=6)
    opt = nc.SGD(net, lr=0.05, momentum=0.9, nesterov=True, lookahead={"k": 2, "alpha": 0.3})
    start = net.state_dict()
    grads = _steps(net, opt, rng, 4)
    end = net.state_dict()
    for name, _ in net.param_slices():
        fast = slow = start[name].astype(np.float64)
        buf = np.zeros_like(fast)
        for t, g in enumerate(grads, start=1):
            fast, buf = ref.sgd(fast, g[name], buf, 0.05, 0.9, 0.0, 0.0, True, t == 1)
            if t % 2 == 0:
                slow = slow + 0.3 * (fast - slow)
                fast = slow
        np.testing.assert_allclose(end[name], fast, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(opt.state["slow"], net.params)  # just synchronised


def test_lookahead_over_buffers_and_the_final_sync(rng):
    net = _unbiased_net(seed=7)
    opt = nc.Adam(net, lr=0.01, lookahead={"k": 3, "alpha": 0.5, "buffers": True})
    rm0 = net.state_dict()["1.running_mean"].astype(np.float64)
    _steps(net, opt, rng, 2)
    fast_rm = net.state_dict()["1.running_mean"].astype(np.float64)
    _steps(net, opt, rng, 1)  # step 3: the running statistics synchronise as well
    rm = net.state_dict()["1.running_mean"]
    assert np.abs(rm - rm0).max() > 0
    assert opt.state["slow_buffers"][:3].tolist() == rm.tolist()
    # the third step's statistics moved on from fast_rm; the slow ones went half way from rm0
    assert not np.allclose(rm, fast_rm)
    slow = np.array(opt.state["slow"])
    _steps(net, opt, rng, 1)
    assert not np.array_equal(net.params, slow)
    opt.sync(0.0)  # as at the end of training: the network takes the slow weights
    np.testing.assert_array_equal(net.params, slow)


def test_lookahead_resumes_bit_for_bit_from_a_checkpoint(tmp_path):
    rng = np.random.default_rng(8)
    net = _unbiased_net(seed=8)
    opt = nc.SGD(net, lr=0.05, momentum=0.9, lookahead={"k": 3, "alpha": 0.5, "buffers": True})
    _steps(net, opt, rng, 2)
    path = str(tmp_path / "la.npz")
    nc.save(net, path, optimizer=opt)
    ck = nc.load_checkpoint(path)
    opt2 = nc.make_optimizer(ck.optimizer["name"], ck.net, **ck.optimizer["hyperparameters"])
    opt2.load_state_dict({"step": ck.optimizer["step"], **ck.optimizer_state})
    for n, o in ((net, opt), (ck.net, opt2)):
        _steps(n, o, np.random.default_rng(9), 3)
    np.testing.assert_array_equal(ck.net.params, net.params)
    np.testing.assert_array_equal(opt2.state["slow"], opt.state["slow"])


@pytest.mark.parametrize("lookahead,message", [
    ({"k": 0}, "lookahead k must be a positive integer"),
    ({"alpha": 1.5}, "lookahead alpha must lie in"),
    ({"every": 5}, "lookahead must be a dict with k, alpha and buffers"),
    ({"buffers": "yes"}, "lookahead buffers must be True or False"),
])
def test_bad_lookahead_settings_are_one_clear_error(lookahead, message):
    with pytest.raises(ValueError, match=message):
        nc.SGD(_unbiased_net(), lr=0.1, lookahead=lookahead)


def test_scale_multiplies_values_and_gradients_and_exports(tmp_path, rng):
    net = nc.build_network("conv(3,3),relu,dense(5,bias=False),scale(0.125)", (1, 6, 6), 3, seed=0)
    assert [type(layer).__name__ for layer in net.layers][-3:] == ["Dense", "Scale", "Dense"]
    layer = nc.Scale(1 / 9)
    x = f32(rng.standard_normal((4, 7)) * 3)
    np.testing.assert_allclose(layer.forward(x, training=True), x.astype(np.float64) / 9, rtol=1e-6)
    dy = f32(rng.standard_normal((4, 7)))
    np.testing.assert_allclose(layer.backward(dy), dy.astype(np.float64) / 9, rtol=1e-6)
    big = f32(rng.standard_normal(3 * 8192 + 5))  # the parallel blocks
    np.testing.assert_array_equal(nc.Scale(-2.0).forward(big), big * np.float32(-2.0))
    path = str(tmp_path / "s.npz")
    nc.save(net, path)
    xi = f32(rng.standard_normal((2, 1, 6, 6)))
    np.testing.assert_array_equal(nc.load(path).forward(xi), net.forward(xi))
    with pytest.raises(ValueError, match="Scale: factor must be a finite number"):
        nc.Scale(float("nan"))
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    nc.export_onnx(net, str(tmp_path / "s.onnx"))
    session = ort.InferenceSession(onnx.load(str(tmp_path / "s.onnx")).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": xi})[0], net.forward(xi), rtol=1e-5, atol=1e-6)
