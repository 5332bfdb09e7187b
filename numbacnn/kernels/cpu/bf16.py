"""bfloat16 products with float32 sums: the multiplications of ``precision="bf16"``.

bfloat16 is float32's upper half (8 exponent bits, 7 stored mantissa bits). Operands are rounded
to it to nearest, ties to even (as ``torch.autocast`` and the hardware round), and held as uint16;
two products of bf16 values are exact in float32, so each step of a sum rounds once, in float32.
AVX512_BF16's ``vdpbf16ps`` takes 16 lanes of pairs: per lane ``acc += a[2i+1] * b[2i+1]`` then
``acc += a[2i] * b[2i]`` (two float32 roundings, the odd term first; subnormal operands and
results flushed to zero), 32 multiply-adds an instruction against an FMA's 16.

    yf[y0 + r * ys + j] (+)= sum over k < K2 of the pair at xh[x0 + r * rs + k * ks]
                               dotted with the pair wh[w0 + k * ws + 2 j], wh[w0 + k * ws + 2 j + 1]
    for r < rows, j < 16 V

A pair of x is two bf16 values side by side (a row of x read along its reduction: rs the rows'
pitch, ks 2; or x stored transposed and packed by ``pack_pairs``: rs 2, ks its packed rows' pitch);
the weights are packed in pairs along the reduction (``pack_pairs``: (K / 2, N, 2)), as oneDNN's
VNNI layout. Where the code is compiled for a target without AVX512_BF16 (``BF16_UNIT`` False)
the same block runs as two float32 FMAs a pair in the same order: the same sums, slower, without
the flush of subnormals. Emitted as LLVM IR by ``_pair_block(R, V)``, as microkernel.py's blocks.
"""
import llvmlite.binding as ll
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.config import kernel
from .microkernel import LANES, ROWS, WIDE


def _target_has_bf16() -> bool:
    """Whether the kernels are compiled for a target with AVX512_BF16: the target's features
    (NUMBA_CPU_FEATURES, as the kernel tier's levels set them) or else the host's."""
    features = getattr(numba.config, "CPU_FEATURES", "") or ll.get_host_cpu_features().flatten()
    return "+avx512bf16" in features.split(",")


# Whether the pair blocks run vdpbf16ps (fixed when the kernels compile, as their instruction set)
BF16_UNIT = _target_has_bf16()
ll.initialize_native_asmparser()  # the blocks' inline assembly is parsed as they compile (numba does not)
# Steps of the reduction a pass of gemm_pairs keeps in L1 (as microkernel.TN_CHUNK: a panel of w's
# pairs and the rows of x that meet it)
PAIR_CHUNK = 64


def _check_arrays(yf, xh, wh):
    ok = (isinstance(yf, types.Array) and yf.ndim == 1 and yf.layout == "C" and yf.dtype == types.float32
          and all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.uint16
                  for a in (xh, wh)))
    if not ok:
        raise numba.core.errors.TypingError(f"expected 1-D C-contiguous float32, uint16, uint16 arrays, "
                                            f"got {yf}, {xh}, {wh}")


