"""Elementwise activations and the sum of two arrays (residual blocks) on flat float32 arrays,
forward and backward.

Each parallel block handles one block through slices indexed from 0 (see optim.py: a computed
offset kept the loops from vectorising). An array of one block runs without a parallel region: opening
one costs about 1.3 us more than the block itself at batch-1 sizes. The forwards' blocks are
functions of their own (``X_blocks`` counts them, ``X_block(i, ...)`` runs block i) so that an
inference program can run them in its own parallel region (runtime/team.py)."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks

_BLOCK = 8192


@kernel()
def blocks(M):
    """Blocks of _BLOCK elements in an array of M (at least one)."""
    return max(1, (M + _BLOCK - 1) // _BLOCK)


@kernel()
def relu_forward_blocks(y, x):
    return blocks(y.shape[0])


@kernel(fastmath=False)
def relu_forward_block(i, y, x):
    """Block i of relu_forward: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    _relu_block(y[lo:hi], x[lo:hi])


@kernel(fastmath=False, export=True, team="blocks")
def relu_forward(y, x):
    """y = max(x, 0) (NaN propagates). y, x: (M,) flat."""
    # disjoint element ranges
    args = (y, x)
    parallel_blocks(relu_forward_blocks(*args), relu_forward_block, args)


@kernel(fastmath=False)
def _relu_block(ys, xs):
    for i in range(xs.shape[0]):
        v = xs[i]
        ys[i] = v if not v < np.float32(0.0) else np.float32(0.0)


@kernel(export=True)
def relu_backward(dx, dy, y):
    """dx = dy where y > 0, else 0. All (M,) flat."""
    M = y.shape[0]
    if M <= _BLOCK:
        _relu_grad_block(dx, dy, y)
        return
    # disjoint element ranges
    args = (dx, dy, y)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, relu_backward_part, args)


@kernel(float_division=True)
def relu_backward_part(blk, dx, dy, y):
    """Part ``blk`` of relu_backward: one iteration of its parallel loop."""
    M = y.shape[0]
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    _relu_grad_block(dx[lo:hi], dy[lo:hi], y[lo:hi])


@kernel()
def _relu_grad_block(dxs, dys, ys):
    for i in range(ys.shape[0]):
        dxs[i] = dys[i] if ys[i] > np.float32(0.0) else np.float32(0.0)


@kernel(export=True, team="blocks")
def tanh_forward(y, x):
    """y = tanh(x). (M,) flat.

    np.tanh calls libm's scalar tanhf here (no SVML): about 6 ns an element, 40 times ReLU. This
    rational approximation vectorises: tanh(x) = t * P(t*t) / Q(t*t) with t = x clamped to
    [-9, 9] (float32 tanh is 1 within 1 ulp beyond), P of degree 6 and Q of degree 3 in t*t.
    The coefficients are a weighted least-squares fit of tanh(x)/x over [0, 9] in float64
    (benchmarks/fit_tanh.py); evaluated in float32 the error is at most 5.4 ulp (3.2e-7) on
    [-12, 12], and odd symmetry, |tanh| <= 1, tanh(+-0) = +-0, +-inf -> +-1 and NaN -> NaN hold exactly.
    """
    # disjoint element ranges
    args = (y, x)
    parallel_blocks(tanh_forward_blocks(*args), tanh_forward_block, args)


@kernel()
def tanh_forward_blocks(y, x):
    return blocks(y.shape[0])


