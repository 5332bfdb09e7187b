"""Images for prediction from files: PNG / JPEG / BMP / GIF / TIFF (Pillow, the [image] extra), .npy
arrays, IDX image files and the training formats (.npz, .csv), converted to a model's input shape.

Picture files are converted to grayscale ("L") for one-channel models and to RGB for three-channel
ones, resized to the model's height x width with bilinear filtering when their size differs, and
scaled to [0, 1] like the training data (grey levels / 255). Arrays (.npy, IDX, .npz, .csv) are taken
as the training loaders take them and must already have the model's shape. Pillow's decompression
bomb guard stays on: an image above its pixel limit is refused, not decoded.
"""
from __future__ import annotations

import os

import numpy as np

from .data import DataError, as_images, load_csv, load_npz, read_idx
from .data.folders import PICTURES, read_picture


def _picture(path: str, shape: tuple[int, int, int]) -> np.ndarray:
    c, h, w = shape
    if c not in (1, 3):
        raise DataError(f"{path}: the model takes {c}-channel images; pictures give 1 (grey) or 3 (RGB)")
    return as_images(read_picture(path, c, (h, w))[None], path)  # as the image-folder loader reads it


# Float pixels whose brightest value lies in (1, SMALLEST_255_MAX) are on neither scale numbacnn trains
# on ([0, 1], or [0, 255] divided by 255): read as 0-255 they would be nearly black and the predictions
# garbage. scikit-learn's digits (0-16) are the usual case.
SMALLEST_255_MAX = 32.0


def _check_scale(raw: np.ndarray, path: str) -> None:
    if raw.dtype.kind == "f" and raw.size and np.isfinite(raw).all() and 1.0 < raw.max() < SMALLEST_255_MAX:
        raise DataError(f"{path}: pixel values reach only {raw.max():g}, neither the [0, 1] nor the "
                        f"[0, 255] scale the network was trained on; scale them first (scikit-learn's "
                        f"digits, 0-16: divide by 16)")


def load_images(path: str, shape: tuple[int, int, int]) -> list[tuple[str, np.ndarray]]:
    """[(name, (C, H, W) float32 image)] from one file; raises DataError with a one-line reason."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    ext = os.path.splitext(path.lower().removesuffix(".gz"))[1]
    if ext in PICTURES:
        return [(path, _picture(path, shape)[0])]
    if ext == ".npy":
        try:
            raw = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a readable .npy file ({e})") from None
        _check_scale(raw, path)
        x = as_images(raw[None] if raw.ndim == 2 or (raw.ndim == 3 and raw.shape[0] in (1, 3)
                                                     and shape[0] == raw.shape[0]) else raw, path)
    elif ext == ".npz":
        x_train, _, x_test, _ = load_npz(path)
        x = x_test if x_test is not None else x_train
    elif ext == ".csv":
        x = load_csv(path)[0]
    else:  # IDX images (plain or .gz)
        x = as_images(read_idx(path), path)
    if tuple(x.shape[1:]) != tuple(shape):
        raise DataError(f"{path}: images of shape {tuple(x.shape[1:])}, the model takes {tuple(shape)}")
    return [(path if len(x) == 1 else f"{path}[{i}]", x[i]) for i in range(len(x))]
