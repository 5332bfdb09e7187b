"""Inverted dropout with masks drawn by the kernel itself from a counter-based generator.

Each value's uniform draw is a pure function of (seed, draw number, the value's index in the whole
batch): Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
generator of cuRAND and of PyTorch's CUDA dropout), keyed by the 64-bit seed, on the counter
(group low, group high, draw low, draw high) where a group holds four consecutive values (one word each). So
the CPU and CUDA kernels draw the same masks, at any thread count, without the host: the state is a
(4,) uint64 array (seed, draws made, index offset, unused) that lives with the layer's buffers.
The offset is the index of this process's first value in the whole batch (data parallelism).

Value i is kept when the top 24 bits of its word are >= ``threshold`` (ceil(p * 2**24)), so it
is dropped with probability threshold / 2**24 (p within 2**-24). Every product is of two 32-bit
numbers in 64-bit arithmetic, so nothing overflows (the CUDA simulator's numpy scalars stay quiet).
"""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks

_GROUPS = 1024  # groups of four values per parallel block

_LO = np.uint64(0xFFFFFFFF)
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_S32 = np.uint64(32)


@kernel(inline=True)
def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1): four 32-bit words (uint32).
    All arguments below 2**32. Each product is of two 32-bit words widened to 64 bits, which a
    loop over counters vectorises (one vpmuludq a lane: 7x faster than products of uint64 words,
    which it does not). kernels/cuda/dropout.py compiles the same Python for the GPU."""
    c0, c1, c2, c3 = np.uint32(c0), np.uint32(c1), np.uint32(c2), np.uint32(c3)
    k0, k1 = np.uint32(k0), np.uint32(k1)
    for _ in range(10):
        p0 = np.uint64(c0) * _M0
        p1 = np.uint64(c2) * _M1
        c0, c1, c2, c3 = (np.uint32(p1 >> _S32) ^ c1 ^ k0, np.uint32(p1 & _LO),
                          np.uint32(p0 >> _S32) ^ c3 ^ k1, np.uint32(p0 & _LO))
        k0 = np.uint32((np.uint64(k0) + _W0) & _LO)
        k1 = np.uint32((np.uint64(k1) + _W1) & _LO)
    return np.uint32(c0), np.uint32(c1), np.uint32(c2), np.uint32(c3)


@kernel(export=True)
def dropout_forward(y, mask, x, state, threshold, scale):
    """y = x * mask with mask = scale where value i is kept, else 0 (see the module docstring);
    all (M,) flat float32. ``state``: (4,) uint64 (seed, draw, offset, 0), read only (the draw
    number is advanced by ``dropout_advance``). threshold 0 keeps everything (inference, p = 0)
    without drawing."""
    M = x.shape[0]
    if threshold == 0:
        parallel_blocks((M + 4 * _GROUPS - 1) // (4 * _GROUPS), dropout_keep_part, (y, mask, x, scale))
        return
    off = state[2]
    first, n_groups = group_span(off, M)
    args = (y, mask, x, state, threshold, scale)
    parallel_blocks((n_groups + _GROUPS - 1) // _GROUPS, dropout_forward_part, args)


@kernel(inline=True)
def group_span(off, M):
    """The groups of four values that a process's M values from global offset ``off`` touch: the
    first group and their count (the forward's block count and each block's range both use it)."""
    first = off >> np.uint64(2)  # the group of this process's first value
    return first, np.int64(((off + np.uint64(M) + np.uint64(3)) >> np.uint64(2)) - first)


@kernel(float_division=True)
def dropout_keep_part(blk, y, mask, x, scale):
    """Part ``blk`` of dropout_forward when it keeps everything: mask = scale, y = x * scale."""
    M = x.shape[0]
    lo = blk * 4 * _GROUPS
    hi = min(M, lo + 4 * _GROUPS)
    ys, xs, ms = y[lo:hi], x[lo:hi], mask[lo:hi]
    one = np.float32(scale)
    for i in range(hi - lo):
        ms[i] = one
        ys[i] = xs[i] * one


@kernel(float_division=True)
def dropout_forward_part(blk, y, mask, x, state, threshold, scale):
    """Part ``blk`` of dropout_forward: one iteration of its parallel loop. The block's words first,
    group by group in a loop without branches (it vectorises), then the masks from them."""
    M = x.shape[0]
    k0, k1 = state[0] & _LO, state[0] >> _S32
    d0, d1 = state[1] & _LO, state[1] >> _S32
    off = state[2]
    t = np.uint32(threshold)
    zero, keep = np.float32(0.0), np.float32(scale)
    first, n_groups = group_span(off, M)
    g_lo = blk * _GROUPS
    G = min(n_groups, g_lo + _GROUPS) - g_lo
    words = np.empty(4 * G, np.uint32)
    for g in range(G):
        group = first + np.uint64(g_lo + g)
        w0, w1, w2, w3 = philox4x32(group & _LO, group >> _S32, d0, d1, k0, k1)
        words[4 * g], words[4 * g + 1], words[4 * g + 2], words[4 * g + 3] = w0, w1, w2, w3
    base = np.int64((first + np.uint64(g_lo)) << np.uint64(2)) - np.int64(off)  # local index of words[0]
    lo, hi = max(np.int64(0), base), min(np.int64(M), base + 4 * G)
    ws, ms, ys, xs = words[lo - base:hi - base], mask[lo:hi], y[lo:hi], x[lo:hi]
    for i in range(hi - lo):
        m = keep if (ws[i] >> np.uint32(8)) >= t else zero
        ms[i] = m
        ys[i] = xs[i] * m


@kernel(export=True)
def dropout_advance(state):
    """The next draw: state[1] += 1 (after a training forward's ``dropout_forward``)."""
    state[1] += np.uint64(1)


@kernel(export=True)
def dropout_backward(dx, dy, mask):
    """dx = dy * mask. (M,) flat."""
    M = dy.shape[0]
    args = (dx, dy, mask)
    parallel_blocks((M + 4 * _GROUPS - 1) // (4 * _GROUPS), dropout_backward_part, args)


@kernel(float_division=True)
def dropout_backward_part(blk, dx, dy, mask):
    """Part ``blk`` of dropout_backward: one iteration of its parallel loop."""
    M = dy.shape[0]
    lo = blk * 4 * _GROUPS
    hi = min(M, lo + 4 * _GROUPS)
    dxs, dys, ms = dx[lo:hi], dy[lo:hi], mask[lo:hi]
    for i in range(hi - lo):
        dxs[i] = dys[i] * ms[i]
