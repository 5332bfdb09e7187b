"""2-D convolution on the GPU (numba.cuda) as three tiled implicit GEMMs in shared memory.

    forward   out[n, co, p] = b[co] + sum_k  W[co, k] X[k, (n, p)]       k  = (ci, ky, kx)
    input     dx[n, ci, q]  =         sum_k' W'[ci, k'] G[k', (n, q)]     k' = (co, ky, kx)
    weights   D[co, k]      =         sum_r  G[co, r] X[k, r]            r  = (n, p); k = K: the bias

X and G are never formed: each tile is gathered from the input or the output gradient as it is
loaded (zero outside the padding, or where a stride skips an input position). A block of 16 x 16
threads computes a BM x BN tile (64 x 64, 32 x 128 or 32 x 32, chosen per product from its shape:
``tile``), each thread BM/16 x BN/16 outputs in registers, over slices of 16 of the reduction
staged in shared memory. Every output is one thread's sum in a fixed order; the weight gradient's
long reduction (over the batch and positions) is cut into fixed chunks whose partial tiles a
second kernel adds in chunk order: deterministic, no atomics.
"""
import math

from numba import config, cuda, float32, int32

from ...runtime.config import declare
from ._launch import grid, on, zero_fill
from .conv2d_gather import bias_gradient

BK = 16   # reduction slice staged per step
TD = 16   # threads per block side
TILES = ((64, 64), (32, 128), (32, 32))  # (BM, BN): rows x columns of a block's tile
_BLOCKS = 1056  # the weight gradient's grid aims at 8 blocks per multiprocessor of a 132-SM GPU
# threads per output adding the weight gradient's chunks (a power of two; narrow in the simulator,
# which runs each thread as a Python thread)
_ROWS = 2 if config.ENABLE_CUDASIM else 16  # type: ignore[attr-defined]


def tile(rows, cols):
    """(BM, BN) for a product with ``rows`` x ``cols`` outputs: 64 x 64 where both sides fill it,
    else 32 rows by 128 columns where the columns do, else 32 x 32. (Measured on an H200: with
    32 x 32 tiles for the gradients of 32-channel layers instead of 32 x 128, mnistcnn's step
    at batch 256 took 1.35 ms of GPU time instead of 1.20.)"""
    if rows >= 64 and cols >= 64:
        return TILES[0]
    return TILES[1] if cols >= 128 else TILES[2]


