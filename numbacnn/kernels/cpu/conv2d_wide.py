"""Stride-1 2-D convolution on "wide" rows: one BLAS GEMM per example, im2col by whole-row copies.

For a stride-1 convolution over a (padded) Hp x Wp plane, output (oy, ox) reads input
(oy + ky, ox + kx). Computing the output at every column of the input row (OW real columns plus
KW - 1 junk ones, discarded later) turns each im2col row into one contiguous slice of the plane:
    cols[(c, ky, kx), j] = x[c].flat[ky * Wp + kx + j],   j < L = (OH - 1) * Wp + OW.
So im2col is C*KH*KW memcpys of length L instead of many copies of OW elements, and col2im is as many
contiguous adds. The GEMMs go through ``blas.sgemm`` (explicit leading dimensions, beta = 1 to
accumulate weight gradients in place), single-threaded inside prange.
"""
import numba
import numpy as np
from numba import prange

from ..._config import kernel
from ._util import n_chunks
from .blas import sgemm


@kernel(parallel=False)
def im2col_wide(cols, xplane, KH, KW, Wp, L):
    """cols[(c, ky, kx), j] = xplane[c].flat[ky * Wp + kx + j] for j < L.

    cols: (C*KH*KW, L); xplane: (C, Hp, Wp), contiguous.
    """
    C = xplane.shape[0]
    plane = xplane.shape[1] * Wp
    xf = xplane.reshape(C * plane)
    for c in range(C):
        for ky in range(KH):
            for kx in range(KW):
                src = xf[c * plane + ky * Wp + kx:]
                dst = cols[(c * KH + ky) * KW + kx]
                for j in range(L):
                    dst[j] = src[j]


@kernel(parallel=False)
def col2im_wide(dplane, dcols, KH, KW, Wp, L):
    """dplane = the adjoint of im2col_wide applied to dcols (overwritten, not accumulated).

    dplane: (C, Hp, Wp); dcols: (C*KH*KW, L).
    """
    C = dplane.shape[0]
    plane = dplane.shape[1] * Wp
    df = dplane.reshape(C * plane)
    zero = np.float32(0.0)
    for i in range(C * plane):
        df[i] = zero
    for c in range(C):
        for ky in range(KH):
            for kx in range(KW):
                dst = df[c * plane + ky * Wp + kx:]
                src = dcols[(c * KH + ky) * KW + kx]
                for j in range(L):
                    dst[j] += src[j]


@kernel(parallel=False)
def _pad_plane(xp, x, PH, PW):
    """xp (C, H + 2PH, W + 2PW) = x (C, H, W) with a zero border."""
    C, H, W = x.shape
    Wp = xp.shape[2]
    zero = np.float32(0.0)
    for c in range(C):
        for i in range(xp.shape[1]):
            row = xp[c, i]
            for j in range(Wp):
                row[j] = zero
        for i in range(H):
            src = x[c, i]
            dst = xp[c, PH + i]
            for j in range(W):
                dst[PW + j] = src[j]


@kernel()
def conv2d_forward_wide(out, yw, cols, xpad, x, w, b, PH, PW, relu, keep_cols):
    """out = conv(x, w) + b, stride 1, zero padding (PH, PW); max(., 0) when relu (fused ReLU).

    out: (N, Co, OH, OW); x: (N, Ci, H, W); w: (Co, Ci, KH, KW); b: (Co,).
    Workspaces, indexed by thread: yw (T, Co, L); xpad (T, Ci, H + 2PH, W + 2PW) when padded.
    cols: (N, Ci*KH*KW, L) when keep_cols (the backward's cache, one per example), else (T, ...).
    T is at least numba's thread count.
    """
    N, Ci, H, W = x.shape
    Co, _, KH, KW = w.shape
    OH, OW = out.shape[2], out.shape[3]
    Wp = W + 2 * PW
    L = (OH - 1) * Wp + OW
    ckk = Ci * KH * KW
    padded = PH > 0 or PW > 0
    wf = w.reshape(Co * ckk)
    zero = np.float32(0.0)
    for n in prange(N):  # each example writes out[n] and its own (or its thread's) workspaces
        t = numba.get_thread_id()
        cn = cols[n] if keep_cols else cols[t]
        if padded:
            _pad_plane(xpad[t], x[n], PH, PW)
            im2col_wide(cn, xpad[t], KH, KW, Wp, L)
        else:
            im2col_wide(cn, x[n], KH, KW, Wp, L)
        yt = yw[t]
        sgemm(False, False, Co, L, ckk, np.float32(1.0), wf, 0, ckk, cn.reshape(ckk * L), 0, L,
              np.float32(0.0), yt.reshape(Co * L), 0, L)
        for co in range(Co):
            bias = b[co]
            for oy in range(OH):
                src = yt[co, oy * Wp:]
                dst = out[n, co, oy]
                if relu:
                    for ox in range(OW):
                        v = src[ox] + bias
                        dst[ox] = v if v > zero else zero
                else:
                    for ox in range(OW):
                        dst[ox] = src[ox] + bias


