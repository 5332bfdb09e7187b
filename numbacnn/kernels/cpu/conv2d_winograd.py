"""3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2016), for
layers with enough channels (the choice is made in CpuBackend.conv_plan, numbacnn/backend/cpu.py).

Each 2x2 tile of outputs comes from the 4x4 patch of the padded input under it:
    y = A^T [ sum_ci (G g G^T) * (B^T d B) ] A
with the transforms (all entries 0, +-1 or +-1/2, so they add nothing to the rounding but their sums)
    B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
    A^T = [1 1 1 0; 0 1 -1 -1].
The sum over input channels is 16 GEMMs, one per element k of the 4x4 transformed tile:
    M[k] (tiles, Co) = V[k] (tiles, Ci) @ U[k] (Ci, Co)
which take 16 * Ci * Co multiply-adds per 4 outputs instead of 36 * Ci * Co: 2.25x fewer. Inputs are
laid out as transposed padded planes (rows, Wt, C), each row's even columns before its odd ones, so
that every transform is a few operations on whole runs of a tile row's tiles and channels.

The backward uses the same pieces. The weight gradient is, per element k,
    dU[k] (Co, Ci) = sum over tiles of dM[k]^T (Co, tiles) @ V[k] (tiles, Ci),  dM = A dY A^T,
    dg = G^T dU G;
the input gradient is the forward of the masked output gradient (padded by 2 - P) with the filters
rotated by 180 degrees and their channels swapped.
"""
import numba
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._conv_epilogue import grad_rows
from ._util import add_row_sums, copy_run, gather_channels, part_bounds, same_version, transpose16, unchanged
from .blas import sgemm
from .conv2d_positions import _epilogue_positions, pool2x2_transposed, rows_transposed
from .microkernel import gemm_blocks, gemm_tn

# The 16 transformed matrices of a block lie SKEW floats more than their size apart: at a size of
# 4 KiB (16 channels x 64 tiles) the 16 streams of a transform otherwise fall into the same cache
# sets, which made the input transform 4x slower per value.
SKEW = 16


@kernel(inline=True)
def _half3(d, a, b, c, sign):
    """d = (a + sign * b + c) / 2 (sign +-1), elementwise."""
    h = np.float32(0.5)
    if sign > 0:
        for j in range(d.shape[0]):
            d[j] = h * (a[j] + b[j] + c[j])
    else:
        for j in range(d.shape[0]):
            d[j] = h * (a[j] - b[j] + c[j])


