"""Grouped, depthwise, dilated and unevenly padded convolutions, the 1x1 "pointwise" plan, the
mobile nets' gates and presets: against the float64 oracle (tests/reference.py) on random
configurations, with the layer's own checks, checkpoints and summary."""
import numpy as np
import pytest
import reference as ref

import numbacnn as nc
from numbacnn.arch import ArchitectureError

GATES = {nc.ReLU6: "relu6", nc.Sigmoid: "sigmoid", nc.SiLU: "silu", nc.HardSigmoid: "hardsigmoid",
         nc.HardSwish: "hardswish"}


def _random_conv(rng):
    """A random grouped convolution and an input shape it takes: groups 1 to depthwise, a
    multiplier, strides 1-3, dilations 1-3, rectangular kernels, per-side padding."""
    groups = int(rng.choice([1, 2, 3, 4]))
    cig, cog = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    d = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    pads = tuple(int(v) for v in rng.integers(0, 3, 4))
    conv = nc.Conv2D(groups * cig, groups * cog, k, stride=s,
                     padding=((pads[0], pads[1]), (pads[2], pads[3])), groups=groups, dilation=d,
                     bias=bool(rng.integers(0, 2)))
    eff = conv.effective_kernel
    h, w = eff[0] + int(rng.integers(0, 8)), eff[1] + int(rng.integers(0, 8))
    return conv, (int(rng.integers(1, 6)), groups * cig, h, w), pads


@pytest.mark.parametrize("seed", range(24))
def test_random_grouped_convolutions_match_the_oracle(seed):
    """Forward, input, weight and bias gradients of random configurations against float64:
    relative 1e-5 of each array's scale (float32 sums of up to a few hundred terms)."""
    rng = np.random.default_rng(seed)
    conv, shape, pads = _random_conv(rng)
    conv.initialize(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    y = conv.forward(x, training=True).copy()
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = conv.backward(dy).copy()
    geometry = (conv.stride, pads, conv.groups, conv.dilation)
    b = conv.bias if conv.use_bias else np.zeros(conv.out_channels)
    ey = ref.conv2d_grouped_forward(x, conv.weight, b, *geometry)
    edx, edw, edb = ref.conv2d_grouped_backward(dy, x, conv.weight, *geometry)
    for name, got, want in (("y", y, ey), ("dx", dx, edx), ("dw", conv.dweight, edw)) + (
            (("db", conv.dbias, edb),) if conv.use_bias else ()):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=f"{name} {conv}")


@pytest.mark.parametrize("multiplier,stride,dilation,pads", [
    (1, 1, 1, (1, 1, 1, 1)), (2, 1, 1, (0, 2, 1, 0)), (3, 1, 2, (2, 2, 2, 2)), (2, 2, 1, (1, 0, 0, 1)),
    (1, 1, (2, 1), (0, 0, 0, 0))])
