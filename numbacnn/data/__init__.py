"""Datasets: scikit-learn digits, MNIST-like IDX / npz / csv files, image folders (``folders.py``),
CIFAR-10 (``cifar.py``), ``.ts`` series (``series.py``), and splits. ``load_dataset`` asks the
format registry (``FORMATS``, filled by ``register_format``) which loader reads a path.

Every loader returns float32 images (N, C, H, W) scaled to [0, 1] or float32 series (N, C, L), and
int64 labels (and the class names when the data has them) or float32 regression targets, and
raises ``DataError`` naming the file and the problem.
``python -m numbacnn.data download`` fetches MNIST, Fashion-MNIST, KMNIST and CIFAR-10.
"""
from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._files import UntrustedSize, check_npz, is_npz, looks_like
from .error import DataError
from .series import as_series

MAX_LABEL = 255  # MNIST-like labels are small non-negative integers (IDX stores them as bytes)


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: list[str] | None = None  # class names by label, when the data has them
    skipped: list[tuple[str, str]] = field(default_factory=list)  # unreadable pictures: (path, why)
    task: str = "classify"  # or "regress": y holds float32 targets

    @property
    def n_classes(self) -> int:
        if self.task == "regress":
            return 0
        seen = int(max(self.y_train.max(), self.y_test.max())) + 1
        return max(seen, len(self.classes or ()))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """(C, H, W) for images, (C, L) for series."""
        return tuple(int(s) for s in self.x_train.shape[1:])

    @property
    def is_series(self) -> bool:
        return self.x_train.ndim == 3


# --- validation helpers ----------------------------------------------------------------------------
def as_images(x: np.ndarray, source: str) -> np.ndarray:
    """(N, H, W), (N, C, H, W) or (N, H, W, C) with C in {1, 3} -> float32 NCHW in [0, 1]."""
    x = np.asarray(x)
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise DataError(f"{source}: images must be numeric, got dtype {x.dtype}")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"{source}: images must be real numbers, got dtype {x.dtype}")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[3] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    elif x.ndim != 4:
        raise DataError(f"{source}: images must have shape (N, H, W) or (N, C, H, W), got {x.shape}")
    if x.shape[0] == 0:
        raise DataError(f"{source}: the dataset is empty")
    if min(x.shape[1:]) < 1:
        raise DataError(f"{source}: images have an empty dimension, shape {x.shape}")
    if x.dtype == np.uint8:  # pictures and IDX files: in range and finite by their type
        return np.ascontiguousarray(x, dtype=np.float32) / np.float32(255.0)
    integer = np.issubdtype(x.dtype, np.integer)
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise DataError(f"{source}: images contain NaN or infinite values")
    if integer or x.max() > 1.0:
        if x.min() < 0 or x.max() > 255:
            raise DataError(f"{source}: pixel values must lie in [0, 1] or [0, 255], got "
                            f"[{x.min()}, {x.max()}]")

        x /= np.float32(255.0)
    elif x.min() < 0:
        raise DataError(f"{source}: pixel values must lie in [0, 1] or [0, 255], got min {x.min()}")
    return np.ascontiguousarray(x)


