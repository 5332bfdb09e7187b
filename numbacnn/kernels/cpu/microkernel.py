"""Register-blocked FMA micro-kernels: an R x 16V block of a float32 product held in R * V vector
accumulators (16 floats each) for its whole reduction, one input value broadcast per row, V weight
vectors loaded per step: the structure of a hand-written GEMM kernel, which LLVM does not find in a
loop nest by itself (numba keeps arrays in memory, so a block written as loops over an array
accumulates through loads and stores).

    yf[y0 + r * ys + j] (+)= sum over t < T of xf[x0 + xo[k0 + r] + t] * wf[w0 + t * ws + j]
    for r < R, j < 16 * V

Each row of x starts where its offset xo says (the positions of a channel-last plane: a stride
apart within an output row, a plane row apart between them), the weights' rows ``ws`` apart.
Emitted as LLVM IR by ``_block(R, V)``, one intrinsic per shape, sums in t order with fused
multiply-adds: the same bits on any thread count and in any block. No bounds checks: the caller
keeps every read and write inside its arrays.
"""
import llvmlite.binding as ll
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.config import kernel
from ._util import _contiguous
from .blas import sgemm

LANES = 16


def _avx512() -> bool:
    """Whether the code is compiled for AVX-512 (32 vector registers of 16 floats): the target's
    features (NUMBA_CPU_FEATURES: the prebuilt levels' builds set them) or else the host's."""
    features = getattr(numba.config, "CPU_FEATURES", "") or ll.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")


# The largest blocks, by the registers of the target the kernels are compiled for (fixed at compile
# time, as every kernel's instruction set): with AVX-512 12 x 16 (V 1) or 6 x 32 floats (V 2) in 12
# accumulators; with AVX2's 16 registers of 8 floats 6 x 16 (12 registers, 2 for the weights).
WIDE = _avx512()
ROWS = 6
# gemm_tn's blocks where the columns come in 64s (AVX-512): 4 x 64 in 16 accumulators, 4 vector
# loads and 4 broadcasts a step, against 6 x 32's 2 and 6 for 12 FMAs. F(4x4, 3x3)'s 36 weight-
# gradient GEMMs over 256 tiles on one Zen 4 core, interleaved, two runs: 0.87-0.94x the time with
# 64 or 256 channels, 0.95-0.99x for 24 -> 64 and 256 -> 64 (8 x 64 in 32 accumulators: 1.1-1.8x)
TN_ROWS_4 = 4


def _by_height(builder, rows, R, emit):
    """A switch on ``rows`` (int64) with one case per height 1 .. R, each the code ``emit(h)`` adds
    at the builder's position; any other value does nothing."""
    end = builder.append_basic_block("rows_end")
    switch = builder.switch(rows, end)
    for h in range(1, R + 1):
        case = builder.append_basic_block(f"rows_{h}")
        switch.add_case(ir.Constant(ir.IntType(64), h), case)
        builder.position_at_end(case)
        emit(h)
        builder.branch(end)
    builder.position_at_end(end)


