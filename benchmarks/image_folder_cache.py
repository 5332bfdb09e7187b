"""Time an image folder's first load (headers, decoding, cache write) against the second (the cache):
``python benchmarks/image_folder_cache.py --pictures 300 --size 32 [--source 96 --format jpeg]`` makes
a scratch folder of colour pictures in 3 classes (``--source`` pixels square, resized to ``--size``
when loading), loads it twice with ``numbacnn.load_dataset`` and prints both times and the ratio."""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main() -> None:
    from PIL import Image

    from numbacnn import load_dataset

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pictures", type=int, default=300)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--source", type=int, default=None, help="side of the stored pictures (default --size)")
    p.add_argument("--format", choices=["png", "jpeg"], default="png")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    scratch = tempfile.mkdtemp()
    try:
        root = os.path.join(scratch, "photos")
        for i in range(args.pictures):
            d = os.path.join(root, f"class{i % 3}")
            os.makedirs(d, exist_ok=True)
            side = args.source or args.size
            smooth = rng.integers(0, 255, (side // 8 + 1, side // 8 + 1, 3), dtype=np.uint8)
            picture = np.kron(smooth, np.ones((8, 8, 1), np.uint8))[:side, :side]  # photo-like blocks
            ext = "jpg" if args.format == "jpeg" else "png"
            Image.fromarray(picture).save(os.path.join(d, f"{i:05d}.{ext}"))
        firsts, seconds = [], []
        for _ in range(args.rounds):
            cache = os.path.join(scratch, "photos.numbacnn-cache.npz")
            if os.path.exists(cache):
                os.remove(cache)
            t0 = time.perf_counter()
            load_dataset(root, image_size=args.size)
            firsts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            load_dataset(root, image_size=args.size)
            seconds.append(time.perf_counter() - t0)
        a, b = min(firsts), min(seconds)
        print(f"{args.pictures} {args.format} pictures of {args.source or args.size}px -> "
              f"{args.size}x{args.size}x3, {os.cpu_count()} cores: first load "
              f"{a * 1e3:.1f} ms, from the cache {b * 1e3:.1f} ms: {a / b:.1f}x (min of {args.rounds})")
    finally:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
