"""Training in company: numbacnn and PyTorch beside busy neighbour processes, two trainings at once,
and model search in parallel (GridSearchCV n_jobs=2, a Dask LocalCluster) against the same work done
one after the other.

    python benchmarks/company.py [--net mnistcnn] [--batch 64] [--seconds 2] [--no-torch] [--json F]

Each training runs in its own process: it imports, builds the network, warms up (the recorded step
and the kernels loaded), then waits for a start signal, so only the timed steps overlap. Rows:
- alone: img/s of one training on an idle machine;
- beside N busy: one training while N single-thread busy loops run (time over alone);
- two at once: two trainings started together (wall time over the two run one after the other).
numbacnn runs with its default OpenMP spin, with libgomp's own default (GOMP_SPINCOUNT=300000, what
numbacnn ran before it chose its own) and with OMP_WAIT_POLICY=passive.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

_WORKER = r"""
import sys, time
import numpy as np
kind, net_name, batch, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
import numbacnn as nc
from numbacnn.bench import _Ours, _Torch
if kind == "ours":
    m = _Ours(net_name, batch)
else:
    import torch
    m = _Torch(nc.build_network(net_name, (1, 28, 28), 10, seed=0), batch)
for _ in range(3):
    m.train_step()
t = time.perf_counter(); n = 0
while time.perf_counter() - t < 0.3:  # steps in 0.3 s: how many to time for `seconds`
    m.train_step(); n += 1
steps = max(3, int(n * seconds / 0.3))
print("ready", flush=True)
sys.stdin.readline()
t = time.perf_counter()
for _ in range(steps):
    m.train_step()
print(steps * batch / (time.perf_counter() - t), steps * batch, flush=True)
"""

_BUSY = "while True: pass"

# numbacnn's OpenMP settings compared (the environment of the training processes)
WAITS = {"numbacnn default": {}, "libgomp default": {"GOMP_SPINCOUNT": "300000"},
         "passive": {"OMP_WAIT_POLICY": "passive"}}


def _start(kind: str, net: str, batch: int, seconds: float, env: dict[str, str]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _WORKER, kind, net, str(batch), str(seconds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, **env))
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        raise RuntimeError(f"{kind} worker failed to start: {line!r}")
    return p


def _go(procs: list[subprocess.Popen]) -> list[tuple[float, float]]:
    """Start the timed steps of all workers together; their (img/s, images)."""
    t0 = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in procs:
        assert p.stdout is not None
        rate, images = p.stdout.readline().split()
        p.wait(timeout=600)
        out.append((float(rate), float(images)))
    _go.wall = time.perf_counter() - t0  # type: ignore[attr-defined]
    return out


def trainings(kind: str, net: str, batch: int, seconds: float, env: dict[str, str]) -> dict[str, float]:
    """One contender's rows: alone, beside 1 and 3 busy processes, two at once."""
    res: dict[str, float] = {}
    time.sleep(0.5)
    [(alone, images)] = _go([_start(kind, net, batch, seconds, env)])
    res["alone img/s"] = alone
    for n_busy in (1, 3):
        busy = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(n_busy)]
        try:
            time.sleep(0.3)
            [(rate, _)] = _go([_start(kind, net, batch, seconds, env)])
        finally:
            for b in busy:
                b.kill()
                b.wait()
        res[f"beside {n_busy} busy: time / alone"] = alone / rate
    time.sleep(0.5)
    pair = [_start(kind, net, batch, seconds, env) for _ in range(2)]
    _go(pair)
    res["two at once: time / one after the other"] = _go.wall / (2 * images / alone)  # type: ignore
    return res


_SEARCH = r"""
import json, sys, time
import joblib
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from numbacnn import CNNClassifier

X, y = load_digits(return_X_y=True)
def search(n_jobs):
    t = time.perf_counter()
    GridSearchCV(make_pipeline(MinMaxScaler(), CNNClassifier(max_epochs=10, random_state=0)),
                 {"cnnclassifier__learning_rate": [1e-3, 3e-3]}, cv=3, n_jobs=n_jobs).fit(X, y)
    return time.perf_counter() - t
res = {}
res["n_jobs=1 s"] = search(1)
res["n_jobs=2 (workers starting) s"] = search(2)
res["n_jobs=1 again s"] = search(1)
res["n_jobs=2 (workers running) s"] = search(2)
try:
    from dask.distributed import Client, LocalCluster
except ImportError:
    pass
else:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c):
        with joblib.parallel_backend("dask"):
            res["dask 2 workers (starting) s"] = search(-1)
            res["dask 2 workers (running) s"] = search(-1)
print(json.dumps(res))
"""


def searches() -> dict[str, float]:
    r = subprocess.run([sys.executable, "-c", _SEARCH], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="mnistcnn")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=2.0, help="timed training per worker")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-search", action="store_true")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
        have_torch = not args.no_torch
    except ImportError:
        have_torch = False
    rows: dict[str, dict[str, float]] = {}
    contenders = [(f"numbacnn ({name})", "ours", env) for name, env in WAITS.items()]
    if have_torch:
        contenders.append(("PyTorch", "torch", {}))
    machine = platform.processor() or platform.machine()
    print(f"{args.net}, batch {args.batch}, {os.cpu_count()} cores ({machine})")
    for label, kind, env in contenders:
        rows[label] = trainings(kind, args.net, args.batch, args.seconds, env)
        print(f"{label:28s} " + "  ".join(f"{k} {v:.0f}" if "img/s" in k else f"{k} {v:.2f}"
                                          for k, v in rows[label].items()), flush=True)
    if not args.no_search:
        rows["model search"] = searches()
        print("model search (README's GridSearchCV): "
              + ", ".join(f"{k} {v:.1f}" for k, v in rows["model search"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "net": args.net, "batch": args.batch, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
