"""Optimizer updates on flat device arrays, one thread per parameter (torch.optim formulas); the
kept state flushed to zero below the smallest normal float32, as on the CPU (kernels/cpu/optim.py)."""
import math

from numba import cuda

from ...runtime.config import declare
from ._launch import grid

_TINY = 1.1754944e-38  # the smallest normal float32


@cuda.jit(device=True, inline=True)
def _flushed(x):
    return 0.0 if abs(x) < _TINY else x


@cuda.jit
def _sgd(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    i = cuda.grid(1)
    if i >= p.size:
        return
    d = g[i] + weight_decay * p[i]
    if momentum != 0.0:
        b = _flushed(d if first_step else momentum * buf[i] + (1.0 - dampening) * d)
        buf[i] = b
        d = d + momentum * b if nesterov else b
    p[i] -= lr * d


@cuda.jit
def _rmsprop(p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum, centered):
    i = cuda.grid(1)
    if i >= p.size:
        return
    d = g[i] + weight_decay * p[i]
    sq = _flushed(alpha * square_avg[i] + (1.0 - alpha) * d * d)
    square_avg[i] = sq
    if centered:
        ga = _flushed(alpha * grad_avg[i] + (1.0 - alpha) * d)
        grad_avg[i] = ga
        avg = math.sqrt(_flushed(sq - ga * ga)) + eps
    else:
        avg = math.sqrt(sq) + eps
    if momentum > 0.0:
        b = _flushed(momentum * buf[i] + d / avg)
        buf[i] = b
        p[i] -= lr * b
    else:
        p[i] -= lr * d / avg


@cuda.jit
def _adam(p, g, m, v, step_size, beta1, beta2, eps, weight_decay, inv_bc2_sqrt, shrink):
    i = cuda.grid(1)
    if i >= p.size:
        return
    d = g[i] + weight_decay * p[i]
    p[i] *= shrink
    mi = _flushed(beta1 * m[i] + (1.0 - beta1) * d)
    vi = _flushed(beta2 * v[i] + (1.0 - beta2) * d * d)
    m[i] = mi
    v[i] = vi
    p[i] -= step_size * mi / (math.sqrt(vi) * inv_bc2_sqrt + eps)


@declare
def sgd_update(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    _sgd[grid(p.size)](p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step)


@declare
def rmsprop_update(p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum, centered):
    _rmsprop[grid(p.size)](p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum,
                           centered)


@declare
def adam_update(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    bc1 = 1.0 - beta1 ** step
    bc2_sqrt = math.sqrt(1.0 - beta2 ** step)
    shrink = 1.0 - lr * weight_decay if decoupled else 1.0
    _adam[grid(p.size)](p, g, m, v, lr / bc1, beta1, beta2, eps, 0.0 if decoupled else weight_decay,
                        1.0 / bc2_sqrt, shrink)


@cuda.jit
def _lookahead_sync(fast, slow, alpha):
    i = cuda.grid(1)
    if i < fast.size:
        s = slow[i] + alpha * (fast[i] - slow[i])
        slow[i] = s
        fast[i] = s


@declare
def lookahead_sync(fast, slow, alpha):
    """slow += alpha * (fast - slow); fast = slow (as the CPU kernel)."""
    _lookahead_sync[grid(fast.size)](fast, slow, alpha)
