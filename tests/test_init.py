"""Data-dependent and structured initialisations: the whitening convolution (checked by what it
does to the patches' covariance, computed independently) and dirac filters (against torch's)."""
import numpy as np
import pytest
from conftest import f32

import numbacnn as nc


def test_whitening_filters_decorrelate_the_patches(rng):
    # correlated colour images: channels share a smooth component
    base = rng.standard_normal((40, 1, 9, 8))
    x = f32(np.concatenate([base + 0.3 * rng.standard_normal((40, 1, 9, 8)) for _ in range(3)], 1))
    conv = nc.Conv2D(3, 24, 2, bias=False).initialize(0).init_whitening(x, eps=1e-6)
    w = conv.weight.astype(np.float64).reshape(24, 12)
    np.testing.assert_array_equal(conv.weight[12:], -conv.weight[:12])
    # every 2x2 patch as a row, built with explicit loops (not the layer's sliding windows)
    rows = [x[n, :, i:i + 2, j:j + 2].reshape(-1) for n in range(40) for i in range(8) for j in range(7)]
    p = np.array(rows, np.float64)
    cov = p.T @ p / len(p)
    whitened = w[:12] @ cov @ w[:12].T  # the covariance of the first 12 output channels
    np.testing.assert_allclose(whitened, np.eye(12), atol=1e-4)
    values = np.sort(np.linalg.eigvalsh(cov))[::-1]
    norms = np.linalg.norm(w[:12], axis=1)  # 1 / sqrt(eigenvalue + eps), largest eigenvalue first
    np.testing.assert_allclose(norms, 1 / np.sqrt(values + 1e-6), rtol=1e-4)
    # the convolution computes those projections
    y = conv.forward(x[:2])
    np.testing.assert_allclose(y[0, :12, 3, 4], w[:12] @ x[0, :, 3:5, 4:6].reshape(-1), rtol=1e-4, atol=1e-4)


def test_whitening_and_dirac_refuse_what_they_cannot_do(rng):
    x = f32(rng.random((4, 3, 6, 6)))
    with pytest.raises(ValueError, match="whitening needs 2 \\* C_in \\* KH \\* KW = 24 output channels"):
        nc.Conv2D(3, 16, 2).initialize(0).init_whitening(x)
    with pytest.raises(ValueError, match="whitening needs images \\(N, 3, H, W\\)"):
        nc.Conv2D(3, 24, 2).initialize(0).init_whitening(x[:, :2])
    with pytest.raises(RuntimeError, match="no weights yet"):
        nc.Conv2D(3, 24, 2).init_dirac()


def test_dirac_filters_match_torch_and_pass_channels_through(rng):
    conv = nc.Conv2D(4, 6, 3, padding=1).initialize(0)
    before = np.array(conv.weight)
    conv.init_dirac()
    np.testing.assert_array_equal(conv.weight[4:], before[4:])  # the other filters stay
    torch = pytest.importorskip("torch")
    want = torch.empty(4, 4, 3, 3)
    torch.nn.init.dirac_(want)
    np.testing.assert_array_equal(conv.weight[:4], want.numpy())
    conv.bias[...] = 0
    x = f32(rng.standard_normal((2, 4, 5, 5)))
    np.testing.assert_allclose(conv.forward(x)[:, :4], x, atol=1e-6)
