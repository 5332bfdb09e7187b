"""Helpers of the fused conv epilogues, shared by the "wide" and "positions" convolutions: the
2x2 max select, the general pooling scan, and the gradient rows of the fused ReLU (+ max pool)."""
import numpy as np

from ..._config import kernel


@kernel(parallel=False)
def marked(best, i):
    """The stored argmax of a fused ReLU + max pool window: i where the maximum is positive,
    else -1 - i (the ReLU passes no gradient there), so that the backward needs only the
    argmax, not the pooled values. ``unmarked`` inverts it."""
    return i if best > np.float32(0.0) else -1 - i


@kernel(parallel=False)
def unmarked(a):
    """The index inside a stored argmax (see ``marked``)."""
    return a if a >= 0 else -1 - a


@kernel(parallel=False)
def max2x2(v0, v1, v2, v3, i0, P):
    """Maximum of a 2x2 window (v0 v1 / v2 v3) of ReLU outputs and its index (v0 at i0, rows P
    apart), the first in row-major order on ties, ``marked``; branch-free selects, so that loops
    calling it vectorise."""
    t01 = v1 > v0
    b01 = v1 if t01 else v0
    i01 = i0 + 1 if t01 else i0
    t23 = v3 > v2
    b23 = v3 if t23 else v2
    i23 = i0 + P + 1 if t23 else i0 + P
    t = b23 > b01  # strict: row 0 wins ties
    best = b23 if t else b01
    return best, marked(best, i23 if t else i01)


@kernel(parallel=False)
def pool_scan(o, a, src, off, stride, P, bias, PKH, PKW):
    """Bias + ReLU + max pooling (window PKH x PKW, stride = window) of one channel whose value at
    position j = oy * P + ox is src[off + j * stride]: o, a (PH, PW) get the maxima and their j
    (``marked``).
    As maxpool2d_forward: windows scanned in row-major order, the first maximum wins ties and
    the first NaN wins (ReLU keeps NaN, as torch.relu does). The exact, general path."""
    PH, PW = o.shape
    zero = np.float32(0.0)
    for py in range(PH):
        for px in range(PW):
            best = zero
            best_i = -1
            for ky in range(PKH):
                for kx in range(PKW):
                    j = (py * PKH + ky) * P + px * PKW + kx
                    v = src[off + j * stride] + bias
                    v = v if not v < zero else zero
                    if best_i < 0 or (best == best and (v > best or v != v)):
                        best = v
                        best_i = j
            o[py, px] = best
            a[py, px] = marked(best, best_i)


@kernel(parallel=False)
def wide_grad(gf, off, P, dout, y, Wp, relu):
    """The rows at (off, pitch P) of gf = dout (Co, OH, OW) on wide rows (row pitch Wp; Wp = OW
    lays them out exactly), zero where the fused ReLU's output y was not positive and in the junk
    columns."""
    Co, OH, OW = dout.shape
    zero = np.float32(0.0)
    for co in range(Co):
        for oy in range(OH):
            src = dout[co, oy]
            yr = y[co, oy]
            d0 = off + co * P + oy * Wp
            dst = gf[d0:d0 + Wp]
            for ox in range(OW):
                dst[ox] = src[ox] if (not relu or yr[ox] > zero) else zero
            if oy < OH - 1:
                for ox in range(OW, Wp):
                    dst[ox] = zero


@kernel(parallel=False)
def wide_grad_pooled(gf, off, P, dout, a, L, gm):
    """The rows at (off, pitch P) of gf = the gradient of the fused ReLU + max pool routed to each
    window's argmax a (Co, PH, PW), an index into the row of length L (zero elsewhere), ``marked``
    where the ReLU passed nothing; dout: the pooled values' gradient; gm: a workspace of at least
    Co * PH * PW floats.

    The ReLU mask is applied first in a vectorised pass, then every window stores
    unconditionally (windows do not overlap, so each argmax is written once): a branch on the
    mask inside the scatter mispredicted and ran 5x slower."""
    Co, PH, PW = dout.shape
    M = Co * PH * PW
    zero = np.float32(0.0)
    df = dout.reshape(M)
    af = a.reshape(M)
    for i in range(M):
        gm[i] = df[i] if af[i] >= 0 else zero  # the ReLU passed the maximum
    for co in range(Co):
        row = gf[off + co * P:off + co * P + L]
        for j in range(L):
            row[j] = zero
        s0 = co * PH * PW
        gs = gm[s0:s0 + PH * PW]
        ac = af[s0:s0 + PH * PW]
        for i in range(PH * PW):
            row[unmarked(ac[i])] = gs[i]


@kernel(parallel=False)
def grad_rows(gf, off, P, dout, y, a, Wp, L, relu, pooled, gm):
    """wide_grad_pooled when pooled (a: the argmax; gm its workspace; y unused), else wide_grad."""
    if pooled:
        wide_grad_pooled(gf, off, P, dout, a, L, gm)
    else:
        wide_grad(gf, off, P, dout, y, Wp, relu)
