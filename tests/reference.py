"""Slow, obviously-correct NumPy float64 loops: the oracle every kernel is tested against."""
from __future__ import annotations

import math

import numpy as np


def out_size(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def conv2d_forward(x, w, b, stride, pad):
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    (sh, sw), (ph, pw) = _pair(stride), _pair(pad)
    N, C, H, W = x.shape
    Co, _, KH, KW = w.shape
    OH, OW = out_size(H, KH, sh, ph), out_size(W, KW, sw, pw)
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    out = np.zeros((N, Co, OH, OW))
    for oy in range(OH):  # each output position: every example's patch against every filter
        for ox in range(OW):
            patch = xp[:, :, oy * sh:oy * sh + KH, ox * sw:ox * sw + KW]
            out[:, :, oy, ox] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    return out


def conv2d_backward(dout, x, w, stride, pad):
    """Returns (dx, dw, db) by scattering each output's gradient to the inputs it read."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    dout = np.asarray(dout, np.float64)
    (sh, sw), (ph, pw) = _pair(stride), _pair(pad)
    N, C, H, W = x.shape
    Co, _, KH, KW = w.shape
    OH, OW = dout.shape[2:]
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    db = dout.sum(axis=(0, 2, 3))
    for oy in range(OH):  # each output position's gradient (every example, every filter)
        for ox in range(OW):
            g = dout[:, :, oy, ox]
            sl = (slice(None), slice(None), slice(oy * sh, oy * sh + KH), slice(ox * sw, ox * sw + KW))
            dw += np.tensordot(g, xp[sl], axes=([0], [0]))
            dxp[sl] += np.tensordot(g, w, axes=([1], [0]))
    return dxp[:, :, ph:ph + H, pw:pw + W], dw, db


def conv2d_grouped_forward(x, w, b, stride, pads, groups, dilation):
    """Grouped, dilated convolution with per-side zero padding pads = (top, bottom, left, right):
    output channel co of group co // (Co / groups) reads that group's input channels only."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    t, bt, left, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, bt), (left, r)))
    N, C, Hp, Wp = xp.shape
    Co, cig, KH, KW = w.shape
    cog = Co // groups
    OH = (Hp - (KH - 1) * dh - 1) // sh + 1
    OW = (Wp - (KW - 1) * dw - 1) // sw + 1
    out = np.zeros((N, Co, OH, OW))
    for gi in range(groups):
        xs, ws = xp[:, gi * cig:(gi + 1) * cig], w[gi * cog:(gi + 1) * cog]
        for oy in range(OH):
            for ox in range(OW):
                rows = oy * sh + dh * np.arange(KH)
                cols = ox * sw + dw * np.arange(KW)
                patch = xs[:, :, rows][:, :, :, cols]  # (N, cig, KH, KW)
                out[:, gi * cog:(gi + 1) * cog, oy, ox] = np.tensordot(patch, ws, axes=([1, 2, 3], [1, 2, 3]))
    return out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)


