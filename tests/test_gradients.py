"""Backward passes against float64 central finite differences of the oracle, and the brief's claims
about batch averaging, argmax routing and gradient summation at pooling outputs."""
import math

import numpy as np
import pytest
import reference as ref
from conftest import choose_winograd, f32

import numbacnn as nc

EPS = 1e-6  # central-difference step in float64; tolerances below are for float32 kernels


def numeric_grad(f, a):
    """Central differences of scalar f with respect to every element of float64 array a."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + EPS
        fp = f()
        a[i] = old - EPS
        fm = f()
        a[i] = old
        g[i] = (fp - fm) / (2 * EPS)
    return g


NET_SPEC = [("conv", 1, 1), ("relu",), ("maxpool", 3, 2, 1), ("conv", 2, 0), ("tanh",),
            ("avgpool", 2, 1, 0), ("flatten",), ("dense",), ("relu",), ("dense",)]


def small_net(seed=0):
    return nc.Sequential([
        nc.Conv2D(2, 3, 3, padding=1), nc.ReLU(), nc.MaxPool2D(3, stride=2, padding=1),
        nc.Conv2D(3, 4, 2, stride=2), nc.Tanh(), nc.AvgPool2D(2, stride=1), nc.Flatten(),
        nc.Dense(4, 6), nc.ReLU(), nc.Dense(6, 3)], seed=seed)


@pytest.mark.slow
def test_whole_network_gradient_matches_finite_differences(rng):
    net = small_net()
    x = f32(rng.standard_normal((4, 2, 9, 9)))
    y = rng.integers(0, 3, 4)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    x64 = x.astype(np.float64)
    assert loss == pytest.approx(ref.network_loss(NET_SPEC, params, x64, y), rel=1e-5)
    for (name, g), p in zip(net.grad_dict().items(), params):
        num = numeric_grad(lambda: ref.network_loss(NET_SPEC, params, x64, y), p)
        np.testing.assert_allclose(g, num, rtol=2e-3, atol=2e-5, err_msg=name)
    num_dx = numeric_grad(lambda: ref.network_loss(NET_SPEC, params, x64, y), x64)
    np.testing.assert_allclose(dx, num_dx, rtol=2e-3, atol=2e-5)


@pytest.mark.parametrize("layer_factory,spec", [
    (lambda: nc.Conv2D(2, 3, 3, stride=2, padding=1), ("conv", 2, 1)),
    (lambda: nc.MaxPool2D(2), ("maxpool", 2, 2, 0)),
    (lambda: nc.MaxPool2D(3, stride=1, padding=1), ("maxpool", 3, 1, 1)),
    (lambda: nc.AvgPool2D(3, stride=2, padding=1), ("avgpool", 3, 2, 1)),
])
def test_layer_input_gradient_matches_finite_differences(rng, layer_factory, spec):
    """Per layer: L = sum(R * layer(x)); dL/dx from backward(R) against central differences."""
    layer = layer_factory()
    if layer.param_shapes():
        layer.initialize(rng)
    x = f32(rng.permutation(2 * 2 * 7 * 7).reshape(2, 2, 7, 7) / 10.0)  # distinct: no ties in FD
    y = layer.forward(x, training=True)
    R = rng.standard_normal(y.shape)
    dx = layer.backward(f32(R))
    params = [layer.weight.astype(np.float64), layer.bias.astype(np.float64)] if spec[0] == "conv" else []
    x64 = x.astype(np.float64)

    def f():
        h = x64
        if spec[0] == "conv":
            h = ref.conv2d_forward(h, params[0], params[1], spec[1], spec[2])
        elif spec[0] == "maxpool":
            h = ref.maxpool2d_forward(h, *spec[1:])[0]
        else:
            h = ref.avgpool2d_forward(h, *spec[1:])
        return float((R * h).sum())

    np.testing.assert_allclose(dx, numeric_grad(f, x64), rtol=1e-3, atol=1e-4)
    if params:
        np.testing.assert_allclose(layer.dweight, numeric_grad(f, params[0]), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(layer.dbias, numeric_grad(f, params[1]), rtol=1e-3, atol=1e-4)


def test_maxpool_routes_each_example_to_its_own_argmax(rng):
    N = 3
    x = f32(rng.standard_normal((N, 1, 4, 4)))
    # make the maximum of the top-left window sit at a different place for every example
    for n, (iy, ix) in enumerate([(0, 0), (1, 1), (0, 1)]):
        x[n, 0, :2, :2] = -5.0
        x[n, 0, iy, ix] = 5.0
    pool = nc.MaxPool2D(2)
    pool.forward(x, training=True)
    dout = np.zeros((N, 1, 2, 2), np.float32)
    dout[:, 0, 0, 0] = [1.0, 2.0, 3.0]
    dx = pool.backward(dout)
    for n, (iy, ix) in enumerate([(0, 0), (1, 1), (0, 1)]):
        window = dx[n, 0, :2, :2]
        assert window[iy, ix] == dout[n, 0, 0, 0]
        assert np.count_nonzero(window) == 1  # only that example's argmax receives gradient
    assert np.count_nonzero(dx[:, 0, 2:, :]) == 0 and np.count_nonzero(dx[:, 0, :, 2:]) == 0


def test_tie_goes_to_first_index_and_overlap_accumulates():
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 1, 1] = 1.0  # the centre is the maximum of all four overlapping 2x2/s1 windows
    pool = nc.MaxPool2D(2, stride=1)
    pool.forward(x, training=True)
    dx = pool.backward(np.ones((1, 1, 2, 2), np.float32))
    assert dx[0, 0, 1, 1] == 4.0 and dx.sum() == 4.0
    flat = np.zeros((1, 1, 2, 2), np.float32)  # all equal: the first cell wins
    pool2 = nc.MaxPool2D(2)
    pool2.forward(flat, training=True)
    np.testing.assert_array_equal(pool2.backward(np.ones((1, 1, 1, 1), np.float32))[0, 0],
                                  [[1.0, 0.0], [0.0, 0.0]])


def test_gradient_at_pool_output_sums_over_downstream_readers(rng):
    """dL/d(pool output) = sum over every Dense / Conv2D neuron that reads it, weighted."""
    dense = nc.Dense(8, 5).initialize(rng)
    h = f32(rng.standard_normal((2, 8)))
    dense.forward(h, training=True)
    g = f32(rng.standard_normal((2, 5)))
    dh = dense.backward(g)
    for n in range(2):
        for i in range(8):
            expect = sum(float(g[n, j]) * float(dense.weight[j, i]) for j in range(5))
            assert dh[n, i] == pytest.approx(expect, rel=1e-5, abs=1e-6)
    conv = nc.Conv2D(2, 3, 3, padding=1).initialize(rng)
    h = f32(rng.standard_normal((1, 2, 4, 4)))
    conv.forward(h, training=True)
    g = f32(rng.standard_normal((1, 3, 4, 4)))
    dh = conv.backward(g)
    c, iy, ix = 1, 2, 1
    expect = 0.0
    for co in range(3):
        for oy in range(4):
            for ox in range(4):
                ky, kx = iy - oy + 1, ix - ox + 1  # input (iy, ix) is read by output (oy, ox) via tap
                if 0 <= ky < 3 and 0 <= kx < 3:
                    expect += float(g[0, co, oy, ox]) * float(conv.weight[co, c, ky, kx])
    assert dh[0, c, iy, ix] == pytest.approx(expect, rel=1e-5, abs=1e-6)


# Nets that put every conv strategy, the fused conv+ReLU+pool kernels and multi-block Dense layers
# (more than one feature block forward and backward) under the claims above, with their oracle specs.
STRATEGY_NETS = {
    "small net: padded and overlapping pools, tanh, avgpool": (
        lambda: small_net().layers, NET_SPEC, (2, 9, 9)),
    "wide+fused pool, multi-block dense": (
        lambda: [nc.Conv2D(8, 4, 3), nc.ReLU(), nc.MaxPool2D(2), nc.Flatten(), nc.Dense(100, 40),
                 nc.ReLU(), nc.Dense(40, 3)],
        [("conv", 1, 0), ("relu",), ("maxpool", 2, 2, 0), ("flatten",), ("dense",), ("relu",),
         ("dense",)], (8, 12, 12)),
    "direct+fused pool, direct with input gradient": (
        lambda: [nc.Conv2D(1, 3, 5, padding=2), nc.ReLU(), nc.MaxPool2D(2), nc.Conv2D(3, 5, (2, 4)),
                 nc.ReLU(), nc.Flatten(), nc.Dense(40, 3)],
        [("conv", 1, 2), ("relu",), ("maxpool", 2, 2, 0), ("conv", 1, 0), ("relu",), ("flatten",),
         ("dense",)], (1, 10, 11)),
    "positions+fused pool": (
        lambda: [nc.Conv2D(2, 12, 3, padding=1), nc.ReLU(), nc.Conv2D(12, 8, 3), nc.ReLU(),
                 nc.MaxPool2D(2), nc.Flatten(), nc.Dense(32, 3)],
        [("conv", 1, 1), ("relu",), ("conv", 1, 0), ("relu",), ("maxpool", 2, 2, 0), ("flatten",),
         ("dense",)], (2, 6, 6)),
    "winograd+fused pool, winograd with input gradient": (
        lambda: [nc.Conv2D(2, 32, 3, padding=1), nc.ReLU(), nc.Conv2D(32, 32, 3, padding=1), nc.ReLU(),
                 nc.MaxPool2D(2), nc.Conv2D(32, 33, 3, padding=2), nc.Flatten(), nc.Dense(33 * 25, 3)],
        [("conv", 1, 1), ("relu",), ("conv", 1, 1), ("relu",), ("maxpool", 2, 2, 0), ("conv", 1, 2),
         ("flatten",), ("dense",)], (2, 7, 6)),
    "gemm strided, positions strided, overlapping unfused pool": (
        lambda: [nc.Conv2D(2, 12, 3, stride=2), nc.ReLU(), nc.MaxPool2D(3, stride=1),
                 nc.Conv2D(12, 5, 3, stride=2, padding=1), nc.Flatten(), nc.Dense(20, 3)],
        [("conv", 2, 0), ("relu",), ("maxpool", 3, 1, 0), ("conv", 2, 1), ("flatten",), ("dense",)],
        (2, 13, 13)),
    "grouped: depthwise strided with a multiplier, pointwise, grouped dilated, uneven padding, the gates": (
        lambda: [nc.DepthwiseConv2D(4, 3, multiplier=4, stride=2, padding=1), nc.ReLU(),
                 nc.Conv2D(16, 8, 1), nc.ReLU(),
                 nc.Conv2D(8, 6, (3, 2), groups=2, dilation=(1, 2), padding=((1, 2), (0, 1))), nc.ReLU6(),
                 nc.Conv2D(6, 6, 3, padding="same", groups=3, dilation=2), nc.HardSwish(),
                 nc.DepthwiseConv2D(6, 1), nc.SiLU(), nc.DepthwiseConv2D(6, 3, multiplier=2, padding=1),
                 nc.Flatten(), nc.Dense(216, 10), nc.Sigmoid(),
                 nc.Dense(10, 4), nc.HardSigmoid(), nc.Dense(4, 3)],
        [("gconv", 2, (1, 1, 1, 1), 4, 1), ("relu",), ("conv", 1, 0), ("relu",),
         ("gconv", 1, (1, 2, 0, 1), 2, (1, 2)),
         ("gate", "relu6"), ("gconv", 1, (2, 2, 2, 2), 3, 2), ("gate", "hardswish"),
         ("gconv", 1, (0, 0, 0, 0), 6, 1), ("gate", "silu"), ("gconv", 1, (1, 1, 1, 1), 6, 1),
         ("flatten",), ("dense",),
         ("gate", "sigmoid"), ("dense",), ("gate", "hardsigmoid"), ("dense",)], (4, 9, 8)),
}


def _strategy_net(name, monkeypatch, seed=0, f4=None):
    """A net of STRATEGY_NETS, its Winograd layers' chooser asked for Winograd on every shape
    (small batches would run "positions"), F(4x4, 3x3) where the table takes it (``f4``: or never)."""
    make, spec, shape = STRATEGY_NETS[name]
    choose_winograd(monkeypatch, always=True, f4=f4)
    return nc.Sequential(make(), seed=seed), spec, shape


def test_strategy_nets_cover_every_path(monkeypatch):
    strategies, fused, blocks = set(), False, False
    for name in STRATEGY_NETS:
        net, _, _ = _strategy_net(name, monkeypatch)
        for layer in net.layers:
            if isinstance(layer, nc.Conv2D):
                strategies.add(layer.strategy)
                fused |= layer.fusion.pool is not None
            if isinstance(layer, nc.Dense):
                blocks |= layer.in_features > 64 and layer.out_features > 32  # >= 2 blocks each way
    assert strategies == {"direct", "wide", "positions", "gemm", "winograd", "grouped",
                          "pointwise"} and fused and blocks


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", list(STRATEGY_NETS))
def test_network_gradients_match_float64_oracle_on_every_path(rng, monkeypatch, name, ties):
    """Every parameter gradient and dL/dx against the oracle's backward; with integer data and
    weights (ties) pooling windows hold equal maxima, which must go to the first one (there the
    Winograd layers run F(2x2, 3x3), exact on integers: F(4x4, 3x3)'s 1/6 and 1/24 round the sums,
    which it takes otherwise for the 32 -> 32 layer of these 11 examples)."""
    net, spec, shape = _strategy_net(name, monkeypatch, f4=False if ties else None)
    n = 11
    winograd = [la for la in net.layers if getattr(la, "strategy", "") == "winograd"]
    if ties:
        x = f32(rng.integers(-1, 3, (n,) + shape))
        net.load_state_dict({k: f32(rng.integers(-1, 2, v.shape) * 0.25)
                             for k, v in net.state_dict().items()})
    else:
        x = f32(rng.standard_normal((n,) + shape))
    y = rng.integers(0, 3, n)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    assert any("wino4_u" in la._buffers for la in winograd) == (bool(winograd) and not ties)  # F(4x4) ran
    dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    rloss, rgrads, rdx = ref.network_gradients(spec, params, x, y)
    assert loss == pytest.approx(rloss, rel=1e-5)
    for (key, g), rg in zip(net.grad_dict().items(), rgrads):
        np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", list(STRATEGY_NETS))
def test_a_frozen_weight_gets_no_gradient_and_the_rest_are_unchanged_on_every_path(rng, monkeypatch, name):
    """Every convolution's and Dense layer's weight frozen, their biases training: the plans skip
    the weight gradients (zeros, not computed), and the biases' gradients and dL/dx are the full
    backward's bit for bit."""
    net, _, shape = _strategy_net(name, monkeypatch)
    x = f32(rng.standard_normal((11,) + shape))
    y = rng.integers(0, 3, 11)
    d = nc.softmax_cross_entropy(net.forward(x, training=True), y)[1]
    full_dx = net.backward(d).copy()
    full = net.grad_dict()
    frozen = []
    for i, layer in enumerate(net.layers):
        if isinstance(layer, (nc.Conv2D, nc.Dense)):
            layer.freeze("weight")
            frozen.append(f"{i}.weight")
    net.forward(x, training=True)
    np.testing.assert_array_equal(net.backward(d), full_dx)
    got = net.grad_dict()
    assert sorted(net.frozen()) == sorted(frozen) and all(np.any(full[k]) for k in frozen)
    for k, g in full.items():
        np.testing.assert_array_equal(got[k], np.zeros_like(g) if k in frozen else g, err_msg=k)