@kernel()
def conv2d_backward_wide(dx, dw_parts, db_parts, gw, dcols, dpad, dout, cols, w, y, PH, PW, chunk,
                         need_dx, relu):
    """Gradients of conv2d_forward_wide. Chunk c writes dw_parts[c] and db_parts[c] (reduce them with
    sum_chunks) and uses workspaces gw[c], dcols[c], dpad[c]; with relu, dout is first masked where
    the forward output y was not positive.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (n_chunks, Co, Ci*KH*KW);
    db_parts: (n_chunks, Co); gw: (n_chunks, Co, L); dcols: (n_chunks, Ci*KH*KW, L);
    dpad: (n_chunks, Ci, H + 2PH, W + 2PW) when padded; dout, y: (N, Co, OH, OW);
    cols: the forward's cache (N, Ci*KH*KW, L).
    """
    N = dout.shape[0]
    Ci, H, W = dx.shape[1], dx.shape[2], dx.shape[3]  # only read when need_dx
    Co, _, KH, KW = w.shape
    OH, OW = dout.shape[2], dout.shape[3]
    Wp = OW + KW - 1
    L = (OH - 1) * Wp + OW
    ckk = w.shape[1] * KH * KW
    padded = PH > 0 or PW > 0
    wf = w.reshape(Co * ckk)
    zero = np.float32(0.0)
    for c in prange(n_chunks(N, chunk)):  # each chunk writes its own parts, workspaces and dx[n]
        acc = dw_parts[c]
        dbc = db_parts[c]
        g = gw[c]
        # explicit loops, not array expressions: inside prange those become nested parallel loops
        for co in range(Co):
            dbc[co] = zero
            for k in range(ckk):
                acc[co, k] = zero
            for oy in range(OH - 1):  # junk columns of the wide rows stay zero
                row = g[co, oy * Wp:]
                for ox in range(OW, Wp):
                    row[ox] = zero
        for n in range(c * chunk, min(N, (c + 1) * chunk)):
            for co in range(Co):
                s = zero
                for oy in range(OH):
                    src = dout[n, co, oy]
                    yr = y[n, co, oy]
                    dst = g[co, oy * Wp:]
                    for ox in range(OW):
                        v = src[ox] if (not relu or yr[ox] > zero) else zero
                        dst[ox] = v
                        s += v
                dbc[co] += s
            gf = g.reshape(Co * L)
            # dW (Co, ckk) += g (Co, L) @ cols[n].T (L, ckk)
            sgemm(False, True, Co, ckk, L, np.float32(1.0), gf, 0, L, cols[n].reshape(ckk * L), 0, L,
                  np.float32(1.0), acc.reshape(Co * ckk), 0, ckk)
            if need_dx:
                # dcols (ckk, L) = W.T (ckk, Co) @ g (Co, L); junk columns come out zero
                dc = dcols[c]
                sgemm(True, False, ckk, L, Co, np.float32(1.0), wf, 0, ckk, gf, 0, L,
                      np.float32(0.0), dc.reshape(ckk * L), 0, L)
                if padded:
                    dp = dpad[c]
                    col2im_wide(dp, dc, KH, KW, Wp, L)
                    for ci in range(Ci):
                        for i in range(H):
                            src = dp[ci, PH + i]
                            dst = dx[n, ci, i]
                            for j in range(W):
                                dst[j] = src[PW + j]
                else:
                    col2im_wide(dx[n], dc, KH, KW, Wp, L)
