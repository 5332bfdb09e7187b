"""Small shared CPU kernels: chunk bounds and the fixed-order reduction of per-chunk gradients."""
from numba import prange

from ..._config import kernel


@kernel(parallel=False)
def n_chunks(n, chunk):
    return (n + chunk - 1) // chunk


@kernel()
def sum_chunks(out, parts):
    """out[...] = sum over c of parts[c, ...], added in chunk order (deterministic).

    out: (M,) flat view of a gradient; parts: (n_chunks, M).
    """
    M = out.shape[0]
    n_parts = parts.shape[0]
    block = 4096
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
