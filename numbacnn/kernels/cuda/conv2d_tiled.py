"""2-D convolution on the GPU (numba.cuda) as three tiled implicit GEMMs in shared memory.

    forward   out[n, co, p] = b[co] + sum_k  W[co, k] X[k, (n, p)]       k  = (ci, ky, kx)
    input     dx[n, ci, q]  =         sum_k' W'[ci, k'] G[k', (n, q)]     k' = (co, ky, kx)
    weights   D[co, k]      =         sum_r  G[co, r] X[k, r]            r  = (n, p); k = K: the bias

X and G are never formed: each tile is gathered from the input or the output gradient as it is
loaded (zero outside the padding, or where a stride skips an input position). A block of 16 x 16
threads computes a 32 x 32 tile, each thread 2 x 2 outputs in registers, over slices of 16 of the
reduction staged in shared memory. Every output is one thread's sum in a fixed order; the weight
gradient's long reduction (over the batch and positions) is cut into fixed chunks whose partial
tiles a second kernel adds in chunk order: deterministic, no atomics.
"""
import math

from numba import cuda, float32, int32

BM = 32   # tile rows
BN = 32   # tile columns
BK = 16   # reduction slice staged per step
TD = 16   # threads per block side: each thread 2 x 2 outputs (rows ty, ty + 16; columns tx, tx + 16)
BM1, BN1 = BM + 1, BN + 1  # padded rows of staged tiles that are stored down their columns
_BLOCKS = 1056  # the weight gradient's grid aims at 8 blocks per multiprocessor of a 132-SM GPU


@cuda.jit(device=True)
def _slice_product(As, Bs, ty, tx, c00, c01, c10, c11):
    """The 2 x 2 outputs' sums over the staged slice: As[kk, row], Bs[kk, column]."""
    for kk in range(BK):
        a0 = As[kk, ty]
        a1 = As[kk, ty + TD]
        b0 = Bs[kk, tx]
        b1 = Bs[kk, tx + TD]
        c00 += a0 * b0
        c01 += a0 * b1
        c10 += a1 * b0
        c11 += a1 * b1
    return c00, c01, c10, c11


