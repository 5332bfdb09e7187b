"""Where a CUDA training step's time goes: the step as Trainer.fit takes it (a CUDA graph after the
second step), the graph alone (no batch copy, optimizer or statistics), the step launched kernel by
kernel, PyTorch's step on the same GPU, and the GPU time of every kernel call in the step (each
call captured in a graph of REPEAT copies of itself, so launch cost is out).

    python dev/cuda_profile.py --nets mnistcnn --batches 256
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from numba import cuda

import numbacnn.kernels.cuda  # noqa: F401  (numba-cuda's numpy shim before the first compile)

REPEAT = 20


def median_time(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@cuda.jit
def _empty(a, b, c):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = b[i] + c[i]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nets", default="mnistcnn")
    p.add_argument("--batches", default="256")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--launches", type=int, default=2000)
    args = p.parse_args()
    from numbacnn.kernels.cuda._launch import on

    a = cuda.device_array(128, np.float32)
    _empty[on(1, 128)](a, a, a)
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.launches):
        _empty[on(1, 128)](a, a, a)
    cuda.synchronize()
    print(f"numba.cuda launch of a 3-array kernel: {(time.perf_counter() - t0) / args.launches * 1e6:.1f} us")

    for net_name in args.nets.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            profile(net_name, batch, args.steps)


def profile(net_name: str, batch: int, steps: int) -> None:
    import numbacnn as nc
    from numbacnn.bench import N_CLASSES, SHAPE, _Torch

    net = nc.build_network(net_name, SHAPE, N_CLASSES, seed=0).to("cuda")
    opt = nc.SGD(net, lr=0.01, momentum=0.9)
    tr = nc.Trainer(net, opt, batch_size=batch, progress=False)
    rng = np.random.default_rng(0)
    x = rng.random((batch,) + SHAPE, dtype=np.float32)
    y = rng.integers(0, N_CLASSES, batch)
    for _ in range(3):
        tr.train_step(x, y)
    step = median_time(lambda: tr.train_step(x, y), steps)
    prog = next(iter(tr._programs.values()))
    graph = prog.device.graph
    alone = median_time(graph.launch, steps) if graph else float("nan")
    by_one = nc.Trainer(net, opt, batch_size=batch, progress=False, step_programs=False)
    by_one.train_step(x, y)
    one = median_time(lambda: by_one.train_step(x, y), steps)
    net.forward(x)
    net.forward(x)
    inf = median_time(lambda: net.forward(x), steps)
    tt = ti = float("nan")
    import torch
    if torch.cuda.is_available():
        th = _Torch(net, batch, "cuda")
        for _ in range(3):
            th.train_step()
            th.infer()
        tt = median_time(th.train_step, steps)
        ti = median_time(th.infer, steps)
    print(f"\n{net_name} batch {batch}: step {step * 1e3:.3f} ms ({batch / step:.0f} img/s; "
          f"the graph alone {alone * 1e3:.3f} ms; kernel by kernel {one * 1e3:.3f} ms), "
          f"inference {inf * 1e3:.3f} ms ({batch / inf:.0f} img/s); PyTorch step "
          f"{tt * 1e3:.3f} ms ({batch / tt:.0f} img/s), inference {ti * 1e3:.3f} ms "
          f"({batch / ti:.0f} img/s)")
    if not graph:
        return
    total = 0.0
    rows = []
    for fn, call_args in graph.keep:
        g = net.backend.graph(lambda fn=fn, a=call_args: [fn(*a) for _ in range(REPEAT)])
        sec = median_time(g.launch, 5) / REPEAT
        total += sec
        rows.append((fn.__name__, sec))
    print(f"  {len(rows)} kernel calls, GPU time {total * 1e3:.3f} ms:")
    for name, sec in rows:
        print(f"  {name:28} {sec * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
