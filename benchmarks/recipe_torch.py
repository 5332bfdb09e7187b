"""airbench94's recipe in PyTorch, on the network numbacnn's recipe starts from (the same initial
weights: whitening, dirac filters), timed: the other side of the whole-run comparison. A full run
takes over half an hour on 2 CPU cores, so ``--steps`` times part of it (one epoch by default) after
two warm-up steps, and the whole 9.9-epoch run is extrapolated from the steps' mean; ``--steps 0``
runs the whole recipe and evaluates it with the recipe's test-time augmentation.

    python benchmarks/recipe_torch.py --data ../shared/data/cifar10/cifar10-dev.npz --threads 2
    python benchmarks/recipe_torch.py --data ... --layouts channels_last,nchw --steps 10 --json out.json

The loop, as airbench's: the loss summed over the batch with label smoothing 0.2, Nesterov SGD
(momentum 0.85) with BatchNorm biases at 64x the learning rate, the triangular schedule, the
whitening conv's weight frozen and its bias after 3 epochs, BatchNorm scales fixed, Lookahead every
5 steps from the 4th epoch (the network takes the slow weights at each epoch's end), translation by
up to 2 pixels with reflect padding and alternating flips, the last partial batch dropped. The data
augmentation runs in PyTorch, on the whole training set at each epoch's start."""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numbacnn.bench import torch_twin  # noqa: E402
from numbacnn.recipes import AIRBENCH94, airbench94_network, airbench94_trainer  # noqa: E402
from numbacnn.runtime import config as _config  # noqa: E402
from numbacnn.training import Callback, Trainer, triangle  # noqa: E402