@kernel(export=True, team="serial")
def winograd_filters(U, w, rotate, work, seen, version):
    """The filters' transforms: U[k] = G g G^T for every 3x3 filter g of w (Co, Ci, 3, 3), unless
    ``seen`` (int32, w.size + 1; or empty: always) records that U was made from these very weights
    (_util.unchanged): inference then transforms once, not on every call. With a version ((1,):
    w is the BatchNorm fold's output, which counts its writes there), seen is (2,) and records the
    count instead (_util.same_version): no comparison of the weights.

    rotate False (forward): U (16, Ci, Co) from g = w[co, ci].
    rotate True (input gradient): U (16, Co, Ci) from g = w[co, ci] rotated by 180 degrees.
    work: 18 * Ci * Co floats. The taps are first gathered into rows of U's (a, b) order, so that
    both halves of the transform are whole-row operations (one filter at a time ran scalar:
    80-220 us per call for 32-64 channels).
    """
    if version.shape[0] > 0:
        if same_version(seen, version):
            return
    elif seen.shape[0] > 0 and unchanged(seen, w):
        return
    Co, Ci = w.shape[0], w.shape[1]
    M = Ci * Co
    wf = w.reshape(Co, Ci * 9)
    if rotate:  # work[t] (M): tap t = 3 * r + c of every filter, in U's order (a, b)
        for co in range(Co):
            for t in range(9):
                dst = work[t * M + co * Ci:t * M + co * Ci + Ci]
                for ci in range(Ci):
                    dst[ci] = wf[co, ci * 9 + 8 - t]
    else:
        for ci in range(Ci):
            for t in range(9):
                dst = work[t * M + ci * Co:t * M + ci * Co + Co]
                for co in range(Co):
                    dst[co] = wf[co, ci * 9 + t]
    Uf = U.reshape(16 * M)
    for j0 in range(0, M, 512):  # in chunks that stay in L1
        j1 = min(M, j0 + 512)
        for c in range(3):  # t = G g: rows 0 .. 3 of column c, at work[9 + 3 * i + c]
            g0, g1, g2 = work[c * M + j0:c * M + j1], work[(3 + c) * M + j0:(3 + c) * M + j1], \
                work[(6 + c) * M + j0:(6 + c) * M + j1]
            _half3(work[(12 + c) * M + j0:(12 + c) * M + j1], g0, g1, g2, 1)
            _half3(work[(15 + c) * M + j0:(15 + c) * M + j1], g0, g1, g2, -1)
        for i in range(4):  # U = t G^T: row i (rows 0 and 3 of t are rows 0 and 2 of g)
            r = 3 * i if i == 0 else (6 if i == 3 else 9 + 3 * i)
            t0 = work[r * M + j0:r * M + j1]
            t1 = work[(r + 1) * M + j0:(r + 1) * M + j1]
            t2 = work[(r + 2) * M + j0:(r + 2) * M + j1]
            for j in range(j1 - j0):
                Uf[4 * i * M + j0 + j] = t0[j]
                Uf[(4 * i + 3) * M + j0 + j] = t2[j]
            _half3(Uf[(4 * i + 1) * M + j0:(4 * i + 1) * M + j1], t0, t1, t2, 1)
            _half3(Uf[(4 * i + 2) * M + j0:(4 * i + 2) * M + j1], t0, t1, t2, -1)


@kernel()
def _plane(pf, x, PH, PW, Wt, R0, R1):
    """pf (flat (R1 - R0, Wt, C)) = rows R0 .. R1 - 1 of x (C, H, W) zero-padded by PH rows above
    and PW columns on the left (zeros below and to the right up to the plane's size), transposed so
    that a position's C channels are contiguous, and each row's even columns first, then its odd
    ones (column j at slot (j % 2) * Wt / 2 + j // 2; Wt even). So a run over a tile row's tiles
    and channels is contiguous for every tap: the transforms' loops are long enough to vectorise
    (a loop over the channels of one position alone, 16-64 long, ran scalar)."""
    C, H, W = x.shape
    Wh = Wt // 2
    zero = np.float32(0.0)
    for i in range((R1 - R0) * Wt * C):
        pf[i] = zero
    Wc = min(W, Wt - PW)  # columns past the plane's are not read
    if C % 16 == 0 and Wc >= 16:  # 16 x 16 blocks transposed in registers (the last may overlap),
        HW = H * W  # rows of even and odd columns to their halves
        xf = np.ascontiguousarray(x).reshape(C * HW)
        for i in range(max(0, R0 - PH), min(H, R1 - PH)):
            d0 = (PH + i - R0) * Wt
            for j in range(0, Wc, 16):
                j0 = min(j, Wc - 16)
                col = PW + j0
                even = d0 + (col >> 1) if col & 1 == 0 else d0 + Wh + (col >> 1)  # the slot of column col
                odd = d0 + Wh + (col >> 1) if col & 1 == 0 else d0 + ((col + 1) >> 1)  # and col + 1
                for c0 in range(0, C, 16):
                    transpose16(pf, even * C + c0, odd * C + c0, C, xf, c0 * HW + i * W + j0, HW)
        return
    if C % 16 == 0:  # 16 channels of a column per vector gather: 1.5x the scalar scatter below
        HW = H * W
        xf = np.ascontiguousarray(x).reshape(C * HW)
        for i in range(max(0, R0 - PH), min(H, R1 - PH)):
            d0 = (PH + i - R0) * Wt
            for j in range(min(W, Wt - PW)):
                col = PW + j
                gather_channels(pf, (d0 + (col & 1) * Wh + (col >> 1)) * C, xf, C, HW, i * W + j)
        return
    for c in range(C):
        for i in range(max(0, R0 - PH), min(H, R1 - PH)):
            src = x[c, i]
            d0 = (PH + i - R0) * Wt
            for j in range(min(W, Wt - PW)):  # columns past the plane's are not read
                col = PW + j
                pf[numba.uint64((d0 + (col & 1) * Wh + (col >> 1)) * C + c)] = src[j]


