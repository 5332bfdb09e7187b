"""Direct (no im2col, no BLAS) stride-1 convolution on wide rows, for layers with few channels,
where a GEMM of 6-32 rows runs far below the core's speed: the forward rows and the weight
gradient of one example, two output channels and up to five taps of a kernel row per pass.

Same layout as conv2d_wide.py: the plane x (C, Hp, Wp) read flat, the output rows
y[co].flat[j], j < L = (OH - 1) * Wp + OW, so that output j of channel co is
    sum over (c, ky, kx) of w[co, c, ky, kx] * x.flat[c * Hp * Wp + ky * Wp + kx + j].
A pass keeps 2 channels x up to 5 taps of weights in registers and streams j: 5 taps, then 3,
then single taps cover any kernel width. An odd last channel is paired with itself and its twin's
results are dropped (the forward writes them to a scratch row, row Co). 3x3 filters run 4
channels x 9 taps a pass in the forward (_quad3x3): 1.4-1.75x the pairs on 1 -> 32 and 3 -> 32.
"""
import numpy as np

from ...runtime.config import kernel


@kernel()
def _pair(co, Co):
    """The second channel of the pass starting at co: co + 1, or co itself for an odd last one."""
    return co + 1 if co + 1 < Co else co


@kernel()
def direct_rows(yf, P, xf, wf, Co, C, plane, KH, KW, Wp, L):
    """yf[co * P + j] = output j of channel co (no bias), for co < Co and j < L.

    yf: flat rows of pitch P >= L, Co + 1 of them (row Co: scratch for an odd Co);
    xf: the flat (padded) input plane, C planes of ``plane`` floats; wf: flat (Co, C, KH, KW).
    """
    ckk = C * KH * KW
    zero = np.float32(0.0)
    quads = Co // 4 * 4 if KH == 3 and KW == 3 else 0
    for co in range(0, quads, 4):
        _quad3x3(yf, P, xf, wf, co, C, plane, Wp, L)
    for co in range(quads, Co, 2):
        cb = _pair(co, Co)
        ya = yf[co * P:co * P + L]
        rb = cb if cb != co else Co  # the odd channel's twin goes to the scratch row
        yb = yf[rb * P:rb * P + L]
        for j in range(L):
            ya[j] = zero
            yb[j] = zero
        for c in range(C):
            for ky in range(KH):
                base = c * plane + ky * Wp
                wa = wf[co * ckk + (c * KH + ky) * KW:]
                wb = wf[cb * ckk + (c * KH + ky) * KW:]
                kx = 0
                while kx + 5 <= KW:
                    xs = xf[base + kx:base + kx + L + 4]
                    a0, a1, a2, a3, a4 = wa[kx], wa[kx + 1], wa[kx + 2], wa[kx + 3], wa[kx + 4]
                    b0, b1, b2, b3, b4 = wb[kx], wb[kx + 1], wb[kx + 2], wb[kx + 3], wb[kx + 4]
                    for j in range(L):
                        x0, x1, x2, x3, x4 = xs[j], xs[j + 1], xs[j + 2], xs[j + 3], xs[j + 4]
                        ya[j] += a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3 + a4 * x4
                        yb[j] += b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3 + b4 * x4
                    kx += 5
                if kx + 3 <= KW:
                    xs = xf[base + kx:base + kx + L + 2]
                    a0, a1, a2 = wa[kx], wa[kx + 1], wa[kx + 2]
                    b0, b1, b2 = wb[kx], wb[kx + 1], wb[kx + 2]
                    for j in range(L):
                        x0, x1, x2 = xs[j], xs[j + 1], xs[j + 2]
                        ya[j] += a0 * x0 + a1 * x1 + a2 * x2
                        yb[j] += b0 * x0 + b1 * x1 + b2 * x2
                    kx += 3
                while kx < KW:
                    xs = xf[base + kx:base + kx + L]
                    a0 = wa[kx]
                    b0 = wb[kx]
                    for j in range(L):
                        ya[j] += a0 * xs[j]
                        yb[j] += b0 * xs[j]
                    kx += 1


