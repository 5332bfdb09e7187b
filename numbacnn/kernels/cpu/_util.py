"""Small shared CPU kernels: gradient-part bounds, bias-gradient row sums, the fixed-order reduction
of the gradient parts, the record of the weights that a layout of them was made from, and short
copies in vector moves."""
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks


@kernel()
def part_bounds(n, parts, c):
    """Examples [lo, hi) of part c when n examples are split into ``parts`` nearly equal parts."""
    return (c * n) // parts, ((c + 1) * n) // parts


@kernel()
def conv_out(size, k, s, p):
    """Output positions of a convolution along one axis: input ``size``, kernel ``k``, stride
    ``s``, zero padding ``p`` on both sides."""
    return (size + 2 * p - k) // s + 1


@kernel()
def zero_parts(dw, db):
    """dw (Co, K) = 0 and db (Co,) = 0: a chunk's gradient parts before it accumulates.
    Loops, as every kernel writes its arrays."""
    zero = np.float32(0.0)
    for co in range(dw.shape[0]):
        db[co] = zero
        row = dw[co]
        for k in range(dw.shape[1]):
            row[k] = zero


@kernel()
def add_row_sums(db, gf, P, n, first):
    """db[co] (+)= the sum of gf[co * P:co * P + n] (the bias gradient of a group's rows);
    overwrites when first."""
    for co in range(db.shape[0]):
        row = gf[co * P:co * P + n]
        s = np.float32(0.0)
        for j in range(n):
            s += row[j]
        db[co] = s if first else db[co] + s


