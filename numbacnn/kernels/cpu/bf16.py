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
from ...runtime.prebuilt import amx_permitted
from .microkernel import LANES, ROWS, WIDE


def _target_has(*names: str) -> bool:
    """Whether the kernels are compiled for a target with these LLVM features: the target's
    (NUMBA_CPU_FEATURES, as the kernel tier's levels set them) or else the host's."""
    features = (getattr(numba.config, "CPU_FEATURES", "") or ll.get_host_cpu_features().flatten()).split(",")
    return all("+" + name in features for name in names)


# Whether the pair blocks run vdpbf16ps, and whether gemm_tiles runs on AMX's tiles (tdpbf16ps;
# the target has it and Linux granted this process the tile state): fixed when the kernels
# compile, as their instruction set
BF16_UNIT = _target_has("avx512bf16")
AMX_UNIT = BF16_UNIT and _target_has("amx-tile", "amx-bf16") and amx_permitted()
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


# --- AMX: tdpbf16ps on 16 x 16 tiles --------------------------------------------------------------
# Eight tile registers of up to 16 rows x 64 bytes: C (16 x 16 float32) += A (16 rows x KP pairs,
# the pairs of a row side by side) . B (KP pair rows x 16 columns: pack_pairs' layout), KP 16 or 8
# pairs a step. A block of 2 x 2 C tiles (tmm0-3) keeps two A tiles (tmm4, 5) and two B tiles
# (tmm6, 7) per step: 4 instructions of 16 x 16 x 2 KP multiply-adds for 4 tile loads. The tile
# configuration (ldtilecfg: per tile its rows and bytes a row) is set once per call and once more
# for the rows past the last whole 16.


def _tile_asm(builder, text, operands):
    ft = ir.FunctionType(ir.VoidType(), [o.type for o in operands])
    cons = ",".join(["r"] * len(operands) + ["~{memory}"])
    builder.call(ir.InlineAsm(ft, text, cons, side_effect=True), operands)


@intrinsic
def _tile_config(typingctx, kp, rows):
    """ldtilecfg: C tiles tmm0-3 and A tiles tmm4-5 of 16 rows (tmm0, tmm1 and tmm4: ``rows``),
    A of 4 kp bytes a row, B tiles tmm6-7 of kp rows, C and B 64 bytes a row."""
    sig = types.void(kp, rows)

    def codegen(context, builder, signature, args):
        i8, i16, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(64)
        cfg = cgutils.alloca_once(builder, ir.ArrayType(i8, 64))
        builder.store(ir.Constant(ir.ArrayType(i8, 64), [0] * 64), cfg)
        base = builder.bitcast(cfg, i8.as_pointer())
        k = context.cast(builder, args[0], signature.args[0], types.int64)
        r = context.cast(builder, args[1], signature.args[1], types.int64)

        def put(offset, value, ty):
            builder.store(builder.trunc(value, ty) if ty != i64 else value,
                          builder.bitcast(builder.gep(base, [ir.Constant(i64, offset)]), ty.as_pointer()))

        put(0, ir.Constant(i64, 1), i8)  # palette 1
        sixteen, row_bytes = ir.Constant(i64, 16), ir.Constant(i64, 64)
        for t in range(8):
            colsb = builder.mul(k, ir.Constant(i64, 4)) if t in (4, 5) else row_bytes
            nrows = r if t in (0, 1, 4) else (k if t in (6, 7) else sixteen)
            put(16 + 2 * t, colsb, i16)
            put(48 + t, nrows, i8)
        _tile_asm(builder, "ldtilecfg ($0)", [base])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _tile_release(typingctx):
    sig = types.void()

    def codegen(context, builder, signature, args):
        _tile_asm(builder, "tilerelease", [])
        return context.get_dummy_value()
    return sig, codegen