def test_depthwise_3x3_planes_match_the_oracle(rng, multiplier, stride, dilation, pads):
    """The depthwise wide-row paths: 3x3 stride 1 in one pass each way (a multiplier's filters
    adding into one input gradient), strided and dilated ones by taps."""
    conv = nc.DepthwiseConv2D(5, 3, multiplier, stride=stride, dilation=dilation,
                              padding=((pads[0], pads[1]), (pads[2], pads[3]))).initialize(rng)
    x = rng.standard_normal((6, 5, 11, 9)).astype(np.float32)
    y = conv.forward(x, training=True).copy()
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = conv.backward(dy).copy()
    geometry = (conv.stride, pads, 5, conv.dilation)
    np.testing.assert_allclose(y, ref.conv2d_grouped_forward(x, conv.weight, conv.bias, *geometry),
                               rtol=1e-5, atol=1e-5)
    edx, edw, edb = ref.conv2d_grouped_backward(dy, x, conv.weight, *geometry)
    for got, want in ((dx, edx), (conv.dweight, edw), (conv.dbias, edb)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("multiplier,kernel,dilation,pads,shape", [
    (1, 3, 1, (1, 1, 1, 1), (4, 6, 25, 5)), (2, 3, 1, (0, 2, 1, 1), (3, 5, 7, 6)),
    (3, 3, 2, (2, 2, 2, 2), (2, 4, 9, 9)), (1, (5, 3), 1, (2, 2, 1, 1), (3, 4, 6, 2)),
    (1, 3, 1, (1, 1, 1, 1), (3, 4, 1, 1)), (2, (1, 4), (1, 2), (0, 0, 3, 3), (2, 3, 4, 7)),
    (1, 3, 1, (1, 1, 1, 1), (130, 2, 5, 4)),  # several examples a gradient part (GRAD_PARTS)
    (1, 3, 1, (1, 1, 1, 1), (2, 3, 3, 30))])  # wider than DEPTHWISE_FLAT_MAX_WIDTH: a wide-row backward
def test_same_size_depthwise_planes_run_flat_and_match_the_oracle(rng, multiplier, kernel, dilation, pads,
                                                                  shape):
    """Stride-1 depthwise layers whose output is the input's size run on flat planes read in place
    (the batch's first and last planes, and planes smaller than a tap's reach, from a copy with
    zero margins), forward and backward, with a fused ReLU too: against float64, 1e-5 of each
    array's scale (sums of a few hundred float32 terms)."""
    conv = nc.DepthwiseConv2D(shape[1], kernel, multiplier, dilation=dilation,
                              padding=((pads[0], pads[1]), (pads[2], pads[3]))).initialize(rng)
    conv.bias[:] = rng.standard_normal(conv.bias.shape)
    x = rng.standard_normal(shape).astype(np.float32)
    y_shape = (shape[0], conv.out_channels, *conv.plan.geometry.out_hw(*shape[2:]))
    assert conv.plan._flat(x, y_shape), "the chooser should take the flat forward"
    want = ref.conv2d_grouped_forward(x, conv.weight, conv.bias, conv.stride, pads, shape[1], conv.dilation)
    y = conv.forward(x, training=True).copy()
    tol = 1e-5 * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(y, want, rtol=0, atol=tol)
    geometry = (conv.stride, pads, shape[1], conv.dilation)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    for relu in (False, True):
        ws = conv._buffers
        got = conv.plan.forward(ws, x, conv.weight, conv.bias, relu, None)
        np.testing.assert_allclose(got, np.maximum(want, 0) if relu else want, rtol=0, atol=tol)
        dw, db = np.full_like(conv.weight, np.nan), np.full_like(conv.bias, np.nan)
        dx = conv.plan.backward(ws, dy, conv.weight, dw, db, True, True, relu, None).copy()
        wants = ref.conv2d_grouped_backward(dy * (want > 0) if relu else dy, x, conv.weight, *geometry)
        for name, g, w in zip(("dx", "dw", "db"), (dx, dw, db), wants):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * max(1.0, float(np.abs(w).max())),
                                       err_msg=f"{name} relu={relu}")


def test_uneven_padding_runs_the_unpadded_plan_on_a_padded_copy_and_matches_the_oracle(rng):
    """DS-CNN's stem (Keras's "same" at stride 2 as per-side padding) on the "padded" plan (the
    strided GEMM plan inside) and a stride-1 one, ReLU fused, in a trained network step."""
    net = nc.Sequential([nc.Conv2D(1, 6, (10, 4), stride=2, padding=((4, 5), (1, 1))), nc.ReLU(),
                         nc.Conv2D(6, 4, 3, padding=((0, 2), (1, 0))), nc.Flatten(), nc.Dense(4 * 25 * 4, 3)],
                        seed=0)
    assert [net.layers[0].strategy, net.layers[2].strategy] == ["padded", "padded"]
    assert net.layers[0].plan.inner.name == "gemm" and net.layers[0].fusion.relu
    x = rng.standard_normal((5, 1, 49, 10)).astype(np.float32)
    y = rng.integers(0, 3, 5)
    for _ in range(2):  # the second step on the workspaces the first left
        _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    spec = [("gconv", 2, (4, 5, 1, 1), 1, 1), ("relu",), ("gconv", 1, (0, 2, 1, 0), 1, 1), ("flatten",),
            ("dense",)]
    _, grads, edx = ref.network_gradients(spec, params, x, y)
    for (key, g), eg in zip(net.grad_dict().items(), grads):
        np.testing.assert_allclose(g, eg, rtol=1e-4, atol=1e-5, err_msg=key)
    np.testing.assert_allclose(dx, edx, rtol=1e-4, atol=1e-5)


