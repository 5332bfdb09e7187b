"""2-D convolution (any stride) on position-major columns, for layers with a long filter
(C_in*KH*KW >= 100; the choice is made in CpuBackend.conv_plan, numbacnn/backend/cpu.py).

Columns are laid out one row per output position p = (oy, ox), exactly OH * OW rows (no junk
positions), with the taps and channels along the row in (ky, kx, c) order:
    cols[p, (ky, kx, c)] = xpad[c, oy * SH + ky, ox * SW + kx].
Built from the zero-padded input plane transposed to (Hp * Wp, C), the KW taps of one kernel row
are KW consecutive positions of that plane whatever the stride, so every im2col copy is a run of
KW * C contiguous floats, and so is every col2im add. In this orientation the GEMMs
    forward      y (L, Co)      = cols (L, ckk) @ wt (ckk, Co)
    weight grad  dW (Co, ckk)  (+)= g (Co, G*L) @ cols (G*L, ckk)
    input grad   dcols (G*L, ckk) = g.T (G*L, Co) @ wk (Co, ckk)
ran 10-20 % faster in OpenBLAS than the channel-major ones (measured with 32 -> 64 channels,
3x3), and they skip the wide layout's KW - 1 junk columns per row (14 % of the work on an
11 x 11 output).

As in conv2d_wide.py nothing is cached between forward and backward: the backward rebuilds the
columns per group of examples. The weight gradient's GEMMs run on the FMA blocks
(``microkernel.gemm_nn_add``: 2-3x OpenBLAS's speed where it has no small-matrix kernels, as fast
where it has); the column paths' other GEMMs go through ``blas.sgemm``, one thread each.
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._conv_epilogue import grad_rows, max2x2, pool_scan
from ._util import (
    add_row_sums,
    add_run,
    conv_out,
    copy_run,
    gather_channels,
    part_bounds,
    same_version,
    transpose16,
    transpose16_bias,
    unchanged,
)
from .blas import sgemm
from .microkernel import direct_positions, gemm_nn_add


@kernel(export=True, team="serial")
def position_filters(wt, w, seen, version):
    """wt (KH, KW, Ci, Co) = w (Co, Ci, KH, KW) transposed: the forward's GEMM operand, unless
    ``seen`` (_util.unchanged) records that wt was made from these very weights, or, with a
    version ((1,): w is the BatchNorm fold's output), the fold's count (_util.same_version).
    Serial: a parallel region costs more than the copy."""
    if version.shape[0] > 0:
        if same_version(seen, version):
            return
    elif unchanged(seen, w):
        return
    Co, Ci, KH, KW = w.shape
    for co in range(Co):
        for ci in range(Ci):
            for ky in range(KH):
                for kx in range(KW):
                    wt[ky, kx, ci, co] = w[co, ci, ky, kx]


@kernel()
def _transpose_padded(xtf, x, PH, PW, R0, R1):
    """xtf (flat ((R1 - R0) * Wp, C)) = rows R0 .. R1 - 1 of the zero-padded plane of x (C, H, W),
    transposed."""
    C, H, W = x.shape
    _transpose_planes(xtf, np.ascontiguousarray(x).reshape(C * H * W), H * W, 0, C, H, W, PH, PW, R0, R1)


@kernel()
def _transpose_planes(xtf, xf, pitch, base, C, H, W, PH, PW, R0, R1):
    """_transpose_padded of the planes (H, W) that lie at xf[base + c * pitch:], c < C."""
    Wp = W + 2 * PW
    zero = np.float32(0.0)
    if PH > 0 or PW > 0:
        for i in range((R1 - R0) * Wp * C):
            xtf[i] = zero
    if C % 16 == 0 and W >= 16:  # 16 x 16 blocks transposed in registers (the last may overlap)
        for i in range(max(0, R0 - PH), min(H, R1 - PH)):
            d0 = ((PH + i - R0) * Wp + PW) * C
            for c0 in range(0, C, 16):
                for j in range(0, W, 16):
                    j0 = min(j, W - 16)
                    d = d0 + j0 * C + c0
                    transpose16(xtf, d, d + C, 2 * C, xf, base + c0 * pitch + i * W + j0, pitch)
        return
    if C % 16 == 0:  # 16 channels of a position per vector gather, as conv2d_winograd._plane
        for i in range(max(0, R0 - PH), min(H, R1 - PH)):
            d0 = ((PH + i - R0) * Wp + PW) * C
            for j in range(W):
                gather_channels(xtf, d0 + j * C, xf, C, pitch, base + i * W + j)
        return
    for i in range(max(0, R0 - PH), min(H, R1 - PH)):  # a plane row (in L1) at a time
        for c in range(C):
            src = xf[base + c * pitch + i * W:base + c * pitch + i * W + W]
            d0 = ((PH + i - R0) * Wp + PW) * C + c
            for j in range(W):
                xtf[d0 + j * C] = src[j]


@kernel()
def _position_runs(cf, xtf, Wp, OY0, OY1, OW, KH, C, ckk, SH, SW, adjoint):
    """The copies behind im2col (adjoint False: cf <- xtf) and col2im (True: xtf += cf)
    on position-major columns, for output rows OY0 .. OY1 - 1 (cf's row 0 is position (OY0, 0);
    xtf's row 0 is padded input row OY0 * SH). In (ky, kx, c) order the KW taps of one kernel row
    read KW consecutive positions of the transposed plane xtf (Hp * Wp, C): each (position, ky) is
    one contiguous run of KW * C floats. The offsets are unsigned: with signed computed indices numba
    must handle negative ones (wraparound), which kept these loops from vectorising (4-5x slower);
    unsigned indices were also 10 % faster than slicing every run (LeNet's 6 -> 16 layer). The runs
    move 16 floats at a time (copy_run, add_run): a loop over a run of 30 ran scalar (LeNet's
    im2col: 3.15 -> 1.96 us per example, one thread)."""
    run = numba.uint64(ckk // KH)
    for oy in range(OY1 - OY0):
        for ox in range(OW):
            c0 = numba.uint64((oy * OW + ox) * ckk)
            for ky in range(KH):
                x0 = numba.uint64(((oy * SH + ky) * Wp + ox * SW) * C)
                c1 = c0 + numba.uint64(ky) * run
                if adjoint:
                    add_run(xtf, x0, cf, c1, run)
                else:
                    copy_run(cf, c1, xtf, x0, run)


@kernel()
def _im2col_positions(cf, xtf, x, PH, PW, KH, KW, SH, SW, OY0, OY1):
    """Position-major columns cf[:L * ckk], (L, KH*KW*C) with L = (OY1 - OY0) * OW, of output rows
    OY0 .. OY1 - 1 of the example x (C, H, W); xtf (flat (Hp * Wp, C)) is a workspace for the
    padded transpose of the input rows they read."""
    C, H, W = x.shape
    Wp = W + 2 * PW
    _transpose_padded(xtf, x, PH, PW, OY0 * SH, (OY1 - 1) * SH + KH)
    _position_runs(cf, xtf, Wp, OY0, OY1, conv_out(W, KW, SW, PW), KH, C, KH * KW * C, SH, SW, False)


@kernel()
def _col2im_positions(dxn, dcf, xtf, PH, PW, KH, KW, SH, SW):
    """dxn (C, H, W) = the adjoint of _im2col_positions applied to the columns dcf[:L * ckk]
    (overwritten, not accumulated); xtf: a (Hp * Wp, C) workspace."""
    C, H, W = dxn.shape
    Wp = W + 2 * PW
    Hp = H + 2 * PH
    zero = np.float32(0.0)
    for i in range(Hp * Wp * C):
        xtf[i] = zero
    _position_runs(dcf, xtf, Wp, 0, conv_out(H, KH, SH, PH), conv_out(W, KW, SW, PW), KH, C,
                   KH * KW * C, SH, SW, True)
    for c in range(C):
        for i in range(H):
            s0 = ((PH + i) * Wp + PW) * C + c
            dst = dxn[c, i]
            for j in range(W):
                dst[j] = xtf[s0 + j * C]


@kernel()
def _slot(ox, half):
    """Where position ox of an output row lies in its row: ox itself, or with half > 0 (the rows of
    conv2d_winograd.py: even columns first, then odd ones) (ox % 2) * half + ox // 2."""
    return ox if half == 0 else (ox & 1) * half + (ox >> 1)


@kernel(inline=True)
def _window_max(v0, v1, v2, v3, bias, relu):
    """Inference's fused 2x2 pool of one channel (no argmax): the window's maximum plus the bias,
    then ReLU when relu (the maximum of the ReLUs of v + bias: rounding is monotonic)."""
    v = max(max(v0, v1), max(v2, v3)) + bias
    return v if not relu or v > np.float32(0.0) else np.float32(0.0)


@kernel()
def _epilogue_positions(o, a, ytf, b, OW, relu, PKH, PKW, half, work, argmax_too):
    """The forward's epilogue on position-major GEMM output ytf (flat (L, Co): the convolution at
    position oy * OW + _slot(ox, half), channel co): bias, ReLU when relu (NaN stays NaN), and
    (PKH > 0) max pooling with stride = window, argmax as the offset inside the window
    (_conv_epilogue.marked), with maxpool2d_forward's tie and NaN rules. o: (Co, OH, OW), or
    pooled (Co, PH, PW) with a its argmax. The 2x2 path runs over channels, contiguous in ytf;
    an example holding a NaN or an infinity takes pool_scan instead (after copying split rows
    back into order in ``work``, as large as ytf; unused when half is 0). Without argmax_too
    (inference) the 2x2 path keeps the maxima alone: max(v) + bias, then ReLU, is the same value
    as the maximum of the ReLUs of v + bias (rounding is monotonic), in fewer operations."""
    Co, PH, PW = o.shape
    zero = np.float32(0.0)
    if PKH == 0 and half == 0:
        # an output row of a channel at a time: strided reads, a contiguous row written (writing a
        # position's channels, a plane apart, ran 3-9x slower: 16 planes of 4 KB share cache sets)
        for oy in range(PH):
            src = ytf[oy * OW * Co:oy * OW * Co + PW * Co]
            for co in range(Co):
                dst = o[co, oy]
                bias = b[co]
                if relu:
                    for ox in range(PW):
                        v = src[ox * Co + co] + bias
                        dst[ox] = v if not v < zero else zero
                else:
                    for ox in range(PW):
                        dst[ox] = src[ox * Co + co] + bias
        return
    if PKH == 0:
        for oy in range(PH):
            for ox in range(PW):
                r0 = (oy * OW + _slot(ox, half)) * Co
                row = ytf[r0:r0 + Co]
                for co in range(Co):
                    v = row[co] + b[co]
                    o[co, oy, ox] = (v if not v < zero else zero) if relu else v
        return
    bad = zero
    for i in range(ytf.shape[0]):  # vectorises; NaN once any value is NaN or infinite
        bad += ytf[i] * zero
    if PKH == 2 and PKW == 2 and bad == bad:
        for py in range(PH):
            for px in range(PW):
                ja = 2 * py * OW + _slot(2 * px, half)  # the window's positions
                jb = 2 * py * OW + _slot(2 * px + 1, half)
                ra = ytf[ja * Co:ja * Co + Co]
                rb = ytf[jb * Co:jb * Co + Co]
                rc = ytf[(ja + OW) * Co:(ja + OW) * Co + Co]
                rd = ytf[(jb + OW) * Co:(jb + OW) * Co + Co]
                if not argmax_too:
                    for co in range(Co):
                        o[co, py, px] = _window_max(ra[co], rb[co], rc[co], rd[co], b[co], relu)
                    continue
                for co in range(Co):
                    bias = b[co]
                    v0, v1, v2, v3 = ra[co] + bias, rb[co] + bias, rc[co] + bias, rd[co] + bias
                    if relu:
                        v0 = v0 if v0 > zero else zero
                        v1 = v1 if v1 > zero else zero
                        v2 = v2 if v2 > zero else zero
                        v3 = v3 if v3 > zero else zero
                    o[co, py, px], a[co, py, px] = max2x2(v0, v1, v2, v3, relu)
        return
    src = ytf
    if half > 0:
        src = work[:ytf.shape[0]]
        for p in range(ytf.shape[0] // Co):  # row y, position x back in order
            s0 = (p - p % OW + _slot(p % OW, half)) * Co
            for co in range(Co):
                src[p * Co + co] = ytf[s0 + co]
    for co in range(Co):
        pool_scan(o[co], a[co], src, co, Co, OW, b[co], relu, PKH, PKW)


@kernel()
def _channel_rows(of, R, r0, OW, src, Co, P):
    """Rows r0 .. of of (flat (Co, R, OW)), P = their rows * OW floats of each channel (contiguous),
    from the channel-last src (flat (P, Co)): 16 x 16 register transposes (the last block of
    positions overlaps the one before, so that nothing past the P positions is touched). Co
    divisible by 16, P >= 16."""
    for c0 in range(0, Co, 16):
        for p in range(0, P, 16):
            p0 = min(p, P - 16)  # the last block may overlap the one before
            d = (c0 * R + r0) * OW + p0
            transpose16(of, d, d + R * OW, 2 * R * OW, src, p0 * Co + c0, Co)


@kernel()
def pool2x2_transposed(of, R, r0, ytf, b, OW, half, rows, PW, work, nhwc, relu):
    """Inference's fused 2x2 max pool (no argmax), bias and ReLU (when relu) of the position-major ytf (read
    as _epilogue_positions reads it) into pooled rows r0 .. r0 + rows - 1 of the example's output
    of (flat (Co, R, PW)): the maxima along the channels into a channel-last scratch ``work``
    (rows * PW * Co floats, not ytf), then 16 x 16 register transposes into the channel rows (the
    last block of positions overlaps the one before), instead of a store per channel and window
    a plane apart. For Co divisible by 16 and rows * PW >= 16. Returns False, writing nothing, when
    ytf holds a NaN or an infinity (_epilogue_positions' exact path then pools it). With nhwc,
    of is channel-last (R, PW, Co) and the maxima go straight into it (no transposes, no scratch)."""
    Co = b.shape[0]
    zero = np.float32(0.0)
    bad = zero
    for i in range(ytf.shape[0]):  # vectorises; NaN once any value is NaN or infinite
        bad += ytf[i] * zero
    if bad != bad:
        return False
    P = rows * PW
    for py in range(rows):
        for px in range(PW):
            ja = 2 * py * OW + _slot(2 * px, half)  # the window's positions
            jb = 2 * py * OW + _slot(2 * px + 1, half)
            ra = ytf[ja * Co:ja * Co + Co]
            rb = ytf[jb * Co:jb * Co + Co]
            rc = ytf[(ja + OW) * Co:(ja + OW) * Co + Co]
            rd = ytf[(jb + OW) * Co:(jb + OW) * Co + Co]
            q = ((r0 + py) * PW + px) * Co if nhwc else (py * PW + px) * Co
            dst = of[q:q + Co] if nhwc else work[q:q + Co]
            for co in range(Co):
                dst[co] = _window_max(ra[co], rb[co], rc[co], rd[co], b[co], relu)
    if not nhwc:
        _channel_rows(of, R, r0, PW, work, Co, P)
    return True


@kernel()
def rows_transposed(of, R, r0, ytf, b, pitch, half, rows, OW, relu, work, nhwc):
    """_epilogue_positions without a pool on the position-major ytf (rows of ``pitch`` positions,
    in the order _slot(ox, half) gives) into output rows r0 .. r0 + rows - 1 of the example's output of (flat
    (Co, R, OW)): bias (and ReLU) per position along the channels into a channel-last scratch
    ``work`` (rows * OW * Co floats, not ytf), the positions put in their natural order on the
    way, then 16 x 16 register transposes into the channel rows (the last block of positions
    overlaps the one before), instead of a store per channel and position a plane apart (modern's
    unpooled 14 x 14 Winograd layer). For Co divisible by 16 and rows * OW >= 16. The same values
    as _epilogue_positions (NaN stays NaN). With nhwc, of is channel-last (R, OW, Co) and the
    values go straight into it."""
    Co = b.shape[0]
    zero = np.float32(0.0)
    for oy in range(rows):
        for ox in range(OW):
            j = oy * pitch + _slot(ox, half)
            src = ytf[j * Co:j * Co + Co]
            q = ((r0 + oy) * OW + ox) * Co if nhwc else (oy * OW + ox) * Co
            dst = of[q:q + Co] if nhwc else work[q:q + Co]
            if relu:
                for co in range(Co):
                    v = src[co] + b[co]
                    dst[co] = v if not v < zero else zero
            else:
                for co in range(Co):
                    dst[co] = src[co] + b[co]
    if not nhwc:
        _channel_rows(of, R, r0, OW, work, Co, rows * OW)


@kernel()
def _epilogue_rows(of, R, r0, ytf, b, Co, OW, rows, relu):
    """_epilogue_positions without a pool, for Co divisible by 16 and rows * OW >= 16: the
    (rows * OW, Co) block ytf transposed in 16 x 16 blocks into output rows r0 .. r0 + rows - 1 of
    of, the example's output (Co, R, OW) read flat: those rows are rows * OW contiguous floats of
    each channel, so the blocks run over them whole (the last overlapping the one before), rows
    narrower than 16 included. Bias and ReLU are added in the blocks' registers (transpose16_bias;
    none when b is empty): ytf is only read (a pass over it in place was a fifth of resnet8's
    16 -> 16 layers)."""
    P = rows * OW
    for c0 in range(0, Co, 16):
        for p in range(0, P, 16):
            p0 = min(p, P - 16)  # the last block may overlap the one before
            d = (c0 * R + r0) * OW + p0
            if b.shape[0] > 0:
                transpose16_bias(of, d, d + R * OW, 2 * R * OW, ytf, p0 * Co + c0, Co, b, c0, relu)
            else:
                transpose16(of, d, d + R * OW, 2 * R * OW, ytf, p0 * Co + c0, Co)


@kernel(export=True, team="blocks")
def conv2d_forward_positions(out, argmax, yw, cols, xt, x, wt, b, SH, SW, PH, PW, KH, KW, relu,
                             PKH, PKW, S, argmax_too, xo):
    """out = conv(x, w) + b, stride (SH, SW), zero padding (PH, PW); max(., 0) when relu (fused
    ReLU).
    With PKH > 0, a PKH x PKW max pool with stride = window is fused too (after the ReLU, if any):
    out and argmax then hold the pooled values and their argmax (see _epilogue_positions).

    out: (N, Co, OH, OW), or (N, Co, OH // PKH, OW // PKW) pooled; argmax: pooled shape, int8
    (unused without pooling, then (N, 1, 1, 1)); x: (N, Ci, H, W); wt: the weight as
    (ky, kx, ci) x co, (ckk, Co).
    Each example's output rows (pooled rows with a fused pool) are split into S blocks of whole
    rows (``positions_blocks``: from the shape only, so the bits do not depend on the batch size or
    the thread count); the N * S blocks run in parallel, each with its own columns and GEMM.
    Workspaces, indexed by thread (T at least numba's thread count): cols (T, L, ckk);
    xt (T, Hp * Wp, Ci); yw (T, L, Co), L = OH * OW.
    argmax_too: False (inference, no backward) leaves a 2x2 pool's argmax unwritten.
    xo: empty, or (Co divisible by 16) the offsets in xt of the L positions' first taps,
    ((oy * SH) * Wp + ox * SW) * Ci: then no columns and no GEMM, the FMA blocks of
    microkernel.direct_positions read the transposed plane itself (cols unused).
    """
    args = (out, argmax, yw, cols, xt, x, wt, b, SH, SW, PH, PW, KH, KW, relu, PKH, PKW, S, argmax_too, xo)
    parallel_blocks(conv2d_forward_positions_blocks(*args), conv2d_forward_positions_block, args)


@kernel()
def conv2d_forward_positions_blocks(out, argmax, yw, cols, xt, x, wt, b, SH, SW, PH, PW, KH, KW, relu,
                                    PKH, PKW, S, argmax_too, xo):
    return x.shape[0] * S


@kernel()
def conv2d_forward_positions_block(i, out, argmax, yw, cols, xt, x, wt, b, SH, SW, PH, PW, KH, KW, relu,
                                   PKH, PKW, S, argmax_too, xo):
    """Block i of conv2d_forward_positions: its rows of out[n] (n = i // S), its thread's workspaces."""
    N, Ci, H, W = x.shape
    Co = wt.shape[1]
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    L = OH * OW
    ckk = Ci * KH * KW
    wf = wt.reshape(ckk * Co)
    R = OH // PKH if PKH > 0 else OH  # rows of the epilogue's output
    U = PKH if PKH > 0 else 1  # convolution rows per epilogue row
    n = i // S
    r0, r1 = part_bounds(R, S, i % S)
    if r1 > r0:
        t = numba.get_thread_id()
        Lb = (r1 - r0) * U * OW
        yf = yw[t].reshape(L * Co)[:Lb * Co]
        xtf = xt[t].reshape(xt.shape[1] * Ci)
        if xo.shape[0] > 0:
            _transpose_padded(xtf, x[n], PH, PW, r0 * U * SH, (r1 * U - 1) * SH + KH)
            direct_positions(yf, xtf, xo, wf, Lb, Co, KH, KW * Ci, (W + 2 * PW) * Ci)
        else:
            cf = cols[t].reshape(L * ckk)
            _im2col_positions(cf, xtf, x[n], PH, PW, KH, KW, SH, SW, r0 * U, r1 * U)
            sgemm(False, False, Lb, Co, ckk, np.float32(1.0), cf, 0, ckk, wf, 0, Co,
                  np.float32(0.0), yf, 0, Co)
        if PKH == 0 and xo.shape[0] > 0 and (r1 - r0) * OW >= 16:
            _epilogue_rows(out[n].reshape(Co * OH * OW), OH, r0, yf, b, Co, OW, r1 - r0, relu)
        else:
            _epilogue_positions(out[n][:, r0:r1], argmax[n][:, r0:r1], yf, b, OW, relu, PKH, PKW, 0,
                                yf, argmax_too)


@kernel(export=True)
def conv2d_backward_positions(dx, dw_parts, db_parts, gw, cols, dcols, xt, gmask, gidx, dout, x,
                              wk, y, argmax, SH, SW, PH, PW, KH, KW, group, need_dx, need_dw, relu,
                              PKH, PKW, KB, MB, wr, gp, dxw, xo):
    """Gradients of conv2d_forward_positions. The batch is split into P = dw_parts.shape[0]
    parts (part_bounds); part c writes dw_parts[c] and db_parts[c] (reduce them with sum_parts);
    its GEMMs cover ``group`` examples at a time.
    With relu, dout is masked where the forward output y was not positive; with a fused
    PKH x PKW max pool (PKH > 0), dout and argmax are the pool's and y is not read.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (P, Co, KH, KW, Ci), zeros unless need_dw --
    the weight gradient in the columns' (ky, kx, ci) order, which the caller permutes; db_parts:
    (P, Co); wk: the weight as (Co, KH, KW, Ci); x: the forward's input.
    KB and MB (positions_gemm_rows, from the shapes only) cut the GEMMs into pieces: the weight
    gradient's sum over positions in runs of KB positions, accumulated in order, and the input
    gradient's columns in blocks of MB rows.
    Workspaces, indexed by thread: gw (T, Co, group * L); cols and dcols (T, group * L, ckk);
    xt (T, Hp * Wp, Ci); gmask (T, at least Co * PH * PW) and gidx (int32, (T, at least
    (Co + 1) * PH * PW)) when pooled.
    xo: empty, or (stride 1, Ci divisible by 16, PH < KH, PW < KW) the input gradient by the FMA
    blocks of microkernel.direct_positions (no dcols, no GEMM, no col2im): the convolution of
    each example's gradient, zero-padded by (KH - 1 - PH, KW - 1 - PW) and transposed channel-last
    into gp (T, its plane), with wr (KH, KW, Co, Ci), the weights rotated by 180 degrees
    (wr[ky, kx, co, ci] = w[co, ci, KH - 1 - ky, KW - 1 - kx]); xo (H * W,) the offsets of the
    input positions in that plane; dxw (T, H * W * Ci) holds the channel-last result.
    """
    P = dw_parts.shape[0]
    # each part writes its own gradient parts and dx[n], in its thread's workspaces
    args = (dx, dw_parts, db_parts, gw, cols, dcols, xt, gmask, gidx, dout, x, wk, y, argmax, SH, SW, PH, PW,
            KH, KW, group, need_dx, need_dw, relu, PKH, PKW, KB, MB, wr, gp, dxw, xo)
    parallel_blocks(P, conv2d_backward_positions_part, args)


@kernel(float_division=True)
def conv2d_backward_positions_part(c, dx, dw_parts, db_parts, gw, cols, dcols, xt, gmask, gidx, dout, x, wk,
                                   y, argmax, SH, SW, PH, PW, KH, KW, group, need_dx, need_dw, relu, PKH, PKW,
                                   KB, MB, wr, gp, dxw, xo):
    """Part ``c`` of conv2d_backward_positions: one iteration of its parallel loop."""
    N, Ci, H, W = x.shape
    Co = wk.shape[0]
    OH = conv_out(H, KH, SH, PH)
    OW = conv_out(W, KW, SW, PW)
    L = OH * OW
    ckk = Ci * KH * KW
    PG = group * L  # row pitch of the channel-major gradient rows
    wkf = wk.reshape(Co * ckk)
    zero = np.float32(0.0)
    P = dw_parts.shape[0]
    t = numba.get_thread_id()  # the workspaces' row
    n0, n1 = part_bounds(N, P, c)
    E = n1 - n0
    gf = gw[t].reshape(Co * PG)
    cf = cols[t].reshape(PG * ckk)
    xtf = xt[t].reshape(xt.shape[1] * Ci)
    dwf = dw_parts[c].reshape(Co * ckk)
    dbc = db_parts[c]
    if not need_dw:
        dwf[:] = zero
    for g0 in range(0, E, group):
        G = min(group, E - g0)
        for e in range(G):
            n = n0 + g0 + e
            if need_dw:
                _im2col_positions(cf[e * L * ckk:], xtf, x[n], PH, PW, KH, KW, SH, SW, 0, OH)
            grad_rows(gf, e * L, PG, dout[n], y[n], argmax[n], OW, L, relu, PKH, PKW,
                      gmask[t], gidx[t])
        add_row_sums(dbc, gf, PG, G * L, g0 == 0)
        # dW (Co, ckk) (+)= g (Co, G*L) @ cols (G*L, ckk), KB positions at a time
        for k0 in range(0, G * L if need_dw else 0, KB):
            kn = min(KB, G * L - k0)
            gemm_nn_add(dwf, 0, ckk, gf, k0, PG, cf, k0 * ckk, ckk, Co, ckk, kn, g0 == 0 and k0 == 0)
        if need_dx and xo.shape[0] > 0:
            QH, QW = KH - 1 - PH, KW - 1 - PW
            gpf = gp[t]
            dyf = dxw[t]
            for e in range(G):
                _transpose_planes(gpf, gf, PG, e * L, Co, OH, OW, QH, QW, 0, OH + 2 * QH)
                direct_positions(dyf, gpf, xo, wr.reshape(KH * KW * Co * Ci), H * W, Ci, KH, KW * Co,
                                 (OW + 2 * QW) * Co)
                dxn = dx[n0 + g0 + e]
                if H * W >= 16:
                    _epilogue_rows(dxn.reshape(Ci * H * W), H, 0, dyf, dyf[:0], Ci, W, H, False)
                else:
                    for ci in range(Ci):
                        for i in range(H):
                            row = dxn[ci, i]
                            for j in range(W):
                                row[j] = dyf[(i * W + j) * Ci + ci]
        elif need_dx:
            # dcols (G*L, ckk) = g.T (G*L, Co) @ wk (Co, ckk), MB rows at a time
            dcf = dcols[t].reshape(PG * ckk)
            for m0 in range(0, G * L, MB):
                sgemm(True, False, min(MB, G * L - m0), ckk, Co, np.float32(1.0), gf, m0, PG,
                      wkf, 0, ckk, zero, dcf, m0 * ckk, ckk)
            for e in range(G):
                _col2im_positions(dx[n0 + g0 + e], dcf[e * L * ckk:], xtf, PH, PW, KH, KW,
                                  SH, SW)
