"""Fully connected layer: out = x @ w.T + b, one BLAS GEMM per chunk of examples."""
import numpy as np
from numba import prange

from ..._config import kernel
from ._util import n_chunks


@kernel()
def dense_forward(out, x, w, b, chunk):
    """out: (N, F_out); x: (N, F_in); w: (F_out, F_in); b: (F_out,)."""
    N = x.shape[0]
    for c in prange(n_chunks(N, chunk)):  # disjoint row ranges
        n0 = c * chunk
        n1 = min(N, n0 + chunk)
        o = out[n0:n1]
        np.dot(x[n0:n1], w.T, o)
        for n in range(n1 - n0):
            row = o[n]
            for j in range(row.shape[0]):
                row[j] += b[j]


@kernel()
def dense_backward(dx, dw_parts, db, dout, x, w, chunk, need_dx):
    """dx = dout @ w; dw_parts[c] = dout[chunk].T @ x[chunk]; db = dout summed over examples.

    dx: (N, F_in); dw_parts: (n_chunks, F_out, F_in) (reduce with sum_chunks); db: (F_out,).
    """
    N = x.shape[0]
    F_out = w.shape[0]
    for c in prange(n_chunks(N, chunk)):  # each chunk writes its own rows and dw_parts[c]
        n0 = c * chunk
        n1 = min(N, n0 + chunk)
        g = dout[n0:n1]
        np.dot(g.T, x[n0:n1], dw_parts[c])
        if need_dx:
            np.dot(g, w, dx[n0:n1])
    for j in prange(F_out):  # bias: one output feature per iteration, examples in order
        s = np.float32(0.0)
        for n in range(N):
            s += dout[n, j]
        db[j] = s
