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
from ._util import n_chunks, zero_parts
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


@kernel(parallel=False)
def _epilogue(o, yt, b, Wp, relu):
    """o (Co, OH, OW) = wide GEMM rows yt (Co, L) + bias (then max(., 0) when relu)."""
    Co, OH, OW = o.shape
    zero = np.float32(0.0)
    for co in range(Co):
        bias = b[co]
        for oy in range(OH):
            src = yt[co, oy * Wp:]
            dst = o[co, oy]
            if relu:
                for ox in range(OW):
                    v = src[ox] + bias
                    dst[ox] = v if v > zero else zero
            else:
                for ox in range(OW):
                    dst[ox] = src[ox] + bias


@kernel(parallel=False)
def _epilogue_relu_maxpool(o, a, yt, b, Wp, OW, PKH, PKW):
    """Fused bias + ReLU + max pooling (window PKH x PKW, stride = window, no padding) of the wide
    GEMM rows yt (Co, L), which are overwritten. o, a: (Co, PH, PW) pooled values and argmax, the
    argmax as an index into the (OH, OW) convolution output plane, ties to the first maximum in
    row-major window order (as maxpool2d_forward). After the ReLU there is no NaN, so plain
    comparisons are exact."""
    Co, PH, PW = o.shape
    L = yt.shape[1]
    zero = np.float32(0.0)
    for co in range(Co):
        bias = b[co]
        row = yt[co]
        for j in range(L):  # contiguous: vectorises
            v = row[j] + bias
            row[j] = v if v > zero else zero
        for py in range(PH):
            orow = o[co, py]
            arow = a[co, py]
            oy = py * PKH
            if PKH == 2 and PKW == 2:  # branch-free selects so that the loop vectorises
                r0 = row[oy * Wp:]
                r1 = row[(oy + 1) * Wp:]
                base = oy * OW
                for px in range(PW):
                    i = 2 * px
                    v0, v1, v2, v3 = r0[i], r0[i + 1], r1[i], r1[i + 1]
                    t01 = v1 > v0
                    b01 = v1 if t01 else v0
                    i01 = i + 1 if t01 else i
                    t23 = v3 > v2
                    b23 = v3 if t23 else v2
                    i23 = OW + i + 1 if t23 else OW + i
                    t = b23 > b01  # strict: row 0 wins ties
                    orow[px] = b23 if t else b01
                    arow[px] = base + (i23 if t else i01)
            else:
                for px in range(PW):
                    best = np.float32(-1.0)
                    best_i = 0
                    for ky in range(PKH):
                        src = row[(oy + ky) * Wp:]
                        for kx in range(PKW):
                            ox = px * PKW + kx
                            if src[ox] > best:
                                best = src[ox]
                                best_i = (oy + ky) * OW + ox
                    orow[px] = best
                    arow[px] = best_i


@kernel()
def conv2d_forward_wide(out, argmax, yw, cols, xpad, x, w, b, PH, PW, relu, PKH, PKW, keep_cols):
    """out = conv(x, w) + b, stride 1, zero padding (PH, PW); max(., 0) when relu (fused ReLU).
    With PKH > 0 (and relu), ReLU and a PKH x PKW max pool with stride = window are fused too:
    out and argmax then hold the pooled values and their argmax (see _epilogue_relu_maxpool).

    out: (N, Co, OH, OW), or (N, Co, OH // PKH, OW // PKW) pooled; argmax: pooled shape, int32
    (unused without pooling); x: (N, Ci, H, W); w: (Co, Ci, KH, KW); b: (Co,).
    Workspaces, indexed by thread: yw (T, Co, L); xpad (T, Ci, H + 2PH, W + 2PW) when padded.
    cols: (N, Ci*KH*KW, L) when keep_cols (the backward's cache, one per example), else (T, ...).
    T is at least numba's thread count.
    """
    N, Ci, H, W = x.shape
    Co, _, KH, KW = w.shape
    Wp = W + 2 * PW
    OH = H + 2 * PH - KH + 1
    OW = Wp - KW + 1
    L = (OH - 1) * Wp + OW
    ckk = Ci * KH * KW
    padded = PH > 0 or PW > 0
    wf = w.reshape(Co * ckk)
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
        if PKH > 0:
            _epilogue_relu_maxpool(out[n], argmax[n], yt, b, Wp, OW, PKH, PKW)
        else:
            _epilogue(out[n], yt, b, Wp, relu)


@kernel(parallel=False)
def _wide_grad(g, dout, y, Wp, relu):
    """g (Co, L) = dout (Co, OH, OW) on wide rows, zero where the fused ReLU's output y was not
    positive and in the junk columns; returns nothing, adds nothing."""
    Co, OH, OW = dout.shape
    zero = np.float32(0.0)
    for co in range(Co):
        for oy in range(OH):
            src = dout[co, oy]
            yr = y[co, oy]
            dst = g[co, oy * Wp:]
            for ox in range(OW):
                dst[ox] = src[ox] if (not relu or yr[ox] > zero) else zero
            if oy < OH - 1:
                for ox in range(OW, Wp):
                    dst[ox] = zero


@kernel(parallel=False)
def _wide_grad_pooled(g, dout, y, a, Wp, OW):
    """g (Co, L) = the gradient of the fused ReLU + max pool routed to each window's argmax a
    (Co, PH, PW) on wide rows (zero elsewhere); y, dout: pooled values and their gradient."""
    Co, L = g.shape
    PH, PW = dout.shape[1], dout.shape[2]
    zero = np.float32(0.0)
    for co in range(Co):
        row = g[co]
        for j in range(L):
            row[j] = zero
        for py in range(PH):
            for px in range(PW):
                if y[co, py, px] > zero:  # the ReLU passed the maximum
                    i = a[co, py, px]
                    row[(i // OW) * Wp + i % OW] = dout[co, py, px]


@kernel()
def conv2d_backward_wide(dx, dw_parts, db_parts, gw, dcols, dpad, dout, cols, w, y, argmax, OH, OW,
                         PH, PW, chunk, need_dx, relu, pooled):
    """Gradients of conv2d_forward_wide. Chunk c writes dw_parts[c] and db_parts[c] (reduce them with
    sum_chunks) and uses workspaces gw[c], dcols[c], dpad[c]. With relu, dout is masked where the
    forward output y was not positive; when pooled, dout, y and argmax are the fused pool's.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (n_chunks, Co, Ci*KH*KW);
    db_parts: (n_chunks, Co); gw: (n_chunks, Co, L); dcols: (n_chunks, Ci*KH*KW, L);
    dpad: (n_chunks, Ci, H + 2PH, W + 2PW) when padded; dout, y: the forward's output shape;
    cols: the forward's cache (N, Ci*KH*KW, L); OH, OW: the convolution's output size.
    """
    N = dout.shape[0]
    Ci, H, W = dx.shape[1], dx.shape[2], dx.shape[3]  # only read when need_dx
    Co, _, KH, KW = w.shape
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
        zero_parts(acc, dbc)
        for n in range(c * chunk, min(N, (c + 1) * chunk)):
            if pooled:
                _wide_grad_pooled(g, dout[n], y[n], argmax[n], Wp, OW)
            else:
                _wide_grad(g, dout[n], y[n], Wp, relu)
            for co in range(Co):  # junk columns and unpooled positions are zero
                s = zero
                for j in range(L):
                    s += g[co, j]
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
