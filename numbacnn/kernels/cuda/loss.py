"""Softmax cross-entropy on the GPU: one thread per example, max subtracted for stability."""
import math

from numba import cuda

from ._launch import grid


@cuda.jit
def _sce(dlogits, losses, logits, y):
    N, K = logits.shape
    n = cuda.grid(1)
    if n >= N:
        return
    m = logits[n, 0]
    for k in range(1, K):
        if logits[n, k] > m:
            m = logits[n, k]
    s = 0.0
    for k in range(K):
        s += math.exp(logits[n, k] - m)
    log_s = math.log(s)
    losses[n] = log_s - (logits[n, y[n]] - m)
    for k in range(K):
        p = math.exp(logits[n, k] - m - log_s)
        if k == y[n]:
            p -= 1.0
        dlogits[n, k] = p / N


def softmax_cross_entropy(dlogits, losses, logits, y):
    """As the CPU kernel: per-example losses and the gradient of the batch mean."""
    _sce[grid(logits.shape[0])](dlogits, losses, logits, y)
