"""3x3 stride-1 convolutions by Winograd's F(4x4, 3x3) for inference (forward only, no backward):
each 4x4 tile of outputs comes from the 6x6 patch of the padded input under it,
    y = A^T [ sum_ci (G g G^T) * (B^T d B) ] A
with the interpolation points 0, 1, -1, 2, -2 and infinity (Lavin and Gray, 2016):
    B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
    G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
    A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
The sum over input channels is 36 GEMMs, M[k] (tiles, Co) = V[k] (tiles, Ci) @ U[k] (Ci, Co): 36 *
Ci * Co multiply-adds per 16 outputs, 4x fewer than the direct convolution (F(2x2, 3x3) in
conv2d_winograd.py: 2.25x). The transforms' larger coefficients cost accuracy (relative errors of
about 1e-6 against 1e-7 in float32), which inference affords and training's gradients need not
(training keeps F(2x2, 3x3)). Inputs are plain channel-last padded planes (conv2d_positions'), the
outputs position-major rows for conv2d_positions' epilogue (bias, ReLU, a fused max pool).
"""
import numba
import numpy as np
from numba import prange

from ..._config import kernel
from ._util import copy_run, part_bounds, unchanged
from .blas import sgemm
from .conv2d_positions import _epilogue_positions, _transpose_planes

SKEW = 16  # floats between the 36 matrices of a block (as conv2d_winograd.SKEW: no cache-set aliasing)


@kernel(parallel=False)
def winograd4_filters(U, w, seen):
    """U (36, Ci, Co) = G g G^T for every 3x3 filter g = w[co, ci] (computed in float64, rounded
    once), unless ``seen`` (int32, w.size + 1; or empty: always) records that U was made from
    these very weights (_util.unchanged)."""
    if seen.shape[0] > 0 and unchanged(seen, w):
        return
    Co, Ci = w.shape[0], w.shape[1]
    t = np.empty((6, 3))
    for co in range(Co):
        for ci in range(Ci):
            g = w[co, ci]
            for c in range(3):  # t = G g (6 x 3)
                g0, g1, g2 = np.float64(g[0, c]), np.float64(g[1, c]), np.float64(g[2, c])
                t[0, c] = g0 / 4.0
                t[1, c] = -(g0 + g1 + g2) / 6.0
                t[2, c] = -(g0 - g1 + g2) / 6.0
                t[3, c] = g0 / 24.0 + g1 / 12.0 + g2 / 6.0
                t[4, c] = g0 / 24.0 - g1 / 12.0 + g2 / 6.0
                t[5, c] = g2
            for i in range(6):  # U = t G^T
                t0, t1, t2 = t[i, 0], t[i, 1], t[i, 2]
                k = 6 * i
                U[k, ci, co] = np.float32(t0 / 4.0)
                U[k + 1, ci, co] = np.float32(-(t0 + t1 + t2) / 6.0)
                U[k + 2, ci, co] = np.float32(-(t0 - t1 + t2) / 6.0)
                U[k + 3, ci, co] = np.float32(t0 / 24.0 + t1 / 12.0 + t2 / 6.0)
                U[k + 4, ci, co] = np.float32(t0 / 24.0 - t1 / 12.0 + t2 / 6.0)
                U[k + 5, ci, co] = np.float32(t2)


@kernel(parallel=False, inline=True)
def _lin_a(d, x0, x2, x4):  # rows 0 and 5 of B^T: 4 x0 - 5 x2 + x4
    four, five = np.float32(4.0), np.float32(5.0)
    for j in range(d.shape[0]):
        d[j] = four * x0[j] - five * x2[j] + x4[j]


@kernel(parallel=False, inline=True)
def _lin_b(d, x1, x2, x3, x4, sign):  # rows 1 and 2: (x4 - 4 x2) +- (x3 - 4 x1)
    four = np.float32(4.0)
    for j in range(d.shape[0]):
        d[j] = (x4[j] - four * x2[j]) + sign * (x3[j] - four * x1[j])


@kernel(parallel=False, inline=True)
def _lin_c(d, x1, x2, x3, x4, sign):  # rows 3 and 4: (x4 - x2) +- 2 (x3 - x1)
    for j in range(d.shape[0]):
        d[j] = (x4[j] - x2[j]) + sign * (x3[j] - x1[j])


@kernel(parallel=False)
def _quarter_columns(pq, pf, rows, Wq, C):
    """pq = the plane pf (flat (rows, Wq, C), Wq divisible by 4) with each row's columns grouped by
    their remainder mod 4 (column j at slot (j % 4) * Wq / 4 + j // 4): so the j-th column of every
    4x4 tile of a row is one contiguous run."""
    Wh = Wq // 4
    for r in range(rows):
        base = r * Wq * C
        for j in range(Wq):
            copy_run(pq, numba.uint64(base + ((j & 3) * Wh + (j >> 2)) * C), pf, numba.uint64(base + j * C),
                     numba.uint64(C))