def conv2d_grouped_backward(dout, x, w, stride, pads, groups, dilation):
    """(dx, dw, db) of conv2d_grouped_forward, each output's gradient scattered to what it read."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    dout = np.asarray(dout, np.float64)
    (sh, sw), (dh, dw_) = _pair(stride), _pair(dilation)
    t, bt, left, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, bt), (left, r)))
    Co, cig, KH, KW = w.shape
    cog = Co // groups
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    OH, OW = dout.shape[2:]
    for gi in range(groups):
        cs, os_ = slice(gi * cig, (gi + 1) * cig), slice(gi * cog, (gi + 1) * cog)
        for oy in range(OH):
            for ox in range(OW):
                g = dout[:, os_, oy, ox]  # (N, cog)
                for ky in range(KH):
                    for kx in range(KW):
                        iy, ix = oy * sh + ky * dh, ox * sw + kx * dw_
                        dw[os_, :, ky, kx] += g.T @ xp[:, cs, iy, ix]
                        dxp[:, cs, iy, ix] += g @ w[os_, :, ky, kx]
    H, W = x.shape[2:]
    return dxp[:, :, t:t + H, left:left + W], dw, dout.sum(axis=(0, 2, 3))


def conv1d_forward(x, w, b, stride, pads, groups, dilation):
    """1-D convolution of series x (N, C, L) with w (Co, C / groups, K), zero padding pads = (left,
    right), as torch.nn.Conv1d: output t of channel co sums its group's channels at
    t * stride + k * dilation of the padded series."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), pads))
    N, C, Lp = xp.shape
    Co, cig, K = w.shape
    cog = Co // groups
    OL = (Lp - (K - 1) * dilation - 1) // stride + 1
    out = np.zeros((N, Co, OL))
    for co in range(Co):
        gi = co // cog
        for t in range(OL):
            taps = t * stride + dilation * np.arange(K)
            out[:, co, t] = np.einsum("nck,ck->n", xp[:, gi * cig:(gi + 1) * cig][:, :, taps], w[co])
    return out + np.asarray(b, np.float64).reshape(1, -1, 1)