def as_labels(y: np.ndarray, n: int, source: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataError(f"{source}: labels must be a 1-D array, got shape {y.shape}")
    if y.shape[0] != n:
        raise DataError(f"{source}: {n} images but {y.shape[0]} labels")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise DataError(f"{source}: labels must be integers, got dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating):
        if not np.isfinite(y).all() or (y != np.round(y)).any():
            raise DataError(f"{source}: labels must be whole numbers")
    if y.size and (y.min() < 0 or y.max() > MAX_LABEL):
        raise DataError(f"{source}: labels out of range: must lie in [0, {MAX_LABEL}], got "
                        f"[{y.min()}, {y.max()}]")
    return y.astype(np.int64)


# --- IDX ---------------------------------------------------------------------------------------
_IDX_TYPES: dict[int, Any] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
                              0x0E: ">f8"}


MAX_DATA_BYTES = 4 << 30  # a data file (and what it decompresses to) larger than this is refused


def _read_bytes(path: str, cap: Callable[[bytes], int] | None = None) -> bytes:
    """The bytes of a regular file of at most MAX_DATA_BYTES, gunzipped when it is gzip data; a
    device, FIFO or socket (a link to /dev/zero) is refused unread. ``cap(first bytes)``: the most
    bytes the data may hold (an IDX header's size): decompression stops one byte past it, so a
    gzip bomb costs no more memory than the data it claims to be."""
    from .series import read_text_limits

    size = read_text_limits(path, MAX_DATA_BYTES)
    try:
        with open(path, "rb") as f:
            raw = f.read(size + 1)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if not (raw[:2] == b"\x1f\x8b" or path.endswith(".gz")):
        return raw
    chunks: list[bytes] = []
    total, limit = 0, MAX_DATA_BYTES
    data = raw
    try:
        while data:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member (files may hold several)
            while data and not d.eof:
                out = d.decompress(data, min(1 << 20, limit + 1 - total))
                data = d.unconsumed_tail
                chunks.append(out)
                total += len(out)
                if cap is not None and len(chunks) == 1 and out:
                    limit = min(limit, cap(out))
                if total > limit:
                    whose = "its header promises" if limit < MAX_DATA_BYTES else "numbacnn reads"
                    raise DataError(f"{path}: the gzip data expands past the {limit:,} bytes {whose} "
                                    f"(refused before it is all decompressed)")
                if not out and not data:
                    break
            if not d.eof:
                raise DataError(f"{path}: corrupt gzip data (the stream ends early)")
            data = d.unused_data
    except zlib.error as e:
        raise DataError(f"{path}: corrupt gzip data ({e})") from None
    return b"".join(chunks)


def _idx_size(head: bytes) -> int:
    """The bytes an IDX file's header promises (header and data), from its first bytes; the
    generic limit where they do not hold a whole header."""
    if len(head) < 4 or head[2] not in _IDX_TYPES or len(head) < 4 + 4 * head[3]:
        return MAX_DATA_BYTES
    dims = struct.unpack(f">{head[3]}I", head[4:4 + 4 * head[3]])
    return 4 + 4 * head[3] + math.prod(dims) * np.dtype(_IDX_TYPES[head[2]]).itemsize


def read_idx(path: str) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed), validating its header and length."""
    raw = _read_bytes(path, _idx_size)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise DataError(f"{path}: not an IDX file (wrong magic number {raw[:4].hex() or 'empty'}); "
                        f"it looks like {looks_like(path)}")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = header + math.prod(dims) * dtype.itemsize
    if len(raw) < expected:
        raise DataError(f"{path}: truncated: header says {dims} ({expected} bytes), file has "
                        f"{len(raw)} bytes")
    if len(raw) > expected:
        raise DataError(f"{path}: {len(raw) - expected} unexpected bytes after the data {dims}")
    return np.frombuffer(raw, dtype, offset=header).reshape(dims)


def load_idx(images_path: str, labels_path: str) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(images_path)
    if images.ndim != 3:
        raise DataError(f"{images_path}: an images file must have 3 dimensions (N, H, W), got "
                        f"{images.shape}")
    labels = read_idx(labels_path)
    if labels.ndim != 1:
        raise DataError(f"{labels_path}: a labels file must have 1 dimension, got {labels.shape}")
    if len(labels) != len(images):
        raise DataError(f"{images_path} has {len(images)} images but {labels_path} has "
                        f"{len(labels)} labels")
    return as_images(images, images_path), as_labels(labels, len(images), labels_path)


def _idx_pair_in_dir(directory: str, split: str) -> tuple[str, str] | None:
    names = os.listdir(directory)

    def find(kind: str) -> str | None:
        for n in sorted(names):
            low = n.lower()
            if low.startswith(split) and f"{kind}-idx" in low.replace(".", "-"):
                return os.path.join(directory, n)
        return None

    img, lab = find("images"), find("labels")
    if img is None and lab is None:
        return None
    if img is None or lab is None:
        raise DataError(f"{directory}: found {os.path.basename(img or lab or '')} but not its "
                        f"{'labels' if lab is None else 'images'} file")
    return img, lab


def labels_beside(images_path: str) -> str:
    """The labels file that goes with an IDX images file (images -> labels, idx3 -> idx1)."""
    d, name = os.path.split(images_path)
    cand = name.replace("images", "labels").replace("idx3", "idx1")
    for c in (cand, cand + ".gz", cand[:-3] if cand.endswith(".gz") else cand):
        if c != name and os.path.exists(os.path.join(d, c)):
            return os.path.join(d, c)
    raise DataError(f"{images_path}: no labels file found beside it (looked for {cand}); "
                    f"pass --labels")


# --- npz / csv -----------------------------------------------------------------------------------
def load_npz(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    return _load_npz(path)[:4]  # type: ignore[return-value]


def _load_npz(path: str, series: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                                        np.ndarray | None, list[str] | None]:
    """x_train, y_train, x_test, y_test and the optional ``classes`` (strings, one per label).
    Images, or series (N, L) / (N, C, L) when ``series`` or when the file's ``layout`` array
    holds the string "series"."""
    classes = None
    if not is_npz(path):
        raise DataError(f"{path}: not an .npz file (expected a zip of arrays x_train, y_train[, x_test, "
                        f"y_test] or x, y); it looks like {looks_like(path)}")
    try:
        check_npz(path)  # sizes from the zip directory and the array headers, before any allocation
    except UntrustedSize as e:
        raise DataError(str(e)) from None
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = set(z.files)
            # numpy reads only an array's own bytes, so a member whose sizes were damaged can load
            # altered data without reaching the end where zipfile checks the CRC: check every one
            bad = z.zip.testzip() if hasattr(z, "zip") else None
            if bad is not None:
                raise DataError(f"{path}: corrupt .npz file (member {bad} fails its CRC check)")
            if "classes" in keys:
                classes = _class_names(z["classes"], f"{path}[classes]")
            if "layout" in keys:
                layout = z["layout"]
                if layout.shape != () or layout.dtype.kind not in "US" or str(layout) not in (
                        "images", "series"):
                    raise DataError(f"{path}[layout]: must be the string 'images' or 'series'")
                series = series or str(layout) == "series"
            if {"x_train", "y_train"} <= keys:
                xtr, ytr = z["x_train"], z["y_train"]
                xte = z["x_test"] if "x_test" in keys else None
                yte = z["y_test"] if "y_test" in keys else None
            elif {"x", "y"} <= keys:
                xtr, ytr, xte, yte = z["x"], z["y"], None, None
            else:
                raise DataError(f"{path}: expected arrays x_train, y_train[, x_test, y_test] or x, y; "
                                f"found {sorted(keys) or 'none'}")
    except DataError:
        raise
    except (OSError, ValueError, zlib.error, EOFError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from None
    except Exception as e:  # zipfile.BadZipFile and friends from a corrupt archive
        raise DataError(f"{path}: corrupt .npz file ({type(e).__name__}: {e})") from None
    check = as_series if series else as_images
    xtr = check(xtr, f"{path}[x_train]")
    ytr = as_labels(ytr, len(xtr), f"{path}[y_train]")
    if (xte is None) != (yte is None):
        raise DataError(f"{path}: has only one of x_test / y_test")
    if xte is not None and yte is not None:
        xte = check(xte, f"{path}[x_test]")
        yte = as_labels(yte, len(xte), f"{path}[y_test]")
        if xte.shape[1:] != xtr.shape[1:]:
            raise DataError(f"{path}: train images are {xtr.shape[1:]} but test images are "
                            f"{xte.shape[1:]}")
    return xtr, ytr, xte, yte, classes


def _class_names(a: np.ndarray, source: str) -> list[str]:
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "US" or not a.size:
        raise DataError(f"{source}: class names must be a 1-D array of strings, got {a.dtype} {a.shape}")
    names = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in a.tolist()]
    if len(set(names)) != len(names):
        raise DataError(f"{source}: class names repeat: {names}")
    return names


def _check_classes(classes: list[str] | None, y: np.ndarray, source: str) -> None:
    if classes is not None and len(y) and int(y.max()) >= len(classes):
        raise DataError(f"{source}: label {int(y.max())} but only {len(classes)} class names")


def read_classes_txt(directory: str) -> list[str] | None:
    """Class names, one per line, from ``classes.txt`` in an IDX directory (written by
    ``python -m numbacnn.data download``), or None."""
    path = os.path.join(directory, "classes.txt")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            names = [ln.strip() for ln in f if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    return _class_names(np.array(names), path) if names else None


def load_csv(path: str, series: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Label in the first column, one pixel per column (a square number of them), header optional;
    with ``series``, one value of a univariate series per column."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a text (UTF-8) csv file") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise DataError(f"{path}: the dataset is empty")
    first = lines[0].split(",")
    start = 0
    try:
        [float(v) for v in first]
    except ValueError:
        start = 1  # a header row
    rows = lines[start:]
    if not rows:
        raise DataError(f"{path}: the dataset is empty (only a header)")
    width = len(rows[0].split(","))
    data = np.empty((len(rows), width), np.float64)
    for i, ln in enumerate(rows):
        cells = ln.split(",")
        if len(cells) != width:
            raise DataError(f"{path}: line {i + start + 1} has {len(cells)} columns, expected {width}")
        try:
            data[i] = [float(c) for c in cells]
        except ValueError:
            bad = next(c for c in cells if not _is_number(c))
            raise DataError(f"{path}: line {i + start + 1}: non-numeric cell {bad.strip()[:20]!r}") from None
    if series:
        x = as_series(data[:, 1:], path)
        return x, as_labels(data[:, 0], len(x), path)
    n_pix = width - 1
    side = int(round(np.sqrt(n_pix)))
    if n_pix < 1 or side * side != n_pix:
        raise DataError(f"{path}: {n_pix} pixel columns is not a square image (label first, then "
                        f"one column per pixel)")
    x = as_images(data[:, 1:].reshape(-1, side, side), path)
    return x, as_labels(data[:, 0], len(x), path)


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


# --- datasets ------------------------------------------------------------------------------------
def load_digits_dataset() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits (1,797 images), as (N, 1, 8, 8) in [0, 1].

    Read straight from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``: 64
    pixel values 0-16, then the label, per row), without importing scikit-learn, which would take
    most of a second; ``sklearn.datasets.load_digits`` only where that file is not found."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # locates the package without importing it
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((p for p in (os.path.join(r, "datasets", "data", "digits.csv.gz") for r in roots)
                 if os.path.exists(p)), None)
    if path is None:  # pragma: no cover - a scikit-learn with another layout
        from sklearn.datasets import load_digits

        d = load_digits()
        images, target = d.images, d.target
    else:
        rows = np.loadtxt(path, delimiter=",", dtype=np.float32)
        images, target = rows[:, :-1].reshape(-1, 8, 8), rows[:, -1]
    return (images.astype(np.float32)[:, None] / np.float32(16.0)), target.astype(np.int64)


def stratified_split(x: np.ndarray, y: np.ndarray, test_size: float, seed: int):
    """A seeded random hold-out of ceil(test_size * N) examples: ``x_train, x_test, y_train,
    y_test``, each part in random order.

    Stratified when every class has at least 2 examples and both parts can hold one of each class:
    each class gives its share of the test part (shares rounded by largest remainder, ties to the
    smaller label), drawn at random from its examples. Otherwise a plain random split."""
    if not 0.0 < test_size < 1.0:
        raise DataError(f"test size must lie in (0, 1), got {test_size}")
    n = len(y)
    n_test = math.ceil(test_size * n)
    if n_test >= n:
        raise DataError(f"cannot split {n} examples with test size {test_size}: the test part would "
                        f"take {n_test} and leave none to train on")
    rng = np.random.default_rng(seed)
    _, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    if counts.min() >= 2 and min(n_test, n - n_test) >= len(counts):
        quota = counts * (n_test / n)
        take = np.floor(quota).astype(np.int64)
        extra = np.argsort(-(quota - take), kind="stable")[:n_test - take.sum()]
        take[extra] += 1
        order = np.argsort(inverse, kind="stable")  # examples grouped by class, in order
        test = np.concatenate([rng.permutation(members)[:t] for members, t in
                               zip(np.split(order, np.cumsum(counts)[:-1]), take)])
        is_test = np.zeros(n, bool)
        is_test[test] = True
        train, test = rng.permutation(np.flatnonzero(~is_test)), rng.permutation(test)
    else:
        perm = rng.permutation(n)
        train, test = perm[n_test:], perm[:n_test]
    return x[train], x[test], y[train], y[test]


@dataclass(frozen=True)
class Options:
    """What a loader may be asked for besides the path: an IDX images file's ``labels`` file;
    image folders' ``image_size``, ``channels``, ``cache_dir`` and ``progress``; ``series``
    (an .npz or .csv file holds series, not images); series' ``series_length`` (fit them to it,
    or "max"), ``series_fit`` (how: "pad", the default, or "resample") and ``fill_missing`` (the
    value put for a missing one)."""

    labels: str | None = None
    image_size: tuple[int, int] | None = None
    channels: int | None = None
    cache_dir: str | None = None
    progress: bool = False
    series: bool = False
    series_length: int | str | None = None
    fill_missing: float | None = None
    series_fit: str | None = None

    def given(self) -> set[str]:
        return {k for k, v in self.__dict__.items() if v is not None and v is not False and k != "progress"}


@dataclass
class Loaded:
    """What a format's loader returns: training data, the test split when the data has one, class
    names, skipped files, and the task ("classify", or "regress": float32 targets in y)."""

    name: str
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    classes: list[str] | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    task: str = "classify"


@dataclass(frozen=True)
class Format:
    """An entry of the format registry: ``claims(path)`` says whether this format reads ``path``;
    ``load(path, options)`` reads it; ``takes``: the options that apply to it (any other given
    option is refused with one line); ``reads(path)``: the files and directories it reads (a
    directory: everything inside it), which a run's outputs must not overwrite."""

    name: str
    claims: Callable[[str], bool]
    load: Callable[[str, Options], Loaded]
    takes: frozenset[str] = frozenset()
    reads: Callable[[str], list[str]] = lambda path: [path]


