"""Fully connected layer on the GPU: one thread per output element; weight gradients gather over
the batch inside one thread per weight (no atomics, fixed order)."""
from numba import cuda

from ._launch import grid


@cuda.jit
def _forward(out, x, w, b):
    N, Fo = out.shape
    Fi = x.shape[1]
    t = cuda.grid(1)
    if t >= N * Fo:
        return
    j = t % Fo
    n = t // Fo
    s = b[j]
    for i in range(Fi):
        s += x[n, i] * w[j, i]
    out[n, j] = s


@cuda.jit
def _backward_dx(dx, dout, w):
    N, Fi = dx.shape
    Fo = w.shape[0]
    t = cuda.grid(1)
    if t >= N * Fi:
        return
    i = t % Fi
    n = t // Fi
    s = 0.0
    for j in range(Fo):
        s += dout[n, j] * w[j, i]
    dx[n, i] = s


@cuda.jit
def _backward_dw(dw, db, dout, x):
    Fo, Fi = dw.shape
    N = x.shape[0]
    t = cuda.grid(1)
    if t >= Fo * Fi:
        return
    i = t % Fi
    j = t // Fi
    s = 0.0
    for n in range(N):
        s += dout[n, j] * x[n, i]
    dw[j, i] = s
    if i == 0:
        sb = 0.0
        for n in range(N):
            sb += dout[n, j]
        db[j] = sb


def dense_forward(out, x, w, b):
    _forward[grid(out.size)](out, x, w, b)


def dense_backward(dx, dw, db, dout, x, w, need_dx):
    if need_dx:
        _backward_dx[grid(dx.size)](dx, dout, w)
    _backward_dw[grid(dw.size)](dw, db, dout, x)
