"""Bitwise check for refactors: trains the same networks in two source trees and compares a hash of
every parameter, the losses and the inference outputs (each tree in its own process, importing
numbacnn from that tree).

    python dev/compare_trees.py /path/to/old/tree . [--threads 1,2]

Covers every conv plan (direct, wide, positions, gemm), fused and unfused pools, dropout, tanh,
average pooling, each optimizer, the replayed and the layer-by-layer step, evaluation, and the
estimator's predict_proba and transform.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import hashlib, json, sys, warnings
import numpy as np
import numbacnn as nc
nc.set_num_threads(int(sys.argv[1]))
rng = np.random.default_rng(0)
specs = [("lenet5", (1, 28, 28)), ("mnistcnn", (1, 28, 28)), ("compact", (1, 8, 8)),
         ("conv(8,3,stride=2),tanh,avgpool(2),conv(12,5,stride=2,padding=2),relu,"
          "maxpool(3,stride=2,padding=1),dense(10),tanh,dropout(0.3)", (3, 20, 20)),
         ("conv(6,3),relu,maxpool(3,stride=1),conv(8,3,stride=2),relu,maxpool(2,stride=1),dense(6)",
          (2, 12, 12)),
         ("conv(4,3),relu,conv(16,5,padding=2),relu,maxpool(2),dense(10),relu,dropout(0.5)", (1, 12, 12))]
opts = {"adam": lambda n: nc.Adam(n, lr=1e-3, weight_decay=1e-4),
        "sgd": lambda n: nc.SGD(n, lr=0.02, momentum=0.9, nesterov=True, weight_decay=1e-4),
        "rmsprop": lambda n: nc.RMSProp(n, lr=1e-3, momentum=0.9, centered=True)}
out = {}
for spec, shape in specs:
    x = rng.random((37, *shape), dtype=np.float32)
    y = np.arange(37) % 10
    for name, make in opts.items():
        for programs in (True, False):
            net = nc.build_network(spec, shape, 10, seed=1)
            tr = nc.Trainer(net, make(net), batch_size=8, seed=2, progress=False, step_programs=programs)
            hist = tr.fit(x, y, 2, x, y)
            h = hashlib.sha256(net.params.tobytes())
            h.update(net.forward(x).tobytes())
            h.update(net.predict_proba(x).tobytes())
            out[f"{spec[:20]}|{name}|{programs}"] = [h.hexdigest()[:16]] + [
                [e["train_loss"], e["test_loss"]] for e in hist]
from sklearn.datasets import load_digits
X, yd = load_digits(return_X_y=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    clf = nc.CNNClassifier(max_epochs=2, random_state=0).fit(X[:300], yd[:300])
h = hashlib.sha256(clf.predict_proba(X[:100]).tobytes() + clf.transform(X[:100]).tobytes())
out["estimator"] = h.hexdigest()[:16]
print(json.dumps(out))
"""


def run(tree: str, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    r = subprocess.run([sys.executable, "-c", CHILD, str(threads)], env=env, capture_output=True, text=True,
                       cwd=os.path.abspath(tree))
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--threads", default="1,2")
    args = p.parse_args()
    bad = 0
    for t in [int(v) for v in args.threads.split(",")]:
        a, b = run(args.a, t), run(args.b, t)
        for key in a:
            same = a[key] == b.get(key)
            bad += not same
            print(f"threads {t} {key:40s} {'same' if same else 'DIFFERENT'}")
    print(f"{bad} differences")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