FORMATS: list[Format] = []  # in the order load_dataset asks them; the first that claims a path reads it


def register_format(name: str, claims: Callable[[str], bool], takes: tuple[str, ...] = (),
                    reads: Callable[[str], list[str]] | None = None
                    ) -> Callable[[Callable[[str, Options], Loaded]], Callable[[str, Options], Loaded]]:
    """Decorator: add a loader to the registry (after the ones before it)."""
    def add(load: Callable[[str, Options], Loaded]) -> Callable[[str, Options], Loaded]:
        FORMATS.append(Format(name, claims, load, frozenset(takes), *([reads] if reads else [])))
        return load
    return add


def input_files(path: str | None, labels: str | None = None) -> list[str]:
    """What loading ``path`` (and ``labels``) reads, as its format says: the files (a ``.ts``
    file's test file beside it, an IDX file's labels), or a directory whose whole content is data."""
    if path is None or path == "digits" or not os.path.exists(path):
        return []
    fmt = next((f for f in FORMATS if f.claims(path)), None)
    found = fmt.reads(path) if fmt else [path]
    return found + ([labels] if labels and os.path.exists(labels) else [])


_OPTION_FLAGS = {"labels": "--labels", "image_size": "--image-size", "channels": "--channels",
                 "cache_dir": "--cache-dir", "series": "--series", "series_length": "--series-length",
                 "series_fit": "--series-fit", "fill_missing": "--fill-missing"}


