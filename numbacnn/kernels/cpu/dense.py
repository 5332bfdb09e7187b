"""Fully connected layer: out = x @ w.T + b, as single-threaded BLAS GEMMs over fixed blocks of
features (one block per prange iteration). Every GEMM spans the whole batch, so no gradient needs a
cross-thread reduction and the results do not depend on the thread count."""
import numpy as np
from numba import prange

from ..._config import kernel
from ._util import n_chunks
from .blas import sgemm


@kernel(parallel=False)
def feature_block(features, minimum):
    """Block size for splitting `features` into about 8 blocks (a multiple of 16, >= minimum);
    it depends on the shape only, never on the thread count."""
    b = -(-features // 8)
    b = -(-b // 16) * 16
    return max(minimum, b)


@kernel()
def dense_forward(out, x, w, b):
    """out: (N, F_out) = x (N, F_in) @ w.T (F_in, F_out) + b (F_out,)."""
    N, F_in = x.shape
    F_out = w.shape[0]
    xf = x.reshape(N * F_in)
    wf = w.reshape(F_out * F_in)
    of = out.reshape(N * F_out)
    block = feature_block(F_out, 32)
    for c in prange(n_chunks(F_out, block)):  # disjoint column ranges of out
        j0 = c * block
        j1 = min(F_out, j0 + block)
        sgemm(False, True, N, j1 - j0, F_in, np.float32(1.0), xf, 0, F_in, wf, j0 * F_in, F_in,
              np.float32(0.0), of, j0, F_out)
        bs = b[j0:j1]
        for n in range(N):
            row = out[n, j0:j1]
            for j in range(j1 - j0):
                row[j] += bs[j]


@kernel()
def dense_backward(dx, dw, db, dout, x, w, need_dx):
    """dw = dout.T @ x, db = dout summed over the batch, dx = dout @ w when need_dx.

    dx: (N, F_in); dw: (F_out, F_in); db: (F_out,); dout: (N, F_out); x: (N, F_in); w: (F_out, F_in).
    """
    N, F_in = x.shape
    F_out = w.shape[0]
    xf = x.reshape(N * F_in)
    wf = w.reshape(F_out * F_in)
    gf = dout.reshape(N * F_out)
    dwf = dw.reshape(F_out * F_in)
    dxf = dx.reshape(dx.size)
    block = feature_block(F_in, 64)
    for c in prange(n_chunks(F_in, block)):  # disjoint column ranges of dw and dx
        i0 = c * block
        i1 = min(F_in, i0 + block)
        # dw[:, i0:i1] (F_out, i1 - i0) = dout.T (F_out, N) @ x[:, i0:i1] (N, i1 - i0)
        sgemm(True, False, F_out, i1 - i0, N, np.float32(1.0), gf, 0, F_out, xf, i0, F_in,
              np.float32(0.0), dwf, i0, F_in)
        if need_dx:
            # dx[:, i0:i1] (N, i1 - i0) = dout (N, F_out) @ w[:, i0:i1] (F_out, i1 - i0)
            sgemm(False, False, N, i1 - i0, F_out, np.float32(1.0), gf, 0, F_out, wf, i0, F_in,
                  np.float32(0.0), dxf, i0, F_in)
    for j in range(F_out):  # bias: examples in order
        s = np.float32(0.0)
        for n in range(N):
            s += dout[n, j]
        db[j] = s
