"""Elementwise activations and the sum of two arrays on flat device arrays."""
import math

from numba import cuda

from ...runtime.config import declare
from ._launch import grid


@cuda.jit
def _relu_forward(y, x):
    i = cuda.grid(1)
    if i < y.size:
        v = x[i]
        y[i] = 0.0 if v < 0 else v


@cuda.jit
def _relu_backward(dx, dy, y):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dy[i] if y[i] > 0 else 0.0


@cuda.jit
def _tanh_forward(y, x):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = math.tanh(x[i])


@cuda.jit
def _tanh_backward(dx, dy, y):
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dy[i] * (1.0 - y[i] * y[i])


@cuda.jit
def _add(y, a, b, relu):
    i = cuda.grid(1)
    if i < y.size:
        v = a[i] + b[i]
        y[i] = v if not (relu and v < 0.0) else 0.0


@declare
def add(y, a, b, relu):
    """y = a + b; max(a + b, 0) with relu (as the CPU kernel)."""
    _add[grid(y.size)](y, a, b, relu)


@cuda.jit
def _copy4(dst, src):
    i = cuda.grid(1)
    A, B, C, D = dst.shape
    if i < A * B * C * D:
        d = i % D
        c = (i // D) % C
        b = (i // (C * D)) % B
        a = i // (B * C * D)
        dst[a, b, c, d] = src[a, b, c, d]


@declare
def copy_strided(dst, src):
    """dst[...] = src for 4-D arrays of one shape, either a strided view (as the CPU kernel)."""
    _copy4[grid(dst.size)](dst, src)


@declare
def relu_forward(y, x):
    _relu_forward[grid(y.size)](y, x)


@declare
def relu_backward(dx, dy, y):
    _relu_backward[grid(dx.size)](dx, dy, y)


@declare
def tanh_forward(y, x):
    _tanh_forward[grid(y.size)](y, x)


@declare
def tanh_backward(dx, dy, y):
    _tanh_backward[grid(dx.size)](dx, dy, y)


@cuda.jit
def _gelu_forward(y, x, tanh_form):
    i = cuda.grid(1)
    if i < y.size:
        v = x[i]
        if tanh_form:
            s = math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))
        else:
            s = math.erf(v * 0.7071067811865476)
        y[i] = 0.5 * v * (1.0 + s)


@cuda.jit
def _gelu_backward(dx, dy, x, tanh_form):
    i = cuda.grid(1)
    if i < dx.size:
        v = x[i]
        if tanh_form:
            t = math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))
            k = 0.7978845608028654
            d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
        else:
            phi = math.exp(-0.5 * v * v) * 0.3989422804014327
            d = 0.5 * (1.0 + math.erf(v * 0.7071067811865476)) + v * phi
        dx[i] = dy[i] * d


@declare
def gelu_forward(y, x, tanh_form):
    """y = GELU(x), exact (erf) or tanh form (as the CPU kernel; libdevice's erf and tanh here)."""
    _gelu_forward[grid(y.size)](y, x, tanh_form)


@declare
def gelu_backward(dx, dy, x, tanh_form):
    """dx = dy * GELU'(x) (as the CPU kernel)."""
    _gelu_backward[grid(dx.size)](dx, dy, x, tanh_form)


@cuda.jit
def _scale(y, x, a):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = a * x[i]


@declare
def scale(y, x, a):
    """y = a * x (as the CPU kernel)."""
    _scale[grid(y.size)](y, x, a)
