"""Batch normalisation of (N, C, S) float32 (S = H*W for BatchNorm2D, 1 for BatchNorm1D), forward in
training and evaluation mode and backward, optionally with the ReLU that follows applied in place.

One parallel block per channel sums that channel's values in float64 in one fixed order (per
example, then across examples), so the statistics do not depend on the thread count."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from ._util import unchanged_many


@kernel(export=True)
def batchnorm_forward_train(y, mean, invstd, running_mean, running_var, num_batches, x, weight, bias,
                            eps, momentum, relu):
    """Normalise with the batch statistics; update the running ones as ``torch.nn.BatchNorm2d``.

    y, x: (N, C, S); mean, invstd: (C,) float32, kept for the backward (biased variance);
    running_mean, running_var: (C,) float32, updated in place with ``momentum`` (the running
    variance takes the unbiased batch variance); num_batches: (1,) int64, incremented;
    weight, bias: (C,). ``relu``: y = max(., 0) as well. Needs N * S >= 2.
    """
    N, C, S = x.shape
    # one channel per iteration: disjoint outputs
    args = (y, mean, invstd, running_mean, running_var, num_batches, x, weight, bias, eps, momentum, relu)
    parallel_blocks(C, batchnorm_forward_train_part, args)
    num_batches[0] += 1


@kernel(float_division=True)
def batchnorm_forward_train_part(c, y, mean, invstd, running_mean, running_var, num_batches, x, weight, bias,
                                 eps, momentum, relu):
    """Part ``c`` of batchnorm_forward_train: one iteration of its parallel loop."""
    N, C, S = x.shape
    M = N * S
    total = 0.0
    for n in range(N):
        xs = x[n, c]
        part = 0.0
        for i in range(S):
            part += np.float64(xs[i])
        total += part
    mu = total / M
    sq = 0.0
    for n in range(N):
        xs = x[n, c]
        part = 0.0
        for i in range(S):
            d = np.float64(xs[i]) - mu
            part += d * d
        sq += part
    var = sq / M
    inv = 1.0 / np.sqrt(var + eps)
    mean[c] = np.float32(mu)
    invstd[c] = np.float32(inv)
    running_mean[c] = np.float32((1.0 - momentum) * running_mean[c] + momentum * mu)
    running_var[c] = np.float32((1.0 - momentum) * running_var[c] + momentum * var * M / (M - 1))
    a = np.float32(weight[c] * inv)
    b = np.float32(bias[c] - mu * weight[c] * inv)
    _affine(y, x, c, a, b, relu)


@kernel(export=True, team="blocks")
def batchnorm_forward_eval(y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu):
    """Normalise with the running statistics (evaluation mode). mean, invstd: (C,) float32, the
    statistics used, kept for an inference-mode backward. Shapes as in the training forward."""
    args = (y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu)
    parallel_blocks(batchnorm_forward_eval_blocks(*args), batchnorm_forward_eval_block, args)


@kernel()
def batchnorm_forward_eval_blocks(y, mean, invstd, x, running_mean, running_var, weight, bias, eps, relu):
    return x.shape[1]


@kernel()
def batchnorm_forward_eval_block(c, y, mean, invstd, x, running_mean, running_var, weight, bias, eps,
                                 relu):
    """Channel c of batchnorm_forward_eval."""
    inv = 1.0 / np.sqrt(np.float64(running_var[c]) + eps)
    mean[c] = running_mean[c]
    invstd[c] = np.float32(inv)
    a = np.float32(weight[c] * inv)
    b = np.float32(bias[c] - running_mean[c] * weight[c] * inv)
    _affine(y, x, c, a, b, relu)


@kernel()
def _affine(y, x, c, a, b, relu):
    """y[:, c] = a * x[:, c] + b, then max(., 0) when ``relu``."""
    zero = np.float32(0.0)
    for n in range(x.shape[0]):
        xs, ys = x[n, c], y[n, c]
        if relu:
            for i in range(x.shape[2]):
                v = a * xs[i] + b
                ys[i] = v if v > zero else zero
        else:
            for i in range(x.shape[2]):
                ys[i] = a * xs[i] + b


@kernel(export=True)
def batchnorm_backward(dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats, need_dx):
    """Gradients of a batch normalisation (with ``relu``: of the ReLU after it too, masked where
    y <= 0). ``batch_stats``: the forward used the batch statistics (training), whose gradient
    enters dx; else they were constants (evaluation). dx, dy, x, y: (N, C, S); dweight, dbias,
    mean, invstd, weight: (C,). dx is written only when ``need_dx``."""
    N, C, S = x.shape
    # one channel per iteration: disjoint outputs
    args = (dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats, need_dx)
    parallel_blocks(C, batchnorm_backward_part, args)


@kernel(float_division=True)
def batchnorm_backward_part(c, dx, dweight, dbias, dy, x, y, mean, invstd, weight, relu, batch_stats,
                            need_dx):
    """Part ``c`` of batchnorm_backward: one iteration of its parallel loop."""
    N, C, S = x.shape
    M = N * S
    zero = np.float32(0.0)
    mu = mean[c]
    g_sum = 0.0
    gx_sum = 0.0  # sum of g * (x - mean)
    for n in range(N):
        xs, ys, gs = x[n, c], y[n, c], dy[n, c]
        part, partx = 0.0, 0.0
        for i in range(S):
            g = gs[i]
            if relu and not ys[i] > zero:
                g = zero
            part += np.float64(g)
            partx += np.float64(g) * np.float64(xs[i] - mu)
        g_sum += part
        gx_sum += partx
    inv = np.float64(invstd[c])
    dbias[c] = np.float32(g_sum)
    dweight[c] = np.float32(gx_sum * inv)
    if not need_dx:
        return
    a = np.float32(weight[c] * inv)
    b1 = np.float32(g_sum / M) if batch_stats else zero
    b2 = np.float32(inv * inv * gx_sum / M) if batch_stats else zero
    _input_grad(dx, dy, x, y, c, a, b1, b2, mu, relu)


# Without fast-math: with 'reassoc', a fresh compile regrouped the input gradient's terms and
# the code that numba's disk cache (and the prebuilt kernels) hand back did not, so the first run
# of a seed on a machine compiling its kernels trained to other bits than every later run
# (tests/test_network.py checks it). An elementwise loop vectorises without fast-math.
@kernel(fastmath=False)
def _input_grad(dx, dy, x, y, c, a, b1, b2, mu, relu):
    """dx[:, c] = a * (g - b1 - (x[:, c] - mu) * b2), g = dy[:, c] masked where y <= 0 when relu
    (one call per channel: not inlined, so that the caller's fast-math stays out)."""
    zero = np.float32(0.0)
    for n in range(x.shape[0]):
        xs, ys, gs, ds = x[n, c], y[n, c], dy[n, c], dx[n, c]
        for i in range(ds.shape[0]):
            g = gs[i]
            if relu and not ys[i] > zero:
                g = zero
            ds[i] = a * (g - b1 - (xs[i] - mu) * b2)


# Folds of at most FOLD_SERIAL weights run on one thread: waking the others cost more than they
# saved up to modern's 64 -> 64 layer (36,864 weights: 3.4 us on one thread, 3.7 on two; 32 x 9:
# 0.85 and 2.3 us), and batch-1 predictions fold every layer on every call.
FOLD_SERIAL = 1 << 17


@kernel(export=True, team="blocks")
def batchnorm_fold(wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen, version):
    """A convolution followed by BatchNorm in evaluation mode, as one convolution: with
    a = weight / sqrt(running_var + eps) (as batchnorm_forward_eval computes it),
    wf[c] = a[c] * w[c] and bf[c] = a[c] * b[c] + (bias[c] - running_mean[c] * a[c]).
    wf, w: (Co, K) (the weights, flat per output channel); bf, b and the rest: (Co,).
    Output channels in parallel above FOLD_SERIAL weights (the same values either way).

    seen: int32, w.size + 5 * Co + 1, the bits of the inputs (w, b, weight, bias, running_mean,
    running_var) the last fold was made from (_util.unchanged's record), or empty: fold always.
    A serial fold whose inputs kept their bits returns at once (wf, bf are still what it would
    write). version: (1,) int32, incremented on every fold that writes (empty: none), so that the
    packings of wf (Winograd's transforms, the transposed filters) compare a count, not wf's bits
    (_util.same_version)."""
    # one output channel per iteration
    args = (wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen, version)
    parallel_blocks(batchnorm_fold_blocks(*args), batchnorm_fold_block, args)


@kernel()
def batchnorm_fold_blocks(wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen, version):
    """1 (every channel in one block) up to FOLD_SERIAL weights, else one block per channel."""
    Co, K = w.shape
    return 1 if Co * K <= FOLD_SERIAL else Co


@kernel()
def batchnorm_fold_block(i, wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen, version):
    """Block i of batchnorm_fold (batchnorm_fold_blocks): every channel, or channel i. The
    channel loop is written out here: through an inlined helper per channel it ran 2.7x slower
    (modern's 64 x 576 fold: 5.7 us against 2.1). One block (serial) skips a fold whose inputs
    are unchanged; with a block per channel every channel folds, and block 0 counts the version
    (read only after the kernel: the packings follow it)."""
    serial = batchnorm_fold_blocks(wf, bf, w, b, weight, bias, running_mean, running_var, eps, seen,
                                   version) == 1
    if serial and seen.shape[0] > 0 and unchanged_many(seen, w, b, weight, bias, running_mean,
                                                       running_var):
        return
    if version.shape[0] > 0 and (serial or i == 0):
        version[0] += 1
    c0, c1 = (0, w.shape[0]) if serial else (i, i + 1)
    for c in range(c0, c1):
        inv = 1.0 / np.sqrt(np.float64(running_var[c]) + eps)
        a = np.float32(weight[c] * inv)
        shift = np.float32(bias[c] - running_mean[c] * weight[c] * inv)
        ws, wfs = w[c], wf[c]
        for k in range(wfs.shape[0]):
            wfs[k] = a * ws[k]
        bf[c] = a * b[c] + shift