def load_dataset(path: str | None = None, labels: str | None = None, test_size: float = 0.2,
                 seed: int = 0, image_size: int | tuple[int, int] | None = None,
                 channels: int | None = None, cache_dir: str | None = None,
                 progress: bool = False, series: bool = False, series_length: int | str | None = None,
                 series_fit: str | None = None,
                 fill_missing: float | None = None) -> Dataset:
    """Load ``path`` (None: the embedded digits) and return train and test arrays.

    ``path`` is read by the first format of the registry (``FORMATS``) that claims it: a directory
    of MNIST IDX files, CIFAR-10's ``cifar-10-batches-py/`` (or its ``.tar.gz``), an image folder
    (one sub-folder of pictures per class, optionally under ``train/`` and ``test/``), a ``.ts``
    series file (its ``_TEST.ts`` beside a ``_TRAIN.ts``), an ``.npz`` or ``.csv`` file (of images,
    or of series with ``series=True``), or an IDX file. Data without a test split is split with a
    stratified ``test_size`` hold-out seeded by ``seed`` (a shuffled one for regression targets).
    The options apply to the formats named in ``Options``; one given to another is refused.
    """
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    opts = Options(labels, size, channels, cache_dir, progress, series, series_length, fill_missing,
                   series_fit)
    if path is None or path == "digits":
        if opts.given():
            raise DataError(f"{_flags(opts.given())} not apply to the embedded digits")
        x, y = load_digits_dataset()
        got = Loaded("digits", x, y)
    elif not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    elif not (os.path.isdir(path) or os.path.isfile(path)):  # a device, FIFO, socket (or a link to one)
        raise DataError(f"{path}: not a regular file (a device, FIFO or socket is not read)")
    else:
        fmt = next((f for f in FORMATS if f.claims(path)), None)
        if fmt is None:
            if os.path.isdir(path):
                raise DataError(f"{path}: no MNIST IDX files (train-images-idx3-ubyte[.gz], ...), no "
                                f"CIFAR-10 batches and no class folders of pictures in this directory")
            raise DataError(f"{path}: not a data file numbacnn reads (expected "
                            f"{', '.join(f.name for f in FORMATS)}); it looks like {looks_like(path)}")
        extra = opts.given() - fmt.takes
        if extra:
            raise DataError(f"{_flags(extra)} not apply to {path} ({fmt.name})")
        got = fmt.load(path, opts)
    x, y, x_te, y_te = got.x, got.y, got.x_test, got.y_test
    if x_te is not None and x_te.shape[1:] != x.shape[1:]:
        raise DataError(f"{path}: train examples are {x.shape[1:]} but test examples are {x_te.shape[1:]}")
    if x_te is None:
        if got.task == "regress":
            x, x_te, y, y_te = shuffled_split(x, y, test_size, seed)
        else:
            x, x_te, y, y_te = stratified_split(x, y, test_size, seed)
    if got.task != "regress" and len(np.unique(y)) < 2:
        raise DataError(f"{path or got.name}: training labels hold a single class; need at least 2")
    assert y_te is not None
    if got.task != "regress":
        _check_classes(got.classes, np.concatenate([y, y_te]), str(path))
    return Dataset(got.name, np.ascontiguousarray(x), y, np.ascontiguousarray(x_te), y_te, got.classes,
                   got.skipped, got.task)


