"""Strided 2-D convolution (NCHW, float32) for narrow layers, "gemm": im2col (a gather) plus one GEMM
per part of the batch (its examples' columns side by side: small outputs, a 1-D layer's 10 or 20
positions, make one GEMM of all of them instead of one tiny one each), forward and backward.
Stride-1 layers use conv2d_wide.py, and layers with a long filter (any stride) conv2d_positions.py
(see CpuBackend.conv_plan).

Weight gradients are accumulated per part and reduced in part order (no races).
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._util import add_row_sums, conv_out, part_bounds, zero_parts
from .blas import sgemm
from .microkernel import gemm_nn


@kernel()
def _out_range(k, P, S, in_size, out_size):
    """Output positions o whose input index o*S + k - P lies inside [0, in_size)."""
    lo = max(0, -((k - P) // S))
    hi = min(out_size, (in_size - 1 + P - k) // S + 1)
    return lo, max(lo, hi)


@kernel(inline=True)
def _strided_run(d, di, s, si, step, n):
    """d[di + i] = s[si + i * step] for i < n (offsets unsigned: signed ones make numba check
    every index for wraparound, 2-3x slower on resnet8's 1x1 stride-2 shortcuts)."""
    for i in range(n):
        d[di + i] = s[si + i * step]


@kernel()
def im2col(cf, c0, ld, x, KH, KW, SH, SW, PH, PW):
    """cf[c0 + (c, ky, kx) * ld + (oy, ox)] = x[c, oy*SH + ky - PH, ox*SW + kx - PW], zero where
    padded: an example's im2col matrix (C*KH*KW rows of OH*OW) in a part's matrix of rows ``ld``
    apart, starting at column c0 (its examples side by side).

    cf: flat float32; x: (C, H, W) contiguous. Works on flat indices: slicing views for every
    short row cost more than the copying itself.
    """
    C, H, W = x.shape
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    xf = x.reshape(C * H * W)
    zero = np.float32(0.0)
    for ky in range(KH):  # the taps outermost: their ranges (divisions) once, not once a channel
        y_lo, y_hi = _out_range(ky, PH, SH, H, OH)
        for kx in range(KW):
            x_lo, x_hi = _out_range(kx, PW, SW, W, OW)
            for c in range(C):
                r = ((c * KH + ky) * KW + kx) * ld + c0
                for oy in range(OH):
                    d = r + oy * OW
                    if oy < y_lo or oy >= y_hi:
                        for ox in range(OW):
                            cf[d + ox] = zero
                        continue
                    for ox in range(x_lo):
                        cf[d + ox] = zero
                    _strided_run(cf, numba.uint64(d + x_lo), xf,
                                 numba.uint64((c * H + oy * SH + ky - PH) * W + kx - PW + x_lo * SW),
                                 numba.uint64(SW), numba.uint64(x_hi - x_lo))
                    for ox in range(x_hi, OW):
                        cf[d + ox] = zero


@kernel()
def col2im(dx, cf, c0, ld, KH, KW, SH, SW, PH, PW):
    """dx[c, iy, ix] = sum of the entries of cf (an example's columns at c0, rows ld apart, as
    im2col writes them) that im2col copied from (c, iy, ix); the adjoint of im2col.

    dx: (C, H, W), overwritten, contiguous; cf: flat float32.
    """
    C, H, W = dx.shape
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    xf = dx.reshape(C * H * W)
    xf[:] = np.float32(0.0)
    for ky in range(KH):  # each input's sum still runs over (ky, kx) in order, as before
        y_lo, y_hi = _out_range(ky, PH, SH, H, OH)
        for kx in range(KW):
            x_lo, x_hi = _out_range(kx, PW, SW, W, OW)
            for c in range(C):
                r = ((c * KH + ky) * KW + kx) * ld + c0
                for oy in range(y_lo, y_hi):
                    dst = numba.uint64((c * H + oy * SH + ky - PH) * W + kx - PW + x_lo * SW)
                    src = numba.uint64(r + oy * OW + x_lo)
                    for i in range(numba.uint64(x_hi - x_lo)):  # (x_hi >= x_lo)
                        xf[dst + i * numba.uint64(SW)] += cf[src + i]


@kernel(export=True, team="blocks")
def conv2d_forward_gemm(out, cols, ytmp, x, w, b, SH, SW, PH, PW, relu):
    """out = conv(x, w) + b (then max(., 0) when relu: a fused ReLU), the batch in the P =
    cols.shape[0] parts of part_bounds: a part's examples' im2col columns side by side in cols[p]
    (kept for the backward), one GEMM for them all (ytmp[p] its result), then each example's rows.

    out: (N, Co, OH, OW); cols: (P, Ci*KH*KW, E*OH*OW) with E >= every part's size; ytmp: (P, Co,
    E*OH*OW) workspace; x: (N, Ci, H, W); w: (Co, Ci, KH, KW); b: (Co,).
    """
    args = (out, cols, ytmp, x, w, b, SH, SW, PH, PW, relu)
    parallel_blocks(conv2d_forward_gemm_blocks(*args), conv2d_forward_gemm_block, args)


@kernel()
def conv2d_forward_gemm_blocks(out, cols, ytmp, x, w, b, SH, SW, PH, PW, relu):
    return cols.shape[0]


@kernel()
def conv2d_forward_gemm_block(p, out, cols, ytmp, x, w, b, SH, SW, PH, PW, relu):
    """Part p of conv2d_forward_gemm: writes only its examples' out[n], cols[p] and ytmp[p]."""
    Co, Ci, KH, KW = w.shape
    OHW = out.shape[2] * out.shape[3]
    ckk = Ci * KH * KW
    ld = cols.shape[2]
    wf = w.reshape(Co * ckk)
    n0, n1 = part_bounds(out.shape[0], cols.shape[0], p)
    cf = cols[p].reshape(ckk * ld)
    for e in range(n1 - n0):
        im2col(cf, e * OHW, ld, x[n0 + e], KH, KW, SH, SW, PH, PW)
    cn = (n1 - n0) * OHW
    yf = ytmp[p].reshape(Co * ld)
    if cn >= 16:
        gemm_nn(yf, 0, ld, wf, 0, ckk, cf, 0, ld, Co, cn, ckk)
    else:
        sgemm(False, False, Co, cn, ckk, np.float32(1.0), wf, 0, ckk, cf, 0, ld, np.float32(0.0), yf, 0, ld)
    of = out.reshape(out.size)
    zero = np.float32(0.0)
    for e in range(n1 - n0):  # each example's rows out of the part's, biased (and rectified)
        for co in range(Co):
            d = ((n0 + e) * Co + co) * OHW
            s = co * ld + e * OHW
            bias = b[co]
            for j in range(OHW):
                v = yf[s + j] + bias
                of[d + j] = v if not (relu and v < zero) else zero


@kernel(export=True)
def conv2d_backward_gemm(dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW,
                    need_dx, need_dw, relu):
    """Gradients of conv2d_forward_gemm, part by part of its P = dw_parts.shape[0] parts (the
    forward's): part p writes dw_parts[p] and db_parts[p] (reduce them with sum_parts) from one
    GEMM each way over its examples' columns side by side. With relu, dout is first masked where
    the forward output y was not positive.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (P, Co, Ci*KH*KW), zeros unless need_dw;
    db_parts: (P, Co); dcols: (P, Ci*KH*KW, E*OH*OW) workspace; g_tmp: (P, Co, E*OH*OW)
    workspace; dout, y: (N, Co, OH, OW); cols: the forward's.
    """
    P = dw_parts.shape[0]
    # each part writes its own gradient parts, workspaces and its examples' dx[n]
    args = (dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW, need_dx, need_dw, relu)
    parallel_blocks(P, conv2d_backward_gemm_part, args)


@kernel(float_division=True)
def conv2d_backward_gemm_part(p, dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW,
                              need_dx, need_dw, relu):
    """Part ``p`` of conv2d_backward_gemm: one iteration of its parallel loop."""
    Co, Ci, KH, KW = w.shape
    OHW = dout.shape[2] * dout.shape[3]
    ckk = Ci * KH * KW
    ld = cols.shape[2]
    wf = w.reshape(Co * ckk)
    zero = np.float32(0.0)
    acc = dw_parts[p]
    dbc = db_parts[p]
    zero_parts(acc, dbc)
    n0, n1 = part_bounds(dout.shape[0], dw_parts.shape[0], p)
    cn = (n1 - n0) * OHW
    gf = g_tmp[p].reshape(Co * ld)
    of = dout.reshape(dout.size)
    yf = y.reshape(y.size)
    for e in range(n1 - n0):  # the part's output gradients side by side (masked by the ReLU)
        for co in range(Co):
            s = ((n0 + e) * Co + co) * OHW
            d = co * ld + e * OHW
            for j in range(OHW):
                gf[d + j] = of[s + j] if (not relu or yf[s + j] > zero) else zero
    add_row_sums(dbc, gf, ld, cn, False)
    cf = cols[p].reshape(ckk * ld)
    if need_dw:  # dW (Co, ckk) += G (Co, cn) @ cols.T (cn, ckk)
        sgemm(False, True, Co, ckk, cn, np.float32(1.0), gf, 0, ld, cf, 0, ld, np.float32(1.0),
              acc.reshape(Co * ckk), 0, ckk)
    if need_dx:
        # dcols (ckk, cn) = W.T (ckk, Co) @ G (Co, cn)
        df = dcols[p].reshape(ckk * ld)
        sgemm(True, False, ckk, cn, Co, np.float32(1.0), wf, 0, ckk, gf, 0, ld, np.float32(0.0), df, 0, ld)
        for e in range(n1 - n0):
            col2im(dx[n0 + e], df, e * OHW, ld, KH, KW, SH, SW, PH, PW)
