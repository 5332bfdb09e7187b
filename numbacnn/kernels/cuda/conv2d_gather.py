"""2-D convolution on the GPU (numba.cuda), "gather" form (one thread per output element).

Every thread computes one output element by gathering what it needs, so no two threads write the
same element and no atomics are used: dx gathers over the outputs that read an input, dw and db sum
over the batch inside one thread per weight element (a fixed order: deterministic).
"""
from numba import cuda

from ...runtime.config import declare
from ._launch import grid, unravel4, zero_fill


@cuda.jit
def _forward(out, x, w, b, SH, SW, PH, PW, relu):
    N, Co, OH, OW = out.shape
    Ci, H, W = x.shape[1], x.shape[2], x.shape[3]
    KH, KW = w.shape[2], w.shape[3]
    t = cuda.grid(1)
    if t >= N * Co * OH * OW:
        return
    n, co, oy, ox = unravel4(t, Co, OH, OW)
    s = b[co]
    for ci in range(Ci):
        for ky in range(KH):
            iy = oy * SH + ky - PH
            if 0 <= iy < H:
                for kx in range(KW):
                    ix = ox * SW + kx - PW
                    if 0 <= ix < W:
                        s += w[co, ci, ky, kx] * x[n, ci, iy, ix]
    if relu and s < 0:
        s = 0.0
    out[n, co, oy, ox] = s


@cuda.jit
def _grad_out(g, dout, y, relu):
    """g = dout masked by the fused ReLU (y > 0), elementwise over (N, Co, OH, OW)."""
    N, Co, OH, OW = g.shape
    t = cuda.grid(1)
    if t >= N * Co * OH * OW:
        return
    n, co, oy, ox = unravel4(t, Co, OH, OW)
    v = dout[n, co, oy, ox]
    if relu and not y[n, co, oy, ox] > 0:
        v = 0.0
    g[n, co, oy, ox] = v


@cuda.jit
def _backward_dx(dx, g, w, SH, SW, PH, PW):
    N, Ci, H, W = dx.shape
    Co, OH, OW = g.shape[1], g.shape[2], g.shape[3]
    KH, KW = w.shape[2], w.shape[3]
    t = cuda.grid(1)
    if t >= N * Ci * H * W:
        return
    n, ci, iy, ix = unravel4(t, Ci, H, W)
    s = 0.0
    for ky in range(KH):
        ny = iy + PH - ky  # = oy * SH
        if ny >= 0 and ny % SH == 0 and ny // SH < OH:
            oy = ny // SH
            for kx in range(KW):
                nx = ix + PW - kx
                if nx >= 0 and nx % SW == 0 and nx // SW < OW:
                    ox = nx // SW
                    for co in range(Co):
                        s += g[n, co, oy, ox] * w[co, ci, ky, kx]
    dx[n, ci, iy, ix] = s


@cuda.jit
def _backward_dw(dw, g, x, SH, SW, PH, PW):
    Co, Ci, KH, KW = dw.shape
    N, OH, OW = g.shape[0], g.shape[2], g.shape[3]
    H, W = x.shape[2], x.shape[3]
    t = cuda.grid(1)
    if t >= Co * Ci * KH * KW:
        return
    co, ci, ky, kx = unravel4(t, Ci, KH, KW)
    s = 0.0
    for n in range(N):
        for oy in range(OH):
            iy = oy * SH + ky - PH
            if 0 <= iy < H:
                for ox in range(OW):
                    ix = ox * SW + kx - PW
                    if 0 <= ix < W:
                        s += g[n, co, oy, ox] * x[n, ci, iy, ix]
    dw[co, ci, ky, kx] = s


@cuda.jit
def bias_gradient(db, g):
    """db[co]: the sum of g (N, Co, OH, OW) over examples and positions, one thread a channel."""
    N, Co, OH, OW = g.shape
    co = cuda.grid(1)
    if co >= Co:
        return
    s = 0.0
    for n in range(N):
        for oy in range(OH):
            for ox in range(OW):
                s += g[n, co, oy, ox]
    db[co] = s


@declare
def conv2d_forward_gather(out, x, w, b, SH, SW, PH, PW, relu):
    """As the CPU conv2d_forward_gemm (no im2col cache: the backward reads x itself)."""
    _forward[grid(out.size)](out, x, w, b, SH, SW, PH, PW, relu)


@declare
def conv2d_backward_gather(dx, dw, db, g, dout, x, w, y, SH, SW, PH, PW, need_dx, need_dw, relu):
    """dx (when need_dx), dw (zeros unless need_dw), db from dout; g (same shape as dout) is a
    workspace for the ReLU-masked gradient."""
    _grad_out[grid(g.size)](g, dout, y, relu)
    if need_dx:
        _backward_dx[grid(dx.size)](dx, g, w, SH, SW, PH, PW)
    if need_dw:
        _backward_dw[grid(dw.size)](dw, g, x, SH, SW, PH, PW)
    else:
        zero_fill(dw)
    bias_gradient[grid(db.size)](db, g)