def conv1d_backward(dout, x, w, stride, pads, groups, dilation):
    """(dx, dw, db) of conv1d_forward: each output's gradient scattered to the inputs it read."""
    x, w, dout = (np.asarray(a, np.float64) for a in (x, w, dout))
    xp = np.pad(x, ((0, 0), (0, 0), pads))
    Co, cig, K = w.shape
    cog = Co // groups
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for co in range(Co):
        cs = slice(co // cog * cig, (co // cog + 1) * cig)
        for t in range(dout.shape[2]):
            g = dout[:, co, t]  # (N,)
            for k in range(K):
                i = t * stride + k * dilation
                dw[co, :, k] += g @ xp[:, cs, i]
                dxp[:, cs, i] += np.outer(g, w[co, :, k])
    return dxp[:, :, pads[0]:pads[0] + x.shape[2]], dw, dout.sum(axis=(0, 2))


def pool1d_forward(x, K, S, P, op):
    """op ("max" or "avg", zero padding counted in the mean; max pads with -inf) over windows of K
    at stride S of series x (N, C, L) padded by P each side; max also returns each window's first
    maximum as an index into the unpadded series."""
    x = np.asarray(x, np.float64)
    L = x.shape[2]
    OL = (L + 2 * P - K) // S + 1
    out = np.zeros(x.shape[:2] + (OL,))
    arg = np.zeros(x.shape[:2] + (OL,), np.int64)
    for t in range(OL):
        idx = [i for i in range(t * S - P, t * S - P + K) if 0 <= i < L]
        win = x[:, :, idx]
        if op == "max":
            j = win.argmax(axis=2)
            out[:, :, t] = np.take_along_axis(win, j[..., None], 2)[..., 0]
            arg[:, :, t] = np.asarray(idx)[j]
        else:
            out[:, :, t] = win.sum(axis=2) / K
    return out, arg


def pool1d_backward(dout, x, K, S, P, op):
    """dx of pool1d_forward: a window's gradient to its first maximum, or spread over it / K."""
    dout = np.asarray(dout, np.float64)
    L = x.shape[2]
    dx = np.zeros(np.shape(x))
    _, arg = pool1d_forward(x, K, S, P, op)
    for t in range(dout.shape[2]):
        if op == "max":
            for n in range(dx.shape[0]):
                for c in range(dx.shape[1]):
                    dx[n, c, arg[n, c, t]] += dout[n, c, t]
        else:
            for i in range(t * S - P, t * S - P + K):
                if 0 <= i < L:
                    dx[:, :, i] += dout[:, :, t] / K
    return dx


def gate(x, kind):
    """relu6, sigmoid, silu, hardsigmoid, hardswish in float64 (torch's definitions)."""
    x = np.asarray(x, np.float64)
    sig = 1.0 / (1.0 + np.exp(-x))
    hs = np.clip(x + 3.0, 0.0, 6.0) / 6.0
    return {"relu6": np.clip(x, 0.0, 6.0), "sigmoid": sig, "silu": x * sig, "hardsigmoid": hs,
            "hardswish": x * hs}[kind]


def gate_grad(x, kind):
    """The derivative of ``gate`` (torch's choices at the kinks: 0 at the ends of ReLU6's and hard
    sigmoid's ramps, hard swish's ramp value at x = -3 and 3)."""
    x = np.asarray(x, np.float64)
    sig = 1.0 / (1.0 + np.exp(-x))
    if kind == "relu6":
        return ((x > 0) & (x < 6)).astype(np.float64)
    if kind == "sigmoid":
        return sig * (1 - sig)
    if kind == "silu":
        return sig * (1 + x * (1 - sig))
    if kind == "hardsigmoid":
        return ((x > -3) & (x < 3)) / 6.0
    return np.where(x < -3, 0.0, np.where(x > 3, 1.0, x / 3.0 + 0.5))


def _windows(H, W, K, S, P):
    """Yield (oy, ox, [(iy, ix) inside the input, in row-major window order])."""
    (kh, kw), (sh, sw), (ph, pw) = _pair(K), _pair(S), _pair(P)
    for oy in range(out_size(H, kh, sh, ph)):
        for ox in range(out_size(W, kw, sw, pw)):
            cells = [(iy, ix)
                     for iy in range(oy * sh - ph, oy * sh - ph + kh)
                     for ix in range(ox * sw - pw, ox * sw - pw + kw)
                     if 0 <= iy < H and 0 <= ix < W]
            yield oy, ox, cells


def _pool_out(H, W, K, S, P):
    (kh, kw), (sh, sw), (ph, pw) = _pair(K), _pair(S), _pair(P)
    return out_size(H, kh, sh, ph), out_size(W, kw, sw, pw)


def maxpool2d_forward(x, K, S, P):
    """Returns (out, argmax) with argmax the flat index iy*W+ix of the first maximum (first NaN)."""
    N, C, H, W = x.shape
    OH, OW = _pool_out(H, W, K, S, P)
    out = np.zeros((N, C, OH, OW))
    arg = np.zeros((N, C, OH, OW), np.int64)
    x = np.asarray(x, np.float64)
    for oy, ox, cells in _windows(H, W, K, S, P):  # each window, for every example and channel
        iy, ix = np.array(cells).T
        vals = x[:, :, iy, ix]  # (N, C, cells) in row-major window order
        nan = np.isnan(vals)
        # the first NaN where there is one, else the first maximum (np.argmax: first occurrence)
        best = np.where(nan.any(axis=2), nan.argmax(axis=2), np.where(nan, -np.inf, vals).argmax(axis=2))
        out[:, :, oy, ox] = np.take_along_axis(vals, best[..., None], axis=2)[..., 0]
        arg[:, :, oy, ox] = iy[best] * W + ix[best]
    return out, arg


def maxpool2d_backward(dout, x, K, S, P):
    _, arg = maxpool2d_forward(x, K, S, P)
    N, C, H, W = x.shape
    dx = np.zeros((N, C, H * W))
    for n in range(N):
        for c in range(C):
            for i, a in enumerate(arg[n, c].ravel()):
                dx[n, c, a] += dout[n, c].ravel()[i]
    return dx.reshape(N, C, H, W)


def avgpool2d_forward(x, K, S, P):
    N, C, H, W = x.shape
    out = np.zeros((N, C) + _pool_out(H, W, K, S, P))
    area = _pair(K)[0] * _pair(K)[1]
    x = np.asarray(x, np.float64)
    for oy, ox, cells in _windows(H, W, K, S, P):  # padding counts as zeros: divided by the full area
        iy, ix = np.array(cells).T
        out[:, :, oy, ox] = x[:, :, iy, ix].sum(axis=2) / area
    return out


def avgpool2d_backward(dout, x, K, S, P):
    N, C, H, W = x.shape
    dx = np.zeros((N, C, H, W))
    area = _pair(K)[0] * _pair(K)[1]
    for n in range(N):
        for c in range(C):
            for oy, ox, cells in _windows(H, W, K, S, P):
                for iy, ix in cells:
                    dx[n, c, iy, ix] += dout[n, c, oy, ox] / area
    return dx


def dense_forward(x, w, b):
    return np.asarray(x, np.float64) @ np.asarray(w, np.float64).T + b


def dense_backward(dout, x, w):
    dout = np.asarray(dout, np.float64)
    return dout @ np.asarray(w, np.float64), dout.T @ np.asarray(x, np.float64), dout.sum(0)


def softmax_cross_entropy(logits, y, smoothing=0.0):
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n, k = logp.shape
    target = np.full((n, k), smoothing / k)
    target[np.arange(n), y] += 1.0 - smoothing
    loss = -(target * logp).sum(axis=1).mean()
    return loss, (np.exp(logp) - target) / n


def batchnorm_forward(x, w, b, eps, training, running_mean, running_var, momentum=0.1):
    """(y, new running mean, new running var) of batch normalisation over axis 1 of x, (N, C, ...)."""
    x = np.asarray(x, np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        m = x.size // x.shape[1]
        rm = (1 - momentum) * running_mean + momentum * mean
        rv = (1 - momentum) * running_var + momentum * var * m / (m - 1)
    else:
        mean, var = np.asarray(running_mean, np.float64), np.asarray(running_var, np.float64)
        rm, rv = running_mean, running_var
    xhat = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return xhat * np.reshape(w, shape) + np.reshape(b, shape), rm, rv


def global_avgpool(x):
    return np.asarray(x, np.float64).mean(axis=(2, 3))


def batchnorm_fold(w, b, gamma, beta, mean, var, eps):
    """A convolution (w (Co, ...), b) followed by an evaluation-mode BatchNorm, as one convolution:
    (w * a, (b - mean) * a + beta) with a = gamma / sqrt(var + eps), in float64."""
    a = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    w = np.asarray(w, np.float64)
    return w * a.reshape((-1,) + (1,) * (w.ndim - 1)), (np.asarray(b, np.float64) - mean) * a + beta


def normalize(x, mean, std):
    """Per-channel (x - mean[c]) / std[c] of (N, C, H, W), in float64."""
    x = np.asarray(x, np.float64)
    c = x.shape[1]
    mean, std = (np.asarray(a, np.float64).reshape(1, c, 1, 1) for a in (mean, std))
    return (x - mean) / std


def philox4x32_10(counter, key):
    """Philox4x32-10 (Salmon et al., SC 2011) in Python integers: four 32-bit words."""
    c, k = list(counter), list(key)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return c


def dropout_mask(seed, draw, offset, n, p):
    """The keep mask (bool) of values offset .. offset+n-1 in draw ``draw``: word j % 4 of Philox
    on counter (j // 4 low, high, draw low, high) under the seed's two halves, kept when its top 24
    bits are >= ceil(p * 2**24)."""
    threshold = math.ceil(p * 2**24)
    key = (seed & 0xFFFFFFFF, seed >> 32)
    out = []
    for j in range(offset, offset + n):
        g = j // 4
        word = philox4x32_10((g & 0xFFFFFFFF, g >> 32, draw & 0xFFFFFFFF, draw >> 32), key)[j % 4]
        out.append((word >> 8) >= threshold)
    return np.array(out, bool)


def augment(x, idx, shifts, flips, reflect=False):
    """The batch x[idx] with example i translated by shifts[i] = (dy, dx), zero fill (or the
    image padded by numpy's "reflect" and cropped), then mirrored left-right where flips[i]."""
    out = np.zeros((len(idx),) + x.shape[1:], x.dtype)
    H, W = x.shape[2:]
    for i, j in enumerate(idx):
        dy, dx = shifts[i]
        if reflect:
            p = max(H, W)
            padded = np.pad(x[j], ((0, 0), (p, p), (p, p)), mode="reflect")
            out[i] = padded[:, p - dy:p - dy + H, p - dx:p - dx + W]
            if flips[i]:
                out[i] = out[i, :, :, ::-1]
            continue
        for r in range(H):
            for q in range(W):
                rs, qs = r - dy, q - dx
                if 0 <= rs < H and 0 <= qs < W:
                    out[i, :, r, q] = x[j, :, rs, qs]
        if flips[i]:
            out[i] = out[i, :, :, ::-1]
    return out


def sgd(p, g, buf, lr, momentum, dampening, wd, nesterov, first):
    d = g + wd * p
    if momentum:
        buf = d.copy() if first else momentum * buf + (1 - dampening) * d
        d = d + momentum * buf if nesterov else buf
    return p - lr * d, buf


def rmsprop(p, g, sq, ga, buf, lr, alpha, eps, wd, momentum, centered):
    d = g + wd * p
    sq = alpha * sq + (1 - alpha) * d * d
    if centered:
        ga = alpha * ga + (1 - alpha) * d
        avg = np.sqrt(sq - ga * ga) + eps
    else:
        avg = np.sqrt(sq) + eps
    if momentum > 0:
        buf = momentum * buf + d / avg
        return p - lr * buf, sq, ga, buf
    return p - lr * d / avg, sq, ga, buf


def adam(p, g, m, v, lr, b1, b2, eps, wd, t):
    d = g + wd * p
    m = b1 * m + (1 - b1) * d
    v = b2 * v + (1 - b2) * d * d
    mhat = m / (1 - b1 ** t)
    vhat = v / (1 - b2 ** t)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v


def gelu(x, approximate="none"):
    """GELU in float64: x * Phi(x), or torch's tanh form."""
    x = np.asarray(x, np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def gelu_grad(x, approximate="none"):
    """dGELU/dx in float64."""
    x = np.asarray(x, np.float64)
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x**3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))) + x * phi


