"""Per-layer forward/backward time of one training step: ``python benchmarks/profile_layers.py``.

Usage: python benchmarks/profile_layers.py [net] [batch] [threads] [input, e.g. 3,32,32] [repeats]
       [precision: float32 or bf16]
Prints milliseconds per layer (median of repeated runs) so that kernel work can be aimed where
the time goes. Not part of the package: a developer's tool.
"""
import sys
import time

import numpy as np

from numbacnn.arch import build_network
from numbacnn.runtime import config as _config


def main() -> None:
    net_name = sys.argv[1] if len(sys.argv) > 1 else "mnistcnn"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    shape = tuple(int(v) for v in sys.argv[4].split(",")) if len(sys.argv) > 4 else (1, 28, 28)
    _config.set_num_threads(threads)
    net = build_network(net_name, shape, 10, seed=0)
    x = np.random.default_rng(0).random((batch, *shape), dtype=np.float32)
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    precision = sys.argv[6] if len(sys.argv) > 6 else "float32"
    net.set_precision(precision)
    fwd = np.zeros((reps, len(net.layers)))
    bwd = np.zeros((reps, len(net.layers)))
    for r in range(reps + 3):
        h, inputs = x, []
        for i, layer in enumerate(net.layers):
            inputs.append(h)
            t0 = time.perf_counter()
            h = layer.forward(h, training=True)
            if r >= 3:
                fwd[r - 3, i] = time.perf_counter() - t0
        g = np.ones_like(h) / h.size
        for i in range(len(net.layers) - 1, -1, -1):
            t0 = time.perf_counter()
            g = net.layers[i].backward(g, need_dx=i > 0)
            if r >= 3:
                bwd[r - 3, i] = time.perf_counter() - t0
    f = np.median(fwd, 0) * 1e3
    b = np.median(bwd, 0) * 1e3
    print(f"{net_name} batch {batch} threads {threads} {precision}: ms per layer (median of {reps})")
    for i, layer in enumerate(net.layers):
        strat = getattr(layer, "strategy", "")
        if strat == "winograd":  # what its chooser ran for this input: F(4x4), F(2x2) or "positions"
            strat = layer.plan.variant(inputs[i].shape, layer.fusion.pool)
        print(f"  {i:2d} {layer!r:28s} {strat:7s} fwd {f[i]:7.3f}  bwd {b[i]:7.3f}")
    total = f.sum() + b.sum()
    print(f"  total fwd {f.sum():.3f} bwd {b.sum():.3f} = {total:.3f} ms -> {batch / total * 1e3:.0f} img/s")


if __name__ == "__main__":
    main()
