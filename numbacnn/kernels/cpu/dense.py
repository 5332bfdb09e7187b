"""Fully connected layer: out = x @ w.T + b over a fixed grid of tiles (one tile per parallel
iteration), each tile's product on the project's own register-blocked kernels (microkernel.py: dot
blocks for the forward, FMA blocks for the gradients; OpenBLAS only for blocks narrower than 16
columns). Every product spans its whole inner dimension in order, so no gradient needs a
cross-thread reduction; the grid depends on the shapes only, so neither do the results on the
thread count, nor on the BLAS the process has (OpenBLAS's kernels for AVX2 machines pack the
weights on every call: a batch-1 forward of mnistcnn's 1600 -> 128 layer took 43 us on them, 5 us
here). The grids were sized for OpenBLAS, whose per-tile packing made finer grids cost time on
few cores: they stop at 32 tiles up to batch 128 (64 at 256), and at fewer for small layers
(docs/performance.md)."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks
from .blas import sgemm
from .microkernel import dot_rows, gemm_nn, gemm_tn


@kernel()
def tile(size, most, minimum):
    """Block length for splitting ``size`` into at most ``most`` blocks of at least ``minimum``
    (the last one shorter); the number of blocks is -(-size // length)."""
    return max(minimum, -(-size // most))


# Multiply-adds a tile should hold at least (about 5 us of GEMM): below that the per-call cost of
# a small GEMM outweighs what another thread gains (lenet5's 256 -> 120 layer at batch 64 took 1.8x
# as long on 30 tiles of 8 features as on 4 blocks)
MIN_TILE_WORK = 1 << 18
# Rows of x a tile's GEMM takes at most: mnistcnn's 1600 -> 128 layer at batch 256 ran 2.3x faster
# forward (1.5x backward) on one thread in blocks of 64 rows than of 128 (the packed 128 x 1600 panel
# outgrows the core's cache), and offers 64 tiles instead of 32
MAX_TILE_ROWS = 64
# Batches of at most GEMV_ROWS rows: a tile's product is a matrix-vector one that reads the weights
# once (no packing), so tiles of MIN_GEMV_WORK pay: at batch 1, 2 threads, mnistcnn's 1600 -> 128
# layer took 6.7 us in 2 tiles against 9.6 us in one, modern's 3136 -> 128 11.4 against 22.5 us
MIN_GEMV_WORK = 1 << 16
GEMV_ROWS = 4


@kernel()
def forward_grid(N, F_in, F_out):
    """(rows, features) of dense_forward's tiles: 2 row blocks (more for batches over 128: at most
    MAX_TILE_ROWS rows) x 16 feature blocks, coarser while a tile holds fewer than MIN_TILE_WORK
    multiply-adds (MIN_GEMV_WORK for batches of at most GEMV_ROWS)."""
    rb = min(MAX_TILE_ROWS, tile(N, 2, 32))
    least = MIN_TILE_WORK if N > GEMV_ROWS else MIN_GEMV_WORK
    fb = tile(F_out, 16, 8)
    while fb < F_out and min(rb, N) * fb * F_in < least:
        fb *= 2
    while rb < N and rb * fb * F_in < least:
        rb *= 2
    return rb, fb


@kernel()
def backward_grid(N, F_in, F_out, need_dx, need_dw):
    """(input features, output features of dw, rows of dx) of dense_backward's tiles: 16 input
    feature blocks x 2 (more for batches over 128: at most MAX_TILE_ROWS rows of dx, and as many
    blocks of dw); where a tile would hold fewer than MIN_TILE_WORK multiply-adds, first all output
    features and rows in one tile (16 x 1: each tile then makes its block of dw when need_dw and of
    dx when need_dx), then fewer input-feature blocks."""
    ib = tile(F_in, 16, 64)
    if F_in >= 32:  # whole 32-wide FMA blocks (a block of 100 columns ran 7 of 16 instead)
        ib = -(-ib // 32) * 32
    rb = min(MAX_TILE_ROWS, tile(N, 2, 32))
    ob = tile(F_out, -(-N // rb), 32)  # as many dw blocks as dx row blocks: balanced tiles
    if min(ob * N, rb * F_out) * ib < MIN_TILE_WORK:
        ob = F_out
        rb = N
    products = max(1, int(need_dx) + int(need_dw))
    while ib < F_in and products * N * F_out * ib < MIN_TILE_WORK:
        ib *= 2
    return ib, ob, rb


@kernel(export=True, team="blocks")
def dense_forward(out, x, w, b):
    """out: (N, F_out) = x (N, F_in) @ w.T (F_in, F_out) + b (F_out,).
    Tiles (forward_grid): blocks of rows x up to 16 blocks of output features."""
    parallel_blocks(dense_forward_blocks(out, x, w, b), dense_forward_block, (out, x, w, b))  # disjoint tiles


@kernel()
def dense_forward_blocks(out, x, w, b):
    """The tiles of dense_forward's grid."""
    N, F_in = x.shape
    F_out = w.shape[0]
    rb, fb = forward_grid(N, F_in, F_out)
    return -(-N // rb) * -(-F_out // fb)


@kernel()
def dense_forward_block(t, out, x, w, b):
    """Tile t of dense_forward."""
    N, F_in = x.shape
    F_out = w.shape[0]
    rb, fb = forward_grid(N, F_in, F_out)
    _forward_tile(out, x.reshape(N * F_in), w.reshape(F_out * F_in), out.reshape(N * F_out), b, t,
                  -(-F_out // fb), rb, fb)


@kernel()
def _forward_tile(out, xf, wf, of, b, t, n_f, rb, fb):
    """Tile t of dense_forward's grid (n_f feature blocks of fb, row blocks of rb)."""
    N, F_out = out.shape
    F_in = xf.shape[0] // N
    r0 = (t // n_f) * rb
    r1 = min(N, r0 + rb)
    j0 = (t % n_f) * fb
    j1 = min(F_out, j0 + fb)
    dot_rows(of, r0 * F_out + j0, F_out, xf, r0 * F_in, F_in, r1 - r0, wf, j0 * F_in, F_in, j1 - j0, F_in)
    bs = b[j0:j1]
    for n in range(r0, r1):
        row = out[n, j0:j1]
        for j in range(j1 - j0):
            row[j] += bs[j]


@kernel(export=True)
def dense_backward(dx, dw, db, dout, x, w, need_dx, need_dw):
    """dw = dout.T @ x when need_dw (else zeros), db = dout summed over the batch, dx = dout @ w
    when need_dx.

    dx: (N, F_in); dw: (F_out, F_in); db: (F_out,); dout: (N, F_out); x: (N, F_in); w: (F_out, F_in).
    Tile (i, j) of the grid (backward_grid): input-feature block i, with output-feature block j
    of dw and row block j of dx.
    """
    N, F_in = x.shape
    F_out = w.shape[0]
    ib, ob, rb = backward_grid(N, F_in, F_out, need_dx, need_dw)
    n_o = -(-F_out // ob) if need_dw else 0
    n_r = -(-N // rb) if need_dx else 0
    if not need_dw:
        dw[:] = np.float32(0.0)
    # disjoint tiles of dw and dx
    parallel_blocks(-(-F_in // ib) * max(n_o, n_r), dense_backward_block,
                    (dx, dw, db, dout, x, w, need_dx, need_dw))
    for j in range(F_out):  # bias: examples in order
        s = np.float32(0.0)
        for n in range(N):
            s += dout[n, j]
        db[j] = s


@kernel(float_division=True)
def dense_backward_block(t, dx, dw, db, dout, x, w, need_dx, need_dw):
    """Tile t of dense_backward's grid."""
    N, F_in = x.shape
    F_out = w.shape[0]
    xf = x.reshape(N * F_in)
    wf = w.reshape(F_out * F_in)
    gf = dout.reshape(N * F_out)
    dwf = dw.reshape(F_out * F_in)
    dxf = dx.reshape(dx.size)
    ib, ob, rb = backward_grid(N, F_in, F_out, need_dx, need_dw)
    n_o = -(-F_out // ob) if need_dw else 0
    n_r = -(-N // rb) if need_dx else 0
    n_j = max(n_o, n_r)
    i0 = (t // n_j) * ib
    i1 = min(F_in, i0 + ib)
    j = t % n_j
    if j < n_o:
        # dw[o0:o1, i0:i1] = dout[:, o0:o1].T (o1 - o0, N) @ x[:, i0:i1] (N, i1 - i0)
        o0 = j * ob
        o1 = min(F_out, o0 + ob)
        if i1 - i0 >= 16:
            gemm_tn(dwf, o0 * F_in + i0, F_in, gf, o0, F_out, xf, i0, F_in, o1 - o0, i1 - i0, N, True)
        else:
            sgemm(True, False, o1 - o0, i1 - i0, N, np.float32(1.0), gf, o0, F_out, xf, i0, F_in,
                  np.float32(0.0), dwf, o0 * F_in + i0, F_in)
    if j < n_r:
        # dx[r0:r1, i0:i1] = dout[r0:r1] (r1 - r0, F_out) @ w[:, i0:i1] (F_out, i1 - i0)
        r0 = j * rb
        r1 = min(N, r0 + rb)
        if i1 - i0 >= 16:
            gemm_nn(dxf, r0 * F_in + i0, F_in, gf, r0 * F_out, F_out, wf, i0, F_in, r1 - r0, i1 - i0, F_out)
        else:
            sgemm(False, False, r1 - r0, i1 - i0, F_out, np.float32(1.0), gf, r0 * F_out, F_out,
                  wf, i0, F_in, np.float32(0.0), dxf, r0 * F_in + i0, F_in)
