"""3x3 stride-1 convolutions of wide layers by Winograd's F(4x4, 3x3) (Lavin and Gray, 2016): 36
multiply-adds per input and output channel for 16 outputs, against 64 in F(2x2, 3x3)
(conv2d_winograd.py) and 144 directly. The choice is made in WinogradPlan (backend/cpu_conv.py).

Each 4x4 tile of outputs comes from the 6x6 patch of the padded input under it:
    y = A^T [ sum_ci (G g G^T) * (B^T d B) ] A,
    B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
    G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
    A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
Their entries reach 8, so results carry a few more bits of rounding than F(2x2, 3x3)'s
(tests/test_kernels.py states the bounds). The sum over input channels is 36 GEMMs, one per element
k of the transformed tile: M[k] (tiles, Co) = V[k] (tiles, Ci) @ U[k] (Ci, Co). Wide layers have few
tiles per example (a 7 x 7 output has 4), so a block takes whole examples, enough for GEMMs of about
WINOGRAD4_TILES rows (the plan's). Inputs are laid out as channel-last padded planes (rows, Wp, C):
every transform is a few operations on the C channels of a position, or on a tile row's.

The backward: dU[k] (Co, Ci) = sum over tiles of dM[k]^T @ V[k], dM = A dY A^T (A the 6 x 4
transpose of A^T), dg = G^T dU G; the input gradient is the forward of the output gradient padded by
2 - P with the filters rotated by 180 degrees and their channels swapped.
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._conv_epilogue import grad_rows
from ._util import add_row_sums, copy_run, gather_channels, part_bounds, same_version, unchanged
from .bf16 import AMX_UNIT, gemm_pairs, gemm_tiles, pack_pairs, round_bf16, round_transposed
from .blas import sgemm
from .conv2d_positions import _epilogue_positions, pool2x2_transposed, rows_transposed
from .microkernel import gemm_nn, gemm_tn

# The 36 transformed matrices of a block lie SKEW floats more than their size apart (as in
# conv2d_winograd.py: equal strides put the streams of a transform into the same cache sets).
SKEW = 16

_F = np.float32


# Each transform is a few loops with at most five operands: LLVM vectorises those (with more, its
# checks that the operands do not overlap outgrow its limit and the loop stays scalar). The kernels
# that run them compile without fast-math: with 'reassoc', LLVM regrouped their sums one way in a
# fresh compile and another in the code numba's disk cache hands back, so a seed's first run on a
# machine and its later runs trained to different bits (tests/test_prebuilt.py).
@kernel(inline=True)
def _copy(d, a):
    for j in range(d.shape[0]):
        d[j] = a[j]


@kernel(inline=True)
def _lin3(d, a, x, b, y, c, z):
    for j in range(d.shape[0]):
        d[j] = x * a[j] + y * b[j] + z * c[j]


@kernel(inline=True)
def _lin4(d, a, x, b, y, c, z, e, v):
    for j in range(d.shape[0]):
        d[j] = x * a[j] + y * b[j] + z * c[j] + v * e[j]


@kernel(inline=True)
def _lin5(d, a, x, b, y, c, z, e, v, f, u):
    for j in range(d.shape[0]):
        d[j] = x * a[j] + y * b[j] + z * c[j] + v * e[j] + u * f[j]


@kernel(inline=True)
def _bt(d, d0, ds, s, s0, ss, n):
    """Runs d[d0 + r ds:][:n] (r = 0 .. 5) = B^T (s[s0 + i ss:][:n], i = 0 .. 5), elementwise."""
    x0, x1, x2 = s[s0:s0 + n], s[s0 + ss:s0 + ss + n], s[s0 + 2 * ss:s0 + 2 * ss + n]
    x3, x4 = s[s0 + 3 * ss:s0 + 3 * ss + n], s[s0 + 4 * ss:s0 + 4 * ss + n]
    x5 = s[s0 + 5 * ss:s0 + 5 * ss + n]
    _lin3(d[d0:d0 + n], x0, _F(4.0), x2, _F(-5.0), x4, _F(1.0))
    _lin4(d[d0 + ds:d0 + ds + n], x1, _F(-4.0), x2, _F(-4.0), x3, _F(1.0), x4, _F(1.0))
    _lin4(d[d0 + 2 * ds:d0 + 2 * ds + n], x1, _F(4.0), x2, _F(-4.0), x3, _F(-1.0), x4, _F(1.0))
    _lin4(d[d0 + 3 * ds:d0 + 3 * ds + n], x1, _F(-2.0), x2, _F(-1.0), x3, _F(2.0), x4, _F(1.0))
    _lin4(d[d0 + 4 * ds:d0 + 4 * ds + n], x1, _F(2.0), x2, _F(-1.0), x3, _F(-2.0), x4, _F(1.0))
    _lin3(d[d0 + 5 * ds:d0 + 5 * ds + n], x1, _F(4.0), x3, _F(-5.0), x5, _F(1.0))


@kernel(inline=True)
def _at(d, d0, ds, s, s0, ss, n):
    """Runs d[d0 + r ds:][:n] (r = 0 .. 3) = A^T (s[s0 + i ss:][:n], i = 0 .. 5)."""
    x0, x1, x2 = s[s0:s0 + n], s[s0 + ss:s0 + ss + n], s[s0 + 2 * ss:s0 + 2 * ss + n]
    x3, x4 = s[s0 + 3 * ss:s0 + 3 * ss + n], s[s0 + 4 * ss:s0 + 4 * ss + n]
    x5 = s[s0 + 5 * ss:s0 + 5 * ss + n]
    _lin5(d[d0:d0 + n], x0, _F(1.0), x1, _F(1.0), x2, _F(1.0), x3, _F(1.0), x4, _F(1.0))
    _lin4(d[d0 + ds:d0 + ds + n], x1, _F(1.0), x2, _F(-1.0), x3, _F(2.0), x4, _F(-2.0))
    _lin4(d[d0 + 2 * ds:d0 + 2 * ds + n], x1, _F(1.0), x2, _F(1.0), x3, _F(4.0), x4, _F(4.0))
    _lin5(d[d0 + 3 * ds:d0 + 3 * ds + n], x1, _F(1.0), x2, _F(-1.0), x3, _F(8.0), x4, _F(-8.0), x5, _F(1.0))


@kernel(inline=True)
def _a(d, d0, ds, s, s0, ss, n):
    """Runs d[d0 + r ds:][:n] (r = 0 .. 5) = A (s[s0 + i ss:][:n], i = 0 .. 3)."""
    x0, x1 = s[s0:s0 + n], s[s0 + ss:s0 + ss + n]
    x2, x3 = s[s0 + 2 * ss:s0 + 2 * ss + n], s[s0 + 3 * ss:s0 + 3 * ss + n]
    _copy(d[d0:d0 + n], x0)
    _lin4(d[d0 + ds:d0 + ds + n], x0, _F(1.0), x1, _F(1.0), x2, _F(1.0), x3, _F(1.0))
    _lin4(d[d0 + 2 * ds:d0 + 2 * ds + n], x0, _F(1.0), x1, _F(-1.0), x2, _F(1.0), x3, _F(-1.0))
    _lin4(d[d0 + 3 * ds:d0 + 3 * ds + n], x0, _F(1.0), x1, _F(2.0), x2, _F(4.0), x3, _F(8.0))
    _lin4(d[d0 + 4 * ds:d0 + 4 * ds + n], x0, _F(1.0), x1, _F(-2.0), x2, _F(4.0), x3, _F(-8.0))
    _copy(d[d0 + 5 * ds:d0 + 5 * ds + n], x3)


@kernel(inline=True)
def _g(d, d0, ds, s, s0, ss, n):
    """Runs d[d0 + r ds:][:n] (r = 0 .. 5) = G (s[s0 + i ss:][:n], i = 0 .. 2)."""
    x0, x1, x2 = s[s0:s0 + n], s[s0 + ss:s0 + ss + n], s[s0 + 2 * ss:s0 + 2 * ss + n]
    h = _F(-1.0 / 6.0)
    _lin3(d[d0:d0 + n], x0, _F(0.25), x1, _F(0.0), x2, _F(0.0))
    _lin3(d[d0 + ds:d0 + ds + n], x0, h, x1, h, x2, h)
    _lin3(d[d0 + 2 * ds:d0 + 2 * ds + n], x0, h, x1, -h, x2, h)
    _lin3(d[d0 + 3 * ds:d0 + 3 * ds + n], x0, _F(1.0 / 24.0), x1, _F(1.0 / 12.0), x2, _F(1.0 / 6.0))
    _lin3(d[d0 + 4 * ds:d0 + 4 * ds + n], x0, _F(1.0 / 24.0), x1, _F(-1.0 / 12.0), x2, _F(1.0 / 6.0))
    _copy(d[d0 + 5 * ds:d0 + 5 * ds + n], x2)


@kernel(inline=True)
def _gt(d, d0, ds, s, s0, ss, n):
    """Runs d[d0 + r ds:][:n] (r = 0 .. 2) = G^T (s[s0 + i ss:][:n], i = 0 .. 5)."""
    x0, x1, x2 = s[s0:s0 + n], s[s0 + ss:s0 + ss + n], s[s0 + 2 * ss:s0 + 2 * ss + n]
    x3, x4 = s[s0 + 3 * ss:s0 + 3 * ss + n], s[s0 + 4 * ss:s0 + 4 * ss + n]
    x5 = s[s0 + 5 * ss:s0 + 5 * ss + n]
    h = _F(1.0 / 6.0)
    _lin5(d[d0:d0 + n], x0, _F(0.25), x1, -h, x2, -h, x3, _F(1.0 / 24.0), x4, _F(1.0 / 24.0))
    _lin4(d[d0 + ds:d0 + ds + n], x1, -h, x2, h, x3, _F(1.0 / 12.0), x4, _F(-1.0 / 12.0))
    _lin5(d[d0 + 2 * ds:d0 + 2 * ds + n], x1, -h, x2, -h, x3, h, x4, h, x5, _F(1.0))


@kernel()
def panel(B):
    """Columns of a panel of the packed filter transforms (winograd4_filters) of B columns: 64, 32
    or 16, or all B where 16 does not divide them."""
    return 64 if B % 64 == 0 else (32 if B % 32 == 0 else (16 if B % 16 == 0 else B))


@kernel(fastmath=False, export=True, team="serial")
def winograd4_filters(U, w, rotate, work, seen, version, Uh):
    """The filters' transforms U[k] = G g G^T (k = 6 i + j for row i, column j) of every 3x3 filter
    g of w (Co, Ci, 3, 3): U[k] (Ci, Co) from g = w[co, ci] (rotate False, the forward); U[k] (Co,
    Ci) from w[co, ci] rotated by 180 degrees (rotate True, the input gradient). U (36, A, B) holds
    them packed in panels of P = panel(B) columns (each U[k] as (B / P, A, P)), so that the GEMMs
    read a panel's rows contiguously (rows of 256 floats, a kilobyte apart, fell into few cache
    sets: 70 against 97 GFLOP/s for a 64-tile block of a 256 -> 256 layer on one Zen 4 core).
    ``seen`` and ``version`` as winograd_filters' (conv2d_winograd.py): inference transforms once.
    work: 63 * B floats: the taps of a row of U, G g, then the row's 36 transforms. Uh: empty, or
    (36 * A * B,) uint16 that receives U packed for bf16 (winograd4_filters_pairs) whenever U is
    made."""
    if version.shape[0] > 0:
        if same_version(seen, version):
            return
    elif seen.shape[0] > 0 and unchanged(seen, w):
        return
    Ci = w.shape[1]
    A, B = U.shape[1], U.shape[2]
    P = panel(B)
    wf = w.reshape(w.size)
    Uf = U.reshape(U.size)
    for a in range(A):
        for t in range(9):  # work[t] (B): tap t of the filters of U's row a
            dst = work[t * B:(t + 1) * B]
            if rotate:
                for b in range(B):
                    dst[b] = wf[(a * Ci + b) * 9 + 8 - t]
            else:
                for b in range(B):
                    dst[b] = wf[(b * Ci + a) * 9 + t]
        for c in range(3):  # G g, column c: row i at work[9 + 3 i + c]
            _g(work, (9 + c) * B, 3 * B, work, c * B, 3 * B, B)
        for i in range(6):  # (G g) G^T, row i: U[6 i + j, a] at work[27 + 6 i + j]
            _g(work, (27 + 6 * i) * B, B, work, (9 + 3 * i) * B, B, B)
        for k in range(36):
            for p in range(B // P):
                _copy(Uf[((k * (B // P) + p) * A + a) * P:((k * (B // P) + p) * A + a + 1) * P],
                      work[(27 + k) * B + p * P:(27 + k) * B + (p + 1) * P])
    if Uh.shape[0] > 0:
        winograd4_filters_pairs(Uh, U)


@kernel()
def _gemms4(mf, KM, vf, KV, Uf, TB, Ci, Co):
    """M[k] (TB, Co) = V[k] (TB, Ci) @ U[k] (Ci, Co) for the 36 k (matrices k at k * KM and k * KV
    floats in mf and vf; U packed by winograd4_filters): a GEMM per panel, on the FMA blocks (by
    the BLAS for fewer than 16 columns)."""
    P = panel(Co)
    if Co < 16:  # narrower than a vector (the input gradient of a layer of few input channels)
        for k in range(36):
            sgemm(False, False, TB, Co, Ci, np.float32(1.0), vf, k * KV, Ci, Uf, k * Ci * Co, Co,
                  np.float32(0.0), mf, k * KM, Co)
        return
    for k in range(36):
        for p in range(Co // P):
            gemm_nn(mf, k * KM + p * P, Co, vf, k * KV, Ci, Uf, (k * (Co // P) + p) * Ci * P, P, TB, P, Ci)


@kernel()
def winograd4_filters_pairs(Uh, U):
    """Uh (flat (36, A / 2, B, 2), uint16) = the packed filter transforms U (36, A, B) (winograd4_filters'
    panels) rounded to bfloat16 and packed in pairs along their rows (bf16.pack_pairs' layout: the
    weights of _gemms4_pairs). A even."""
    A, B = U.shape[1], U.shape[2]
    P = panel(B)
    Uf = U.reshape(U.size)
    for k in range(36):
        for p in range(B // P):
            base = (k * (B // P) + p) * A * P
            pack_pairs(Uh, k * A * B + 2 * p * P, 2 * B, Uf, base, P, A, P)


@kernel()
def _gemms4_pairs(mf, KM, vh, KV, Uh, TB, Ci, Co):
    """_gemms4 in bf16 (precision "bf16"): M[k] (TB, Co) = V[k] (TB, Ci) @ U[k] (Ci, Co) with V
    rounded to bfloat16 (vh, matrix k at k * KV) and U packed by winograd4_filters_pairs; Ci even,
    Co a multiple of 16; on AMX's tiles where Ci is a multiple of 16."""
    for k in range(36):
        if AMX_UNIT and Ci % 16 == 0:
            gemm_tiles(mf, k * KM, Co, vh, k * KV, Ci, Uh, k * Ci * Co, 2 * Co, TB, Co, Ci // 2, True)
        else:
            gemm_pairs(mf, k * KM, Co, vh, k * KV, Ci, 2, Uh, k * Ci * Co, 2 * Co, TB, Co, Ci // 2, True)


@kernel(fastmath=False, export=True)
def winograd4_filter_gradient(dw, du, work):
    """dw (Co, Ci, 3, 3) = G^T du[:, ci, co] G: the filter gradients from their transforms du
    (36, Ci, Co), the sum of conv2d_backward_winograd4's parts. work: 27 * Co floats."""
    Co, Ci = dw.shape[0], dw.shape[1]
    duf = du.reshape(du.size)
    for ci in range(Ci):
        for j in range(6):  # q = G^T u: row r, column j at work[3 j + r]
            _gt(work, 3 * j * Co, Co, duf, (j * Ci + ci) * Co, 6 * Ci * Co, Co)
        for r in range(3):  # dg = q G: row r, column c at work[18 + 3 r + c]
            _gt(work, (18 + 3 * r) * Co, Co, work, r * Co, 3 * Co, Co)
        for co in range(Co):
            d = dw[co, ci]
            for t in range(9):
                d[t // 3, t % 3] = work[(18 + t) * Co + co]


@kernel()
def _plane4(pf, x, PH, PW, Hp, Wp):
    """pf (flat (Hp, Wp, C)) = x (C, H, W) zero-padded by PH rows above and PW columns on the left
    (zeros below and to the right up to the plane's size; what lies past it is not read), channel
    last."""
    C, H, W = x.shape
    zero = np.float32(0.0)
    for i in range(Hp * Wp * C):
        pf[i] = zero
    rows, cols = min(H, Hp - PH), min(W, Wp - PW)
    if C % 16 == 0:
        HW = H * W
        xf = np.ascontiguousarray(x).reshape(C * HW)
        for i in range(rows):
            for j in range(cols):
                gather_channels(pf, ((PH + i) * Wp + PW + j) * C, xf, C, HW, i * W + j)
        return
    for c in range(C):
        for i in range(rows):
            src = x[c, i]
            for j in range(cols):
                pf[((PH + i) * Wp + PW + j) * C + c] = src[j]


@kernel()
def _plane4_nhwc(pf, x, PH, PW, Hp, Wp):
    """_plane4 of a channel-last example x (H, W, C) (an inference chain's): a run copy per row."""
    H, W, C = x.shape
    zero = np.float32(0.0)
    for i in range(Hp * Wp * C):
        pf[i] = zero
    xf = np.ascontiguousarray(x).reshape(H * W * C)
    u = numba.uint64
    for i in range(min(H, Hp - PH)):
        copy_run(pf, u(((PH + i) * Wp + PW) * C), xf, u(i * W * C), u(min(W, Wp - PW) * C))


@kernel(fastmath=False)
def _input_tiles4(vf, pf, sc, Wp, C, TH, TW, T0, KS):
    """vf (36, T0 + TH * TW, C) (matrix k at k * KS floats; rows T0 .. written) = B^T d B for the
    TH x TW tiles of the plane pf (flat (rows, Wp, C)): d is the 6x6 patch at rows 4 ty ..,
    columns 4 tx ... B^T on whole plane rows first, then B along each tile's columns.
    sc: 6 * Wp * C floats of scratch."""
    R = Wp * C
    for ty in range(TH):
        _bt(sc, 0, R, pf, 4 * ty * R, R, R)  # B^T d on whole rows: row i at sc[i R]
        for tx in range(TW):
            o = (T0 + ty * TW + tx) * C
            for i in range(6):  # (B^T d) B, row i: the tile's six columns, C apart
                _bt(vf, 6 * i * KS + o, KS, sc, i * R + 4 * tx * C, C, C)


@kernel(fastmath=False)
def _output_tiles4(yf, mf, sc, Co, TH, TW, T0, KM):
    """yf (flat (4 TH, 4 TW, Co)) = A^T m A for the TH x TW tiles of rows T0 .. of mf (36, tiles,
    Co) (matrix k at k * KM floats): one example's outputs, position-major (what lies past the
    output is computed and never read). A^T on runs of a tile row's tiles first, then A along
    each tile's rows. sc: 24 * TW * Co floats of scratch."""
    n = TW * Co
    P = 4 * TW * Co  # an output row
    for ty in range(TH):
        o = (T0 + ty * TW) * Co
        for j in range(6):  # A^T m, column j, on the tile row's tiles: row r at sc[(6 r + j) n]
            _at(sc, j * n, 6 * n, mf, j * KM + o, 6 * KM, n)
        for r in range(4):  # (A^T m) A: output row 4 ty + r, tile tx's four columns
            for tx in range(TW):
                _at(yf, (4 * ty + r) * P + 4 * tx * Co, Co, sc, 6 * r * n + tx * Co, n, Co)


@kernel(fastmath=False)
def _gradient_tiles4(zf, gp, sc, Wg, Co, TH, TW, OY, OX, T0, KS):
    """zf (36, T0 + TH * TW, Co) (matrix k at k * KS floats; rows T0 .. written) = A g A^T for the
    TH x TW output tiles: g is the 4x4 block of the output gradient at rows 4 ty .., columns 4 tx ..,
    read from the gradient plane gp (flat (rows, Wg, Co)), where output (oy, ox) lies at (oy + OY,
    ox + OX) (zero outside the outputs). sc: 6 * Wg * Co floats of scratch."""
    R = Wg * Co
    for ty in range(TH):
        _a(sc, 0, R, gp, (4 * ty + OY) * R, R, R)  # A g on whole rows: row i at sc[i R]
        for tx in range(TW):
            o = (T0 + ty * TW + tx) * Co
            for i in range(6):  # (A g) A^T, row i: the block's four columns, Co apart
                _a(zf, 6 * i * KS + o, KS, sc, i * R + (4 * tx + OX) * Co, Co, Co)


@kernel()
def _weight_gemms4(duf, mf, vf, Co, Ci, TB, KM, KV, first):
    """dU[k] (Ci, Co) (+)= V[k]^T (Ci, TB) @ dM[k] (TB, Co) for the 36 k (the weight gradient's
    transforms, transposed: duf flat (36, Ci, Co), any Ci); overwrites when first (with zeros when
    TB is 0). Co divisible by 16."""
    if TB == 0:
        if first:
            duf[:] = np.float32(0.0)
        return
    for k in range(36):
        gemm_tn(duf, k * Ci * Co, Co, vf, k * KV, Ci, mf, k * KM, Co, Ci, Co, TB, first)


@kernel()
def _weight_gemms4_pairs(duf, mf, vf, vp, mp, Co, Ci, TB, KM, KV, first):
    """_weight_gemms4 in bf16: V[k] and dM[k] rounded and packed in pairs of tiles (vp, mp: 36
    matrices of CAP rounded up to 16 tiles, as pairs 2 Ci and 2 Co apart), then dU[k] (+)= V[k]^T @
    dM[k] by gemm_pairs. Ci and Co multiples of 16. On AMX's tiles V[k]^T is stored by rows
    (round_transposed: Ci rows of the tiles rounded up to 16, zeros past TB) and the sums run over
    those tiles (the zeros add nothing)."""
    if TB == 0:
        if first:
            duf[:] = np.float32(0.0)
        return
    KP = vp.shape[0] // 36
    KQ = mp.shape[0] // 36
    T2 = (TB + 1) // 2
    T16 = (TB + 15) // 16 * 16
    for k in range(36):
        pack_pairs(mp, k * KQ, 2 * Co, mf, k * KM, Co, TB, Co)
        if AMX_UNIT:
            mp[k * KQ + T2 * 2 * Co:k * KQ + T16 * Co] = 0
            round_transposed(vp, k * KP, KP // Ci, vf, k * KV, Ci, TB, Ci, T16)
            gemm_tiles(duf, k * Ci * Co, Co, vp, k * KP, KP // Ci, mp, k * KQ, 2 * Co,
                       Ci, Co, T16 // 2, first)
        else:
            pack_pairs(vp, k * KP, 2 * Ci, vf, k * KV, Ci, TB, Ci)
            gemm_pairs(duf, k * Ci * Co, Co, vp, k * KP, 2, 2 * Ci, mp, k * KQ, 2 * Co, Ci, Co, T2, first)


@kernel(inline=True)
def _weight_gemms(duf, mf, vf, vp, mp, Co, Ci, TB, KM, KV, first, bf16):
    if bf16:
        _weight_gemms4_pairs(duf, mf, vf, vp, mp, Co, Ci, TB, KM, KV, first)
    else:
        _weight_gemms4(duf, mf, vf, Co, Ci, TB, KM, KV, first)


@kernel()
def winograd4_tiles(OH, OW, PKH, PKW):
    """Tile rows and tiles per row (4 x 4 outputs each) that cover an OH x OW output, or with a
    fused PKH x PKW pool (PKH > 0) the rows and columns that the pool reads."""
    if PKH > 0:
        OH, OW = OH // PKH * PKH, OW // PKW * PKW
    return (OH + 3) // 4, (OW + 3) // 4


@kernel(export=True, team="blocks")
def conv2d_forward_winograd4(out, argmax, yw, vw, mw, sw, pw, ew, x, U, b, PH, PW, relu, PKH, PKW, G,
                             argmax_too, layout, vhw, Uh, bf16):
    """out = conv(x, w) + b for 3x3 filters, stride 1, zero padding (PH, PW); max(., 0) when relu;
    with PKH > 0 a fused PKH x PKW max pool, as conv2d_forward_winograd (its out, argmax,
    argmax_too and layout). U: the transformed filters (36, Ci, Co) (winograd4_filters); b: (Co,);
    Ci and Co divisible by 16. Blocks of G examples (the last may hold fewer) run in parallel.
    Workspaces indexed by thread: yw (T, 16 * TH * TW * Co); vw (T, 36 * (G * TH * TW * Ci + SKEW));
    mw (T, 36 * (G * TH * TW * Co + SKEW)); pw (T, (4 TH + 2) * (4 TW + 2) * Ci); sw (T, 24 *
    (TW + 1) * max(Ci, Co)); ew (T, OH * OW * Co): the epilogue's. ``bf16``: the GEMMs in bfloat16
    (_gemms4_pairs): vhw (T, as vw) (uint16) takes the rounded tiles, Uh the packed filters
    (winograd4_filters_pairs); else both unread."""
    args = (out, argmax, yw, vw, mw, sw, pw, ew, x, U, b, PH, PW, relu, PKH, PKW, G, argmax_too, layout,
            vhw, Uh, bf16)
    parallel_blocks(conv2d_forward_winograd4_blocks(*args), conv2d_forward_winograd4_block, args)


@kernel()
def conv2d_forward_winograd4_blocks(out, argmax, yw, vw, mw, sw, pw, ew, x, U, b, PH, PW, relu, PKH, PKW, G,
                                    argmax_too, layout, vhw, Uh, bf16):
    return (x.shape[0] + G - 1) // G


@kernel()
def _epilogue4(out, argmax, n, of, yf, b, pitch, OH, OW, R, RW, relu, PKH, PKW, work, argmax_too, nhwc):
    """Example n's epilogue (bias, ReLU, fused pool) from the position-major yf (rows of ``pitch``
    positions) into of = out[n] read flat, by conv2d_positions' epilogues."""
    Co = b.shape[0]
    if (PKH == 2 and PKW == 2 and not argmax_too and Co % 16 == 0 and R * RW >= 16
            and pool2x2_transposed(of, R, 0, yf, b, pitch, 0, R, RW, work, nhwc, relu)):
        return
    if PKH == 0 and Co % 16 == 0 and OH * OW >= 16:
        rows_transposed(of, R, 0, yf, b, pitch, 0, OH, OW, relu, work, nhwc)
        return
    if not nhwc:
        _epilogue_positions(out[n], argmax[n], yf, b, pitch, relu, PKH, PKW, 0, work, argmax_too)
        return
    rows = np.empty((Co, R, RW), np.float32)  # channel-last output: the exact path, then transposed
    _epilogue_positions(rows, argmax[n], yf, b, pitch, relu, PKH, PKW, 0, work, argmax_too)
    for r in range(R):
        for c in range(RW):
            for co in range(Co):
                of[(r * RW + c) * Co + co] = rows[co, r, c]


@kernel()
def conv2d_forward_winograd4_block(i, out, argmax, yw, vw, mw, sw, pw, ew, x, U, b, PH, PW, relu, PKH, PKW, G,
                                   argmax_too, layout, vhw, Uh, bf16):
    """Block i of conv2d_forward_winograd4: examples G i .. G i + G - 1, its thread's workspaces."""
    if layout & 1:
        N, H, W, Ci = x.shape
    else:
        N, Ci, H, W = x.shape
    Co = U.shape[2]
    OH = H + 2 * PH - 2
    OW = W + 2 * PW - 2
    TH, TW = winograd4_tiles(OH, OW, PKH, PKW)
    R = OH // PKH if PKH > 0 else OH  # rows and columns of the epilogue's output
    RW = OW // PKW if PKH > 0 else OW
    TPI = TH * TW
    n0 = i * G
    n1 = min(N, n0 + G)
    t = numba.get_thread_id()
    pf = pw[t].reshape(pw.shape[1])
    vf = vw[t].reshape(vw.shape[1])
    mf = mw[t].reshape(mw.shape[1])
    sc = sw[t].reshape(sw.shape[1])
    TB = (n1 - n0) * TPI
    KV = TB * Ci + SKEW
    KM = TB * Co + SKEW
    for n in range(n0, n1):
        if layout & 1:
            _plane4_nhwc(pf, x[n], PH, PW, 4 * TH + 2, 4 * TW + 2)
        else:
            _plane4(pf, x[n], PH, PW, 4 * TH + 2, 4 * TW + 2)
        _input_tiles4(vf, pf, sc, 4 * TW + 2, Ci, TH, TW, (n - n0) * TPI, KV)
    if bf16:
        vh = vhw[t].reshape(vhw.shape[1])
        round_bf16(vh, 0, vf, 0, 36 * KV)
        _gemms4_pairs(mf, KM, vh, KV, Uh, TB, Ci, Co)
    else:
        _gemms4(mf, KM, vf, KV, U.reshape(36 * Ci * Co), TB, Ci, Co)
    yf = yw[t][:16 * TPI * Co]
    for n in range(n0, n1):
        _output_tiles4(yf, mf, sc, Co, TH, TW, (n - n0) * TPI, KM)
        _epilogue4(out, argmax, n, out[n].reshape(out[n].size), yf, b, 4 * TW, OH, OW, R, RW, relu, PKH, PKW,
                   ew[t], argmax_too, layout & 2 != 0)


@kernel(export=True)
def conv2d_backward_winograd4(dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, ew, zb, gmask,
                              gidx, dout, x, U2, y, argmax, PH, PW, G, CAP, need_dx, need_dw, relu, PKH, PKW,
                              vxh, vpw, mpw, U2h, bf16):
    """Gradients of conv2d_forward_winograd4, as conv2d_backward_winograd's (its dx, du_parts
    (P, 36 * Ci * Co), db_parts, gmask, gidx, dout, y, argmax): P parts of the batch, each summing
    the transformed weight gradient of its examples in GEMMs over up to CAP tiles (whole examples),
    and computing the input gradient of G examples at a time. U2: the rotated transformed filters
    (36, Co, Ci); zb: (Ci,) zeros. Workspaces indexed by thread: gw (T, Co * OH * OW); gpw (T, Hg *
    Wg * Co) and pw (T, (4 TH + 2) * (4 TW + 2) * Ci) (sizes as the part kernel's); vw (T, 36 * (CAP
    * Ci + SKEW)); mw (T, 36 * (CAP * Co + SKEW)); vxw (T, 36 * (G * THx * TWx * Co + SKEW)); mxw
    (T, 36 * (G * THx * TWx * Ci + SKEW)); yw (T, 16 * THx * TWx * Ci); sw (T, 24 * (max(TW, TWx) +
    1) * max(Ci, Co)); ew (T, H * W * Ci). ``bf16``: the GEMMs in bfloat16: vxh (T, as vxw) (uint16)
    the input gradient's rounded tiles, vpw (T, 36 * ceil(CAP / 2) * 2 Ci) and mpw (T, 36 *
    ceil(CAP / 2) * 2 Co) (uint16) the weight gradient's packed pairs, U2h U2 packed
    (winograd4_filters_pairs); else unread."""
    args = (dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, ew, zb, gmask, gidx, dout, x, U2,
            y, argmax, PH, PW, G, CAP, need_dx, need_dw, relu, PKH, PKW, vxh, vpw, mpw, U2h, bf16)
    parallel_blocks(du_parts.shape[0], conv2d_backward_winograd4_part, args)


@kernel()
def winograd4_input_rows(H, W, OH, OW, PH, PW, PKH, PKW):
    """(Hx, Wx): the input rows and columns that the computed outputs read (the rest of the input
    gradient is zero)."""
    OHc, OWc = (OH // PKH * PKH, OW // PKW * PKW) if PKH > 0 else (OH, OW)
    return min(H, OHc + 2 - PH), min(W, OWc + 2 - PW)


@kernel(float_division=True)
def conv2d_backward_winograd4_part(c, dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, ew, zb,
                                   gmask, gidx, dout, x, U2, y, argmax, PH, PW, G, CAP, need_dx, need_dw,
                                   relu, PKH, PKW, vxh, vpw, mpw, U2h, bf16):
    """Part ``c`` of conv2d_backward_winograd4: one iteration of its parallel loop."""
    N, Ci, H, W = x.shape
    Co = U2.shape[1]
    OH = H + 2 * PH - 2
    OW = W + 2 * PW - 2
    L = OH * OW
    TH, TW = winograd4_tiles(OH, OW, PKH, PKW)  # the output's tiles (the weight gradient's)
    Hx, Wx = winograd4_input_rows(H, W, OH, OW, PH, PW, PKH, PKW)
    THx, TWx = (Hx + 3) // 4, (Wx + 3) // 4  # the input gradient's tiles
    Hg = max(4 * THx + 2, 4 * TH + 2 - PH)  # the gradient plane, padded by (2 - PH, 2 - PW)
    Wg = max(4 * TWx + 2, 4 * TW + 2 - PW)
    TPI, TPX = TH * TW, THx * TWx
    P = du_parts.shape[0]
    t = numba.get_thread_id()  # the workspaces' row
    n0, n1 = part_bounds(N, P, c)
    gf = gw[t].reshape(gw.shape[1])
    gp = gpw[t].reshape(gpw.shape[1])
    pf = pw[t].reshape(pw.shape[1])
    vf = vw[t].reshape(vw.shape[1])
    mf = mw[t].reshape(mw.shape[1])
    vx = vxw[t].reshape(vxw.shape[1])
    mx = mxw[t].reshape(mxw.shape[1])
    sc = sw[t].reshape(sw.shape[1])
    U2f = U2.reshape(36 * Co * Ci)
    duf = du_parts[c]
    first = True
    filled = 0  # tiles collected for the next weight-gradient GEMMs
    KV = CAP * Ci + SKEW
    KM = CAP * Co + SKEW
    KVX = G * TPX * Co + SKEW
    KMX = G * TPX * Ci + SKEW
    for g0 in range(n0, n1, G):
        g1 = min(n1, g0 + G)
        for n in range(g0, g1):
            grad_rows(gf, 0, L, dout[n], y[n], argmax[n], OW, L, relu, PKH, PKW, gmask[t], gidx[t])
            add_row_sums(db_parts[c], gf, L, L, n == n0)
            _plane4(gp, gf[:Co * L].reshape((Co, OH, OW)), 2 - PH, 2 - PW, Hg, Wg)
            if need_dw:
                if filled + TPI > CAP:
                    _weight_gemms(duf, mf, vf, vpw[t], mpw[t], Co, Ci, filled, KM, KV, first, bf16)
                    first = False
                    filled = 0
                _plane4(pf, x[n], PH, PW, 4 * TH + 2, 4 * TW + 2)
                _input_tiles4(vf, pf, sc, 4 * TW + 2, Ci, TH, TW, filled, KV)
                _gradient_tiles4(mf, gp, sc, Wg, Co, TH, TW, 2 - PH, 2 - PW, filled, KM)
                filled += TPI
            if need_dx:
                _input_tiles4(vx, gp, sc, Wg, Co, THx, TWx, (n - g0) * TPX, KVX)
        if need_dx:
            if bf16:  # the input gradient's M (tiles, Ci)
                vh = vxh[t].reshape(vxh.shape[1])
                round_bf16(vh, 0, vx, 0, 36 * KVX)
                _gemms4_pairs(mx, KMX, vh, KVX, U2h, (g1 - g0) * TPX, Co, Ci)
            else:
                _gemms4(mx, KMX, vx, KVX, U2f, (g1 - g0) * TPX, Co, Ci)
            yf = yw[t].reshape(yw.shape[1])[:16 * TPX * Ci]
            for n in range(g0, g1):
                _output_tiles4(yf, mx, sc, Ci, THx, TWx, (n - g0) * TPX, KMX)
                if Hx == H and Wx == W and H * W >= 16 and Ci % 16 == 0:
                    rows_transposed(dx[n].reshape(Ci * H * W), H, 0, yf, zb, 4 * TWx, 0, H, W, False, ew[t],
                                    False)
                else:
                    _epilogue_positions(dx[n][:, :Hx, :Wx], argmax[n][:, :0], yf, zb, 4 * TWx, False, 0, 0, 0,
                                        ew[t], False)
                    dx[n][:, Hx:] = np.float32(0.0)
                    dx[n][:, :Hx, Wx:] = np.float32(0.0)
    if need_dw:
        _weight_gemms(duf, mf, vf, vpw[t], mpw[t], Co, Ci, filled, KM, KV, first, bf16)
    else:
        duf[:] = np.float32(0.0)