def _block(R: int, V: int, strided: bool = False, transposed: bool = False):
    """The intrinsic for an R x 16V block: (yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first) ->
    None; ``first`` true: the block is written (the sums alone), false: the sums start from what
    yf holds. ``strided``: the rows of x lie xs floats apart instead (row r of x at x0 + r * xs),
    and the block has ``rows`` rows, any of 1 .. R, chosen at run time (a switch over the compiled
    heights): (yf, y0, ys, xf, x0, xs, rows, wf, w0, ws, T, first). ``transposed`` (with
    ``strided``): x is stored transposed, its element (r, t) at x0 + r + t * xs (a product
    x.T @ w, such as a weight gradient's)."""

    @intrinsic
    def fma_block(typingctx, yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first):
        _contiguous(yf, xf, wf)
        if not strided and not (isinstance(xo, types.Array) and xo.ndim == 1 and xo.dtype == types.int64):
            raise numba.core.errors.TypingError(f"expected 1-D int64 offsets, got {xo}")
        sig = types.void(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first)

        def codegen(context, builder, signature, args):
            i64, f32 = ir.IntType(64), ir.FloatType()
            vec = ir.VectorType(f32, LANES)
            tys = signature.args

            def i(k):  # argument k as an int64
                return context.cast(builder, args[k], tys[k], types.int64)

            def at(array, k):  # the data pointer of the array argument k
                return context.make_array(tys[k])(context, builder, args[k]).data

            def vptr(base, offset):
                return builder.bitcast(builder.gep(base, [offset]), vec.as_pointer())

            yp = builder.gep(at(yf, 0), [i(1)])
            xp = builder.gep(at(xf, 3), [i(4)])
            wp = builder.gep(at(wf, 7), [i(8)])
            ystride, wstride, count = i(2), i(9), i(10)
            first_ = context.cast(builder, args[11], tys[11], types.boolean)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                                 "llvm.fma.v16f32")
            zero = ir.Constant(vec, [0.0] * LANES)
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)

            def yat(r, v):  # where accumulator (r, v) lives in yf
                return vptr(yp, builder.add(builder.mul(ir.Constant(i64, r), ystride),
                                            ir.Constant(i64, LANES * v)))

            def emit(R):  # the block of R rows, at the builder's position
                accs = []
                for r in range(R):
                    row = []
                    for v in range(V):
                        slot = cgutils.alloca_once(builder, vec)
                        old = builder.load(yat(r, v), align=4)
                        builder.store(builder.select(first_, zero, old), slot)
                        row.append(slot)
                    accs.append(row)
                if transposed:
                    xrows = [builder.gep(xp, [ir.Constant(i64, r)]) for r in range(R)]
                elif strided:
                    xrows = [builder.gep(xp, [builder.mul(ir.Constant(i64, r), i(5))]) for r in range(R)]
                else:
                    op = builder.gep(at(xo, 5), [i(6)])
                    xrows = [builder.gep(xp, [builder.load(builder.gep(op, [ir.Constant(i64, r)]))])
                             for r in range(R)]
                with cgutils.for_range(builder, count) as loop:
                    t = loop.index
                    wrow = builder.gep(wp, [builder.mul(t, wstride)])
                    ws_ = [builder.load(vptr(wrow, ir.Constant(i64, LANES * v)), align=4) for v in range(V)]
                    xt = builder.mul(t, i(5)) if transposed else t
                    for r in range(R):
                        s = builder.load(builder.gep(xrows[r], [xt]))
                        s = builder.insert_element(ir.Constant(vec, None), s, ir.Constant(ir.IntType(32), 0))
                        s = builder.shuffle_vector(s, s, splat_mask)
                        for v in range(V):
                            builder.store(builder.call(fma, [s, ws_[v], builder.load(accs[r][v])]),
                                          accs[r][v])
                for r in range(R):
                    for v in range(V):
                        builder.store(builder.load(accs[r][v]), yat(r, v), align=4)

            if strided:  # one case per height
                _by_height(builder, i(6), R, emit)
            else:
                emit(R)
            return context.get_dummy_value()
        return sig, codegen
    return fma_block


if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: NumPy, with bounds checks
    def _block(R: int, V: int, strided: bool = False, transposed: bool = False):  # type: ignore[no-redef]
        def fma_block(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first):
            y0, ys, x0, w0, ws, T = (int(a) for a in (y0, ys, x0, w0, ws, T))
            n = LANES * V
            for r in range(R):
                if strided and r >= int(k0):
                    break
                step = int(xo) if transposed else 1
                xr = x0 + (r if transposed else r * int(xo) if strided else int(xo[int(k0) + r]))
                if T > 0 and not (0 <= xr and xr + (T - 1) * step < xf.shape[0]
                                  and w0 + (T - 1) * ws + n <= wf.shape[0]
                                  and y0 + r * ys + n <= yf.shape[0]):
                    raise IndexError("an FMA block outside its arrays")
                acc = np.zeros(n, np.float32) if first else yf[y0 + r * ys:y0 + r * ys + n].copy()
                for t in range(T):
                    acc = (np.float64(xf[xr + t * step]) * wf[w0 + t * ws:w0 + t * ws + n]
                           + acc).astype(np.float32)  # one rounding per step, as an FMA
                yf[y0 + r * ys:y0 + r * ys + n] = acc
        return fma_block