@pytest.mark.parametrize("name", list(STRATEGY_NETS))
def test_oracle_network_gradients_match_finite_differences(rng, monkeypatch, name):
    """The oracle's backward itself, against central differences on a sample of entries."""
    net, spec, shape = _strategy_net(name, monkeypatch)
    x = rng.permutation(3 * math.prod(shape)).reshape((3,) + shape) / 7.0  # distinct: no ties
    y = np.array([0, 1, 2])
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    _, grads, _ = ref.network_gradients(spec, params, x, y)
    for p, g in zip(params, grads):
        for i in [tuple(rng.integers(0, s) for s in p.shape) for _ in range(6)]:
            old = p[i]
            p[i] = old + EPS
            fp = ref.network_loss(spec, params, x, y)
            p[i] = old - EPS
            fm = ref.network_loss(spec, params, x, y)
            p[i] = old
            assert g[i] == pytest.approx((fp - fm) / (2 * EPS), rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("name", list(STRATEGY_NETS))
def test_batch_gradient_is_mean_of_per_example_gradients_on_every_path(rng, monkeypatch, name):
    """70 examples (64 gradient parts of 1 or 2): any mix-up between examples (a wrong argmax
    plane, a part read twice) makes the batch gradient differ from the mean of the 70
    single-example gradients."""
    net, _, shape = _strategy_net(name, monkeypatch, seed=3)
    x = f32(rng.standard_normal((70,) + shape))
    y = rng.integers(0, 3, 70)
    net.backward(nc.softmax_cross_entropy(net.forward(x, training=True), y)[1])
    batch = net.grad_dict()
    per_example = []
    for i in range(len(x)):
        net.backward(nc.softmax_cross_entropy(net.forward(x[i:i + 1], training=True), y[i:i + 1])[1])
        per_example.append(net.grad_dict())
    for k in batch:
        mean = np.mean([g[k].astype(np.float64) for g in per_example], axis=0)
        np.testing.assert_allclose(batch[k], mean, rtol=1e-4, atol=1e-6, err_msg=k)


def _readers_sum_conv(g, w, in_shape, stride, pad):
    """dL/dh[n, c, iy, ix] = sum over every output (co, oy, ox) whose window reads (iy, ix), of
    g[n, co, oy, ox] * w[co, c, ky, kx]: the gather form, written independently of the oracle's
    scatter."""
    N, C, H, W = in_shape
    Co, _, KH, KW = w.shape
    (sh, sw), (ph, pw) = stride, pad
    OH, OW = g.shape[2:]
    dh = np.zeros(in_shape)
    for iy in range(H):
        for ix in range(W):
            for ky in range(KH):
                for kx in range(KW):
                    ty, tx = iy + ph - ky, ix + pw - kx
                    if ty % sh or tx % sw:
                        continue
                    oy, ox = ty // sh, tx // sw
                    if 0 <= oy < OH and 0 <= ox < OW:
                        dh[:, :, iy, ix] += g[:, :, oy, ox].astype(np.float64) @ w[:, :, ky, kx]
    return dh


@pytest.mark.parametrize("layer,in_shape", [
    (lambda: nc.Conv2D(2, 3, 3, padding=1), (2, 2, 5, 6)),  # wide
    (lambda: nc.Conv2D(12, 4, 3, padding=1), (2, 12, 5, 4)),  # positions
    (lambda: nc.Conv2D(12, 4, 3, stride=2, padding=1), (2, 12, 7, 6)),  # positions, strided
    (lambda: nc.Conv2D(3, 4, 3, stride=2), (2, 3, 7, 8)),  # gemm
    (lambda: nc.Dense(150, 70), (3, 150)),  # three feature blocks each way
])
def test_gradient_at_pool_output_sums_over_downstream_readers_on_every_path(rng, layer, in_shape):
    layer = layer().initialize(rng)
    h = f32(rng.standard_normal(in_shape))
    out = layer.forward(h, training=True)
    g = f32(rng.standard_normal(out.shape))
    dh = layer.backward(g)
    w = layer.weight.astype(np.float64)
    if isinstance(layer, nc.Dense):
        expect = np.array([[sum(float(g[n, j]) * w[j, i] for j in range(w.shape[0]))
                            for i in range(w.shape[1])] for n in range(in_shape[0])])
    else:
        expect = _readers_sum_conv(g, w, in_shape, layer.stride, layer.padding)
    np.testing.assert_allclose(dh, expect, rtol=1e-4, atol=1e-5)
