"""Elementwise activations and dropout on flat float32 arrays, forward and backward.

Each prange iteration handles one block through slices indexed from 0 (see optim.py: a computed
offset kept the loops from vectorising)."""
import numpy as np
from numba import prange

from ..._config import kernel

_BLOCK = 8192


@kernel(fastmath=False)
def relu_forward(y, x):
    """y = max(x, 0) (NaN propagates). y, x: (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        lo = blk * _BLOCK
        hi = min(M, lo + _BLOCK)
        ys, xs = y[lo:hi], x[lo:hi]
        for i in range(hi - lo):
            v = xs[i]
            ys[i] = v if not v < np.float32(0.0) else np.float32(0.0)


@kernel()
def relu_backward(dx, dy, y):
    """dx = dy where y > 0, else 0. All (M,) flat."""
    M = y.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        lo = blk * _BLOCK
        hi = min(M, lo + _BLOCK)
        dxs, dys, ys = dx[lo:hi], dy[lo:hi], y[lo:hi]
        for i in range(hi - lo):
            dxs[i] = dys[i] if ys[i] > np.float32(0.0) else np.float32(0.0)


@kernel()
def tanh_forward(y, x):
    """y = tanh(x). (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        lo = blk * _BLOCK
        hi = min(M, lo + _BLOCK)
        ys, xs = y[lo:hi], x[lo:hi]
        for i in range(hi - lo):
            ys[i] = np.tanh(xs[i])


@kernel()
def tanh_backward(dx, dy, y):
    """dx = dy * (1 - y**2). (M,) flat."""
    M = y.shape[0]
    one = np.float32(1.0)
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        lo = blk * _BLOCK
        hi = min(M, lo + _BLOCK)
        dxs, dys, ys = dx[lo:hi], dy[lo:hi], y[lo:hi]
        for i in range(hi - lo):
            dxs[i] = dys[i] * (one - ys[i] * ys[i])


@kernel()
def dropout_forward(y, x, mask):
    """y = x * mask, where mask holds 0 or 1/(1-p) (inverted dropout). (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        lo = blk * _BLOCK
        hi = min(M, lo + _BLOCK)
        ys, xs, ms = y[lo:hi], x[lo:hi], mask[lo:hi]
        for i in range(hi - lo):
            ys[i] = xs[i] * ms[i]


@kernel(parallel=False)
def dropout_backward(dx, dy, mask):
    """dx = dy * mask. (M,) flat."""
    dropout_forward(dx, dy, mask)
