"""Stride-1 2-D convolution on "wide" rows: im2col by whole-row copies, BLAS GEMMs per example
(forward) and over groups of examples side by side (backward, which rebuilds the columns).

For a stride-1 convolution over a (padded) Hp x Wp plane, output (oy, ox) reads input
(oy + ky, ox + kx). Computing the output at every column of the input row (OW real columns plus
KW - 1 junk ones, discarded later) turns each im2col row into one contiguous slice of the plane:
    cols[(c, ky, kx), e * L + j] = x[e, c].flat[ky * Wp + kx + j],   j < L = (OH - 1) * Wp + OW.
So im2col is C*KH*KW memcpys of length L per example, and col2im as many contiguous adds.

Nothing is cached between forward and backward: the backward rebuilds the columns from x (cheap),
and, still in cache, they feed its GEMMs 10-40 % faster than a stored copy read back from memory.
It lays a group of examples side by side (row pitch G * L), so the weight gradient of a group is
one GEMM with a long inner dimension. Flat buffers, sliced at an example's offset and read with a
row pitch, keep every inner loop on a contiguous slice indexed from 0 (numba vectorises those).
GEMMs go through ``blas.sgemm``, single-threaded inside parallel blocks.
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._conv_epilogue import bias_relu, grad_rows, max2x2, pool_scan
from ._util import add_row_sums, copy_run, part_bounds
from .blas import sgemm
from .conv2d_direct import direct_rows, direct_weight_grad


@kernel()
def _wide_runs(cf, P, pf, C, plane, KH, KW, Wp, L, adjoint):
    """The copies behind im2col_wide (adjoint False: cf <- pf) and col2im_wide (True: pf += cf):
    row r = (c, ky, kx) of the columns, at cf[r * P:r * P + L], is the contiguous slice
    pf[c * plane + ky * Wp + kx:][:L] of the flat plane pf (C planes of ``plane`` floats)."""
    for c in range(C):
        for ky in range(KH):
            for kx in range(KW):
                p0 = c * plane + ky * Wp + kx
                pr = pf[p0:p0 + L]
                c0 = ((c * KH + ky) * KW + kx) * P
                cr = cf[c0:c0 + L]
                if adjoint:
                    for j in range(L):
                        pr[j] += cr[j]
                else:
                    for j in range(L):
                        cr[j] = pr[j]


@kernel()
def im2col_wide(cf, P, xplane, KH, KW, Wp, L):
    """cf[r * P + j] = xplane[c].flat[ky * Wp + kx + j] for r = (c, ky, kx), j < L.

    cf: flat columns of row pitch P (a slice of the buffer, starting at the example's column);
    xplane: (C, Hp, Wp), contiguous.
    """
    C = xplane.shape[0]
    plane = xplane.shape[1] * Wp
    _wide_runs(cf, P, xplane.reshape(C * plane), C, plane, KH, KW, Wp, L, False)


@kernel()
def col2im_wide(dplane, dcf, P, KH, KW, Wp, L):
    """dplane = the adjoint of im2col_wide applied to the columns dcf of pitch P (overwritten,
    not accumulated). dplane: (C, Hp, Wp)."""
    C = dplane.shape[0]
    plane = dplane.shape[1] * Wp
    df = dplane.reshape(C * plane)
    zero = np.float32(0.0)
    for i in range(C * plane):
        df[i] = zero
    _wide_runs(dcf, P, df, C, plane, KH, KW, Wp, L, True)


@kernel()
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
def _plane(xp, x, PH, PW):
    """The plane that im2col reads for the example x (C, H, W): x itself, or, when padded, the
    workspace xp filled by _pad_plane. (One im2col call site per kernel: less code to compile.)"""
    if PH > 0 or PW > 0:
        _pad_plane(xp, x, PH, PW)
        return xp
    return x


@kernel()
def _epilogue(o, yf, b, Wp, L, relu):
    """o (Co, OH, OW) = the wide GEMM rows yf (flat (Co, L), overwritten) + bias (then max(., 0)
    when relu). The bias and ReLU run over a channel's whole wide row, the rows are then copied
    out 16 floats at a time (copy_run): a loop over one output row, 28 long, ran scalar (modern's
    first layer's epilogue: 4.2 -> 3.0 us an example)."""
    Co, OH, OW = o.shape
    for co in range(Co):
        row = yf[co * L:co * L + L]
        bias_relu(row, b[co], relu)
        for oy in range(OH):
            copy_run(o[co, oy], numba.uint64(0), row, numba.uint64(oy * Wp), numba.uint64(OW))


@kernel()
def _epilogue_pool(o, a, yf, b, Wp, L, relu, PKH, PKW, argmax_too):
    """Fused bias + ReLU (when relu) + max pooling (window PKH x PKW, stride = window, no padding) of the wide
    GEMM rows yf (flat (Co, L)), which are overwritten. o, a: (Co, PH, PW) pooled values and
    argmax, the argmax as the window offset (_conv_epilogue.marked), with maxpool2d_forward's
    tie and NaN rules. Channels holding a NaN or
    an infinity take pool_scan; the others the 2x2 selects (plain comparisons are exact there),
    or without argmax_too (inference) the maxima alone: the same values in half the time."""
    Co, PH, PW = o.shape
    zero = np.float32(0.0)
    for co in range(Co):
        bias = b[co]
        row = yf[co * L:co * L + L]
        bad = zero
        for j in range(L):  # contiguous: vectorises
            v = row[j] + bias
            bad += v * zero  # NaN once any v is NaN or infinite
            row[j] = v if not relu or not v < zero else zero
        if PKH == 2 and PKW == 2 and bad == bad and not argmax_too:
            for py in range(PH):
                orow = o[co, py]
                r0 = row[2 * py * Wp:]
                r1 = row[(2 * py + 1) * Wp:]
                for px in range(PW):
                    i = 2 * px
                    orow[px] = max(max(r0[i], r0[i + 1]), max(r1[i], r1[i + 1]))
        elif PKH == 2 and PKW == 2 and bad == bad:  # branch-free selects: the loop vectorises
            for py in range(PH):
                orow = o[co, py]
                arow = a[co, py]
                r0 = row[2 * py * Wp:]
                r1 = row[(2 * py + 1) * Wp:]
                for px in range(PW):
                    i = 2 * px
                    orow[px], arow[px] = max2x2(r0[i], r0[i + 1], r1[i], r1[i + 1], relu)
        else:
            pool_scan(o[co], a[co], row, 0, 1, Wp, zero, relu, PKH, PKW)


@kernel(export=True, team="blocks")
def conv2d_forward_wide(out, argmax, yw, cols, xpad, x, w, b, PH, PW, relu, PKH, PKW, direct, S,
                        argmax_too):
    """out = conv(x, w) + b, stride 1, zero padding (PH, PW); max(., 0) when relu (fused ReLU).
    With PKH > 0, a PKH x PKW max pool with stride = window is fused too (after the ReLU, if any):
    out and argmax then hold the pooled values and their argmax (see _epilogue_pool;
    without argmax_too the argmax may be left unwritten: inference).

    out: (N, Co, OH, OW), or (N, Co, OH // PKH, OW // PKW) pooled; argmax: pooled shape, int8
    (unused without pooling, then (N, 1, 1, 1)); x: (N, Ci, H, W); w: (Co, Ci, KH, KW); b: (Co,).
    With direct, the rows come from conv2d_direct.direct_rows instead of im2col and a GEMM.
    Each example's output channels are split into S blocks (``wide_blocks``: from the batch size
    only, so that one example keeps several threads busy and the bits do not depend on the
    thread count); the N * S blocks run in parallel.
    Workspaces, indexed by thread (T at least numba's thread count): cols (T, Ci*KH*KW, L), unused
    when direct; yw (T, Co + 1, L); xpad (T, Ci, H + 2PH, W + 2PW) when padded, else
    (T, 1, 1, 1). Nothing is cached for the backward.
    """
    args = (out, argmax, yw, cols, xpad, x, w, b, PH, PW, relu, PKH, PKW, direct, S, argmax_too)
    parallel_blocks(conv2d_forward_wide_blocks(*args), conv2d_forward_wide_block, args)


@kernel()
def conv2d_forward_wide_blocks(out, argmax, yw, cols, xpad, x, w, b, PH, PW, relu, PKH, PKW, direct, S,
                               argmax_too):
    return x.shape[0] * S


@kernel()
def conv2d_forward_wide_block(i, out, argmax, yw, cols, xpad, x, w, b, PH, PW, relu, PKH, PKW, direct, S,
                              argmax_too):
    """Block i of conv2d_forward_wide: its channels of out[n] (n = i // S), its thread's workspaces."""
    N, Ci, H, W = x.shape
    Co, _, KH, KW = w.shape
    Wp = W + 2 * PW
    OH = H + 2 * PH - KH + 1
    OW = Wp - KW + 1
    L = (OH - 1) * Wp + OW
    ckk = Ci * KH * KW
    wf = w.reshape(Co * ckk)
    n = i // S
    c0, c1 = part_bounds(Co, S, i % S)
    if c1 > c0:
        t = numba.get_thread_id()
        cf = cols[t].reshape(cols.shape[1] * cols.shape[2])
        yf = yw[t].reshape((Co + 1) * L)
        xp = _plane(xpad[t], x[n], PH, PW)
        if direct:
            plane = xp.shape[1] * Wp
            direct_rows(yf, L, xp.reshape(Ci * plane), wf[c0 * ckk:c1 * ckk], c1 - c0, Ci, plane,
                        KH, KW, Wp, L)
        else:
            im2col_wide(cf, L, xp, KH, KW, Wp, L)
            sgemm(False, False, c1 - c0, L, ckk, np.float32(1.0), wf, c0 * ckk, ckk, cf, 0, L,
                  np.float32(0.0), yf, 0, L)
        if PKH > 0:
            _epilogue_pool(out[n][c0:c1], argmax[n][c0:c1], yf, b[c0:c1], Wp, L, relu, PKH, PKW,
                           argmax_too)
        else:
            _epilogue(out[n][c0:c1], yf, b[c0:c1], Wp, L, relu)


@kernel(export=True)
def conv2d_backward_wide(dx, dw_parts, db_parts, gw, cols, dcols, pad, gmask, gidx, dout, x, w,
                         y, argmax, PH, PW, group, need_dx, need_dw, relu, PKH, PKW, direct):
    """Gradients of conv2d_forward_wide. The batch is split into P = dw_parts.shape[0] parts
    (part_bounds); part c writes dw_parts[c] and db_parts[c] (reduce them with sum_parts); its
    GEMMs cover ``group`` examples side by side.
    With relu, dout is masked where the forward output y was not positive; with a fused
    PKH x PKW max pool (PKH > 0), dout and argmax are the pool's and y is not read.
    With direct, the weight gradient comes from conv2d_direct.direct_weight_grad, example by
    example, and cols is not used.

    dx: (N, Ci, H, W), written when need_dx; dw_parts: (P, Co, Ci*KH*KW), zeros unless need_dw;
    db_parts: (P, Co); dout, y: the forward's output shape; x: the forward's input.
    Workspaces, indexed by thread: gw (T, Co, group * L); cols and dcols
    (T, Ci*KH*KW, group * L); pad (T, Ci, H + 2PH, W + 2PW) when padded; gmask
    (T, at least Co * PH * PW) and gidx (int32, (T, at least (Co + 1) * PH * PW)) when
    pooled.
    """
    P = dw_parts.shape[0]
    # each part writes its own gradient parts and dx[n], in its thread's workspaces
    args = (dx, dw_parts, db_parts, gw, cols, dcols, pad, gmask, gidx, dout, x, w, y, argmax, PH, PW, group,
            need_dx, need_dw, relu, PKH, PKW, direct)
    parallel_blocks(P, conv2d_backward_wide_part, args)


@kernel(float_division=True)
def conv2d_backward_wide_part(c, dx, dw_parts, db_parts, gw, cols, dcols, pad, gmask, gidx, dout, x, w, y,
                              argmax, PH, PW, group, need_dx, need_dw, relu, PKH, PKW, direct):
    """Part ``c`` of conv2d_backward_wide: one iteration of its parallel loop."""
    N, Ci, H, W = x.shape
    Co, _, KH, KW = w.shape
    Wp = W + 2 * PW
    OH = H + 2 * PH - KH + 1
    OW = Wp - KW + 1
    L = (OH - 1) * Wp + OW
    ckk = Ci * KH * KW
    PG = group * L  # row pitch of the group buffers
    padded = PH > 0 or PW > 0
    wf = w.reshape(Co * ckk)
    zero = np.float32(0.0)
    P = dw_parts.shape[0]
    t = numba.get_thread_id()  # the workspaces' row
    n0, n1 = part_bounds(N, P, c)
    E = n1 - n0
    gf = gw[t].reshape(Co * PG)
    cf = cols[t].reshape(cols.shape[1] * cols.shape[2])
    dwf = dw_parts[c].reshape(Co * ckk)
    dbc = db_parts[c]
    if not need_dw:
        dwf[:] = zero
    for g0 in range(0, E, group):
        G = min(group, E - g0)
        for e in range(G):
            n = n0 + g0 + e
            xp = _plane(pad[t], x[n], PH, PW)
            grad_rows(gf, e * L, PG, dout[n], y[n], argmax[n], Wp, L, relu, PKH, PKW,
                      gmask[t], gidx[t])
            if need_dw and direct:
                plane = xp.shape[1] * Wp
                direct_weight_grad(dwf, gf[e * L:], PG, xp.reshape(Ci * plane), Co, Ci, plane,
                                   KH, KW, Wp, L, g0 + e == 0)
            elif need_dw:
                im2col_wide(cf[e * L:], PG, xp, KH, KW, Wp, L)
        add_row_sums(dbc, gf, PG, G * L, g0 == 0)  # junk columns and unpooled positions are zero
        if need_dw and not direct:  # dW (Co, ckk) (+)= g (Co, G*L) @ cols (ckk, G*L).T
            sgemm(False, True, Co, ckk, G * L, np.float32(1.0), gf, 0, PG, cf, 0, PG,
                  np.float32(1.0) if g0 > 0 else zero, dwf, 0, ckk)
        if need_dx:
            # dcols (ckk, G*L) = W.T (ckk, Co) @ g (Co, G*L); junk columns come out zero
            dcf = dcols[t].reshape(ckk * PG)
            sgemm(True, False, ckk, G * L, Co, np.float32(1.0), wf, 0, ckk, gf, 0, PG,
                  zero, dcf, 0, PG)
            for e in range(G):
                n = n0 + g0 + e
                dp = pad[t] if padded else dx[n]
                col2im_wide(dp, dcf[e * L:], PG, KH, KW, Wp, L)
                if padded:  # crop the border
                    for ci in range(Ci):
                        for i in range(H):
                            src = dp[ci, PH + i]
                            dst = dx[n, ci, i]
                            for j in range(W):
                                dst[j] = src[PW + j]
