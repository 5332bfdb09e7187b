"""Optimizer updates over one flat parameter buffer, with torch.optim's exact formulas.

Each parallel block updates one block through slices, so that the inner loops index from 0:
indexing with a computed offset (blk * _BLOCK + i) kept them from vectorising (5-10x slower).

The state an update keeps (momentum, moment and square averages) is flushed to zero where it falls
below the smallest normal float32 (_TINY), as a CPU's flush-to-zero mode would: a parameter whose
gradient stays zero (a dead unit's weights, most of a batch-1 step's) decays its state into
subnormal numbers within about 800 steps, and x86 cores take a slow path on every operation that
reads or makes one (a lenet5 SGD update at batch 1: 85 us with a third of its momentum subnormal,
11 us without). The parameters themselves change by less than lr * _TINY for it. NaN is kept
(``x < _TINY`` is false for NaN), so divergence still shows."""
import math

import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks

_BLOCK = 8192
_TINY = np.float32(1.1754944e-38)  # the smallest normal float32


@kernel(inline=True)
def _flushed(x):
    """x, or 0 where |x| is below the smallest normal float32 (NaN stays NaN)."""
    return np.float32(0.0) if abs(x) < _TINY else x


@kernel(export=True)
def sgd_update(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """SGD with optional momentum/Nesterov and L2 weight decay added to the gradient (torch.optim.SGD).

    p, g, buf: (M,) float32; buf is the momentum buffer (unused when momentum == 0).
    """
    M = p.shape[0]
    # disjoint element ranges
    args = (p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, sgd_update_part, args)


@kernel(float_division=True)
def sgd_update_part(blk, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """Part ``blk`` of sgd_update: one iteration of its parallel loop."""
    M = p.shape[0]
    lr32 = np.float32(lr)
    mom = np.float32(momentum)
    damp = np.float32(1.0 - dampening)
    wd = np.float32(weight_decay)
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    ps, gs, bs = p[lo:hi], g[lo:hi], buf[lo:hi]
    if momentum == 0.0:
        for i in range(hi - lo):
            ps[i] -= lr32 * (gs[i] + wd * ps[i])
    else:
        for i in range(hi - lo):
            d = gs[i] + wd * ps[i]
            b = _flushed(d if first_step else mom * bs[i] + damp * d)
            bs[i] = b
            ps[i] -= lr32 * (d + mom * b if nesterov else b)


@kernel(export=True)
def rmsprop_update(p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum, centered):
    """RMSProp as torch.optim.RMSprop: eps outside the square root, optional momentum and centering.

    All arrays (M,) float32; grad_avg is used when centered, buf when momentum > 0.
    """
    M = p.shape[0]
    # disjoint element ranges
    args = (p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum, centered)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, rmsprop_update_part, args)


@kernel(float_division=True)
def rmsprop_update_part(blk, p, g, square_avg, grad_avg, buf, lr, alpha, eps, weight_decay, momentum,
                        centered):
    """Part ``blk`` of rmsprop_update: one iteration of its parallel loop."""
    M = p.shape[0]
    a = np.float32(alpha)
    one_a = np.float32(1.0 - alpha)
    e = np.float32(eps)
    lr32 = np.float32(lr)
    wd = np.float32(weight_decay)
    mom = np.float32(momentum)
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    ps, gs, sqs, gas, bs = p[lo:hi], g[lo:hi], square_avg[lo:hi], grad_avg[lo:hi], buf[lo:hi]
    for i in range(hi - lo):
        d = gs[i] + wd * ps[i]
        sq = _flushed(a * sqs[i] + one_a * d * d)
        sqs[i] = sq
        if centered:
            ga = _flushed(a * gas[i] + one_a * d)
            gas[i] = ga
            # (the variance flushed too: with the square average flushed, sq - ga * ga may fall
            # below zero by less than _TINY)
            avg = np.sqrt(_flushed(sq - ga * ga)) + e
        else:
            avg = np.sqrt(sq) + e
        if momentum > 0.0:
            b = _flushed(mom * bs[i] + d / avg)
            bs[i] = b
            ps[i] -= lr32 * b
        else:
            ps[i] -= lr32 * d / avg


@kernel(export=True)
def adam_update(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    """Adam with bias correction (torch.optim.Adam); weight decay added to the gradient (L2), or
    with ``decoupled`` the weights shrunk by lr * weight_decay first (torch.optim.AdamW). All
    arrays (M,) float32."""
    M = p.shape[0]
    # disjoint element ranges
    args = (p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, adam_update_part, args)


@kernel(float_division=True)
def adam_update_part(blk, p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    """Part ``blk`` of adam_update: one iteration of its parallel loop."""
    M = p.shape[0]
    b1 = np.float32(beta1)
    b2 = np.float32(beta2)
    wd = np.float32(0.0 if decoupled else weight_decay)
    shrink = np.float32(1.0 - lr * weight_decay if decoupled else 1.0)
    bc1 = 1.0 - beta1 ** step
    bc2_sqrt = math.sqrt(1.0 - beta2 ** step)
    step_size = np.float32(lr / bc1)
    inv_bc2_sqrt = np.float32(1.0 / bc2_sqrt)
    e = np.float32(eps)
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    ps, gs, ms, vs = p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
    for i in range(hi - lo):
        d = gs[i] + wd * ps[i]
        ps[i] *= shrink
        mi = _flushed(b1 * ms[i] + (np.float32(1.0) - b1) * d)
        vi = _flushed(b2 * vs[i] + (np.float32(1.0) - b2) * d * d)
        ms[i] = mi
        vs[i] = vi
        ps[i] -= step_size * mi / (np.sqrt(vi) * inv_bc2_sqrt + e)


@kernel(export=True)
def lookahead_sync(fast, slow, alpha):
    """Lookahead's synchronisation (Zhang et al., 2019): slow += alpha * (fast - slow), then
    fast = slow. fast, slow: (M,) float32."""
    M = fast.shape[0]
    # disjoint element ranges
    args = (fast, slow, alpha)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, lookahead_sync_part, args)


@kernel(float_division=True)
def lookahead_sync_part(blk, fast, slow, alpha):
    """Part ``blk`` of lookahead_sync: one iteration of its parallel loop."""
    M = fast.shape[0]
    a = np.float32(alpha)
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    fs, ss = fast[lo:hi], slow[lo:hi]
    for i in range(hi - lo):
        s = ss[i] + a * (fs[i] - ss[i])
        ss[i] = s
        fs[i] = s
