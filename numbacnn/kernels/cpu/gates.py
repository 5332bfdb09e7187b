"""The mobile nets' activations on flat float32 arrays, forward and backward, one kernel pair with
the function as a code: 0 ReLU6, 1 sigmoid, 2 SiLU (x * sigmoid(x)), 3 hard sigmoid
(relu6(x + 3) / 6), 4 hard swish (x * relu6(x + 3) / 6), as torch defines them (gradients too).
NaN propagates; blocks of _BLOCK elements, disjoint."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks

_BLOCK = 8192


@kernel()
def gate_forward_blocks(y, x, op):
    return max(1, (y.shape[0] + _BLOCK - 1) // _BLOCK)


@kernel(fastmath=False, float_division=True)
def gate_forward_block(i, y, x, op):
    """Block i of gate_forward: elements [i * _BLOCK, (i + 1) * _BLOCK)."""
    lo = i * _BLOCK
    hi = min(y.shape[0], lo + _BLOCK)
    ys, xs = y[lo:hi], x[lo:hi]
    zero, one, three, six = np.float32(0.0), np.float32(1.0), np.float32(3.0), np.float32(6.0)
    if op == 0:
        for j in range(xs.shape[0]):
            v = xs[j]
            v = v if not v < zero else zero
            ys[j] = v if not v > six else six
    elif op == 1 or op == 2:
        for j in range(xs.shape[0]):
            v = xs[j]
            s = one / (one + np.exp(-v))
            ys[j] = s if op == 1 else v * s
    else:
        for j in range(xs.shape[0]):
            v = xs[j]
            t = v + three
            t = t if not t < zero else zero
            t = (t if not t > six else six) / six
            ys[j] = t if op == 3 else v * t


@kernel(fastmath=False, export=True, team="blocks")
def gate_forward(y, x, op):
    """y = f(x) for the function ``op`` (the module's codes). y, x: (M,) flat."""
    # disjoint element ranges
    args = (y, x, op)
    parallel_blocks(gate_forward_blocks(*args), gate_forward_block, args)


@kernel(fastmath=False, float_division=True)
def gate_backward_block(i, dx, dy, x, op):
    """Block i of gate_backward."""
    lo = i * _BLOCK
    hi = min(dx.shape[0], lo + _BLOCK)
    ds, gs, xs = dx[lo:hi], dy[lo:hi], x[lo:hi]
    zero, one, three, six = np.float32(0.0), np.float32(1.0), np.float32(3.0), np.float32(6.0)
    half = np.float32(0.5)
    for j in range(xs.shape[0]):
        v = xs[j]
        if op == 0:
            d = one if (v > zero and v < six) else zero
        elif op == 1:
            s = one / (one + np.exp(-v))
            d = s * (one - s)
        elif op == 2:
            s = one / (one + np.exp(-v))
            d = s * (one + v * (one - s))
        elif op == 3:
            d = one / six if (v > -three and v < three) else zero
        else:
            d = zero if v < -three else (one if v > three else v / three + half)
        ds[j] = gs[j] * d if v == v else v  # NaN in, NaN out


@kernel(fastmath=False, export=True)
def gate_backward(dx, dy, x, op):
    """dx = dy * f'(x) for the function ``op``. All (M,) flat; x is the forward's input."""
    # disjoint element ranges
    args = (dx, dy, x, op)
    parallel_blocks(gate_forward_blocks(dx, x, op), gate_backward_block, args)
