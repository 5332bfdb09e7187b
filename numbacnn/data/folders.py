"""Image folders: one sub-folder of pictures per class (optionally under ``train/`` and ``test/``), as
torchvision's ImageFolder and Keras's ``image_dataset_from_directory`` read them.

Pictures are decoded with Pillow (the [image] extra) on a thread pool, converted to grey or RGB,
resized to one size and kept as uint8 in a ``.npz`` cache beside the folder, keyed by the files'
names, sizes and modification times (and the size and channels asked for), so that a second run
reads one file. Unreadable pictures are skipped and counted, never fatal.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import stat
import tempfile
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._files import arrays_digest, available_memory, check_npz
from .._text import install_hint, interactive
from .error import DataError

EXTRA = install_hint("image")
PICTURES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
TEST_SPLITS = ("test", "val", "valid", "validation")  # names of a held-out split beside train/
CACHE_VERSION = 3  # 2: 16-bit grey scaled, EXIF orientation applied; 3: the arrays' digest kept
GREY_MODES = {"1", "L", "LA", "La", "I", "F", "I;16", "I;16L", "I;16B", "I;16N"}


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise DataError(f"reading pictures needs Pillow: {EXTRA}") from None
    # the loader refuses pictures over Pillow's limit itself, naming them (_refuse_bomb); Pillow's own
    # warning would print its source line, and catching it per call is not thread-safe
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    return Image


def _refuse_bomb(Image, img, path: str) -> None:
    """A picture of more than Pillow's MAX_IMAGE_PIXELS is refused before it is decoded."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit and img.size[0] * img.size[1] > limit:
        raise DataError(f"{path}: refused, larger than Pillow's decompression-bomb limit "
                        f"({img.size[0]}x{img.size[1]} pixels, the limit is {limit})")


WIDE_GREY = {"I", "I;16", "I;16L", "I;16B", "I;16N"}  # 16-bit grey (Pillow opens 16-bit PNGs so)


