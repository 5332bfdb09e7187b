"""The fit/evaluate loop shared by the command line and the scikit-learn estimator.

Reproducible (the seed drives the shuffling and dropout; the kernels are thread-count independent),
resumable mid-epoch, stops cleanly on SIGINT/SIGTERM and on a NaN/inf loss.
"""
from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from . import augment as aug
from ._text import interactive
from .augment import Augment
from .loss import check_label_smoothing, check_loss, regression_loss, softmax_cross_entropy
from .network import Sequential
from .optimizers import Optimizer
from .runtime.program import StepProgram

if TYPE_CHECKING:
    from .distributed import DataParallel


LR_SCHEDULES = ("constant", "cosine", "onecycle", "triangle")


def _shown(v: Any) -> str:
    """A value for an error message: its JSON, at most 60 characters."""
    import json

    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def onecycle(step: int, total: int, max_lr: float, pct_start: float = 0.3, div_factor: float = 25.0,
             final_div_factor: float = 1e4, momenta: tuple[float, float] = (0.85, 0.95)
             ) -> tuple[float, float]:
    """(lr, momentum) of step ``step`` (0-based) of ``total`` under torch's OneCycleLR (cosine
    annealing, two phases): lr rises from max_lr / div_factor to max_lr over the first pct_start
    of the steps and falls to max_lr / div_factor / final_div_factor at the last; the momentum
    moves the other way between momenta[1] and momenta[0]."""
    initial = max_lr / div_factor
    warm_end = float(pct_start * total) - 1  # the warm-up's last step (torch's end_step)
    if step <= warm_end:
        start, end, lr0, lr1, m0, m1 = 0.0, warm_end, initial, max_lr, momenta[1], momenta[0]
    else:
        start, end, lr0, lr1, m0, m1 = (warm_end, float(total - 1), max_lr, initial / final_div_factor,
                                        momenta[0], momenta[1])
    cos = math.cos(math.pi * (step - start) / (end - start)) + 1
    return lr1 + (lr0 - lr1) / 2.0 * cos, m1 + (m0 - m1) / 2.0 * cos


def triangle(step: int, total: int, warmup: float = 0.23, start: float = 0.2, end: float = 0.07) -> float:
    """The learning-rate multiplier of step ``step`` (0-based) of ``total`` under airbench's schedule:
    linear from ``start`` to 1 over the first int(warmup * total) steps, then linear to ``end`` at
    step ``total``."""
    warm = int(total * warmup)
    if step < warm:
        frac = step / warm
        return start * (1 - frac) + frac
    frac = (step - warm) / max(1, total - warm)
    return (1 - frac) + end * frac


class DivergenceError(RuntimeError):
    """The loss became NaN or infinite; the weights are those of the last good step."""