@kernel()
def _plane_nhwc(pf, x, PH, PW, Wt, R0, R1):
    """_plane of a channel-last example x (H, W, C) (an inference chain's, ``layout``): each
    position's C channels are already contiguous, so a run copy each (no transposes)."""
    H, W, C = x.shape
    Wh = Wt // 2
    zero = np.float32(0.0)
    for i in range((R1 - R0) * Wt * C):
        pf[i] = zero
    xf = np.ascontiguousarray(x).reshape(H * W * C)
    u = numba.uint64
    for i in range(max(0, R0 - PH), min(H, R1 - PH)):
        d0 = (PH + i - R0) * Wt
        for j in range(min(W, Wt - PW)):  # columns past the plane's are not read
            col = PW + j
            copy_run(pf, u((d0 + (col & 1) * Wh + (col >> 1)) * C), xf, u((i * W + j) * C), u(C))


# The transforms run as a few whole-row operations with two or three operands each: LLVM vectorises
# those, while one loop producing all 16 values of a tile (32 streams) stayed scalar, 3-4x slower.
@kernel(inline=True)
def _add(d, a, b):
    for j in range(d.shape[0]):
        d[j] = a[j] + b[j]


@kernel(inline=True)
def _sub(d, a, b):
    for j in range(d.shape[0]):
        d[j] = a[j] - b[j]


@kernel(inline=True)
def _neg(d, a):
    for j in range(d.shape[0]):
        d[j] = -a[j]


@kernel(inline=True)
def _add3(d, a, b, c):
    for j in range(d.shape[0]):
        d[j] = a[j] + b[j] + c[j]


@kernel(inline=True)
def _sub3(d, a, b, c):
    for j in range(d.shape[0]):
        d[j] = a[j] - b[j] - c[j]


@kernel()
def _input_tiles(vf, pf, sc, Wt, C, T0, TR, TW, R0, F, KS):
    """vf (16, F + TR * TW, C) (matrix k at k * KS floats; rows F .. written) = B^T d B for the
    tiles of tile rows T0 .. T0 + TR - 1: d is the 4x4 patch at plane rows 2 * ty - R0 ..,
    columns 2 * tx .. of pf (a _plane: flat (rows, Wt, C), even columns first). Columns 2tx,
    2tx + 1, 2tx + 2, 2tx + 3 are the even slot tx, the odd slot tx, the even slot tx + 1 and the
    odd slot tx + 1, so each of the 16 values is one operation on runs of TW * C floats.
    sc: 4 * Wt * C floats of scratch."""
    n = TW * C
    s = KS
    R = Wt * C
    half = Wt // 2 * C
    for r in range(TR):
        p0 = (2 * (T0 + r) - R0) * R
        d0, d1 = pf[p0:p0 + R], pf[p0 + R:p0 + 2 * R]
        d2, d3 = pf[p0 + 2 * R:p0 + 3 * R], pf[p0 + 3 * R:p0 + 4 * R]
        a0, a1, a2, a3 = sc[:R], sc[R:2 * R], sc[2 * R:3 * R], sc[3 * R:4 * R]
        _sub(a0, d0, d2)  # B^T d, whole rows
        _add(a1, d1, d2)
        _sub(a2, d2, d1)
        _sub(a3, d1, d3)
        o = F * C + r * n
        for i in range(4):  # (B^T d) B: the columns of row i
            a = sc[i * R:(i + 1) * R]
            e0, e1 = a[:n], a[C:C + n]  # columns 2tx and 2tx + 2
            o0, o1 = a[half:half + n], a[half + C:half + C + n]  # 2tx + 1 and 2tx + 3
            k = 4 * i
            _sub(vf[k * s + o:k * s + o + n], e0, e1)
            _add(vf[(k + 1) * s + o:(k + 1) * s + o + n], o0, e1)
            _sub(vf[(k + 2) * s + o:(k + 2) * s + o + n], e1, o0)
            _sub(vf[(k + 3) * s + o:(k + 3) * s + o + n], o0, o1)


