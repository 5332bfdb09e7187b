"""PyTorch's training speed in one process, built and timed as ``numbacnn.bench`` does (interleaved
with numbacnn's step): ``python benchmarks/torch_spread.py mnistcnn 256 2``.

Run it in several processes (and with PYTHONPATH pointing at another checkout, for another version
of the benchmark) to see how far PyTorch's own rate moves between processes: the benchmark's ratios
against PyTorch carry that spread (docs/performance.md, "Keep"). Needs torch. A developer's tool.
"""
import inspect
import sys
import time

import numpy as np
import torch

from numbacnn import bench


def main() -> None:
    net, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bench._set_threads(threads, torch)
    ours = bench._Ours(net, batch)
    ours.train_step()
    first = list(inspect.signature(bench._Torch.__init__).parameters)[1]
    theirs = (bench._Torch(net, batch, ours.net.state_dict()) if first == "net_name"  # older benchmarks
              else bench._Torch(ours.net, batch))
    rates = []
    for _ in range(5):
        time.sleep(0.1)
        bench._time_block(ours.train_step, 0.5)  # the benchmark interleaves the two
        time.sleep(0.1)
        rates.append(bench._time_block(theirs.train_step, 1.0) * batch)
    print(f"{bench.__file__}: {net} batch {batch}, {threads} threads: PyTorch {np.median(rates):.0f} img/s "
          f"(blocks {', '.join(f'{r:.0f}' for r in rates)})")


if __name__ == "__main__":
    main()