class _StepTimes(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.last = time.perf_counter()

    def on_step_end(self, trainer: Trainer, step: int) -> None:
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


def numbacnn_steps(x: np.ndarray, y: np.ndarray, steps: int, seed: int = 0) -> tuple[list[float], int, int]:
    """The seconds of each of numbacnn's recipe's first ``steps`` steps (augmentation included),
    the recipe's steps and its batch."""
    net = airbench94_network(x, int(np.max(y)) + 1, seed)
    trainer, schedule, _ = airbench94_trainer(net, len(y), seed, progress=False, log=None)
    total, per_epoch = trainer.max_steps, len(y) // trainer.batch_size
    trainer.max_steps = steps  # (its learning-rate triangle then spans these steps: the same work a step)
    timer = _StepTimes()
    trainer.fit(x, y, math.ceil(steps / per_epoch), callbacks=[schedule, timer])
    return timer.times, total, trainer.batch_size


class TorchAirbench94:
    """The recipe's training loop in PyTorch for images x (N, 3, 32, 32) in [0, 1], labels y."""

    def __init__(self, torch: Any, x: np.ndarray, y: np.ndarray, seed: int = 0,
                 layout: str = "channels_last", device: str = "cpu", batch: int | None = None) -> None:
        h = AIRBENCH94
        self.torch, self.device, self.h = torch, device, h
        net = airbench94_network(x, int(np.max(y)) + 1, seed)
        self.model = torch_twin(net).to(device)
        self.memory = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        self.model.to(memory_format=self.memory)
        mods = list(self.model)
        self.whiten = mods[1]
        self.whiten.weight.requires_grad_(False)
        bn = [m for m in mods if isinstance(m, torch.nn.BatchNorm2d)]
        for m in bn:
            m.weight.requires_grad_(False)
        kilostep = 1024 * (1 + 1 / (1 - h["momentum"]))
        lr = h["lr"] / kilostep  # for the summed loss
        wd = h["weight_decay"] * h["batch_size"] / kilostep
        lr_bias = lr * h["bias_scaler"]
        biases = {id(m.bias) for m in bn}
        others = [p for p in self.model.parameters() if p.requires_grad and id(p) not in biases]
        groups = [{"params": [m.bias for m in bn], "lr": lr_bias, "weight_decay": wd / lr_bias},
                  {"params": others, "lr": lr, "weight_decay": wd / lr}]
        self.opt = torch.optim.SGD(groups, momentum=h["momentum"], nesterov=True)
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.x = torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(device)
        self.y = torch.from_numpy(np.asarray(y, np.int64)).to(device)
        self.n = len(y)
        self.batch = min(batch or h["batch_size"], self.n)  # (another batch: the tests' short epochs)
        self.per_epoch = self.n // self.batch
        self.total = math.ceil(self.per_epoch * h["epochs"])
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.flip0 = torch.rand(self.n, generator=self.gen) < 0.5  # epoch 0's flips, alternated after
        self.padded = torch.nn.functional.pad(self.x, (2, 2, 2, 2), mode="reflect")
        self.loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=h["label_smoothing"], reduction="none")
        self.slow: list[Any] | None = None
        self.step_count = 0
        self.augment_seconds: list[float] = []  # each epoch's augmentation of the training set
        self.epoch = self.pos = 0  # the epoch, and the steps taken in it
        self.images = self.order = None

    def _state(self) -> list[Any]:
        return [v for v in self.model.state_dict().values() if v.dtype.is_floating_point]

    def _sync(self, alpha: float) -> None:
        """Lookahead: slow += alpha (fast - slow), fast = slow (the first call starts the slow weights)."""
        with self.torch.no_grad():
            fast = self._state()
            if self.slow is None:
                self.slow = [v.clone() for v in fast]
                return
            for s, f in zip(self.slow, fast):
                s.lerp_(f, alpha)
                f.copy_(s)

    def epoch_images(self, epoch: int) -> Any:
        """The whole training set translated (reflect padding, up to 2 pixels) and flipped for ``epoch``."""
        torch = self.torch
        shifts = torch.randint(0, 5, (self.n, 2), generator=self.gen)
        out = torch.empty_like(self.x)
        for dy in range(5):
            for dx in range(5):
                sel = ((shifts[:, 0] == dy) & (shifts[:, 1] == dx)).nonzero().flatten().to(self.device)
                out[sel] = self.padded[sel, :, dy:dy + 32, dx:dx + 32]
        flips = (self.flip0 ^ bool(epoch % 2)).nonzero().flatten().to(self.device)
        out[flips] = out[flips].flip(-1)
        return out

    def train(self, steps: int | None = None, times: list[float] | None = None) -> None:
        """Train on to the recipe's end (``steps``: to that many steps in all), appending each
        step's seconds to ``times`` (an epoch's augmentation goes to ``augment_seconds``)."""
        torch, h = self.torch, self.h
        end = self.total if steps is None else min(self.total, steps)
        while self.step_count < end:
            if self.pos == 0:  # an epoch begins
                if self.epoch >= h["whiten_bias_epochs"]:
                    self.whiten.bias.requires_grad_(False)
                t0 = time.perf_counter()
                self.images = self.epoch_images(self.epoch)
                self.order = torch.randperm(self.n, generator=self.gen).to(self.device)
                self.augment_seconds.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            idx = self.order[self.pos * self.batch:(self.pos + 1) * self.batch]
            self._step(self.images[idx].contiguous(memory_format=self.memory), self.y[idx])
            if self.device == "cuda":
                torch.cuda.synchronize()
            if times is not None:
                times.append(time.perf_counter() - t0)
            self.pos += 1
            if self.pos == self.per_epoch:  # it ends: the network takes the slow weights
                self.pos = 0
                self.epoch += 1
                if self.slow is not None:
                    self._sync(0.0)

    def _step(self, xb: Any, yb: Any) -> None:
        factor = triangle(self.step_count, self.total)
        for g, lr in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = lr * factor
        loss = self.loss_fn(self.model(xb), yb).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step_count += 1
        k, s = self.h["lookahead_every"], self.step_count
        if s % k == 0 and (self.slow is not None or self.epoch >= self.h["lookahead_epochs"]):
            self._sync(1.0 - 0.95**5 * (s / self.total) ** 3 if self.slow is not None else 1.0)
        if s >= self.total and self.slow is not None:
            self._sync(0.0)

    def _mirrored(self, b: Any, mirror: bool = True) -> Any:
        """The logits of a batch, or with ``mirror`` the mean of its own and its mirror's."""
        out = self.model(b.contiguous(memory_format=self.memory))
        return (out + self.model(b.flip(-1).contiguous(memory_format=self.memory))) / 2 if mirror else out

    def accuracy(self, x: np.ndarray, y: np.ndarray, tta: bool = True) -> float:
        """Accuracy on (x, y); with the recipe's test-time views: the mirror, and both mirrored
        and plain images translated by one pixel (reflect padded), weighted 1/2 and 1/4 + 1/4."""
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            xt = torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(self.device)
            logits = []
            for i in range(0, len(xt), 2000):
                b = xt[i:i + 2000]
                if not tta:
                    logits.append(self._mirrored(b, False).cpu())
                    continue
                p = torch.nn.functional.pad(b, (1, 1, 1, 1), mode="reflect")
                moved = (self._mirrored(p[:, :, :32, :32]) + self._mirrored(p[:, :, 2:, 2:])) / 2
                logits.append((0.5 * self._mirrored(b) + 0.5 * moved).cpu())
        self.model.train()
        return float((torch.cat(logits).argmax(1).numpy() == np.asarray(y)).mean())