@kernel()
def _output_tiles(yf, mf, sc, Co, TR, TW):
    """yf (flat (2 * TR, 2 * TW, Co)) = A^T m A for the tiles of mf (16, TR * TW, Co) (matrix k at
    k * (TR * TW * Co + SKEW)): the outputs of TR tile rows, position-major, each row's even
    columns first (slot tx), then its odd ones (slot TW + tx), as _plane lays out its rows (an odd
    last column or row is computed and never read). sc: 8 * TW * Co floats of scratch."""
    n = TW * Co
    s = TR * n + SKEW
    for r in range(TR):
        o = r * n
        for c in range(4):  # A^T m, column c: rows 0 and 1
            m0, m1 = mf[c * s + o:c * s + o + n], mf[(4 + c) * s + o:(4 + c) * s + o + n]
            m2, m3 = mf[(8 + c) * s + o:(8 + c) * s + o + n], mf[(12 + c) * s + o:(12 + c) * s + o + n]
            _add3(sc[2 * c * n:(2 * c + 1) * n], m0, m1, m2)
            _sub3(sc[(2 * c + 1) * n:(2 * c + 2) * n], m1, m2, m3)
        y0 = 2 * r * 2 * n
        for i in range(2):  # (A^T m) A: row i of the tile, even then odd columns
            b0, b1 = sc[i * n:(i + 1) * n], sc[(2 + i) * n:(3 + i) * n]
            b2, b3 = sc[(4 + i) * n:(5 + i) * n], sc[(6 + i) * n:(7 + i) * n]
            y = y0 + i * 2 * n
            _add3(yf[y:y + n], b0, b1, b2)
            _sub3(yf[y + n:y + 2 * n], b1, b2, b3)


@kernel()
def _gradient_tiles(zf, gp, sc, Wg, Co, T0, TR, TW, OY, OX, F, KS):
    """zf (16, F + TR * TW, Co) (matrix k at k * KS floats; rows F .. written) = A g A^T for the output tiles
    of tile rows T0 .. T0 + TR - 1: g is the 2x2 block of the output gradient at rows 2 * ty ..,
    columns 2 * tx .., read from the gradient plane gp (a _plane: flat (rows, Wg, Co), even columns
    first) where output (oy, ox) lies at (oy + OY, ox + OX) (zero outside the outputs).
    sc: 8 * TW * Co floats of scratch."""
    n = TW * Co
    s = KS
    Wh = Wg // 2
    R = Wg * Co
    for r in range(TR):
        q0 = (2 * (T0 + r) + OY) * R
        for b in range(2):  # A g: the rows g0, g0 + g1, g0 - g1, -g1 of column b
            col = OX + b  # plane columns 2 tx + col: slots linear in tx
            a = ((col & 1) * Wh + (col >> 1)) * Co
            g0, g1 = gp[q0 + a:q0 + a + n], gp[q0 + R + a:q0 + R + a + n]
            sc[b * n:(b + 1) * n] = g0
            _add(sc[(2 + b) * n:(3 + b) * n], g0, g1)
            _sub(sc[(4 + b) * n:(5 + b) * n], g0, g1)
            _neg(sc[(6 + b) * n:(7 + b) * n], g1)
        o = F * Co + r * n
        for i in range(4):  # (A g) A^T: x0, x0 + x1, x0 - x1, -x1 of row i
            x0, x1 = sc[2 * i * n:(2 * i + 1) * n], sc[(2 * i + 1) * n:(2 * i + 2) * n]
            k = 4 * i
            zf[k * s + o:k * s + o + n] = x0
            _add(zf[(k + 1) * s + o:(k + 1) * s + o + n], x0, x1)
            _sub(zf[(k + 2) * s + o:(k + 2) * s + o + n], x0, x1)
            _neg(zf[(k + 3) * s + o:(k + 3) * s + o + n], x1)


