"""Per-channel input normalisation on the GPU (the CPU file's operations): one thread per element."""
from numba import cuda

from ...runtime.config import declare
from ._launch import grid


@cuda.jit
def _normalize_forward(y, x, mean, std):
    N, C, S = x.shape
    t = cuda.grid(1)
    if t >= N * C * S:
        return
    n, c, i = t // (C * S), (t // S) % C, t % S
    y[n, c, i] = (x[n, c, i] - mean[c]) / std[c]


@cuda.jit
def _normalize_backward(dx, dy, std):
    N, C, S = dy.shape
    t = cuda.grid(1)
    if t >= N * C * S:
        return
    n, c, i = t // (C * S), (t // S) % C, t % S
    dx[n, c, i] = dy[n, c, i] / std[c]


@declare
def normalize_forward(y, x, mean, std):
    """y (N, C, S) = (x - mean[c]) / std[c]."""
    _normalize_forward[grid(y.size)](y, x, mean, std)


@declare
def normalize_backward(dx, dy, std):
    _normalize_backward[grid(dx.size)](dx, dy, std)
