"""Launch helpers for the CUDA kernels: one thread per output element, 1-D grids."""
import math

THREADS = 128


def grid(n: int) -> tuple[int, int]:
    """(blocks, threads) covering n elements."""
    return max(1, math.ceil(n / THREADS)), THREADS
