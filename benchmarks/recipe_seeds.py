"""airbench94 over several seeds in one process: each seed's accuracy (without and with the recipe's
test-time augmentation) and wall time, then the mean and spread. The kernels are compiled first by a
two-step warm-up run, so the seeds' times are training times (the warm-up's time is recorded too).

    python benchmarks/recipe_seeds.py --data ../shared/data/cifar10/cifar10-dev.npz --seeds 0-4
    python benchmarks/recipe_seeds.py --data ... --device cuda --deadline 300 --json out.json

``--deadline S``: start no seed that the last seed's time says would end after S seconds from the
start (the runs that fit a lease on a lent machine)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numbacnn.data import load_dataset  # noqa: E402
from numbacnn.recipes import AIRBENCH94, train_airbench94  # noqa: E402
from numbacnn.runtime import config as _config  # noqa: E402


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except OSError:
        return "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--seeds", type=_seeds, default=_seeds("0-4"), help="e.g. 0-4 or 0,3")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--epochs", type=float, default=None, help="fewer than the published 9.9")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--deadline", type=float, default=None, metavar="S")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    t_start = time.perf_counter()
    if args.threads:
        _config.set_num_threads(args.threads)
    ds = load_dataset(args.data)
    print(f"{ds.name}: {len(ds.y_train)} train / {len(ds.y_test)} test; device {args.device}; "
          f"{_config.get_num_threads()} threads", flush=True)
    record: dict = {"data": ds.name, "device": args.device, "threads": _config.get_num_threads(),
                    "epochs": args.epochs or AIRBENCH94["epochs"], "commit": _commit(),
                    "machine": platform.node(), "cpu": platform.processor(), "runs": []}
    if args.device == "cuda":
        from numba import cuda
        record["gpu"] = cuda.get_current_device().name.decode() if isinstance(
            cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)

    def save() -> None:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=1)

    steps_per_epoch = len(ds.y_train) // AIRBENCH94["batch_size"]
    t = time.perf_counter()
    warm = train_airbench94(ds.x_train, ds.y_train, ds.x_test[:1024], ds.y_test[:1024], seed=0,
                            epochs=2 / steps_per_epoch, log=None, progress=False, device=args.device)
    record["warmup_seconds"] = time.perf_counter() - t
    print(f"warm-up ({warm['steps']} steps and the evaluations): {record['warmup_seconds']:.1f} s",
          flush=True)
    save()
    last = None
    for seed in args.seeds:
        if args.deadline and last is not None and time.perf_counter() - t_start + last > args.deadline:
            print(f"seed {seed}: not started, the deadline of {args.deadline:g} s would pass", flush=True)
            break
        out = train_airbench94(ds.x_train, ds.y_train, ds.x_test, ds.y_test, seed=seed, epochs=args.epochs,
                               log=lambda line, s=seed: print(f"  seed {s}: {line}", flush=True),
                               progress=True, device=args.device)
        last = out["seconds_with_tta"]
        run = {"seed": seed, "steps": out["steps"], "test_accuracy": out["test_accuracy"],
               "tta_test_accuracy": out["tta_test_accuracy"], "train_seconds": out["seconds"],
               "seconds_with_tta": out["seconds_with_tta"]}
        record["runs"].append(run)
        print(f"seed {seed}: {out['test_accuracy']:.4f}, {out['tta_test_accuracy']:.4f} with TTA; "
              f"{out['steps']} steps, {out['seconds']:.1f} s training, {last:.1f} s with the "
              f"evaluations", flush=True)
        save()
    accs = np.array([r["tta_test_accuracy"] for r in record["runs"]])
    if len(accs):
        record["tta_mean"] = float(accs.mean())
        # a spread needs two seeds; JSON has no NaN, so one seed records none
        record["tta_std"] = float(accs.std(ddof=1)) if len(accs) > 1 else None
        sd = f"{record['tta_std']:.4f}" if len(accs) > 1 else "-"
        print(f"{len(accs)} seeds: TTA accuracy mean {accs.mean():.4f}, sd {sd}, "
              f"min {accs.min():.4f}, max {accs.max():.4f}; training "
              f"{np.mean([r['train_seconds'] for r in record['runs']]):.1f} s a seed", flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
