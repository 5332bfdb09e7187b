"""Images for prediction from files: PNG / JPEG / BMP / GIF / TIFF (Pillow, the [image] extra), .npy
arrays, IDX image files and the training formats (.npz, .csv), converted to a model's input shape;
series for a series model (.ts, .npy, .npz, .csv).

Picture files are converted to grayscale ("L") for one-channel models and to RGB for three-channel
ones, resized to the model's height x width with bilinear filtering when their size differs, and
scaled to [0, 1] like the training data (grey levels / 255). Arrays (.npy, IDX, .npz, .csv) are taken
as the training loaders take them and must already have the model's shape. Pillow's decompression
bomb guard stays on: an image above its pixel limit is refused, not decoded.
"""
from __future__ import annotations

import os

import numpy as np

from ._files import UntrustedSize, check_npy
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


def _read_npy(path: str) -> np.ndarray:
    """An .npy file's array, its header's shape checked against the file's size before np.load
    allocates it; a DataError with a one-line reason otherwise."""
    try:
        check_npy(path)
        return np.load(path, allow_pickle=False)
    except UntrustedSize as e:
        raise DataError(str(e)) from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: not a readable .npy file ({e})") from None


def _examples(path: str, x: np.ndarray, shape: tuple[int, ...], what: str) -> list[tuple[str, np.ndarray]]:
    """[(name, example)] of a file's examples x, each named path[i] when there are several."""
    if tuple(x.shape[1:]) != tuple(shape):
        raise DataError(f"{path}: {what} of shape {tuple(x.shape[1:])}, the model takes {tuple(shape)}")
    return [(path if len(x) == 1 else f"{path}[{i}]", x[i]) for i in range(len(x))]


def load_series(path: str, shape: tuple[int, int]) -> list[tuple[str, np.ndarray]]:
    """[(name, (C, L) float32 series)] from a .ts, .npy ((N, L) or (N, C, L)), .npz (series: its
    x_test, else x_train) or .csv (label first, one value a column) file; read as train.py reads
    them (a .ts file's labels are not used). Raises DataError with a one-line reason."""
    from .data import _load_npz
    from .data.series import as_series, read_ts

    ext = os.path.splitext(path.lower().removesuffix(".gz"))[1]
    if ext == ".ts":
        x = read_ts(path).x
    elif ext == ".npy":
        raw = _read_npy(path)
        one = raw.ndim == 1 or (raw.ndim == 2 and shape[0] > 1 and raw.shape[0] == shape[0])
        x = as_series(raw[None] if one else raw, path)
    elif ext == ".npz":
        x_train, _, x_test, _, _ = _load_npz(path, series=True)
        x = x_test if x_test is not None else x_train
    elif ext == ".csv":
        x = load_csv(path, series=True)[0]
    else:
        raise DataError(f"{path}: the model takes series: give .ts, .npy, .npz or .csv files")
    return _examples(path, x, shape, "series")


def load_images(path: str, shape: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
    """[(name, (C, H, W) float32 image)] from one file (series models: ``load_series``); raises
    DataError with a one-line reason."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    if len(shape) == 2:
        return load_series(path, shape)  # type: ignore[arg-type]
    ext = os.path.splitext(path.lower().removesuffix(".gz"))[1]
    if ext in PICTURES:
        return [(path, _picture(path, shape)[0])]  # type: ignore[arg-type]
    if ext == ".npy":
        raw = _read_npy(path)
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
    return _examples(path, x, shape, "images")
