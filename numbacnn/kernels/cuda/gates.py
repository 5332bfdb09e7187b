"""The mobile nets' activations on flat device arrays: the codes and meanings of
kernels/cpu/gates.py (0 ReLU6, 1 sigmoid, 2 SiLU, 3 hard sigmoid, 4 hard swish)."""
import math

from numba import cuda

from ...runtime.config import declare
from ._launch import grid


@cuda.jit(device=True)
def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


@cuda.jit
def _gate_forward(y, x, op):
    i = cuda.grid(1)
    if i < y.size:
        v = x[i]
        if op == 0:
            r = min(max(v, 0.0), 6.0) if v == v else v
        elif op == 1:
            r = _sigmoid(v)
        elif op == 2:
            r = v * _sigmoid(v)
        else:
            t = (min(max(v + 3.0, 0.0), 6.0) if v == v else v) / 6.0
            r = t if op == 3 else v * t
        y[i] = r


@cuda.jit
def _gate_backward(dx, dy, x, op):
    i = cuda.grid(1)
    if i < dx.size:
        v = x[i]
        if op == 0:
            d = 1.0 if (v > 0.0 and v < 6.0) else 0.0
        elif op == 1:
            s = _sigmoid(v)
            d = s * (1.0 - s)
        elif op == 2:
            s = _sigmoid(v)
            d = s * (1.0 + v * (1.0 - s))
        elif op == 3:
            d = 1.0 / 6.0 if (v > -3.0 and v < 3.0) else 0.0
        else:
            d = 0.0 if v < -3.0 else (1.0 if v > 3.0 else v / 3.0 + 0.5)
        dx[i] = dy[i] * d if v == v else v


@declare
def gate_forward(y, x, op):
    _gate_forward[grid(y.size)](y, x, op)


@declare
def gate_backward(dx, dy, x, op):
    _gate_backward[grid(dx.size)](dx, dy, x, op)