def _layer_forward(spec, h, p):
    """One layer of a network spec (see network_loss) on float64 input h; p: its (w, b) or ()."""
    kind = spec[0]
    if kind == "conv":
        return conv2d_forward(h, p[0], p[1], spec[1], spec[2])
    if kind == "gconv":  # ("gconv", stride, (top, bottom, left, right), groups, dilation)
        return conv2d_grouped_forward(h, p[0], p[1], *spec[1:])
    if kind == "gate":  # ("gate", kind)
        return gate(h, spec[1])
    if kind == "conv1d":  # ("conv1d", stride, (left, right), groups, dilation)
        return conv1d_forward(h, p[0], p[1], *spec[1:])
    if kind in ("maxpool1d", "avgpool1d"):  # (kind, K, S, P)
        return pool1d_forward(h, *spec[1:], kind[:3])[0]
    if kind == "gap1d":
        return h.mean(axis=2)
    if kind == "gmp1d":
        return h.max(axis=2)
    if kind == "dense":
        return dense_forward(h, *p)
    if kind == "relu":
        return np.maximum(h, 0.0)
    if kind == "tanh":
        return np.tanh(h)
    if kind == "gelu":  # ("gelu", approximate)
        return gelu(h, spec[1])
    if kind == "maxpool":
        return maxpool2d_forward(h, *spec[1:])[0]
    if kind == "avgpool":
        return avgpool2d_forward(h, *spec[1:])
    if kind == "flatten":
        return h.reshape(h.shape[0], -1)
    if kind == "bn":  # training mode: batch statistics
        return batchnorm_forward(h, p[0], p[1], spec[1], True, 0.0, 1.0)[0]
    if kind == "gap":
        return global_avgpool(h)
    if kind == "res":  # ("res", body specs, shortcut specs or None); p: the parameter iterator
        out = h
        for sub in spec[1]:
            out = _layer_forward(sub, out, _layer_params(sub, p))
        short = h
        for sub in spec[2] or ():
            short = _layer_forward(sub, short, _layer_params(sub, p))
        return out + short
    raise ValueError(kind)