def _pair_block(R: int, V: int, unit: bool):
    """The intrinsic for blocks of 1 .. R rows (chosen at run time) x 16V columns: (yf, y0, ys, xh,
    x0, rs, ks, rows, wh, w0, ws, K2, first) -> None; ``first``: the block is written, else the sums
    start from what yf holds. ``unit``: vdpbf16ps, else two float32 FMAs a pair."""

    @intrinsic
    def pair_block(typingctx, yf, y0, ys, xh, x0, rs, ks, rows, wh, w0, ws, K2, first):
        _check_arrays(yf, xh, wh)
        sig = types.void(yf, y0, ys, xh, x0, rs, ks, rows, wh, w0, ws, K2, first)

        def codegen(context, builder, signature, args):
            i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
            vec = ir.VectorType(f32, LANES)
            ivec = ir.VectorType(i32, LANES)
            tys = signature.args

            def i(k):  # argument k as an int64
                return context.cast(builder, args[k], tys[k], types.int64)

            def at(k):  # the data pointer of the array argument k
                return context.make_array(tys[k])(context, builder, args[k]).data

            def const(v):
                return ir.Constant(i64, v)

            yp = builder.gep(at(0), [i(1)])
            xp = builder.gep(at(3), [i(4)])
            wp = builder.gep(at(8), [i(9)])
            ystride, rstride, kstride, wstride = i(2), i(5), i(6), i(10)
            count = i(11)
            first_ = context.cast(builder, args[12], tys[12], types.boolean)
            if unit:  # inline assembly: LLVM's intrinsic takes <32 x bfloat>, a type llvmlite cannot name
                dot = ir.InlineAsm(ir.FunctionType(vec, [vec, ivec, ivec]), "vdpbf16ps $3, $2, $0",
                                   "=v,0,v,v")
            else:
                fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                                     "llvm.fma.v16f32")
                high = ir.Constant(ivec, [0xFFFF0000 - (1 << 32)] * LANES)
                sixteen = ir.Constant(ivec, [16] * LANES)
            zero = ir.Constant(vec, [0.0] * LANES)
            splat = ir.Constant(ivec, [0] * LANES)

            def step(acc, xs, wv):  # acc + the pairs xs (16 x i32, one pair splat) . wv (16 x i32)
                if unit:
                    return builder.call(dot, [acc, xs, wv])
                hi = builder.call(fma, [builder.bitcast(builder.and_(xs, high), vec),
                                        builder.bitcast(builder.and_(wv, high), vec), acc])
                return builder.call(fma, [builder.bitcast(builder.shl(xs, sixteen), vec),
                                          builder.bitcast(builder.shl(wv, sixteen), vec), hi])

            def yat(r, v):
                where = builder.gep(yp, [builder.add(builder.mul(const(r), ystride), const(LANES * v))])
                return builder.bitcast(where, vec.as_pointer())

            def emit(h):  # the block of h rows, at the builder's position
                accs = []
                for r in range(h):
                    row = []
                    for v in range(V):
                        slot = cgutils.alloca_once(builder, vec)
                        builder.store(builder.select(first_, zero, builder.load(yat(r, v), align=4)), slot)
                        row.append(slot)
                    accs.append(row)
                xrows = [builder.gep(xp, [builder.mul(const(r), rstride)]) for r in range(h)]
                with cgutils.for_range(builder, count) as loop:
                    k = loop.index
                    wrow = builder.gep(wp, [builder.mul(k, wstride)])
                    wv = [builder.load(builder.bitcast(builder.gep(wrow, [const(2 * LANES * v)]),
                                                       ivec.as_pointer()), align=2) for v in range(V)]
                    xk = builder.mul(k, kstride)
                    for r in range(h):
                        pair = builder.load(builder.bitcast(builder.gep(xrows[r], [xk]), i32.as_pointer()),
                                            align=2)
                        xs = builder.insert_element(ir.Constant(ivec, None), pair, ir.Constant(i32, 0))
                        xs = builder.shuffle_vector(xs, xs, splat)
                        for v in range(V):
                            builder.store(step(builder.load(accs[r][v]), xs, wv[v]), accs[r][v])
                for r in range(h):
                    for v in range(V):
                        builder.store(builder.load(accs[r][v]), yat(r, v), align=4)

            end = builder.append_basic_block("rows_end")
            switch = builder.switch(i(7), end)
            for h in range(1, R + 1):
                case = builder.append_basic_block(f"rows_{h}")
                switch.add_case(ir.Constant(i64, h), case)
                builder.position_at_end(case)
                emit(h)
                builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()
        return sig, codegen
    return pair_block


def _as_float(h):
    """float32 values of bf16 bits (NumPy)."""
    return (np.asarray(h, np.uint32) << 16).view(np.float32)


if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: NumPy, with bounds checks
    def _pair_block(R: int, V: int, unit: bool):  # type: ignore[no-redef]
        def pair_block(yf, y0, ys, xh, x0, rs, ks, rows, wh, w0, ws, K2, first):
            y0, ys, x0, rs, ks, rows, w0, ws, K2 = (int(a) for a in (y0, ys, x0, rs, ks, rows, w0, ws, K2))
            n = LANES * V
            for r in range(rows):
                acc = np.zeros(n, np.float32) if first else yf[y0 + r * ys:y0 + r * ys + n].copy()
                for k in range(K2):
                    xa = x0 + r * rs + k * ks
                    wa = w0 + k * ws
                    if not (0 <= xa and xa + 1 < xh.shape[0] and wa + 2 * n <= wh.shape[0]
                            and y0 + r * ys + n <= yf.shape[0]):
                        raise IndexError("a pair block outside its arrays")
                    xv, wv = _as_float(xh[xa:xa + 2]), _as_float(wh[wa:wa + 2 * n]).reshape(n, 2)
                    for e in (1, 0):  # the odd term first, as vdpbf16ps
                        acc = (np.float64(xv[e]) * wv[:, e] + acc).astype(np.float32)
                yf[y0 + r * ys:y0 + r * ys + n] = acc
        return pair_block


