"""Small shared CPU kernels: gradient-part bounds, bias-gradient row sums and the fixed-order reduction
of the gradient parts."""
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


@kernel()
def sum_parts(dw, db, dw_parts, db_parts, shape, strides):
    """dw = the sum of the gradient parts dw_parts[p] and db = that of db_parts[p], added in part
    order (deterministic), in one parallel region; the parts may hold the weight gradient in
    another axis order than dw (a transpose).

    dw: flat view of the weight gradient; db: (Co,); dw_parts: (P, M), each row a C-ordered
    array of ``shape`` (Co, A, B, C) whose element (co, a, b, c) belongs at
    dw[co * s0 + a * s1 + b * s2 + c * s3], ``strides`` = (s0, s1, s2, s3) in elements;
    db_parts: (P, Co). Row 0 of dw_parts is the accumulator (overwritten).
    """
    Co, A, B, C = shape
    s0, s1, s2, s3 = strides
    P = dw_parts.shape[0]
    R = B * C
    for t in prange(Co * A + 1):  # disjoint rows (co, a) of the parts; the last one: db
        if t == Co * A:
            for co in range(Co):
                s = db_parts[0, co]
                for p in range(1, P):
                    s += db_parts[p, co]
                db[co] = s
        else:
            acc = dw_parts[0, t * R:(t + 1) * R]
            for p in range(1, P):
                src = dw_parts[p, t * R:(t + 1) * R]
                for i in range(R):
                    acc[i] += src[i]
            d0 = (t // A) * s0 + (t % A) * s1
            for b in range(B):
                for c in range(C):
                    dw[d0 + b * s2 + c * s3] = acc[b * C + c]
