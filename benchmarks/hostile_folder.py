"""A picture folder with hostile pictures among good ones, loaded in fresh processes at several decode
thread counts: every load must keep the same pictures with the same labels and skip the same ones.

    python benchmarks/hostile_folder.py [--pictures 1000] [--processes 10] [--threads 1,2,8] [--dir D]

Ten per cent of the pictures are hostile: decompression bombs (over Pillow's limit), symbolic links
(to the class's parent folder, to themselves, to nothing), truncated files, 16-bit grey PNGs,
palette PNGs, CMYK JPEGs and EXIF-rotated JPEGs. Prints, per thread count, the digest of what was
loaded, the skipped count, the time and the peak memory of each process; exit status 1 if any load
differs from the first.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

_LOAD = r"""
import hashlib, json, os, sys, time
from numbacnn.data.folders import load_image_folder
root, threads = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
d = load_image_folder(root, image_size=(16, 16), channels=3, cache=False, threads=threads)
seconds = time.perf_counter() - t
h = hashlib.sha256(d.x_train.tobytes() + d.y_train.tobytes() + json.dumps(
    [(os.path.relpath(p, root), why) for p, why in d.skipped]).encode()).hexdigest()[:16]
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"digest": h, "pictures": len(d.y_train), "skipped": len(d.skipped),
                  "labels": d.y_train.tolist(), "seconds": seconds, "peak_mb": peak / 1024}))
"""


def make_folder(root: str, n: int, seed: int = 0) -> dict[str, int]:
    """n pictures in 4 classes, a tenth of them hostile; returns what was planted, by kind."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    classes = ["a", "b", "c", "d"]
    kinds = ["bomb", "link-parent", "link-loop", "link-dangling", "truncated", "16-bit", "palette", "cmyk",
             "exif-rotated"]
    planted = {k: 0 for k in kinds}
    for i in range(n):
        k = i % len(classes)
        d = os.path.join(root, classes[k])
        os.makedirs(d, exist_ok=True)
        base = rng.integers(0, 60, (16, 16, 3)).astype(np.uint8)
        base[:, :, k % 3] += 60 + 40 * k
        path = os.path.join(d, f"{i:05d}")
        kind = kinds[(i // 10) % len(kinds)] if i % 10 == 9 else None
        if kind is None:
            Image.fromarray(base).save(path + ".png")
            continue
        planted[kind] += 1
        if kind == "bomb":  # 9,000 x 10,000 pixels: over Pillow's warning limit, tiny on disk
            Image.new("L", (9000, 10000)).save(path + ".png")
        elif kind == "link-parent":
            os.symlink("..", path)  # a folder link inside a class: never followed
            os.symlink("..", path + ".png")  # a "picture" that is a folder link: skipped, named
        elif kind == "link-loop":
            os.symlink(os.path.basename(path) + ".png", path + ".png")
        elif kind == "link-dangling":
            os.symlink("nowhere.png", path + ".png")
        elif kind == "truncated":
            buf = io.BytesIO()
            Image.fromarray(base).save(buf, "PNG")
            with open(path + ".png", "wb") as f:
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        elif kind == "16-bit":
            Image.fromarray(base[:, :, 0].astype(np.uint16) * 257).save(path + ".png")
        elif kind == "palette":
            Image.fromarray(base).convert("P").save(path + ".png")
        elif kind == "cmyk":
            Image.fromarray(base).convert("CMYK").save(path + ".jpg")
        elif kind == "exif-rotated":
            img = Image.fromarray(base[:, :12])  # 12 x 16, shown as 16 x 12
            exif = img.getexif()
            exif[0x0112] = 6
            img.save(path + ".jpg", exif=exif)
    return planted


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pictures", type=int, default=1000)
    p.add_argument("--processes", type=int, default=10, help="fresh processes per thread count")
    p.add_argument("--threads", default="1,2,8")
    p.add_argument("--dir", help="build the folder here (default: a temporary directory)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(args.dir or tmp, "hostile")
        planted = make_folder(root, args.pictures)
        print(f"{args.pictures} pictures, hostile: " + ", ".join(f"{k} {v}" for k, v in planted.items()))
        runs: dict[str, list[dict]] = {}
        for threads in [int(t) for t in args.threads.split(",")]:
            runs[str(threads)] = []
            for _ in range(args.processes):
                r = subprocess.run([sys.executable, "-c", _LOAD, root, str(threads)], capture_output=True,
                                   text=True, timeout=600)
                if r.returncode != 0:
                    print(r.stderr[-2000:])
                    return 1
                if r.stderr.strip():
                    print(f"unexpected output on stderr: {r.stderr.strip()[:300]}")
                    return 1
                runs[str(threads)].append(json.loads(r.stdout))
            rs = runs[str(threads)]
            print(f"{threads} decode threads: digests {sorted({x['digest'] for x in rs})}, pictures "
                  f"{rs[0]['pictures']}, skipped {rs[0]['skipped']}, {min(x['seconds'] for x in rs):.2f}-"
                  f"{max(x['seconds'] for x in rs):.2f} s, peak {min(x['peak_mb'] for x in rs):.0f}-"
                  f"{max(x['peak_mb'] for x in rs):.0f} MB")
    everything = [x for rs in runs.values() for x in rs]
    same = len({(x["digest"], tuple(x["labels"])) for x in everything}) == 1
    print("every load the same: " + ("yes" if same else "NO"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"planted": planted, "runs": {t: [{k: v for k, v in x.items() if k != "labels"}
                                                        for x in rs] for t, rs in runs.items()}}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
