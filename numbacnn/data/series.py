"""Series data: the ``.ts`` text format of aeon and sktime, and the checks every series loader shares
(float32 (N, C, L), finite, equal lengths by an explicit ``series_length`` or not at all).

A ``.ts`` file holds comment lines (``#``), header tags (``@problemName``, ``@timeStamps``,
``@missing``, ``@univariate``, ``@dimensions``, ``@equalLength``, ``@seriesLength``,
``@classLabel true <names>`` or ``@targetLabel true``), then ``@data`` and one case a line:
channels separated by ``:``, values by ``,``, ``?`` a missing value, the label or target last.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import numpy as np

from .error import DataError

MAX_TEXT_BYTES = 1 << 30  # a series text file larger than this is refused before it is read
MAX_SERIES = 1 << 24  # values in one case (channels x length)


@dataclass
class Series:
    """A ``.ts`` file's cases: ``x`` float32 (N, C, L) (NaN where a value is missing), labels
    ``y`` (int64 indices into ``classes``) or float32 ``targets``, and the header's name."""

    x: np.ndarray
    y: np.ndarray
    classes: list[str] | None  # None: a regression file (@targetLabel)
    name: str
    lengths: np.ndarray  # each case's length before padding


def read_text_limits(path: str, limit: int) -> int:
    """The size of ``path`` if it is a regular file of at most ``limit`` bytes; else the one-line
    DataError (a FIFO, a device or a link to one is refused without being opened)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path}: not a regular file (a device, FIFO or socket is not read)")
    if st.st_size > limit:
        raise DataError(f"{path}: {st.st_size:,} bytes is more than the {limit:,} a data file may hold")
    return int(st.st_size)


def read_text(path: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (a FIFO, a device or a file
    that is larger is refused without reading it)."""
    read_text_limits(path, limit)
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(raw) > limit:
        raise DataError(f"{path}: more than the {limit:,} bytes a series file may hold")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a UTF-8 text file") from None


_BOOL = {"true": True, "false": False}


FITS = ("pad", "resample")


def read_ts(path: str, series_length: int | str | None = None, fill: float | None = None,
            fit: str = "pad") -> Series:
    """Read a ``.ts`` file. Unequal lengths need ``series_length`` (an int, or "max": the longest
    case), to which each case is fitted: ``fit`` "pad" (zeros at its end, or truncated) or
    "resample" (linearly interpolated to that many evenly spaced points, as aeon's TSInterpolator;
    JapaneseVowels' equal-length form is made so). Missing values (``?``) need ``fill`` (the value
    put in their place, before a resampling). Anything else malformed: a DataError naming the line."""
    if fit not in FITS:
        raise DataError(f"series fit must be one of {', '.join(FITS)}, got {fit!r}")
    text = read_text(path)
    header: dict[str, list[str]] = {}
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not s.startswith("@"):
            raise DataError(f"{path}: line {i + 1}: expected a header tag (@...) or @data before the data")
        tag, _, rest = s[1:].partition(" ")
        tag = tag.lower()
        if tag == "data":
            start = i + 1
            break
        if tag in header:
            raise DataError(f"{path}: line {i + 1}: header tag @{tag} given twice")
        header[tag] = rest.split()
    if start is None:
        raise DataError(f"{path}: no @data line: not a .ts file (the aeon / sktime series format)")

    def flag(tag: str) -> bool | None:
        if tag not in header:
            return None
        v = header[tag]
        if not v or v[0].lower() not in _BOOL:
            raise DataError(f"{path}: header @{tag} must be true or false, got {' '.join(v) or 'nothing'!r}")
        return _BOOL[v[0].lower()]

    if flag("timestamps"):
        raise DataError(f"{path}: @timeStamps true (series as (time, value) pairs) is not supported")
    has_class, has_target = flag("classlabel"), flag("targetlabel")
    if has_class and has_target:
        raise DataError(f"{path}: both @classLabel and @targetLabel are true")
    if not has_class and not has_target:
        raise DataError(f"{path}: neither @classLabel nor @targetLabel is true: the file holds no labels")
    classes = header["classlabel"][1:] if has_class else None
    if classes is not None:
        if not classes:
            raise DataError(f"{path}: @classLabel true lists no class names")
        if len(set(classes)) != len(classes):
            raise DataError(f"{path}: @classLabel lists a class twice: {' '.join(classes)}")
    dims = _header_int(path, header, "dimensions")
    declared_length = _header_int(path, header, "serieslength")
    equal = flag("equallength")

    cases: list[list[np.ndarray]] = []
    labels: list[str] = []
    missing = False
    for i in range(start, len(lines)):
        s = lines[i].strip()
        if not s or s.startswith("#"):
            continue
        where = f"{path}: line {i + 1}"
        *channels, label = s.split(":")
        if not channels:
            raise DataError(f"{where}: expected channels separated by ':' and a label last")
        if dims is not None and len(channels) != dims:
            raise DataError(f"{where}: {len(channels)} channels, the header's @dimensions says {dims}")
        if cases and len(channels) != len(cases[0]):
            raise DataError(f"{where}: {len(channels)} channels, the first case has {len(cases[0])}")
        values = []
        for c, text_c in enumerate(channels):
            cells = text_c.split(",")
            if len(cells) * len(channels) > MAX_SERIES:
                raise DataError(f"{where}: more than {MAX_SERIES:,} values in one case")
            try:
                v = np.array([np.nan if t.strip() in ("?", "NaN", "nan") else float(t) for t in cells],
                             np.float64)
            except ValueError:
                bad = next(t for t in cells if not _is_float(t))
                raise DataError(f"{where}: channel {c + 1}: not a number: {bad.strip()[:20]!r}") from None
            if np.isinf(v).any():
                raise DataError(f"{where}: channel {c + 1}: an infinite value")
            missing |= bool(np.isnan(v).any())
            values.append(v)
        if len({len(v) for v in values}) != 1:
            raise DataError(f"{where}: its channels have different lengths "
                            f"({', '.join(str(len(v)) for v in values)})")
        cases.append(values)
        labels.append(label.strip())
    if not cases:
        raise DataError(f"{path}: no cases after @data")
    if missing and fill is None:
        raise DataError(f"{path}: holds missing values ('?'); give a fill value for them (--fill-missing)")
    lengths = np.array([len(c[0]) for c in cases], np.int64)
    if equal and len(set(lengths.tolist())) != 1:
        raise DataError(f"{path}: @equalLength true but the cases have lengths {lengths.min()} to "
                        f"{lengths.max()}")
    if declared_length is not None and equal and lengths[0] != declared_length:
        raise DataError(f"{path}: @seriesLength {declared_length} but the cases have length {lengths[0]}")
    target = _target_length(path, lengths, series_length)
    x = np.zeros((len(cases), len(cases[0]), target), np.float32)
    for i_case, case in enumerate(cases):
        for ch, v in enumerate(case):
            if fit == "resample" and len(v) != target:
                v = np.asarray(v, np.float64)
                if missing:
                    v = np.where(np.isnan(v), np.float64(fill), v)  # type: ignore[arg-type]
                x[i_case, ch] = np.interp(np.linspace(0, len(v) - 1, target), np.arange(len(v)), v)
                continue
            k = min(len(v), target)
            x[i_case, ch, :k] = v[:k]
    if missing:
        x[np.isnan(x)] = np.float32(fill)  # type: ignore[arg-type]
    name = " ".join(header.get("problemname", [])) or os.path.splitext(os.path.basename(path))[0]
    if classes is not None:
        index = {c: k for k, c in enumerate(classes)}
        unknown = sorted({lab for lab in labels if lab not in index})
        if unknown:
            raise DataError(f"{path}: label {unknown[0]!r} is not among @classLabel's {' '.join(classes)}")
        y = np.array([index[lab] for lab in labels], np.int64)
    else:
        try:
            y = np.array([float(lab) for lab in labels], np.float32)
        except ValueError:
            bad = next(lab for lab in labels if not _is_float(lab))
            raise DataError(f"{path}: target {bad[:20]!r} is not a number (@targetLabel true)") from None
        if not np.isfinite(y).all():
            raise DataError(f"{path}: a target is not finite")
    return Series(x, y, classes, name, lengths)


