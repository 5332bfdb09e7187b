"""Grouped (depthwise), dilated and unevenly padded 2-D convolutions on the GPU, one thread per
output element, gradients by gather (no atomics: deterministic), as kernels/cpu/conv2d_grouped.py:
the same arguments and meanings, the weight gradient written whole (no parts)."""
from numba import cuda

from ...runtime.config import declare
from ._launch import grid, unravel4, zero_fill
from .conv2d_gather import bias_gradient


@cuda.jit
def _forward(y, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu):
    N, Co, OH, OW = y.shape
    H, W = x.shape[2], x.shape[3]
    cig, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    t = cuda.grid(1)
    if t >= N * Co * OH * OW:
        return
    n, co, oy, ox = unravel4(t, Co, OH, OW)
    c0 = (co // (Co // groups)) * cig
    s = b[co]
    for c in range(cig):
        for ky in range(KH):
            iy = oy * SH - PT + ky * DH
            if 0 <= iy < H:
                for kx in range(KW):
                    ix = ox * SW - PL + kx * DW
                    if 0 <= ix < W:
                        s += w[co, c, ky, kx] * x[n, c0 + c, iy, ix]
    if relu and s < 0:
        s = 0.0
    y[n, co, oy, ox] = s


@cuda.jit
def _mask(g, dy, y):
    N, Co, OH, OW = g.shape
    t = cuda.grid(1)
    if t >= N * Co * OH * OW:
        return
    n, co, oy, ox = unravel4(t, Co, OH, OW)
    g[n, co, oy, ox] = dy[n, co, oy, ox] if y[n, co, oy, ox] > 0 else 0.0


@cuda.jit
def _dx(dx, g, w, SH, SW, DH, DW, PT, PL, groups):
    N, Ci, H, W = dx.shape
    Co, OH, OW = g.shape[1], g.shape[2], g.shape[3]
    cig, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    t = cuda.grid(1)
    if t >= N * Ci * H * W:
        return
    n, ci, iy, ix = unravel4(t, Ci, H, W)
    cog = Co // groups
    co0 = (ci // cig) * cog
    c = ci % cig
    s = 0.0
    for ky in range(KH):
        ny = iy + PT - ky * DH  # = oy * SH
        if ny >= 0 and ny % SH == 0 and ny // SH < OH:
            oy = ny // SH
            for kx in range(KW):
                nx = ix + PL - kx * DW
                if nx >= 0 and nx % SW == 0 and nx // SW < OW:
                    ox = nx // SW
                    for co in range(co0, co0 + cog):
                        s += g[n, co, oy, ox] * w[co, c, ky, kx]
    dx[n, ci, iy, ix] = s


@cuda.jit
def _dw(dw, g, x, SH, SW, DH, DW, PT, PL, groups):
    Co, cig, KH, KW = dw.shape
    N, OH, OW = g.shape[0], g.shape[2], g.shape[3]
    H, W = x.shape[2], x.shape[3]
    t = cuda.grid(1)
    if t >= Co * cig * KH * KW:
        return
    co, c, ky, kx = unravel4(t, cig, KH, KW)
    ci = (co // (Co // groups)) * cig + c
    s = 0.0
    for n in range(N):
        for oy in range(OH):
            iy = oy * SH - PT + ky * DH
            if 0 <= iy < H:
                for ox in range(OW):
                    ix = ox * SW - PL + kx * DW
                    if 0 <= ix < W:
                        s += g[n, co, oy, ox] * x[n, ci, iy, ix]
    dw[co, c, ky, kx] = s


@declare
def conv2d_forward_grouped(y, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu):
    """As the CPU kernel of the same name."""
    _forward[grid(y.size)](y, x, w, b, SH, SW, DH, DW, PT, PL, groups, relu)


@declare
def conv2d_backward_grouped(dx, dw, db, g, dy, x, w, y, SH, SW, DH, DW, PT, PL, groups, need_dx, need_dw,
                            relu):
    """dx (when need_dx), dw (zeros unless need_dw) and db from dy; g (dy's shape) holds dy masked
    by the fused ReLU when ``relu``."""
    src = dy
    if relu:
        _mask[grid(g.size)](g, dy, y)
        src = g
    if need_dx:
        _dx[grid(dx.size)](dx, src, w, SH, SW, DH, DW, PT, PL, groups)
    if need_dw:
        _dw[grid(dw.size)](dw, src, x, SH, SW, DH, DW, PT, PL, groups)
    else:
        zero_fill(dw)
    bias_gradient[grid(db.size)](db, src)
