"""GELU: the kernels against the float64 oracle, the layer in networks (gradients, PyTorch, ONNX,
checkpoints, the spec grammar)."""
import numpy as np
import pytest
import reference as ref
from conftest import f32

import numbacnn as nc
from numbacnn.kernels.cpu import activations as A

FORMS = ["none", "tanh"]


@pytest.mark.parametrize("approximate", FORMS)
def test_the_kernels_match_the_float64_oracle_over_the_whole_range(approximate):
    # a dense grid through the clamp of the rational erf (|x / sqrt 2| = 4) and the tanh's
    # (|u| = 9), tiny and huge magnitudes, and the special values
    grid = np.concatenate([np.linspace(-12, 12, 200001), np.linspace(5.5, 5.8, 3001),
                           np.geomspace(1e-30, 1, 2001), [1e4, 1e30]])
    x = f32(np.concatenate([grid, -grid]))
    tanh_form = approximate == "tanh"
    y, dx, dy = np.empty_like(x), np.empty_like(x), f32(np.linspace(-2, 2, x.size))
    A.gelu_forward(y, x, tanh_form)
    A.gelu_backward(dx, dy, x, tanh_form)
    want = ref.gelu(x, approximate)
    # 1.3e-6 and 1.8e-6 measured (benchmarks/fit_erf.py); float32 rounding of |y| > 1 on top
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)
    # |dy| <= 2 times GELU' within 1.8e-6 (erf form); the tanh form's 1 - tanh**2 cancels in
    # float32 where tanh nears -1 (x near -5): 7e-6 measured there, as in any float32 tanh
    atol = 5e-6 if approximate == "none" else 1.5e-5
    np.testing.assert_allclose(dx, dy * ref.gelu_grad(x, approximate), rtol=0, atol=atol)
    special = f32([0.0, np.inf, -np.inf, np.nan])
    ys = np.empty_like(special)
    A.gelu_forward(ys, special, tanh_form)
    assert ys[0] == 0.0 and ys[1] == np.inf and np.isnan(ys[3])
    assert ys[2] == 0.0 or np.isnan(ys[2])  # -inf * 0: torch gives NaN as well


@pytest.mark.parametrize("approximate", FORMS)
def test_blocks_and_threads_do_not_change_the_bits(approximate):
    x = f32(np.random.default_rng(0).standard_normal(3 * 8192 + 17) * 4)  # several parallel blocks
    tanh_form = approximate == "tanh"
    outs = []
    for threads in (1, 2):
        before = nc.get_num_threads()
        nc.set_num_threads(threads)
        try:
            y, dx = np.empty_like(x), np.empty_like(x)
            A.gelu_forward(y, x, tanh_form)
            A.gelu_backward(dx, x[::-1].copy(), x, tanh_form)
        finally:
            nc.set_num_threads(before)
        outs.append((y, dx))
    for a, b in zip(outs[0], outs[1]):
        np.testing.assert_array_equal(a, b)
    one = np.empty(1, np.float32)  # an element computed alone equals the same element in a block
    A.gelu_forward(one, x[8195:8196], tanh_form)
    assert one[0] == outs[0][0][8195]


def _gelu_net(approximate, seed=0):
    return nc.Sequential([nc.Conv2D(2, 3, 3, padding=1), nc.GELU(approximate), nc.MaxPool2D(2),
                          nc.Flatten(), nc.Dense(3 * 3 * 2, 5), nc.GELU(approximate), nc.Dense(5, 3)],
                         seed=seed)


SPEC = lambda a: [("conv", 1, 1), ("gelu", a), ("maxpool", 2, 2, 0), ("flatten",), ("dense",),  # noqa: E731
                  ("gelu", a), ("dense",)]


@pytest.mark.parametrize("approximate", FORMS)
def test_network_gradients_match_the_float64_oracle(rng, approximate):
    net = _gelu_net(approximate)
    x = f32(rng.standard_normal((4, 2, 6, 5)) * 2)
    y = rng.integers(0, 3, 4)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    dx = net.backward(d)
    params = [v.astype(np.float64) for v in net.state_dict().values()]
    eloss, egrads, edx = ref.network_gradients(SPEC(approximate), params, x.astype(np.float64), y)
    assert loss == pytest.approx(eloss, rel=1e-5)
    for (name, g), e in zip(net.grad_dict().items(), egrads):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=2e-6, err_msg=name)
    np.testing.assert_allclose(dx, edx, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("approximate", FORMS)
def test_matches_pytorch_forward_and_backward(rng, approximate):
    torch = pytest.importorskip("torch")
    layer = nc.GELU(approximate)
    x = f32(rng.standard_normal((3, 4, 5, 6)) * 3)
    dy = f32(rng.standard_normal(x.shape))
    y = layer.forward(x, training=True)
    dx = layer.backward(dy)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = layer.torch_twin(torch)(xt)
    yt.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=4e-6)


@pytest.mark.parametrize("approximate", FORMS)
def test_onnx_export_matches_the_network(tmp_path, rng, approximate):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    spec = f"conv(4,3),gelu({approximate}),maxpool(2),dense(6),gelu(approximate={approximate})"
    net = nc.build_network(spec, (1, 9, 9), 3, seed=0)
    path = str(tmp_path / "g.onnx")
    nc.export_onnx(net, path)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    x = f32(rng.standard_normal((5, 1, 9, 9)))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": x})[0], net.forward(x), rtol=1e-5, atol=1e-5)


def test_spec_grammar_checkpoint_and_summary(tmp_path):
    net = nc.build_network("conv(4,3),gelu,gelu(tanh),dense(5)", (1, 6, 6), 3, seed=0)
    kinds = [type(layer).__name__ for layer in net.layers]
    assert kinds == ["Conv2D", "GELU", "GELU", "Flatten", "Dense", "Dense"]
    assert [layer.approximate for layer in net.layers[1:3]] == ["none", "tanh"]
    path = str(tmp_path / "g.npz")
    nc.save(net, path)
    back = nc.load(path)
    assert repr(back.layers[2]) == "GELU(approximate='tanh')"
    x = f32(np.random.default_rng(0).standard_normal((2, 1, 6, 6)))
    np.testing.assert_array_equal(back.forward(x), net.forward(x))
    with pytest.raises(nc.ArchitectureError, match="approximate must be 'none' or 'tanh'"):
        nc.build_network("conv(4,3),gelu(erf)", (1, 6, 6), 3)
