"""CIFAR-10 from its official python batches: a ``cifar-10-batches-py/`` directory (``data_batch_1``
.. ``data_batch_5``, ``test_batch``, ``batches.meta``) or the ``cifar-10-python.tar.gz`` archive,
read without extracting it.

The batches are pickles; they are read with an unpickler that builds only dicts, lists, strings,
numbers and numpy arrays, so that a doctored file cannot run code.
"""
from __future__ import annotations

import codecs
import io
import os
import pickle
import tarfile
import zlib
from typing import Any

import numpy as np

from .error import DataError

ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
TEST = "test_batch"
META = "batches.meta"
# the official label names, used when batches.meta is missing
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

_ARRAY = np.zeros(1)
# what a batch pickle needs: numpy arrays, and codecs.encode (a pure function), with which Python 3
# writes bytes into a protocol-2 pickle
_ALLOWED: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                        ("_codecs", "encode"): codecs.encode}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1.x and 2.x pickles
    _ALLOWED[(_module, "_reconstruct")] = _ARRAY.__reduce__()[0]
    _ALLOWED[(_module, "scalar")] = np.float64(0).__reduce__()[0]


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"refused to load {module}.{name} (not part of a CIFAR batch)")


def _unpickle(raw: bytes, where: str) -> dict[str, Any]:
    try:
        obj = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError, zlib.error) as e:
        raise DataError(f"{where}: not a readable CIFAR-10 batch ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: not a CIFAR-10 batch (a pickled {type(obj).__name__}, not a dict)")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _batch(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 3, 32, 32), labels int64 (N,)) of one batch file's bytes."""
    d = _unpickle(raw, where)
    if "data" not in d or "labels" not in d:
        raise DataError(f"{where}: not a CIFAR-10 batch (keys {sorted(d)}; expected data and labels)")
    data, labels = d["data"], np.asarray(d["labels"])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{where}: data must be uint8 rows of 3072 values (3 x 32 x 32), got "
                        f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
    if labels.ndim != 1 or len(labels) != len(data) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{where}: {len(data)} images but labels of shape {labels.shape} "
                        f"({labels.dtype})")
    if len(labels) and (labels.min() < 0 or labels.max() > 255):
        raise DataError(f"{where}: labels out of range [{labels.min()}, {labels.max()}]")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def is_cifar(path: str) -> bool:
    """Whether ``path`` is (or directly holds) CIFAR-10's batches or archive."""
    if os.path.isfile(path):
        return os.path.basename(path) == ARCHIVE
    return any(os.path.exists(os.path.join(path, n)) for n in (TRAIN[0], FOLDER, ARCHIVE))


def _files(path: str) -> tuple[dict[str, bytes], str]:
    """The batch files' bytes by name, and where they were read from."""
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, TRAIN[0])):
        inner = os.path.join(path, FOLDER)
        path = inner if os.path.isdir(inner) else os.path.join(path, ARCHIVE)
    if os.path.isdir(path):
        out = {}
        for name in (*TRAIN, TEST, META):
            f = os.path.join(path, name)
            if os.path.exists(f):
                try:
                    with open(f, "rb") as fh:
                        out[name] = fh.read()
                except OSError as e:
                    raise DataError(f"{f}: cannot read ({e.strerror or e})") from None
        return out, path
    try:
        with tarfile.open(path, "r:gz") as tar:
            out = {}
            for member in tar.getmembers():
                name = os.path.basename(member.name)
                if member.isfile() and name in (*TRAIN, TEST, META):
                    handle = tar.extractfile(member)
                    if handle is not None:
                        out[name] = handle.read()
    except (OSError, tarfile.TarError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: not a readable CIFAR-10 archive ({e})") from None
    return out, path


def load_cifar10(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, list[str]]:
    """(x_train, y_train, x_test, y_test, class names): uint8 images (N, 3, 32, 32) and int64
    labels; the test arrays are None when ``test_batch`` is missing."""
    files, where = _files(path)
    present = [n for n in TRAIN if n in files]
    if not present:
        raise DataError(f"{where}: no CIFAR-10 training batches ({TRAIN[0]} .. {TRAIN[-1]})")
    gaps = [n for n in TRAIN[:TRAIN.index(present[-1])] if n not in files]
    if gaps:
        raise DataError(f"{where}: {gaps[0]} is missing (found {', '.join(present)})")
    parts = [_batch(files[n], os.path.join(where, n)) for n in present]
    x_tr, y_tr = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    x_te = y_te = None
    if TEST in files:
        x_te, y_te = _batch(files[TEST], os.path.join(where, TEST))
    classes = list(CLASSES)
    if META in files:
        meta = _unpickle(files[META], os.path.join(where, META))
        names = meta.get("label_names")
        if not isinstance(names, list) or not names:
            raise DataError(f"{os.path.join(where, META)}: no label_names list")
        classes = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in names]
    top = int(max(y_tr.max(), y_te.max() if y_te is not None and len(y_te) else 0))
    if top >= len(classes):
        raise DataError(f"{where}: label {top} but only {len(classes)} class names")
    return x_tr, y_tr, x_te, y_te, classes