def _header_int(path: str, header: dict[str, list[str]], tag: str) -> int | None:
    if tag not in header:
        return None
    v = header[tag]
    if len(v) != 1 or not v[0].isdigit() or int(v[0]) < 1:
        raise DataError(f"{path}: header @{tag} must be a positive integer, got {' '.join(v) or 'nothing'!r}")
    return int(v[0])


def _target_length(path: str, lengths: np.ndarray, series_length: int | str | None) -> int:
    if series_length is None:
        if len(set(lengths.tolist())) != 1:
            raise DataError(f"{path}: the cases have unequal lengths ({lengths.min()} to {lengths.max()}); "
                            f"give a length to fit them to (--series-length N or max; --series-fit "
                            f"resample interpolates instead of padding)")
        return int(lengths[0])
    if series_length == "max":
        return int(lengths.max())
    if (isinstance(series_length, bool) or not isinstance(series_length, (int, np.integer))
            or series_length < 1):
        raise DataError(f"series length must be a positive integer or 'max', got {series_length!r}")
    return int(series_length)


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def fit_length(x: np.ndarray, length: int) -> np.ndarray:
    """Series (N, C, L) padded with zeros at their end or truncated to ``length``."""
    out = np.zeros(x.shape[:2] + (length,), np.float32)
    k = min(length, x.shape[2])
    out[:, :, :k] = x[:, :, :k]
    return out


def as_series(x: np.ndarray, source: str) -> np.ndarray:
    """(N, L) or (N, C, L) numbers -> float32 (N, C, L), finite; a clear error for anything else."""
    x = np.asarray(x)
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise DataError(f"{source}: series must be numeric, got dtype {x.dtype}")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"{source}: series must be real numbers, got dtype {x.dtype}")
    if x.ndim == 2:
        x = x[:, None]
    if x.ndim != 3:
        raise DataError(f"{source}: series must have shape (N, L) or (N, C, L), got {x.shape}")
    if x.shape[0] == 0 or min(x.shape[1:]) < 1:
        raise DataError(f"{source}: no series, or an empty dimension (shape {x.shape})")
    x = np.ascontiguousarray(x, np.float32)
    if not np.isfinite(x).all():
        raise DataError(f"{source}: series contain NaN or infinite values")
    return x
