"""What a file looks like from its first bytes, for error messages that name what was found and
what was expected (never numpy's advice to load a file with pickles)."""
from __future__ import annotations

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
