"""Elementwise activations and dropout on flat float32 arrays, forward and backward."""
import numpy as np
from numba import prange

from ..._config import kernel

_BLOCK = 8192


@kernel(fastmath=False)
def relu_forward(y, x):
    """y = max(x, 0) (NaN propagates). y, x: (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        for i in range(blk * _BLOCK, min(M, (blk + 1) * _BLOCK)):
            v = x[i]
            y[i] = v if not v < np.float32(0.0) else np.float32(0.0)


@kernel()
def relu_backward(dx, dy, y):
    """dx = dy where y > 0, else 0. All (M,) flat."""
    M = y.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        for i in range(blk * _BLOCK, min(M, (blk + 1) * _BLOCK)):
            dx[i] = dy[i] if y[i] > np.float32(0.0) else np.float32(0.0)


@kernel()
def tanh_forward(y, x):
    """y = tanh(x). (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        for i in range(blk * _BLOCK, min(M, (blk + 1) * _BLOCK)):
            y[i] = np.tanh(x[i])


@kernel()
def tanh_backward(dx, dy, y):
    """dx = dy * (1 - y**2). (M,) flat."""
    M = y.shape[0]
    one = np.float32(1.0)
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        for i in range(blk * _BLOCK, min(M, (blk + 1) * _BLOCK)):
            dx[i] = dy[i] * (one - y[i] * y[i])


@kernel()
def dropout_forward(y, x, mask):
    """y = x * mask, where mask holds 0 or 1/(1-p) (inverted dropout). (M,) flat."""
    M = x.shape[0]
    for blk in prange((M + _BLOCK - 1) // _BLOCK):  # disjoint element ranges
        for i in range(blk * _BLOCK, min(M, (blk + 1) * _BLOCK)):
            y[i] = x[i] * mask[i]


@kernel(parallel=False)
def dropout_backward(dx, dy, mask):
    """dx = dy * mask. (M,) flat."""
    dropout_forward(dx, dy, mask)
