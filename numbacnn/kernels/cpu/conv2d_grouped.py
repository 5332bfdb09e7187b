"""Grouped convolutions, depthwise included, with any stride, dilation and per-side zero padding,
computed plane by plane: forward and input gradient over (example, channel) planes, the weight
gradient over (gradient part, output channel) pairs (the "grouped" plan, backend/cpu_conv.py).

Every loop that adds runs in a fixed order, without fast-math: the rows are elementwise (they
vectorise as they are) and each weight's sum over a part runs in a row of lanes added in order,
so the bits depend neither on the thread count nor on how the code was compiled.
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from .microkernel import dot_rows


@kernel(inline=True)
def _ceil_div(a, b):
    return -((-a) // b)


@kernel(inline=True)
def _span(OW, W, SW, off):
    """The output columns [lo, hi) whose input column ow * SW + off lies inside [0, W)."""
    return max(0, _ceil_div(-off, SW)), min(OW, _ceil_div(W - off, SW))


@kernel(export=True)
def depthwise_pitch(W, OW, KW, SW, DW, PL):
    """The row pitch of a depthwise plane's padded copy: its padded width, at least every column a
    window reads."""
    return max(PL + W, SW * (OW - 1) + (KW - 1) * DW + 1)


@kernel()
def conv2d_forward_grouped_blocks(y, xpad, yw, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu):
    return y.shape[0] * y.shape[1]


@kernel(fastmath=False)
def _pad_plane(xp, xc, Wp, PT, PL):
    """xp (flat, at least Hp * Wp) = the plane xc (H, W) with PT zero rows above, PL zero columns to
    the left, zeros to the right and below (rows Wp apart)."""
    H, W = xc.shape
    for j in range(xp.shape[0]):
        xp[j] = np.float32(0.0)
    for ih in range(H):
        row = xp[(ih + PT) * Wp + PL:(ih + PT) * Wp + PL + W]
        src = xc[ih]
        for iw in range(W):
            row[iw] = src[iw]


@kernel(fastmath=False)
def _wide_plane(gw, gc, Wp):
    """gw (flat, L = (OH - 1) * Wp + OW) = the plane gc (OH, OW) in rows Wp apart, zeros between."""
    OH, OW = gc.shape
    for j in range(gw.shape[0]):
        gw[j] = np.float32(0.0)
    for oh in range(OH):
        row = gw[oh * Wp:oh * Wp + OW]
        src = gc[oh]
        for ow in range(OW):
            row[ow] = src[ow]


@kernel(fastmath=False)
def _taps3x3(acc, xp, wc, bias, R, C, L):
    """acc[j] = bias + the sum over the 3x3 taps (kh, kw) of wc[kh, kw] * xp[j + kh * R + kw * C],
    j < L, added in tap order."""
    w0, w1, w2, w3, w4 = wc[0, 0], wc[0, 1], wc[0, 2], wc[1, 0], wc[1, 1]
    w5, w6, w7, w8 = wc[1, 2], wc[2, 0], wc[2, 1], wc[2, 2]
    x0, x1, x2 = xp[0:L], xp[C:C + L], xp[2 * C:2 * C + L]
    x3, x4, x5 = xp[R:R + L], xp[R + C:R + C + L], xp[R + 2 * C:R + 2 * C + L]
    x6, x7, x8 = xp[2 * R:2 * R + L], xp[2 * R + C:2 * R + C + L], xp[2 * R + 2 * C:2 * R + 2 * C + L]
    for j in range(L):
        v = bias + w0 * x0[j]
        v = v + w1 * x1[j]
        v = v + w2 * x2[j]
        v = v + w3 * x3[j]
        v = v + w4 * x4[j]
        v = v + w5 * x5[j]
        v = v + w6 * x6[j]
        v = v + w7 * x7[j]
        acc[j] = v + w8 * x8[j]


@kernel(fastmath=False)
def _taps(acc, xp, wc, bias, Wp, DH, DW, L):
    """acc[j] = bias + the sum over the taps of wc[kh, kw] * xp[j + kh * DH * Wp + kw * DW], tap by
    tap."""
    KH, KW = wc.shape
    for j in range(L):
        acc[j] = bias
    for kh in range(KH):
        for kw in range(KW):
            wv = wc[kh, kw]
            off = kh * DH * Wp + kw * DW
            src = xp[off:off + L]
            for j in range(L):
                acc[j] += wv * src[j]


@kernel(fastmath=False)
def _depthwise_forward(out, xp, yw, wc, bias, Wp, S, DH, DW, relu):
    """One depthwise output plane out (OH, OW) from its padded input plane xp (rows Wp apart),
    computed in "wide" rows at stride 1: yw[j] for j = r * Wp + c reads xp[j + tap], junk where
    c >= (OW - 1) * S + 1 (dropped); stride S keeps every S-th row and column of that (S * S times
    the products, on contiguous rows)."""
    OH, OW = out.shape
    KH, KW = wc.shape
    L = (OH - 1) * S * Wp + (OW - 1) * S + 1
    acc = yw[:L]
    if KH == 3 and KW == 3:  # the nine taps in one pass: each output written once
        _taps3x3(acc, xp, wc, bias, Wp * DH, DW, L)
    else:
        _taps(acc, xp, wc, bias, Wp, DH, DW, L)
    for oh in range(OH):
        row = out[oh]
        if S == 1:
            src = acc[oh * Wp:oh * Wp + OW]
            for ow in range(OW):
                v = src[ow]
                row[ow] = v if not (relu and v < np.float32(0.0)) else np.float32(0.0)
        else:
            src = acc[oh * S * Wp:]
            for ow in range(OW):
                v = src[ow * S]
                row[ow] = v if not (relu and v < np.float32(0.0)) else np.float32(0.0)


@kernel(fastmath=False)
def _stuffed_plane(gw, gc, Wp, S):
    """gw (flat, L = (OH - 1) * S * Wp + (OW - 1) * S + 1) = the plane gc (OH, OW) at every S-th
    row (rows Wp apart) and column, zeros between: a strided layer's output gradient at the
    stride-1 positions it was taken from."""
    if S == 1:
        _wide_plane(gw, gc, Wp)
        return
    OH, OW = gc.shape
    for j in range(gw.shape[0]):
        gw[j] = np.float32(0.0)
    for oh in range(OH):
        row = gw[oh * S * Wp:]
        src = gc[oh]
        for ow in range(OW):
            row[ow * S] = src[ow]


@kernel(fastmath=False)
def conv2d_forward_grouped_block(i, y, xpad, yw, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu):
    """Block i of conv2d_forward_grouped: the plane y[n, co], i = n * Co + co."""
    Co, OH, OW = y.shape[1], y.shape[2], y.shape[3]
    if xpad.shape[1] > 1:  # depthwise, SH == SW: wide rows over a padded copy of the plane
        t = numba.get_thread_id()
        Wp = depthwise_pitch(x.shape[3], OW, w.shape[3], SW, DW, PL)
        n, co = i // Co, i % Co
        c = co // (Co // groups)
        _pad_plane(xpad[t], x[n, c], Wp, PT, PL)
        _depthwise_forward(y[n, co], xpad[t], yw[t], w[co, 0], b[co], Wp, SW, DH, DW, relu)
        return
    H, W = x.shape[2], x.shape[3]
    cig, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    n, co = i // Co, i % Co
    c0 = (co // (Co // groups)) * cig  # the group's first input channel
    out = y[n, co]
    bias = b[co]
    for oh in range(OH):
        for ow in range(OW):
            out[oh, ow] = bias
    for c in range(cig):
        xc = x[n, c0 + c]
        for kh in range(KH):
            for kw in range(KW):
                wv = w[co, c, kh, kw]
                off = kw * DW - PL
                lo, hi = _span(OW, W, SW, off)
                if lo >= hi:
                    continue
                for oh in range(OH):
                    ih = oh * SH - PT + kh * DH
                    if ih < 0 or ih >= H:
                        continue
                    if SW == 1:
                        orow = out[oh, lo:hi]
                        xrow = xc[ih, lo + off:hi + off]
                        for j in range(hi - lo):
                            orow[j] += wv * xrow[j]
                    else:
                        orow = out[oh]
                        xrow = xc[ih]
                        for ow in range(lo, hi):
                            orow[ow] += wv * xrow[ow * SW + off]
    if relu:
        for oh in range(OH):
            for ow in range(OW):
                v = out[oh, ow]
                out[oh, ow] = v if not v < np.float32(0.0) else np.float32(0.0)


@kernel(fastmath=False, export=True, team="blocks")
def conv2d_forward_grouped(y, xpad, yw, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu):
    """y = conv(x, w) + b, optionally ReLU'd.

    y: (N, Co, OH, OW); x: (N, Ci, H, W); w: (Co, Ci / groups, KH, KW); b: (Co,); stride (SH, SW),
    dilation (DH, DW), zero padding PT rows above and PL columns left (the padding below and to
    the right is implied by y's shape). Output channel co reads the input channels of its group,
    co // (Co / groups). Depthwise layers (Ci / groups = 1) with SH == SW run on wide rows when
    given the workspaces xpad (threads, Hp * Wp) and yw (threads, (OH - 1) * Wp + OW) (Wp:
    depthwise_pitch; Hp likewise for the rows); else xpad is (threads, 1), unread."""
    # disjoint output planes (n, co)
    args = (y, xpad, yw, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu)
    parallel_blocks(conv2d_forward_grouped_blocks(*args), conv2d_forward_grouped_block, args)


@kernel()
def conv2d_forward_depthwise_flat_blocks(y, masks, xpad, x, w, b, DH, DW, PT, PL, relu):
    return y.shape[0] * y.shape[1]


@kernel(fastmath=False)
def _masked_taps3x3(out, src, base, masks, wc, bias, W, DH, DW, PT, PL):
    """_masked_taps of a 3x3 filter, the taps added in the same order in registers."""
    P = out.shape[0]
    z = np.float32(0.0)
    R, C = DH * W, DW
    o = base - PT * W - PL  # where tap (0, 0) of output 0 reads
    w0, w1, w2, w3, w4 = wc[0, 0], wc[0, 1], wc[0, 2], wc[1, 0], wc[1, 1]
    w5, w6, w7, w8 = wc[1, 2], wc[2, 0], wc[2, 1], wc[2, 2]
    s0, s1, s2 = src[o:o + P], src[o + C:o + C + P], src[o + 2 * C:o + 2 * C + P]
    s3, s4, s5 = src[o + R:o + R + P], src[o + R + C:o + R + C + P], src[o + R + 2 * C:o + R + 2 * C + P]
    s6, s7 = src[o + 2 * R:o + 2 * R + P], src[o + 2 * R + C:o + 2 * R + C + P]
    s8 = src[o + 2 * R + 2 * C:o + 2 * R + 2 * C + P]
    m0, m1, m2, m3, m4 = masks[0], masks[1], masks[2], masks[3], masks[4]
    m5, m6, m7, m8 = masks[5], masks[6], masks[7], masks[8]
    for j in range(P):
        v = bias
        t = w0 * s0[j]
        v += t if m0[j] else z
        t = w1 * s1[j]
        v += t if m1[j] else z
        t = w2 * s2[j]
        v += t if m2[j] else z
        t = w3 * s3[j]
        v += t if m3[j] else z
        t = w4 * s4[j]
        v += t if m4[j] else z
        t = w5 * s5[j]
        v += t if m5[j] else z
        t = w6 * s6[j]
        v += t if m6[j] else z
        t = w7 * s7[j]
        v += t if m7[j] else z
        t = w8 * s8[j]
        out[j] = v + (t if m8[j] else z)


@kernel(fastmath=False)
def _masked_taps(out, src, base, masks, wc, bias, W, DH, DW, PT, PL):
    """out[j] = bias + the sum over the taps k = kh * KW + kw, in that order, of
    wc[kh, kw] * src[base + j + d_k] where masks[k, j] (the tap reads inside the plane), j < P,
    d_k = (kh DH - PT) W + kw DW - PL: a stride-1 plane of the input's size on its flat rows.
    The loads are unconditional (every src[base + j + d_k] must exist), the products selected."""
    P = out.shape[0]
    KH, KW = wc.shape
    z = np.float32(0.0)
    if KH == 3 and KW == 3:  # the nine taps in one pass: each output loaded and stored once
        _masked_taps3x3(out, src, base, masks, wc, bias, W, DH, DW, PT, PL)
        return
    for j in range(P):
        out[j] = bias
    for kh in range(KH):
        for kw in range(KW):
            wv = wc[kh, kw]
            s = src[base + (kh * DH - PT) * W + kw * DW - PL:]
            m = masks[kh * KW + kw]
            for j in range(P):
                t = wv * s[j]
                out[j] += t if m[j] else z


@kernel(fastmath=False)
def _edge_copy(xp, src, base, P, before, after):
    """Where plane [base, base + P) of src reaches past src's ends (``before`` elements before it,
    ``after`` after it): the plane copied into xp with that many zeros around it, and (xp, before);
    else (src, base), read in place."""
    if base - before >= 0 and base + P + after <= src.shape[0]:
        return src, base
    for j in range(xp.shape[0]):
        xp[j] = np.float32(0.0)
    for j in range(P):
        xp[before + j] = src[base + j]
    return xp, before



@kernel(fastmath=False)
def conv2d_forward_depthwise_flat_block(i, y, masks, xpad, x, w, b, DH, DW, PT, PL, relu):
    """Block i of conv2d_forward_depthwise_flat: the plane y[n, co], i = n * Co + co, read in place
    from x's flat memory (the taps past the plane's edges masked); the batch's first and last
    planes, whose reach leaves the array, from a copy with zero margins in xpad[thread]."""
    N, Co, H, W = y.shape
    KH, KW = w.shape[2], w.shape[3]
    Ci = x.shape[1]
    P = H * W
    n, co = i // Co, i % Co
    src = x.reshape(-1)
    base = (n * Ci + co // (Co // Ci)) * P
    back = PT * W + PL  # the farthest tap before a position, and after it:
    ahead = ((KH - 1) * DH - PT) * W + (KW - 1) * DW - PL
    out = y[n, co].reshape(-1)
    xsrc, xb = _edge_copy(xpad[numba.get_thread_id()], src, base, P, back, ahead)
    _masked_taps(out, xsrc, xb, masks, w[co, 0], b[co], W, DH, DW, PT, PL)
    if relu:
        for j in range(P):
            v = out[j]
            out[j] = v if not v < np.float32(0.0) else np.float32(0.0)


@kernel(fastmath=False, export=True, team="blocks")
def conv2d_forward_depthwise_flat(y, masks, xpad, x, w, b, DH, DW, PT, PL, relu):
    """y = conv(x, w) + b, optionally ReLU'd, for a depthwise layer at stride 1 whose output has
    its input's size: y (N, Co, H, W), x (N, Ci, H, W) C-contiguous, w (Co, 1, KH, KW), Co a
    multiple of Ci (output co reads channel co // (Co / Ci)); masks (KH * KW, H * W) uint8, 1
    where tap (kh, kw) of that output reads inside the plane (depthwise_masks); xpad (threads,
    PT W + PL + H W + PB W + PR) scratch. Small planes (MLPerf Tiny's 25 x 5) run on flat rows
    with no padded copy: a copy's scalar stores ahead of the taps' vector loads stall them."""
    # disjoint output planes (n, co)
    args = (y, masks, xpad, x, w, b, DH, DW, PT, PL, relu)
    parallel_blocks(conv2d_forward_depthwise_flat_blocks(*args), conv2d_forward_depthwise_flat_block, args)


@kernel()
def conv2d_backward_depthwise_flat_blocks(dx, dw_parts, db_parts, lanes, xpad, gpad, masks, cmasks, g, x, w,
                                          DH, DW, PT, PL, need_dx, need_dw):
    return dw_parts.shape[0] * x.shape[1]


@kernel(fastmath=False)
def conv2d_backward_depthwise_flat_block(i, dx, dw_parts, db_parts, lanes, xpad, gpad, masks, cmasks, g, x, w,
                                         DH, DW, PT, PL, need_dx, need_dw):
    """Pair i of (P * Ci) of conv2d_backward_depthwise_flat: for each example n of part p, dx[n, ci]
    (when need_dx: the forward's masked taps run backwards, flipped filters over the gradient)
    and the part's sums for channel ci's outputs co (its multiplier filters), added over the
    part's examples in order into lanes[thread, (k, tap or bias), 0]. A tap's sum over an example
    is one dot (the dot micro-kernel's fixed lanes) of the gradient, its columns that the tap
    reads outside the plane zeroed (cmasks), and the input shifted by the tap, over the rows
    where the tap reads inside the plane; the bias's against ones."""
    P = dw_parts.shape[0]
    N, Co, H, W = g.shape
    Ci = x.shape[1]
    KH, KW = w.shape[2], w.shape[3]
    R = KH * KW
    HW = H * W
    cog = Co // Ci
    p, ci = i // Ci, i % Ci
    n0, n1 = N * p // P, N * (p + 1) // P
    t = numba.get_thread_id()
    back = PT * W + PL  # the farthest tap before an output and after it
    ahead = ((KH - 1) * DH - PT) * W + (KW - 1) * DW - PL
    PB, PR = (KH - 1) * DH - PT, (KW - 1) * DW - PL  # the flipped filters' padding
    xs, gs = x.reshape(-1), g.reshape(-1)
    E = xpad.shape[1]
    sc = gpad[t]  # the gradient's edge copy (E), a multiplier's input gradient, KW masked copies, ones
    gcopy, tmp = sc[:E], sc[E:E + HW]
    G0 = E + HW  # where the masked copies start
    ONES = G0 + KW * HW
    z, one = np.float32(0.0), np.float32(1.0)
    for j in range(ONES, ONES + HW):
        sc[j] = one
    flat = lanes[t].reshape(-1)
    acc = lanes[t, :, 0]
    for r in range(cog * (R + 1)):
        acc[r] = z
    for n in range(n0, n1):
        xsrc, xb = _edge_copy(xpad[t], xs, (n * Ci + ci) * HW, HW, back, ahead)
        for k in range(cog):
            co = ci * cog + k
            base = k * (R + 1)
            gsrc, gb = _edge_copy(gcopy, gs, (n * Co + co) * HW, HW, ahead, back)
            dot_rows(flat, (base + R) * 2 + 1, 2, gsrc, gb, 0, 1, sc, ONES, 0, 1, HW)
            acc[base + R] += flat[(base + R) * 2 + 1]
            if need_dw:
                gc = gsrc[gb:gb + HW]
                for kw in range(KW):
                    gm, cm = sc[G0 + kw * HW:G0 + (kw + 1) * HW], cmasks[kw]
                    for j in range(HW):
                        gm[j] = gc[j] if cm[j] else z
                for kh in range(KH):
                    lo, hi = max(0, PT - kh * DH), min(H, H + PT - kh * DH)  # the rows it reads inside
                    if lo >= hi:
                        continue
                    for kw in range(KW):
                        r = kh * KW + kw
                        off = (kh * DH - PT) * W + kw * DW - PL
                        dot_rows(flat, (base + r) * 2 + 1, 2, xsrc, xb + off + lo * W, 0, 1, sc,
                                 G0 + kw * HW + lo * W, 0, 1, (hi - lo) * W)
                        acc[base + r] += flat[(base + r) * 2 + 1]
            if need_dx:
                wf = w[co, 0, ::-1, ::-1]
                if k == 0:
                    _masked_taps(dx[n, ci].reshape(-1), gsrc, gb, masks, wf, z, W, DH, DW, PB, PR)
                else:
                    _masked_taps(tmp, gsrc, gb, masks, wf, z, W, DH, DW, PB, PR)
                    d = dx[n, ci].reshape(-1)
                    for j in range(HW):
                        d[j] += tmp[j]
    for k in range(cog):
        for r in range(R):
            dw_parts[p, ci * cog + k, r] = acc[k * (R + 1) + r]
        db_parts[p, ci * cog + k] = acc[k * (R + 1) + R]


@kernel(fastmath=False, export=True, team="blocks")
def conv2d_backward_depthwise_flat(dx, dw_parts, db_parts, lanes, xpad, gpad, masks, cmasks, g, x, w, DH, DW,
                                   PT, PL, need_dx, need_dw):
    """The gradients of conv2d_forward_depthwise_flat from g (N, Co, H, W), C-contiguous (dy, masked
    by a fused ReLU already): dx (N, Ci, H, W) when need_dx; per part p of the batch the weight
    gradient dw_parts (P, Co, KH * KW) (zeros unless need_dw) and db_parts (P, Co), summed after
    the whole batch. masks (KH * KW, H * W) uint8: the forward's masks of the flipped filters
    (padded PB = (KH - 1) DH - PT rows above and PR = (KW - 1) DW - PL columns left: the input
    gradient is their forward over g); cmasks (KW, H * W) uint8: 1 where tap column kw reads
    inside the plane; lanes (threads, Co / Ci * (KH * KW + 1), 2); xpad (threads, as the
    forward's) and gpad (threads, that + (KW + 2) H W) scratch. Every plane read in place on its
    flat rows, each sum in a fixed order: any thread count, the same bits."""
    # disjoint (part, input channel) pairs: their input planes and their filters' parts
    args = (dx, dw_parts, db_parts, lanes, xpad, gpad, masks, cmasks, g, x, w, DH, DW, PT, PL, need_dx,
            need_dw)
    parallel_blocks(conv2d_backward_depthwise_flat_blocks(*args), conv2d_backward_depthwise_flat_block, args)


@kernel(fastmath=False)
def _row_sum(row):
    """The sum of row in a fixed order, folded in place: element k of every block of 16 into
    row[k] (sixteen independent sums), those sixteen in order, then the last len % 16 elements."""
    n = row.shape[0]
    m = n // 16 * 16
    if m >= 32:
        head = row[0:16]
        for j0 in range(16, m, 16):
            blk = row[j0:j0 + 16]
            for k in range(16):
                head[k] += blk[k]
        s = row[0]
        for k in range(1, 16):
            s += row[k]
        for j in range(m, n):
            s += row[j]
        return s
    s = np.float32(0.0)
    for j in range(n):
        s += row[j]
    return s


@kernel(fastmath=False)
def _mask_block(i, g, dy, y):
    """Plane i of (N * Co): g = dy where the fused ReLU passed (y > 0), else 0."""
    Co = g.shape[1]
    gs, ds, ys = g[i // Co, i % Co], dy[i // Co, i % Co], y[i // Co, i % Co]
    for oh in range(gs.shape[0]):
        for ow in range(gs.shape[1]):
            gs[oh, ow] = ds[oh, ow] if ys[oh, ow] > np.float32(0.0) else np.float32(0.0)


@kernel(fastmath=False)
def _dx_block(i, dx, g, w, SH, SW, DH, DW, PT, PL, groups):
    """Plane i of (N * Ci): dx[n, ci], the sum of what every output of its group read from it."""
    Ci, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    Co, OH, OW = g.shape[1], g.shape[2], g.shape[3]
    cig, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    cog = Co // groups
    n, ci = i // Ci, i % Ci
    c = ci % cig
    co0 = (ci // cig) * cog
    d = dx[n, ci]
    for ih in range(H):
        for iw in range(W):
            d[ih, iw] = np.float32(0.0)
    for co in range(co0, co0 + cog):
        gc = g[n, co]
        for kh in range(KH):
            for kw in range(KW):
                wv = w[co, c, kh, kw]
                off = kw * DW - PL
                lo, hi = _span(OW, W, SW, off)
                if lo >= hi:
                    continue
                for oh in range(OH):
                    ih = oh * SH - PT + kh * DH
                    if ih < 0 or ih >= H:
                        continue
                    if SW == 1:
                        drow = d[ih, lo + off:hi + off]
                        grow = gc[oh, lo:hi]
                        for j in range(hi - lo):
                            drow[j] += wv * grow[j]
                    else:
                        drow = d[ih]
                        grow = gc[oh]
                        for ow in range(lo, hi):
                            drow[ow * SW + off] += wv * grow[ow]


@kernel(fastmath=False)
def _dw_block(i, dw_parts, db_parts, lanes, g, x, w, SH, SW, DH, DW, PT, PL, groups, need_dw):
    """Pair i of (P * Co): part p's sums for output channel co over its share of the examples,
    into dw_parts[p, co] (Ci / groups * KH * KW, in the filter's order) and db_parts[p, co].
    ``lanes`` (threads, Ci / groups * KH * KW + 1, OW): this thread's sums by output column,
    each added up in column order at the end."""
    P = dw_parts.shape[0]
    N, Co, OH, OW = g.shape
    H, W = x.shape[2], x.shape[3]
    cig, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    R = cig * KH * KW
    p, co = i // Co, i % Co
    n0, n1 = N * p // P, N * (p + 1) // P
    c0 = (co // (Co // groups)) * cig
    acc = lanes[numba.get_thread_id()]
    for r in range(R + 1):
        for ow in range(OW):
            acc[r, ow] = np.float32(0.0)
    brow = acc[R]
    for n in range(n0, n1):
        gc = g[n, co]
        for oh in range(OH):
            grow = gc[oh]
            for ow in range(OW):
                brow[ow] += grow[ow]
        if not need_dw:
            continue
        for c in range(cig):
            xc = x[n, c0 + c]
            for kh in range(KH):
                for kw in range(KW):
                    off = kw * DW - PL
                    lo, hi = _span(OW, W, SW, off)
                    if lo >= hi:
                        continue
                    arow = acc[(c * KH + kh) * KW + kw]
                    for oh in range(OH):
                        ih = oh * SH - PT + kh * DH
                        if ih < 0 or ih >= H:
                            continue
                        if SW == 1:
                            a = arow[lo:hi]
                            gs = gc[oh, lo:hi]
                            xs = xc[ih, lo + off:hi + off]
                            for j in range(hi - lo):
                                a[j] += gs[j] * xs[j]
                        else:
                            grow = gc[oh]
                            xrow = xc[ih]
                            for ow in range(lo, hi):
                                arow[ow] += grow[ow] * xrow[ow * SW + off]
    for r in range(R):
        dw_parts[p, co, r] = _row_sum(acc[r, :OW])
    db_parts[p, co] = _row_sum(brow[:OW])


@kernel(fastmath=False)
def _crop_plane(d, dp, Wp, PT, PL):
    """d (H, W) = the padded plane dp (rows Wp apart) without its padding."""
    H, W = d.shape
    for ih in range(H):
        src = dp[(ih + PT) * Wp + PL:(ih + PT) * Wp + PL + W]
        row = d[ih]
        for iw in range(W):
            row[iw] = src[iw]


@kernel(fastmath=False)
def _gather3x3(dp, ge, wc, R, C, M, first):
    """dp[q] (= or +=) the sum over the 3x3 taps (kh, kw) of wc[kh, kw] * ge[M + q - kh * R - kw * C],
    q < dp's length, added in tap order: the input gradient of a stride-1 3x3 plane whose output
    gradient lies in ge's wide rows from M on."""
    Q = dp.shape[0]
    w0, w1, w2, w3, w4 = wc[0, 0], wc[0, 1], wc[0, 2], wc[1, 0], wc[1, 1]
    w5, w6, w7, w8 = wc[1, 2], wc[2, 0], wc[2, 1], wc[2, 2]
    g0, g1, g2 = ge[M:M + Q], ge[M - C:M - C + Q], ge[M - 2 * C:M - 2 * C + Q]
    g3, g4, g5 = ge[M - R:M - R + Q], ge[M - R - C:M - R - C + Q], ge[M - R - 2 * C:M - R - 2 * C + Q]
    g6, g7 = ge[M - 2 * R:M - 2 * R + Q], ge[M - 2 * R - C:M - 2 * R - C + Q]
    g8 = ge[M - 2 * R - 2 * C:M - 2 * R - 2 * C + Q]
    for q in range(Q):
        v = w0 * g0[q]
        v = v + w1 * g1[q]
        v = v + w2 * g2[q]
        v = v + w3 * g3[q]
        v = v + w4 * g4[q]
        v = v + w5 * g5[q]
        v = v + w6 * g6[q]
        v = v + w7 * g7[q]
        v = v + w8 * g8[q]
        dp[q] = v if first else dp[q] + v


@kernel(fastmath=False)
def _depthwise_backward_block(i, dx, dw_parts, db_parts, lanes, xpad, dpad, gw, ones, g, x, w, SH, SW, DH, DW,
                              PT, PL, groups, need_dx, need_dw):
    """Pair i of (P * Ci) of a depthwise layer on wide rows, one pass over its planes: for each
    example n of part p, dx[n, ci] (when need_dx) and the part's sums for the channel's outputs
    co (its ``multiplier`` filters) into dw_parts[p, co] and db_parts[p, co]. The taps' products
    over an example's wide rows (at stride 1, the gradient stuffed with zeros between a strided
    layer's positions) run on the dot micro-kernels and add up over the part's examples in order
    in ``lanes`` (threads, multiplier * (KH * KW + 1), 2); the bias's sums against ``ones`` (gw's
    length of 1.0). A 3x3 input gradient is gathered (each input written once a filter), others
    scattered. xpad, dpad: (threads, Hp * Wp), the padded input and its gradient; gw: (threads,
    at least L + 2 * margin and Hp * Wp + margin)."""
    P = dw_parts.shape[0]
    N, Co, OH, OW = g.shape
    Ci, W = x.shape[1], x.shape[3]
    KH, KW = w.shape[2], w.shape[3]
    R = KH * KW
    cog = Co // groups
    p, ci = i // Ci, i % Ci
    n0, n1 = N * p // P, N * (p + 1) // P
    t = numba.get_thread_id()
    Wp = depthwise_pitch(W, OW, KW, SW, DW, PL)
    L = (OH - 1) * SW * Wp + (OW - 1) * SW + 1  # the stride-1 wide rows the outputs lie on
    fast3 = KH == 3 and KW == 3
    RS, CS = DH * Wp, DW
    M = 2 * RS + 2 * CS if fast3 else 0  # zeros before and after the wide rows for the gather
    ge = gw[t]
    gs = ge[M:M + L]
    for j in range(M):
        ge[j] = np.float32(0.0)
    for j in range(M + L, ge.shape[0]):
        ge[j] = np.float32(0.0)
    xp, dp = xpad[t], dpad[t]
    W2 = lanes.shape[2]
    flat = lanes[t].reshape(-1)
    acc = lanes[t, :, 0]
    for r in range(cog * (R + 1)):
        acc[r] = np.float32(0.0)
    for n in range(n0, n1):
        if need_dw:
            _pad_plane(xp, x[n, ci], Wp, PT, PL)
        for k in range(cog):
            co = ci * cog + k
            base = k * (R + 1)
            _stuffed_plane(gs, g[n, co], Wp, SW)
            dot_rows(flat, (base + R) * W2 + 1, W2, ge, M, L, 1, ones, 0, L, 1, L)
            acc[base + R] += flat[(base + R) * W2 + 1]
            if need_dw:  # the KW taps of a kernel row: KW rows of xp, DW apart, against gs
                for kh in range(KH):
                    dot_rows(flat, (base + kh * KW) * W2 + 1, W2, xp, kh * RS, DW, KW, ge, M, L, 1, L)
                for r in range(R):
                    acc[base + r] += flat[(base + r) * W2 + 1]
            if not need_dx:
                continue
            if fast3:
                _gather3x3(dp, ge, w[co, 0], RS, CS, M, k == 0)
                continue
            if k == 0:
                for j in range(dp.shape[0]):
                    dp[j] = np.float32(0.0)
            for kh in range(KH):
                for kw in range(KW):
                    wv = w[co, 0, kh, kw]
                    off = kh * RS + kw * DW
                    d = dp[off:off + L]
                    for j in range(L):
                        d[j] += wv * gs[j]
        if need_dx:
            _crop_plane(dx[n, ci], dp, Wp, PT, PL)
    for k in range(cog):
        for r in range(R):
            dw_parts[p, ci * cog + k, r] = acc[k * (R + 1) + r]
        db_parts[p, ci * cog + k] = acc[k * (R + 1) + R]


@kernel(fastmath=False, export=True)
def conv2d_backward_grouped(dx, dw_parts, db_parts, g, lanes, xpad, dpad, gw, ones, dy, x, w, y, SH, SW, DH,
                            DW, PT, PL, groups, need_dx, need_dw, relu):
    """The gradients of conv2d_forward_grouped from dy (N, Co, OH, OW): dx (N, Ci, H, W) when
    need_dx; per part p of the batch (examples [N p / P, N (p + 1) / P)) the weight gradient
    dw_parts (P, Co, Ci / groups * KH * KW) (zeros unless need_dw) and db_parts (P, Co), summed
    after the whole batch (sum_parts). With ``relu``, y is the forward's output and g (N, Co, OH,
    OW) receives dy masked by it; else g is unread. lanes: (threads, Ci / groups * KH * KW + 1, OW);
    for a depthwise layer on wide rows (xpad and gw as conv2d_forward_grouped's xpad and yw; dpad
    as xpad) (threads, Co / groups * (KH * KW + 1), 2), with ``ones`` (gw's length of 1.0; else
    (1,)) and the whole backward in one pass (_depthwise_backward_block)."""
    N, Co = dy.shape[0], dy.shape[1]
    src = dy
    if relu:
        # disjoint planes (n, co)
        parallel_blocks(N * Co, _mask_block, (g, dy, y))
        src = g
    wide = xpad.shape[1] > 1
    if wide:
        # disjoint (part, input channel) pairs: their input planes and their filters' parts
        parallel_blocks(dw_parts.shape[0] * x.shape[1], _depthwise_backward_block,
                        (dx, dw_parts, db_parts, lanes, xpad, dpad, gw, ones, src, x, w, SH, SW, DH, DW, PT,
                         PL, groups, need_dx, need_dw))
        return
    if need_dx:
        # disjoint input planes (n, ci)
        parallel_blocks(N * dx.shape[1], _dx_block, (dx, src, w, SH, SW, DH, DW, PT, PL, groups))
    # disjoint (part, output channel) pairs
    parallel_blocks(dw_parts.shape[0] * Co, _dw_block,
                    (dw_parts, db_parts, lanes, src, x, w, SH, SW, DH, DW, PT, PL, groups, need_dw))
