"""The idle machine under numbacnn's OpenMP spin against libgomp's default: each benchmark row timed
in two worker processes, one per setting, in interleaved blocks (libgomp reads its spin once, when it
loads, so the settings cannot share a process).

    python benchmarks/spin_ab.py [--nets lenet5,mnistcnn,modern,resnet8] [--rounds 7] [--block 0.4]
        [--threads 2] [--spin N] [--json F]

Rows: training at batch 64, inference at batch 1 and 64 (``numbacnn.bench``'s steps). Each row prints
the median over rounds of (img/s under libgomp's default) / (img/s under numbacnn's spin): above 1 means
numbacnn's default is slower there.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

_WORKER = r"""
import sys, time
import numbacnn as nc
from numbacnn.bench import _Ours
nc.set_num_threads(int(sys.argv[1]))
models = {}
for line in sys.stdin:
    net, kind, batch, block = line.split()
    key = (net, kind, int(batch))
    if key not in models:
        models[key] = _Ours(net, int(batch))
        step = models[key].train_step if kind == "train" else models[key].infer
        for _ in range(3):
            step()
    m = models[key]
    step = m.train_step if kind == "train" else m.infer
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < float(block):
        step()
        n += 1
    print(n * int(batch) / (time.perf_counter() - t0), flush=True)
"""

SETTINGS = {"numbacnn": {}, "libgomp default": {"GOMP_SPINCOUNT": "300000"}}
ROWS = (("train", 64), ("infer", 1), ("infer", 64))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nets", default="lenet5,mnistcnn,modern,resnet8")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--block", type=float, default=0.4, help="seconds per timed block")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--spin", help="GOMP_SPINCOUNT for numbacnn's side (default: numbacnn's own choice)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    settings = dict(SETTINGS, numbacnn={"GOMP_SPINCOUNT": args.spin} if args.spin else {})
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    workers = {name: subprocess.Popen([sys.executable, "-c", _WORKER, str(args.threads)], text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env, **extra))
               for name, extra in settings.items()}

    def timed(name: str, net: str, kind: str, batch: int) -> float:
        w = workers[name]
        assert w.stdin is not None and w.stdout is not None
        w.stdin.write(f"{net} {kind} {batch} {args.block}\n")
        w.stdin.flush()
        return float(w.stdout.readline())

    results: dict[str, dict[str, float]] = {}
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, {args.rounds} rounds "
          f"of {args.block} s: img/s under libgomp's default over numbacnn's spin (median)")
    try:
        for net in args.nets.split(","):
            for kind, batch in ROWS:
                ratios, rates = [], {name: [] for name in settings}
                for r in range(args.rounds):
                    order = list(settings) if r % 2 == 0 else list(settings)[::-1]
                    got = {name: timed(name, net, kind, batch) for name in order}
                    for name in settings:
                        rates[name].append(got[name])
                    ratios.append(got["libgomp default"] / got["numbacnn"])
                row = f"{net} {kind} batch {batch}"
                results[row] = {"libgomp default / numbacnn (median)": statistics.median(ratios)}
                for name, v in rates.items():
                    results[row][f"{name} img/s (median)"] = statistics.median(v)
                print(f"{row:28s} {statistics.median(ratios):.3f}  ({', '.join(f'{r:.2f}' for r in ratios)})",
                      flush=True)
    finally:
        for w in workers.values():
            w.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "threads": args.threads, "rounds": args.rounds, "block s": args.block,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