@cuda.jit(device=True)
def _taps(T, j, k, KK, KW):
    """T[:, j] = (c, ky, kx) of reduction index k = (c KH + ky) KW + kx."""
    c = k // KK
    r = k - c * KK
    T[0, j] = c
    T[1, j] = r // KW
    T[2, j] = r - (r // KW) * KW


def _kernels(BM, BN):
    """The three products' kernels for BM x BN tiles (numba freezes BM, BN and what follows from
    them as constants of the compiled code)."""
    RM, RN = BM // TD, BN // TD  # outputs per thread: rows ty + 16 i, columns tx + 16 j
    BM1, BN1 = BM + 1, BN + 1    # padded rows of staged tiles that are stored down their columns
    SB = TD * TD // BN           # forward, dx: rows of the B slice one pass of the block stages

    @cuda.jit(device=True)
    def slice_product(As, Bs, ty, tx, acc):
        """acc[i, j] += the staged slice's As[kk, ty + 16 i] Bs[kk, tx + 16 j], kk in order."""
        a = cuda.local.array(RM, float32)
        b = cuda.local.array(RN, float32)
        for kk in range(BK):
            for i in range(RM):
                a[i] = As[kk, ty + TD * i]
            for j in range(RN):
                b[j] = Bs[kk, tx + TD * j]
            for i in range(RM):
                for j in range(RN):
                    acc[i, j] += a[i] * b[j]

    @cuda.jit(device=True)
    def clear(acc):
        for i in range(RM):
            for j in range(RN):
                acc[i, j] = float32(0)

    @cuda.jit(device=True)
    def stage_weights(As, w, T, row0, am, ak, k0, K, rows, dx):
        """As[ak, am + 16 i] = row row0 + am + 16 i, reduction index k0 + ak of the weights with
        the slice's taps T: w[row, c, ky, kx] (forward), w[c, row, ky, kx] (dx)."""
        for i in range(RM):
            r = row0 + am + TD * i
            v = float32(0)
            if r < rows and k0 + ak < K:
                if dx:
                    v = w[T[0, ak], r, T[1, ak], T[2, ak]]
                else:
                    v = w[r, T[0, ak], T[1, ak], T[2, ak]]
            As[ak, am + TD * i] = v

    @cuda.jit
    def forward(out, x, w, b, SH, SW, PH, PW, relu):
        N, Co, OH, OW = out.shape
        Ci, H, W = x.shape[1], x.shape[2], x.shape[3]
        KH, KW = w.shape[2], w.shape[3]
        KK = KH * KW
        K = Ci * KK
        P = OH * OW
        NC = N * P
        As = cuda.shared.array((BK, BM1), float32)  # + 1: the column-wise stores miss no bank
        Bs = cuda.shared.array((BK, BN), float32)
        T = cuda.shared.array((3, BK), int32)  # (ci, ky, kx) of the slice's k: no divisions per load
        acc = cuda.local.array((RM, RN), float32)
        clear(acc)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        t = ty * TD + tx
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        ak, am = t % BK, t // BK      # this thread stages W[row0 + am + 16 i, k0 + ak]
        bc, bk = t % BN, t // BN      # and X[k0 + bk + SB i, col0 + bc]
        col = col0 + bc
        n = col // P
        p = col % P
        iy0 = (p // OW) * SH - PH
        ix0 = (p % OW) * SW - PW
        for k0 in range(0, K, BK):
            if t < BK:
                _taps(T, t, k0 + t, KK, KW)
            cuda.syncthreads()
            stage_weights(As, w, T, row0, am, ak, k0, K, Co, False)
            for i in range(RN):
                kb = bk + SB * i
                v = float32(0)
                if col < NC and k0 + kb < K:
                    iy = iy0 + T[1, kb]
                    ix = ix0 + T[2, kb]
                    if 0 <= iy < H and 0 <= ix < W:
                        v = x[n, T[0, kb], iy, ix]
                Bs[kb, bc] = v
            cuda.syncthreads()
            slice_product(As, Bs, ty, tx, acc)
            cuda.syncthreads()
        for j in range(RN):
            c = col0 + tx + TD * j
            if c < NC:
                cn = c // P
                cp = c % P
                oy, ox = cp // OW, cp % OW
                for i in range(RM):
                    co = row0 + ty + TD * i
                    if co < Co:
                        v = acc[i, j] + b[co]
                        if relu and v < 0:
                            v = float32(0)
                        out[cn, co, oy, ox] = v

    @cuda.jit
    def backward_dx(dx, g, w, SH, SW, PH, PW):
        N, Ci, H, W = dx.shape
        Co, OH, OW = g.shape[1], g.shape[2], g.shape[3]
        KH, KW = w.shape[2], w.shape[3]
        KK = KH * KW
        K = Co * KK
        Q = H * W
        NC = N * Q
        As = cuda.shared.array((BK, BM1), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        T = cuda.shared.array((3, BK), int32)  # (co, ky, kx) of the slice's k
        acc = cuda.local.array((RM, RN), float32)
        clear(acc)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        t = ty * TD + tx
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        ak, am = t % BK, t // BK
        bc, bk = t % BN, t // BN
        col = col0 + bc
        n = col // Q
        q = col % Q
        ny0 = q // W + PH  # = oy * SH + ky for the outputs that read input (iy, ix)
        nx0 = q % W + PW
        for k0 in range(0, K, BK):
            if t < BK:
                _taps(T, t, k0 + t, KK, KW)
            cuda.syncthreads()
            stage_weights(As, w, T, row0, am, ak, k0, K, Ci, True)
            for i in range(RN):
                kb = bk + SB * i
                v = float32(0)
                if col < NC and k0 + kb < K:
                    ny = ny0 - T[1, kb]
                    nx = nx0 - T[2, kb]
                    if ny >= 0 and nx >= 0:
                        if SH == 1 and SW == 1:
                            if ny < OH and nx < OW:
                                v = g[n, T[0, kb], ny, nx]
                        elif ny % SH == 0 and nx % SW == 0 and ny // SH < OH and nx // SW < OW:
                            v = g[n, T[0, kb], ny // SH, nx // SW]
                Bs[kb, bc] = v
            cuda.syncthreads()
            slice_product(As, Bs, ty, tx, acc)
            cuda.syncthreads()
        for j in range(RN):
            c = col0 + tx + TD * j
            if c < NC:
                cn = c // Q
                cq = c % Q
                iy, ix = cq // W, cq % W
                for i in range(RM):
                    ci = row0 + ty + TD * i
                    if ci < Ci:
                        dx[cn, ci, iy, ix] = acc[i, j]

    @cuda.jit
    def backward_dw_parts(parts, g, x, KH, KW, SH, SW, PH, PW, L):
        """Chunk s = blockIdx.z of the reduction (r in [s L, s L + L)) for one (co, k) tile: its
        partial sums into parts[s, co, k] (flat), k = Ci KH KW standing for the bias (X = 1)."""
        N, Co, OH, OW = g.shape
        Ci, H, W = x.shape[1], x.shape[2], x.shape[3]
        KK = KH * KW
        K1 = Ci * KK + 1
        P = OH * OW
        R = N * P
        As = cuda.shared.array((BK, BM1), float32)
        Bs = cuda.shared.array((BK, BN1), float32)  # + 1: the stores run down the columns
        T = cuda.shared.array((3, BK), int32)  # (n, oy, ox) of the slice's r
        acc = cuda.local.array((RM, RN), float32)
        clear(acc)
        cols = cuda.local.array((3, RN), int32)  # (ci, ky, kx) of this thread's staged columns
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        t = ty * TD + tx
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        s = cuda.blockIdx.z
        r_lo = s * L
        r_hi = min(R, r_lo + L)
        ak, am = t % BK, t // BK      # stages G[row0 + am + 16 i, r0 + ak]
        bk, bc = t % BK, t // BK      # and X[r0 + bk, col0 + bc + 16 i]
        for i in range(RN):
            kc = col0 + bc + TD * i
            ci = kc // KK
            r = kc - ci * KK
            cols[0, i] = ci
            cols[1, i] = r // KW
            cols[2, i] = r - (r // KW) * KW
        for r0 in range(r_lo, r_hi, BK):
            if t < BK:
                r = r0 + t
                nn = r // P
                p = r - nn * P
                T[0, t] = nn
                T[1, t] = p // OW
                T[2, t] = p - (p // OW) * OW
            cuda.syncthreads()
            ok = r0 + ak < r_hi
            for i in range(RM):
                co = row0 + am + TD * i
                v = float32(0)
                if co < Co and ok:
                    v = g[T[0, ak], co, T[1, ak], T[2, ak]]
                As[ak, am + TD * i] = v
            ok = r0 + bk < r_hi
            nb = T[0, bk]
            iy0 = T[1, bk] * SH - PH
            ix0 = T[2, bk] * SW - PW
            for i in range(RN):
                kc = col0 + bc + TD * i
                v = float32(0)
                if ok and kc < K1:
                    if kc == K1 - 1:
                        v = float32(1)
                    else:
                        iy = iy0 + cols[1, i]
                        ix = ix0 + cols[2, i]
                        if 0 <= iy < H and 0 <= ix < W:
                            v = x[nb, cols[0, i], iy, ix]
                Bs[bk, bc + TD * i] = v
            cuda.syncthreads()
            slice_product(As, Bs, ty, tx, acc)
            cuda.syncthreads()
        base = s * Co * K1
        for i in range(RM):
            co = row0 + ty + TD * i
            for j in range(RN):
                kc = col0 + tx + TD * j
                if co < Co and kc < K1:
                    parts[base + co * K1 + kc] = acc[i, j]

    return forward, backward_dx, backward_dw_parts


KERNELS = {shape: _kernels(*shape) for shape in TILES}  # (BM, BN): (forward, dx, dw parts)


@cuda.jit
def _sum_parts(dw, db, parts, S):
    """dw[co, ci, ky, kx] and db[co]: the chunks' partial sums, in a fixed order. A block holds 32
    outputs (threadIdx.x) and _ROWS threads per output (threadIdx.y), thread r adding chunks r,
    r + _ROWS, ... in order (consecutive threads read consecutive outputs); a fixed tree over r
    adds those."""
    Co, Ci, KH, KW = dw.shape
    K1 = Ci * KH * KW + 1
    lane, r = cuda.threadIdx.x, cuda.threadIdx.y
    o = cuda.blockIdx.x * 32 + lane
    buf = cuda.shared.array((_ROWS, 32), float32)
    s = float32(0)
    if o < Co * K1:
        for j in range(r, S, _ROWS):
            s += parts[j * Co * K1 + o]
    buf[r, lane] = s
    cuda.syncthreads()
    half = _ROWS // 2
    while half > 0:
        if r < half:
            buf[r, lane] += buf[r + half, lane]
        cuda.syncthreads()
        half //= 2
    if r == 0 and o < Co * K1:
        s = buf[0, lane]
        co, k = o // K1, o % K1
        if k == K1 - 1:
            db[co] = s
        else:
            KK = KH * KW
            dw[co, k // KK, (k % KK) // KW, k % KW] = s


@cuda.jit
def _grad_out(g, dout, y):
    """g = dout where the fused ReLU passed (y > 0), else 0 (flat views)."""
    t = cuda.grid(1)
    if t < g.size:
        g[t] = dout[t] if y[t] > 0 else float32(0)


def _grid(rows, cols, shape):
    """Blocks (x: column tiles, y: row tiles) of a rows x cols product in ``shape`` tiles."""
    return (math.ceil(cols / shape[1]), math.ceil(rows / shape[0]))


def dw_chunks(x_shape, w_shape, out_shape):
    """(S, L): the weight gradient's reduction over N OH OW cut into S chunks of L (a multiple of
    16); the size of its partial-sum workspace is S Co (Ci KH KW + 1)."""
    R = out_shape[0] * out_shape[2] * out_shape[3]
    Co, K1 = w_shape[0], w_shape[1] * w_shape[2] * w_shape[3] + 1
    tiles = math.prod(_grid(Co, K1, tile(Co, K1)))
    S = max(1, min(math.ceil(R / 256), math.ceil(_BLOCKS / tiles)))
    L = math.ceil(math.ceil(R / S) / BK) * BK
    return math.ceil(R / L), L


@declare
def dw_workspace_size(x_shape, w_shape, out_shape):
    S, _ = dw_chunks(x_shape, w_shape, out_shape)
    return S * w_shape[0] * (w_shape[1] * w_shape[2] * w_shape[3] + 1)


@declare
def conv2d_forward_tiled(out, x, w, b, SH, SW, PH, PW, relu):
    """As the CPU conv2d_forward_gemm (no im2col cache: the backward reads x itself)."""
    N, Co, OH, OW = out.shape
    shape = tile(Co, N * OH * OW)
    KERNELS[shape][0][on(_grid(Co, N * OH * OW, shape), (TD, TD))](out, x, w, b, SH, SW, PH, PW, relu)


@declare
def conv2d_backward_tiled(dx, dw, db, g, parts, dout, x, w, y, SH, SW, PH, PW, need_dx, need_dw, relu):
    """dx (when need_dx), dw (zeros unless need_dw), db from dout. g (dout's shape): a workspace for
    the ReLU-masked gradient (unused without a fused ReLU); parts: dw_workspace_size floats for the
    weight gradient's chunks."""
    if relu:
        n = g.size
        _grad_out[on(math.ceil(n / 256), 256)](g.reshape(n), dout.reshape(n), y.reshape(n))
    else:
        g = dout
    Co, Ci, KH, KW = dw.shape
    if need_dx:
        N, _, H, W = dx.shape
        shape = tile(Ci, N * H * W)
        KERNELS[shape][1][on(_grid(Ci, N * H * W, shape), (TD, TD))](dx, g, w, SH, SW, PH, PW)
    if not need_dw:
        zero_fill(dw)
        bias_gradient[grid(db.size)](db, g)
        return
    S, L = dw_chunks(x.shape, dw.shape, dout.shape)
    K1 = Ci * KH * KW + 1
    shape = tile(Co, K1)
    bx, by = _grid(Co, K1, shape)
    KERNELS[shape][2][on((bx, by, S), (TD, TD))](parts, g, x, KH, KW, SH, SW, PH, PW, L)
    _sum_parts[on(math.ceil(Co * K1 / 32), (32, _ROWS))](dw, db, parts, S)