@kernel()
def tanh_forward_block(i, y, x):
    """Block i of tanh_forward: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    _tanh_block(y[lo:hi], x[lo:hi])


@kernel(float_division=True)
def _tanh_block(ys, xs):
    c = np.float32(9.0)
    one = np.float32(1.0)
    p0, p1, p2, p3 = (np.float32(1.0), np.float32(0.13087302446365356),
                      np.float32(0.003107610158622265), np.float32(1.1191886187589262e-05))
    p4, p5, p6 = (np.float32(-2.037375956831511e-08), np.float32(5.347308706937781e-11),
                  np.float32(-8.661247988348691e-14))
    q0, q1, q2, q3 = (np.float32(1.0), np.float32(0.4642063081264496),
                      np.float32(0.024509793147444725), np.float32(0.00025514286244288087))
    for i in range(xs.shape[0]):
        t = xs[i]
        t = t if not t > c else c  # NaN fails both tests and stays NaN
        t = t if not t < -c else -c
        s = t * t
        p = ((((((p6 * s + p5) * s + p4) * s + p3) * s + p2) * s + p1) * s + p0)
        q = ((q3 * s + q2) * s + q1) * s + q0
        r = t * p / q  # can round past +-1 by an ulp: clamp, so that 1 - y*y >= 0
        r = r if not r > one else one
        ys[i] = r if not r < -one else -one


@kernel(export=True)
def tanh_backward(dx, dy, y):
    """dx = dy * (1 - y**2). (M,) flat."""
    M = y.shape[0]
    if M <= _BLOCK:
        _tanh_grad_block(dx, dy, y)
        return
    # disjoint element ranges
    args = (dx, dy, y)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, tanh_backward_part, args)


@kernel(float_division=True)
def tanh_backward_part(blk, dx, dy, y):
    """Part ``blk`` of tanh_backward: one iteration of its parallel loop."""
    M = y.shape[0]
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    _tanh_grad_block(dx[lo:hi], dy[lo:hi], y[lo:hi])


@kernel()
def _tanh_grad_block(dxs, dys, ys):
    one = np.float32(1.0)
    for i in range(ys.shape[0]):
        dxs[i] = dys[i] * (one - ys[i] * ys[i])


@kernel(export=True, team="blocks")
def add(y, a, b, relu):
    """y = a + b (a residual block's output, and the sum of its two paths' input gradients); with
    relu, max(a + b, 0) (NaN stays NaN): the ReLU after a residual block, one pass over memory
    fewer. (M,) flat."""
    # disjoint element ranges
    args = (y, a, b, relu)
    parallel_blocks(add_blocks(*args), add_block, args)


@kernel()
def add_blocks(y, a, b, relu):
    return blocks(y.shape[0])


@kernel()
def add_block(i, y, a, b, relu):
    """Block i of add: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    _add_block(y[lo:hi], a[lo:hi], b[lo:hi], relu)


@kernel()
def _add_block(ys, as_, bs, relu):
    zero = np.float32(0.0)
    if relu:
        for i in range(ys.shape[0]):
            v = as_[i] + bs[i]
            ys[i] = v if not v < zero else zero
    else:
        for i in range(ys.shape[0]):
            ys[i] = as_[i] + bs[i]


@kernel(export=True, team="blocks")
def gelu_forward(y, x, tanh_form):
    """y = x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)) (torch's exact GELU); with tanh_form,
    x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3))) (torch's approximate="tanh"). (M,) flat.

    libm's erff is scalar here (about 40 ns an element, no SVML): erf is a rational function
    instead, erf(z) = z * P(z*z) / Q(z*z) for z clamped to [-4, 4] (float32 erf is 1 beyond 3.92),
    fitted by benchmarks/fit_erf.py; in float32 GELU is within 1.3e-6 of float64 on [-12, 12].
    The tanh form uses the Tanh layer's rational tanh."""
    # disjoint element ranges (one block runs in the calling thread)
    args = (y, x, tanh_form)
    parallel_blocks(gelu_forward_blocks(*args), gelu_forward_block, args)


@kernel()
def gelu_forward_blocks(y, x, tanh_form):
    return blocks(y.shape[0])


