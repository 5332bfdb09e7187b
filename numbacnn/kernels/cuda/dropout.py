"""Inverted dropout on the GPU: the CPU file's generator (Philox4x32-10 on (group, draw) under the
seed), one thread per group of four values, so both devices draw the same masks."""
import numpy as np
from numba import cuda

from ...runtime.config import declare
from ..cpu.dropout import philox4x32
from ._launch import grid, on

_LO, _S32, _S8 = np.uint64(0xFFFFFFFF), np.uint64(32), np.uint64(8)
_philox4x32 = cuda.jit(device=True)(getattr(philox4x32, "py_func", philox4x32))  # the CPU's Python


@cuda.jit
def _dropout_draw(y, mask, x, state, threshold, scale):
    M = x.size
    off = state[2]
    first = off >> np.uint64(2)
    g = cuda.grid(1)
    if g >= np.int64(((off + np.uint64(M) + np.uint64(3)) >> np.uint64(2)) - first):
        return
    group = first + np.uint64(g)
    w0, w1, w2, w3 = _philox4x32(group & _LO, group >> _S32, state[1] & _LO, state[1] >> _S32,
                                 state[0] & _LO, state[0] >> _S32)
    base = np.int64(group << np.uint64(2)) - np.int64(off)
    for w in range(4):
        i = base + w
        if 0 <= i < M:
            word = w0 if w == 0 else w1 if w == 1 else w2 if w == 2 else w3
            m = scale if (word >> _S8) >= np.uint64(threshold) else np.float32(0.0)
            mask[i] = m
            y[i] = x[i] * m


@cuda.jit
def _fill_mask(y, mask, x, scale):
    i = cuda.grid(1)
    if i < y.size:
        mask[i] = scale
        y[i] = x[i] * scale


@cuda.jit
def _advance(state):
    if cuda.grid(1) == 0:
        state[1] += np.uint64(1)


@cuda.jit
def _mul(out, a, mask):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * mask[i]


@declare
def dropout_forward(y, mask, x, state, threshold, scale):
    """As the CPU kernel: a thread per group of four values (M // 4 + 2 threads cover any offset;
    each thread finds its group from the offset on the device)."""
    scale = np.float32(scale)
    if threshold == 0:
        _fill_mask[grid(y.size)](y, mask, x, scale)
    else:
        _dropout_draw[grid(y.size // 4 + 2)](y, mask, x, state, threshold, scale)


@declare
def dropout_advance(state):
    _advance[on(1, 1)](state)


@declare
def dropout_backward(dx, dy, mask):
    _mul[grid(dx.size)](dx, dy, mask)