def _tile_block(RB: int, CB: int):
    """The intrinsic for a block of RB x CB C tiles: (yf, y0, ys, xh, x0, rs, wh, w0, ws, steps,
    kp, first) -> None; C's rows ys floats apart, A's rs uint16, B's pair rows ws uint16; steps
    of kp pairs; ``first``: C starts at zero, else from yf."""

    @intrinsic
    def tile_block(typingctx, yf, y0, ys, xh, x0, rs, wh, w0, ws, steps, kp, first):
        _check_arrays(yf, xh, wh)
        sig = types.void(yf, y0, ys, xh, x0, rs, wh, w0, ws, steps, kp, first)

        def codegen(context, builder, signature, args):
            i8, i64 = ir.IntType(8), ir.IntType(64)
            tys = signature.args

            def i(k):
                return context.cast(builder, args[k], tys[k], types.int64)

            def ptr(k, offset, size):  # the byte address of element (offset) of array argument k
                data = context.make_array(tys[k])(context, builder, args[k]).data
                byte = builder.mul(offset, ir.Constant(i64, size))
                return builder.gep(builder.bitcast(data, i8.as_pointer()), [byte])

            def c(v):
                return ir.Constant(i64, v)

            ys, rs, ws, kp = i(2), i(5), i(8), i(10)
            y_bytes, x_bytes, w_bytes = builder.mul(ys, c(4)), builder.mul(rs, c(2)), builder.mul(ws, c(2))
            ys16 = builder.mul(ys, c(16))
            yat = [[ptr(0, builder.add(i(1), builder.add(builder.mul(ys16, c(a)), c(16 * b))), 4)
                    for b in range(CB)] for a in range(RB)]
            first_ = context.cast(builder, args[11], tys[11], types.boolean)
            with builder.if_else(first_) as (zero, load):
                with zero:
                    for a in range(RB):
                        for b in range(CB):
                            _tile_asm(builder, f"tilezero %tmm{2 * a + b}", [])
                with load:
                    for a in range(RB):
                        for b in range(CB):
                            _tile_asm(builder, f"tileloadd ($0,$1,1), %tmm{2 * a + b}", [yat[a][b], y_bytes])
            rs16 = builder.mul(rs, c(16))
            step_w = builder.mul(kp, ws)
            step_x = builder.mul(kp, c(2))
            with cgutils.for_range(builder, i(9)) as loop:
                s = loop.index
                for a in range(RB):
                    xa = builder.add(i(4), builder.add(builder.mul(rs16, c(a)), builder.mul(s, step_x)))
                    _tile_asm(builder, f"tileloadd ($0,$1,1), %tmm{4 + a}", [ptr(3, xa, 2), x_bytes])
                for b in range(CB):
                    wa = builder.add(i(7), builder.add(builder.mul(s, step_w), c(32 * b)))
                    _tile_asm(builder, f"tileloadd ($0,$1,1), %tmm{6 + b}", [ptr(6, wa, 2), w_bytes])
                for a in range(RB):  # (loads between the products, oneDNN's order, ran 0.6-0.9x here)
                    for b in range(CB):
                        _tile_asm(builder, f"tdpbf16ps %tmm{6 + b}, %tmm{4 + a}, %tmm{2 * a + b}", [])
            for a in range(RB):
                for b in range(CB):
                    _tile_asm(builder, f"tilestored %tmm{2 * a + b}, ($0,$1,1)", [yat[a][b], y_bytes])
            return context.get_dummy_value()
        return sig, codegen
    return tile_block


if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: the tiles' sums in NumPy
    _TILE_ROWS = [16]

    def _tile_config(kp, rows):  # type: ignore[no-redef,misc]
        _TILE_ROWS[0] = int(rows)

    def _tile_release():  # type: ignore[no-redef,misc]
        pass

    def _tile_block(RB: int, CB: int):  # type: ignore[no-redef]
        def tile_block(yf, y0, ys, xh, x0, rs, wh, w0, ws, steps, kp, first):
            rows = _TILE_ROWS[0]
            for a in range(RB):
                h = rows if a == 0 else 16
                for b in range(CB):
                    for r in range(h):
                        at = y0 + (16 * a + r) * ys + 16 * b
                        acc = np.zeros(16) if first else yf[at:at + 16].astype(np.float64)
                        xa = x0 + (16 * a + r) * rs
                        xv = _as_float(xh[xa:xa + 2 * kp * steps])
                        for k in range(kp * steps):
                            wa = w0 + k * ws + 32 * b
                            acc += xv[2 * k] * _as_float(wh[wa:wa + 32:2])
                            acc += xv[2 * k + 1] * _as_float(wh[wa + 1:wa + 32:2])
                        yf[at:at + 16] = acc
        return tile_block