def _flags(names: set[str]) -> str:
    flags = sorted(_OPTION_FLAGS[k] for k in names)
    return ", ".join(flags) + (" does" if len(flags) == 1 else " do")


def shuffled_split(x: np.ndarray, y: np.ndarray, test_size: float, seed: int):
    """A seeded shuffled hold-out of ``test_size`` (for regression targets, which have no classes)."""
    if not 0.0 < test_size < 1.0:
        raise DataError(f"test_size must be in (0, 1), got {test_size}")
    n = len(y)
    n_test = int(round(n * test_size))
    if n_test < 1 or n_test >= n:
        raise DataError(f"cannot hold out {test_size:.0%} of {n} examples: too few")
    order = np.random.default_rng(seed).permutation(n)
    return x[order[n_test:]], x[order[:n_test]], y[order[n_test:]], y[order[:n_test]]


# --- the registry's entries, in the order they are asked -----------------------------------------
def _idx_directory_files(path: str) -> list[str]:
    return [f for pair in _idx_pairs(path) or () if pair for f in pair]


@register_format("an IDX directory", lambda p: _idx_pairs(p) is not None, reads=_idx_directory_files)
def _load_idx_directory(path: str, opts: Options) -> Loaded:
    train, test = _idx_pairs(path)  # type: ignore[misc]  # claimed: one of them is there
    name = os.path.basename(os.path.normpath(path))
    if train is not None and test is not None:
        (x, y), (x_te, y_te) = load_idx(*train), load_idx(*test)
        return Loaded(name, x, y, x_te, y_te, read_classes_txt(path))
    x, y = load_idx(*(train or test))  # type: ignore[misc]
    return Loaded(name, x, y, classes=read_classes_txt(path))


