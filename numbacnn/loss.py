"""The loss: softmax cross-entropy over a batch of logits and its gradient (optionally weighted and
label-smoothed)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .kernels import cpu as K


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None,
                          label_smoothing: float = 0.0) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy over the batch and its gradient with respect to the logits.

    Parameters
    ----------
    logits : (N, K) float32
    y : (N,) integer labels in [0, K)
    sample_weight : (N,) non-negative weights, or None: the loss is then the weighted mean
        sum(w_i * l_i) / sum(w_i)
    label_smoothing : float in [0, 1)
        Targets (1 - eps) * onehot + eps / K, as ``torch.nn.functional.cross_entropy``.

    Returns
    -------
    loss : float
    dlogits : (N, K) float32, the gradient of the (weighted) mean loss (already divided by N)
    """
    if not isinstance(logits, np.ndarray) or logits.ndim != 2 or logits.shape[0] == 0:
        raise ValueError(f"logits must be a (N, K) array, got shape {getattr(logits, 'shape', None)}")
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    if y.shape != (logits.shape[0],):
        raise ValueError(f"labels must have shape ({logits.shape[0]},), got {y.shape}")
    n_classes = logits.shape[1]
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(f"labels must lie in [0, {n_classes}), got range [{y.min()}, {y.max()}]")
    check_label_smoothing(label_smoothing)
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    dlogits = np.empty_like(logits)
    losses = np.empty(logits.shape[0], np.float64)
    y = y.astype(np.int64, copy=False)
    K.softmax_cross_entropy(dlogits, losses, logits, y, float(label_smoothing))
    if sample_weight is None:  # the mean as a recorded step (numbacnn/program.py) sums it
        stats = np.empty(2, np.float64)
        K.step_stats(stats, losses, logits, y)
        return float(stats[0]), dlogits
    w = np.asarray(sample_weight, np.float64)
    if w.shape != losses.shape or not np.all(w >= 0) or w.sum() <= 0:
        raise ValueError(f"sample_weight must be {losses.shape} non-negative weights with a positive sum")
    # the kernel's rows are (p - onehot) / N: scale row i by w_i * N / sum(w)
    dlogits *= (w * (len(w) / w.sum())).astype(np.float32)[:, None]
    return float((w * losses).sum() / w.sum()), dlogits


def check_label_smoothing(eps: Any) -> float:
    """eps as a float, or a ValueError naming it unless 0 <= eps < 1."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not 0.0 <= eps < 1.0:
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {eps!r}")
    return float(eps)