_BIG_1, _ONE_1 = _block(2 * ROWS if WIDE else ROWS, 1), _block(1, 1)  # 12 (6) x 16 and 1 x 16
_BIG_2, _ONE_2 = _block(ROWS, 2), _block(1, 2)  # 6 x 32 and 1 x 32 (AVX-512 only)
# Rows of x a stride apart (gemm_blocks), blocks of any height up to the big ones'
_STRIDED_1, _STRIDED_2 = _block(2 * ROWS if WIDE else ROWS, 1, True), _block(ROWS, 2, True)
# x stored transposed (gemm_tn); 4 x 64 (AVX-512 only) where the columns come in 64s
_TRANSPOSED_1 = _block(2 * ROWS if WIDE else ROWS, 1, True, True)
_TRANSPOSED_2 = _block(ROWS, 2, True, True)
_TRANSPOSED_4 = _block(TN_ROWS_4, 4, True, True)


@kernel(inline=True)
def _fma_rows(big, V, yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first):
    """The block of the module's docstring: 12 x 16 (V 1) or 6 x 32 (V 2) when ``big``, else one row."""
    if V == 2:
        if big:
            _BIG_2(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first)
        else:
            _ONE_2(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first)
    elif big:
        _BIG_1(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first)
    else:
        _ONE_1(yf, y0, ys, xf, x0, xo, k0, wf, w0, ws, T, first)


@kernel()
def direct_positions(yf, xtf, xo, wf, Lb, Co, KH, run, row):
    """yf (flat (Lb, Co)) = the convolution at the Lb positions whose first taps lie at xo[:Lb] in
    the channel-last plane xtf, with the weights wf (flat (KH, run, Co): (ky, kx, c) x co): for
    each kernel row ky the run of KW * C floats at xo[p] + ky * row (row: a plane row's floats).
    Blocks of 16V channels x R positions (12 x 16 or 6 x 32; 6 x 16 without AVX-512; Co divisible
    by 16); the last block
    overlaps the one before (its positions computed again, to the same bits), and fewer than R
    positions go one at a time."""
    V = 2 if Co % 32 == 0 and WIDE else 1
    R = ROWS if V == 2 or not WIDE else 2 * ROWS
    big = Lb >= R
    for c0 in range(0, Co, 16 * V):
        for p in range(0, Lb, R if big else 1):
            p0 = min(p, Lb - R) if big else p
            for ky in range(KH):
                _fma_rows(big, V, yf, p0 * Co + c0, Co, xtf, ky * row, xo, p0, wf, ky * run * Co + c0, Co,
                          run, ky == 0)


@kernel(inline=True)
def _strided_rows(R, V, yf, y0, ys, xf, x0, xs, wf, w0, ws, T, first):
    """An R x 16V block (R up to 12 x 16 or 6 x 32; 6 x 16 without AVX-512) with the rows of x xs
    floats apart, written when ``first``, else added to."""
    if V == 2:
        _STRIDED_2(yf, y0, ys, xf, x0, xs, R, wf, w0, ws, T, first)
    else:
        _STRIDED_1(yf, y0, ys, xf, x0, xs, R, wf, w0, ws, T, first)


@kernel(inline=True)
def _transposed_rows(R, V, yf, y0, ys, xf, x0, xs, wf, w0, ws, T, first):
    """An R x 16V block of x.T @ w (x's element (r, t) at x0 + r + t * xs)."""
    if V == 4:
        _TRANSPOSED_4(yf, y0, ys, xf, x0, xs, R, wf, w0, ws, T, first)
    elif V == 2:
        _TRANSPOSED_2(yf, y0, ys, xf, x0, xs, R, wf, w0, ws, T, first)
    else:
        _TRANSPOSED_1(yf, y0, ys, xf, x0, xs, R, wf, w0, ws, T, first)


# Steps of the reduction per pass of gemm_tn: a panel of w (32 or 64 columns) and the rows of x it meets stay
# in L1 (a dense layer's weight gradient at batch 256 read both from L2 on every block: 1.35x slower)
TN_CHUNK = 96


