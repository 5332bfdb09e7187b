"""1x1 stride-1 convolutions (the pointwise halves of depthwise-separable blocks, MobileNetV2's
expansions and projections) as one GEMM an example: y[n] (Co, HW) = w (Co, Ci) @ x[n] (Ci, HW),
dx[n] = w.T @ dy[n], and the weight gradient of a part of the batch as its examples' dy[n] @ x[n].T
added in example order (the "pointwise" plan, backend/cpu_conv.py). GEMMs through ``blas.sgemm``,
single-threaded inside the parallel blocks: the same calls on any thread count, the same bits."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from .blas import sgemm


@kernel()
def conv2d_forward_pointwise_blocks(y, x, w, b, relu):
    return y.shape[0]


@kernel()
def conv2d_forward_pointwise_block(n, y, x, w, b, relu):
    """Example n of conv2d_forward_pointwise."""
    Co, HW = y.shape[1], y.shape[2]
    Ci = x.shape[1]
    yf, xf, wf = y.reshape(-1), x.reshape(-1), w.reshape(-1)
    sgemm(False, False, Co, HW, Ci, np.float32(1.0), wf, 0, Ci, xf, n * Ci * HW, HW, np.float32(0.0),
          yf, n * Co * HW, HW)
    for co in range(Co):
        row = y[n, co]
        bias = b[co]
        for j in range(HW):
            v = row[j] + bias
            row[j] = v if not (relu and v < np.float32(0.0)) else np.float32(0.0)


@kernel(export=True, team="blocks")
def conv2d_forward_pointwise(y, x, w, b, relu):
    """y = w @ x + b per example, optionally ReLU'd. y: (N, Co, HW); x: (N, Ci, HW); w: (Co, Ci);
    b: (Co,)."""
    # disjoint examples
    args = (y, x, w, b, relu)
    parallel_blocks(conv2d_forward_pointwise_blocks(*args), conv2d_forward_pointwise_block, args)


@kernel()
def _pointwise_dx_block(n, dx, g, dy, y, w, relu):
    """Example n: g[n] = dy[n] masked by the fused ReLU (when relu), dx[n] = w.T @ g[n] (when dx has
    the example: (N, Ci, HW); else (1, 1, 1) and only the mask is written)."""
    Co, HW = dy.shape[1], dy.shape[2]
    if relu:
        for co in range(Co):
            gs, ds, ys = g[n, co], dy[n, co], y[n, co]
            for j in range(HW):
                gs[j] = ds[j] if ys[j] > np.float32(0.0) else np.float32(0.0)
    if dx.shape[0] == dy.shape[0]:
        Ci = dx.shape[1]
        src = g if relu else dy
        sgemm(True, False, Ci, HW, Co, np.float32(1.0), w.reshape(-1), 0, Ci, src.reshape(-1), n * Co * HW,
              HW, np.float32(0.0), dx.reshape(-1), n * Ci * HW, HW)


@kernel()
def _pointwise_dw_block(p, dw_parts, db_parts, g, x, ones, need_dw):
    """Part p of the batch (examples [N p / P, N (p + 1) / P)): dw_parts[p] (Co, Ci) = the sum of
    g[n] @ x[n].T in example order (zeros unless need_dw), db_parts[p] (Co,) = that of g[n] @ ones
    (ones: (HW,) of 1.0)."""
    P = dw_parts.shape[0]
    N, Co, HW = g.shape
    Ci = x.shape[1]
    n0, n1 = N * p // P, N * (p + 1) // P
    part, bpart = dw_parts[p], db_parts[p]
    if not need_dw or n0 == n1:
        for j in range(part.shape[0]):
            part[j] = np.float32(0.0)
    if n0 == n1:
        for j in range(Co):
            bpart[j] = np.float32(0.0)
    gf = g.reshape(-1)
    for n in range(n0, n1):
        beta = np.float32(0.0) if n == n0 else np.float32(1.0)
        if need_dw:
            sgemm(False, True, Co, Ci, HW, np.float32(1.0), gf, n * Co * HW, HW, x.reshape(-1), n * Ci * HW,
                  HW, beta, dw_parts.reshape(-1), p * Co * Ci, Ci)
        sgemm(False, False, Co, 1, HW, np.float32(1.0), gf, n * Co * HW, HW, ones, 0, 1, beta,
              db_parts.reshape(-1), p * Co, 1)


@kernel(export=True)
def conv2d_backward_pointwise(dx, dw_parts, db_parts, g, ones, dy, x, w, y, need_dx, need_dw, relu):
    """The gradients of conv2d_forward_pointwise: dx (N, Ci, HW) when need_dx (else (1, 1, 1)),
    dw_parts (P, Co * Ci) and db_parts (P, Co) per part of the batch (summed after it: sum_parts).
    With ``relu``, g (N, Co, HW) receives dy masked by the forward's output y; else g is unread.
    ones: (HW,) of 1.0 (the bias gradient's GEMMs)."""
    if relu or need_dx:
        # disjoint examples
        parallel_blocks(dy.shape[0], _pointwise_dx_block, (dx, g, dy, y, w, relu))
    # disjoint parts of the batch
    parallel_blocks(dw_parts.shape[0], _pointwise_dw_block,
                    (dw_parts, db_parts, g if relu else dy, x, ones, need_dw))