def _layouts(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    bad = [t for t in names if t not in ("numbacnn", "channels_last", "nchw")]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown {bad}: choose from numbacnn, channels_last, nchw")
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps (default: one epoch; 0: the whole run)")
    p.add_argument("--layouts", type=_layouts, default=_layouts("numbacnn,channels_last"),
                   help="what to time, in this order: numbacnn (its recipe), PyTorch's channels_last, nchw")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("recipe_torch.py needs PyTorch: pip install torch", file=sys.stderr)
        return 2
    from numbacnn.data import load_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
        _config.set_num_threads(args.threads)
    ds = load_dataset(args.data)
    x, xt = ds.x_train, ds.x_test  # (N, 3, 32, 32) in [0, 1]
    res: dict[str, Any] = {"data": ds.name, "n_train": len(ds.y_train), "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "numbacnn_threads": _config.get_num_threads(),
                           "device": args.device,
                           "machine": platform.processor() or platform.machine(), "layouts": {}}
    print(f"{ds.name}: {len(ds.y_train)} train; PyTorch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    for layout in args.layouts:
        if layout == "numbacnn":
            if args.device != "cpu" or args.steps == 0:
                continue  # its whole runs: benchmarks/recipe_seeds.py
            steps = len(x) // min(len(x), AIRBENCH94["batch_size"]) if args.steps is None else args.steps
            times, total, batch = numbacnn_steps(x, ds.y_train, steps + 2, args.seed)
            mean = statistics.fmean(times[2:])
            res["layouts"][layout] = {"timed_steps": len(times) - 2, "step_seconds_mean": mean,
                                      "total_steps": total, "run_seconds_extrapolated": mean * total,
                                      "img_s": batch / mean}
            print(f"numbacnn: {len(times) - 2} steps, {mean:.3f} s a step ({batch / mean:.0f} img/s, "
                  f"augmentation included); the recipe's {total} steps: about {mean * total:.0f} s",
                  flush=True)
            continue
        run = TorchAirbench94(torch, x, ds.y_train, args.seed, layout, args.device)
        times: list[float] = []
        if args.steps == 0:
            t0 = time.perf_counter()
            run.train(times=times)
            seconds = time.perf_counter() - t0
            row = {"steps": run.total, "seconds": seconds,
                   "test_accuracy": run.accuracy(xt, ds.y_test, False),
                   "tta_test_accuracy": run.accuracy(xt, ds.y_test)}
            print(f"{layout}: {run.total} steps in {seconds:.1f} s; {100 * row['test_accuracy']:.2f} %, "
                  f"{100 * row['tta_test_accuracy']:.2f} % with TTA", flush=True)
        else:
            steps = run.per_epoch if args.steps is None else args.steps
            run.train(steps + 2, times)
            timed = times[2:]  # the first two steps warm up
            mean = statistics.fmean(timed)
            epochs = math.ceil(run.total / run.per_epoch)
            aug = statistics.fmean(run.augment_seconds)
            whole = mean * run.total + aug * epochs
            row = {"timed_steps": len(timed), "step_seconds_mean": mean,
                   "step_seconds_median": statistics.median(timed),
                   "augment_seconds_per_epoch": aug, "total_steps": run.total, "epochs": epochs,
                   "run_seconds_extrapolated": whole, "img_s": run.batch / mean}
            print(f"{layout}: {len(timed)} steps, {mean:.3f} s a step ({run.batch / mean:.0f} img/s), "
                  f"{aug:.2f} s an epoch's augmentation; the recipe's {run.total} steps: about {whole:.0f} s",
                  flush=True)
        res["layouts"][layout] = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
