"""Max pooling (argmax cache) and average pooling on the GPU, one thread per element.

The backward is a gather: each input element sums the gradients of the outputs whose window
contains it (max pooling: only those whose cached argmax is this element), so overlapping
windows accumulate without races or atomics. Same tie, padding and NaN rules as the CPU kernels.
The kernels see (N C, H, W) planes: blockIdx.x is the plane, the threads of blockIdx.y its
positions, so a thread divides once (32-bit) to find its row and column.
"""
import math

from numba import cuda, float32, int64, uint32

from ...runtime.config import declare
from ._launch import THREADS, grid, on, readers, window


def _planes(a):
    """a (N, C, H, W) as (N C, H, W)."""
    return a.reshape(a.shape[0] * a.shape[1], a.shape[2], a.shape[3])


def _plane_grid(a):
    """One block row per plane of a (N, C, H, W), threads over its H W positions."""
    return on((a.shape[0] * a.shape[1], math.ceil(a.shape[2] * a.shape[3] / THREADS)), THREADS)


@cuda.jit(device=True)
def _position(W):
    """(plane, row, column) of this thread, or row -1 past the plane's end."""
    q = cuda.blockIdx.x
    pos = uint32(cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x)
    Wu = uint32(W)
    r = pos // Wu
    return q, int64(r), int64(pos - r * Wu)


@cuda.jit
def _max_forward(out, argmax, x, KH, KW, SH, SW, PH, PW):
    _, OH, OW = out.shape
    H, W = x.shape[1], x.shape[2]
    q, oy, ox = _position(OW)
    if oy >= OH:
        return
    y_lo, y_hi = window(oy, SH, PH, KH, H)
    x_lo, x_hi = window(ox, SW, PW, KW, W)
    best = x[q, y_lo, x_lo]
    best_i = y_lo * W + x_lo
    for iy in range(y_lo, y_hi):
        for ix in range(x_lo, x_hi):
            v = x[q, iy, ix]
            if best == best and (v > best or v != v):
                best = v
                best_i = iy * W + ix
    out[q, oy, ox] = best
    argmax[q, oy, ox] = best_i


@cuda.jit
def _max_backward(dx, dout, argmax, KH, KW, SH, SW, PH, PW):
    _, H, W = dx.shape
    OH, OW = dout.shape[1], dout.shape[2]
    q, iy, ix = _position(W)
    if iy >= H:
        return
    me = iy * W + ix
    oy_lo, oy_hi = readers(iy, PH, KH, SH, OH)
    ox_lo, ox_hi = readers(ix, PW, KW, SW, OW)
    s = float32(0)
    for oy in range(oy_lo, oy_hi):
        for ox in range(ox_lo, ox_hi):
            if argmax[q, oy, ox] == me:
                s += dout[q, oy, ox]
    dx[q, iy, ix] = s


@cuda.jit
def _avg_forward(out, x, KH, KW, SH, SW, PH, PW):
    _, OH, OW = out.shape
    H, W = x.shape[1], x.shape[2]
    q, oy, ox = _position(OW)
    if oy >= OH:
        return
    y_lo, y_hi = window(oy, SH, PH, KH, H)
    x_lo, x_hi = window(ox, SW, PW, KW, W)
    s = float32(0)
    for iy in range(y_lo, y_hi):
        for ix in range(x_lo, x_hi):
            s += x[q, iy, ix]
    out[q, oy, ox] = s / float32(KH * KW)


@cuda.jit
def _avg_backward(dx, dout, KH, KW, SH, SW, PH, PW):
    _, H, W = dx.shape
    OH, OW = dout.shape[1], dout.shape[2]
    q, iy, ix = _position(W)
    if iy >= H:
        return
    oy_lo, oy_hi = readers(iy, PH, KH, SH, OH)
    ox_lo, ox_hi = readers(ix, PW, KW, SW, OW)
    s = float32(0)
    for oy in range(oy_lo, oy_hi):
        for ox in range(ox_lo, ox_hi):
            s += dout[q, oy, ox]
    dx[q, iy, ix] = s / float32(KH * KW)


@declare
def maxpool2d_forward(out, argmax, x, KH, KW, SH, SW, PH, PW):
    _max_forward[_plane_grid(out)](_planes(out), _planes(argmax), _planes(x), KH, KW, SH, SW, PH, PW)


@declare
def maxpool2d_backward(dx, dout, argmax, KH, KW, SH, SW, PH, PW):
    """As the CPU kernel; the window geometry is passed because the gather needs it."""
    _max_backward[_plane_grid(dx)](_planes(dx), _planes(dout), _planes(argmax), KH, KW, SH, SW, PH, PW)


@declare
def avgpool2d_forward(out, x, KH, KW, SH, SW, PH, PW):
    _avg_forward[_plane_grid(out)](_planes(out), _planes(x), KH, KW, SH, SW, PH, PW)


@declare
def avgpool2d_backward(dx, dout, KH, KW, SH, SW, PH, PW):
    _avg_backward[_plane_grid(dx)](_planes(dx), _planes(dout), KH, KW, SH, SW, PH, PW)


@cuda.jit
def _gap_forward(y, x):
    N, C, S = x.shape
    t = cuda.grid(1)
    if t >= N * C:
        return
    n, c = t // C, t % C
    s = 0.0
    for i in range(S):
        s += x[n, c, i]
    y[n, c] = s / S


@cuda.jit
def _gap_backward(dx, dy):
    """dx (N C, S) planes, dy (N C,)."""
    q = cuda.blockIdx.x
    i = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    if i < dx.shape[1]:
        dx[q, i] = dy[q] / dx.shape[1]


@declare
def global_avgpool2d_forward(y, x):
    """y (N, C) = the mean of each plane of x (N, C, S)."""
    _gap_forward[grid(y.size)](y, x)


@declare
def global_avgpool2d_backward(dx, dy):
    N, C, S = dx.shape
    _gap_backward[on((N * C, math.ceil(S / THREADS)), THREADS)](dx.reshape(N * C, S), dy.reshape(N * C))
