"""What a file looks like from its first bytes, for error messages that name what was found and
what was expected (never numpy's advice to load a file with pickles); whether an .npy file's or an
.npz archive's own sizes hold before numpy allocates what they claim; whether an output would
overwrite an input; how much memory is left to allocate what a file needs."""
from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Iterable
from typing import Any

_MAGIC = ((b"PK\x03\x04", "a zip archive (.npz)"), (b"PK\x05\x06", "an empty zip archive"),
          (b"\x93NUMPY", "a NumPy .npy array"), (b"\x1f\x8b", "gzip-compressed data"),
          (b"\x89PNG", "a PNG picture"), (b"\xff\xd8\xff", "a JPEG picture"), (b"GIF8", "a GIF picture"),
          (b"BM", "a BMP picture"), (b"\x80", "a Python pickle"), (b"%PDF", "a PDF document"))


def looks_like(path: str) -> str:
    """A few words on what ``path`` holds: "empty", "a zip archive (.npz)", "a text file", ...."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if not head:
        return "empty"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if head[:2] == b"\x00\x00" and len(head) >= 4 and head[2] in (0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E):
        return "an IDX file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        text = head[:e.start].decode("utf-8") if e.start > len(head) - 4 else ""
        if not text:
            return "binary data"
    return "a text file" if all(c.isprintable() or c in "\t\r\n" for c in text) else "binary data"


def is_npz(path: str) -> bool:
    """Whether ``path`` starts as a zip archive (what ``np.load`` reads as an .npz)."""
    return looks_like(path) in ("a zip archive (.npz)", "an empty zip archive")


class UntrustedSize(ValueError):
    """A file's own sizes do not hold: an array header claiming more than the file holds, or a
    compressed member far larger than its compressed bytes (a zip bomb). Said before anything
    is allocated; callers turn it into their own error (DataError, CheckpointError)."""


# a compressed member may expand this many times its compressed size (npz arrays deflate 1-20x;
# a zip bomb's members 1000x) before it is refused unread, once it is larger than BOMB_MIN_BYTES
MAX_EXPANSION = 200
BOMB_MIN_BYTES = 64 << 20


def _npy_bytes(f: Any, where: str) -> int:
    """The data bytes an .npy stream's header promises (its shape times its item size); the
    stream is left after the header."""
    import numpy as np

    try:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
    except (ValueError, OSError, EOFError) as e:
        raise UntrustedSize(f"{where}: not a readable .npy array header ({e})") from None
    return math.prod(shape) * dtype.itemsize


def check_npy(path: str) -> None:
    """An .npy file holds at least the bytes its header promises (else UntrustedSize): np.load
    allocates what the header says before it reads a byte of data."""
    with open(path, "rb") as f:
        need = _npy_bytes(f, path)
        have = os.fstat(f.fileno()).st_size - f.tell()
    if need > have:
        raise UntrustedSize(f"{path}: its header promises {need:,} bytes of array data, the file holds "
                            f"{max(have, 0):,}")


def check_npz(path: str) -> None:
    """Every member of an .npz archive holds the bytes its .npy header promises, and no compressed
    member expands more than MAX_EXPANSION times (else UntrustedSize), from the zip directory and
    the headers alone: before np.load allocates or decompresses anything."""
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if (info.compress_type != zipfile.ZIP_STORED and info.file_size > BOMB_MIN_BYTES
                        and info.file_size > MAX_EXPANSION * max(info.compress_size, 1)):
                    raise UntrustedSize(f"{path}: member {info.filename} would expand from "
                                        f"{info.compress_size:,} to {info.file_size:,} bytes (refused "
                                        f"unread)")
                if not info.filename.endswith(".npy"):
                    continue
                with z.open(info) as f:
                    need = _npy_bytes(f, f"{path}[{info.filename}]")
                    have = info.file_size - f.tell()
                if need > have:
                    raise UntrustedSize(f"{path}: member {info.filename}'s header promises {need:,} "
                                        f"bytes of array data, the member holds {max(have, 0):,}")
    except UntrustedSize:
        raise
    # NotImplementedError: an unknown compression method; RuntimeError: an encrypted member
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, ValueError, NotImplementedError,
            RuntimeError) as e:
        raise UntrustedSize(f"{path}: not a readable .npz archive ({e})") from None


def arrays_digest(arrays: dict[str, Any], h: Any = None) -> str:
    """SHA-256 (continuing ``h`` when given) of named arrays: each one's name, dtype, shape and bytes,
    in the order of their names (checkpoints' checksum, the image-folder cache's digest)."""
    import hashlib

    import numpy as np

    h = h or hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.data)  # the buffer itself, not a copy
    return h.hexdigest()


def overwrites(out: str, inputs: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The input (name, path) that writing ``out`` would replace or add to: the same file, through
    links too, or anything inside an input directory; None when there is none. ``inputs`` pairs a
    name ("--data", "checkpoint") with a path."""
    real = os.path.realpath(out)
    for name, path in inputs:
        if os.path.isdir(path):
            root = os.path.realpath(path)
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return name, path
        elif os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
            return name, path
    return None


def available_memory() -> int | None:
    """Bytes this machine can still give a process without swapping out others (Linux's
    MemAvailable plus free swap); None where it cannot be told."""
    try:
        with open("/proc/meminfo") as f:
            fields = {k: int(v.split()[0]) * 1024
                      for k, v in (line.split(":", 1) for line in f if ":" in line)}
        return fields["MemAvailable"] + fields.get("SwapFree", 0)
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None
