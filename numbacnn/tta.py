"""Test-time augmentation: a network's logits averaged over mirrored and translated views of each
image, as airbench evaluates. "mirror": the image and its left-right mirror, half each;
"mirror-translate": that (one half), and the same for the image moved one pixel down-right and
one pixel up-left with reflect fill (a quarter each). Not part of an exported ONNX graph, which
computes one view."""
from __future__ import annotations

from typing import Any

import numpy as np

from .augment import augmented

MODES = ("none", "mirror", "mirror-translate")
# (weight, (dy, dx), flipped) of each view
_VIEWS: dict[str, list[tuple[float, tuple[int, int], bool]]] = {
    "none": [(1.0, (0, 0), False)],
    "mirror": [(0.5, (0, 0), False), (0.5, (0, 0), True)],
    "mirror-translate": [(0.25, (0, 0), False), (0.25, (0, 0), True),
                         (0.125, (1, 1), False), (0.125, (1, 1), True),
                         (0.125, (-1, -1), False), (0.125, (-1, -1), True)],
}


def check(mode: Any, in_shape: tuple[int, ...]) -> str:
    """``mode`` (None for "none"), checked against examples of per-example shape ``in_shape``."""
    mode = "none" if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"tta must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "none" and (len(in_shape) != 3 or min(in_shape[1:]) < 2):
        raise ValueError(f"tta {mode!r} needs images (N, C, H, W) of at least 2x2 pixels, got "
                         f"examples of shape {tuple(in_shape)}")
    return mode


def logits(net: Any, x: np.ndarray, mode: str | None = "mirror") -> np.ndarray:
    """(N, K) float32: the weighted mean of ``net``'s inference logits over the views of ``mode``."""
    mode = check(mode, tuple(x.shape[1:]))
    if mode == "none":
        return net.forward(x, training=False)
    x = np.ascontiguousarray(x, np.float32)
    n = len(x)
    idx = np.arange(n, dtype=np.int64)
    labels = np.zeros(n, np.int64)
    total: np.ndarray | None = None
    for weight, (dy, dx), flip in _VIEWS[mode]:
        moves = (np.tile(np.array([[dy, dx]], np.int64), (n, 1)), np.full(n, flip), np.array(True))
        view = augmented(x, labels, idx, moves)[0]
        out = net.forward(view, training=False).astype(np.float64) * weight
        total = out if total is None else total + out
    assert total is not None
    return total.astype(np.float32)
