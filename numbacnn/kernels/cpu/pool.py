"""Max pooling with an argmax cache, and average pooling (NCHW, float32).

Parallel over (n, c) planes, so every iteration writes a disjoint plane and overlapping windows
accumulate without races. Compiled without NaN-removing fast-math: NaN counts as the maximum.
"""
import numpy as np
from numba import prange

from ..._config import kernel


@kernel(fastmath=False)
def maxpool2d_forward(out, argmax, x, KH, KW, SH, SW, PH, PW):
    """out[n, c, oy, ox] = max of the window; argmax holds its flat index iy*W + ix in the plane.

    Ties go to the first maximum in row-major window order; padding never wins; the first NaN wins.
    out, argmax: (N, C, OH, OW); x: (N, C, H, W).
    """
    N, C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    for p in prange(N * C):  # one plane per iteration
        n = p // C
        c = p % C
        xp = x[n, c]
        for oy in range(OH):
            y_lo = max(oy * SH - PH, 0)
            y_hi = min(oy * SH - PH + KH, H)
            for ox in range(OW):
                x_lo = max(ox * SW - PW, 0)
                x_hi = min(ox * SW - PW + KW, W)
                best = xp[y_lo, x_lo]
                best_i = y_lo * W + x_lo
                for iy in range(y_lo, y_hi):
                    for ix in range(x_lo, x_hi):
                        v = xp[iy, ix]
                        if best == best and (v > best or v != v):
                            best = v
                            best_i = iy * W + ix
                out[n, c, oy, ox] = best
                argmax[n, c, oy, ox] = best_i


@kernel(fastmath=False)
def maxpool2d_backward(dx, dout, argmax):
    """dx[n, c].flat[argmax[n, c, o]] += dout[n, c, o]: each example's gradient to its own maximum.

    dx: (N, C, H, W), overwritten; dout, argmax: (N, C, OH, OW).
    """
    N, C, H, W = dx.shape
    OH, OW = dout.shape[2], dout.shape[3]
    for p in prange(N * C):  # one plane per iteration
        n = p // C
        c = p % C
        d = dx[n, c].reshape(H * W)
        d[:] = np.float32(0.0)
        a = argmax[n, c]
        g = dout[n, c]
        for oy in range(OH):
            for ox in range(OW):
                d[a[oy, ox]] += g[oy, ox]


@kernel()
def avgpool2d_forward(out, x, KH, KW, SH, SW, PH, PW):
    """Window mean with zero padding counted (PyTorch's count_include_pad=True).

    out: (N, C, OH, OW); x: (N, C, H, W).
    """
    N, C, H, W = x.shape
    OH, OW = out.shape[2], out.shape[3]
    scale = np.float32(1.0 / (KH * KW))
    for p in prange(N * C):  # one plane per iteration
        n = p // C
        c = p % C
        xp = x[n, c]
        for oy in range(OH):
            y_lo = max(oy * SH - PH, 0)
            y_hi = min(oy * SH - PH + KH, H)
            for ox in range(OW):
                x_lo = max(ox * SW - PW, 0)
                x_hi = min(ox * SW - PW + KW, W)
                s = np.float32(0.0)
                for iy in range(y_lo, y_hi):
                    for ix in range(x_lo, x_hi):
                        s += xp[iy, ix]
                out[n, c, oy, ox] = s * scale


@kernel()
def avgpool2d_backward(dx, dout, KH, KW, SH, SW, PH, PW):
    """Adjoint of avgpool2d_forward. dx: (N, C, H, W), overwritten; dout: (N, C, OH, OW)."""
    N, C, H, W = dx.shape
    OH, OW = dout.shape[2], dout.shape[3]
    scale = np.float32(1.0 / (KH * KW))
    for p in prange(N * C):  # one plane per iteration
        n = p // C
        c = p % C
        d = dx[n, c]
        d[:] = np.float32(0.0)
        for oy in range(OH):
            y_lo = max(oy * SH - PH, 0)
            y_hi = min(oy * SH - PH + KH, H)
            for ox in range(OW):
                x_lo = max(ox * SW - PW, 0)
                x_hi = min(ox * SW - PW + KW, W)
                g = dout[n, c, oy, ox] * scale
                for iy in range(y_lo, y_hi):
                    for ix in range(x_lo, x_hi):
                        d[iy, ix] += g