@kernel()
def gemm_tn(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, N, K, first):
    """yf[y0:] (M, N; rows ys apart) (+)= xf[x0:].T @ wf[w0:]: x (K, M) rows xs apart, w (K, N)
    rows ws apart (a weight gradient: the outputs' gradients by the inputs, summed over the
    examples or tiles). ``first``: overwrite, else the sums start from y's values. N >= 16;
    blocks as gemm_blocks' (16V columns, R rows, the last block of columns overlapping the one
    before: so when not ``first``, N must be a multiple of 16). Each sum runs over k in order
    with fused multiply-adds: the same bits for a row in any block. 4 x 64 blocks where N is a
    multiple of 64 (AVX-512)."""
    V = (4 if N % 64 == 0 else 2 if N % 32 == 0 else 1) if WIDE else 1
    R = TN_ROWS_4 if V == 4 else ROWS if V == 2 or not WIDE else 2 * ROWS
    width = 16 * V
    for c in range(0, N, width):
        c0 = min(c, N - width)
        for k0 in range(0, K, TN_CHUNK):  # the sums go on in y from one chunk to the next: same bits
            kc = min(TN_CHUNK, K - k0)  # (an overlapping last block starts afresh when ``first``)
            p = 0
            while p < M:
                h = min(R, M - p)
                _transposed_rows(h, V, yf, y0 + p * ys + c0, ys, xf, x0 + k0 * xs + p, xs, wf,
                                 w0 + k0 * ws + c0, ws, kc, first and k0 == 0)
                p += h


@kernel()
def gemm_blocks(yf, y0, xf, x0, wf, w0, M, N, K):
    """yf[y0:] (M, N) = xf[x0:] (M, K) @ wf[w0:] (K, N), row-major, N >= 16 (rows of N, K and N
    floats): the FMA blocks of the module's docstring over 16V columns (V 2 where N is a multiple
    of 32 with AVX-512) and R rows (12 x 16, 6 x 32; 6 x 16 without AVX-512), the last block of
    columns overlapping the one before (computed again, to the same bits); the rows left over run
    as one block of their own height (an overlapping big block redid up to 5 of the rows of
    Winograd's 7- or 14-tile GEMMs). Each sum runs over k in order with fused multiply-adds,
    whatever the BLAS, so a row's bits do not depend on its block. For the small GEMMs of
    Winograd's transformed tiles, which OpenBLAS runs well only where it has small-matrix kernels
    (its Haswell kernels pack both operands on every call: 2-5x slower)."""
    gemm_nn(yf, y0, N, xf, x0, K, wf, w0, N, M, N, K)


@kernel()
def gemm_nn(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, N, K):
    """gemm_blocks with any row pitches: yf[y0:] (M, N; rows ys apart) = xf[x0:] (M, K; rows xs
    apart) @ wf[w0:] (K, N; rows ws apart), N >= 16."""
    _gemm_nn(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, N, K, True)


@kernel()
def gemm_nn_add(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, N, K, first):
    """gemm_nn, added to y's values unless ``first`` (a weight gradient summed over runs of
    positions), without overlapping blocks (they would add twice): the columns in whole blocks of
    32 (6 x 32 with AVX-512), then one of 16, on the FMA blocks; the last N % 16 by OpenBLAS."""
    w32 = N // 32 * 32
    w16 = N // 16 * 16
    if w32 > 0:
        _gemm_nn(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, w32, K, first)
    if w16 > w32:
        _gemm_nn(yf, y0 + w32, ys, xf, x0, xs, wf, w0 + w32, ws, M, 16, K, first)
    if w16 < N:
        sgemm(False, False, M, N - w16, K, np.float32(1.0), xf, x0, xs, wf, w0 + w16, ws,
              np.float32(0.0) if first else np.float32(1.0), yf, y0 + w16, ys)


