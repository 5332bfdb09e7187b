"""Launch helpers for the CUDA kernels: one thread per output element, 1-D grids."""
import math

from numba import cuda

THREADS = 128


@cuda.jit(device=True)
def unravel4(t, d1, d2, d3):
    """(i0, i1, i2, i3) of flat index t in a C-ordered (., d1, d2, d3) array."""
    return t // (d3 * d2 * d1), (t // (d3 * d2)) % d1, (t // d3) % d2, t % d3


@cuda.jit(device=True)
def window(o, S, P, K, size):
    """Input range [lo, hi) of output position o's window, clipped to the plane (padding excluded)."""
    return max(o * S - P, 0), min(o * S - P + K, size)


@cuda.jit(device=True)
def readers(i, P, K, S, n_out):
    """Output positions o in [lo, hi) whose window [o*S - P, o*S - P + K) contains input i."""
    return max(0, (i + P - K) // S + 1), min(n_out, (i + P) // S + 1)


def grid(n: int) -> tuple[int, int]:
    """(blocks, threads) covering n elements."""
    return max(1, math.ceil(n / THREADS)), THREADS
