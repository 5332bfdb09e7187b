"""Softmax cross-entropy on the GPU: one thread per example, max subtracted for stability."""
import math

from numba import cuda, float64

from ...runtime.config import declare
from ._launch import REDUCE_THREADS as _T
from ._launch import block_sum as _block_sum
from ._launch import grid, on


@cuda.jit(device=True)
def _max_and_sum(logits, n):
    """Row n's largest logit m and the sum of exp(logit - m)."""
    m = logits[n, 0]
    for k in range(1, logits.shape[1]):
        if logits[n, k] > m:
            m = logits[n, k]
    s = 0.0
    for k in range(logits.shape[1]):
        s += math.exp(logits[n, k] - m)
    return m, s


@cuda.jit
def _sce(dlogits, losses, logits, y, smoothing):
    N, K = logits.shape
    n = cuda.grid(1)
    if n >= N:
        return
    m, s = _max_and_sum(logits, n)
    log_s = math.log(s)
    uniform = smoothing / K
    loss = (1.0 - smoothing) * (log_s - (logits[n, y[n]] - m))
    for k in range(K):
        loss += uniform * (log_s - (logits[n, k] - m))
    losses[n] = loss
    for k in range(K):
        p = math.exp(logits[n, k] - m - log_s) - uniform
        if k == y[n]:
            p -= 1.0 - smoothing
        dlogits[n, k] = p / N


@declare
def softmax_cross_entropy(dlogits, losses, logits, y, smoothing):
    """As the CPU kernel: per-example (label-smoothed) losses and the gradient of the batch mean."""
    _sce[grid(logits.shape[0])](dlogits, losses, logits, y, smoothing)


@cuda.jit
def _stats(out, losses, logits, y):
    N, K = logits.shape
    t = cuda.threadIdx.x
    buf = cuda.shared.array(_T, float64)
    total = 0.0
    correct = 0.0
    for i in range(t, N, _T):
        total += losses[i]
        best = 0
        for k in range(1, K):
            if logits[i, k] > logits[i, best]:
                best = k
        if best == y[i]:
            correct += 1.0
    total = _block_sum(buf, total)
    correct = _block_sum(buf, correct)
    if t == 0:
        out[0] = total / N
        out[1] = correct


@declare
def step_stats(out, losses, logits, y):
    """As the CPU kernel: out[0] the mean loss, out[1] the correct count (first largest logit at the
    label); one block, each thread a strided share of the examples, added in a fixed tree order."""
    _stats[on(1, _T)](out, losses, logits, y)


@cuda.jit
def _softmax(out, logits):
    N, K = logits.shape
    n = cuda.grid(1)
    if n >= N:
        return
    m, s = _max_and_sum(logits, n)
    for k in range(K):
        out[n, k] = math.exp(logits[n, k] - m) / s


@declare
def softmax(out, logits):
    """As the CPU kernel: row-wise softmax, one thread per example."""
    _softmax[grid(logits.shape[0])](out, logits)


@cuda.jit
def _regression(dout, losses, out, target, delta):
    N, K = out.shape
    n = cuda.grid(1)
    if n >= N:
        return
    s = 0.0
    for k in range(K):
        r = float64(out[n, k]) - float64(target[n, k])
        if delta == 0.0:
            s += r * r
            g = 2.0 * r
        elif abs(r) <= delta:
            s += 0.5 * r * r
            g = r
        else:
            s += delta * (abs(r) - 0.5 * delta)
            g = delta if r > 0 else -delta
        dout[n, k] = g / (N * K)
    losses[n] = s / K


@declare
def regression_loss(dout, losses, out, target, delta):
    """As the CPU kernel: per-example MSE (delta 0) or Huber losses and the gradient of their mean."""
    _regression[grid(out.shape[0])](dout, losses, out, target, delta)


@cuda.jit
def _loss_stats(stats, losses):
    if cuda.grid(1) == 0:
        total = 0.0
        for i in range(losses.shape[0]):
            total += losses[i]
        stats[0] = total / losses.shape[0]
        stats[1] = 0.0


@declare
def loss_stats(stats, losses):
    """As the CPU kernel: the mean loss in order, 0 correct."""
    _loss_stats[on(1, 1)](stats, losses)
