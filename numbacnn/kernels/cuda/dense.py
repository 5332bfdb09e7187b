"""Fully connected layer on the GPU: the three products (forward, input and weight gradients) by one
tiled GEMM kernel in shared memory (32 x 32 tiles, 16 x 16 threads of 2 x 2 outputs: a dense
layer's products are small, and small tiles give them more blocks); every output element is one
thread's sum in a fixed order (no atomics: deterministic)."""
import math

from numba import cuda, float32

from ...runtime.config import declare
from ._launch import on, zero_fill

BM = 32   # tile rows
BN = 32   # tile columns
BK = 16   # reduction slice staged per step
TD = 16   # threads per block side: each thread 2 x 2 outputs (rows ty, ty + 16; columns tx, tx + 16)
BM1, BN1 = BM + 1, BN + 1  # padded rows of staged tiles that are stored down their columns


@cuda.jit(device=True)
def _slice_product(As, Bs, ty, tx, c00, c01, c10, c11):
    """The 2 x 2 outputs' sums over the staged slice: As[kk, row], Bs[kk, column]."""
    for kk in range(BK):
        a0 = As[kk, ty]
        a1 = As[kk, ty + TD]
        b0 = Bs[kk, tx]
        b1 = Bs[kk, tx + TD]
        c00 += a0 * b0
        c01 += a0 * b1
        c10 += a1 * b0
        c11 += a1 * b1
    return c00, c01, c10, c11


@cuda.jit(device=True)
def _put(c, m, n, v, bias, has_bias):
    if m < c.shape[0] and n < c.shape[1]:
        if has_bias:
            v += bias[n]
        c[m, n] = v


@cuda.jit
def _gemm(c, a, bm, bias, ta, tb, has_bias):
    """c[m, n] = sum_k A[m, k] B[k, n] (+ bias[n]); A = a, or a.T when ta; B = bm, or bm.T when tb."""
    M, Nc = c.shape
    K = a.shape[0] if ta else a.shape[1]
    As = cuda.shared.array((BK, BM1), float32)
    Bs = cuda.shared.array((BK, BN1), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    t = ty * TD + tx
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    c00 = c01 = c10 = c11 = float32(0)
    for k0 in range(0, K, BK):
        for i in range(2):  # A's slice: consecutive threads read consecutive addresses
            if ta:
                kk, mm = t // BM + 8 * i, t % BM
            else:
                kk, mm = t % BK, t // BK + TD * i
            m, k = row0 + mm, k0 + kk
            v = float32(0)
            if m < M and k < K:
                v = a[k, m] if ta else a[m, k]
            As[kk, mm] = v
        for i in range(2):
            if tb:
                kk, nn = t % BK, t // BK + TD * i
            else:
                kk, nn = t // BN + 8 * i, t % BN
            n, k = col0 + nn, k0 + kk
            v = float32(0)
            if n < Nc and k < K:
                v = bm[n, k] if tb else bm[k, n]
            Bs[kk, nn] = v
        cuda.syncthreads()
        c00, c01, c10, c11 = _slice_product(As, Bs, ty, tx, c00, c01, c10, c11)
        cuda.syncthreads()
    _put(c, row0 + ty, col0 + tx, c00, bias, has_bias)
    _put(c, row0 + ty, col0 + tx + TD, c01, bias, has_bias)
    _put(c, row0 + ty + TD, col0 + tx, c10, bias, has_bias)
    _put(c, row0 + ty + TD, col0 + tx + TD, c11, bias, has_bias)


@cuda.jit
def _bias_grad(db, dout):
    j = cuda.grid(1)
    if j < db.shape[0]:
        s = float32(0)
        for n in range(dout.shape[0]):
            s += dout[n, j]
        db[j] = s


def _grid(c):
    return on((math.ceil(c.shape[1] / BN), math.ceil(c.shape[0] / BM)), (TD, TD))


@declare
def dense_forward(out, x, w, b):
    """out = x w.T + b."""
    _gemm[_grid(out)](out, x, w, b, 0, 1, 1)


@declare
def dense_backward(dx, dw, db, dout, x, w, need_dx, need_dw):
    """dx = dout w (when need_dx), dw = dout.T x (zeros unless need_dw), db = the batch sum of dout."""
    if need_dx:
        _gemm[_grid(dx)](dx, dout, w, db, 0, 0, 0)
    if need_dw:
        _gemm[_grid(dw)](dw, dout, x, db, 1, 0, 0)
    else:
        zero_fill(dw)
    _bias_grad[on(math.ceil(db.shape[0] / 128), 128)](db, dout)
