"""Data-parallel scaling on MPI: measured on this machine, modelled beyond it.

    python benchmarks/scaling.py                    # mnistcnn and lenet5, batch 128 (needs [mpi])
    python benchmarks/scaling.py --nets mnistcnn --batch 256 --steps 60

1. Measured: training img/s of 1 process x 1 thread, 1 process x 2 threads and 2 ranks x 1 thread
   (``mpiexec -n R python -m mpi4py``, the step of ``Trainer`` with ``--distributed``: each rank
   backpropagates its share of the global batch, one Allreduce of the flat gradients), the time per
   step spent in that Allreduce, and the efficiency of 2 ranks x 1 thread against 1 process x 2
   threads. Configurations alternate over ``--rounds``; medians are printed.
2. Modelled (clearly marked): efficiency on R = 2..64 machines of a ring Allreduce,
   t_comm = 2 (R - 1) / R * bytes / bandwidth + 2 (R - 1) * latency, against the compute time of
   each machine's share of the global batch, t_comp = (G / R) / X, with X the img/s of one machine
   (measured here with all its cores, or ``--machine-img-s``); efficiency = t_comp / (t_comp + t_comm)
   (no overlap of communication with the backward).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

NETWORKS = {"10 Gbit/s Ethernet": (10e9, 25e-6), "25 Gbit/s Ethernet": (25e9, 10e-6),
            "100 Gbit/s InfiniBand": (100e9, 2e-6)}  # bandwidth (bit/s), per-message latency (s)

WORKER = r"""
import json, sys, time
import numpy as np
import numbacnn as nc
from numbacnn.distributed import DataParallel
from numbacnn.training import Trainer

net_name, batch, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dp = DataParallel()
nc.set_num_threads(threads)
net = nc.build_network(net_name, (1, 28, 28), 10, seed=0)
opt = nc.SGD(net, lr=0.01, momentum=0.9)
rng = np.random.default_rng(0)
x = rng.random((batch * 4, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, 10, batch * 4)
tr = Trainer(net, opt, batch_size=batch, progress=False, parallel=dp)
idx = np.arange(batch)
for _ in range(3):  # compile and warm up
    tr._parallel_step(x, y, idx, 0)
dp.barrier()
dp.allreduce_seconds = 0.0
t0 = time.perf_counter()
for s in range(steps):
    tr._parallel_step(x, y, idx + (s % 4) * batch, s)
dp.barrier()
dt = time.perf_counter() - t0
if dp.rank == 0:
    print(json.dumps({"img_s": batch * steps / dt, "step_ms": 1e3 * dt / steps,
                      "allreduce_ms": 1e3 * dp.allreduce_seconds / steps, "params": net.n_params}))
"""


def run(net: str, batch: int, ranks: int, threads: int, steps: int) -> dict:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", WORKER, net, str(batch),
           str(threads), str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def model(params: int, machine_img_s: float, batches: list[int], ranks: list[int]) -> list[str]:
    lines = []
    grad_bits = params * 4 * 8
    for name, (bw, lat) in NETWORKS.items():
        for g in batches:
            cells = []
            for r in ranks:
                t_comm = 2 * (r - 1) / r * grad_bits / bw + 2 * (r - 1) * lat
                t_comp = (g / r) / machine_img_s
                cells.append(f"{t_comp / (t_comp + t_comm):5.2f}")
            lines.append(f"  {name:22s} G={g:<5d} " + " ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", default="mnistcnn,lenet5")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--machine-img-s", type=float, default=None,
                   help="img/s of one machine for the model (default: measured here, all cores)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    configs = [(1, 1), (1, min(2, cores)), (2, 1)]
    results: dict = {}
    for net in args.nets.split(","):
        samples: dict = {c: [] for c in configs}
        for _ in range(args.rounds):
            for c in configs:
                time.sleep(0.2)
                samples[c].append(run(net, args.batch, c[0], c[1], args.steps))
        med = {c: {k: statistics.median(s[k] for s in samples[c]) for k in samples[c][0]} for c in configs}
        print(f"\n{net}, global batch {args.batch}, {args.steps} steps x {args.rounds} rounds "
              "(measured, medians)")
        print("  ranks x threads   img/s   step ms   Allreduce ms/step")
        for (r, t), m in med.items():
            print(f"  {r} x {t}        {m['img_s']:9.0f} {m['step_ms']:9.2f} {m['allreduce_ms']:12.3f}")
        eff = med[(2, 1)]["img_s"] / med[(1, min(2, cores))]["img_s"]
        print(f"  efficiency of 2 ranks x 1 thread against 1 process x {min(2, cores)} threads: {eff:.2f}")
        machine = args.machine_img_s or med[(1, min(2, cores))]["img_s"]
        params = int(med[(1, 1)]["params"])
        ranks = [2, 4, 8, 16, 32, 64]
        print(f"  MODELLED ring-Allreduce efficiency, {params * 4 / 1e6:.2f} MB of gradients, "
              f"{machine:.0f} img/s per machine; R = " + " ".join(f"{r:5d}" for r in ranks))
        for line in model(params, machine, [256, 1024, 4096], ranks):
            print(line)
        results[net] = {"measured": {f"{r}x{t}": m for (r, t), m in med.items()}, "efficiency_2x1": eff,
                        "machine_img_s": machine}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