@kernel(parallel=False)
def _input_tiles4(vf, pq, sc, Wq, C, TR, TW, KV):
    """vf (36, TR * TW, C) (matrix k at k * KV floats) = B^T d B for tile rows 0 .. TR - 1 of the
    plane pq (flat (rows, Wq, C), columns grouped mod 4: _quarter_columns): tile (r, tx)'s d is
    the 6x6 patch at plane rows 4r .., columns 4tx ... Each of the 6 + 36 results is one operation
    on runs of whole plane rows, then of TW * C floats (a tile row's tiles).
    sc: 6 * Wq * C floats of scratch."""
    R = Wq * C
    n = TW * C
    Wh = Wq // 4
    plus, minus, two, mtwo = np.float32(1.0), np.float32(-1.0), np.float32(2.0), np.float32(-2.0)
    for r in range(TR):
        p0 = 4 * r * R
        d0, d1, d2 = pq[p0:p0 + R], pq[p0 + R:p0 + 2 * R], pq[p0 + 2 * R:p0 + 3 * R]
        d3, d4, d5 = pq[p0 + 3 * R:p0 + 4 * R], pq[p0 + 4 * R:p0 + 5 * R], pq[p0 + 5 * R:p0 + 6 * R]
        _lin_a(sc[:R], d0, d2, d4)  # B^T d, whole rows
        _lin_b(sc[R:2 * R], d1, d2, d3, d4, plus)
        _lin_b(sc[2 * R:3 * R], d1, d2, d3, d4, minus)
        _lin_c(sc[3 * R:4 * R], d1, d2, d3, d4, two)
        _lin_c(sc[4 * R:5 * R], d1, d2, d3, d4, mtwo)
        _lin_a(sc[5 * R:6 * R], d1, d3, d5)
        o = r * n
        for i in range(6):  # (B^T d) B: columns 4tx + m of row i lie at slot (m % 4) * Wh + tx + m // 4
            a = sc[i * R:(i + 1) * R]
            x0, x1, x2 = a[0:n], a[Wh * C:Wh * C + n], a[2 * Wh * C:2 * Wh * C + n]
            x3, x4, x5 = a[3 * Wh * C:3 * Wh * C + n], a[C:C + n], a[(Wh + 1) * C:(Wh + 1) * C + n]
            k = 6 * i
            _lin_a(vf[k * KV + o:k * KV + o + n], x0, x2, x4)
            _lin_b(vf[(k + 1) * KV + o:(k + 1) * KV + o + n], x1, x2, x3, x4, plus)
            _lin_b(vf[(k + 2) * KV + o:(k + 2) * KV + o + n], x1, x2, x3, x4, minus)
            _lin_c(vf[(k + 3) * KV + o:(k + 3) * KV + o + n], x1, x2, x3, x4, two)
            _lin_c(vf[(k + 4) * KV + o:(k + 4) * KV + o + n], x1, x2, x3, x4, mtwo)
            _lin_a(vf[(k + 5) * KV + o:(k + 5) * KV + o + n], x1, x3, x5)


@kernel(parallel=False)
def _output_tiles4(yf, mf, sc, Co, TR, TW, OWq, KM):
    """yf (flat (4 * TR, OWq, Co), position-major rows of OWq = 4 * TW positions, columns grouped
    mod 4: column 4tx + q at slot q * TW + tx, conv2d_positions._slot with half = -TW) = A^T m A for
    the tiles of mf (36, TR * TW, Co) (matrix k at k * KM floats): whole runs of a tile row's
    tiles. sc: 24 * TW * Co floats of scratch."""
    n = TW * Co
    two, four, eight = np.float32(2.0), np.float32(4.0), np.float32(8.0)
    for r in range(TR):
        o = r * n
        for j in range(6):  # A^T m, column j: rows 0 .. 3 of t at sc[(4j + i) * n]
            m0 = mf[j * KM + o:j * KM + o + n]
            m1 = mf[(6 + j) * KM + o:(6 + j) * KM + o + n]
            m2 = mf[(12 + j) * KM + o:(12 + j) * KM + o + n]
            m3 = mf[(18 + j) * KM + o:(18 + j) * KM + o + n]
            m4 = mf[(24 + j) * KM + o:(24 + j) * KM + o + n]
            m5 = mf[(30 + j) * KM + o:(30 + j) * KM + o + n]
            t0 = sc[4 * j * n:(4 * j + 1) * n]
            t1 = sc[(4 * j + 1) * n:(4 * j + 2) * n]
            t2 = sc[(4 * j + 2) * n:(4 * j + 3) * n]
            t3 = sc[(4 * j + 3) * n:(4 * j + 4) * n]
            for c in range(n):
                t0[c] = m0[c] + (m1[c] + m2[c]) + (m3[c] + m4[c])
            for c in range(n):
                t1[c] = (m1[c] - m2[c]) + two * (m3[c] - m4[c])
            for c in range(n):
                t2[c] = (m1[c] + m2[c]) + four * (m3[c] + m4[c])
            for c in range(n):
                t3[c] = (m1[c] - m2[c]) + eight * (m3[c] - m4[c]) + m5[c]
        for i in range(4):  # (A^T m) A: output row 4r + i, column 4tx + q at slot q * TW + tx
            s0, s1, s2 = sc[i * n:(i + 1) * n], sc[(4 + i) * n:(5 + i) * n], sc[(8 + i) * n:(9 + i) * n]
            s3, s4 = sc[(12 + i) * n:(13 + i) * n], sc[(16 + i) * n:(17 + i) * n]
            s5 = sc[(20 + i) * n:(21 + i) * n]
            y0 = (4 * r + i) * OWq * Co
            y = yf[y0:y0 + 4 * n]
            for c in range(n):
                y[c] = s0[c] + (s1[c] + s2[c]) + (s3[c] + s4[c])
            for c in range(n):
                y[n + c] = (s1[c] - s2[c]) + two * (s3[c] - s4[c])
            for c in range(n):
                y[2 * n + c] = (s1[c] + s2[c]) + four * (s3[c] + s4[c])
            for c in range(n):
                y[3 * n + c] = (s1[c] - s2[c]) + eight * (s3[c] - s4[c]) + s5[c]