class TrainingInterrupted(Exception):
    """Training stopped on a signal after finishing the current step (state is consistent)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def evaluate(net: Sequential, x: np.ndarray, y: np.ndarray, batch_size: int = 256,
             parallel: DataParallel | None = None, tta: str | None = None) -> tuple[float, float]:
    """Mean cross-entropy loss and accuracy of ``net`` on (x, y), in inference mode; with
    ``parallel``, each rank evaluates its share and the sums are reduced; ``tta``: test-time
    augmentation, "mirror" or "mirror-translate" (``numbacnn.tta``)."""
    from . import tta as _tta

    mode = _tta.check(tta, tuple(x.shape[1:]))
    n = len(x)
    if parallel is not None:
        share = parallel.share(np.arange(n))
        x, y = x[share], y[share]
    total, correct = 0.0, 0
    for lo in range(0, len(x), batch_size):
        logits = _tta.logits(net, x[lo:lo + batch_size], mode)
        yb = y[lo:lo + batch_size]
        loss, _ = softmax_cross_entropy(logits, yb)
        total += loss * len(yb)
        correct += int((logits.argmax(1) == yb).sum())
    if parallel is not None:
        total, correct = parallel.sum(np.array([total, correct], np.float64)).tolist()
    return total / n, correct / n


def evaluate_regression(net: Sequential, x: np.ndarray, y: np.ndarray, batch_size: int = 256,
                        delta: float = 0.0, scale: tuple[Any, Any] = (0.0, 1.0)) -> dict[str, float]:
    """The loss (MSE, or Huber with ``delta``) of ``net``'s outputs against targets y (N, K) in
    inference mode, and, with outputs and targets mapped back by ``scale`` = (mean, std) (the
    training targets' standardisation), the RMSE, MAE and R^2 (1 - SSE / SST about the targets'
    own mean, averaged over the outputs, as scikit-learn's ``r2_score``) in the targets' units."""
    out = np.concatenate([net.forward(x[lo:lo + batch_size], training=False)
                          for lo in range(0, len(x), batch_size)])
    loss, _ = regression_loss(out, y, delta)
    mean, std = (np.asarray(v, np.float64) for v in scale)
    pred, true = out.astype(np.float64) * std + mean, np.asarray(y, np.float64) * std + mean
    err = pred - true
    sst = ((true - true.mean(0)) ** 2).sum(0)
    r2 = float(np.mean(1.0 - (err ** 2).sum(0) / np.where(sst > 0, sst, np.nan)))
    return {"loss": loss, "rmse": float(np.sqrt((err ** 2).mean())), "mae": float(np.abs(err).mean()),
            "r2": r2}


def confusion_matrix(net: Sequential, x: np.ndarray, y: np.ndarray, n_classes: int,
                     parallel: DataParallel | None = None) -> np.ndarray:
    """Counts of (true class, predicted class) on (x, y); with ``parallel``, split over the ranks."""
    if parallel is not None:
        share = parallel.share(np.arange(len(x)))
        x, y = x[share], y[share]
    m = np.zeros((n_classes, n_classes), np.int64)
    if len(x):
        np.add.at(m, (y, net.predict(x)), 1)
    if parallel is not None:
        m = parallel.sum(m)
    return m


class Callback:
    """Hooks into ``Trainer.fit``; subclasses override what they need. ``on_epoch_end`` gets the
    epoch's statistics (the entry about to go into ``history``: add keys freely) and may set
    ``trainer.stop_training`` to end training after this epoch."""

    def on_train_begin(self, trainer: Trainer) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        pass

    def on_step_end(self, trainer: Trainer, step: int) -> None:
        """After each optimizer step; ``step``: steps done in all (1 after the first)."""

    def on_train_end(self, trainer: Trainer) -> None:
        """After the last epoch (not after an interruption or an error)."""


class EarlyStopping(Callback):
    """Stop when the validation loss (``monitor``) has not improved for ``patience`` epochs, and
    put back the weights (and BatchNorm statistics) of the best epoch at the end. Needs validation
    data in ``fit`` (``x_val``, ``y_val``). ``best_epoch`` and ``best`` tell what was kept."""

    def __init__(self, patience: int, monitor: str = "val_loss", min_delta: float = 0.0,
                 restore_best: bool = True) -> None:
        if isinstance(patience, bool) or not isinstance(patience, (int, np.integer)) or patience < 1:
            raise ValueError(f"early stopping: patience must be a positive integer, got {patience!r}")
        if monitor not in ("val_loss", "val_accuracy"):
            raise ValueError(f"early stopping: monitor must be 'val_loss' or 'val_accuracy', got {monitor!r}")
        self.patience, self.monitor, self.min_delta = int(patience), monitor, float(min_delta)
        self.restore_best = restore_best
        self.best: float | None = None
        self.best_epoch = 0
        self.best_state: dict[str, np.ndarray] | None = None
        self.stopped = False

    def on_train_begin(self, trainer: Trainer) -> None:
        self.stopped = False

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        if self.monitor not in stats:
            raise ValueError("early stopping needs validation data (x_val, y_val; --val-size)")
        value = stats[self.monitor]
        sign = 1.0 if self.monitor == "val_loss" else -1.0
        if self.best is None or sign * (self.best - value) > self.min_delta:
            self.best, self.best_epoch = value, stats["epoch"]
            self.best_state = trainer.net.state_dict()
        elif stats["epoch"] - self.best_epoch >= self.patience:
            trainer.stop_training = self.stopped = True
        stats["best_epoch"] = self.best_epoch

    def on_train_end(self, trainer: Trainer) -> None:
        if self.restore_best and self.best_state is not None:
            trainer.net.load_state_dict(self.best_state)


@contextmanager
def _stop_on_signals(trainer: Trainer):
    """Turn SIGINT/SIGTERM into a flag checked between steps (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        trainer.stop_signal = signum

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Trainer:
    """Mini-batch training of ``net`` with ``optimizer``.

    Parameters
    ----------
    batch_size : int
    seed : int
        Seeds the shuffling (the network's own seed drives initialisation and dropout).
    progress : bool
        A summary line per epoch, and a live tqdm bar during each epoch when stderr is a
        terminal (``interactive()``).
    shuffle : bool
        Visit the examples in a new random order every epoch (else in order).
    lr_schedule : "constant", "cosine" or "onecycle"
        "cosine" anneals the learning rate from its initial value towards 0 over the epochs of
        ``fit``: epoch e (0-based) of E uses lr * (1 + cos(pi * e / E)) / 2. "onecycle" is
        ``torch.optim.lr_scheduler.OneCycleLR`` with its defaults, stepped per batch over all the
        steps of ``fit``, with the optimizer's lr as max_lr: a cosine warm-up from max_lr / 25 over
        30 % of the steps, then a cosine anneal to max_lr / 25e4; SGD's momentum (when > 0) and
        Adam's beta1 cycle inversely between 0.95 and 0.85. "triangle" (airbench's): per batch,
        linear from 0.2 lr to lr over the first 23 % of the steps, then linear to 0.07 lr.
    augment : str, Augment or None
        Per-batch augmentation of image batches ("shift:2", "crop:4,flip"; see ``Augment``), drawn
        from ``seed``, the epoch and the step.
    label_smoothing : float
        Cross-entropy against targets (1 - eps) * onehot + eps / K (torch's ``label_smoothing``).
    parallel : numbacnn.distributed.DataParallel or None
        MPI data parallelism: each rank backpropagates its share of every (global) batch.
    step_programs : bool
        On the CPU, record each batch shape's step once and replay its kernel calls
        (``numbacnn/runtime/program.py``; the same results bit for bit, less Python per step).
    drop_last : bool
        Leave out each epoch's last, partial batch (one batch shape; the examples it would hold
        come in other epochs' batches).
    max_steps : int or None
        Stop after this many optimizer steps in all (a fractional number of epochs: the last epoch
        ends early); per-batch schedules run over this many steps.
    loss : "cross_entropy", "mse" or "huber"
        Classification (labels y) or regression of float targets y (N, K) against the network's K
        outputs: the mean squared error, or Huber's loss with ``huber_delta`` (torch's).
    precision : "float32", "bf16" or None
        The network's multiplications (``Sequential.set_precision``; numbacnn/precision.py): "bf16"
        as torch.autocast (float32 weights, gradients, optimizer state and loss; bfloat16 operands
        with float32 sums in the layers that have bf16 kernels). None: as the network is set.
    """

    def __init__(self, net: Sequential, optimizer: Optimizer, batch_size: int = 64, seed: int = 0,
                 progress: bool = True, log: Callable[[str], None] | None = None,
                 shuffle: bool = True, lr_schedule: str = "constant",
                 parallel: DataParallel | None = None, step_programs: bool = True,
                 augment: str | Augment | None = None, label_smoothing: float = 0.0,
                 drop_last: bool = False, max_steps: int | None = None, loss: str = "cross_entropy",
                 huber_delta: float = 1.0, precision: str | None = None) -> None:
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {lr_schedule!r}")
        self.lr_schedule = lr_schedule
        self.base_lr = optimizer.lr
        self.augment = Augment.parse(augment)
        self.label_smoothing = check_label_smoothing(label_smoothing)
        self.loss = check_loss(loss, huber_delta)
        self.regress = self.loss[0] != "cross_entropy"
        # regression: the training targets' (mean, std) that the reported RMSE and MAE undo
        self.target_scale: tuple[Any, Any] = (0.0, 1.0)
        if self.regress and self.label_smoothing:
            raise ValueError("label_smoothing applies to classification (loss='cross_entropy') only")
        self.seed = int(seed)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
        if max_steps is not None and (isinstance(max_steps, bool)
                                      or not isinstance(max_steps, (int, np.integer)) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
        self.drop_last = bool(drop_last)
        self.max_steps = None if max_steps is None else int(max_steps)
        if precision is not None:
            net.set_precision(precision)
        self.net = net
        self.optimizer = optimizer
        self.batch_size = int(batch_size)
        self.rng = np.random.default_rng(seed)
        self.progress = progress
        self.shuffle = shuffle
        self.log = log or print
        self.history: list[dict[str, Any]] = []
        self.epoch = 0  # completed epochs
        self.stop_signal: int | None = None
        self.stop_training = False  # set by a callback: stop after the current epoch
        self.parallel = parallel
        self.step_programs = step_programs
        self._agreed_stop: int | None = None  # the stop signal all ranks agreed on (distributed)
        self._programs: dict[tuple, StepProgram] = {}  # steps by batch shape
        self._arange: dict[int, np.ndarray] = {}  # train_step's index arrays by batch size
        self._checked: tuple[Any, Any] = (None, None)  # the (x, y) arrays the programs may read
        # mid-epoch position (for resuming an interrupted epoch)
        self._epoch_rng_state: dict | None = None
        self._step = 0
        self._partial = {"loss": 0.0, "correct": 0, "seen": 0, "seconds": 0.0}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()  # recorded steps are per process: rebuilt after unpickling
        state["_programs"], state["_checked"] = {}, (None, None)
        return state

    # --- checkpoint state ------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self._step, "rng": self.rng.bit_generator.state,
                "epoch_rng": self._epoch_rng_state, "partial": dict(self._partial),
                "history": self.history, "batch_size": self.batch_size, "base_lr": self.base_lr,
                "lr_schedule": self.lr_schedule, "seed": self.seed}

    def load_state(self, st: dict[str, Any], n: int | None = None) -> None:
        """Restore ``state()``'s output, checked whole first (``check_state``; ``n``: the
        examples an epoch will see, for the mid-epoch position)."""
        self.check_state(st, n)
        self.epoch = int(st["epoch"])
        self._step = int(st["step"])
        self.rng.bit_generator.state = st["rng"]
        self._epoch_rng_state = st["epoch_rng"]
        self._partial = dict(st["partial"])
        self.history = list(st["history"])
        self.base_lr = float(st.get("base_lr", self.base_lr))
        self.lr_schedule = st.get("lr_schedule", self.lr_schedule)
        self.seed = int(st.get("seed", self.seed))

    def check_state(self, st: Any, n: int | None = None) -> None:
        """ValueError naming the first field of a saved trainer state (a checkpoint's, possibly
        edited by hand) that ``load_state`` and the resumed epoch could not use."""
        def whole(v: Any, low: int = 0, high: int = 2**53) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and low <= v < high

        def number(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

        def generator(v: Any) -> bool:
            try:
                np.random.default_rng(0).bit_generator.state = v
            except (TypeError, ValueError, KeyError, OverflowError, AttributeError):
                return False
            return True

        if not isinstance(st, dict):
            raise ValueError(f"the trainer state is a {type(st).__name__}, not an object")
        p = st.get("partial")
        checks = {
            "epoch": whole(st.get("epoch"), 0, 2**31), "step": whole(st.get("step")),
            "rng": generator(st.get("rng")),
            "epoch_rng": st.get("epoch_rng") is None or generator(st.get("epoch_rng")),
            "partial": isinstance(p, dict) and set(p) == {"loss", "correct", "seen", "seconds"}
            and number(p["loss"]) and number(p["seconds"]) and whole(p["correct"]) and whole(p["seen"])
            and p["correct"] <= p["seen"] and (n is None or p["seen"] <= n),
            "history": isinstance(st.get("history"), list) and all(
                isinstance(h, dict) and whole(h.get("epoch"), 1) and all(
                    isinstance(k, str) and (v is None or isinstance(v, (int, float))) for k, v in h.items())
                for h in st["history"]),
            "batch_size": whole(st.get("batch_size"), 1), "seed": whole(st.get("seed", 0), 0, 2**64),
            "base_lr": number(st.get("base_lr", 1.0)) and st.get("base_lr", 1.0) > 0,
            "lr_schedule": st.get("lr_schedule", "constant") in LR_SCHEDULES,
        }
        bad = next((k for k, ok in checks.items() if not ok), None)
        if bad is not None:
            raise ValueError(f"the trainer state's field {bad!r} holds {_shown(st.get(bad))}, which is "
                             f"not valid there")
        if st["batch_size"] != self.batch_size:
            raise ValueError(f"the trainer state's field 'batch_size' holds {st['batch_size']}, not the "
                             f"run's {self.batch_size}")
        if len(st["history"]) != st["epoch"]:
            raise ValueError(f"the trainer state's field 'history' holds {len(st['history'])} epochs, its "
                             f"'epoch' says {st['epoch']}")
        if n is not None and st["epoch_rng"] is not None:
            steps = self.steps_per_epoch(n)
            seen = st["partial"]["seen"]
            if st["step"] > steps or (st["step"] > 0 and seen == 0):
                raise ValueError(f"the trainer state's field 'step' holds {st['step']} (with "
                                 f"{seen} examples seen), but an epoch here has {steps} steps")

    # --- training --------------------------------------------------------------------------------
    def steps_per_epoch(self, n: int) -> int:
        """Optimizer steps in an epoch of n examples."""
        if self.drop_last and n >= self.batch_size:
            return n // self.batch_size
        n_steps = -(-n // self.batch_size)
        if n > self.batch_size and n % self.batch_size == 1 and any(
                layer.min_batch > 1 for layer in self.net.all_layers()):
            n_steps -= 1  # a last batch of one example joins the one before: BatchNorm1D needs two
        return n_steps

    def train_epoch(self, x: np.ndarray, y: np.ndarray, total_epochs: int | None = None,
                    on_step: Callable[[int], None] | None = None,
                    sample_weight: np.ndarray | None = None) -> dict[str, Any]:
        """One pass over (x, y) in shuffled mini-batches; resumes a partly done epoch. With
        ``sample_weight`` each batch's loss is the weighted mean of its examples' losses."""
        n = len(x)
        self._checked = (None, None)  # labels are checked again each epoch (arrays may change)
        if self._epoch_rng_state is None:
            self._epoch_rng_state = dict(self.rng.bit_generator.state)
            order = self.rng.permutation(n) if self.shuffle else np.arange(n)
            self._step = 0
            self._partial = {"loss": 0.0, "correct": 0, "seen": 0, "seconds": 0.0}
        else:  # resuming: the same permutation as before the interruption
            g = np.random.default_rng()
            g.bit_generator.state = self._epoch_rng_state
            order = g.permutation(n) if self.shuffle else np.arange(n)
        n_steps = per_epoch = self.steps_per_epoch(n)
        last = n if not self.drop_last or n < self.batch_size else n_steps * self.batch_size
        total_steps = self.max_steps or (total_epochs or 1) * n_steps
        if self.max_steps is not None:  # the last epoch may end early
            n_steps = max(0, min(n_steps, self.max_steps - self.epoch * n_steps))
        bar = None
        if self.progress and interactive():  # a log file gets the per-epoch lines only
            from tqdm.auto import tqdm
            label = f"epoch {self.epoch + 1}" + (f"/{total_epochs}" if total_epochs else "")
            bar = tqdm(total=n_steps, initial=self._step, desc=label, unit="batch", leave=False,
                       dynamic_ncols=True)
        p = self._partial
        try:
            for step in range(self._step, n_steps):
                t0 = time.perf_counter()
                idx = order[step * self.batch_size:(step + 1) * self.batch_size
                            if step < n_steps - 1 or n_steps < per_epoch else last]
                done = self.epoch * per_epoch + step  # steps before this one
                if self.lr_schedule == "onecycle":
                    self._onecycle(done, total_steps)
                elif self.lr_schedule == "triangle":
                    self.optimizer.lr = self.base_lr * triangle(done, total_steps)
                if self.parallel is None:
                    loss_sum, correct, seen = self._local_step(x, y, idx, step, sample_weight)
                else:
                    loss_sum, correct, seen = self._parallel_step(x, y, idx, step)
                p["seconds"] += time.perf_counter() - t0
                p["loss"] += loss_sum
                p["correct"] += correct
                p["seen"] += seen
                self._step = step + 1
                if on_step is not None:
                    on_step(done + 1)
                if bar is not None:
                    bar.update(1)
                    if step % 5 == 0 or step == n_steps - 1:
                        bar.set_postfix(loss=f"{p['loss'] / p['seen']:.4f}",
                                        acc=f"{p['correct'] / p['seen']:.4f}",
                                        img_s=f"{p['seen'] / max(p['seconds'], 1e-9):.0f}")
                stop = self.stop_signal if self.parallel is None else self._agreed_stop
                if stop is not None:
                    raise TrainingInterrupted(stop)
        finally:
            if bar is not None:
                bar.close()
        self.epoch += 1
        self._epoch_rng_state = None
        self._step = 0
        if self.max_steps is not None and self.epoch * per_epoch >= self.max_steps:
            self.stop_training = True  # the steps asked for are done
        out = {"epoch": self.epoch, "train_loss": p["loss"] / p["seen"],
               "train_accuracy": p["correct"] / p["seen"], "seconds": p["seconds"],
               "images_per_second": p["seen"] / max(p["seconds"], 1e-9)}
        if self.regress:
            del out["train_accuracy"]
        return out

    def _onecycle(self, step: int, total: int) -> None:
        """Set the optimizer's lr (and momentum or beta1) for global step ``step`` of ``total``."""
        opt = self.optimizer
        lr, momentum = onecycle(step, total, self.base_lr)
        opt.lr = lr
        if hasattr(opt, "betas"):
            opt.betas = (momentum, opt.betas[1])
        elif getattr(opt, "momentum", 0.0) > 0.0:
            opt.momentum = momentum  # type: ignore[attr-defined]

    def _moves(self, idx: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The augmentation of this step's examples (None without augmentation)."""
        if self.augment is None:
            return None
        return self.augment.draw(self.seed, self.epoch, step, idx)

    def train_step(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """One optimizer step on the whole batch (x, y), taken as ``fit`` takes its steps (on the
        CPU recorded once per batch shape, then replayed); returns the batch's mean loss and
        accuracy. For loops of one's own and for benchmarks; ``fit`` does not call it."""
        idx = self._arange.get(len(x))
        if idx is None:
            idx = self._arange[len(x)] = np.arange(len(x), dtype=np.int64)
        loss_sum, correct, seen = self._local_step(x, y, idx, self._step)
        return loss_sum / seen, correct / seen

    def _diverged(self, loss: float, step: int) -> DivergenceError:
        return DivergenceError(
            f"the loss became {loss} at epoch {self.epoch + 1}, step {step + 1}: training "
            f"diverged; try a lower learning rate (now {self.optimizer.lr:g})")

    def _local_step(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray, step: int,
                    sample_weight: np.ndarray | None = None) -> tuple[float, int, int]:
        """One step of one process; returns the batch's loss sum, correct count and size."""
        moves = self._moves(idx, step)
        if moves is not None:
            self.augment.check(x.shape[1:])  # type: ignore[union-attr]
        program = self._program(x, y, idx) if sample_weight is None else None
        if program is not None:
            loss, correct = program.step(x, y, idx, moves)
            if not math.isfinite(loss):
                raise self._diverged(loss, step)
            self.optimizer.step()
            return loss * len(idx), correct, len(idx)
        xb, yb = x[idx], y[idx]
        if moves is not None:
            xb = aug.augmented(x, y, idx, moves)[0]
        logits = self.net.forward(xb, training=True)
        loss, dlogits = self._loss(logits, yb, None if sample_weight is None else sample_weight[idx])
        if not math.isfinite(loss):
            raise self._diverged(loss, step)
        self.net.backward(dlogits, need_input_grad=False)
        self.optimizer.step()
        return loss * len(yb), self._hits(logits, yb), len(yb)

    def _loss(self, out: np.ndarray, yb: np.ndarray, weights: np.ndarray | None = None
              ) -> tuple[float, np.ndarray]:
        if self.regress:
            return regression_loss(out, yb, self.loss[1], weights)
        return softmax_cross_entropy(out, yb, weights, self.label_smoothing)

    def _hits(self, out: np.ndarray, yb: np.ndarray) -> int:
        """Correct predictions of a batch (0 for regression)."""
        return 0 if self.regress else int((out.argmax(1) == yb).sum())

    def _program(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> StepProgram | None:
        """The step for this batch shape (numbacnn/runtime/program.py: recorded and replayed on the CPU,
        on the device throughout on CUDA), or None where a step runs through ``Sequential``'s
        forward and backward: ``step_programs=False``, or inputs that the normal path rejects (it
        then raises its clear error)."""
        if not self.step_programs:
            return None
        if x is not self._checked[0] or y is not self._checked[1]:
            if not (isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.ndim >= 2
                    and isinstance(y, np.ndarray)):
                return None
            try:
                n_out = self.net.output_shape(x.shape[1:])[0]
            except ValueError:
                return None
            if self.regress:
                if not (y.dtype == np.float32 and y.shape == (len(x), n_out)):
                    return None
            elif not (y.dtype.kind in "iu" and y.shape == x.shape[:1]) or (
                    len(y) and (y.min() < 0 or y.max() >= n_out)):
                return None
            self._checked = (x, y)
        key = (len(idx), x.shape[1:])
        program = self._programs.get(key)
        if program is None or program.params is not self.net.params:
            program = self._programs[key] = StepProgram(self.net, len(idx), x.shape[1:],
                                                        self.label_smoothing, self.loss)
        return program

    def _parallel_step(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray, step: int
                       ) -> tuple[float, int, int]:
        """One data-parallel step: this rank's share of the global batch ``idx``, gradients summed
        over the ranks (each scaled by 1 / len(idx) here), the same optimizer step everywhere. The
        stop flags travel with the statistics, so every rank stops after the same step."""
        assert self.parallel is not None
        lo, hi = self.parallel.bounds(len(idx))
        share = idx[lo:hi]
        self.net.set_batch_slice(lo, hi, len(idx), x.shape[1:])
        loss_sum, correct = 0.0, 0
        moves = self._moves(idx, step)
        if len(share):
            xb, yb = x[share], y[share]
            if moves is not None:  # this rank's rows of the global batch's moves
                self.augment.check(x.shape[1:])  # type: ignore[union-attr]
                xb = aug.augmented(x, y, share, (moves[0][lo:hi], moves[1][lo:hi], moves[2]))[0]
            logits = self.net.forward(xb, training=True)
            loss, dlogits = self._loss(logits, yb)
            dlogits *= np.float32(len(share) / len(idx))  # the gradient of the global mean
            self.net.backward(dlogits, need_input_grad=False)
            loss_sum, correct = loss * len(share), self._hits(logits, yb)
        else:  # fewer examples than ranks in the last batch: contribute nothing
            self.net.grads[:] = 0.0
        flags = (int(self.stop_signal == signal.SIGINT), int(self.stop_signal == signal.SIGTERM))
        loss_sum, correct, seen, flags = self.parallel.reduce_step(self.net.grads, loss_sum, correct,
                                                                   len(share), flags)
        if not math.isfinite(loss_sum):
            raise self._diverged(loss_sum / seen, step)
        self.optimizer.step()
        # BatchNorm normalises with each rank's own batch statistics (as torch DDP without
        # SyncBatchNorm); the running statistics are rank 0's everywhere (DDP's broadcast_buffers)
        for buf in self.net._buffer_views().values():
            self.parallel.broadcast_array(buf)
        self._agreed_stop = signal.SIGTERM if flags[1] else signal.SIGINT if flags[0] else None
        return loss_sum, correct, seen

    def _stop_requested(self) -> int | None:
        """The stop signal, agreed by every rank when distributed (a signal may reach one rank while
        another is already past its last check)."""
        if self.parallel is None:
            return self.stop_signal
        flags = self.parallel.sum(np.array([self.stop_signal == signal.SIGINT,
                                            self.stop_signal == signal.SIGTERM], np.float64))
        return signal.SIGTERM if flags[1] else signal.SIGINT if flags[0] else None

    def fit(self, x: np.ndarray, y: np.ndarray, epochs: int, x_test: np.ndarray | None = None,
            y_test: np.ndarray | None = None, x_val: np.ndarray | None = None,
            y_val: np.ndarray | None = None,
            checkpoint: Callable[[Trainer], None] | None = None,
            callbacks: Iterable[Callback] = (), sample_weight: np.ndarray | None = None
            ) -> list[dict[str, Any]]:
        """Train until ``epochs`` epochs are complete (counting those already done when resumed),
        or until a callback sets ``stop_training``.

        ``checkpoint(trainer)`` is called after every epoch and, on SIGINT/SIGTERM, after the last
        completed step before ``TrainingInterrupted`` is raised.
        """
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
        callbacks = list(callbacks)
        self.stop_signal = None
        self.stop_training = False
        for cb in callbacks:
            cb.on_train_begin(self)
        with _stop_on_signals(self):
            while self.epoch < epochs and not self.stop_training:
                if self.lr_schedule == "cosine":
                    self.optimizer.lr = self.base_lr * 0.5 * (1.0 + math.cos(math.pi * self.epoch / epochs))
                def on_step(step: int) -> None:
                    for cb in callbacks:
                        cb.on_step_end(self, step)
                try:
                    stats = self.train_epoch(x, y, total_epochs=epochs, sample_weight=sample_weight,
                                             on_step=on_step if callbacks else None)
                except TrainingInterrupted:
                    if checkpoint is not None:
                        checkpoint(self)
                    raise
                for part, xs, ys in (("val", x_val, y_val), ("test", x_test, y_test)):
                    if xs is None or ys is None:
                        continue
                    if self.regress:
                        got = evaluate_regression(self.net, xs, ys, delta=self.loss[1],
                                                  scale=self.target_scale)
                        stats.update({f"{part}_{k}": v for k, v in got.items()})
                    else:
                        stats[f"{part}_loss"], stats[f"{part}_accuracy"] = evaluate(self.net, xs, ys,
                                                                                    parallel=self.parallel)
                for cb in callbacks:
                    cb.on_epoch_end(self, stats)
                self.history.append(stats)
                if self.progress:
                    self.log(format_epoch(stats, epochs))
                if checkpoint is not None:
                    checkpoint(self)
                stop = self._stop_requested()
                if stop is not None:
                    raise TrainingInterrupted(stop)
        for cb in callbacks:
            cb.on_train_end(self)
        return self.history


def format_epoch(s: dict[str, Any], epochs: int) -> str:
    if "train_accuracy" in s:
        line = (f"epoch {s['epoch']}/{epochs}: train loss {s['train_loss']:.4f} acc "
                f"{s['train_accuracy']:.4f}")
    else:  # regression
        line = f"epoch {s['epoch']}/{epochs}: train loss {s['train_loss']:.4f}"
    for part in ("val", "test"):
        if f"{part}_accuracy" in s:
            line += f" | {part} loss {s[f'{part}_loss']:.4f} acc {s[f'{part}_accuracy']:.4f}"
        elif f"{part}_rmse" in s:
            line += f" | {part} rmse {s[f'{part}_rmse']:.4g} r2 {s[f'{part}_r2']:.4f}"
    return line + f" | {s['seconds']:.1f} s, {s['images_per_second']:.0f} img/s"
