"""Per-channel input normalisation, forward and backward: y = (x - mean[c]) / std[c]
(a colour data set's channel statistics, applied by the network's first layer)."""
import numpy as np
from numba import prange

from ..._config import kernel


@kernel()
def normalize_forward(y, x, mean, std):
    """y[n, c, s] = (x[n, c, s] - mean[c]) / std[c]. y, x: (N, C, S); mean, std: (C,)."""
    for nc in prange(normalize_forward_blocks(y, x, mean, std)):  # one plane per iteration
        normalize_forward_block(np.int64(nc), y, x, mean, std)


@kernel(parallel=False)
def normalize_forward_blocks(y, x, mean, std):
    return x.shape[0] * x.shape[1]


@kernel(parallel=False)
def normalize_forward_block(nc, y, x, mean, std):
    """Plane nc = (n, c) of normalize_forward."""
    C, S = x.shape[1], x.shape[2]
    n = nc // C
    c = nc % C
    m, k = mean[c], std[c]
    ys, xs = y[n, c], x[n, c]
    for i in range(S):
        ys[i] = (xs[i] - m) / k


@kernel()
def normalize_backward(dx, dy, std):
    """dx[n, c, s] = dy[n, c, s] / std[c]. dx, dy: (N, C, S); std: (C,)."""
    N, C, S = dy.shape
    for nc in prange(N * C):  # one plane per iteration
        n = nc // C
        c = nc % C
        k = std[c]
        dxs, dys = dx[n, c], dy[n, c]
        for i in range(S):
            dxs[i] = dys[i] / k