@kernel(parallel=False)
def winograd4_tiles(OH, OW, PKH, PKW):
    """Tile rows and tiles per row of F(4x4, 3x3) for an OH x OW output: they cover the output, or
    with a fused PKH x PKW pool (PKH > 0) the rows and columns that the pool reads."""
    if PKH > 0:
        OH, OW = OH // PKH * PKH, OW // PKW * PKW
    return (OH + 3) // 4, (OW + 3) // 4


@kernel()
def conv2d_infer_winograd4(out, argmax, yw, vw, mw, sw, pw, x, U, b, PH, PW, relu, PKH, PKW, S):
    """out = conv(x, w) + b for 3x3 filters, stride 1, zero padding (PH, PW) (at most 2); max(., 0)
    when relu; with PKH > 0 (and relu; PKH divides 4) a fused PKH x PKW max pool with stride =
    window, as conv2d_forward_positions' inference (no argmax). Inference only: no backward.

    out: (N, Co, OH, OW), or pooled, with argmax (int8, its shape; written only for inputs that
    hold a NaN or an infinity, as the epilogue's pool_scan does); x: (N, Ci, H, W); U: the transformed filters (36, Ci, Co)
    (winograd4_filters); b: (Co,). Each example's TH tile rows are split into S blocks (from the
    shapes only); the N * S blocks run in parallel. Workspaces indexed by thread, for the largest
    block's TR tile rows and TW tiles a row (Wq = max(4 * TW, W + 2 * PW - 2) + 2 plane columns,
    rounded up to a multiple of 4): pw (T, 2 * (4 * TR + 2) * Wq * Ci) (the plane twice); vw (T, 36 * (TR * TW * Ci + SKEW)); mw (T, 36 * (TR * TW * Co
    + SKEW)); yw (T, 4 * TR * 4 * TW * Co); sw (T, max(6 * Wq * Ci, 24 * TW * Co)).
    """
    N, Ci, H, W = x.shape
    Co = U.shape[2]
    OH = H + 2 * PH - 2
    OW = W + 2 * PW - 2
    TH, TW = winograd4_tiles(OH, OW, PKH, PKW)
    Wq = (max(4 * TW, OW) + 2 + 3) // 4 * 4  # plane columns, divisible by 4
    OWq = 4 * TW
    R = OH // PKH if PKH > 0 else OH  # rows of the epilogue's output
    U_ = 4 // PKH if PKH > 0 else 4  # epilogue rows per tile row
    Uf = U.reshape(36 * Ci * Co)
    for i in prange(N * S):  # each block writes its rows of out[n] and its thread's workspaces
        n = i // S
        t0, t1 = part_bounds(TH, S, i % S)
        if t1 > t0:
            t = numba.get_thread_id()
            TR = t1 - t0
            TB = TR * TW
            P = (4 * TR + 2) * Wq * Ci
            pf = pw[t][:P]
            pq = pw[t][P:2 * P]
            xf = np.ascontiguousarray(x[n]).reshape(Ci * H * W)
            _transpose_planes(pf, xf, H * W, 0, Ci, H, W, PH, PW, 4 * t0, 4 * t1 + 2, Wq)
            _quarter_columns(pq, pf, 4 * TR + 2, Wq, Ci)
            vf = vw[t].reshape(vw.shape[1])
            mf = mw[t].reshape(mw.shape[1])
            KV = TB * Ci + SKEW
            KM = TB * Co + SKEW
            _input_tiles4(vf, pq, sw[t], Wq, Ci, TR, TW, KV)
            for k in range(36):  # M[k] (TB, Co) = V[k] (TB, Ci) @ U[k] (Ci, Co)
                sgemm(False, False, TB, Co, Ci, np.float32(1.0), vf, k * KV, Ci, Uf, k * Ci * Co,
                      Co, np.float32(0.0), mf, k * KM, Co)
            yf = yw[t][:4 * TR * OWq * Co]
            _output_tiles4(yf, mf, sw[t], Co, TR, TW, OWq, KM)
            r0, r1 = t0 * U_, min(t1 * U_, R)
            if r1 > r0:
                _epilogue_positions(out[n][:, r0:r1], argmax[n][:, r0:r1], yf, b, OWq, relu, PKH, PKW, -TW,
                                    mw[t], False)