@kernel(export=True)
def winograd_filter_gradient(dw, du):
    """dw (Co, Ci, 3, 3) = G^T du[co, :, ci] G: the filter gradients from their transforms du
    (Co, 16, Ci), the sum of conv2d_backward_winograd's parts."""
    Co, Ci = dw.shape[0], dw.shape[1]
    h = np.float32(0.5)
    q = np.empty((3, 4), np.float32)
    for co in range(Co):
        for ci in range(Ci):
            for j in range(4):  # q = G^T u (3 x 4)
                u0, u1, u2, u3 = du[co, j, ci], du[co, 4 + j, ci], du[co, 8 + j, ci], du[co, 12 + j, ci]
                q[0, j] = u0 + h * (u1 + u2)
                q[1, j] = h * (u1 - u2)
                q[2, j] = h * (u1 + u2) + u3
            d = dw[co, ci]
            for i in range(3):  # dg = q G (3 x 3)
                d[i, 0] = q[i, 0] + h * (q[i, 1] + q[i, 2])
                d[i, 1] = h * (q[i, 1] - q[i, 2])
                d[i, 2] = h * (q[i, 1] + q[i, 2]) + q[i, 3]


@kernel()
def _weight_gemms(duf, mf, vf, Co, Ci, TB, KM, KV, first):
    """dU[:, k, :] (Co, Ci) (+)= dM[k]^T (Co, TB) @ V[k] (TB, Ci) for the 16 k (matrices k at
    k * KM and k * KV floats in mf and vf; duf: flat (Co, 16, Ci)); overwrites when first (with
    zeros when TB is 0)."""
    if TB == 0:
        if first:
            duf[:] = np.float32(0.0)
        return
    for k in range(16):
        if Ci % 16 == 0:
            gemm_tn(duf, k * Ci, 16 * Ci, mf, k * KM, Co, vf, k * KV, Ci, Co, Ci, TB, first)
        else:
            sgemm(True, False, Co, Ci, TB, np.float32(1.0), mf, k * KM, Co, vf, k * KV, Ci,
                  np.float32(0.0) if first else np.float32(1.0), duf, k * Ci, 16 * Ci)


@kernel()
def winograd_tiles(OH, OW, PKH, PKW):
    """Tile rows and tiles per row of the forward of an OH x OW output: they cover the output, or
    with a fused PKH x PKW pool (PKH > 0) only the rows and columns that the pool reads."""
    if PKH > 0:
        OH, OW = OH // PKH * PKH, OW // PKW * PKW
    return (OH + 1) // 2, (OW + 1) // 2


@kernel()
def _winograd_rows(yf, vf, mf, sc, pf, Wt, U, T0, TR, TW, R0):
    """Outputs (as _output_tiles lays them out) of tile rows T0 .. T0 + TR - 1 of the convolution of
    the padded plane pf (rows from R0, width Wt, C channels) with the transformed filters U
    (16, C, Co): input transform, 16 GEMMs (FMA blocks, microkernel.gemm_blocks, from 16 output
    channels on), output transform. vf, mf: workspaces."""
    C, Co = U.shape[1], U.shape[2]
    TB = TR * TW
    Uf = U.reshape(16 * C * Co)
    _input_tiles(vf, pf, sc, Wt, C, T0, TR, TW, R0, 0, TB * C + SKEW)
    for k in range(16):  # M[k] (TB, Co) = V[k] (TB, C) @ U[k] (C, Co)
        if Co >= 16:
            gemm_blocks(mf, k * (TB * Co + SKEW), vf, k * (TB * C + SKEW), Uf, k * C * Co, TB, Co, C)
        else:  # narrower than a vector (the tests run every shape through Winograd)
            sgemm(False, False, TB, Co, C, np.float32(1.0), vf, k * (TB * C + SKEW), C, Uf, k * C * Co,
                  Co, np.float32(0.0), mf, k * (TB * Co + SKEW), Co)
    _output_tiles(yf, mf, sc, Co, TR, TW)