@kernel()
def parts_rows(R):
    """Rows (co, a) of R elements per parallel block of sum_parts: about 256 elements (short
    rows alone kept the vector loop from paying: LeNet's 6 -> 16 layer, rows of 30, ran 2.5x
    slower than in 256-element blocks)."""
    return max(1, 256 // R)


@kernel(export=True)
def sum_parts(dw, db, dw_parts, db_parts, shape, strides):
    """dw = the sum of the gradient parts dw_parts[p] and db = that of db_parts[p], added in part
    order (deterministic), in one parallel region; the parts may hold the weight gradient in
    another axis order than dw (a transpose).

    dw: flat view of the weight gradient; db: (Co,); dw_parts: (P, M), each row a C-ordered
    array of ``shape`` (D, A, B, C) (D is Co, or any axis: Winograd's (36, Ci, Co, 1)) whose element
    (d, a, b, c) belongs at
    dw[d * s0 + a * s1 + b * s2 + c * s3], ``strides`` = (s0, s1, s2, s3) in elements;
    db_parts: (P, Co). Row 0 of dw_parts is the accumulator (overwritten).
    """
    D, A, B, C = shape
    R = B * C
    G = parts_rows(R)
    n_blocks = -(-(D * A) // G)
    # disjoint blocks of G rows (co, a); the last one: db
    args = (dw, db, dw_parts, db_parts, shape, strides)
    parallel_blocks(n_blocks + 1, sum_parts_part, args)


@kernel(float_division=True)
def sum_parts_part(blk, dw, db, dw_parts, db_parts, shape, strides):
    """Part ``blk`` of sum_parts: one iteration of its parallel loop."""
    D, A, B, C = shape
    s0, s1, s2, s3 = strides
    P = dw_parts.shape[0]
    R = B * C
    G = parts_rows(R)
    n_blocks = -(-(D * A) // G)
    if blk == n_blocks:
        for co in range(db.shape[0]):  # the parts' first axis need not be the output channels'
            s = db_parts[0, co]
            for p in range(1, P):
                s += db_parts[p, co]
            db[co] = s
    else:
        t0 = blk * G
        t1 = min(D * A, t0 + G)
        acc = dw_parts[0, t0 * R:t1 * R]
        for p in range(1, P):
            src = dw_parts[p, t0 * R:t1 * R]
            for i in range((t1 - t0) * R):
                acc[i] += src[i]
        for t in range(t0, t1):
            d0 = (t // A) * s0 + (t % A) * s1
            r0 = (t - t0) * R
            for b in range(B):
                for c in range(C):
                    dw[d0 + b * s2 + c * s3] = acc[r0 + b * C + c]


@kernel()
def _bits_diff(seen, at, a):
    """The OR of seen[at:at + a.size] ^ the bits of a (contiguous float32)."""
    n = a.size
    bits = a.reshape(n).view(np.int32)
    diff = np.int32(0)
    for i in range(n):  # no early exit: an OR reduction vectorises
        diff |= seen[at + i] ^ bits[i]
    return diff


@kernel()
def _bits_copy(seen, at, a):
    """seen[at:at + a.size] = the bits of a (contiguous float32)."""
    n = a.size
    bits = a.reshape(n).view(np.int32)
    for i in range(n):
        seen[at + i] = bits[i]


@kernel()
def unchanged(seen, w):
    """Whether the bits of w (contiguous, any shape) are those that ``seen`` recorded; if not,
    records them. seen: int32, w.size + 1: the bits and, last, 1 once it holds a record (0 or
    anything else: nothing recorded yet). Lets a kernel skip re-packing weights (a transpose,
    Winograd's filter transforms) that have not changed since it last packed them: compared bit
    for bit, so any write to the weights, a NaN or a signed zero included, repacks."""
    n = w.size
    if seen[n] == 1 and _bits_diff(seen, 0, w) == 0:
        return True
    _bits_copy(seen, 0, w)
    seen[n] = 1
    return False


@kernel()
def unchanged_many(seen, a, b, c, d, e, f):
    """unchanged for six arrays at once: their bits one after another in seen (int32, the six
    sizes + 1; the last element 1 once it holds a record). The BatchNorm fold's inputs."""
    n1 = a.size
    n2 = n1 + b.size
    n3 = n2 + c.size
    n4 = n3 + d.size
    n5 = n4 + e.size
    n6 = n5 + f.size
    diff = (_bits_diff(seen, 0, a) | _bits_diff(seen, n1, b) | _bits_diff(seen, n2, c)
            | _bits_diff(seen, n3, d) | _bits_diff(seen, n4, e) | _bits_diff(seen, n5, f))
    if seen[n6] == 1 and diff == 0:
        return True
    _bits_copy(seen, 0, a)
    _bits_copy(seen, n1, b)
    _bits_copy(seen, n2, c)
    _bits_copy(seen, n3, d)
    _bits_copy(seen, n4, e)
    _bits_copy(seen, n5, f)
    seen[n6] = 1
    return False


@kernel()
def same_version(seen, version):
    """Whether a packing made from weights whose writer counts its writes in version[0] (the
    BatchNorm fold) is current: seen (int32 (2,)) holds the count it was made at and, last, 1 once
    it holds one (anything else: nothing recorded). If not, records the count."""
    if seen[1] == 1 and seen[0] == version[0]:
        return True
    seen[0] = version[0]
    seen[1] = 1
    return False


def _contiguous(*arrays):
    """The vector moves read and write memory from an array's data pointer on: only for 1-D
    C-contiguous float32 arrays (a typing error otherwise, never a wrong address)."""
    for a in arrays:
        if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.float32):
            raise numba.core.errors.TypingError(f"expected a 1-D C-contiguous float32 array, got {a}")


@intrinsic
def _move16(typingctx, d, di, s, si):
    """d[di:di + 16] = s[si:si + 16] as one 64-byte memcpy, which LLVM expands into one or two
    vector moves. No bounds checks: the caller keeps both ranges inside their arrays."""
    _contiguous(d, s)
    sig = types.void(d, di, s, si)

    def codegen(context, builder, signature, args):
        dst = context.make_array(signature.args[0])(context, builder, args[0])
        src = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(dst.data, [args[1]]), builder.gep(src.data, [args[3]]),
                           context.get_constant(types.intp, 16), 4)
        return context.get_dummy_value()
    return sig, codegen


@kernel()
def copy_run(d, di, s, si, n):
    """d[di:di + n] = s[si:si + n] for float32 arrays d and s (not overlapping; offsets and n
    unsigned). LLVM vectorises a loop over 30 floats not at all (its vector loop takes 64 at a time),
    and cannot move straight-line copies between arrays that may overlap as vectors: runs of 16 go
    as memcpy's, which by definition do not overlap, and the last partial one overlaps the one
    before (the same values twice), so nothing outside the run is touched."""
    sixteen = numba.uint64(16)
    if n < sixteen:
        for i in range(n):
            d[di + i] = s[si + i]
        return
    o = numba.uint64(0)
    while o + sixteen <= n:
        _move16(d, di + o, s, si + o)
        o += sixteen
    if o < n:
        _move16(d, di + n - sixteen, s, si + n - sixteen)


@intrinsic
def _add16(typingctx, d, di, s, si):
    """d[di:di + 16] += s[si:si + 16] as vector loads, one vector add and a vector store (the same
    float32 sums as one at a time). No bounds checks: the caller keeps both ranges inside their
    arrays."""
    _contiguous(d, s)
    sig = types.void(d, di, s, si)

    def codegen(context, builder, signature, args):
        vec = ir.VectorType(ir.FloatType(), 16).as_pointer()
        dst = context.make_array(signature.args[0])(context, builder, args[0])
        src = context.make_array(signature.args[2])(context, builder, args[2])
        dp = builder.bitcast(builder.gep(dst.data, [args[1]]), vec)
        sp = builder.bitcast(builder.gep(src.data, [args[3]]), vec)
        builder.store(builder.fadd(builder.load(dp, align=4), builder.load(sp, align=4)), dp, align=4)
        return context.get_dummy_value()
    return sig, codegen


@kernel()
def add_run(d, di, s, si, n):
    """d[di:di + n] += s[si:si + n] for float32 arrays d and s (not overlapping; offsets and n
    unsigned): 16 at a time (_add16), the rest one by one."""
    sixteen = numba.uint64(16)
    o = numba.uint64(0)
    while o + sixteen <= n:
        _add16(d, di + o, s, si + o)
        o += sixteen
    for i in range(o, n):
        d[di + i] += s[si + i]


@intrinsic
def gather16(typingctx, d, di, s, si, stride):
    """d[di:di + 16] = s[si], s[si + stride], ..., s[si + 15 * stride]: one vector gather (AVX2 and
    AVX-512 have them; LLVM splits or scalarises it elsewhere) and one vector store. No bounds
    checks: the caller keeps the 16 reads and the run inside their arrays."""
    _contiguous(d, s)
    sig = types.void(d, di, s, si, stride)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(ir.FloatType(), 16)
        dst = context.make_array(signature.args[0])(context, builder, args[0])
        src = context.make_array(signature.args[2])(context, builder, args[2])
        splat = ir.Constant(ir.VectorType(i32, 16), [0] * 16)

        def broadcast(v):
            v = builder.insert_element(ir.Constant(ir.VectorType(i64, 16), None), v, ir.Constant(i32, 0))
            return builder.shuffle_vector(v, v, splat)
        base = builder.ptrtoint(builder.gep(src.data, [args[3]]), i64)
        stride = context.cast(builder, args[4], signature.args[4], types.int64)
        step = builder.mul(stride, ir.Constant(i64, 4))  # bytes
        lanes = ir.Constant(ir.VectorType(i64, 16), list(range(16)))
        addresses = builder.add(broadcast(base), builder.mul(lanes, broadcast(step)))
        pointers = builder.inttoptr(addresses, ir.VectorType(ir.FloatType().as_pointer(), 16))
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vec, [pointers.type, i32, ir.VectorType(ir.IntType(1), 16), vec]),
            "llvm.masked.gather.v16f32.v16p0f32")
        values = builder.call(gather, [pointers, ir.Constant(i32, 4),
                                       ir.Constant(ir.VectorType(ir.IntType(1), 16), [1] * 16),
                                       ir.Constant(vec, None)])
        builder.store(values, builder.bitcast(builder.gep(dst.data, [args[1]]), vec.as_pointer()), align=4)
        return context.get_dummy_value()
    return sig, codegen