def _layer_params(spec, it):
    if spec[0] == "res":
        return it
    return (next(it), next(it)) if spec[0] in ("conv", "gconv", "conv1d", "dense", "bn") else ()


def network_loss(layers_spec, params, x, y, smoothing=0.0):
    """Float64 loss of a network given as a list of ("conv", stride, pad) / ("relu",) / ("maxpool",
    K, S, P) / ("avgpool", K, S, P) / ("flatten",) / ("dense",) / ("tanh",) / ("gelu", approximate) /
    ("bn", eps) (training
    mode) / ("gconv", stride, (top, bottom, left, right), groups, dilation) / ("gate", kind)
    / ("conv1d", stride, (left, right), groups, dilation) / ("maxpool1d" or "avgpool1d", K, S, P)
    / ("gap1d",) / ("gmp1d",)
    / ("gap",) / ("res", body, shortcut or None) entries; params holds the weights in
    state_dict order (parameters only)."""
    h = np.asarray(x, np.float64)
    it = iter(params)
    for spec in layers_spec:
        h = _layer_forward(spec, h, _layer_params(spec, it))
    return softmax_cross_entropy(h, y, smoothing)[0]


def network_gradients(layers_spec, params, x, y):
    """Float64 loss, parameter gradients (state_dict order) and dL/dx of the network described as in
    ``network_loss``: the oracle forward, then the oracle backward of every layer in reverse."""
    h = np.asarray(x, np.float64)
    it = iter(params)
    tape = []  # (spec, layer input, its parameters)
    for spec in layers_spec:
        p = _layer_params(spec, it)
        tape.append((spec, h, p))
        h = _layer_forward(spec, h, p)
    loss, g = softmax_cross_entropy(h, y)
    grads = []
    for spec, inp, p in reversed(tape):
        kind = spec[0]
        if kind == "conv":
            g, dw, db = conv2d_backward(g, inp, p[0], spec[1], spec[2])
            grads += [db, dw]
        elif kind == "gconv":
            g, dw, db = conv2d_grouped_backward(g, inp, p[0], *spec[1:])
            grads += [db, dw]
        elif kind == "gate":
            g = g * gate_grad(inp, spec[1])
        elif kind == "conv1d":
            g, dw, db = conv1d_backward(g, inp, p[0], *spec[1:])
            grads += [db, dw]
        elif kind in ("maxpool1d", "avgpool1d"):
            g = pool1d_backward(g, inp, *spec[1:], kind[:3])
        elif kind == "gap1d":
            g = np.repeat(g[:, :, None] / inp.shape[2], inp.shape[2], axis=2)
        elif kind == "gmp1d":
            first = inp.argmax(axis=2)
            dx = np.zeros_like(inp)
            np.put_along_axis(dx, first[..., None], g[..., None], 2)
            g = dx
        elif kind == "dense":
            g, dw, db = dense_backward(g, inp, p[0])
            grads += [db, dw]
        elif kind == "relu":
            g = g * (inp > 0)
        elif kind == "tanh":
            g = g * (1.0 - np.tanh(inp) ** 2)
        elif kind == "gelu":
            g = g * gelu_grad(inp, spec[1])
        elif kind == "maxpool":
            g = maxpool2d_backward(g, inp, *spec[1:])
        elif kind == "avgpool":
            g = avgpool2d_backward(g, inp, *spec[1:])
        elif kind == "flatten":
            g = g.reshape(inp.shape)
    return loss, grads[::-1], g


