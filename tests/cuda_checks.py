"""CUDA kernels against the float64 oracle (tests/reference.py) on tiny shapes, and training on both
devices.

Not collected directly (no test_ prefix): test_cuda.py runs this file in a subprocess with
NUMBA_ENABLE_CUDASIM=1 when there is no GPU. On a GPU machine: ``python -m pytest tests/cuda_checks.py``.
"""
import numpy as np
import pytest
import reference as ref
from numba import cuda

import numbacnn as nc
from numbacnn.backend.cuda_conv import GatherPlan, TiledPlan
from numbacnn.kernels import cpu as KC_cpu
from numbacnn.kernels import cuda as KC
from numbacnn.kernels.cuda.conv2d_tiled import dw_chunks
from numbacnn.layers.base import Fusion

pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="no CUDA GPU or simulator")


def on_gpu(make):
    """The layer, seeded, with its parameters and gradients on the GPU; and its host parameters."""
    layer = make()
    host_params = {}
    if layer.param_shapes():
        layer.initialize(np.random.default_rng(0))
        host_params = {k: np.array(getattr(layer, k)) for k in layer.param_names}
    layer.device = "cuda"
    if layer.param_shapes():
        layer.bind({k: cuda.to_device(v) for k, v in host_params.items()},
                   {k: cuda.to_device(np.zeros_like(v)) for k, v in host_params.items()})
    return layer, host_params


def host(a):
    return a if isinstance(a, np.ndarray) else a.copy_to_host()


def oracle(layer, x, dy, p):
    """(y, dx, {name: gradient}) in float64 from tests/reference.py."""
    if isinstance(layer, nc.Conv2D) and not layer.geometry.plain:
        b = p.get("bias", np.zeros(layer.out_channels))
        geometry = (layer.stride, layer.pads, layer.groups, layer.dilation)
        y = ref.conv2d_grouped_forward(x, p["weight"], b, *geometry)
        dx, dw, db = ref.conv2d_grouped_backward(dy, x, p["weight"], *geometry)
        return y, dx, {"weight": dw, "bias": db} if "bias" in p else {"weight": dw}
    if isinstance(layer, nc.Conv2D):
        b = p.get("bias", np.zeros(layer.out_channels))
        y = ref.conv2d_forward(x, p["weight"], b, layer.stride, layer.padding)
        dx, dw, db = ref.conv2d_backward(dy, x, p["weight"], layer.stride, layer.padding)
        return y, dx, {"weight": dw, "bias": db} if "bias" in p else {"weight": dw}
    if isinstance(layer, nc.Dense):
        dx, dw, db = ref.dense_backward(dy, x, p["weight"])
        y = ref.dense_forward(x, p["weight"], p.get("bias", np.zeros(layer.out_features)))
        return y, dx, {"weight": dw, "bias": db} if "bias" in p else {"weight": dw}
    geometry = (layer.kernel_size, layer.stride, layer.padding) if hasattr(layer, "kernel_size") else ()
    if isinstance(layer, nc.MaxPool2D):
        return ref.maxpool2d_forward(x, *geometry)[0], ref.maxpool2d_backward(dy, x, *geometry), {}
    if isinstance(layer, nc.AvgPool2D):
        return ref.avgpool2d_forward(x, *geometry), ref.avgpool2d_backward(dy, x, *geometry), {}
    x64 = x.astype(np.float64)
    if isinstance(layer, nc.Normalize):
        std = host(layer.std).astype(np.float64).reshape(1, -1, 1, 1)
        return ref.normalize(x64, host(layer.mean), host(layer.std)), dy / std, {}
    if isinstance(layer, nc.ReLU):
        return np.maximum(x64, 0), dy * (x64 > 0), {}
    if isinstance(layer, nc.GELU):
        return ref.gelu(x64, layer.approximate), dy * ref.gelu_grad(x64, layer.approximate), {}
    if isinstance(layer, nc.Scale):
        return layer.factor * x64, layer.factor * dy, {}
    gates = {nc.ReLU6: "relu6", nc.Sigmoid: "sigmoid", nc.SiLU: "silu", nc.HardSigmoid: "hardsigmoid",
             nc.HardSwish: "hardswish"}
    if type(layer) in gates:
        kind = gates[type(layer)]
        return ref.gate(x64, kind), dy * ref.gate_grad(x64, kind), {}
    return np.tanh(x64), dy * (1 - np.tanh(x64) ** 2), {}


