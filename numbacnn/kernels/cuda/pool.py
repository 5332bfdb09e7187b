"""Max pooling (argmax cache) and average pooling on the GPU, one thread per element.

The backward is a gather: each input element sums the gradients of the outputs whose window
contains it (max pooling: only those whose cached argmax is this element), so overlapping
windows accumulate without races or atomics. Same tie, padding and NaN rules as the CPU kernels.
"""

from numba import cuda

from ._launch import grid, readers, unravel4, window


@cuda.jit
def _max_forward(out, argmax, x, KH, KW, SH, SW, PH, PW):
    N, C, OH, OW = out.shape
    H, W = x.shape[2], x.shape[3]
    t = cuda.grid(1)
    if t >= N * C * OH * OW:
        return
    n, c, oy, ox = unravel4(t, C, OH, OW)
    y_lo, y_hi = window(oy, SH, PH, KH, H)
    x_lo, x_hi = window(ox, SW, PW, KW, W)
    best = x[n, c, y_lo, x_lo]
    best_i = y_lo * W + x_lo
    for iy in range(y_lo, y_hi):
        for ix in range(x_lo, x_hi):
            v = x[n, c, iy, ix]
            if best == best and (v > best or v != v):
                best = v
                best_i = iy * W + ix
    out[n, c, oy, ox] = best
    argmax[n, c, oy, ox] = best_i


@cuda.jit
def _max_backward(dx, dout, argmax, KH, KW, SH, SW, PH, PW):
    N, C, H, W = dx.shape
    OH, OW = dout.shape[2], dout.shape[3]
    t = cuda.grid(1)
    if t >= N * C * H * W:
        return
    n, c, iy, ix = unravel4(t, C, H, W)
    me = iy * W + ix
    oy_lo, oy_hi = readers(iy, PH, KH, SH, OH)
    ox_lo, ox_hi = readers(ix, PW, KW, SW, OW)
    s = 0.0
    for oy in range(oy_lo, oy_hi):
        for ox in range(ox_lo, ox_hi):
            if argmax[n, c, oy, ox] == me:
                s += dout[n, c, oy, ox]
    dx[n, c, iy, ix] = s


@cuda.jit
def _avg_forward(out, x, KH, KW, SH, SW, PH, PW):
    N, C, OH, OW = out.shape
    H, W = x.shape[2], x.shape[3]
    t = cuda.grid(1)
    if t >= N * C * OH * OW:
        return
    n, c, oy, ox = unravel4(t, C, OH, OW)
    y_lo, y_hi = window(oy, SH, PH, KH, H)
    x_lo, x_hi = window(ox, SW, PW, KW, W)
    s = 0.0
    for iy in range(y_lo, y_hi):
        for ix in range(x_lo, x_hi):
            s += x[n, c, iy, ix]
    out[n, c, oy, ox] = s / (KH * KW)


@cuda.jit
def _avg_backward(dx, dout, KH, KW, SH, SW, PH, PW):
    N, C, H, W = dx.shape
    OH, OW = dout.shape[2], dout.shape[3]
    t = cuda.grid(1)
    if t >= N * C * H * W:
        return
    n, c, iy, ix = unravel4(t, C, H, W)
    oy_lo, oy_hi = readers(iy, PH, KH, SH, OH)
    ox_lo, ox_hi = readers(ix, PW, KW, SW, OW)
    s = 0.0
    for oy in range(oy_lo, oy_hi):
        for ox in range(ox_lo, ox_hi):
            s += dout[n, c, oy, ox]
    dx[n, c, iy, ix] = s / (KH * KW)


def maxpool2d_forward(out, argmax, x, KH, KW, SH, SW, PH, PW):
    _max_forward[grid(out.size)](out, argmax, x, KH, KW, SH, SW, PH, PW)


def maxpool2d_backward(dx, dout, argmax, KH, KW, SH, SW, PH, PW):
    """As the CPU kernel; the window geometry is passed because the gather needs it."""
    _max_backward[grid(dx.size)](dx, dout, argmax, KH, KW, SH, SW, PH, PW)


def avgpool2d_forward(out, x, KH, KW, SH, SW, PH, PW):
    _avg_forward[grid(out.size)](out, x, KH, KW, SH, SW, PH, PW)


def avgpool2d_backward(dx, dout, KH, KW, SH, SW, PH, PW):
    _avg_backward[grid(dx.size)](dx, dout, KH, KW, SH, SW, PH, PW)




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
    N, C, S = dx.shape
    t = cuda.grid(1)
    if t >= N * C * S:
        return
    n, c, i = t // (C * S), (t // S) % C, t % S
    dx[n, c, i] = dy[n, c] / S


def global_avgpool2d_forward(y, x):
    """y (N, C) = the mean of each plane of x (N, C, S)."""
    _gap_forward[grid(y.size)](y, x)


def global_avgpool2d_backward(dx, dy):
    _gap_backward[grid(dx.size)](dx, dy)
