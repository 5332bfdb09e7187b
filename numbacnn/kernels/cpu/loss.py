"""Softmax cross-entropy, numerically stable (max subtracted), mean over the batch."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks


@kernel(fastmath=False, inline=True)
def row_max_and_exp_sum(row):
    """The stable softmax's two reductions of a row: its maximum m and sum_k exp(row[k] - m) in float64."""
    m = row[0]
    for k in range(1, row.shape[0]):
        if row[k] > m:
            m = row[k]
    s = 0.0
    for k in range(row.shape[0]):
        s += np.exp(np.float64(row[k] - m))
    return m, s


@kernel(fastmath=False, export=True)
def softmax_cross_entropy(dlogits, losses, logits, y, smoothing):
    """losses[n] = -sum_k t[n, k] log softmax(logits[n])[k] with the target t = (1 - smoothing) *
    onehot(y[n]) + smoothing / K (``torch.nn.functional.cross_entropy(label_smoothing=)``);
    dlogits = (softmax - t) / N.

    The 1/N of the batch mean enters here, once: parameter gradients are then plain sums over
    the examples of the batch, i.e. the mean of the per-example gradients.
    dlogits, logits: (N, K); losses: (N,) float64; y: (N,) int64 in [0, K); smoothing in [0, 1).
    """
    N, K = logits.shape
    # one example per iteration
    args = (dlogits, losses, logits, y, smoothing)
    parallel_blocks(N, softmax_cross_entropy_part, args)


@kernel(fastmath=False, float_division=True)
def softmax_cross_entropy_part(n, dlogits, losses, logits, y, smoothing):
    """Part ``n`` of softmax_cross_entropy: one iteration of its parallel loop."""
    N, K = logits.shape
    inv_n = 1.0 / N
    uniform = smoothing / K
    row = logits[n]
    m, s = row_max_and_exp_sum(row)
    log_s = np.log(s)
    loss = (1.0 - smoothing) * (log_s - np.float64(row[y[n]] - m))
    if smoothing != 0.0:
        for k in range(K):
            loss += uniform * (log_s - np.float64(row[k] - m))
    losses[n] = loss
    d = dlogits[n]
    for k in range(K):
        p = np.exp(np.float64(row[k] - m) - log_s) - uniform
        if k == y[n]:
            p -= 1.0 - smoothing
        d[k] = np.float32(p * inv_n)


@kernel(fastmath=False, export=True)
def softmax(out, logits):
    """Row-wise softmax. out, logits: (N, K)."""
    N, K = logits.shape
    # one example per iteration
    args = (out, logits)
    parallel_blocks(N, softmax_part, args)


@kernel(fastmath=False, float_division=True)
def softmax_part(n, out, logits):
    """Part ``n`` of softmax: one iteration of its parallel loop."""
    N, K = logits.shape
    row = logits[n]
    m, s = row_max_and_exp_sum(row)
    for k in range(K):
        out[n, k] = np.float32(np.exp(np.float64(row[k] - m)) / s)


@kernel(fastmath=False, float_division=True, export=True)
def regression_loss(dout, losses, out, target, delta):
    """Regression losses, as torch's with reduction "mean" over every output of the batch:
    losses[n] = (1 / K) sum_k l(out[n, k] - target[n, k]) with l(r) = r^2 (``delta`` 0: MSE) or
    Huber's r^2 / 2 for |r| <= delta and delta (|r| - delta / 2) beyond; dout = l'(r) / (N K), so
    that parameter gradients are plain sums over the examples. Serial (K is a handful of targets).
    dout, out, target: (N, K) float32; losses: (N,) float64; delta >= 0."""
    N, K = out.shape
    scale = 1.0 / (N * K)
    for n in range(N):
        s = 0.0
        for k in range(K):
            r = np.float64(out[n, k]) - np.float64(target[n, k])
            if delta == 0.0:
                s += r * r
                g = 2.0 * r
            elif abs(r) <= delta:
                s += 0.5 * r * r
                g = r
            else:
                s += delta * (abs(r) - 0.5 * delta)
                g = delta if r > 0 else -delta
            dout[n, k] = np.float32(g * scale)
        losses[n] = s / K


@kernel(fastmath=False, export=True)
def loss_stats(stats, losses):
    """stats[0] = the mean of losses (summed in order), stats[1] = 0: a regression step's summary."""
    total = 0.0
    for i in range(losses.shape[0]):
        total += losses[i]
    stats[0] = total / losses.shape[0]
    stats[1] = 0.0