def _is_cifar(path: str) -> bool:
    from .cifar import is_cifar

    return is_cifar(path)


@register_format("CIFAR-10", _is_cifar)
def _load_cifar(path: str, opts: Options) -> Loaded:
    from .cifar import load_cifar10

    x, y, x_te, y_te, classes = load_cifar10(path)  # uint8 arrays
    return Loaded("cifar-10", as_images(x, path), y, None if x_te is None else as_images(x_te, path), y_te,
                  classes)


@register_format("an image folder", lambda p: is_image_folder(p), ("image_size", "channels", "cache_dir"))
def _load_folder(path: str, opts: Options) -> Loaded:
    from .folders import load_image_folder

    got = load_image_folder(path, opts.image_size, opts.channels, opts.cache_dir, progress=opts.progress)
    x_te = None if got.x_test is None else as_images(got.x_test, path)
    return Loaded(os.path.basename(os.path.normpath(path)), as_images(got.x_train, path), got.y_train,
                  x_te, got.y_test, got.classes, got.skipped)


def _suffix(*ends: str) -> Callable[[str], bool]:
    return lambda p: os.path.isfile(p) and p.lower().endswith(ends)


@register_format(".ts series", _suffix(".ts"), ("series_length", "fill_missing", "series_fit"),
                 reads=lambda p: [p, *filter(None, [_test_beside(p)])])
