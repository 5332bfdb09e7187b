"""The losses: softmax cross-entropy over a batch of logits and its gradient (optionally weighted
and label-smoothed), and the regression losses (mean squared error, Huber) against float targets."""
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
    if sample_weight is None:  # the mean as a recorded step (numbacnn/runtime/program.py) sums it
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


LOSSES = ("cross_entropy", "mse", "huber")


def check_loss(loss: Any, delta: Any = 1.0) -> tuple[str, float]:
    """(name, Huber's delta) of a loss: "cross_entropy" (classification), "mse" or "huber"
    (regression; delta > 0 where |error| turns from squared to linear); a ValueError otherwise."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if loss != "huber":
        return str(loss), 0.0
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)) or not 0 < delta < np.inf:
        raise ValueError(f"huber_delta must be a positive number, got {delta!r}")
    return "huber", float(delta)


def regression_loss(out: np.ndarray, target: np.ndarray, delta: float = 0.0,
                    sample_weight: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The mean over the batch and the outputs of squared errors (``delta`` 0, torch's
    ``MSELoss``) or Huber losses (``HuberLoss(delta=delta)``) of ``out`` (N, K) against
    ``target`` (N, K), and its gradient with respect to ``out``; with ``sample_weight``, the
    weighted mean over the examples."""
    if not isinstance(out, np.ndarray) or out.ndim != 2 or out.shape[0] == 0:
        raise ValueError(f"outputs must be a (N, K) array, got shape {getattr(out, 'shape', None)}")
    target = np.ascontiguousarray(target, np.float32)
    if target.shape != out.shape:
        raise ValueError(f"targets must have the outputs' shape {out.shape}, got {target.shape}")
    out = np.ascontiguousarray(out, np.float32)
    dout = np.empty_like(out)
    losses = np.empty(out.shape[0], np.float64)
    K.regression_loss(dout, losses, out, target, float(delta))
    if sample_weight is None:
        stats = np.empty(2, np.float64)
        K.loss_stats(stats, losses)
        return float(stats[0]), dout
    w = np.asarray(sample_weight, np.float64)
    if w.shape != losses.shape or not np.all(w >= 0) or w.sum() <= 0:
        raise ValueError(f"sample_weight must be {losses.shape} non-negative weights with a positive sum")
    dout *= (w * (len(w) / w.sum())).astype(np.float32)[:, None]
    return float((w * losses).sum() / w.sum()), dout