@kernel()
def _quad3x3(yf, P, xf, wf, co, C, plane, Wp, L):
    """direct_rows for the 4 channels co .. co + 3 of a 3x3 filter: a pass per input channel keeps
    the 4 x 9 weights in registers and reads each input value once for all of them (the first pass
    writes the rows, the others add to them)."""
    y0, y1 = yf[co * P:co * P + L], yf[(co + 1) * P:(co + 1) * P + L]
    y2, y3 = yf[(co + 2) * P:(co + 2) * P + L], yf[(co + 3) * P:(co + 3) * P + L]
    ckk = C * 9
    for c in range(C):
        w0 = wf[co * ckk + c * 9:]
        w1 = wf[(co + 1) * ckk + c * 9:]
        w2 = wf[(co + 2) * ckk + c * 9:]
        w3 = wf[(co + 3) * ckk + c * 9:]
        a0, a1, a2, a3, a4 = w0[0], w0[1], w0[2], w0[3], w0[4]
        a5, a6, a7, a8 = w0[5], w0[6], w0[7], w0[8]
        b0, b1, b2, b3, b4 = w1[0], w1[1], w1[2], w1[3], w1[4]
        b5, b6, b7, b8 = w1[5], w1[6], w1[7], w1[8]
        c0, c1, c2, c3, c4 = w2[0], w2[1], w2[2], w2[3], w2[4]
        c5, c6, c7, c8 = w2[5], w2[6], w2[7], w2[8]
        d0, d1, d2, d3, d4 = w3[0], w3[1], w3[2], w3[3], w3[4]
        d5, d6, d7, d8 = w3[5], w3[6], w3[7], w3[8]
        base = c * plane
        r0 = xf[base:base + L + 2]
        r1 = xf[base + Wp:base + Wp + L + 2]
        r2 = xf[base + 2 * Wp:base + 2 * Wp + L + 2]
        if c == 0:  # a loop of its own: a branch inside would stop the vectorisation
            for j in range(L):
                x0, x1, x2, x3, x4, x5 = r0[j], r0[j + 1], r0[j + 2], r1[j], r1[j + 1], r1[j + 2]
                x6, x7, x8 = r2[j], r2[j + 1], r2[j + 2]
                y0[j] = (a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3 + a4 * x4
                         + a5 * x5 + a6 * x6 + a7 * x7 + a8 * x8)
                y1[j] = (b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3 + b4 * x4
                         + b5 * x5 + b6 * x6 + b7 * x7 + b8 * x8)
                y2[j] = (c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3 + c4 * x4
                         + c5 * x5 + c6 * x6 + c7 * x7 + c8 * x8)
                y3[j] = (d0 * x0 + d1 * x1 + d2 * x2 + d3 * x3 + d4 * x4
                         + d5 * x5 + d6 * x6 + d7 * x7 + d8 * x8)
        else:
            for j in range(L):
                x0, x1, x2, x3, x4, x5 = r0[j], r0[j + 1], r0[j + 2], r1[j], r1[j + 1], r1[j + 2]
                x6, x7, x8 = r2[j], r2[j + 1], r2[j + 2]
                y0[j] += (a0 * x0 + a1 * x1 + a2 * x2 + a3 * x3 + a4 * x4
                          + a5 * x5 + a6 * x6 + a7 * x7 + a8 * x8)
                y1[j] += (b0 * x0 + b1 * x1 + b2 * x2 + b3 * x3 + b4 * x4
                          + b5 * x5 + b6 * x6 + b7 * x7 + b8 * x8)
                y2[j] += (c0 * x0 + c1 * x1 + c2 * x2 + c3 * x3 + c4 * x4
                          + c5 * x5 + c6 * x6 + c7 * x7 + c8 * x8)
                y3[j] += (d0 * x0 + d1 * x1 + d2 * x2 + d3 * x3 + d4 * x4
                          + d5 * x5 + d6 * x6 + d7 * x7 + d8 * x8)


