"""1-D layers over series (N, C, L): Conv1D (stride, dilation, "same"/"causal"/per-side padding,
groups and depthwise), the 1-D pools, BatchNorm and residual blocks on series, against the
float64 oracle (tests/reference.py) and torch autograd; their checks, checkpoints and exports."""
import numpy as np
import pytest
import reference as ref

import numbacnn as nc
from numbacnn.arch import ArchitectureError, build_network


def _random_conv1d(rng):
    """A random Conv1D and an input shape it takes."""
    groups = int(rng.choice([1, 2, 3]))
    cig, cog = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k, s, d = int(rng.integers(1, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    padding = [0, "causal", (int(rng.integers(0, 4)), int(rng.integers(0, 4))), int(rng.integers(0, 3)),
               "same" if s == 1 else 1][int(rng.integers(0, 5))]
    conv = nc.Conv1D(groups * cig, groups * cog, k, stride=s, padding=padding, groups=groups, dilation=d,
                     bias=bool(rng.integers(0, 2)))
    length = conv.effective_kernel[1] + int(rng.integers(0, 30))
    return conv, (int(rng.integers(1, 6)), groups * cig, length)


@pytest.mark.parametrize("seed", range(20))
def test_random_conv1d_matches_the_oracle(seed):
    """Forward and every gradient of random configurations against float64: 1e-5 of each
    array's scale."""
    rng = np.random.default_rng(seed)
    conv, shape = _random_conv1d(rng)
    conv.initialize(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    y = conv.forward(x, training=True).copy()
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = conv.backward(dy).copy()
    geometry = (conv.stride[1], (conv.padding[1], conv.padding_end[1]), conv.groups, conv.dilation[1])
    b = conv.bias if conv.use_bias else np.zeros(conv.out_channels)
    assert conv.weight.shape == (conv.out_channels, conv.in_channels // conv.groups, conv.kernel)
    ey = ref.conv1d_forward(x, conv.weight, b, *geometry)
    edx, edw, edb = ref.conv1d_backward(dy, x, conv.weight, *geometry)
    for name, got, want in (("y", y, ey), ("dx", dx, edx), ("dw", conv.dweight, edw)) + (
            (("db", conv.dbias, edb),) if conv.use_bias else ()):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=f"{name} {conv}")


SERIES_NET = (
    lambda: [nc.Conv1D(3, 8, 5, padding="same"), nc.ReLU(), nc.MaxPool1D(3, stride=2, padding=1),
             nc.Conv1D(8, 6, 4, padding="causal", dilation=2), nc.Tanh(),
             nc.DepthwiseConv1D(6, 3, multiplier=2, stride=2, padding=(2, 0)), nc.ReLU(),
             nc.AvgPool1D(3, stride=1, padding=1), nc.Conv1D(12, 8, 3, groups=4), nc.ReLU(),
             nc.Conv1D(8, 5, 1), nc.GlobalMaxPool1D(), nc.Dense(5, 3)],
    [("conv1d", 1, (2, 2), 1, 1), ("relu",), ("maxpool1d", 3, 2, 1), ("conv1d", 1, (6, 0), 1, 2), ("tanh",),
     ("conv1d", 2, (2, 0), 6, 1), ("relu",), ("avgpool1d", 3, 1, 1), ("conv1d", 1, (0, 0), 4, 1), ("relu",),
     ("conv1d", 1, (0, 0), 1, 1), ("gmp1d",), ("dense",)])


@pytest.mark.parametrize("ties", [False, True])
def test_series_network_gradients_match_the_oracle(rng, ties):
    """A 1-D net with every 1-D layer: loss, parameter gradients and dL/dx against the oracle's
    backward; with integer data and weights (ties), windows and global maxima hold equal values,
    whose gradient goes to the first."""
    make, spec = SERIES_NET
    net = nc.Sequential(make(), seed=1)
    n, shape = 7, (3, 41)
    if ties:
        x = rng.integers(-1, 3, (n,) + shape).astype(np.float32)
        net.load_state_dict({k: (rng.integers(-1, 2, v.shape) * 0.25).astype(np.float32)
                             for k, v in net.state_dict().items()})
    else:
        x = rng.standard_normal((n,) + shape).astype(np.float32)
    y = rng.integers(0, 3, n)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    rloss, rgrads, rdx = ref.network_gradients(spec, params, x, y)
    assert loss == pytest.approx(rloss, rel=1e-5)
    for (key, g), rg in zip(net.grad_dict().items(), rgrads):
        np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-7)


def test_series_blocks_match_torch_autograd(rng):
    """BatchNorm over (N, C, L), a residual block with a strided 1-D projection shortcut, global
    average pooling, through the spec grammar: loss and gradients equal torch's (its nn.Conv1d,
    BatchNorm1d, AdaptiveAvgPool1d twins)."""
    torch = pytest.importorskip("torch")
    from numbacnn.bench import torch_twin

    spec = ("conv1d(8,7,padding=same),bn,relu,res(conv1d(16,3,stride=2,padding=1),bn,relu,"
            "conv1d(16,5,padding=same,dilation=2),bn),relu,dwconv1d(3,padding=causal),gap")
    net = build_network(spec, (2, 30), 4, seed=3)
    x = rng.standard_normal((6, 2, 30)).astype(np.float32)
    y = rng.integers(0, 4, 6)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    net.backward(d)
    twin = torch_twin(net).double().train()
    xt = torch.from_numpy(x.astype(np.float64))
    tloss = torch.nn.functional.cross_entropy(twin(xt), torch.from_numpy(y))
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-5)
    for (key, g), p in zip(net.grad_dict().items(), twin.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy().reshape(g.shape), rtol=1e-3, atol=1e-5, err_msg=key)


def test_specs_name_the_dimension_that_does_not_fit():
    with pytest.raises(ArchitectureError, match="conv is a 2-D layer and the input is series"):
        build_network("conv(8,3),relu", (1, 50), 2)
    with pytest.raises(ArchitectureError, match="maxpool is a 2-D layer.*use maxpool1d"):
        build_network("conv1d(8,3),maxpool(2)", (1, 50), 2)
    with pytest.raises(ArchitectureError, match="expected series of shape \\(N, C, L\\), got images"):
        build_network("conv1d(8,3)", (1, 28, 28), 2)
    with pytest.raises(ArchitectureError, match="shorter than the kernel's window 9"):
        build_network("conv1d(8,5,dilation=2)", (1, 8), 2)
    with pytest.raises(ArchitectureError, match="padding='same' needs stride 1"):
        build_network("conv1d(8,5,stride=2,padding=same)", (1, 50), 2)
    with pytest.raises(ValueError, match="Conv1D: padding must be"):
        nc.Conv1D(1, 2, 3, padding="full")
    layer = nc.Conv1D(2, 3, 3).initialize(0)
    with pytest.raises(ValueError, match="expected series of shape"):
        layer.forward(np.zeros((2, 2, 5, 5), np.float32))


def test_causal_padding_never_reads_the_future(rng):
    """Output t of a causal stack depends on inputs up to t only."""
    net = build_network("conv1d(4,3,padding=causal),relu,conv1d(4,3,padding=causal,dilation=2),relu,"
                        "conv1d(4,2,padding=causal,dilation=4)", (1, 20), 2, seed=0)
    x = rng.standard_normal((1, 1, 20)).astype(np.float32)
    base = net.layers[4].forward(net.layers[3].forward(net.layers[2].forward(net.layers[1].forward(
        net.layers[0].forward(x)))), training=False).copy()
    x2 = x.copy()
    x2[0, 0, 12:] += 5.0
    h = x2
    for layer in net.layers[:5]:
        h = layer.forward(h)
    np.testing.assert_array_equal(h[..., :12], base[..., :12])
    assert not np.array_equal(h[..., 12:], base[..., 12:])


def test_series_net_checkpoint_summary_and_state_dict_names(tmp_path, rng):
    net = build_network("conv1d(8,5,padding=same,bias=False),bn,relu,maxpool1d(2),conv1d(4,3,groups=2),"
                        "avgpool1d(2),gmp", (2, 24), 3, seed=0)
    assert list(net.state_dict())[:5] == ["0.weight", "1.weight", "1.bias", "4.weight", "4.bias"]
    assert net.state_dict()["0.weight"].shape == (8, 2, 5)
    x = rng.standard_normal((4, 2, 24)).astype(np.float32)
    want = net.forward(x).copy()
    path = tmp_path / "series.npz"
    nc.save(net, str(path))
    back = nc.load(str(path))
    np.testing.assert_array_equal(back.forward(x), want)
    assert back.input_shape == (2, 24)
    from numbacnn.summary import summarize

    text = str(summarize(net, (2, 24)))
    assert "Conv1D(2, 8, 5, padding='same', bias=False)" in text
    # multiply-adds: 8*2*5*24 + 4*4*3*10 (+ the dense layer's 4*3)
    assert net.layers[0].macs((2, 24)) == 1920 and net.layers[4].macs((8, 12)) == 480


def test_onnx_export_of_a_series_net_matches_onnxruntime(rng, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from numbacnn.onnx_export import export_onnx

    x = rng.standard_normal((5, 3, 33)).astype(np.float32)
    norm = nc.Normalize.fit(x)
    net = build_network("conv1d(8,4,padding=same),bn,relu,maxpool1d(2),dwconv1d(3,padding=causal,dilation=2),"
                        "relu,res(conv1d(8,3,padding=1),bn),avgpool1d(3,stride=2,padding=1),conv1d(6,1),gmp",
                        (3, 33), 4, seed=2, normalize=norm)
    net.forward(x, training=True)  # running statistics off their defaults
    want = net.forward(x)
    path = str(tmp_path / "series.onnx")
    export_onnx(net, path)
    got = ort.InferenceSession(path).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_random_branch_concatenations_match_torch_autograd(seed):
    """Random 1-D nets with parallel branches (nested concatenations, strides, dilations, causal
    and per-side padding, groups, pools beside convolutions) and a residual block: loss, every
    parameter gradient and dL/dx equal torch autograd's in float64 within float32 rounding."""
    torch = pytest.importorskip("torch")
    from numbacnn.bench import torch_twin

    rng = np.random.default_rng(seed)

    def conv(c):
        k, d = int(rng.integers(1, 8)), int(rng.integers(1, 3))
        pad = ["same", "causal", f"({int(rng.integers(0, 4))},{(k - 1) * d - 0})"][int(rng.integers(0, 3))]
        if pad.startswith("("):
            left = int(pad[1:].split(",")[0])
            pad = f"({left},{(k - 1) * d - left})" if (k - 1) * d >= left else "same"
        g = 2 if c % 2 == 0 and rng.integers(0, 2) else 1
        return f"conv1d({c},{k},padding={pad},dilation={d},groups={g})"

    inner = f"cat({conv(4)}|{conv(6)},relu)"
    spec = (f"conv1d(8,3,padding=same),cat({conv(4)},{inner}|maxpool1d(3,stride=1,padding=1),{conv(2)}"
            f"|avgpool1d(3,stride=1,padding=1)),bn,relu,res({conv(22)},bn,relu),gmp")
    net = build_network(spec, (3, 27), 4, seed=seed)
    assert any(isinstance(la, nc.Concat) for la in net.layers)
    x = rng.standard_normal((5, 3, 27)).astype(np.float32)
    y = rng.integers(0, 4, 5)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    dx = net.backward(d)
    twin = torch_twin(net).double().train()
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    tloss = torch.nn.functional.cross_entropy(twin(xt), torch.from_numpy(y))
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-5), spec
    assert list(net.grad_dict()) == [k for k, _ in twin.named_parameters()]  # torch's names, nested
    for (key, g), p in zip(net.grad_dict().items(), twin.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy().reshape(g.shape), rtol=1e-3, atol=2e-5, err_msg=key)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-3, atol=1e-6)