def _transposer(biased: bool):
    """The 16 x 16 register transpose (``transpose16``), and with ``biased`` its variant that adds
    a bias vector to each row read (and applies ReLU) before the shuffles."""

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(ir.FloatType(), 16)
        tys = signature.args

        def i(k):  # argument k as an int64
            return context.cast(builder, args[k], tys[k], types.int64)
        dp = context.make_array(tys[0])(context, builder, args[0]).data
        sp = builder.gep(context.make_array(tys[4])(context, builder, args[4]).data, [i(5)])
        bases, dstride, sstride = (builder.gep(dp, [i(1)]), builder.gep(dp, [i(2)])), i(3), i(6)

        def row(base, stride, r):
            return builder.bitcast(builder.gep(base, [builder.mul(ir.Constant(i64, r), stride)]),
                                   vec.as_pointer())
        rows = [builder.load(row(sp, sstride, r), align=4) for r in range(16)]
        if biased:  # rows[r] + bias, then 0 where that is below 0 (NaN stays NaN), as a scalar loop would
            bp = builder.gep(context.make_array(tys[7])(context, builder, args[7]).data, [i(8)])
            bias = builder.load(builder.bitcast(bp, vec.as_pointer()), align=4)
            relu = context.cast(builder, args[9], tys[9], types.boolean)
            zero = ir.Constant(vec, [0.0] * 16)
            for r in range(16):
                v = builder.fadd(rows[r], bias)
                rows[r] = builder.select(relu, builder.select(builder.fcmp_ordered("<", v, zero), zero, v), v)
        b = 8
        while b:  # swap the off-diagonal b x b blocks of every 2b x 2b block
            lo = ir.Constant(ir.VectorType(i32, 16), [k if not k & b else 16 + (k ^ b) for k in range(16)])
            hi = ir.Constant(ir.VectorType(i32, 16), [k ^ b if not k & b else 16 + k for k in range(16)])
            for r in range(16):
                if not r & b:
                    a, c = rows[r], rows[r | b]
                    rows[r], rows[r | b] = builder.shuffle_vector(a, c, lo), builder.shuffle_vector(a, c, hi)
            b //= 2
        for r in range(16):
            builder.store(rows[r], row(bases[r & 1], dstride, r >> 1), align=4)
        return context.get_dummy_value()
    return codegen


