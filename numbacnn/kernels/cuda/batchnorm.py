"""Batch normalisation on the GPU, as the CPU kernels: one block per channel; its threads sum
strided slices in float64 and a fixed tree adds them (the same order every run)."""
import math

from numba import cuda, float32, float64, int64, uint32

from ...runtime.config import declare
from ._launch import REDUCE_THREADS as _T
from ._launch import block_sum as _block_sum
from ._launch import grid, on


@cuda.jit(device=True)
def _n(j, S):
    """The example of flat index j = n S + i (a 32-bit division: j < N S, well below 2**32)."""
    return int64(uint32(j) // uint32(S))


@cuda.jit(device=True)
def _i(j, S):
    """The position i of flat index j = n S + i."""
    return int64(uint32(j) % uint32(S))


@cuda.jit
def _forward_train(y, mean, invstd, running_mean, running_var, num_batches, x, weight, bias, eps,
                   momentum, relu):
    N, C, S = x.shape
    M = N * S
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    buf = cuda.shared.array(_T, float64)
    s = 0.0
    for j in range(t, M, _T):
        s += x[_n(j, S), c, _i(j, S)]
    mu = _block_sum(buf, s) / M
    s = 0.0
    for j in range(t, M, _T):
        d = x[_n(j, S), c, _i(j, S)] - mu
        s += d * d
    var = _block_sum(buf, s) / M
    inv = 1.0 / math.sqrt(var + eps)
    if t == 0:
        mean[c] = mu
        invstd[c] = inv
        running_mean[c] = (1.0 - momentum) * running_mean[c] + momentum * mu
        running_var[c] = (1.0 - momentum) * running_var[c] + momentum * var * M / (M - 1)
        if c == 0:
            num_batches[0] += 1
    a = weight[c] * inv
    b = bias[c] - mu * a
    for j in range(t, M, _T):
        v = a * x[_n(j, S), c, _i(j, S)] + b
        y[_n(j, S), c, _i(j, S)] = 0.0 if relu and v < 0 else v


@cuda.jit
def _forward_eval(y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu):
    N, C, S = x.shape
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    inv = 1.0 / math.sqrt(running_var[c] + eps)
    if t == 0:
        mean[c] = running_mean[c]
        invstd[c] = inv
    a = weight[c] * inv
    b = bias[c] - running_mean[c] * a
    for j in range(t, N * S, _T):
        v = a * x[_n(j, S), c, _i(j, S)] + b
        y[_n(j, S), c, _i(j, S)] = 0.0 if relu and v < 0 else v


@cuda.jit
def _backward(dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats, need_dx):
    N, C, S = x.shape
    M = N * S
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    buf = cuda.shared.array(_T, float64)
    mu = mean[c]
    s, sx = 0.0, 0.0
    for j in range(t, M, _T):
        n, i = _n(j, S), _i(j, S)
        g = 0.0 if relu and not y[n, c, i] > 0 else dy[n, c, i]
        s += g
        sx += g * (x[n, c, i] - mu)
    g_sum = _block_sum(buf, s)
    gx_sum = _block_sum(buf, sx)
    inv = invstd[c]
    if t == 0:
        dbias[c] = g_sum
        dweight[c] = gx_sum * inv
    if not need_dx:
        return
    a = weight[c] * inv
    b1 = g_sum / M if batch_stats else 0.0
    b2 = inv * inv * gx_sum / M if batch_stats else 0.0
    for j in range(t, M, _T):
        n, i = _n(j, S), _i(j, S)
        g = 0.0 if relu and not y[n, c, i] > 0 else dy[n, c, i]
        dx[n, c, i] = a * (g - b1 - (x[n, c, i] - mu) * b2)


@declare
def batchnorm_forward_train(y, mean, invstd, running_mean, running_var, num_batches, x, weight, bias,
                            eps, momentum, relu):
    _forward_train[on(x.shape[1], _T)](y, mean, invstd, running_mean, running_var, num_batches, x, weight,
                                   bias, eps, momentum, relu)


@declare
def batchnorm_forward_eval(y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu):
    _forward_eval[on(x.shape[1], _T)](y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu)


@declare
def batchnorm_backward(dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats, need_dx):
    _backward[on(x.shape[1], _T)](dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats,
                              need_dx)


@cuda.jit
def _fold(wf, bf, w, b, weight, bias, running_mean, running_var, eps):
    Co, K = w.shape
    t = cuda.grid(1)
    if t >= Co * K:
        return
    c, k = t // K, t % K
    inv = 1.0 / math.sqrt(float(running_var[c]) + eps)
    a = float32(weight[c] * inv)
    wf[c, k] = a * w[c, k]
    if k == 0:
        bf[c] = a * b[c] + float32(bias[c] - running_mean[c] * weight[c] * inv)


@declare
def batchnorm_fold(wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen, version):
    """The CPU kernel's fold of a convolution and an evaluation-mode BatchNorm: one thread per weight.
    It keeps no record (seen, version: empty, unused) and folds on every call."""
    _fold[grid(w.size)](wf, bf, w, b, weight, bias, running_mean, running_var, eps)