def test_concat_checks_checkpoints_onnx_and_the_inceptiontime_preset(tmp_path, rng):
    with pytest.raises(ArchitectureError, match="cat needs two or more branches"):
        build_network("cat(conv1d(4,3))", (1, 20), 2)
    with pytest.raises(ArchitectureError, match="must agree on every axis but the channels"):
        build_network("cat(conv1d(4,3)|conv1d(4,3,padding=same))", (1, 20), 2)
    net = build_network("inceptiontime", (2, 48), 3, seed=0)
    blocks = [la for la in net.layers if isinstance(la, nc.Residual)]
    assert len(blocks) == 2 and sum(isinstance(la, nc.Concat) for la in blocks[0].body) == 3
    kernels = sorted({la.kernel for la in net.all_layers() if isinstance(la, nc.Conv1D)})
    assert kernels == [1, 10, 20, 40]
    x = rng.standard_normal((4, 2, 48)).astype(np.float32)
    want = net.forward(x).copy()
    nc.save(net, str(tmp_path / "it.npz"))
    np.testing.assert_array_equal(nc.load(str(tmp_path / "it.npz")).forward(x), want)
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    nc.export_onnx(net, str(tmp_path / "it.onnx"))
    got = ort.InferenceSession(str(tmp_path / "it.onnx")).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_same_padding_of_an_even_window_puts_the_extra_zero_on_the_right_as_torch(rng):
    """Kernel 4 at stride 1: 1 zero on the left, 2 on the right (torch's "same"); the output
    against the oracle with those pads and, where torch is installed, against nn.Conv1d's own."""
    conv = nc.Conv1D(2, 3, 4, padding="same").initialize(rng)
    assert (conv.padding[1], conv.padding_end[1]) == (1, 2)
    dilated = nc.Conv1D(1, 1, 4, padding="same", dilation=3)
    assert (dilated.padding[1], dilated.padding_end[1]) == (4, 5)
    x = rng.standard_normal((2, 2, 9)).astype(np.float32)
    y = conv.forward(x)
    np.testing.assert_allclose(y, ref.conv1d_forward(x, conv.weight, conv.bias, 1, (1, 2), 1, 1),
                               rtol=1e-5, atol=1e-5)
    try:
        import torch
    except ImportError:
        return
    import warnings

    twin = torch.nn.Conv1d(2, 3, 4, padding="same")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that it pads a copy for even windows
        twin.weight.copy_(torch.from_numpy(conv.weight))
        twin.bias.copy_(torch.from_numpy(conv.bias))
        np.testing.assert_allclose(y, twin(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_strided_conv1d_in_parts_of_the_batch_matches_the_oracle(rng):
    """MNIST-1D's strided layers on the "gemm" plan, whose parts hold several examples' columns
    side by side (7 and 15 parts of a batch of 100): forward and every gradient against float64."""
    from numbacnn.backend.cpu_conv import gemm_parts

    for c_in, length in ((1, 40), (25, 10)):
        conv = nc.Conv1D(c_in, 25, 3 if c_in > 1 else 5, stride=2, padding=1).initialize(rng)
        assert conv.strategy == "gemm"
        x = rng.standard_normal((100, c_in, length)).astype(np.float32)
        assert 1 < gemm_parts(conv.geometry, (100, c_in, 1, length)) < 100
        y = conv.forward(x, training=True).copy()
        dy = rng.standard_normal(y.shape).astype(np.float32)
        dx = conv.backward(dy).copy()
        k = conv.kernel
        np.testing.assert_allclose(y, ref.conv1d_forward(x, conv.weight, conv.bias, 2, (1, 1), 1, 1),
                                   rtol=1e-5, atol=1e-5)
        edx, edw, edb = ref.conv1d_backward(dy, x, conv.weight, 2, (1, 1), 1, 1)
        assert conv.weight.shape[2] == k
        for got, want in ((dx, edx), (conv.dweight, edw), (conv.dbias, edb)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_normalize_fits_each_channel_of_series(rng):
    scale, shift = np.array([[2.0], [50.0], [0.1]]), np.array([[1.0], [-7.0], [3.0]])
    x = (rng.standard_normal((30, 3, 20)) * scale + shift).astype(np.float32)
    norm = nc.Normalize.fit(x)
    np.testing.assert_allclose(norm.mean, x.astype(np.float64).mean(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(norm.std, x.astype(np.float64).std(axis=(0, 2)), rtol=1e-5)
    y = norm.forward(x)
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-4)
    np.testing.assert_allclose(y.std(axis=(0, 2)), 1, atol=1e-4)


def test_inference_folds_batchnorm_into_the_conv1d_before_it(rng):
    """At inference a Conv1D takes the BatchNorm1D after it (and that BatchNorm's ReLU) into its
    weights, as Conv2D does BatchNorm2D: the folded forward equals the unfused one within float32
    rounding, and follows the running statistics as they change."""
    net = build_network("conv1d(8,5,padding=same),bn,relu,conv1d(6,3,stride=2,padding=1,bias=False),bn,"
                        "res(conv1d(6,3,padding=same),bn,relu),gap", (2, 30), 3, seed=0)
    convs = [la for la in net.all_layers() if isinstance(la, nc.Conv1D)]
    assert all(c.fusion.infer_bn is not None for c in convs)
    x = rng.standard_normal((16, 2, 30)).astype(np.float32)
    for _ in range(2):
        net.forward(x, training=True)  # running statistics move: the fold must follow
        folded = net.forward(x).copy()
        with net.unfused():
            plain = net.forward(x).copy()
        np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-6)
