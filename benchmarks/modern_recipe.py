"""The modern small-CNN recipe in numbacnn and in PyTorch, same data, same machine,
one process (run one after the other): four 3x3 convs (32, 32, 64, 64, same padding) each with
BatchNorm and ReLU, max pools after the 2nd and 4th, dense 128 + dropout 0.25, random shifts of up
to 2 pixels, Adam with a one-cycle schedule (max lr 4e-3), batch 64.

    python benchmarks/modern_recipe.py --data ../shared/data/mnist --epochs 15 --seeds 0 1 2 \\
        --json benchmarks/modern-recipe-2core.json

Prints per framework and seed the test accuracy, the training img/s (the epochs' own time, no
evaluation) and the ratio numbacnn / PyTorch of the img/s. PyTorch's shift is written to be fast:
the batch is padded once and each of the 25 offsets copies its examples with one slice.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numbacnn as nc  # noqa: E402

LR, BATCH, SHIFT = 4e-3, 64, 2


def run_numbacnn(ds, epochs: int, seed: int) -> dict:
    net = nc.build_network("modern", ds.input_shape, ds.n_classes, seed=seed)
    tr = nc.Trainer(net, nc.Adam(net, lr=LR), batch_size=BATCH, seed=seed, progress=False,
                    augment=f"shift:{SHIFT}", lr_schedule="onecycle")
    hist = tr.fit(ds.x_train, ds.y_train, epochs)
    seconds = sum(h["seconds"] for h in hist)
    return {"test_accuracy": nc.evaluate(net, ds.x_test, ds.y_test)[1],
            "images_per_second": len(ds.y_train) * epochs / seconds, "train_seconds": seconds}


def run_torch(ds, epochs: int, seed: int) -> dict:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    c = ds.input_shape[0]

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU()]
    side = ds.input_shape[1] // 4
    net = nn.Sequential(*block(c, 32), *block(32, 32), nn.MaxPool2d(2), *block(32, 64), *block(64, 64),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(),
                        nn.Dropout(0.25), nn.Linear(128, ds.n_classes))
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train.astype(np.int64))
    n = len(y)
    steps = -(-n // BATCH)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=epochs * steps)
    gen = torch.Generator().manual_seed(seed)
    H, W = ds.input_shape[1:]
    seconds = 0.0
    net.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        t0 = time.perf_counter()
        for s in range(steps):
            idx = order[s * BATCH:(s + 1) * BATCH]
            padded = nn.functional.pad(x[idx], (SHIFT,) * 4)
            off = torch.randint(0, 2 * SHIFT + 1, (len(idx), 2), generator=gen)
            code = off[:, 0] * (2 * SHIFT + 1) + off[:, 1]
            xb = torch.empty_like(x[idx])
            for k in torch.unique(code).tolist():
                rows = (code == k).nonzero().squeeze(1)
                dy, dx = divmod(k, 2 * SHIFT + 1)
                xb[rows] = padded[rows, :, dy:dy + H, dx:dx + W]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(xb), y[idx])
            loss.backward()
            opt.step()
            sched.step()
        seconds += time.perf_counter() - t0
    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(torch.from_numpy(ds.x_test[i:i + 512])).argmax(1)
                          for i in range(0, len(ds.y_test), 512)]).numpy()
    return {"test_accuracy": float((pred == ds.y_test).mean()),
            "images_per_second": n * epochs / seconds, "train_seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="as train.py --data (default: digits)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--frameworks", nargs="+", default=["numbacnn", "torch"])
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    threads = nc.set_num_threads(a.threads)
    ds = nc.load_dataset(a.data)
    if "torch" in a.frameworks:
        import torch
        torch.set_num_threads(threads)
    runs = {"numbacnn": run_numbacnn, "torch": run_torch}
    results: dict = {"data": ds.name, "epochs": a.epochs, "threads": threads, "runs": []}
    for seed in a.seeds:
        for fw in a.frameworks:
            r = {"framework": fw, "seed": seed, **runs[fw](ds, a.epochs, seed)}
            results["runs"].append(r)
            print(f"{fw:9s} seed {seed}: test accuracy {r['test_accuracy']:.4f}, "
                  f"{r['images_per_second']:.0f} img/s training", flush=True)
    speeds = {fw: statistics.median(r["images_per_second"] for r in results["runs"] if r["framework"] == fw)
              for fw in a.frameworks}
    if len(speeds) == 2:
        results["speed_ratio"] = speeds["numbacnn"] / speeds["torch"]
        print(f"numbacnn / torch training img/s (medians): {results['speed_ratio']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
