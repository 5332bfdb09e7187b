"""Softmax cross-entropy, numerically stable (max subtracted), mean over the batch."""
import numpy as np
from numba import prange

from ..._config import kernel


@kernel(fastmath=False)
def softmax_cross_entropy(dlogits, losses, logits, y):
    """losses[n] = -log softmax(logits[n])[y[n]]; dlogits = (softmax - onehot) / N.

    The 1/N of the batch mean enters here, once: parameter gradients are then plain sums over
    the examples of the batch, i.e. the mean of the per-example gradients.
    dlogits, logits: (N, K); losses: (N,) float64; y: (N,) int64 in [0, K).
    """
    N, K = logits.shape
    inv_n = 1.0 / N
    for n in prange(N):  # one example per iteration
        row = logits[n]
        m = row[0]
        for k in range(1, K):
            if row[k] > m:
                m = row[k]
        s = 0.0
        for k in range(K):
            s += np.exp(np.float64(row[k] - m))
        log_s = np.log(s)
        losses[n] = log_s - np.float64(row[y[n]] - m)
        d = dlogits[n]
        for k in range(K):
            p = np.exp(np.float64(row[k] - m) - log_s)
            if k == y[n]:
                p -= 1.0
            d[k] = np.float32(p * inv_n)


@kernel(fastmath=False)
def softmax(out, logits):
    """Row-wise softmax. out, logits: (N, K)."""
    N, K = logits.shape
    for n in prange(N):  # one example per iteration
        row = logits[n]
        m = row[0]
        for k in range(1, K):
            if row[k] > m:
                m = row[k]
        s = 0.0
        for k in range(K):
            s += np.exp(np.float64(row[k] - m))
        for k in range(K):
            out[n, k] = np.float32(np.exp(np.float64(row[k] - m)) / s)
