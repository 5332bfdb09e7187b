"""Direct 2-D convolution for narrow layers (few channels), where im2col GEMMs are too small for
BLAS to be efficient: stride 1, no padding along W; 5-wide kernels have their taps unrolled (other
widths take a plain tap loop: each unrolled width costs about a second of cold compile time)."""
import numpy as np
from numba import prange

from ..._config import kernel


@kernel()
def conv2d_forward_direct(out, x, w, b, PH, relu):
    """out = conv(x, w) + b (max(., 0) when relu), stride 1, padding PH rows, no column padding.

    Each kernel row is applied to a whole output row in one pass (taps unrolled when KW == 5), so the
    inner loop is a vectorisable sum of KW products. out: (N, Co, OH, OW); x: (N, Ci, H, W);
    w: (Co, Ci, KH, KW); b: (Co,).
    """
    N, Ci, H, W = x.shape
    Co, _, KH, KW = w.shape
    OH, OW = out.shape[2], out.shape[3]
    zero = np.float32(0.0)
    for p in prange(N * Co):  # one output plane per iteration
        n = p // Co
        co = p % Co
        for oy in range(OH):
            o = out[n, co, oy]
            for ox in range(OW):
                o[ox] = b[co]
            for ci in range(Ci):
                for ky in range(KH):
                    iy = oy + ky - PH
                    if iy < 0 or iy >= H:
                        continue
                    r = x[n, ci, iy]
                    k = w[co, ci, ky]
                    if KW == 5:
                        w0, w1, w2, w3, w4 = k[0], k[1], k[2], k[3], k[4]
                        for ox in range(OW):
                            o[ox] += (w0 * r[ox] + w1 * r[ox + 1] + w2 * r[ox + 2] + w3 * r[ox + 3]
                                      + w4 * r[ox + 4])
                    else:
                        for kx in range(KW):
                            wv = k[kx]
                            for ox in range(OW):
                                o[ox] += wv * r[ox + kx]
            if relu:
                for ox in range(OW):
                    if not o[ox] > zero:
                        o[ox] = zero


@kernel()
def conv2d_backward_direct(dw_parts, db_parts, g_tmp, dout, x, y, PH, chunk, relu):
    """Weight and bias gradients of conv2d_forward_direct (no input gradient: used for first layers).

    dw[co, ci, ky, kx] = sum over the chunk's examples and output positions of
    g[n, co, oy, ox] * x[n, ci, oy + ky - PH, ox + kx], as row-by-row dot products; g is dout
    masked by the fused ReLU. Chunk c writes dw_parts[c] (n_chunks, Co, Ci, KH, KW),
    db_parts[c] (n_chunks, Co) and its workspace g_tmp[c] (n_chunks, Co, OH, OW).
    """
    N, Ci, H, W = x.shape
    Co, KH, KW = dw_parts.shape[1], dw_parts.shape[3], dw_parts.shape[4]
    OH, OW = dout.shape[2], dout.shape[3]
    zero = np.float32(0.0)
    for c in prange((N + chunk - 1) // chunk):  # each chunk writes its own parts and workspace
        dw = dw_parts[c]
        db = db_parts[c]
        g = g_tmp[c]
        # explicit loops, not array expressions: inside prange those become nested parallel
        # loops that cost seconds of compile time
        for co in range(Co):
            db[co] = zero
            for ci in range(Ci):
                for ky in range(KH):
                    for kx in range(KW):
                        dw[co, ci, ky, kx] = zero
        for n in range(c * chunk, min(N, (c + 1) * chunk)):
            for co in range(Co):
                for oy in range(OH):
                    src = dout[n, co, oy]
                    dst = g[co, oy]
                    yr = y[n, co, oy]
                    for ox in range(OW):
                        v = src[ox] if (not relu or yr[ox] > zero) else zero
                        dst[ox] = v
                        db[co] += v
                for ci in range(Ci):
                    for ky in range(KH):
                        for oy in range(OH):
                            iy = oy + ky - PH
                            if iy < 0 or iy >= H:
                                continue
                            gr = g[co, oy]
                            r = x[n, ci, iy]
                            d = dw[co, ci, ky]
                            if KW == 5:  # five dot products in one pass over the gradient row
                                s0 = s1 = s2 = s3 = s4 = zero
                                for ox in range(OW):
                                    gv = gr[ox]
                                    s0 += gv * r[ox]
                                    s1 += gv * r[ox + 1]
                                    s2 += gv * r[ox + 2]
                                    s3 += gv * r[ox + 3]
                                    s4 += gv * r[ox + 4]
                                d[0] += s0
                                d[1] += s1
                                d[2] += s2
                                d[3] += s3
                                d[4] += s4
                            else:
                                for kx in range(KW):
                                    s = zero
                                    for ox in range(OW):
                                        s += gr[ox] * r[ox + kx]
                                    d[kx] += s
