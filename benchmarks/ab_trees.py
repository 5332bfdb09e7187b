"""Before/after throughput of two source trees of numbacnn, interleaved (A B B A ...), each
measurement in a fresh process that imports numbacnn from the given tree; only the public API
(``Trainer.train_epoch``, ``Sequential.forward``), so any two versions compare.

    python benchmarks/ab_trees.py /path/to/old/tree . --rounds 4 --json ab.json

Per configuration it prints the median img/s of each tree and the median of the paired ratios
(B / A). Training: one epoch of ``Trainer.train_epoch`` over 4096 synthetic 28x28 images after a warm-up
epoch (recorded/replayed steps, SGD with momentum); inference: ``forward(training=False)`` on one
batch (the best of three timed passes each).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import numbacnn as nc
net_name, batch, threads, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
nc.set_num_threads(threads)
rng = np.random.default_rng(0)
n = 4096 if batch > 1 else 1024
x = rng.random((n, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, n)
net = nc.build_network(net_name, (1, 28, 28), 10, seed=0)
opt = nc.SGD(net, lr=0.01, momentum=0.9)
tr = nc.Trainer(net, opt, batch_size=batch, seed=0, progress=False)
if what == "train":
    tr.train_epoch(x[:8 * batch], y[:8 * batch])  # compiles, records
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter(); tr.train_epoch(x, y); dt = time.perf_counter() - t0
        best = max(best, n / dt)
    print(json.dumps(best))
else:
    xb = x[:batch]
    net.forward(xb, training=False)
    reps = max(3, int(20000 // batch))
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            net.forward(xb, training=False)
        best = max(best, reps * batch / (time.perf_counter() - t0))
    print(json.dumps(best))
"""

CONFIGS = [  # (net, batch, threads, what)
    ("lenet5", 1, 1, "train"), ("lenet5", 32, 2, "train"), ("lenet5", 128, 2, "train"),
    ("lenet5", 256, 2, "train"), ("mnistcnn", 32, 2, "train"), ("mnistcnn", 128, 2, "train"),
    ("mnistcnn", 256, 2, "train"), ("lenet5", 1, 2, "infer"), ("lenet5", 64, 2, "infer"),
    ("lenet5", 256, 2, "infer"), ("mnistcnn", 1, 2, "infer"),
    ("mnistcnn", 64, 2, "infer"), ("mnistcnn", 256, 2, "infer"),
]


def run(tree: str, cfg: tuple) -> float:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, *map(str, cfg)], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.abspath(tree))
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for cfg in CONFIGS:
        a, b = [], []
        for r in range(args.rounds):
            order = (args.a, args.b) if r % 2 == 0 else (args.b, args.a)
            for tree in order:
                (a if tree == args.a else b).append(run(tree, cfg))
        ratios = [y / x for x, y in zip(a, b)]
        row = {"net": cfg[0], "batch": cfg[1], "threads": cfg[2], "what": cfg[3],
               "a_img_s": a, "b_img_s": b, "median_ratio_b_over_a": statistics.median(ratios)}
        rows.append(row)
        print(f"{cfg[0]:9s} batch {cfg[1]:4d} threads {cfg[2]} {cfg[3]:5s}: A {statistics.median(a):10,.0f}"
              f"  B {statistics.median(b):10,.0f} img/s  B/A {row['median_ratio_b_over_a']:.3f} "
              f"(ratios {min(ratios):.3f}-{max(ratios):.3f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
