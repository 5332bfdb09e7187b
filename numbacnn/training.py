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

from .network import Sequential, softmax_cross_entropy
from .optimizers import Optimizer
from .program import StepProgram

if TYPE_CHECKING:
    from .distributed import DataParallel


class DivergenceError(RuntimeError):
    """The loss became NaN or infinite; the weights are those of the last good step."""


class TrainingInterrupted(Exception):
    """Training stopped on a signal after finishing the current step (state is consistent)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def evaluate(net: Sequential, x: np.ndarray, y: np.ndarray, batch_size: int = 256,
             parallel: DataParallel | None = None) -> tuple[float, float]:
    """Mean cross-entropy loss and accuracy of ``net`` on (x, y), in inference mode; with
    ``parallel``, each rank evaluates its share and the sums are reduced."""
    n = len(x)
    if parallel is not None:
        share = parallel.share(np.arange(n))
        x, y = x[share], y[share]
    total, correct = 0.0, 0
    for lo in range(0, len(x), batch_size):
        logits = net.forward(x[lo:lo + batch_size], training=False)
        yb = y[lo:lo + batch_size]
        loss, _ = softmax_cross_entropy(logits, yb)
        total += loss * len(yb)
        correct += int((logits.argmax(1) == yb).sum())
    if parallel is not None:
        total, correct = parallel.sum(np.array([total, correct], np.float64)).tolist()
    return total / n, correct / n


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

    def on_train_end(self, trainer: Trainer) -> None:
        """After the last epoch (not after an interruption or an error)."""


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
        Show a tqdm bar per epoch and a summary line per epoch.
    shuffle : bool
        Visit the examples in a new random order every epoch (else in order).
    lr_schedule : "constant" or "cosine"
        "cosine" anneals the learning rate from its initial value towards 0 over the epochs of
        ``fit``: epoch e (0-based) of E uses lr * (1 + cos(pi * e / E)) / 2.
    parallel : numbacnn.distributed.DataParallel or None
        MPI data parallelism: each rank backpropagates its share of every (global) batch.
    step_programs : bool
        On the CPU, record each batch shape's step once and replay its kernel calls
        (``numbacnn/program.py``; the same results bit for bit, less Python per step).
    """

    def __init__(self, net: Sequential, optimizer: Optimizer, batch_size: int = 64, seed: int = 0,
                 progress: bool = True, log: Callable[[str], None] | None = None,
                 shuffle: bool = True, lr_schedule: str = "constant",
                 parallel: DataParallel | None = None, step_programs: bool = True) -> None:
        if lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {lr_schedule!r}")
        self.lr_schedule = lr_schedule
        self.base_lr = optimizer.lr
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
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
                "lr_schedule": self.lr_schedule}

    def load_state(self, st: dict[str, Any]) -> None:
        self.epoch = int(st["epoch"])
        self._step = int(st["step"])
        self.rng.bit_generator.state = st["rng"]
        self._epoch_rng_state = st["epoch_rng"]
        self._partial = dict(st["partial"])
        self.history = list(st["history"])
        self.base_lr = float(st.get("base_lr", self.base_lr))
        self.lr_schedule = st.get("lr_schedule", self.lr_schedule)

    # --- training --------------------------------------------------------------------------------
    def train_epoch(self, x: np.ndarray, y: np.ndarray, total_epochs: int | None = None,
                    on_step: Callable[[], None] | None = None,
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
        n_steps = -(-n // self.batch_size)
        bar = None
        if self.progress:
            from tqdm.auto import tqdm
            label = f"epoch {self.epoch + 1}" + (f"/{total_epochs}" if total_epochs else "")
            bar = tqdm(total=n_steps, initial=self._step, desc=label, unit="batch", leave=False,
                       dynamic_ncols=True)
        p = self._partial
        try:
            for step in range(self._step, n_steps):
                t0 = time.perf_counter()
                idx = order[step * self.batch_size:(step + 1) * self.batch_size]
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
                    on_step()
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
        return {"epoch": self.epoch, "train_loss": p["loss"] / p["seen"],
                "train_accuracy": p["correct"] / p["seen"], "seconds": p["seconds"],
                "images_per_second": p["seen"] / max(p["seconds"], 1e-9)}

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
        program = self._program(x, y, idx) if sample_weight is None else None
        if program is not None:
            loss, correct = program.step(x, y, idx)
            if not math.isfinite(loss):
                raise self._diverged(loss, step)
            self.optimizer.step()
            return loss * len(idx), correct, len(idx)
        xb, yb = x[idx], y[idx]
        logits = self.net.forward(xb, training=True)
        loss, dlogits = softmax_cross_entropy(logits, yb, None if sample_weight is None
                                              else sample_weight[idx])
        if not math.isfinite(loss):
            raise self._diverged(loss, step)
        self.net.backward(dlogits, need_input_grad=False)
        self.optimizer.step()
        return loss * len(yb), int((logits.argmax(1) == yb).sum()), len(yb)

    def _program(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> StepProgram | None:
        """The step for this batch shape (numbacnn/program.py: recorded and replayed on the CPU,
        on the device throughout on CUDA), or None where a step runs through ``Sequential``'s
        forward and backward: ``step_programs=False``, or inputs that the normal path rejects (it
        then raises its clear error)."""
        if not self.step_programs:
            return None
        if x is not self._checked[0] or y is not self._checked[1]:
            if not (isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.ndim >= 2
                    and isinstance(y, np.ndarray) and y.dtype.kind in "iu" and y.shape == x.shape[:1]):
                return None
            try:
                n_classes = self.net.output_shape(x.shape[1:])[0]
            except ValueError:
                return None
            if len(y) and (y.min() < 0 or y.max() >= n_classes):
                return None
            self._checked = (x, y)
        key = (len(idx), x.shape[1:])
        program = self._programs.get(key)
        if program is None or program.params is not self.net.params:
            program = self._programs[key] = StepProgram(self.net, len(idx), x.shape[1:])
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
        if len(share):
            xb, yb = x[share], y[share]
            logits = self.net.forward(xb, training=True)
            loss, dlogits = softmax_cross_entropy(logits, yb)
            dlogits *= np.float32(len(share) / len(idx))  # the gradient of the global mean
            self.net.backward(dlogits, need_input_grad=False)
            loss_sum, correct = loss * len(share), int((logits.argmax(1) == yb).sum())
        else:  # fewer examples than ranks in the last batch: contribute nothing
            self.net.grads[:] = 0.0
        flags = (int(self.stop_signal == signal.SIGINT), int(self.stop_signal == signal.SIGTERM))
        loss_sum, correct, seen, flags = self.parallel.reduce_step(self.net.grads, loss_sum, correct,
                                                                   len(share), flags)
        if not math.isfinite(loss_sum):
            raise self._diverged(loss_sum / seen, step)
        self.optimizer.step()
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
                try:
                    stats = self.train_epoch(x, y, total_epochs=epochs, sample_weight=sample_weight)
                except TrainingInterrupted:
                    if checkpoint is not None:
                        checkpoint(self)
                    raise
                if x_val is not None and y_val is not None:
                    stats["val_loss"], stats["val_accuracy"] = evaluate(self.net, x_val, y_val,
                                                                        parallel=self.parallel)
                if x_test is not None and y_test is not None:
                    stats["test_loss"], stats["test_accuracy"] = evaluate(self.net, x_test, y_test,
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
    line = (f"epoch {s['epoch']}/{epochs}: train loss {s['train_loss']:.4f} acc "
            f"{s['train_accuracy']:.4f}")
    if "val_loss" in s:
        line += f" | val loss {s['val_loss']:.4f} acc {s['val_accuracy']:.4f}"
    if "test_loss" in s:
        line += f" | test loss {s['test_loss']:.4f} acc {s['test_accuracy']:.4f}"
    return line + f" | {s['seconds']:.1f} s, {s['images_per_second']:.0f} img/s"
