"""Helpers of the fused conv epilogues, shared by the "wide" and "positions" convolutions: the
2x2 max select, the general pooling scan, and the gradient rows of the fused ReLU and max pool
(either or both)."""
import numpy as np

from ...runtime.config import kernel


@kernel()
def marked(best, k, relu):
    """The stored argmax of a fused max pool window: the offset k = ky * PKW + kx of the maximum
    inside its window, or with a fused ReLU (relu) -1 - k where that maximum is not positive (the
    ReLU passes no gradient there), so that the backward needs only the argmax, not the pooled
    values; int8 holds it for windows of up to 128 elements. -1 - k is ~k: a ^ (a >> 31) gives k
    back."""
    return k if not relu or best > np.float32(0.0) else -1 - k


@kernel()
def bias_relu(row, bias, relu):
    """row += bias in place, then max(., 0) when relu (NaN stays NaN): one long loop, vectorised."""
    zero = np.float32(0.0)
    if relu:
        for j in range(row.shape[0]):
            v = row[j] + bias
            row[j] = v if not v < zero else zero
    else:
        for j in range(row.shape[0]):
            row[j] += bias


@kernel()
def max2x2(v0, v1, v2, v3, relu):
    """Maximum of a 2x2 window (v0 v1 / v2 v3) (ReLU outputs when relu) and its ``marked`` offset
    (0-3), the first in row-major order on ties; branch-free selects, so that loops calling it
    vectorise."""
    t01 = v1 > v0
    b01 = v1 if t01 else v0
    k01 = 1 if t01 else 0
    t23 = v3 > v2
    b23 = v3 if t23 else v2
    k23 = 3 if t23 else 2
    t = b23 > b01  # strict: row 0 wins ties
    best = b23 if t else b01
    return best, marked(best, k23 if t else k01, relu)


@kernel()
def pool_scan(o, a, src, off, stride, P, bias, relu, PKH, PKW):
    """Bias + ReLU (when relu) + max pooling (window PKH x PKW, stride = window) of one channel
    whose value at position j = oy * P + ox is src[off + j * stride]: o, a (PH, PW) get the maxima
    and their window offsets (``marked``).
    As maxpool2d_forward: windows scanned in row-major order, the first maximum wins ties and
    the first NaN wins (ReLU keeps NaN, as torch.relu does). The exact, general path."""
    PH, PW = o.shape
    zero = np.float32(0.0)
    for py in range(PH):
        for px in range(PW):
            best = zero
            best_k = -1
            for ky in range(PKH):
                for kx in range(PKW):
                    j = (py * PKH + ky) * P + px * PKW + kx
                    v = src[off + j * stride] + bias
                    if relu:
                        v = v if not v < zero else zero
                    if best_k < 0 or (best == best and (v > best or v != v)):
                        best = v
                        best_k = ky * PKW + kx
            o[py, px] = best
            a[py, px] = marked(best, best_k, relu)


@kernel()
def wide_grad(gf, off, P, dout, y, Wp, relu):
    """The rows at (off, pitch P) of gf = dout (Co, OH, OW) on wide rows (row pitch Wp; Wp = OW
    lays them out exactly), zero where the fused ReLU's output y was not positive and in the junk
    columns."""
    Co, OH, OW = dout.shape
    zero = np.float32(0.0)
    if Wp == OW:  # no junk columns: one run per channel (per-row slices cost more than the copy
        L = OH * OW  # on 14 x 14 outputs)
        for co in range(Co):
            src = dout[co].reshape(L)
            yr = y[co].reshape(L) if relu else src
            dst = gf[off + co * P:off + co * P + L]
            for j in range(L):
                dst[j] = src[j] if (not relu or yr[j] > zero) else zero
        return
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


@kernel()
def wide_grad_pooled(gf, off, P, dout, a, Wp, L, PKH, PKW, gm, gi):
    """The rows at (off, pitch P) of gf = the gradient of the fused PKH x PKW max pool (and ReLU)
    routed to each window's argmax a (Co, PH, PW) (``marked`` window offsets), on rows of length
    L whose output row pitch is Wp (zero elsewhere); dout: the pooled values' gradient; gm, gi:
    float32 and int32 workspaces of at least Co * PH * PW and (Co + 1) * PH * PW elements.

    A vectorised pass first applies the ReLU mask (gm) and turns each offset k into its place
    relative to its window's corner, ky * Wp + kx (gi; ky by a multiply and a shift, exact for
    k, PKW <= 128); the corners' places are the same for every channel (the tail of gi). Then
    every window stores unconditionally (windows do not overlap, so each argmax is written
    once): a branch on the mask inside the scatter mispredicted and ran 5x slower, and
    splitting k inside it 2.5x."""
    Co, PH, PW = dout.shape
    HW = PH * PW
    M = Co * HW
    zero = np.float32(0.0)
    df = dout.reshape(M)
    af = a.reshape(M)
    corner = gi[M:M + HW]
    for py in range(PH):
        for px in range(PW):
            corner[py * PW + px] = py * PKH * Wp + px * PKW
    inv = np.int32(65536 // PKW + 1)  # (k * inv) >> 16 == k // PKW
    step = np.int32(Wp - PKW)
    for i in range(M):
        v = np.int32(af[i])
        gm[i] = df[i] if v >= 0 else zero  # the ReLU passed the maximum
        k = v ^ (v >> np.int32(31))  # the offset, marked or not
        gi[i] = k + ((k * inv) >> np.int32(16)) * step
    for co in range(Co):
        row = gf[off + co * P:off + co * P + L]
        for j in range(L):
            row[j] = zero
        gs = gm[co * HW:(co + 1) * HW]
        gd = gi[co * HW:(co + 1) * HW]
        for i in range(HW):
            row[corner[i] + gd[i]] = gs[i]


@kernel()
def grad_rows(gf, off, P, dout, y, a, Wp, L, relu, PKH, PKW, gm, gi):
    """wide_grad_pooled when pooled (PKH > 0; a: the argmax; gm, gi its workspaces; y unused),
    else wide_grad."""
    if PKH > 0:
        wide_grad_pooled(gf, off, P, dout, a, Wp, L, PKH, PKW, gm, gi)
    else:
        wide_grad(gf, off, P, dout, y, Wp, relu)
