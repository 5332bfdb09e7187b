"""Moving a step's data: a mini-batch gathered from the training set with its labels, and strided
4-D copies (the weight layouts of the "positions" convolution plan)."""
from numba import prange

from ..._config import kernel


@kernel(fastmath=False)
def gather_batch(out, labels, x, y, idx):
    """out[i] = x[idx[i]] and labels[i] = y[idx[i]] for every row i: a mini-batch.
    out: (B, F); labels: (B,); x: (N, F); y: (N,); idx: (B,) integers in [0, N)."""
    F = out.shape[1]
    for i in prange(out.shape[0]):  # each iteration writes its own row
        src = x[idx[i]]
        dst = out[i]
        for j in range(F):
            dst[j] = src[j]
        labels[i] = y[idx[i]]


@kernel(fastmath=False)
def copy_strided(dst, src):
    """dst[...] = src for 4-D arrays of one shape; src may be any strided view (a transpose)."""
    A, B, C, D = dst.shape
    for ab in prange(A * B):  # each iteration writes its own slab (a, b)
        a = ab // B
        b = ab % B
        for c in range(C):
            d = dst[a, b, c]
            s = src[a, b, c]
            for k in range(D):
                d[k] = s[k]


@kernel(parallel=False, fastmath=False)
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
