"""Where a CUDA training step's time goes: every kernel wrapper of numbacnn.kernels.cuda timed with a
device synchronisation before and after (so launch overhead and GPU time are both in), beside the
step's own time without those synchronisations and PyTorch's step on the same GPU.

    python dev/cuda_profile.py --nets mnistcnn --batches 256
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from numba import cuda

import numbacnn.kernels.cuda  # noqa: F401  (numba-cuda's numpy shim before the first compile)


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
    import numbacnn as nc
    from numbacnn.bench import N_CLASSES, SHAPE, _Torch
    from numbacnn.kernels import cuda as KC

    a = cuda.device_array(128, np.float32)
    _empty[1, 128](a, a, a)
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.launches):
        _empty[1, 128](a, a, a)
    cuda.synchronize()
    print(f"numba.cuda launch of a 3-array kernel: {(time.perf_counter() - t0) / args.launches * 1e6:.1f} us")

    for net_name in args.nets.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            net = nc.build_network(net_name, SHAPE, N_CLASSES, seed=0).to("cuda")
            opt = nc.SGD(net, lr=0.01, momentum=0.9)
            tr = nc.Trainer(net, opt, batch_size=batch, progress=False)
            rng = np.random.default_rng(0)
            x = rng.random((batch,) + SHAPE, dtype=np.float32)
            y = rng.integers(0, N_CLASSES, batch)
            for _ in range(3):
                tr.train_step(x, y)
            times = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                tr.train_step(x, y)
                times.append(time.perf_counter() - t0)
            step = statistics.median(times)
            inf = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                net.forward(x, training=False)
                inf.append(time.perf_counter() - t0)
            tt = [float("nan")]
            import torch
            if torch.cuda.is_available():
                th = _Torch(net, batch, "cuda")
                for _ in range(3):
                    th.train_step()
                tt = []
                for _ in range(args.steps):
                    t0 = time.perf_counter()
                    th.train_step()
                    tt.append(time.perf_counter() - t0)
            print(f"\n{net_name} batch {batch}: step {step * 1e3:.2f} ms ({batch / step:.0f} img/s), "
                  f"inference {statistics.median(inf) * 1e3:.2f} ms; PyTorch step "
                  f"{statistics.median(tt) * 1e3:.2f} ms ({batch / statistics.median(tt):.0f} img/s)")
            stats: dict[str, list[float]] = {}
            originals = {name: getattr(KC, name) for name in KC.__all__
                         if name != "dw_workspace_size"}  # the kernels, not the size helper

            def wrap(name, f, stats=stats):
                def timed(*a):
                    cuda.synchronize()
                    t0 = time.perf_counter()
                    f(*a)
                    cuda.synchronize()
                    s = stats.setdefault(name, [0, 0.0])
                    s[0] += 1
                    s[1] += time.perf_counter() - t0
                return timed
            for name, f in originals.items():
                setattr(KC, name, wrap(name, f))
            try:
                n = 5
                t0 = time.perf_counter()
                for _ in range(n):
                    tr.train_step(x, y)
                total = (time.perf_counter() - t0) / n
            finally:
                for name, f in originals.items():
                    setattr(KC, name, f)
            inside = sum(v[1] for v in stats.values()) / n
            print(f"  synchronised step {total * 1e3:.2f} ms, of it in kernel wrappers "
                  f"{inside * 1e3:.2f} ms")
            for name, (count, sec) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
                print(f"  {name:28} {count // n:3d} calls {sec / n * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