@kernel()
def direct_weight_grad(dwf, gf, P, xf, Co, C, plane, KH, KW, Wp, L, first):
    """dwf[co, (c, ky, kx)] (+)= sum over j < L of gf[co * P + j] * xf[c * plane + ky * Wp + kx + j]:
    one example's weight gradient (overwritten when first, else accumulated).

    dwf: flat (Co, C * KH * KW); gf: the output gradient on wide rows of pitch P, zero in the junk
    columns; xf: the flat (padded) input plane, C planes of ``plane`` floats.
    """
    ckk = C * KH * KW
    for co in range(0, Co, 2):
        cb = _pair(co, Co)
        ga = gf[co * P:co * P + L]
        gb = gf[cb * P:cb * P + L]
        for c in range(C):
            for ky in range(KH):
                base = c * plane + ky * Wp
                da = dwf[co * ckk + (c * KH + ky) * KW:]
                db = dwf[cb * ckk + (c * KH + ky) * KW:]
                kx = 0
                while kx < KW:
                    n = 5 if kx + 5 <= KW else 3 if kx + 3 <= KW else 1
                    s = _tap_sums(ga, gb, xf[base + kx:base + kx + L + n - 1], L, n)
                    for i in range(n):
                        da[kx + i] = s[i] if first else da[kx + i] + s[i]
                        if cb != co:  # an odd last channel's twin adds nothing
                            db[kx + i] = s[5 + i] if first else db[kx + i] + s[5 + i]
                    kx += n


@kernel()
def _tap_sums(ga, gb, xs, L, n):
    """The dot products of ga and gb (L floats) with xs shifted by 0..n-1 (n = 5, 3 or 1):
    (a0..a4, b0..b4), unused taps zero."""
    a0 = a1 = a2 = a3 = a4 = np.float32(0.0)
    b0 = b1 = b2 = b3 = b4 = np.float32(0.0)
    if n == 5:
        for j in range(L):
            p, q = ga[j], gb[j]
            x0, x1, x2, x3, x4 = xs[j], xs[j + 1], xs[j + 2], xs[j + 3], xs[j + 4]
            a0 += p * x0
            a1 += p * x1
            a2 += p * x2
            a3 += p * x3
            a4 += p * x4
            b0 += q * x0
            b1 += q * x1
            b2 += q * x2
            b3 += q * x3
            b4 += q * x4
    elif n == 3:
        for j in range(L):
            p, q = ga[j], gb[j]
            x0, x1, x2 = xs[j], xs[j + 1], xs[j + 2]
            a0 += p * x0
            a1 += p * x1
            a2 += p * x2
            b0 += q * x0
            b1 += q * x1
            b2 += q * x2
    else:
        a0, b0 = _one_tap_sums(ga, gb, xs, L)
    return (a0, a1, a2, a3, a4, b0, b1, b2, b3, b4)


@kernel(fastmath=False)
def _one_tap_sums(ga, gb, xs, L):
    """The dot products of ga and gb with xs (L floats each), in eight lanes each (lane l sums the
    terms j = l, l + 8, ...; the lanes then added as a fixed tree, the last L % 8 terms after, in
    order). Without fast-math, so that every compile keeps this order: with 'reassoc', LLVM grouped
    the plain two-sum loop one way when it compiled it fresh and another in the code numba's disk
    cache hands back (1x1 and 2x2 layers' weight gradients differed between a first run and later
    runs of the same seed)."""
    a = np.zeros(8, np.float32)
    b = np.zeros(8, np.float32)
    m = L - L % 8
    for j in range(0, m, 8):
        for k in range(8):
            a[k] += ga[j + k] * xs[j + k]
            b[k] += gb[j + k] * xs[j + k]
    sa = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
    sb = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]))
    for j in range(m, L):
        sa += ga[j] * xs[j]
        sb += gb[j] * xs[j]
    return sa, sb
