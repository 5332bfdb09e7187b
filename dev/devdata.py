"""The CIFAR-10 development split for a lent GPU machine, whose calls carry at most 64 MiB: ``pack``
here writes the images as row-differenced, xz-compressed chunks (about 0.67 of the raw bytes) in
two folders of .devdata/ (a: train chunks 0-4; b: chunks 5-8, the held-out images, the labels),
each carried by one call; ``unpack`` there decodes what a call brought into a folder outside the
checkout and, once every chunk is there, writes the .npz that ``train.py --data`` reads.

    python dev/devdata.py pack ../shared/data/cifar10/cifar10-dev.npz
    python dev/devdata.py unpack /tmp/cifar        # on the device, after each call's carry
"""
from __future__ import annotations

import lzma
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".devdata")
CHUNK = 5000


def _encode(job: tuple[str, np.ndarray, str]) -> tuple[str, int]:
    name, images, part = job
    rows = np.diff(images.astype(np.int16), axis=2, prepend=0).astype(np.uint8)
    data = lzma.compress(rows.tobytes(), preset=6)
    with open(os.path.join(ROOT, part, f"{name}.{'x'.join(map(str, images.shape))}.xz"), "wb") as f:
        f.write(data)
    return name, len(data)


def pack(path: str) -> None:
    d = np.load(path)
    for part in "ab":
        os.makedirs(os.path.join(ROOT, part), exist_ok=True)
    x = d["x_train"]
    chunks = [(f"x_train_{i}", x[i * CHUNK:(i + 1) * CHUNK], "a" if i < 5 else "b")
              for i in range(-(-len(x) // CHUNK))]
    chunks.append(("x_test_0", d["x_test"], "b"))
    np.savez(os.path.join(ROOT, "b", "labels.npz"), y_train=d["y_train"], y_test=d["y_test"],
             classes=d["classes"], n_train_chunks=len(chunks) - 1)
    with ProcessPoolExecutor(2) as ex:
        for name, size in ex.map(_encode, chunks):
            print(name, size, flush=True)



def unpack(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for part in "ab":
        folder = os.path.join(ROOT, part)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            src = os.path.join(folder, name)
            if name.endswith(".xz"):
                stem, shape, _ = name.rsplit(".", 2)
                if os.path.exists(os.path.join(out, stem + ".npy")):
                    continue  # an earlier call's part
                rows = np.frombuffer(lzma.decompress(open(src, "rb").read()), np.uint8)
                images = np.cumsum(rows.reshape(tuple(map(int, shape.split("x")))), axis=2, dtype=np.uint8)
                np.save(os.path.join(out, stem + ".npy"), images)
            else:
                with open(src, "rb") as f, open(os.path.join(out, name), "wb") as g:
                    g.write(f.read())
    labels = os.path.join(out, "labels.npz")
    if not os.path.exists(labels):
        print("unpacked; the labels come with part b")
        return
    meta = np.load(labels)
    names = [f"x_train_{i}.npy" for i in range(int(meta["n_train_chunks"]))]
    missing = [n for n in names + ["x_test_0.npy"] if not os.path.exists(os.path.join(out, n))]
    if missing:
        print(f"unpacked; still missing {', '.join(missing)}")
        return
    x_train = np.concatenate([np.load(os.path.join(out, n)) for n in names])
    np.savez(os.path.join(out, "cifar10-dev.npz"), x_train=x_train, y_train=meta["y_train"],
             x_test=np.load(os.path.join(out, "x_test_0.npy")), y_test=meta["y_test"],
             classes=meta["classes"])
    print(f"{out}/cifar10-dev.npz: {len(x_train)} train, {len(meta['y_test'])} test images")


if __name__ == "__main__":
    {"pack": pack, "unpack": unpack}[sys.argv[1]](sys.argv[2])