@kernel(inline=True)
def _gemm_nn(yf, y0, ys, xf, x0, xs, wf, w0, ws, M, N, K, first):
    V = 2 if N % 32 == 0 and WIDE else 1
    R = ROWS if V == 2 or not WIDE else 2 * ROWS
    width = 16 * V
    for c in range(0, N, width):
        c0 = min(c, N - width)
        p = 0
        while p + R <= M:
            _strided_rows(R, V, yf, y0 + p * ys + c0, ys, xf, x0 + p * xs, xs, wf, w0 + c0, ws, K, first)
            p += R
        if p < M:  # the rows left over: one block of their own height
            _strided_rows(M - p, V, yf, y0 + p * ys + c0, ys, xf, x0 + p * xs, xs, wf, w0 + c0, ws, K,
                          first)


# --- dot blocks: products whose operands both run along the reduction (x @ w.T) ---------------------
#
#     yf[y0 + r * ys + c] = sum over t < T of xf[x0 + r * xs + t] * wf[w0 + c * ws + t]
#     for r < rows (1 .. R, chosen at run time), c < C
#
# The dense layers' forward (w is (F_out, F_in): each output is the dot product of a row of x and a
# row of w). Each (r, c) sums in a vector of 16 lanes, lane l over t = l, l + 16, ... (fused
# multiply-adds, t in order), the lanes then added as a fixed tree (8 + 8, 4 + 4, 2 + 2, 1 + 1), and
# the last T % 16 terms after, one fused multiply-add each in t order: the same bits in any block,
# on any thread count, whatever BLAS the process has (OpenBLAS's kernels for AVX2 machines pack w on
# every call: a batch-1 dense layer of mnistcnn 43 us instead of 4). R x C vector accumulators, R + C
# vector loads per step of 16.
DOT_ROWS = 4


def _dot_block(R: int, C: int):
    """The intrinsic for blocks of 1 .. R rows x C columns: (yf, y0, ys, xf, x0, xs, rows, wf, w0,
    ws, T) -> None."""

    @intrinsic
    def dot_block(typingctx, yf, y0, ys, xf, x0, xs, rows, wf, w0, ws, T):
        _contiguous(yf, xf, wf)
        sig = types.void(yf, y0, ys, xf, x0, xs, rows, wf, w0, ws, T)

        def codegen(context, builder, signature, args):
            i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
            vec = ir.VectorType(f32, LANES)
            tys = signature.args

            def i(k):  # argument k as an int64
                return context.cast(builder, args[k], tys[k], types.int64)

            def at(k):  # the data pointer of the array argument k
                return context.make_array(tys[k])(context, builder, args[k]).data

            def const(v):
                return ir.Constant(i64, v)

            yp = builder.gep(at(0), [i(1)])
            xp = builder.gep(at(3), [i(4)])
            wp = builder.gep(at(7), [i(8)])
            ystride, xstride, wstride, count = i(2), i(5), i(9), i(10)
            chunks = builder.sdiv(count, const(LANES))
            start = builder.mul(chunks, const(LANES))
            module = builder.module
            fma = cgutils.get_or_insert_function(module, ir.FunctionType(vec, [vec, vec, vec]),
                                                 "llvm.fma.v16f32")
            fma1 = cgutils.get_or_insert_function(module, ir.FunctionType(f32, [f32, f32, f32]),
                                                  "llvm.fma.f32")
            wrows = [builder.gep(wp, [builder.mul(const(c), wstride)]) for c in range(C)]

            def half(v, n):  # lanes [0, n) + lanes [n, 2n) of v
                lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, n), list(range(n))))
                hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, n), list(range(n, 2 * n))))
                return builder.fadd(lo, hi)

            def emit(h):  # the block of h rows, at the builder's position
                xrows = [builder.gep(xp, [builder.mul(const(r), xstride)]) for r in range(h)]
                accs = [[cgutils.alloca_once_value(builder, ir.Constant(vec, [0.0] * LANES))
                         for _ in range(C)] for _ in range(h)]
                with cgutils.for_range(builder, chunks) as loop:
                    off = builder.mul(loop.index, const(LANES))
                    wv = [builder.load(builder.bitcast(builder.gep(w, [off]), vec.as_pointer()), align=4)
                          for w in wrows]
                    for r in range(h):
                        xv = builder.load(builder.bitcast(builder.gep(xrows[r], [off]), vec.as_pointer()),
                                          align=4)
                        for c in range(C):
                            acc = accs[r][c]
                            builder.store(builder.call(fma, [xv, wv[c], builder.load(acc)]), acc)
                sums = []
                for r in range(h):
                    for c in range(C):
                        v = builder.load(accs[r][c])
                        for n in (8, 4, 2):
                            v = half(v, n)
                        s = builder.fadd(builder.extract_element(v, ir.Constant(i32, 0)),
                                         builder.extract_element(v, ir.Constant(i32, 1)))
                        sums.append(cgutils.alloca_once_value(builder, s))
                with cgutils.for_range_slice(builder, start, count, const(1)) as (t, _):
                    for r in range(h):
                        xs_ = builder.load(builder.gep(xrows[r], [t]))
                        for c in range(C):
                            slot = sums[r * C + c]
                            builder.store(builder.call(fma1, [xs_, builder.load(builder.gep(wrows[c], [t])),
                                                              builder.load(slot)]), slot)
                for r in range(h):
                    for c in range(C):
                        where = builder.gep(yp, [builder.add(builder.mul(const(r), ystride), const(c))])
                        builder.store(builder.load(sums[r * C + c]), where)

            _by_height(builder, i(6), R, emit)
            return context.get_dummy_value()
        return sig, codegen
    return dot_block


