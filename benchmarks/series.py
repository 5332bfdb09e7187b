"""The default command for series on the sets of shared/data/timeseries/: ``python train.py --data
SET_TRAIN.ts`` (no tuning per set) over seeds, each a fresh process; test accuracy (RMSE and R^2
for a regression set), wall time, and their mean, spread, min and max per set, as JSON.

    python benchmarks/series.py [--dir ../shared/data/timeseries] [--seeds 0-4] [--sets A,B]
        [--out results/....json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

SETS = {  # set -> extra flags (none: the default command)
    "GunPoint": [], "ItalyPowerDemand": [], "JapaneseVowels_eq": [],
    "JapaneseVowels": ["--series-length", "max"], "MNIST1D": [], "BasicMotions": [], "Tecator": [],
}


def baselines(path: str) -> dict[str, float]:
    """A regression set's test RMSE of scikit-learn's Ridge (default alpha) and RandomForestRegressor
    (random_state 0) on the flattened series of the same split."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Ridge

    from numbacnn.data import load_dataset

    ds = load_dataset(path)
    xtr, xte = ds.x_train.reshape(len(ds.x_train), -1), ds.x_test.reshape(len(ds.x_test), -1)
    out = {}
    for name, model in (("ridge", Ridge()), ("random_forest", RandomForestRegressor(random_state=0))):
        pred = model.fit(xtr, ds.y_train).predict(xte)
        out[name + "_rmse"] = round(float(np.sqrt(np.mean((pred - ds.y_test) ** 2))), 4)
    return out


def _seeds(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                                 "timeseries"))
    p.add_argument("--seeds", type=_seeds, default=_seeds("0-4"))
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--out")
    args = p.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = {}
    for name in args.sets.split(","):
        data = os.path.join(args.dir, f"{name}_TRAIN.ts")
        runs = []
        for seed in args.seeds:
            cmd = [sys.executable, "train.py", "--data", data, "--seed", str(seed), "--quiet",
                   *SETS.get(name, [])]
            t = time.perf_counter()
            r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
            wall = time.perf_counter() - t
            if r.returncode:
                print(f"{name} seed {seed}: exit {r.returncode}: {r.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            m = re.search(r"test (accuracy|rmse) ([0-9.e+-]+)", r.stdout)
            runs.append({"seed": seed, "accuracy" if m and m.group(1) == "accuracy" else "rmse":
                         float(m.group(2)) if m else None, "wall_s": round(wall, 1),
                         "last_line": r.stdout.strip().splitlines()[-1]})
            print(f"{name} seed {seed}: {runs[-1]['last_line']} ({wall:.1f} s wall)", flush=True)
        key = "accuracy" if "accuracy" in runs[0] else "rmse"
        acc = np.array([r[key] for r in runs], float)
        walls = np.array([r["wall_s"] for r in runs])
        command = " ".join(["python train.py --data", f"{name}_TRAIN.ts", *SETS.get(name, [])])
        rows[name] = {"command": command,
                      f"{key}_mean": round(float(acc.mean()), 4),
                      f"{key}_std": round(float(acc.std()), 4),
                      f"{key}_min": float(acc.min()), f"{key}_max": float(acc.max()),
                      "wall_s_mean": round(float(walls.mean()), 1), "wall_s_max": float(walls.max()),
                      "runs": runs}
        unit = 100 if key == "accuracy" else 1
        print(f"== {name}: {key} {acc.mean() * unit:.2f} +- {acc.std() * unit:.2f} "
              f"(min {acc.min() * unit:.2f}, max {acc.max() * unit:.2f}), {walls.mean():.1f} s a run",
              flush=True)
        if key == "rmse":
            rows[name].update(baselines(data))
            print(f"   beside: Ridge {rows[name]['ridge_rmse']}, random forest "
                  f"{rows[name]['random_forest_rmse']}", flush=True)
    out = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                    text=True).stdout.strip(), "seeds": args.seeds, "sets": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
