"""Strided 2-D convolution (NCHW, float32) for narrow layers, "gemm": im2col (a gather) plus one BLAS GEMM
per example, forward and backward. Stride-1 layers use conv2d_wide.py, and layers with a long
filter (any stride) conv2d_positions.py (see CpuBackend.conv_plan).

Weight gradients are accumulated per chunk of examples and reduced in chunk order (no races).
"""
import numba
import numpy as np

from ..._config import kernel
from ..._parallel import parallel_blocks
from ._conv_epilogue import bias_relu
from ._util import add_row_sums, conv_out, part_bounds, zero_parts
from .blas import sgemm
from .microkernel import gemm_blocks


@kernel()
def _out_range(k, P, S, in_size, out_size):
    """Output positions o whose input index o*S + k - P lies inside [0, in_size)."""
    lo = max(0, -((k - P) // S))
    hi = min(out_size, (in_size - 1 + P - k) // S + 1)
    return lo, max(lo, hi)


@kernel()
def _strided_run(d, di, s, si, step, n):
    """d[di + i] = s[si + i * step] for i < n (offsets unsigned: signed ones make numba check
    every index for wraparound, 2-3x slower on resnet8's 1x1 stride-2 shortcuts)."""
    for i in range(n):
        d[di + i] = s[si + i * step]


@kernel()
def im2col(cols, x, KH, KW, SH, SW, PH, PW):
    """cols[(c, ky, kx), (oy, ox)] = x[c, oy*SH + ky - PH, ox*SW + kx - PW], zero where padded.

    cols: (C*KH*KW, OH*OW); x: (C, H, W); both contiguous. Works on flat indices: slicing views
    for every short row cost more than the copying itself.
    """
    C, H, W = x.shape
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    xf = x.reshape(C * H * W)
    cf = cols.reshape(C * KH * KW * OH * OW)
    zero = np.float32(0.0)
    for c in range(C):
        for ky in range(KH):
            y_lo, y_hi = _out_range(ky, PH, SH, H, OH)
            for kx in range(KW):
                x_lo, x_hi = _out_range(kx, PW, SW, W, OW)
                r = ((c * KH + ky) * KW + kx) * OH * OW
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
def col2im(dx, dcols, KH, KW, SH, SW, PH, PW):
    """dx[c, iy, ix] = sum of dcols entries that im2col copied from (c, iy, ix); the adjoint of im2col.

    dx: (C, H, W), overwritten; dcols: (C*KH*KW, OH*OW); both contiguous.
    """
    C, H, W = dx.shape
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    xf = dx.reshape(C * H * W)
    cf = dcols.reshape(C * KH * KW * OH * OW)
    xf[:] = np.float32(0.0)
    for c in range(C):
        for ky in range(KH):
            y_lo, y_hi = _out_range(ky, PH, SH, H, OH)
            for kx in range(KW):
                x_lo, x_hi = _out_range(kx, PW, SW, W, OW)
                r = ((c * KH + ky) * KW + kx) * OH * OW
                for oy in range(y_lo, y_hi):
                    dst = numba.uint64((c * H + oy * SH + ky - PH) * W + kx - PW + x_lo * SW)
                    src = numba.uint64(r + oy * OW + x_lo)
                    for i in range(numba.uint64(x_hi - x_lo)):  # (x_hi >= x_lo)
                        xf[dst + i * numba.uint64(SW)] += cf[src + i]


@kernel()
def conv2d_forward_gemm(out, cols, x, w, b, SH, SW, PH, PW, relu):
    """out = conv(x, w) + b (then max(., 0) when relu: a fused ReLU); cols keeps each example's
    im2col matrix for the backward.

    out: (N, Co, OH, OW); cols: (N, Ci*KH*KW, OH*OW); x: (N, Ci, H, W); w: (Co, Ci, KH, KW); b: (Co,).
    """
    args = (out, cols, x, w, b, SH, SW, PH, PW, relu)
    parallel_blocks(conv2d_forward_gemm_blocks(*args), conv2d_forward_gemm_block, args)


@kernel()
def conv2d_forward_gemm_blocks(out, cols, x, w, b, SH, SW, PH, PW, relu):
    return x.shape[0]


@kernel()
def conv2d_forward_gemm_block(n, out, cols, x, w, b, SH, SW, PH, PW, relu):
    """Example n of conv2d_forward_gemm: writes only out[n] and cols[n]."""
    Co, Ci, KH, KW = w.shape
    OHW = out.shape[2] * out.shape[3]
    ckk = Ci * KH * KW
    wf = w.reshape(Co * ckk)
    im2col(cols[n], x[n], KH, KW, SH, SW, PH, PW)
    o = out[n].reshape(Co, OHW)
    if OHW >= 16:
        gemm_blocks(o.reshape(Co * OHW), 0, wf, 0, cols[n].reshape(ckk * OHW), 0, Co, OHW, ckk)
    else:
        sgemm(False, False, Co, OHW, ckk, np.float32(1.0), wf, 0, ckk, cols[n].reshape(ckk * OHW), 0,
              OHW, np.float32(0.0), o.reshape(Co * OHW), 0, OHW)
    for co in range(Co):
        bias_relu(o[co], b[co], relu)


@kernel()
def conv2d_backward_gemm(dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW,
                    need_dx, need_dw, relu):
    """Gradients of conv2d_forward_gemm; the batch is split into P = dw_parts.shape[0] parts
    (part_bounds), and part c writes dw_parts[c] and db_parts[c] (reduce them with
    sum_parts). With relu, dout is first masked where the forward output y was not positive.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (P, Co, Ci*KH*KW), zeros unless need_dw;
    db_parts: (P, Co); dcols: (P, Ci*KH*KW, OH*OW) workspace;
    g_tmp: (P, Co, OH*OW) workspace; dout, y: (N, Co, OH, OW); cols: the forward's im2col
    cache (N, Ci*KH*KW, OH*OW).
    """
    P = dw_parts.shape[0]
    # each part writes its own gradient parts, workspaces and dx[n]
    args = (dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW, need_dx, need_dw, relu)
    parallel_blocks(P, conv2d_backward_gemm_part, args)


@kernel(float_division=True)
def conv2d_backward_gemm_part(c, dx, dw_parts, db_parts, dcols, g_tmp, dout, cols, w, y, SH, SW, PH, PW,
                              need_dx, need_dw, relu):
    """Part ``c`` of conv2d_backward_gemm: one iteration of its parallel loop."""
    N = dout.shape[0]
    Co, Ci, KH, KW = w.shape
    OHW = dout.shape[2] * dout.shape[3]
    ckk = Ci * KH * KW
    wf = w.reshape(Co * ckk)
    zero = np.float32(0.0)
    P = dw_parts.shape[0]
    acc = dw_parts[c]
    dbc = db_parts[c]
    zero_parts(acc, dbc)
    n0, n1 = part_bounds(N, P, c)
    for n in range(n0, n1):
        g = dout[n].reshape(Co, OHW)
        if relu:
            gm = g_tmp[c]
            yn = y[n].reshape(Co, OHW)
            for co in range(Co):
                for j in range(OHW):
                    gm[co, j] = g[co, j] if yn[co, j] > zero else zero
            g = gm
        gf = g.reshape(Co * OHW)
        add_row_sums(dbc, gf, OHW, OHW, False)
        if need_dw:  # dW (Co, ckk) += g (Co, OHW) @ cols[n].T (OHW, ckk)
            sgemm(False, True, Co, ckk, OHW, np.float32(1.0), gf, 0, OHW, cols[n].reshape(ckk * OHW),
                  0, OHW, np.float32(1.0), acc.reshape(Co * ckk), 0, ckk)
        if need_dx:
            # dcols (ckk, OHW) = W.T (ckk, Co) @ g (Co, OHW)
            sgemm(True, False, ckk, OHW, Co, np.float32(1.0), wf, 0, ckk, gf, 0, OHW,
                  np.float32(0.0), dcols[c].reshape(ckk * OHW), 0, OHW)
            col2im(dx[n], dcols[c], KH, KW, SH, SW, PH, PW)