@cuda.jit(device=True)
def _taps(T, j, k, KK, KW):
    """T[:, j] = (c, ky, kx) of reduction index k = (c KH + ky) KW + kx."""
    c = k // KK
    r = k - c * KK
    T[0, j] = c
    T[1, j] = r // KW
    T[2, j] = r - (r // KW) * KW


@cuda.jit(device=True)
def _column(k, KK, KW):
    """(ci, ky, kx) of column k = (ci KH + ky) KW + kx."""
    c = k // KK
    r = k - c * KK
    return c, r // KW, r - (r // KW) * KW


@cuda.jit(device=True)
def _put(out, co, c, v, b, relu, Co, NC, P, OW):
    """out[n, co, oy, ox] = v + b[co] (ReLU), column c = (n, oy * OW + ox), inside the output."""
    if co < Co and c < NC:
        v += b[co]
        if relu and v < 0:
            v = float32(0)
        p = c % P
        out[c // P, co, p // OW, p % OW] = v


@cuda.jit
def _forward(out, x, w, b, SH, SW, PH, PW, relu):
    N, Co, OH, OW = out.shape
    Ci, H, W = x.shape[1], x.shape[2], x.shape[3]
    KH, KW = w.shape[2], w.shape[3]
    KK = KH * KW
    K = Ci * KK
    P = OH * OW
    NC = N * P
    As = cuda.shared.array((BK, BM1), float32)  # + 1: the column-wise stores hit 16 banks
    Bs = cuda.shared.array((BK, BN), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    t = ty * TD + tx
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    ak, am = t % BK, t // BK      # this thread stages W[row0 + am (+ 16), k0 + ak]
    bc, bk = t % BN, t // BN      # and X[k0 + bk (+ 8), col0 + bc]
    col = col0 + bc
    n = col // P
    p = col % P
    iy0 = (p // OW) * SH - PH
    ix0 = (p % OW) * SW - PW
    T = cuda.shared.array((3, BK), int32)  # (ci, ky, kx) of the slice's k: no divisions per load
    c00 = c01 = c10 = c11 = float32(0)
    for k0 in range(0, K, BK):
        if t < BK:
            _taps(T, t, k0 + t, KK, KW)
        cuda.syncthreads()
        for i in range(2):
            co = row0 + am + TD * i
            v = float32(0)
            if co < Co and k0 + ak < K:
                v = w[co, T[0, ak], T[1, ak], T[2, ak]]
            As[ak, am + TD * i] = v
        for i in range(2):
            kb = bk + 8 * i
            v = float32(0)
            if col < NC and k0 + kb < K:
                iy = iy0 + T[1, kb]
                ix = ix0 + T[2, kb]
                if 0 <= iy < H and 0 <= ix < W:
                    v = x[n, T[0, kb], iy, ix]
            Bs[kb, bc] = v
        cuda.syncthreads()
        c00, c01, c10, c11 = _slice_product(As, Bs, ty, tx, c00, c01, c10, c11)
        cuda.syncthreads()
    r0, r1, cl0, cl1 = row0 + ty, row0 + ty + TD, col0 + tx, col0 + tx + TD
    _put(out, r0, cl0, c00, b, relu, Co, NC, P, OW)
    _put(out, r0, cl1, c01, b, relu, Co, NC, P, OW)
    _put(out, r1, cl0, c10, b, relu, Co, NC, P, OW)
    _put(out, r1, cl1, c11, b, relu, Co, NC, P, OW)


@cuda.jit(device=True)
def _put_dx(dx, ci, c, v, Ci, NC, Q, W):
    if ci < Ci and c < NC:
        q = c % Q
        dx[c // Q, ci, q // W, q % W] = v


@cuda.jit
def _backward_dx(dx, g, w, SH, SW, PH, PW):
    N, Ci, H, W = dx.shape
    Co, OH, OW = g.shape[1], g.shape[2], g.shape[3]
    KH, KW = w.shape[2], w.shape[3]
    KK = KH * KW
    K = Co * KK
    Q = H * W
    NC = N * Q
    As = cuda.shared.array((BK, BM1), float32)
    Bs = cuda.shared.array((BK, BN), float32)
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
    T = cuda.shared.array((3, BK), int32)  # (co, ky, kx) of the slice's k
    c00 = c01 = c10 = c11 = float32(0)
    for k0 in range(0, K, BK):
        if t < BK:
            _taps(T, t, k0 + t, KK, KW)
        cuda.syncthreads()
        for i in range(2):
            ci = row0 + am + TD * i
            v = float32(0)
            if ci < Ci and k0 + ak < K:
                v = w[T[0, ak], ci, T[1, ak], T[2, ak]]
            As[ak, am + TD * i] = v
        for i in range(2):
            kb = bk + 8 * i
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
        c00, c01, c10, c11 = _slice_product(As, Bs, ty, tx, c00, c01, c10, c11)
        cuda.syncthreads()
    r0, r1, cl0, cl1 = row0 + ty, row0 + ty + TD, col0 + tx, col0 + tx + TD
    _put_dx(dx, r0, cl0, c00, Ci, NC, Q, W)
    _put_dx(dx, r0, cl1, c01, Ci, NC, Q, W)
    _put_dx(dx, r1, cl0, c10, Ci, NC, Q, W)
    _put_dx(dx, r1, cl1, c11, Ci, NC, Q, W)


@cuda.jit(device=True)
def _put_part(parts, base, co, kc, v, Co, K1):
    if co < Co and kc < K1:
        parts[base + co * K1 + kc] = v


@cuda.jit
def _backward_dw_parts(parts, g, x, KH, KW, SH, SW, PH, PW, L):
    """Chunk s = blockIdx.z of the reduction (r in [s L, s L + L)) for one (co, k) tile: its partial
    sums into parts[s, co, k] (flat), k = Ci KH KW standing for the bias (X = 1 there)."""
    N, Co, OH, OW = g.shape
    Ci, H, W = x.shape[1], x.shape[2], x.shape[3]
    KK = KH * KW
    K1 = Ci * KK + 1
    P = OH * OW
    R = N * P
    As = cuda.shared.array((BK, BM1), float32)
    Bs = cuda.shared.array((BK, BN1), float32)  # + 1: the stores run down the columns
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    t = ty * TD + tx
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    s = cuda.blockIdx.z
    r_lo = s * L
    r_hi = min(R, r_lo + L)
    ak, am = t % BK, t // BK      # stages G[row0 + am (+ 16), r0 + ak]
    bk, bc = t % BK, t // BK      # and X[r0 + bk, col0 + bc (+ 16)]
    T = cuda.shared.array((3, BK), int32)  # (n, oy, ox) of the slice's r
    ci0, ky0, kx0 = _column(col0 + bc, KK, KW)  # this thread's two columns
    ci1, ky1, kx1 = _column(col0 + bc + TD, KK, KW)
    c00 = c01 = c10 = c11 = float32(0)
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
        for i in range(2):
            co = row0 + am + TD * i
            v = float32(0)
            if co < Co and ok:
                v = g[T[0, ak], co, T[1, ak], T[2, ak]]
            As[ak, am + TD * i] = v
        ok = r0 + bk < r_hi
        nb = T[0, bk]
        iy0 = T[1, bk] * SH - PH
        ix0 = T[2, bk] * SW - PW
        for i in range(2):
            kc = col0 + bc + TD * i
            v = float32(0)
            if ok and kc < K1:
                if kc == K1 - 1:
                    v = float32(1)
                else:
                    ci, ky, kx = (ci0, ky0, kx0) if i == 0 else (ci1, ky1, kx1)
                    iy = iy0 + ky
                    ix = ix0 + kx
                    if 0 <= iy < H and 0 <= ix < W:
                        v = x[nb, ci, iy, ix]
            Bs[bk, bc + TD * i] = v
        cuda.syncthreads()
        c00, c01, c10, c11 = _slice_product(As, Bs, ty, tx, c00, c01, c10, c11)
        cuda.syncthreads()
    base = s * Co * K1
    r0, r1, cl0, cl1 = row0 + ty, row0 + ty + TD, col0 + tx, col0 + tx + TD
    _put_part(parts, base, r0, cl0, c00, Co, K1)
    _put_part(parts, base, r0, cl1, c01, Co, K1)
    _put_part(parts, base, r1, cl0, c10, Co, K1)
    _put_part(parts, base, r1, cl1, c11, Co, K1)


@cuda.jit
def _sum_parts(dw, db, parts, S):
    """dw[co, ci, ky, kx] and db[co]: the chunks' partial sums added in chunk order."""
    Co, Ci, KH, KW = dw.shape
    K1 = Ci * KH * KW + 1
    t = cuda.grid(1)
    if t >= Co * K1:
        return
    s = float32(0)
    for j in range(S):
        s += parts[j * Co * K1 + t]
    co, k = t // K1, t % K1
    if k == K1 - 1:
        db[co] = s
    else:
        KK = KH * KW
        dw[co, k // KK, (k % KK) // KW, k % KW] = s


@cuda.jit
def _grad_out(g, dout, y):
    """g = dout where the fused ReLU passed (y > 0), else 0."""
    t = cuda.grid(1)
    if t < g.size:
        N, C, OH, OW = g.shape
        n, c, p = t // (C * OH * OW), (t // (OH * OW)) % C, t % (OH * OW)
        oy, ox = p // OW, p % OW
        g[n, c, oy, ox] = dout[n, c, oy, ox] if y[n, c, oy, ox] > 0 else float32(0)


def _tiles(rows, cols):
    return (math.ceil(cols / BN), math.ceil(rows / BM))


def dw_chunks(x_shape, w_shape, out_shape):
    """(S, L): the weight gradient's reduction over N OH OW cut into S chunks of L (a multiple of
    16); the size of its partial-sum workspace is S Co (Ci KH KW + 1)."""
    R = out_shape[0] * out_shape[2] * out_shape[3]
    tiles = math.prod(_tiles(w_shape[0], w_shape[1] * w_shape[2] * w_shape[3] + 1))
    S = max(1, min(math.ceil(R / 256), math.ceil(_BLOCKS / tiles)))
    L = math.ceil(math.ceil(R / S) / BK) * BK
    return math.ceil(R / L), L


def dw_workspace_size(x_shape, w_shape, out_shape):
    S, _ = dw_chunks(x_shape, w_shape, out_shape)
    return S * w_shape[0] * (w_shape[1] * w_shape[2] * w_shape[3] + 1)


def conv2d_forward_tiled(out, x, w, b, SH, SW, PH, PW, relu):
    """As the CPU conv2d_forward_gemm (no im2col cache: the backward reads x itself)."""
    N, Co, OH, OW = out.shape
    _forward[_tiles(Co, N * OH * OW), (TD, TD)](out, x, w, b, SH, SW, PH, PW, relu)


def conv2d_backward_tiled(dx, dw, db, g, parts, dout, x, w, y, SH, SW, PH, PW, need_dx, relu):
    """dx, dw, db from dout. g (dout's shape): a workspace for the ReLU-masked gradient (unused
    without a fused ReLU); parts: dw_workspace_size floats for the weight gradient's chunks."""
    if relu:
        _grad_out[math.ceil(g.size / 256), 256](g, dout, y)
    else:
        g = dout
    Co, Ci, KH, KW = dw.shape
    if need_dx:
        N, _, H, W = dx.shape
        _backward_dx[_tiles(Ci, N * H * W), (TD, TD)](dx, g, w, SH, SW, PH, PW)
    S, L = dw_chunks(x.shape, dw.shape, dout.shape)
    bx, by = _tiles(Co, Ci * KH * KW + 1)
    _backward_dw_parts[(bx, by, S), (TD, TD)](parts, g, x, KH, KW, SH, SW, PH, PW, L)
    K1 = Ci * KH * KW + 1
    _sum_parts[math.ceil(Co * K1 / 128), 128](dw, db, parts, S)
