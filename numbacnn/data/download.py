"""Download MNIST, Fashion-MNIST, KMNIST or CIFAR-10 from a list of mirrors: checksums verified,
partial downloads resumed, failures retried, and nothing but a verified file ever stored under the
final name. Class names go to ``classes.txt`` beside IDX files (CIFAR-10's archive holds its own).

    python -m numbacnn.data download mnist --dir data/
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

# Published MD5 checksums of the gzip files (as distributed and as listed by torchvision).
DATASETS: dict[str, dict[str, Any]] = {
    "mnist": {
        "mirrors": ["https://ossci-datasets.s3.amazonaws.com/mnist/",
                    "https://storage.googleapis.com/cvdf-datasets/mnist/",
                    "http://yann.lecun.com/exdb/mnist/"],
        "files": {"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                  "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
                  "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
                  "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"},
    },
    "fashion-mnist": {
        "mirrors": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"],
        "files": {"train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                  "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
                  "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
                  "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"},
        "classes": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                    "Bag", "Ankle boot"],
    },
    "kmnist": {  # Kuzushiji-MNIST (ROIS-CODH, CC BY-SA 4.0)
        "mirrors": ["http://codh.rois.ac.jp/kmnist/dataset/kmnist/"],
        "files": {"train-images-idx3-ubyte.gz": "bdb82020997e1d708af4cf47b453dcf7",
                  "train-labels-idx1-ubyte.gz": "e144d726b3acfaa3e44228e80efcd344",
                  "t10k-images-idx3-ubyte.gz": "5c965bf0a639b31b8f53240b1b52f4d7",
                  "t10k-labels-idx1-ubyte.gz": "7320c461ea6c1c855c0b718fb2a4b134"},
        "classes": ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"],
    },
    "cifar10": {  # the python batches; train.py --data reads the archive without extracting it
        "mirrors": ["https://www.cs.toronto.edu/~kriz/"],
        "files": {"cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a"},
    },
}


class DownloadError(RuntimeError):
    pass


def md5_of(path: str) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch(url: str, part: str, timeout: float) -> None:
    """Append the rest of ``url`` to ``part`` (HTTP Range resume; restart if the server ignores it)."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    req = urllib.request.Request(url, headers={"User-Agent": "numbacnn-download"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to fetch: the part file may already be complete
            return
        raise
    with resp:
        mode = "ab" if have and resp.status == 206 else "wb"
        length = resp.headers.get("Content-Length")
        got = 0
        with open(part, mode) as f:
            while True:
                block = resp.read(1 << 16)
                if not block:
                    break
                f.write(block)
                got += len(block)
            f.flush()
            os.fsync(f.fileno())
        if length is not None and got < int(length):  # connection dropped: keep the part, resume
            raise http.client.IncompleteRead(b"", int(length) - got)


def download(dataset: str, directory: str, mirrors: list[str] | None = None,
             files: dict[str, str] | None = None, retries: int = 3, timeout: float = 30.0,
             backoff: float = 1.0, log=print) -> list[str]:
    """Fetch every file of ``dataset`` into ``directory``; returns their paths.

    Each file is written as ``NAME.part`` and renamed to ``NAME`` only after its MD5 matches.
    """
    if dataset not in DATASETS and files is None:
        raise DownloadError(f"unknown dataset {dataset!r}; choose from {', '.join(DATASETS)}")
    spec = DATASETS.get(dataset, {})
    mirrors = list(mirrors or spec["mirrors"])  # type: ignore[arg-type]
    files = dict(files or spec["files"])  # type: ignore[arg-type]
    os.makedirs(directory, exist_ok=True)
    out = []
    for name, md5 in files.items():
        final = os.path.join(directory, name)
        out.append(final)
        if os.path.exists(final) and md5_of(final) == md5:
            log(f"{name}: present, checksum ok")
            continue
        part = final + ".part"
        errors = []
        done = False
        for attempt in range(retries):
            for mirror in mirrors:
                url = mirror.rstrip("/") + "/" + name
                try:
                    _fetch(url, part, timeout)
                except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                    errors.append(f"{url}: {getattr(e, 'reason', e)}")
                    continue  # keep the part file: the next try resumes it
                if md5_of(part) == md5:
                    os.replace(part, final)
                    log(f"{name}: downloaded from {mirror}")
                    done = True
                    break
                errors.append(f"{url}: checksum mismatch")
                os.remove(part)  # corrupt: start over from the next mirror
            if done:
                break
            time.sleep(backoff * (attempt + 1))
        if not done:
            raise DownloadError(f"could not download {name}: " + "; ".join(errors[-len(mirrors):]))
    if spec.get("classes"):
        with open(os.path.join(directory, "classes.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(spec["classes"]) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m numbacnn.data",
                                description="Download MNIST, Fashion-MNIST, KMNIST or CIFAR-10.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("download", help="fetch a dataset's files (four IDX files, or CIFAR-10's archive)")
    d.add_argument("dataset", choices=sorted(DATASETS))
    d.add_argument("--dir", default=None, help="target directory (default: data/DATASET)")
    d.add_argument("--mirror", action="append", help="mirror base URL (repeatable; replaces defaults)")
    d.add_argument("--retries", type=int, default=3)
    args = p.parse_args(argv)
    try:
        download(args.dataset, args.dir or os.path.join("data", args.dataset), mirrors=args.mirror,
                 retries=args.retries)
    except (DownloadError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