_TILES_22 = _tile_block(2, 2)
_TILES_21 = _tile_block(2, 1)
_TILES_12 = _tile_block(1, 2)
_TILES_11 = _tile_block(1, 1)


@kernel()
def gemm_tiles(yf, y0, ys, xh, x0, rs, wh, w0, ws, M, N, K2, first):
    """gemm_pairs on AMX (AMX_UNIT): yf[y0:] (M, N; rows ys apart) (+)= x (M, 2 K2) @ w (2 K2, N),
    x's row r at xh[x0 + r * rs] (its pairs side by side), w packed by pack_pairs (pair rows ws
    apart); ``first``: overwrite. N a multiple of 16, K2 of 8. The reduction runs in steps of 16
    pairs (8 where K2 is not a multiple of 16), in order: the same bits for any split of the rows."""
    if K2 == 0:
        if first:
            for r in range(M):
                yf[y0 + r * ys:y0 + r * ys + N] = np.float32(0.0)
        return
    kp = 16 if K2 % 16 == 0 else 8
    steps = K2 // kp
    whole = M // 16 * 16
    for rows in (16, M - whole):
        if rows == 0 or (rows == 16 and whole == 0):
            continue
        _tile_config(kp, rows)
        p0, p1 = (0, whole) if rows == 16 else (whole, M)
        for c0 in range(0, N, 32):
            two = c0 + 32 <= N
            p = p0
            while p < p1:
                at_y, at_x = y0 + p * ys + c0, x0 + p * rs
                at_w = w0 + 2 * c0
                if rows == 16 and p + 32 <= p1:
                    if two:
                        _TILES_22(yf, at_y, ys, xh, at_x, rs, wh, at_w, ws, steps, kp, first)
                    else:
                        _TILES_21(yf, at_y, ys, xh, at_x, rs, wh, at_w, ws, steps, kp, first)
                    p += 32
                else:
                    if two:
                        _TILES_12(yf, at_y, ys, xh, at_x, rs, wh, at_w, ws, steps, kp, first)
                    else:
                        _TILES_11(yf, at_y, ys, xh, at_x, rs, wh, at_w, ws, steps, kp, first)
                    p += 16
    _tile_release()


@kernel()
def round_transposed(dst, d0, ld, src, s0, ss, T, C, T1):
    """dst[d0 + c * ld + t] (uint16) = src[s0 + t * ss + c] (float32) rounded to bfloat16, for
    c < C, t < T; zero for T <= t < T1: a (T, C) matrix stored transposed, as the rows of
    gemm_tiles' x. d0 and ld even: rows t, t + 1 rounded as one uint32 pair (as pack_pairs), and
    blocks of 16 x 16 pairs transposed through a small tile (column by column, reading src
    strided, it ran 3.3 ns an element on an AMX Xeon; this way 2.0)."""
    bits = src.view(np.uint32)
    d32 = dst.view(np.uint32)
    tile = np.empty((16, 16), np.uint32)
    T2 = (T + 1) // 2
    for c0 in range(0, C, 16):
        cw = min(16, C - c0)
        for p0 in range(0, T2, 16):
            pw = min(16, T2 - p0)
            for a in range(pw):
                at = s0 + 2 * (p0 + a) * ss + c0
                if 2 * (p0 + a) + 1 < T:
                    for j in range(cw):
                        high = _bf16_bits(bits[at + ss + j]) << np.uint32(16)
                        tile[j, a] = _bf16_bits(bits[at + j]) | high
                else:
                    for j in range(cw):
                        tile[j, a] = _bf16_bits(bits[at + j])
            for j in range(cw):
                row = (d0 + (c0 + j) * ld) // 2 + p0
                for a in range(pw):
                    d32[row + a] = tile[j, a]
        for j in range(cw):
            out = dst[d0 + (c0 + j) * ld:d0 + (c0 + j) * ld + T1]
            out[T:T1] = 0
