"""The learning-rate finder (Smith 2015; fastai's ``lr_find``, Lightning's ``lr_find``): train a
copy of the network for a few hundred steps while the learning rate grows exponentially, record
the smoothed loss, and suggest the learning rate where it falls fastest."""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from .network import Sequential
from .optimizers import make_optimizer
from .training import Trainer


@dataclass
class LRFinding:
    """``lrs`` and ``losses`` (smoothed, one per step taken) and the ``suggestion``: the learning
    rate of the steepest fall of the smoothed loss (before its minimum)."""

    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    suggestion: float = math.nan
    stopped_early: bool = False

    def plot(self, path: str) -> None:
        """Save loss against learning rate (log axis) as a picture (needs matplotlib: [plot])."""
        from .report import figure

        fig = figure(6, 4)
        ax = fig.add_subplot()
        ax.plot(self.lrs, self.losses)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("training loss (smoothed)")
        if math.isfinite(self.suggestion):
            ax.axvline(self.suggestion, color="C3", linestyle="--", label=f"suggested {self.suggestion:.2g}")
            ax.legend()
        fig.savefig(path)


def find_lr(net: Sequential, x: np.ndarray, y: np.ndarray, optimizer: str = "adam",
            batch_size: int = 64, start_lr: float = 1e-7, end_lr: float = 10.0, steps: int = 200,
            seed: int = 0, augment: str | None = None, smoothing: float = 0.98,
            diverge: float = 4.0) -> LRFinding:
    """Exponential ramp from ``start_lr`` to ``end_lr`` over ``steps`` steps on shuffled batches
    of (x, y), on a copy of ``net`` (``net`` itself is left as it was). The loss is smoothed with an
    exponential moving average (``smoothing``, bias-corrected); the ramp stops once the smoothed
    loss exceeds ``diverge`` times its minimum, or becomes NaN."""
    if not 0 < start_lr < end_lr:
        raise ValueError(f"find_lr: need 0 < start_lr < end_lr, got {start_lr} and {end_lr}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 10:
        raise ValueError(f"find_lr: steps must be an integer >= 10, got {steps!r}")
    work = copy.deepcopy(net)  # the caller's network is left untouched
    opt = make_optimizer(optimizer, work, lr=start_lr)
    trainer = Trainer(work, opt, batch_size=batch_size, seed=seed, progress=False, augment=augment)
    rng = np.random.default_rng(seed)
    found = LRFinding()
    avg, best = 0.0, math.inf
    order = rng.permutation(len(x))
    pos = 0
    for k in range(steps):
        if pos + batch_size > len(x):
            order, pos = rng.permutation(len(x)), 0
        idx = order[pos:pos + batch_size]
        pos += batch_size
        lr = start_lr * (end_lr / start_lr) ** (k / (steps - 1))
        opt.lr = lr
        loss, _ = trainer.train_step(x[idx], y[idx])
        if not math.isfinite(loss):
            found.stopped_early = True
            break
        avg = smoothing * avg + (1 - smoothing) * loss
        smoothed = avg / (1 - smoothing ** (k + 1))
        found.lrs.append(lr)
        found.losses.append(smoothed)
        best = min(best, smoothed)
        if smoothed > diverge * best:
            found.stopped_early = True
            break
    found.suggestion = _steepest(found.lrs, found.losses)
    return found


def _steepest(lrs: list[float], losses: list[float]) -> float:
    """The learning rate where the loss falls fastest against log(lr), before its minimum."""
    if len(lrs) < 3:
        return math.nan
    end = int(np.argmin(losses)) + 1
    if end < 3:
        return math.nan
    slope = np.gradient(np.asarray(losses[:end]), np.log(np.asarray(lrs[:end])))
    return float(lrs[int(np.argmin(slope))])