@kernel(float_division=True)
def gelu_forward_block(i, y, x, tanh_form):
    """Block i of gelu_forward: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    _gelu_block(y[lo:hi], x[lo:hi], tanh_form)


@kernel(export=True)
def gelu_backward(dx, dy, x, tanh_form):
    """dx = dy * GELU'(x): the derivative of the forward's own formula (for the erf form,
    Phi(x) + x * phi(x) with phi the derivative of the rational erf; within 1.8e-6 of the exact
    derivative). All (M,) flat."""
    M = x.shape[0]
    if M <= _BLOCK:
        _gelu_grad_block(dx, dy, x, tanh_form)
        return
    # disjoint element ranges
    args = (dx, dy, x, tanh_form)
    parallel_blocks((M + _BLOCK - 1) // _BLOCK, gelu_backward_part, args)


@kernel(float_division=True)
def gelu_backward_part(blk, dx, dy, x, tanh_form):
    """Part ``blk`` of gelu_backward: one iteration of its parallel loop."""
    M = x.shape[0]
    lo = blk * _BLOCK
    hi = min(M, lo + _BLOCK)
    _gelu_grad_block(dx[lo:hi], dy[lo:hi], x[lo:hi], tanh_form)


@kernel(inline=True, float_division=True)
def _erf_parts(z):
    """(erf(z), erf'(z)) of the rational erf at z: beyond [-4, 4] exactly +-1 (so that GELU is
    exactly 0 for large negative x, not -x times the fit's residue) and erf' 0."""
    c = np.float32(4.0)
    t = z if not z > c else c  # NaN fails both tests and stays NaN
    t = t if not t < -c else -c
    s = t * t
    p0, p1, p2, p3 = (np.float32(1.128379225730896), np.float32(0.18467770516872406),
                      np.float32(0.05435330420732498), np.float32(0.003841560799628496))
    p4, p5, p6 = (np.float32(0.0003837669501081109), np.float32(4.809352503798436e-06),
                  np.float32(-1.381095948715938e-08))
    q1, q2, q3 = (np.float32(0.4969998896121979), np.float32(0.11383500695228577),
                  np.float32(0.01546115055680275))
    q4, q5 = np.float32(0.0013114589964970946), np.float32(6.42849481664598e-05)
    one, two = np.float32(1.0), np.float32(2.0)
    p = (((((p6 * s + p5) * s + p4) * s + p3) * s + p2) * s + p1) * s + p0
    q = ((((q5 * s + q4) * s + q3) * s + q2) * s + q1) * s + one
    dp = ((((np.float32(6.0) * p6 * s + np.float32(5.0) * p5) * s + np.float32(4.0) * p4) * s
           + np.float32(3.0) * p3) * s + two * p2) * s + p1
    dq = (((np.float32(5.0) * q5 * s + np.float32(4.0) * q4) * s + np.float32(3.0) * q3) * s
          + two * q2) * s + q1
    de = (p + two * s * dp) / q - two * s * p * dq / (q * q)
    if t == z:
        return t * p / q, de
    return t * np.float32(0.25), np.float32(0.0)  # +-1 (NaN stays NaN)


@kernel(inline=True, float_division=True)
def _tanh32(t):
    """The Tanh layer's rational tanh (see tanh_forward) of one value."""
    c = np.float32(9.0)
    one = np.float32(1.0)
    t = t if not t > c else c
    t = t if not t < -c else -c
    s = t * t
    p = ((((((np.float32(-8.661247988348691e-14) * s + np.float32(5.347308706937781e-11)) * s
             + np.float32(-2.037375956831511e-08)) * s + np.float32(1.1191886187589262e-05)) * s
           + np.float32(0.003107610158622265)) * s + np.float32(0.13087302446365356)) * s + one)
    q = ((np.float32(0.00025514286244288087) * s + np.float32(0.024509793147444725)) * s
         + np.float32(0.4642063081264496)) * s + one
    r = t * p / q
    r = r if not r > one else one
    return r if not r < -one else -one


@kernel(float_division=True)
def _gelu_block(ys, xs, tanh_form):
    half, one = np.float32(0.5), np.float32(1.0)
    if tanh_form:
        k, a = np.float32(0.7978845608028654), np.float32(0.044715)
        for i in range(xs.shape[0]):
            v = xs[i]
            ys[i] = half * v * (one + _tanh32(k * (v + a * v * v * v)))
    else:
        r = np.float32(0.7071067811865476)
        for i in range(xs.shape[0]):
            v = xs[i]
            e, _ = _erf_parts(v * r)
            ys[i] = half * v * (one + e)


@kernel(float_division=True)
def _gelu_grad_block(dxs, dys, xs, tanh_form):
    half, one, zero = np.float32(0.5), np.float32(1.0), np.float32(0.0)
    if tanh_form:
        k, a = np.float32(0.7978845608028654), np.float32(0.044715)
        for i in range(xs.shape[0]):
            v = xs[i]
            t = _tanh32(k * (v + a * v * v * v))
            g = one - t * t  # 0 where tanh saturates: no inf * 0 there for huge |x|
            slope = half * v * g * k * (one + np.float32(3.0) * a * v * v) if g > zero else zero
            dxs[i] = dys[i] * (half * (one + t) + slope)
    else:
        r = np.float32(0.7071067811865476)
        for i in range(xs.shape[0]):
            v = xs[i]
            e, de = _erf_parts(v * r)
            dxs[i] = dys[i] * (half * (one + e) + half * v * de * r)


@kernel(export=True, team="blocks")
def scale(y, x, a):
    """y = a * x (a constant output scale, and its backward dx = a * dy). (M,) flat."""
    # disjoint element ranges (one block runs in the calling thread)
    args = (y, x, a)
    parallel_blocks(scale_blocks(*args), scale_block, args)


@kernel()
def scale_blocks(y, x, a):
    return blocks(y.shape[0])


@kernel(float_division=True)
def scale_block(i, y, x, a):
    """Block i of scale: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    a32 = np.float32(a)
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    ys, xs = y[lo:hi], x[lo:hi]
    for i in range(hi - lo):
        ys[i] = a32 * xs[i]