# --- bfloat16 -------------------------------------------------------------------------------------
def bf16(a):
    """float64 values rounded to float32, then to bfloat16 (nearest, ties to even), as float64:
    written from the definition (the 16 low bits of the float32 rounded off, halfway to even)."""
    f = np.asarray(a, np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    low, high = bits & 0xFFFF, bits >> 16
    up = (low > 0x8000) | ((low == 0x8000) & (high & 1 == 1))
    out = ((high + up) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, out)


# F(4x4, 3x3)'s matrices (Lavin and Gray), independent of the kernels' own
_BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                 [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
_AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                np.float64)


def _tiles6(xp, th, tw):
    """(N, C, th, tw, 6, 6): the 6x6 patches under the 4x4 output tiles of the padded planes xp,
    zeros past their edges."""
    N, C, H, W = xp.shape
    big = np.zeros((N, C, 4 * th + 2, 4 * tw + 2))
    big[:, :, :min(H, 4 * th + 2), :min(W, 4 * tw + 2)] = xp[:, :, :4 * th + 2, :4 * tw + 2]
    out = np.empty((N, C, th, tw, 6, 6))
    for ty in range(th):
        for tx in range(tw):
            out[:, :, ty, tx] = big[:, :, 4 * ty:4 * ty + 6, 4 * tx:4 * tx + 6]
    return out


def _untile4(m, oh, ow):
    """(N, C, oh, ow) from the 4x4 output tiles m (N, C, th, tw, 4, 4)."""
    N, C, th, tw = m.shape[:4]
    return m.transpose(0, 1, 2, 4, 3, 5).reshape(N, C, 4 * th, 4 * tw)[:, :, :oh, :ow]


def winograd4_bf16_forward(x, w, b, pad):
    """3x3 stride-1 convolution by F(4x4, 3x3) with the transformed tiles B^T d B and filters
    G g G^T rounded to bfloat16 (precision "bf16"), everything else in float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    N, C, H, W = x.shape
    oh, ow = H + 2 * pad - 2, W + 2 * pad - 2
    th, tw = -(-oh // 4), -(-ow // 4)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    v = bf16(np.einsum("ia,nctuab,jb->nctuij", _BT4, _tiles6(xp, th, tw), _BT4))
    u = bf16(np.einsum("ia,ocab,jb->ocij", _G4, w, _G4))
    m = np.einsum("nctuij,ocij->notuij", v, u)
    y = np.einsum("ai,notuij,bj->notuab", _AT4, m, _AT4)
    return _untile4(y, oh, ow) + np.asarray(b, np.float64)[:, None, None]


def winograd4_bf16_backward(dout, x, w, pad):
    """(dx, dw, db) of winograd4_bf16_forward as its kernels compute them: dx the F(4x4, 3x3)
    forward of the output gradient padded by 2 - pad with the filters rotated and their channels
    swapped (tiles and filters rounded to bf16); dw = G^T dU G with dU the sum over tiles of the
    input tiles' B^T d B times the output gradient's A g A^T, both rounded to bf16."""
    dout, x, w = (np.asarray(a, np.float64) for a in (dout, x, w))
    N, C, H, W = x.shape
    oh, ow = dout.shape[2:]
    q = 2 - pad
    rot = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    dx = winograd4_bf16_forward(np.pad(dout, ((0, 0), (0, 0), (q, q), (q, q)))[:, :, :H + 2, :W + 2], rot,
                                np.zeros(C), 0)
    th, tw = -(-oh // 4), -(-ow // 4)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    v = bf16(np.einsum("ia,nctuab,jb->nctuij", _BT4, _tiles6(xp, th, tw), _BT4))
    g = np.zeros((N, dout.shape[1], 4 * th, 4 * tw))
    g[:, :, :oh, :ow] = dout
    gt = g.reshape(N, -1, th, 4, tw, 4).transpose(0, 1, 2, 4, 3, 5)
    dm = bf16(np.einsum("ai,notuab,bj->notuij", _AT4, gt, _AT4))
    du = np.einsum("nctuij,notuij->ocij", v, dm)
    dw = np.einsum("ia,ocij,jb->ocab", _G4, du, _G4)
    return dx, dw, dout.sum(axis=(0, 2, 3))
