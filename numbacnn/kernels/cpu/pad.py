"""Zero padding of (N, C, H, W) planes and its gradient (the crop): a convolution with uneven
padding runs its plan on the padded copy ("padded", backend/cpu_conv.py)."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks


@kernel()
def pad2d_forward_blocks(y, x, PT, PL):
    return y.shape[0] * y.shape[1]


@kernel()
def pad2d_forward_block(i, y, x, PT, PL):
    """Plane i = n * C + c of pad2d_forward."""
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    ys, xs = y[i // C, i % C], x[i // C, i % C]
    for r in range(ys.shape[0]):
        row = ys[r]
        for j in range(ys.shape[1]):
            row[j] = np.float32(0.0)
    for r in range(H):
        row = ys[r + PT, PL:PL + W]
        src = xs[r]
        for j in range(W):
            row[j] = src[j]


@kernel(export=True, team="blocks")
def pad2d_forward(y, x, PT, PL):
    """y (N, C, H + PT + PB, W + PL + PR) = x (N, C, H, W) with PT zero rows above, PL zero
    columns to the left and zeros below and to the right."""
    # disjoint planes (n, c)
    args = (y, x, PT, PL)
    parallel_blocks(pad2d_forward_blocks(*args), pad2d_forward_block, args)


@kernel()
def pad2d_backward_block(i, dx, dy, PT, PL):
    """Plane i = n * C + c of pad2d_backward."""
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    ds, gs = dx[i // C, i % C], dy[i // C, i % C]
    for r in range(H):
        row = ds[r]
        src = gs[r + PT, PL:PL + W]
        for j in range(W):
            row[j] = src[j]


@kernel(export=True)
def pad2d_backward(dx, dy, PT, PL):
    """dx (N, C, H, W) = dy (N, C, H + PT + PB, W + PL + PR) without its padding."""
    # disjoint planes (n, c)
    parallel_blocks(dx.shape[0] * dx.shape[1], pad2d_backward_block, (dx, dy, PT, PL))