if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: NumPy, with bounds checks
    def _dot_block(R: int, C: int):  # type: ignore[no-redef]
        def dot_block(yf, y0, ys, xf, x0, xs, rows, wf, w0, ws, T):
            y0, ys, x0, xs, rows, w0, ws, T = (int(a) for a in (y0, ys, x0, xs, rows, w0, ws, T))
            head = T // LANES * LANES
            for r in range(rows):
                xr = xf[x0 + r * xs:x0 + r * xs + T]
                for c in range(C):
                    wc = wf[w0 + c * ws:w0 + c * ws + T]
                    if len(xr) < T or len(wc) < T or y0 + r * ys + c >= yf.shape[0]:
                        raise IndexError("a dot block outside its arrays")
                    acc = np.zeros(LANES, np.float32)
                    for t in range(0, head, LANES):
                        acc = (np.float64(1) * xr[t:t + LANES] * wc[t:t + LANES] + acc).astype(np.float32)
                    for n in (8, 4, 2, 1):
                        acc = acc[:n] + acc[n:2 * n]
                    s = acc[0]
                    for t in range(head, T):
                        s = np.float32(np.float64(xr[t]) * wc[t] + s)
                    yf[y0 + r * ys + c] = s
        return dot_block


_DOT_8, _DOT_4, _DOT_1 = _dot_block(2, 8), _dot_block(DOT_ROWS, 4), _dot_block(DOT_ROWS, 1)


@kernel()
def dot_rows(yf, y0, ys, xf, x0, xs, M, wf, w0, ws, N, T):
    """yf[y0 + r * ys + c] = dot(xf[x0 + r * xs:][:T], wf[w0 + c * ws:][:T]) for r < M, c < N: the
    product of M rows of x and N rows of w (x @ w.T), in the dot blocks above (2 x 8 for one or two
    rows, else 4 x 4; the last block of columns overlapping the one before, computed again to the
    same bits; fewer than 4 columns one at a time). Columns outer, rows inner: a block's rows of w
    stay in L1 while the rows of x pass."""
    C = 8 if M <= 2 and N >= 8 else (4 if N >= 4 else 1)
    for c in range(0, N, C):
        c0 = min(c, N - C)
        for r in range(0, M, DOT_ROWS):
            h = min(DOT_ROWS, M - r)
            if C == 8:
                _DOT_8(yf, y0 + r * ys + c0, ys, xf, x0 + r * xs, xs, h, wf, w0 + c0 * ws, ws, T)
            elif C == 4:
                _DOT_4(yf, y0 + r * ys + c0, ys, xf, x0 + r * xs, xs, h, wf, w0 + c0 * ws, ws, T)
            else:
                _DOT_1(yf, y0 + r * ys + c0, ys, xf, x0 + r * xs, xs, h, wf, w0 + c0 * ws, ws, T)
