"""Small shared CPU kernels: gradient-part bounds, bias-gradient row sums and the fixed-order reduction
of per-chunk gradients."""
import numpy as np
from numba import prange

from ..._config import kernel


@kernel(parallel=False)
def part_bounds(n, parts, c):
    """Examples [lo, hi) of part c when n examples are split into ``parts`` nearly equal parts."""
    return (c * n) // parts, ((c + 1) * n) // parts


@kernel(parallel=False)
def conv_out(size, k, s, p):
    """Output positions of a convolution along one axis: input ``size``, kernel ``k``, stride
    ``s``, zero padding ``p`` on both sides."""
    return (size + 2 * p - k) // s + 1


@kernel(parallel=False)
def zero_parts(dw, db):
    """dw (Co, K) = 0 and db (Co,) = 0: a chunk's gradient parts before it accumulates.
    Loops rather than dw[:] = 0: inside a prange body that would compile as a nested parallel loop."""
    zero = np.float32(0.0)
    for co in range(dw.shape[0]):
        db[co] = zero
        row = dw[co]
        for k in range(dw.shape[1]):
            row[k] = zero


@kernel(parallel=False)
def add_row_sums(db, gf, P, n, first):
    """db[co] (+)= the sum of gf[co * P:co * P + n] (the bias gradient of a group's rows);
    overwrites when first."""
    for co in range(db.shape[0]):
        row = gf[co * P:co * P + n]
        s = np.float32(0.0)
        for j in range(n):
            s += row[j]
        db[co] = s if first else db[co] + s


@kernel(parallel=False)
def reduce_block(M):
    """Elements per prange iteration of sum_chunks for a gradient of M elements: at least 64
    iterations from M = 16,384 on, blocks of 256 to 4,096 elements."""
    return min(4096, max(256, -(-M // 64)))


@kernel()
def sum_chunks(out, parts):
    """out[...] = sum over c of parts[c, ...], added in chunk order (deterministic).

    out: (M,) flat view of a gradient; parts: (P, M), one row per gradient part.
    """
    M = out.shape[0]
    n_parts = parts.shape[0]
    block = reduce_block(M)
    for blk in prange((M + block - 1) // block):  # disjoint element ranges
        lo = blk * block
        hi = min(M, lo + block)
        dst = out[lo:hi]
        first = parts[0, lo:hi]
        for i in range(hi - lo):
            dst[i] = first[i]
        for c in range(1, n_parts):
            src = parts[c, lo:hi]
            for i in range(hi - lo):
                dst[i] += src[i]