@kernel(export=True, team="blocks")
def conv2d_forward_winograd(out, argmax, yw, vw, mw, sw, pw, x, U, b, PH, PW, relu, PKH, PKW, S,
                            argmax_too, layout):
    """out = conv(x, w) + b for 3x3 filters, stride 1, zero padding (PH, PW); max(., 0) when relu;
    with PKH > 0 a fused PKH x PKW max pool (after the ReLU, if any), as conv2d_forward_positions.

    out: (N, Co, OH, OW), or pooled; argmax: pooled shape (int8), else (N, 1, 1, 1) unused;
    x: (N, Ci, H, W); U: the transformed filters (16, Ci, Co) (winograd_filters); b: (Co,).
    With a fused pool only the OH // PKH * PKH rows and OW // PKW * PKW columns that the pool reads
    are computed. Each example's TH tile rows (half those rows, rounded up) are split into S blocks
    (from the shapes only; S > 1 only without a pool or with PKH = 2, so that a block's epilogue
    rows are whole); the N * S blocks run in parallel. Workspaces indexed by thread: yw (T, 4 *
    tiles * Co); vw (T, 16 * (tiles * Ci + SKEW)); mw (T, 16 * (tiles * Co + SKEW)); pw (T, plane
    rows * Wt * Ci), tiles = a block's tiles at most; sw (T, 8 * (TW + 1) * max(Ci, Co)).
    argmax_too: False (inference, no backward) leaves a 2x2 pool's argmax unwritten.
    layout (inference chains of Winograd layers, numbacnn/layers.py: fuse_chain): 1 = x is
    channel-last (N, H, W, Ci), 2 = out is channel-last (N, OH, OW, Co) (pooled sizes with a
    pool), 3 = both, 0 = neither. Channel-last outputs skip the epilogue's transposes and inputs
    the plane's (the next layer reads its plane from them with run copies); the values are the
    same bits either way. argmax keeps its channel-first shape.
    """
    args = (out, argmax, yw, vw, mw, sw, pw, x, U, b, PH, PW, relu, PKH, PKW, S, argmax_too, layout)
    parallel_blocks(conv2d_forward_winograd_blocks(*args), conv2d_forward_winograd_block, args)


@kernel()
def conv2d_forward_winograd_blocks(out, argmax, yw, vw, mw, sw, pw, x, U, b, PH, PW, relu, PKH, PKW, S,
                                   argmax_too, layout):
    return x.shape[0] * S