_BIG_1 = _pair_block(2 * ROWS if WIDE else ROWS, 1, BF16_UNIT)  # 12 (6) x 16
_BIG_2 = _pair_block(ROWS, 2, BF16_UNIT)  # 6 x 32


@kernel(inline=True)
def _bf16_bits(b):
    """The bfloat16 bits of the float32 bits b (uint32), in the low half of a uint32: rounded to
    nearest, ties to even (inf stays inf; a NaN stays a quiet NaN of its sign). A select, not a
    branch, so that the loops around it vectorise."""
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (b >> np.uint32(16)) | np.uint32(0x40)
    rounded = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return quiet if nan else rounded


@kernel()
def round_bf16(dst, d0, src, s0, n):
    """dst[d0:d0 + n] (uint16) = src[s0:s0 + n] (float32) rounded to bfloat16 (_bf16_bits)."""
    bits = src[s0:s0 + n].view(np.uint32)
    out = dst[d0:d0 + n]
    for j in range(n):
        out[j] = np.uint16(_bf16_bits(bits[j]))


@kernel()
def pack_pairs(dst, d0, ds, src, s0, ss, K, N):
    """dst[d0 + k * ds + 2 j + e] (uint16) = src[s0 + (2 k + e) * ss + j] (float32, rows ss apart)
    rounded to bfloat16, for k < ceil(K / 2), j < N, e < 2; 0 past row K - 1: a (K, N) matrix
    packed in pairs along its rows (the weights of gemm_pairs, or its x stored transposed). d0 and
    ds even (each pair one aligned uint32)."""
    for k in range((K + 1) // 2):
        out = dst[d0 + k * ds:d0 + k * ds + 2 * N].view(np.uint32)
        even = src[s0 + 2 * k * ss:s0 + 2 * k * ss + N].view(np.uint32)
        if 2 * k + 1 < K:
            odd = src[s0 + (2 * k + 1) * ss:s0 + (2 * k + 1) * ss + N].view(np.uint32)
            for j in range(N):
                out[j] = _bf16_bits(even[j]) | (_bf16_bits(odd[j]) << np.uint32(16))
        else:
            for j in range(N):
                out[j] = _bf16_bits(even[j])


@kernel()
def gemm_pairs(yf, y0, ys, xh, x0, rs, ks, wh, w0, ws, M, N, K2, first):
    """yf[y0:] (M, N; rows ys apart) (+)= x (M, 2 K2) @ w (2 K2, N) in bf16 pairs (the module's
    docstring: x's pair (r, k) at xh[x0 + r * rs + k * ks], w packed by pack_pairs, its pair rows ws
    apart); ``first``: overwrite, else add to y's values. N a multiple of 16. Blocks of 16V columns
    (V 2 where N is a multiple of 32 with AVX-512) and up to R rows, the reduction in chunks of
    PAIR_CHUNK pairs: each sum runs over k in order, the same bits in any block and on any thread
    count."""
    V = 2 if N % 32 == 0 and WIDE else 1
    R = ROWS if V == 2 or not WIDE else 2 * ROWS
    for c0 in range(0, N, LANES * V):
        for k0 in range(0, K2, PAIR_CHUNK):
            kc = min(PAIR_CHUNK, K2 - k0)
            p = 0
            while p < M:
                h = min(R, M - p)
                if V == 2:
                    _BIG_2(yf, y0 + p * ys + c0, ys, xh, x0 + p * rs + k0 * ks, rs, ks, h, wh,
                           w0 + k0 * ws + 2 * c0, ws, kc, first and k0 == 0)
                else:
                    _BIG_1(yf, y0 + p * ys + c0, ys, xh, x0 + p * rs + k0 * ks, rs, ks, h, wh,
                           w0 + k0 * ws + 2 * c0, ws, kc, first and k0 == 0)
                p += h
        if K2 == 0 and first:
            for r in range(M):
                yf[y0 + r * ys + c0:y0 + r * ys + c0 + LANES * V] = np.float32(0.0)