LAYER_CASES = [
    (lambda: nc.Conv2D(2, 3, 3), (2, 2, 5, 6)),
    (lambda: nc.Conv2D(2, 3, 3, stride=2, padding=1), (2, 2, 5, 5)),
    (lambda: nc.Conv2D(1, 2, 3, padding="same"), (1, 1, 4, 5)),
    (lambda: nc.Conv2D(2, 2, (1, 3), stride=(1, 2), padding=(0, 1)), (1, 2, 1, 7)),
    (lambda: nc.MaxPool2D(2), (2, 2, 5, 5)),
    (lambda: nc.MaxPool2D(3, stride=2), (1, 2, 7, 7)),  # overlapping windows
    (lambda: nc.MaxPool2D(3, stride=1, padding=1), (1, 2, 4, 5)),
    (lambda: nc.AvgPool2D(3, stride=2, padding=1), (1, 2, 5, 5)),
    (lambda: nc.Dense(7, 4), (3, 7)),
    (lambda: nc.Dense(50, 33), (37, 50)),  # several 32 x 32 tiles, a reduction of 4 slices
    (lambda: nc.ReLU(), (2, 3, 4)),
    (lambda: nc.Tanh(), (2, 3, 4)),
    (lambda: nc.Normalize([0.1, 0.5, -0.2], [0.3, 2.0, 1.5]), (2, 3, 4, 5)),
    (lambda: nc.Conv2D(2, 3, 3, padding=1, bias=False), (2, 2, 5, 4)),
    (lambda: nc.Dense(7, 4, bias=False), (3, 7)),
    (lambda: nc.GELU(), (2, 3, 4)),
    (lambda: nc.GELU("tanh"), (2, 3, 4)),
    (lambda: nc.Scale(-0.25), (2, 3, 4)),
    (lambda: nc.Conv2D(4, 6, 3, padding=1, groups=2), (2, 4, 5, 4)),
    (lambda: nc.DepthwiseConv2D(3, 3, multiplier=2, stride=2, padding=1), (2, 3, 5, 5)),
    (lambda: nc.Conv2D(2, 2, (3, 2), dilation=(2, 1), padding=((2, 1), (0, 1))), (1, 2, 6, 5)),
    (lambda: nc.ReLU6(), (2, 3, 4)),
    (lambda: nc.Sigmoid(), (2, 3, 4)),
    (lambda: nc.SiLU(), (2, 3, 4)),
    (lambda: nc.HardSigmoid(), (2, 3, 4)),
    (lambda: nc.HardSwish(), (2, 3, 4)),
]


@pytest.mark.parametrize("make,shape,plan", [
    (make, shape, plan) for make, shape in LAYER_CASES
    for plan in (("tiled", "gather") if isinstance(make(), nc.Conv2D) and make().geometry.plain
                 else ("grouped",) if isinstance(make(), nc.Conv2D) else ("tiled",))])
@pytest.mark.parametrize("ties", [False, True])
def test_layer_matches_oracle(make, shape, ties, plan):
    """Forward, argmax (ties to the first maximum), input and parameter gradients against the
    float64 oracle; tolerances as for the CPU kernels (float32 results). Convolutions under both
    CUDA plans (the default "tiled" and the reference "gather")."""
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, shape).astype(np.float32) if ties else \
        rng.standard_normal(shape).astype(np.float32)
    layer, p = on_gpu(make)
    if isinstance(layer, nc.Conv2D) and plan != "grouped":
        layer._plan = (GatherPlan if plan == "gather" else TiledPlan)(layer.geometry)
    if isinstance(layer, nc.Conv2D):
        assert layer.strategy == plan
    y = host(layer.forward(cuda.to_device(x), training=True))
    dy = rng.standard_normal(y.shape).astype(np.float32)
    ey, edx, egrads = oracle(layer, x, dy, p)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-5)
    if isinstance(layer, nc.MaxPool2D):
        np.testing.assert_array_equal(host(layer._buffers["argmax"]),
                                      ref.maxpool2d_forward(x, layer.kernel_size, layer.stride,
                                                            layer.padding)[1])
    dx = host(layer.backward(cuda.to_device(dy)))
    np.testing.assert_allclose(dx, edx, rtol=1e-5, atol=1e-5)
    for k, g in egrads.items():
        np.testing.assert_allclose(host(getattr(layer, "d" + k)), g, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make,shape,plan", [
    (lambda: nc.Conv2D(2, 3, 3, padding=1), (2, 2, 5, 4), "tiled"),
    (lambda: nc.Conv2D(2, 3, 3, stride=2), (2, 2, 5, 5), "gather"),
    (lambda: nc.Dense(50, 33), (37, 50), "")])