def _load_ts(path: str, opts: Options) -> Loaded:
    from .series import fit_length, read_ts

    fit = opts.series_fit or "pad"
    train = read_ts(path, opts.series_length, opts.fill_missing, fit)
    task = "classify" if train.classes is not None else "regress"
    test_path = _test_beside(path)
    if test_path is None:
        return Loaded(train.name, train.x, train.y, classes=train.classes, task=task)
    length = train.x.shape[2]
    test = read_ts(test_path, length if opts.series_length is not None else None, opts.fill_missing, fit)
    if (test.classes is None) != (train.classes is None):
        held = "class labels" if test.classes else "targets"
        raise DataError(f"{test_path}: holds {held}, {path} does not")
    if test.classes is not None and train.classes is not None and test.classes != train.classes:
        raise DataError(f"{test_path}: @classLabel lists {' '.join(test.classes)}, {path} lists "
                        f"{' '.join(train.classes)}")
    if test.x.shape[1:] != train.x.shape[1:]:
        if test.x.shape[1] == train.x.shape[1] and opts.series_length is not None:
            test.x = fit_length(test.x, length)
        else:
            raise DataError(f"{test_path}: series of shape {test.x.shape[1:]}, the training file's are "
                            f"{train.x.shape[1:]} (--series-length N pads or truncates both)")
    return Loaded(train.name, train.x, train.y, test.x, test.y, train.classes, task=task)


def _test_beside(path: str) -> str | None:
    """X_TEST.ts beside X_TRAIN.ts (any case of TRAIN), or None."""
    d, name = os.path.split(path)
    stem = name[:-3]
    if not stem.upper().endswith("TRAIN"):
        return None
    for cand in (stem[:-5] + "TEST", stem[:-5] + "test", stem[:-5] + "Test"):
        full = os.path.join(d, cand + name[-3:])
        if os.path.isfile(full):
            return full
    return None


@register_format(".npz", _suffix(".npz"), ("series",))
def _load_npz_entry(path: str, opts: Options) -> Loaded:
    x, y, x_te, y_te, classes = _load_npz(path, opts.series)
    return Loaded(os.path.basename(path), x, y, x_te, y_te, classes)


@register_format(".csv", _suffix(".csv", ".csv.gz"), ("series",))
def _load_csv_entry(path: str, opts: Options) -> Loaded:
    x, y = load_csv(path, series=opts.series)
    return Loaded(os.path.basename(path), x, y)


def _looks_idx(path: str) -> bool:
    return os.path.isfile(path) and looks_like(path) in ("an IDX file", "gzip-compressed data")


def _idx_file_and_labels(path: str) -> list[str]:
    try:
        return [path, labels_beside(path)]
    except DataError:  # said when it is loaded
        return [path]


@register_format("IDX images", _looks_idx, ("labels",), reads=_idx_file_and_labels)
def _load_idx_file(path: str, opts: Options) -> Loaded:
    x, y = load_idx(path, opts.labels or labels_beside(path))
    return Loaded(os.path.basename(path), x, y)


def _idx_pairs(path: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None] | None:
    """A directory's (train, t10k) IDX file pairs, None where one is missing; None when it holds
    neither (or is not a directory)."""
    if not os.path.isdir(path):
        return None
    pairs = _idx_pair_in_dir(path, "train"), _idx_pair_in_dir(path, "t10k")
    return None if pairs == (None, None) else pairs


def is_image_folder(path: str) -> bool:
    """Whether ``load_dataset`` reads ``path`` as an image folder: a directory with a sub-folder
    (of class folders, or of pictures) that holds no IDX files and no CIFAR-10 batches."""
    from .cifar import is_cifar

    return (os.path.isdir(path) and _idx_pairs(path) is None and not is_cifar(path)
            and any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(path)))


def write_idx(path: str, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzip-compressed when path ends with .gz)."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    payload = bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(payload)
