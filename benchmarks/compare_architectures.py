"""Training speed against PyTorch on architectures beyond the two benchmark presets.

Usage: python benchmarks/compare_architectures.py [--batch 64] [--threads 2] [--rounds 5]
Needs PyTorch. Each architecture is built by numbacnn from its spec string, copied into an
equivalent ``torch.nn.Sequential`` with the same weights, and both are timed in interleaved
training blocks (SGD with momentum); the ratio is numbacnn / PyTorch, median over the rounds.
The conv strategy chosen for each layer is printed beside it (``+pool``/``+relu``: fused).
A developer's tool for finding slow paths, not part of the package.
"""
import argparse
import statistics
import time

import numpy as np
import torch

import numbacnn as nc
from numbacnn.bench import torch_twin
from numbacnn.runtime import config as _config

CASES = [  # (spec, input shape)
    ("small", (1, 28, 28)),
    ("compact", (1, 8, 8)),
    ("conv(32,3,stride=2),relu,conv(64,3,stride=2),relu,dense(128),relu", (1, 28, 28)),
    ("conv(16,5,padding=2),relu,maxpool(2),conv(32,5,padding=2),relu,maxpool(2),dense(128),relu",
     (1, 28, 28)),
    ("conv(32,3),relu,maxpool(2),conv(64,3),relu,maxpool(2),dense(128),relu", (3, 32, 32)),
    ("conv(6,5,padding=2),tanh,avgpool(2),conv(16,5),tanh,avgpool(2),dense(120),tanh,dense(84),tanh",
     (1, 28, 28)),
    ("conv(32,3),relu,conv(32,3),relu,maxpool(3,stride=2),conv(64,3),relu,maxpool(2),dense(64),relu,"
     "dropout(0.5)", (1, 28, 28)),
]


def compare(spec: str, shape: tuple[int, ...], batch: int, rounds: int, block: float) -> None:
    net = nc.build_network(spec, shape, 10, seed=0)
    tnet = torch_twin(net)
    opt = nc.SGD(net, lr=0.01, momentum=0.9)
    topt = torch.optim.SGD(tnet.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.random((batch,) + shape, dtype=np.float32)
    y = rng.integers(0, 10, batch)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def ours() -> None:
        _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        net.backward(d, need_input_grad=False)
        opt.step()

    def theirs() -> None:
        topt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(tnet(tx), ty).backward()
        topt.step()

    for f in (ours, theirs, ours, theirs):  # compile, allocate
        f()
    ratios, rates = [], []
    for _ in range(rounds):
        r = []
        for f in (ours, theirs):
            time.sleep(0.05)
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < block:
                f()
                n += 1
            r.append(n * batch / (time.perf_counter() - t0))
        ratios.append(r[0] / r[1])
        rates.append(r[0])
    strategies = [layer.strategy + ("+pool" if layer.fusion.pool else "")
                  + ("+relu" if layer.fusion.relu else "")
                  for layer in net.layers if isinstance(layer, nc.Conv2D)]
    print(f"{statistics.median(rates):9.0f} img/s  {statistics.median(ratios):5.2f}x  {shape}  "
          f"{spec}  [{', '.join(strategies)}]", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=float, default=0.3)
    args = p.parse_args()
    _config.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"training, batch {args.batch}, {args.threads} threads: numbacnn img/s, ratio to PyTorch")
    for spec, shape in CASES:
        compare(spec, shape, args.batch, args.rounds, args.block)


if __name__ == "__main__":
    main()