def _eight_bit(Image, img):
    """16-bit grey scaled to 8 bits (65535 -> 255, not clipped at 255)."""
    if img.mode not in WIDE_GREY:
        return img
    a = np.asarray(img).astype(np.int64)
    return Image.fromarray(np.clip((a + 128) // 257, 0, 255).astype(np.uint8))  # mode "L"


_QUARTER_TURNS = (5, 6, 7, 8)  # EXIF orientations that swap width and height


def _orientation(img) -> int:
    """The EXIF orientation tag (1: as stored); 1 where there is none or it cannot be read."""
    try:
        value = img.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block: the picture as stored
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _upright(img):
    """The picture as a viewer shows it: its EXIF orientation applied (phone photographs)."""
    if _orientation(img) == 1:
        return img
    from PIL import ImageOps

    return ImageOps.exif_transpose(img)


def _open_regular(path: str):
    """``path`` opened for reading when it is a regular file (through links), else DataError: a
    FIFO, socket or device named like a picture is refused without waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, read or not
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
            raise DataError(f"{path}: not a regular file ({kind}); skipped unread")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_picture(path: str, channels: int, size: tuple[int, int]) -> np.ndarray:
    """One picture as uint8 (channels, H, W): 16-bit grey scaled to 8 bits, turned upright by its
    EXIF orientation, converted to grey ("L") or RGB, resized (bilinear) to ``size`` = (H, W) when
    it differs. Pictures over Pillow's decompression-bomb limit are refused. Raises DataError with a
    one-line reason."""
    Image = _pillow()
    h, w = size
    try:
        with _open_regular(path) as f, Image.open(f) as opened:
            _refuse_bomb(Image, opened, path)
            img = _eight_bit(Image, _upright(opened)).convert("L" if channels == 1 else "RGB")
            if img.size != (w, h):
                img = img.resize((w, h), Image.Resampling.BILINEAR)
            a = np.asarray(img, dtype=np.uint8)
    except DataError:
        raise
    except Image.DecompressionBombError as e:
        raise DataError(f"{path}: refused, larger than Pillow's decompression-bomb limit ({e})") from None
    except (OSError, SyntaxError, ValueError) as e:  # not an image, truncated, unsupported
        raise DataError(f"{path}: not a readable image ({e})") from None
    return a[None] if channels == 1 else a.transpose(2, 0, 1)


def _header(path: str) -> tuple[tuple[int, int], bool] | str:
    """((H, W), has colour) from the picture's header, or the reason it cannot be read."""
    Image = _pillow()
    try:
        with _open_regular(path) as f, Image.open(f) as img:
            _refuse_bomb(Image, img, path)
            colour = img.mode not in GREY_MODES
            if img.mode in ("P", "PA"):  # a palette: colour only if some entry is not grey
                pal = np.asarray(img.getpalette() or [], np.int64).reshape(-1, 3)
                colour = bool((pal != pal[:, :1]).any())
            w, h = img.size
            return ((w, h) if _orientation(img) in _QUARTER_TURNS else (h, w)), colour
    except DataError as e:
        return str(e).removeprefix(f"{path}: ")
    except Exception as e:  # Pillow raises many kinds for a bad file; each is one skipped image
        why = str(e).replace(repr(path), "").replace(path, "").strip(" :") or type(e).__name__
        return why if isinstance(e, OSError) else f"{type(e).__name__}: {why}"


@dataclass
class FolderData:
    """What ``load_image_folder`` returns: uint8 images (N, C, H, W), labels, the class names, the
    test split when the folder has one, and the pictures that were skipped (path, reason)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    classes: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    from_cache: bool = False


# Symbolic links: a link to a picture is read as the picture (a broken or looping link is skipped
# and named, like any unreadable picture); a link to a folder is never followed, neither as a class
# folder nor inside one, so no picture is read twice or under another class's label.


def _class_dirs(root: str) -> list[str]:
    return sorted(e.name for e in os.scandir(root)
                  if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))


def _pictures_under(directory: str) -> list[str]:
    out = []
    for here, dirs, files in os.walk(directory, followlinks=False):  # links to folders: not walked
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.join(here, f) for f in sorted(files)
                if not f.startswith(".") and os.path.splitext(f)[1].lower() in PICTURES]
    return out


def split_dirs(root: str) -> tuple[str, str | None]:
    """(train root, test root or None): ``root/train`` and ``root/test`` (or val, valid,
    validation) when ``root`` holds a ``train`` folder of class folders, else ``root`` itself."""
    names = {n.lower(): n for n in _class_dirs(root)}
    if "train" in names:
        train = os.path.join(root, names["train"])
        if _class_dirs(train):
            test = next((os.path.join(root, names[t]) for t in TEST_SPLITS if t in names), None)
            return train, test
    return root, None


def scan(root: str) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, int]]]:
    """(class names, [(picture, class index)] of the training part, of the test part)."""
    train_root, test_root = split_dirs(root)
    classes = _class_dirs(train_root)
    if not classes:
        raise DataError(f"{root}: no class folders (an image folder holds one sub-folder of pictures "
                        f"per class, e.g. {root}/cat/1.png, {root}/dog/2.jpg)")
    exts = ", ".join(PICTURES)

    def files_of(part_root: str) -> list[tuple[str, int]]:
        out = []
        for name in _class_dirs(part_root):
            if name not in classes:
                raise DataError(f"{os.path.join(part_root, name)}: class {name!r} is not among the "
                                f"training classes ({', '.join(classes)})")
            pics = _pictures_under(os.path.join(part_root, name))
            if not pics:
                raise DataError(f"{os.path.join(part_root, name)}: an empty class folder (no {exts} "
                                f"files)")
            out += [(p, classes.index(name)) for p in pics]
        return out

    train = files_of(train_root)
    if len(classes) < 2:
        raise DataError(f"{train_root}: only one class folder ({classes[0]}); need at least 2 classes")
    return classes, train, files_of(test_root) if test_root else []


def _key(files: list[tuple[str, int]], root: str, image_size, channels) -> str:
    """SHA-256 of every picture's name, size and modification time, and the options asked for."""
    h = hashlib.sha256(json.dumps([CACHE_VERSION, image_size, channels]).encode())
    skip = len(os.path.join(root, ""))  # the paths were joined onto root: cut it off (not relpath: slow)
    for path, label in files:
        try:
            st = os.stat(path)
            stamp = f"{st.st_size}|{st.st_mtime_ns}"
        except OSError as e:  # a broken or looping link: skipped when read, part of the key as such
            stamp = f"unreadable {e.errno}"
        h.update(f"{path[skip:]}|{label}|{stamp}\n".encode())
    return h.hexdigest()


def cache_path(root: str, cache_dir: str | None = None) -> str:
    """``photos.numbacnn-cache.npz`` beside ``photos/``; in ``cache_dir`` (or, when the folder's
    parent cannot be written, ``$NUMBACNN_CACHE_DIR`` or ``~/.cache/numbacnn``) a name made of the
    folder's absolute path."""
    root = os.path.abspath(root)
    parent, name = os.path.split(root.rstrip(os.sep))
    if cache_dir is None and os.access(parent or ".", os.W_OK):
        return os.path.join(parent, f"{name}.numbacnn-cache.npz")
    where = cache_dir or os.environ.get("NUMBACNN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "numbacnn")
    tag = hashlib.sha256(root.encode()).hexdigest()[:16]
    return os.path.join(where, f"{name}-{tag}.npz")


def _read_cache(path: str, key: str, classes: list[str], n_train: int, n_test: int,
                image_size, channels) -> FolderData | None:
    """The cached arrays when the file exists, was made for ``key`` and holds what the key promises
    (the classes, one image or one skipped picture per file, uint8 images of the size and channels
    asked for, labels in range); None otherwise: a damaged or altered cache is rebuilt, never used."""
    if not os.path.isfile(path):
        return None
    try:
        check_npz(path)  # a header or member that lies about its size: rebuilt, never allocated
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            arrays = {k: z[k] for k in z.files if k != "digest"}
            if str(z["digest"]) != arrays_digest(arrays):  # arrays replaced by hand (another shape, ...)
                return None
            test = "x_test" in z.files
            data = FolderData(z["x_train"], z["y_train"], z["x_test"] if test else None,
                              z["y_test"] if test else None, [str(c) for c in z["classes"]],
                              [tuple(s) for s in json.loads(str(z["skipped"]))], True)  # type: ignore[misc]
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error):
        return None  # (UntrustedSize is a ValueError)
    parts: list[tuple[Any, Any]] = [(data.x_train, data.y_train)]
    parts += [(data.x_test, data.y_test)] if test else []
    shape = data.x_train.shape[1:] if data.x_train.ndim == 4 else None
    fits = (data.classes == classes and test == (n_test > 0) and shape is not None
            and (channels is None or shape[0] == channels) and shape[0] in (1, 3)
            and (image_size is None or tuple(shape[1:]) == tuple(image_size))
            and all(len(s) == 2 and all(isinstance(v, str) for v in s) for s in data.skipped)
            and sum(len(x) for x, _ in parts) + len(data.skipped) == n_train + n_test)
    for x, y in parts if fits else []:
        fits = fits and (x.dtype == np.uint8 and x.ndim == 4 and x.shape[1:] == shape
                         and y.dtype == np.int64 and y.shape == (len(x),)
                         and (len(y) == 0 or (0 <= y.min() and y.max() < len(classes))))
    return data if fits else None


def _write_cache(path: str, key: str, data: FolderData) -> bool:
    arrays = {"key": np.array(key), "x_train": data.x_train, "y_train": data.y_train,
              "classes": np.array(data.classes), "skipped": np.array(json.dumps(data.skipped))}
    if data.x_test is not None and data.y_test is not None:
        arrays.update(x_test=data.x_test, y_test=data.y_test)
    arrays["digest"] = np.array(arrays_digest(arrays))
    d = os.path.dirname(path)
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-" + os.path.basename(path) + ".")
    except OSError:  # a cache that cannot be written costs time, not the run
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except OSError:  # e.g. the cache path is a directory: nothing is left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def _map(fn: Callable, items: list, desc: str, progress: bool, threads: int | None = None) -> list:
    """``fn`` over ``items`` on a pool of ``threads`` threads (None: the cores + 2, at most 32;
    Pillow decodes without the GIL), in order."""
    workers = threads or min(32, (os.cpu_count() or 1) + 2)
    with ThreadPoolExecutor(workers) as pool:
        results = pool.map(fn, items, chunksize=max(1, len(items) // (workers * 8)))
        if progress:
            if interactive():
                from tqdm.auto import tqdm

                return list(tqdm(results, total=len(items), desc=desc, unit="img", leave=False))
        return list(results)


def load_image_folder(root: str, image_size: tuple[int, int] | None = None, channels: int | None = None,
                      cache_dir: str | None = None, cache: bool = True, progress: bool = False,
                      log: Callable[[str], None] = print, threads: int | None = None) -> FolderData:
    """Read an image folder (see the module's docstring).

    Parameters
    ----------
    image_size : (H, W) or None
        Every picture is resized to it; None: the most common size in the folder.
    channels : 1, 3 or None
        1 (grey) or 3 (RGB); None: 3 if any picture has colour, else 1.
    cache_dir, cache
        Where the decoded arrays are cached (see ``cache_path``); ``cache=False``: neither read
        nor written.
    progress
        A progress bar while decoding (on a terminal) and a line when done, through ``log``.
    threads
        Decoding threads (None: the cores + 2, at most 32); the result does not depend on it.
    """
    if channels not in (None, 1, 3):
        raise DataError(f"channels must be 1 or 3, got {channels!r}")
    classes, train, test = scan(root)
    files = train + test
    key = _key(files, root, image_size, channels)
    where = cache_path(root, cache_dir)
    if cache:
        hit = _read_cache(where, key, classes, len(train), len(test), image_size, channels)
        if hit is not None:
            return hit
    _pillow()
    t0 = time.perf_counter()
    if image_size is not None and channels is not None:  # nothing to decide: one pass, no headers
        headers: list = [((0, 0), False)] * len(files)
    else:
        headers = _map(_header, [p for p, _ in files], "reading headers", progress, threads)
    skipped = [(p, h) for (p, _), h in zip(files, headers) if isinstance(h, str)]
    good = [h for h in headers if not isinstance(h, str)]
    if not good:
        raise DataError(f"{root}: none of the {len(files)} pictures could be read (first: "
                        f"{skipped[0][0]}: {skipped[0][1]})")
    if image_size is None:  # the most common size; ties to the larger
        counts = collections.Counter(size for size, _ in good)
        image_size = max(counts, key=lambda s: (counts[s], s))
    c = channels or (3 if any(colour for _, colour in good) else 1)
    size = (int(image_size[0]), int(image_size[1]))
    _check_fits(root, len(good), c, size)

    def decode(path: str) -> np.ndarray | str:
        try:
            return read_picture(path, c, size)
        except DataError as e:  # the reason, without the path (the warning names it once)
            return str(e).removeprefix(f"{path}: ").replace(f" {path!r}", "").replace(f" {path}", "")

    todo = [(p, y) for (p, y), h in zip(files, headers) if not isinstance(h, str)]
    pixels = _map(decode, [p for p, _ in todo], "decoding", progress, threads)
    skipped += [(p, a) for (p, _), a in zip(todo, pixels) if isinstance(a, str)]
    kept = [(a, y, i < len(train)) for i, ((p, y), a) in enumerate(zip(files, _align(files, todo, pixels)))
            if a is not None and not isinstance(a, str)]
    in_train = [k for k in kept if k[2]]
    in_test = [k for k in kept if not k[2]]
    present = {y for _, y, _ in in_train}
    missing = [classes[k] for k in range(len(classes)) if k not in present]
    if missing:
        raise DataError(f"{root}: none of the training pictures of class {missing[0]!r} could be read")
    if test and not in_test:
        raise DataError(f"{root}: none of the test pictures could be read")

    def stack(part):
        return (np.stack([a for a, _, _ in part]), np.array([y for _, y, _ in part], np.int64))

    x_tr, y_tr = stack(in_train)
    x_te, y_te = stack(in_test) if test else (None, None)
    data = FolderData(x_tr, y_tr, x_te, y_te, classes, sorted(skipped))
    wrote = cache and _write_cache(where, key, data)
    if progress:
        log(f"{root}: decoded {len(kept)} pictures of {len(classes)} classes to {c}x{size[0]}x{size[1]} "
            f"in {time.perf_counter() - t0:.1f} s" + (f"; cached in {where}" if wrote else ""))
    return data


def _check_fits(root: str, n: int, channels: int, size: tuple[int, int]) -> None:
    """Before decoding: the pictures resized to ``size`` are within Pillow's decompression-bomb
    limit, and ``n`` of them (uint8, then the float32 copy training uses) fit in this machine's
    memory; DataError in one line otherwise."""
    Image = _pillow()
    pixels = size[0] * size[1]
    if Image.MAX_IMAGE_PIXELS and pixels > Image.MAX_IMAGE_PIXELS:
        raise DataError(f"{root}: pictures of {size[0]}x{size[1]} are {pixels:,} pixels each, over "
                        f"Pillow's decompression-bomb limit ({Image.MAX_IMAGE_PIXELS:,}); a smaller "
                        f"--image-size")
    need, have = n * channels * pixels * 5, available_memory()
    if have is not None and need > have:
        raise DataError(f"{root}: {n:,} pictures of {channels}x{size[0]}x{size[1]} need about "
                        f"{need / 2**30:,.1f} GiB (uint8 and float32), this machine has "
                        f"{have / 2**30:,.1f} GiB free; a smaller --image-size")


def _align(files: list, todo: list, pixels: list) -> list:
    """``pixels`` (one per entry of ``todo``) placed at their files' positions; None elsewhere."""
    by_path = {p: a for (p, _), a in zip(todo, pixels)}
    return [by_path.get(p) for p, _ in files]