def test_a_frozen_weight_gets_zeros_and_the_other_gradients_match_oracle(make, shape, plan):
    """A frozen weight's gradient is not computed (zeros, where the last backward left values);
    its bias's and the input's gradients as the float64 oracle's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    layer, p = on_gpu(make)
    if plan:
        layer._plan = (GatherPlan if plan == "gather" else TiledPlan)(layer.geometry)
    y = layer.forward(cuda.to_device(x), training=True)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    layer.backward(cuda.to_device(dy))
    assert np.any(host(layer.dweight))
    layer.freeze("weight")
    layer.forward(cuda.to_device(x), training=True)
    dx = host(layer.backward(cuda.to_device(dy)))
    _, edx, egrads = oracle(layer, x, dy, p)
    np.testing.assert_array_equal(host(layer.dweight), 0)
    np.testing.assert_allclose(dx, edx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(layer.dbias), egrads["bias"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make,shape,chunks,tiles", [
    # forward 32 x 32 (2 x 2 tiles, 5 slices), dx 32 x 128 (2 tiles), dw 32 x 32 (2 x 3 tiles)
    (lambda: nc.Conv2D(8, 37, 3, stride=2, padding=1), (2, 8, 9, 11), 1, ((32, 32), (32, 128), (32, 32))),
    (lambda: nc.Conv2D(2, 3, 3, padding=1), (1, 2, 16, 20), 2,  # dw's reduction in 2 chunks
     ((32, 128), (32, 128), (32, 32))),
    (lambda: nc.Conv2D(1, 4, 5, stride=(2, 1), padding=(1, 2)), (1, 1, 9, 9), 1,
     ((32, 32), (32, 32), (32, 32))),
    (lambda: nc.Conv2D(1, 65, 1), (1, 1, 9, 9), 1,  # forward 64 x 64, 2 x 2 tiles
     ((64, 64), (32, 32), (32, 32))),
    (lambda: nc.Conv2D(64, 64, 1), (1, 64, 2, 3), 1, ((32, 32), (32, 32), (64, 64))),  # dw 1 x 2
    (lambda: nc.Conv2D(65, 2, 1), (1, 65, 9, 8), 1, ((32, 32), (64, 64), (32, 32))),  # dx 2 x 2
    (lambda: nc.Conv2D(16, 4, 3, padding=1), (1, 16, 5, 5), 1, ((32, 32), (32, 32), (32, 128))),
])
def test_tiled_convolution_across_tiles_and_chunks(make, shape, chunks, tiles):
    """The tiled plan on shapes that span several tiles (of each tile shape), reduction slices and
    weight-gradient chunks (partial sums added in chunk order, the same bits on a second run), with
    a fused ReLU, against the float64 oracle."""
    from numbacnn.kernels.cuda.conv2d_tiled import tile

    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    layer, p = on_gpu(make)
    layer.fusion = Fusion(relu=True)
    assert layer.strategy == "tiled"
    y = host(layer.forward(cuda.to_device(x), training=True))
    assert dw_chunks(x.shape, p["weight"].shape, y.shape)[0] == chunks
    N, Co, Ci, K1 = x.shape[0], y.shape[1], x.shape[1], p["weight"][0].size + 1
    assert (tile(Co, N * y.shape[2] * y.shape[3]), tile(Ci, N * x.shape[2] * x.shape[3]),
            tile(Co, K1)) == tiles
    ey = np.maximum(ref.conv2d_forward(x, p["weight"], p["bias"], layer.stride, layer.padding), 0)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = host(layer.backward(cuda.to_device(dy)))
    edx, edw, edb = ref.conv2d_backward(dy * (ey > 0), x, p["weight"], layer.stride, layer.padding)
    np.testing.assert_allclose(dx, edx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(layer.dweight), edw, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(host(layer.dbias), edb, rtol=1e-5, atol=2e-5)
    if chunks > 1:  # (the simulator runs each block's 256 threads as Python threads: once is enough
        # where nothing is added in chunks; test_training_on_the_device_repeats_bit_for_bit repeats more)
        for a, b in ((y, layer.forward(cuda.to_device(x), training=True)),
                     (dx, layer.backward(cuda.to_device(dy)))):
            np.testing.assert_array_equal(host(b), a)


def test_softmax_cross_entropy_and_dropout_kernels():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.integers(0, 4, 5)
    loss, d = nc.softmax_cross_entropy(logits, y)
    dd, ll = cuda.device_array((5, 4), np.float32), cuda.device_array(5, np.float64)
    KC.softmax_cross_entropy(dd, ll, cuda.to_device(logits), cuda.to_device(y), 0.0)
    assert ll.copy_to_host().mean() == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(dd.copy_to_host(), d, rtol=1e-5, atol=1e-7)
    from numbacnn.kernels import cpu as K

    x = rng.standard_normal(23).astype(np.float32)
    for offset, threshold in ((0, 2**23), (6, 5033165), (2**33 + 1, 0)):  # p = 0.5, 0.3, inference
        state = np.array([0x0123456789ABCDEF, 2**32 + 5, offset, 0], np.uint64)
        y, mask = np.empty_like(x), np.empty_like(x)
        K.dropout_forward(y, mask, x, state.copy(), threshold, np.float32(1.7))
        dy, dmask, dstate = (cuda.device_array(23, np.float32), cuda.device_array(23, np.float32),
                             cuda.to_device(state))
        KC.dropout_forward(dy, dmask, cuda.to_device(x), dstate, threshold, 1.7)
        np.testing.assert_array_equal(dmask.copy_to_host(), mask)  # the same masks as the CPU
        np.testing.assert_array_equal(dy.copy_to_host(), y)
        KC.dropout_advance(dstate)
        assert int(dstate.copy_to_host()[1]) == 2**32 + 6
        dx = cuda.device_array(23, np.float32)
        KC.dropout_backward(dx, cuda.to_device(x), dmask)
        np.testing.assert_array_equal(dx.copy_to_host(), x * mask)


def test_dropout_state_stays_on_the_device_and_moves_with_the_network():
    net = nc.build_network("dense(6),dropout(0.5),dense(3)", (5,), 3, seed=4).to("cuda")
    drop = net.layers[1]
    assert net.backend.is_array(drop._state)  # drawn on the device: no mask crosses per step
    x = np.ones((4, 5), np.float32)
    for _ in range(2):
        net.forward(x, training=True)
    seed, draws = drop.generator_state()
    assert draws == 2
    net.to("cpu")
    assert drop.generator_state() == (seed, 2) and isinstance(drop._state, np.ndarray)


def test_groups_frozen_parameters_and_lookahead_match_across_devices():
    """Optimizer groups, frozen parameters (a frozen first layer: the backward stops above it) and
    Lookahead over parameters and BatchNorm statistics (the lookahead_sync kernel) give the CPU's
    weights on the device."""
    rng = np.random.default_rng(0)
    x = rng.random((6, 9)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    weights = []
    for device in ("cpu", "cuda"):
        net = nc.build_network("dense(5,bias=False),bn,gelu,dense(4),scale(0.5)", (9,), 3, seed=0).to(device)
        net.layers[0].freeze()
        net.layers[1].freeze("weight")
        assert net.backward_start(False) == 1
        optim = nc.SGD(net, lr=0.05, momentum=0.9, nesterov=True,
                       groups=[{"params": ["*.bias"], "lr_scale": 4.0, "weight_decay": 0.01}],
                       lookahead={"k": 2, "alpha": 0.5, "buffers": True})
        for _ in range(4):
            loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
            net.backward(d)
            optim.step()
        weights.append(net.state_dict())
        assert np.isfinite(loss)
    for k in weights[0]:
        np.testing.assert_allclose(weights[1][k], weights[0][k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("opt", ["sgd", "rmsprop", "adam", "adamw"])
def test_training_steps_match_across_devices(opt):
    """A few steps (fused conv+relu, pools, dropout, dense) on both devices give the same weights;
    the optimizers other than SGD on a network without convolutions (the simulator runs each of a
    convolution's 256-thread blocks thread by thread)."""
    rng = np.random.default_rng(0)
    x = rng.random((6, 1, 6, 6)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    spec = ("conv(2,3,padding=same),relu,maxpool(2),conv(3,2),tanh,dropout(0.2),dense(5),relu"
            if opt == "sgd" else "maxpool(2),tanh,dropout(0.2),dense(5),relu")
    weights = []
    for device in ("cpu", "cuda"):
        net = nc.build_network(spec, (1, 6, 6), 3, seed=0).to(device)
        kwargs = {"lr": 0.05, "momentum": 0.9} if opt == "sgd" else {"lr": 0.01}
        optim = nc.make_optimizer(opt, net, **kwargs)
        for _ in range(3):
            loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
            net.backward(d)
            optim.step()
        weights.append(net.state_dict())
        assert np.isfinite(loss)
    for k in weights[0]:
        np.testing.assert_allclose(weights[1][k], weights[0][k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_estimator_on_cuda():
    rng = np.random.default_rng(0)
    X = rng.random((16, 16)).astype(np.float32)
    yl = (X[:, 0] > 0.5).astype(int)
    clf = nc.CNNClassifier(architecture="conv(2,3,padding=same),relu,dense(4),relu", device="cuda",
                           max_epochs=1, batch_size=8, random_state=0).fit(X, yl)
    assert clf.net_.device == "cuda" and clf.predict(X).shape == (16,)


def test_step_statistics_and_softmax_kernels_match_the_cpu():
    """step_stats (mean loss in order, first largest logit on ties) and softmax as on the CPU."""
    from numbacnn.kernels import cpu as K

    rng = np.random.default_rng(2)
    logits = rng.integers(-1, 2, (7, 3)).astype(np.float32)  # ties between classes
    y = rng.integers(0, 3, 7)
    losses = rng.random(7)
    want = np.empty(2)
    K.step_stats(want, losses, logits, y)
    got = cuda.device_array(2, np.float64)
    KC.step_stats(got, cuda.to_device(losses), cuda.to_device(logits), cuda.to_device(y))
    np.testing.assert_allclose(got.copy_to_host(), want, rtol=1e-12)
    p = np.empty_like(logits)
    K.softmax(p, logits)
    out = cuda.device_array((7, 3), np.float32)
    KC.softmax(out, cuda.to_device(logits))
    np.testing.assert_allclose(out.copy_to_host(), p, rtol=1e-5, atol=1e-7)


def test_trainer_steps_on_the_device_match_the_cpu():
    """Trainer.fit's step on CUDA (forward, loss and backward on the device) trains as on the CPU."""
    rng = np.random.default_rng(3)
    x = rng.random((6, 1, 6, 6)).astype(np.float32)  # a batch of 4 and a last one of 2, each epoch
    y = rng.integers(0, 3, 6)
    spec = "conv(2,3,padding=same),relu,maxpool(2),dense(5),relu"
    out = []
    for device in ("cpu", "cuda"):
        net = nc.build_network(spec, (1, 6, 6), 3, seed=0).to(device)
        tr = nc.Trainer(net, nc.SGD(net, lr=0.1, momentum=0.9), batch_size=4, progress=False)
        hist = tr.fit(x, y, 2)
        out.append((net.state_dict(), [h["train_loss"] for h in hist], [h["train_accuracy"] for h in hist]))
    (w_cpu, l_cpu, a_cpu), (w_gpu, l_gpu, a_gpu) = out
    np.testing.assert_allclose(l_gpu, l_cpu, rtol=1e-5)
    assert a_gpu == a_cpu
    for k in w_cpu:
        np.testing.assert_allclose(w_gpu[k], w_cpu[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_modern_layers_and_recipe_train_the_same_on_both_devices():
    """BatchNorm2D/1D (training and evaluation, running statistics), residual blocks with both
    shortcut kinds, global pooling, label smoothing, one-cycle (SGD momentum cycling) and shifts: a
    Trainer epoch (a batch of 4, a last one of 2) on both devices gives the same weights and
    statistics. (SGD: the conv biases before BatchNorm have rounding noise for a gradient, which
    Adam would blow up to +-lr steps.)"""
    rng = np.random.default_rng(0)
    x = rng.random((6, 1, 5, 5)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    spec = ("conv(2,3,padding=same),bn,relu,res(conv(2,3,padding=same),bn,relu),"
            "res(conv(3,3,stride=2,padding=1),bn),relu,gap,dense(4),bn,tanh")
    states, outs = [], []
    for device in ("cpu", "cuda"):
        net = nc.build_network(spec, (1, 5, 5), 3, seed=0).to(device)
        opt = nc.SGD(net, lr=0.05, momentum=0.9, weight_decay=1e-3)
        tr = nc.Trainer(net, opt, batch_size=4, progress=False, augment="shift:1,flip",
                        lr_schedule="onecycle", label_smoothing=0.1)
        tr.fit(x, y, 1)
        states.append(net.state_dict())
        outs.append(net.forward(x))
    for k in states[0]:
        np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-4, atol=1e-5, err_msg=k)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-5)


def test_series_layers_and_regression_train_the_same_on_both_devices():
    """1-D convolutions (same, causal with dilation: the grouped plan, strided), BatchNorm over
    (N, C, L), the 1-D pools, a concatenation of branches (the copy kernel) and global max pooling,
    trained on a regression loss (MSE, then Huber): a Trainer epoch on both devices gives the same
    weights and statistics, and the regression kernels the same losses."""
    rng = np.random.default_rng(0)
    x = rng.random((6, 2, 12)).astype(np.float32)
    y = rng.standard_normal((6, 2)).astype(np.float32)
    spec = ("conv1d(3,4,padding=same),bn,relu,cat(conv1d(2,3,padding=causal,dilation=2)|avgpool1d(3,stride=1,"
            "padding=1)),maxpool1d(2),conv1d(2,3,stride=2,padding=1),relu,gmp")
    for loss in ("mse", "huber"):
        states = []
        for device in ("cpu", "cuda"):
            net = nc.build_network(spec, (2, 12), 2, seed=0, regression=True).to(device)
            tr = nc.Trainer(net, nc.SGD(net, lr=0.05, momentum=0.9), batch_size=4, progress=False,
                            loss=loss, huber_delta=0.5)
            tr.fit(x, y, 1)
            states.append(net.state_dict())
        for k in states[0]:
            np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{loss} {k}")
    out = rng.standard_normal((5, 3)).astype(np.float32)
    t = rng.standard_normal((5, 3)).astype(np.float32)
    for delta in (0.0, 0.5):
        d_cpu, l_cpu = np.empty((5, 3), np.float32), np.empty(5)
        KC_cpu.regression_loss(d_cpu, l_cpu, out, t, delta)
        dd, ll = cuda.device_array((5, 3), np.float32), cuda.device_array(5, np.float64)
        KC.regression_loss(dd, ll, cuda.to_device(out), cuda.to_device(t), delta)
        np.testing.assert_allclose(host(dd), d_cpu, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(host(ll), l_cpu, rtol=1e-12)


def test_batchnorm_fold_kernel_matches_the_oracle():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    b, gamma, beta, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(4))
    var = rng.random(4).astype(np.float32) + np.float32(0.1)
    wf, bf = cuda.device_array_like(w), cuda.device_array_like(b)
    KC.batchnorm_fold(wf, bf, *(cuda.to_device(a) for a in (w, b, gamma, beta, mean, var)), 1e-5,
                      *(np.zeros(0, np.int32),) * 2)
    ew, eb = ref.batchnorm_fold(w, b, gamma, beta, mean, var, 1e-5)
    np.testing.assert_allclose(wf.copy_to_host(), ew, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bf.copy_to_host(), eb, rtol=1e-6, atol=1e-6)


def test_training_on_the_device_repeats_bit_for_bit():
    """Two runs of the same training on the GPU (tiled convolutions with chunked weight gradients,
    BatchNorm, dense GEMMs, block reductions) end with the same bits."""
    rng = np.random.default_rng(5)
    x = rng.random((4, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, 4)
    spec = "conv(3,3,padding=same),bn,relu,conv(4,3,stride=2),relu,dense(5),relu"
    states = []
    for _ in range(2):
        net = nc.build_network(spec, (1, 8, 8), 3, seed=1).to("cuda")
        nc.Trainer(net, nc.Adam(net, lr=0.01), batch_size=4, progress=False).fit(x, y, 1)
        states.append(net.state_dict())
    for k in states[0]:
        np.testing.assert_array_equal(states[1][k], states[0][k], err_msg=k)


def _graphs_expected():
    """On a GPU every step and prediction program captures a CUDA graph; the simulator has none."""
    from numba import config

    return not config.ENABLE_CUDASIM


# graph replays against launches one by one: the same code path under the simulator (no graphs)
gpu_only = pytest.mark.skipif(not _graphs_expected(), reason="CUDA graphs need a GPU")


@gpu_only
def test_graph_steps_equal_steps_launched_one_by_one():
    """Step programs replayed as CUDA graphs end with the bits of the same programs launched kernel
    by kernel (graph False): batches of 4 and 2 alternating, so two graphs whose layers share
    workspaces; BatchNorm, dropout, label smoothing, an optimizer step between steps."""
    import warnings

    from numbacnn.runtime.program import StepProgram

    rng = np.random.default_rng(6)
    x = rng.random((10, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, 10)
    spec = "conv(3,3,padding=same),bn,relu,maxpool(2),conv(4,3),relu,dropout(0.3),dense(5),relu"
    runs = []
    for graphs in (False, True):
        net = nc.build_network(spec, (1, 8, 8), 3, seed=2).to("cuda")
        opt = nc.SGD(net, lr=0.05, momentum=0.9)
        programs = {n: StepProgram(net, n, (1, 8, 8), label_smoothing=0.1) for n in (4, 2)}
        if not graphs:
            for prog in programs.values():
                prog.device.graph = False  # launch by launch
        stats = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a refused capture warns: fail on it
            for step in range(8):
                n = 4 if step % 3 else 2
                idx = np.arange(step, step + n, dtype=np.int64) % 10
                stats.append(programs[n].step(x, y, idx))
                opt.step()
        runs.append((net.state_dict(), stats))
        if graphs:
            assert all(bool(p.device.graph) == _graphs_expected() for p in programs.values())
    assert runs[1][1] == runs[0][1]
    for k in runs[0][0]:
        np.testing.assert_array_equal(runs[1][0][k], runs[0][0][k], err_msg=k)


@gpu_only
def test_graph_predictions_follow_the_weights():
    """Predictions replayed as a graph (from the third call on) equal the layers' own forward, also
    after the weights change in place (an optimizer step, load_state_dict)."""
    import warnings

    rng = np.random.default_rng(7)
    x = rng.random((5, 1, 8, 8)).astype(np.float32)
    spec = "conv(3,3,padding=same),bn,relu,maxpool(2),dense(4),relu"
    net = nc.build_network(spec, (1, 8, 8), 3, seed=3).to("cuda")
    twin = nc.build_network(spec, (1, 8, 8), 3, seed=3).to("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(3):
            got = net.forward(x)
            np.testing.assert_array_equal(got, twin.forward(x, keep=True))
        assert bool(net._programs[(x.shape, None)].device.graph) == _graphs_expected()
        state = {k: v * np.float32(1.5) + np.float32(0.01) for k, v in net.state_dict().items()}
        net.load_state_dict(state)
        twin.load_state_dict(state)
        np.testing.assert_array_equal(net.forward(x), twin.forward(x, keep=True))
        np.testing.assert_array_equal(net.forward(x[:3]), twin.forward(x[:3], keep=True))