def test_the_grouped_oracle_is_the_ungrouped_one_on_each_group_and_ungrouped_matches_the_plain_oracle(rng):
    """The float64 oracle itself: groups=1 with no dilation agrees with the plain convolution's
    oracle, and a grouped convolution is its groups' ungrouped convolutions side by side."""
    x = rng.standard_normal((2, 6, 7, 6))
    w = rng.standard_normal((4, 6, 3, 2))
    b = rng.standard_normal(4)
    np.testing.assert_allclose(ref.conv2d_grouped_forward(x, w, b, 2, (1, 1, 1, 1), 1, 1),
                               ref.conv2d_forward(x, w, b, 2, 1), atol=1e-12)
    wg = rng.standard_normal((4, 3, 3, 2))
    y = ref.conv2d_grouped_forward(x, wg, b, 1, (0, 0, 0, 0), 2, 1)
    np.testing.assert_allclose(y[:, :2], ref.conv2d_forward(x[:, :3], wg[:2], b[:2], 1, 0), atol=1e-12)
    np.testing.assert_allclose(y[:, 2:], ref.conv2d_forward(x[:, 3:], wg[2:], b[2:], 1, 0), atol=1e-12)


def test_dilation_spreads_the_taps():
    """A hand-worked case: a 1x2 filter [1, 10] dilated by 3 reads x[j] and x[j + 3]."""
    conv = nc.Conv2D(1, 1, (1, 2), dilation=(1, 3), bias=False).initialize(0)
    conv.weight[...] = np.array([1.0, 10.0], np.float32).reshape(1, 1, 1, 2)
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 1, 6)
    np.testing.assert_array_equal(conv.forward(x)[0, 0, 0], [30.0, 41.0, 52.0])