@kernel()
def conv2d_forward_winograd_block(i, out, argmax, yw, vw, mw, sw, pw, x, U, b, PH, PW, relu, PKH, PKW, S,
                                  argmax_too, layout):
    """Block i of conv2d_forward_winograd: its rows of out[n] (n = i // S), its thread's workspaces."""
    if layout & 1:
        N, H, W, Ci = x.shape
    else:
        N, Ci, H, W = x.shape
    Co = U.shape[2]
    OH = H + 2 * PH - 2
    OW = W + 2 * PW - 2
    TH, TW = winograd_tiles(OH, OW, PKH, PKW)
    Wt = 2 * TW + 2
    R = OH // PKH if PKH > 0 else OH  # rows and columns of the epilogue's output
    RW = OW // PKW if PKH > 0 else OW
    nhwc = layout & 2 != 0
    n = i // S
    t0, t1 = part_bounds(TH, S, i % S)
    if t1 > t0:
        t = numba.get_thread_id()
        pf = pw[t].reshape(pw.shape[1])
        if layout & 1:
            _plane_nhwc(pf, x[n], PH, PW, Wt, 2 * t0, 2 * t1 + 2)
        else:
            _plane(pf, x[n], PH, PW, Wt, 2 * t0, 2 * t1 + 2)
        TR = t1 - t0
        yf = yw[t][:4 * TR * TW * Co]
        _winograd_rows(yf, vw[t], mw[t], sw[t], pf, Wt, U, t0, TR, TW, 2 * t0)
        if PKH == 0:
            r0, r1 = 2 * t0, min(2 * t1, OH)
        elif S == 1:
            r0, r1 = 0, R
        else:  # PKH == 2: pooled row p reads tile row p
            r0, r1 = t0, min(t1, R)
        of = out[n].reshape(Co * R * RW)
        if (r1 > r0 and PKH == 2 and PKW == 2 and not argmax_too and Co % 16 == 0 and (r1 - r0) * RW >= 16
                and pool2x2_transposed(of, R, r0, yf, b, 2 * TW, TW, r1 - r0, RW, mw[t], nhwc, relu)):
            return
        if PKH == 0 and r1 > r0 and Co % 16 == 0 and (r1 - r0) * OW >= 16:
            rows_transposed(of, R, r0, yf, b, 2 * TW, TW, r1 - r0, OW, relu, mw[t], nhwc)
            return
        if r1 > r0 and not nhwc:
            _epilogue_positions(out[n][:, r0:r1], argmax[n][:, r0:r1], yf, b, 2 * TW, relu, PKH,
                                PKW, TW, mw[t], argmax_too)
        elif r1 > r0:  # channel-last output: the exact path into channel rows, then transposed
            rows = np.empty((1, Co, r1 - r0, RW), np.float32)
            _epilogue_positions(rows[0][:, 0:r1 - r0], argmax[n][:, r0:r1], yf, b, 2 * TW, relu, PKH,
                                PKW, TW, mw[t], argmax_too)
            for r in range(r1 - r0):
                for c in range(RW):
                    for co in range(Co):
                        of[((r0 + r) * RW + c) * Co + co] = rows[0, co, r, c]


@kernel(export=True)
def conv2d_backward_winograd(dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, zb,
                             gmask, gidx, dout, x, U2, y, argmax, PH, PW, TR, CAP, need_dx, need_dw,
                             relu, PKH, PKW):
    """Gradients of conv2d_forward_winograd. The batch is split into P = du_parts.shape[0] parts
    (part_bounds); part c writes du_parts[c], its weight gradient's transform dU (Co, 16, Ci)
    (sum_parts adds the parts, winograd_filter_gradient turns the sum into the filters'
    gradient; zeros unless need_dw), db_parts[c] and dx of its examples. With relu, dout is
    masked where y was not positive; with a fused pool, dout and argmax are the pool's (the weight
    gradient then sums over the forward's tiles only: the outputs that the pool does not read have
    no gradient).

    U2: the rotated transformed filters (16, Co, Ci) (winograd_filters, rotate True); TR: tile
    rows per block; CAP: tiles per weight-gradient GEMM at most (at least TR * TW): a part's
    blocks are collected, across examples, until the next would overflow CAP, so that the 16
    GEMMs sum over many tiles at once (both from the shapes only); zb: (Ci,) zeros. Workspaces
    indexed by thread: gw (T, Co * OH * OW); gpw (T, Hg * Wg * Co); pw (T, (2 * TH + 2) * Wt * Ci);
    vw (T, 16 * (CAP * Ci + SKEW)) and mw (T, 16 * (CAP * Co + SKEW)); vxw and mxw (T, 16 * (TR *
    TWx * max(Ci, Co) + SKEW)); yw (T, 4 * TR * TWx * Ci); sw (T, 8 * (max(TW, TWx) + 1) *
    max(Ci, Co)); gmask, gidx: as conv2d_backward_positions'.
    """
    P = du_parts.shape[0]
    # each part writes its own gradient parts and dx[n], in its thread's workspaces
    args = (dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, zb, gmask, gidx, dout, x, U2, y,
            argmax, PH, PW, TR, CAP, need_dx, need_dw, relu, PKH, PKW)
    parallel_blocks(P, conv2d_backward_winograd_part, args)


