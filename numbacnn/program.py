"""A recorded training step: the kernel calls of one step (forward, loss, backward) of a network on
the CPU for one batch shape, with their buffers bound, replayed without the Python between them.

The first call of a ``StepProgram`` runs the layers' own Python (shape checks, workspace lookups,
plan choices) once, recording every kernel call it makes and the few host operations a step needs
besides (``host_op``: weight transposes, dropout masks); later calls gather the batch into the
program's input buffers and replay the recorded calls in order, through the kernels' compiled
entry points (numba's type dispatch resolved once, at recording). The calls read and write the same
buffers and parameter views as the layers' own, so a replayed step computes bit for bit what the
layers' Python would. The optimizer's update is not part of it (its scalars change every step).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

_local = threading.local()  # .ops: the list a step being recorded in this thread appends to;
# .timer: a profile's hook (set_timer)
_record_lock = threading.Lock()  # one recording at a time (it swaps the modules' kernel names)


def host_op(fn: Any, *args: Any) -> None:
    """Run ``fn(*args)`` and, while this thread records a step, record it for replay: for the host
    (numpy) operations inside a step that kernels do not do. Its arguments must stay valid (views
    of the parameters or of workspace buffers), and ``fn`` must write only into them."""
    fn(*args)
    ops = getattr(_local, "ops", None)
    if ops is not None:
        ops.append((None, fn, args))


def set_timer(hook: Any) -> None:
    """Profiles: while ``hook`` is set (not None) in this thread, replayed steps time each kernel
    call and report ``hook(dispatcher, seconds, args, t_end)`` right after it (t_end: the
    perf_counter reading that ended the call, so the hook can measure its own cost)."""
    _local.timer = hook


def _dispatcher(value: Any) -> Any:
    """The numba dispatcher a module name holds, behind any wrapper that an enclosing
    kernels_replaced block put there (its ``__wrapped__``)."""
    from numba.core.registry import CPUDispatcher

    return value if isinstance(value, CPUDispatcher) else getattr(value, "__wrapped__", value)


def entry_point(dispatcher: Any, args: tuple) -> Any:
    """The compiled function that ``dispatcher(*args)`` runs, found once: calling it skips numba's
    per-call type dispatch (typing every argument, looking the signature up), a few microseconds a
    call after kernels that swept the caches. The dispatcher itself where there is none."""
    overloads = getattr(dispatcher, "overloads", None)
    if overloads is None:  # NUMBA_DISABLE_JIT: a plain function
        return dispatcher
    compiled = overloads.get(tuple(dispatcher.typeof_pyval(a) for a in args))
    return dispatcher if compiled is None else compiled.entry_point


class StepProgram:
    """One training step of ``net`` (CPU) on batches of ``batch`` examples of shape ``in_shape``.

    ``step(x, y, idx)``: forward, softmax cross-entropy and backward (parameter gradients
    overwritten, no input gradient) of the examples ``x[idx]``, labels ``y[idx]``; returns the
    mean loss and the number of correct predictions. Labels must lie in [0, n_classes): the caller
    checks them (the kernels do not).
    """

    def __init__(self, net: Any, batch: int, in_shape: tuple[int, ...]) -> None:
        self.net = net
        self.params = net.params  # the program is bound to these parameter (and gradient) buffers
        self.x = np.empty((batch, *in_shape), np.float32)
        self._x_rows = self.x.reshape(batch, -1)
        self.y = np.empty(batch, np.int64)
        n_classes = net.output_shape(tuple(in_shape))[0]
        self.dlogits = np.empty((batch, n_classes), np.float32)
        self.losses = np.empty(batch, np.float64)
        self.stats = np.empty(2, np.float64)  # mean loss, correct count
        self.logits: np.ndarray | None = None
        self.ops: list[tuple[Any, Any, tuple]] | None = None
        self._calls: list[tuple[Any, tuple]] = []  # ops with their compiled entry points
        self._kernels: list[Any] = []  # each op's dispatcher (None: a host op)
        self._stats: Any = None  # step_stats' entry point for the program's buffers
        self._rows: tuple[Any, Any] = (None, None)  # the last training set and its (N, F) view

    def step(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> tuple[float, int]:
        from .kernels import cpu as K

        if (x.dtype == np.float32 and x.flags.c_contiguous and y.dtype == np.int64
                and idx.dtype == np.int64):
            if self._rows[0] is not x:
                self._rows = (x, x.reshape(len(x), -1))
            K.gather_batch(self._x_rows, self.y, self._rows[1], y, idx)  # a parallel copy
        else:
            self.x[...] = x[idx]
            self.y[...] = y[idx]
        timer = getattr(_local, "timer", None)
        if self.ops is None:
            self._record()
        elif timer is not None:  # a profile: the same calls, each timed
            clock = time.perf_counter
            for (f, args), kernel in zip(self._calls, self._kernels):
                t0 = clock()
                f(*args)
                t1 = clock()
                if kernel is not None:
                    timer(kernel, t1 - t0, args, t1)
            K.step_stats(self.stats, self.losses, self.logits, self.y)
        else:  # (a recording in another thread may have swapped the modules' names: no matter)
            for f, args in self._calls:
                f(*args)
            self._stats(self.stats, self.losses, self.logits, self.y)
        return float(self.stats[0]), int(self.stats[1])

    def _record(self) -> None:
        from . import _config
        from .kernels import cpu as K

        ops: list[tuple[Any, Any, tuple]] = []
        me = threading.get_ident()

        def recording(dispatcher: Any, current: Any, module: Any, name: str):
            def call(*args):
                if threading.get_ident() == me:
                    ops.append((module, name, args))
                return current(*args)
            return call

        layers = self.net.layers
        with _record_lock, _config.kernels_replaced(recording):
            _local.ops = ops
            try:
                h: Any = self.x
                for layer in layers:
                    h = layer.forward(h, training=True)
                logits = np.ascontiguousarray(h)
                K.softmax_cross_entropy(self.dlogits, self.losses, logits, self.y)
                g: Any = self.dlogits
                for i in range(len(layers) - 1, -1, -1):
                    g = layers[i].backward(g, need_dx=i > 0)
            finally:
                _local.ops = None
        if logits is not h or not any(mod is not None for mod, _, _ in ops):  # pragma: no cover
            raise RuntimeError("this step cannot be recorded (an output that is no bound buffer, "
                               "or no kernel call seen)")
        self.logits = logits
        self.net._can_backward = True
        self.ops = ops
        self._kernels = [None if mod is None else _dispatcher(getattr(mod, f)) for mod, f, _ in ops]
        self._calls = [(f if k is None else entry_point(k, args), args)
                       for k, (_, f, args) in zip(self._kernels, ops)]
        stats = (self.stats, self.losses, self.logits, self.y)
        K.step_stats(*stats)
        self._stats = entry_point(K.step_stats, stats)  # its arguments are fixed buffers too
