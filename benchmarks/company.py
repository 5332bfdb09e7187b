"""Training in company: numbacnn and PyTorch beside busy neighbour processes, two trainings at once,
and model search in parallel (GridSearchCV n_jobs=2, a Dask LocalCluster) against the same work done
one after the other.

    python benchmarks/company.py [--net mnistcnn] [--batch 64] [--seconds 2] [--no-torch]
        [--no-train-py] [--rounds 2] [--no-search] [--json F]

Each training runs in its own process: it imports, builds the network, warms up (the recorded step
and the kernels loaded), then waits for a start signal, so only the timed steps overlap. Rows:
- alone: img/s of one training on an idle machine;
- beside N busy: one training while N single-thread busy loops run (time over alone);
- two at once: two trainings started together (wall time over the two run one after the other).
numbacnn runs with its default OpenMP spin, with libgomp's own default (GOMP_SPINCOUNT=300000, what
numbacnn ran before it chose its own) and with OMP_WAIT_POLICY=passive.
Then the same rows for whole ``python train.py --epochs 4`` processes (digits; the fastest of
``--rounds`` interleaved rounds), and the model searches.
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


TRAIN_PY = [sys.executable, "train.py", "--epochs", "4", "--quiet"]


def _train_py_wall(n: int, env: dict[str, str], n_busy: int = 0) -> float:
    """Wall time of n ``python train.py --epochs 4`` (digits) started together, beside n_busy busy
    single-thread processes."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    busy = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(n_busy)]
    try:
        time.sleep(0.3 if busy else 0.0)
        t = time.perf_counter()
        procs = [subprocess.Popen(TRAIN_PY, cwd=root, stdout=subprocess.DEVNULL, env=dict(os.environ, **env))
                 for _ in range(n)]
        if [p.wait(timeout=600) for p in procs] != [0] * n:
            raise RuntimeError("python train.py failed")
        return time.perf_counter() - t
    finally:
        for b in busy:
            b.kill()
            b.wait()


TRAIN_PY_WAITS = {"numbacnn default": {}, "passive": {"OMP_WAIT_POLICY": "passive"},
                  "libgomp default": {"GOMP_SPINCOUNT": "300000"}}


def train_py(rounds: int, waits: dict[str, dict[str, str]] = TRAIN_PY_WAITS) -> dict[str, dict[str, float]]:
    """Whole ``python train.py --epochs 4`` processes (import, data, 4 epochs on digits): per wait
    policy (``waits``: the environment of each; "passive" among them) the time alone, beside 1 and 3
    busy processes, and two at once over one after the other; rounds interleaved across the
    policies, the fastest of each kept."""
    _train_py_wall(1, {})  # kernels loaded into numba's cache once
    best: dict[str, dict[str, float]] = {name: {} for name in waits}
    for _ in range(rounds):
        for name, env in waits.items():
            row = {"alone s": _train_py_wall(1, env), "beside 1 busy s": _train_py_wall(1, env, 1),
                   "beside 3 busy s": _train_py_wall(1, env, 3), "two at once s": _train_py_wall(2, env)}
            for k, v in row.items():
                best[name][k] = min(best[name].get(k, v), v)
    for row in best.values():
        row["two at once / one after the other"] = row["two at once s"] / (2 * row["alone s"])
    for row in best.values():
        row["beside 3 busy / passive's"] = row["beside 3 busy s"] / best["passive"]["beside 3 busy s"]
    return best


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
    p.add_argument("--no-train-py", action="store_true")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the train.py rows")
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
    if not args.no_train_py:
        for name, row in train_py(args.rounds).items():
            rows[f"train.py --epochs 4 ({name})"] = row
            print(f"train.py --epochs 4 ({name}): " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                  flush=True)
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