@kernel(float_division=True)
def conv2d_backward_winograd_part(c, dx, du_parts, db_parts, gw, gpw, pw, vw, mw, vxw, mxw, yw, sw, zb, gmask,
                                  gidx, dout, x, U2, y, argmax, PH, PW, TR, CAP, need_dx, need_dw, relu, PKH,
                                  PKW):
    """Part ``c`` of conv2d_backward_winograd: one iteration of its parallel loop."""
    N, Ci, H, W = x.shape
    Co = U2.shape[1]
    OH = H + 2 * PH - 2
    OW = W + 2 * PW - 2
    L = OH * OW
    TH, TW = winograd_tiles(OH, OW, PKH, PKW)  # the output's tiles (the weight gradient's)
    TD = TH if need_dw else 0  # the weight gradient's tile rows: none for a frozen weight
    Hx = min(H, min(OH, 2 * TH) + 2 - PH)  # the input rows and columns that the tiles' outputs read:
    Wx = min(W, min(OW, 2 * TW) + 2 - PW)  # the rest of dx is zero
    THx, TWx = (Hx + 1) // 2, (Wx + 1) // 2  # the input gradient's tiles
    Wt = 2 * TW + 2
    Hg, Wg = 2 * THx + 2, 2 * TWx + 2  # the gradient plane, padded by (2 - PH, 2 - PW)
    P = du_parts.shape[0]
    t = numba.get_thread_id()  # the workspaces' row
    n0, n1 = part_bounds(N, P, c)
    gf = gw[t].reshape(gw.shape[1])
    gp = gpw[t].reshape(gpw.shape[1])
    pf = pw[t].reshape(pw.shape[1])
    vf = vw[t].reshape(vw.shape[1])
    mf = mw[t].reshape(mw.shape[1])
    duf = du_parts[c]
    first = True
    filled = 0  # tiles collected for the next weight-gradient GEMMs
    KV = CAP * Ci + SKEW
    KM = CAP * Co + SKEW
    for n in range(n0, n1):
        grad_rows(gf, 0, L, dout[n], y[n], argmax[n], OW, L, relu, PKH, PKW, gmask[t], gidx[t])
        add_row_sums(db_parts[c], gf, L, L, n == n0)
        _plane(gp, gf[:Co * L].reshape((Co, OH, OW)), 2 - PH, 2 - PW, Wg, 0, Hg)
        if TD > 0:
            _plane(pf, x[n], PH, PW, Wt, 0, 2 * TH + 2)
        for t0 in range(0, TD, TR):
            R = min(TR, TH - t0)
            if filled + R * TW > CAP:
                _weight_gemms(duf, mf, vf, Co, Ci, filled, KM, KV, first)
                first = False
                filled = 0
            _input_tiles(vf, pf, sw[t], Wt, Ci, t0, R, TW, 0, filled, KV)
            _gradient_tiles(mf, gp, sw[t], Wg, Co, t0, R, TW, 2 - PH, 2 - PW, filled, KM)
            filled += R * TW
        if need_dx:
            vx = vxw[t].reshape(vxw.shape[1])
            mx = mxw[t].reshape(mxw.shape[1])
            for t0 in range(0, THx, TR):
                R = min(TR, THx - t0)
                yf = yw[t].reshape(yw.shape[1])[:4 * R * TWx * Ci]
                _winograd_rows(yf, vx, mx, sw[t], gp, Wg, U2, t0, R, TWx, 0)
                r1 = min(2 * (t0 + R), Hx)
                _epilogue_positions(dx[n][:, 2 * t0:r1, :Wx], argmax[n][:, :0], yf, zb, 2 * TWx,
                                    False, 0, 0, TWx, mx, False)
            if Hx < H or Wx < W:
                dx[n][:, Hx:] = np.float32(0.0)
                dx[n][:, :Hx, Wx:] = np.float32(0.0)
    _weight_gemms(duf, mf, vf, Co, Ci, filled, KM, KV, first)  # zeros when no tile was collected