@intrinsic
def transpose16(typingctx, d, de, do, ds, s, si, ss):
    """A 16 x 16 block transposed in registers (16 vector loads, four rounds of 16 two-vector
    shuffles, 16 vector stores): row j of the result (s[si + j], s[si + ss + j], ...,
    s[si + 15 * ss + j]) goes to d[de + (j // 2) * ds:] for even j, d[do + (j // 2) * ds:] for odd
    j, so that rows can be split by parity (Winograd's planes) or, with do = de + ds / 2, follow
    each other ds / 2 apart. For channel-last copies of (C, H, W) planes and back: gathers read 16
    rows a plane apart per vector, and planes of 1 or 4 KB put all 16 in one cache set (16 x 32 x
    32: 8.5 -> 2 us). No bounds checks: the caller keeps both blocks inside their arrays."""
    _contiguous(d, s)
    return types.void(d, de, do, ds, s, si, ss), _transposer(False)


@intrinsic
def transpose16_bias(typingctx, d, de, do, ds, s, si, ss, b, bi, relu):
    """transpose16 of the 16 x 16 block plus a bias: s[si + k * ss + j] + b[bi + j] (then 0 where
    that is below 0, when ``relu``) goes where transpose16 puts s[si + k * ss + j]: a convolution's
    epilogue (channel-last rows of 16 channels in, channel rows out) without a pass of its own over
    the rows. The same float32 sums as adding one value at a time."""
    _contiguous(d, s, b)
    return types.void(d, de, do, ds, s, si, ss, b, bi, relu), _transposer(True)


@kernel(inline=True)
def gather_channels(d, di, xf, C, HW, si):
    """d[di:di + C] = the C channels of one position of a (C, H, W) plane read flat as xf, the
    position at si in channel 0 (C divisible by 16): a channel-last copy, 16 channels a gather."""
    for c0 in range(0, C, 16):
        gather16(d, numba.uint64(di + c0), xf, numba.uint64(c0 * HW + si), numba.uint64(HW))

if getattr(numba.config, "DISABLE_JIT", 0):  # NUMBA_DISABLE_JIT=1: kernels run as Python, with
    def _in16(d, di, s, si):  # NumPy's bounds checks (tests/test_reliability.py)
        di, si = int(di), int(si)
        if d[di:di + 16].shape[0] != 16 or s[si:si + 16].shape[0] != 16:
            raise IndexError("a 16-float move outside its array")
        return di, si

    def _move16(d, di, s, si):  # type: ignore[misc]
        di, si = _in16(d, di, s, si)
        d[di:di + 16] = s[si:si + 16]

    def _add16(d, di, s, si):  # type: ignore[misc]
        di, si = _in16(d, di, s, si)
        d[di:di + 16] += s[si:si + 16]

    def transpose16(d, de, do, ds, s, si, ss):  # type: ignore[misc]
        de, do, ds, si, ss = int(de), int(do), int(ds), int(si), int(ss)
        if not (0 <= si and si + 15 * ss + 16 <= s.shape[0]):
            raise IndexError("a 16 x 16 transpose outside its arrays")
        block = np.stack([s[si + k * ss:si + k * ss + 16] for k in range(16)])
        for j in range(16):
            at = (do if j & 1 else de) + (j >> 1) * ds
            if not (0 <= at and at + 16 <= d.shape[0]):
                raise IndexError("a 16 x 16 transpose outside its arrays")
            d[at:at + 16] = block[:, j]

    def transpose16_bias(d, de, do, ds, s, si, ss, b, bi, relu):  # type: ignore[misc]
        si, ss, bi = int(si), int(ss), int(bi)
        if not (0 <= si and si + 15 * ss + 16 <= s.shape[0] and 0 <= bi and bi + 16 <= b.shape[0]):
            raise IndexError("a 16 x 16 transpose outside its arrays")
        block = np.stack([s[si + k * ss:si + k * ss + 16] + b[bi:bi + 16] for k in range(16)])
        if relu:
            block = np.where(block < 0, np.float32(0.0), block)
        transpose16(d, de, do, ds, block.reshape(256), 0, 16)

    def gather16(d, di, s, si, stride):  # type: ignore[misc]
        di, si, stride = int(di), int(si), int(stride)
        if d[di:di + 16].shape[0] != 16 or not 0 <= si + 15 * stride < s.shape[0]:
            raise IndexError("a 16-float gather outside its array")
        d[di:di + 16] = s[si:si + 15 * stride + 1:stride]
