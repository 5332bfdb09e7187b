"""Per-channel input normalisation, forward and backward: y = (x - mean[c]) / std[c]
(a colour data set's channel statistics, applied by the network's first layer)."""

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks


@kernel(export=True, team="blocks")
def normalize_forward(y, x, mean, std):
    """y[n, c, s] = (x[n, c, s] - mean[c]) / std[c]. y, x: (N, C, S); mean, std: (C,)."""
    # one plane per iteration
    args = (y, x, mean, std)
    parallel_blocks(normalize_forward_blocks(*args), normalize_forward_block, args)


@kernel()
def normalize_forward_blocks(y, x, mean, std):
    return x.shape[0] * x.shape[1]


@kernel()
def normalize_forward_block(nc, y, x, mean, std):
    """Plane nc = (n, c) of normalize_forward."""
    C, S = x.shape[1], x.shape[2]
    n = nc // C
    c = nc % C
    m, k = mean[c], std[c]
    ys, xs = y[n, c], x[n, c]
    for i in range(S):
        ys[i] = (xs[i] - m) / k


@kernel(export=True)
def normalize_backward(dx, dy, std):
    """dx[n, c, s] = dy[n, c, s] / std[c]. dx, dy: (N, C, S); std: (C,)."""
    N, C, S = dy.shape
    # one plane per iteration
    args = (dx, dy, std)
    parallel_blocks(N * C, normalize_backward_part, args)


@kernel(float_division=True)
def normalize_backward_part(nc, dx, dy, std):
    """Part ``nc`` of normalize_backward: one iteration of its parallel loop."""
    N, C, S = dy.shape
    n = nc // C
    c = nc % C
    k = std[c]
    dxs, dys = dx[n, c], dy[n, c]
    for i in range(S):
        dxs[i] = dys[i] / k
