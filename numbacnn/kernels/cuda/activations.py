"""Elementwise activations and the sum of two arrays on flat device arrays."""
import math

from numba import cuda

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


def add(y, a, b, relu):
    """y = a + b; max(a + b, 0) with relu (as the CPU kernel)."""
    _add[grid(y.size)](y, a, b, relu)


def relu_forward(y, x):
    _relu_forward[grid(y.size)](y, x)


def relu_backward(dx, dy, y):
    _relu_backward[grid(dx.size)](dx, dy, y)


def tanh_forward(y, x):
    _tanh_forward[grid(y.size)](y, x)


def tanh_backward(dx, dy, y):
    _tanh_backward[grid(dx.size)](dx, dy, y)
