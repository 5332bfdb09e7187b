"""Moving a step's data: a mini-batch gathered from the training set with its labels (optionally
shifted and flipped: data augmentation), and strided 4-D copies (the weight layouts of the
"positions" convolution plan)."""
import numpy as np

from ...runtime.config import kernel
from ...runtime.parallel import parallel_blocks


@kernel(fastmath=False, export=True)
def gather_batch(out, labels, x, y, idx):
    """out[i] = x[idx[i]] and labels[i] = y[idx[i]] for every row i: a mini-batch.
    out: (B, F); labels: (B,); x: (N, F); y: (N,); idx: (B,) integers in [0, N)."""
    # each iteration writes its own row
    args = (out, labels, x, y, idx)
    parallel_blocks(out.shape[0], gather_batch_part, args)


@kernel(fastmath=False, float_division=True)
def gather_batch_part(i, out, labels, x, y, idx):
    """Part ``i`` of gather_batch: one iteration of its parallel loop."""
    F = out.shape[1]
    src = x[idx[i]]
    dst = out[i]
    for j in range(F):
        dst[j] = src[j]
    labels[i] = y[idx[i]]


@kernel(fastmath=False, export=True)
def gather_augment(out, labels, x, y, idx, shifts, flips, reflect):
    """out[i] = x[idx[i]] translated by shifts[i] = (dy, dx) pixels (out[i, c, r, q] =
    x[idx[i], c, r - dy, q - dx]; where that falls outside, zero, or with reflect the mirror image
    across the border without repeating it, numpy's and torch's "reflect"), then mirrored
    left-right where flips[i]; labels[i] = y[idx[i]]. out: (B, C, H, W); x: (N, C, H, W);
    shifts: (B, 2) int64 with |dy| < H, |dx| < W; flips: (B,) bool; idx: (B,) integers in [0, N)."""
    B, C, H, W = out.shape
    # each iteration writes its own example
    args = (out, labels, x, y, idx, shifts, flips, reflect)
    parallel_blocks(B, gather_augment_part, args)


@kernel(fastmath=False, float_division=True)
def gather_augment_part(i, out, labels, x, y, idx, shifts, flips, reflect):
    """Part ``i`` of gather_augment: one iteration of its parallel loop."""
    B, C, H, W = out.shape
    zero = np.float32(0.0)
    src = x[idx[i]]
    dst = out[i]
    sy, sx = shifts[i, 0], shifts[i, 1]
    flip = flips[i]
    for c in range(C):
        for r in range(H):
            row = dst[c, r]
            rs = r - sy
            if reflect:
                rs = -rs if rs < 0 else (2 * H - 2 - rs if rs >= H else rs)
            elif rs < 0 or rs >= H:
                for q in range(W):
                    row[q] = zero
                continue
            srow = src[c, rs]
            for q in range(W):
                qs = (W - 1 - q if flip else q) - sx
                if reflect:
                    qs = -qs if qs < 0 else (2 * W - 2 - qs if qs >= W else qs)
                    row[q] = srow[qs]
                else:
                    row[q] = srow[qs] if 0 <= qs < W else zero
    labels[i] = y[idx[i]]


@kernel(fastmath=False, export=True, team="blocks")
def copy_strided(dst, src):
    """dst[...] = src for 4-D arrays of one shape; either may be any strided view (a transpose, a
    slice of a concatenation's channels)."""
    # each block writes its own slab (a, b)
    args = (dst, src)
    parallel_blocks(copy_strided_blocks(*args), copy_strided_block, args)


@kernel()
def copy_strided_blocks(dst, src):
    return dst.shape[0] * dst.shape[1]


@kernel(fastmath=False, float_division=True)
def copy_strided_block(ab, dst, src):
    """Block ``ab`` of copy_strided: the slab (ab // B, ab % B)."""
    A, B, C, D = dst.shape
    a = ab // B
    b = ab % B
    for c in range(C):
        d = dst[a, b, c]
        s = src[a, b, c]
        for k in range(D):
            d[k] = s[k]


@kernel(fastmath=False, export=True)
def step_stats(out, losses, logits, y):
    """out[0] = the mean of losses (summed in order), out[1] = the number of rows whose first
    largest logit is at the label: a step's summary in one call. out: (2,) float64; losses: (B,)
    float64; logits: (B, K); y: (B,) integers."""
    total = 0.0
    correct = 0
    for i in range(losses.shape[0]):
        total += losses[i]
        row = logits[i]
        best = 0
        for k in range(1, row.shape[0]):
            if row[k] > row[best]:
                best = k
        correct += best == y[i]
    out[0] = total / losses.shape[0]
    out[1] = correct