@pytest.mark.parametrize("cls", list(GATES))
def test_gates_match_the_oracle_and_keep_nan(rng, cls):
    layer = cls()
    x = (rng.standard_normal((3, 4, 5, 7)) * 5).astype(np.float32)
    x[0, 0, 0, :3] = [-3.0, 3.0, 6.0]  # the kinks
    x[1, 1, 1, 1] = np.nan
    y = layer.forward(x, training=True)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx = layer.backward(dy)
    kind = GATES[cls]
    ok = ~np.isnan(x)
    np.testing.assert_allclose(y[ok], ref.gate(x[ok], kind), rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(dx[ok], dy[ok] * ref.gate_grad(x[ok], kind), rtol=2e-6, atol=2e-7)
    assert np.isnan(y[1, 1, 1, 1]) and np.isnan(dx[1, 1, 1, 1])


def test_pointwise_plan_takes_1x1_layers_and_matches_the_oracle_with_a_fused_relu(rng):
    net = nc.Sequential([nc.Conv2D(16, 24, 1), nc.ReLU(), nc.Conv2D(24, 5, 1), nc.Flatten(),
                         nc.Dense(5 * 3 * 4, 3)], seed=0)
    assert [la.strategy for la in net.layers[::2][:2]] == ["pointwise", "pointwise"]
    assert net.layers[0].fusion.relu
    x = rng.standard_normal((7, 16, 3, 4)).astype(np.float32)
    y = rng.integers(0, 3, 7)
    _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    spec = [("conv", 1, 0), ("relu",), ("conv", 1, 0), ("flatten",), ("dense",)]
    _, grads, edx = ref.network_gradients(spec, params, x, y)
    for (key, g), eg in zip(net.grad_dict().items(), grads):
        np.testing.assert_allclose(g, eg, rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(dx, edx, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("spec,message", [
    ("conv(6,3,groups=4)", "groups=4 must divide in_channels=4 and out_channels=6"),
    ("conv(8,3,groups=0)", "groups must be a positive integer"),
    ("dwconv(3,multiplier=0)", "multiplier must be a positive integer"),
    ("dwconv(3,groups=2)", "dwconv has no argument 'groups'"),
    ("conv(8,3,stride=2,padding=same)", "padding='same' needs stride 1"),
    ("conv(8,3,dilation=0)", "dilation must be an integer in \\[1, "),
    ("conv(8,3,padding=((1,2),3))", "padding must be"),
    ("conv(8,3,dilation=5)", "smaller than the kernel's window 11x11"),
    ("dense(4),dwconv(3)", "dwconv after flatten/dense"),
])
def test_bad_grouped_specs_get_one_line_naming_the_problem(spec, message):
    with pytest.raises(ArchitectureError, match=message.replace("(", r"\(").replace(")", r"\)")):
        nc.build_network(spec, (4, 8, 8), 3)


def test_same_padding_with_an_even_window_puts_the_extra_row_below_as_torch():
    conv = nc.Conv2D(1, 1, 4, padding="same")  # window 4: 1 above, 2 below
    assert conv.pads == (1, 2, 1, 2) and conv.output_shape((1, 7, 5)) == (1, 7, 5)
    conv = nc.Conv2D(1, 1, 2, padding="same", dilation=3)  # window 4 as well
    assert conv.pads == (1, 2, 1, 2)


def test_checkpoints_keep_groups_dilation_padding_and_the_multiplier(tmp_path, rng):
    net = nc.build_network("conv(8,3,padding=1),dwconv(3,multiplier=2,stride=2,padding=((0,1),(1,0))),relu6,"
                           "conv(8,3,groups=2,dilation=2,padding=same),hardswish,conv(8,1),silu,gap",
                           (3, 12, 12), 4, seed=0)
    nc.save(net, str(tmp_path / "m.npz"))
    back = nc.load(str(tmp_path / "m.npz"))
    assert [repr(a) for a in back.layers] == [repr(a) for a in net.layers]
    assert isinstance(back.layers[1], nc.DepthwiseConv2D) and back.layers[1].multiplier == 2
    x = rng.random((3, 3, 12, 12), dtype=np.float32)
    np.testing.assert_array_equal(back.forward(x), net.forward(x))


def test_summary_counts_grouped_parameters_and_mult_adds():
    net = nc.build_network("dwconv(3,multiplier=2,padding=1,bias=False),conv(6,3,groups=2)", (4, 10, 10), 2)
    dw, grouped = net.layers[0], net.layers[1]
    assert dw.param_shapes() == {"weight": (8, 1, 3, 3)}
    assert dw.macs((4, 10, 10)) == 8 * 9 * 10 * 10
    assert grouped.param_shapes() == {"weight": (6, 4, 3, 3), "bias": (6,)}
    assert grouped.macs((8, 10, 10)) == 6 * 4 * 9 * 8 * 8


def test_mobile_presets_build_with_their_published_shapes():
    """Parameter counts worked out by hand from each architecture's definition (conv weights,
    BatchNorm's two vectors, the classifier)."""
    def count(name, shape, classes):
        net = nc.build_network(name, shape, classes, seed=0)
        return sum(v.size for v in net.grad_dict().values()), net
    n, net = count("dscnn", (1, 49, 10), 12)
    # stem 64*40 + bn 128; 4 x (depthwise 64*9 + bn 128 + pointwise 64*64 + bn 128); dense 64*12 + 12
    assert n == 64 * 40 + 128 + 4 * (64 * 9 + 128 + 64 * 64 + 128) + 64 * 12 + 12
    assert net.layers[0].output_shape((1, 49, 10)) == (64, 25, 5)  # Keras's "same" at stride 2
    n, _ = count("mobilenetv2", (3, 32, 32), 10)
    assert n == 2_236_682  # torchvision's MobileNetV2 with 10 classes has the same count
    n, net = count("mobilenetv1-025", (3, 96, 96), 2)
    widths = [8, 16, 32, 32, 64, 64, 128, 128, 128, 128, 128, 128, 256, 256]
    blocks = sum(c * 9 + 2 * c + c * o + 2 * o for c, o in zip(widths, widths[1:]))
    expect = 8 * 27 + 16 + blocks + 256 * 2 + 2
    assert n == expect
    x = np.random.default_rng(0).random((2, 1, 49, 10), dtype=np.float32)
    assert nc.build_network("dscnn", (1, 49, 10), 12, seed=0).forward(x).shape == (2, 12)
