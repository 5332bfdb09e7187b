"""Launch helpers for the CUDA kernels: launch configurations on the package's launch stream, 1-D
grids of one thread per output element, block reductions, zero fills."""
import functools
import math

from numba import config, cuda, int64, uint32

THREADS = 128
# threads of a block that reduces (a power of two: the tree halves it); the simulator runs each thread
# as a Python thread, so it gets narrow blocks (the same code and reduction tree, fewer leaves)
REDUCE_THREADS = 8 if config.ENABLE_CUDASIM else 512  # type: ignore[attr-defined]


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
    """Output positions o in [lo, hi) whose window [o*S - P, o*S - P + K) contains input i (the
    divisions of non-negative values in 32 bits)."""
    lo = 0 if i + P < K else int64(uint32(i + P - K) // uint32(S)) + 1
    return lo, min(n_out, int64(uint32(i + P) // uint32(S)) + 1)


@functools.cache
def stream():
    """The stream every kernel of this package launches on: the calling thread's per-thread default
    stream. Unlike the legacy default stream it can be captured into a CUDA graph
    (backend/cuda_graph.py), and like it, it is ordered with numba's copies (which run on the legacy
    default stream: the two synchronise with each other). 0 (the default) under the simulator."""
    return 0 if config.ENABLE_CUDASIM else cuda.per_thread_default_stream()  # type: ignore[attr-defined]


def on(blocks, threads):
    """The launch configuration ``kernel[on(blocks, threads)]``: on the launch stream."""
    return blocks, threads, stream()


def grid(n: int):
    """The launch configuration of a 1-D grid covering n elements."""
    return on(max(1, math.ceil(n / THREADS)), THREADS)


@cuda.jit
def _zero(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = 0.0


def zero_fill(a) -> None:
    """Zeros into the contiguous device array a (a frozen weight's gradient)."""
    _zero[grid(a.size)](a.reshape(a.size))


@cuda.jit(device=True)
def block_sum(buf, v):
    """The sum over the block's REDUCE_THREADS threads of v (each thread's own value), in a fixed
    tree order; buf: a shared array of REDUCE_THREADS elements."""
    t = cuda.threadIdx.x
    buf[t] = v
    cuda.syncthreads()
    half = REDUCE_THREADS // 2
    while half > 0:
        if t < half:
            buf[t] += buf[t + half]
        cuda.syncthreads()
        half //= 2
    total = buf[0]
    cuda.syncthreads()
    return total
