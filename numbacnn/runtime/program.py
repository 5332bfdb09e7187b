"""A training step: forward, softmax cross-entropy and backward of a network for one batch shape,
with its buffers bound, on the network's device; and the inference forward of one input shape
(``InferenceProgram``, what ``Sequential.forward(training=False)`` runs on the CPU).

On the CPU the first call runs the layers' own Python (shape checks, workspace lookups, plan
choices) once inside ``runtime.calls.capture``, which collects every kernel call the layers, plans
and backend make (dropout's masks included: the kernel draws them from a counter in its state);
later calls gather the batch into the step's input buffers and replay those calls in order,
through the kernels' compiled entry points (numba's type dispatch resolved once). The calls read
and write the same buffers and parameter views as the layers' own, so a replayed step computes bit
for bit what the layers' Python would. On CUDA the first step runs through the layers; the second
captures the step's kernel launches as one CUDA graph (``Backend.graph``), which every later step
launches: the same kernels on the same buffers, without the layers' Python or numba's per-launch
cost (20-45 us a kernel). Only the batch goes in (gathered into page-locked memory) and two
statistics come out. The optimizer's update is not part of a step (its scalars change every step).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..backend.base import GraphError
from ..kernels import cpu as K
from ..layers.base import Layer
from . import team as _team
from .calls import Call, capture

_FLOAT32 = np.dtype(np.float32)


def compiled(calls: list[Call]) -> list[Call]:
    """The captured calls with their compiled entry points (``entry_point``), for replaying."""
    return [(entry_point(f, args), args) for f, args in calls]


def entry_point(fn: Any, args: tuple) -> Any:
    """The compiled function that ``fn(*args)`` runs when ``fn`` is a numba dispatcher, found once:
    calling it skips numba's per-call type dispatch (typing every argument, looking the signature
    up), a few microseconds a call. ``fn`` itself for anything else (host functions, or every
    kernel under NUMBA_DISABLE_JIT)."""
    overloads = getattr(fn, "overloads", None)
    if overloads is None:
        return fn
    overload = overloads.get(tuple(fn.typeof_pyval(a) for a in args))
    return fn if overload is None else overload.entry_point


class DeviceRuns:
    """Runs ``fn`` (a program's work on a device: copies in, kernel launches, copies out) and waits
    for it: the first time launch by launch (compiling the kernels, allocating the buffers), the
    second captured as one graph (``Backend.graph``), which later runs launch. ``graph``: None
    before the second run, then the graph, or False (none: the simulator, or a capture the driver
    refused, with a warning saying why; then every run goes launch by launch)."""

    def __init__(self, backend: Any, fn: Any) -> None:
        self.backend = backend
        self.fn = fn
        self.graph: Any = None
        self.runs = 0

    def __call__(self) -> None:
        if self.graph is None and self.runs:
            self.graph = self._capture()
        self.runs += 1
        if self.graph:
            self.graph.launch()
        else:
            self.fn()
        self.backend.synchronize()

    def _capture(self) -> Any:
        with capture() as calls:  # the graph holds the calls, and with them the buffers they address
            try:
                graph = self.backend.graph(self.fn, keep=calls)
            except GraphError as e:
                warnings.warn(f"{e}; running launch by launch instead of as a CUDA graph",
                              RuntimeWarning, stacklevel=4)
                graph = None
        return graph or False


class StepProgram:
    """One training step of ``net`` on batches of ``batch`` examples of shape ``in_shape``.

    ``step(x, y, idx)``: forward, softmax cross-entropy and backward (parameter gradients
    overwritten, no input gradient) of the examples ``x[idx]``, labels ``y[idx]``; returns the
    mean loss and the number of correct predictions. Labels must lie in [0, n_classes): the caller
    checks them (the kernels do not).

    ``calls``: on the CPU, after the first step, the captured (function, arguments) list that later
    steps replay (a profiler can time them one by one). ``device``: on CUDA, the ``DeviceRuns`` of
    the step (its ``graph``).
    """

    def __init__(self, net: Any, batch: int, in_shape: tuple[int, ...], label_smoothing: float = 0.0,
                 loss: tuple[str, float] = ("cross_entropy", 0.0)) -> None:
        self.net = net
        self.label_smoothing = float(label_smoothing)
        # ("cross_entropy", 0) with int64 labels, or a regression loss ("mse" or "huber", delta)
        # with float32 targets (batch, outputs)
        self.loss, self.delta = loss
        self.regress = self.loss != "cross_entropy"
        self.params = net.params  # the program is bound to these parameter (and gradient) buffers
        self.backend = be = net.backend
        self.replays = be.name == "cpu"
        n_classes = net.output_shape(tuple(in_shape))[0]
        y_shape, y_dtype = ((batch, n_classes), np.float32) if self.regress else ((batch,), np.int64)
        self.x = be.empty((batch, *in_shape), np.float32)
        self.y = be.empty(y_shape, y_dtype)
        # the batch is gathered here (on a device: host staging that ``write`` copies from)
        self._xh = self.x if self.replays else be.staging((batch, *in_shape), np.float32)
        self._yh = self.y if self.replays else be.staging(y_shape, y_dtype)
        self._x_rows = self._xh.reshape(batch, -1)
        self._stats_h = be.staging((2,), np.float64)
        self.device = None if self.replays else DeviceRuns(be, self._device_run)
        self.dlogits = be.empty((batch, n_classes), np.float32)
        self.losses = be.empty((batch,), np.float64)
        self.stats = be.empty((2,), np.float64)  # mean loss, correct count
        self.calls: list[Call] | None = None
        # Layer.freeze_changes as recorded: which layers the backward runs and what they differentiate
        self._frozen = Layer.freeze_changes
        self._compiled: list[Call] = []  # the calls with their compiled entry points
        self._rows: tuple[Any, Any] = (None, None)  # the last training set and its (N, F) view

    def step(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray,
             moves: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[float, int]:
        """``moves``: the batch's augmentation (``Augment.draw``), applied as it is gathered."""
        self._gather(x, y, idx, moves)
        frozen = Layer.freeze_changes  # a freeze or unfreeze since the recording: record anew
        if self.device is not None:
            if frozen != self._frozen:
                self.device, self._frozen = DeviceRuns(self.backend, self._device_run), frozen
            self.device()
            stats = self._stats_h
        elif self.calls is None or frozen != self._frozen:
            self._record()
            stats = self.stats
        else:
            for f, args in self._compiled:
                f(*args)
            stats = self.stats
        return float(stats[0]), int(stats[1])

    def _gather(self, x: np.ndarray, y: np.ndarray, idx: np.ndarray,
                moves: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        """The batch x[idx], y[idx] (moved by ``moves``) into the step's host input buffers (on the
        CPU the step's own; on a device the staging that ``step`` copies from)."""
        from .. import augment

        fast = (x.dtype == np.float32 and x.flags.c_contiguous and y.dtype == np.int64
                and idx.dtype == np.int64)
        if self.regress and moves is None:  # float targets: numpy's gathers
            self._xh[...] = x[idx]
            self._yh[...] = y[idx]
        elif moves is not None:
            if fast:
                augment.gather(self._xh, self._yh, x, y, idx, moves)
            else:
                self._xh[...], self._yh[...] = augment.augmented(x, y, idx, moves)
        elif fast:
            if self._rows[0] is not x:
                self._rows = (x, x.reshape(len(x), -1))
            K.gather_batch(self._x_rows, self._yh, self._rows[1], y, idx)  # a parallel copy
        else:
            self._xh[...] = x[idx]
            self._yh[...] = y[idx]

    def _run(self) -> Any:
        """Forward, loss, statistics and backward through the layers; returns the logits."""
        be, net = self.backend, self.net
        h = net.through(self.x, training=True)
        if self.regress:
            be.run("regression_loss", self.dlogits, self.losses, h, self.y, float(self.delta))
            be.run("loss_stats", self.stats, self.losses)
        else:
            be.run("softmax_cross_entropy", self.dlogits, self.losses, h, self.y,
                   float(self.label_smoothing))
            be.run("step_stats", self.stats, self.losses, h, self.y)
        net.through_backward(self.dlogits, need_input_grad=False)
        net._can_backward = True
        return h

    def _device_run(self) -> None:
        """On a device: the batch in, the step, the statistics out (one graph from the second step)."""
        be = self.backend
        be.write(self.x, self._xh)
        be.write(self.y, self._yh)
        self._run()
        be.read(self._stats_h, self.stats)

    def _record(self) -> None:
        self._frozen = Layer.freeze_changes
        with capture() as calls:
            logits = self._run()
        if not (isinstance(logits, np.ndarray) and logits.flags.c_contiguous):  # pragma: no cover
            raise RuntimeError("this step cannot be replayed: the logits are no bound contiguous buffer")
        self.calls = calls
        self._compiled = compiled(calls)


# Runs of an inference program before it switches to one team region (runtime/team.py): making the
# team takes 40-50 ms (packing every call; more where a kernel specialisation's packer is neither
# prebuilt nor cached), which a one-off prediction should not pay.
TEAM_AFTER = 2


class InferenceProgram:
    """The inference forward (``training=False``) of ``net`` through ``layers[:upto]`` for inputs of
    one ``shape`` on the CPU, recorded on the first ``run`` (the layers' ``infer``, inside
    ``capture``: BatchNorm folded into the convolution before it, with its ReLU and pool) and
    replayed after: the same kernel calls on the same buffers, so the same bits, without the layers'
    checks and workspace lookups (tens of microseconds a call: most of a batch-1 prediction).
    From the run after TEAM_AFTER on, the calls run as one team region where they can (all of
    them in one OpenMP parallel region, runtime/team.py: a few microseconds less a kernel call).
    ``run`` returns the last layer's buffer (overwritten by the next run). It records on a copy of
    its input in the program's own buffer; replays read a C-contiguous, writable float32 input
    where it lies (the calls that read the recording buffer, or views of it, get the caller's
    array or the same views of it: the copy of a batch of 64 MNIST images, 200 KB, was 9 % of
    lenet5's prediction); other inputs are copied first."""

    def __init__(self, net: Any, shape: tuple[int, ...], upto: int | None = None) -> None:
        self.net = net
        self.upto = upto  # through net.layers[:upto] (features: -1)
        self.params = net.params
        self.x = np.empty(shape, np.float32)
        self.out: np.ndarray | None = None
        self.calls: list[Call] = []
        self._compiled: list[Call] = []
        # per compiled call: None (fixed arguments), or the arguments that read the input:
        # (position, None) for the input itself, (position, (offset, shape, strides)) for a view
        self._reads: list[list[tuple[int, Any]] | None] | None = None
        self._runs = 0
        # the team: None (not tried yet), False (not possible), or _make_team's
        self.team: Any = None

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.out is None:
            np.copyto(self.x, x)
            with capture() as calls:
                out = self.net.through(self.x, training=False, upto=self.upto, inference=True)
            self.calls = calls
            self._compiled = compiled(calls)
            self.out = out
            self._reads = None if np.may_share_memory(out, self.x) else self._input_reads()
            return out
        team = self.team
        if team is None:
            self._runs += 1
            if self._runs >= TEAM_AFTER:
                team = self.team = self._make_team()
        direct = (self._reads is not None and x.dtype is _FLOAT32 and x.shape == self.x.shape
                  and x.flags.c_contiguous and x.flags.writeable)
        if team and not _team.forked():  # (a fork's child replays: OpenMP's threads are gone)
            entry, schedule, patches, failed = team
            if not direct:
                np.copyto(self.x, x)
            row = entry(schedule.rows, 0, x if direct else self.x, patches, failed)  # 0: numba's threads
            if row:
                self._failed(x, schedule.order[row - 1])
            return self.out
        if not direct:
            np.copyto(self.x, x)
            for f, args in self._compiled:
                f(*args)
            return self.out
        for (f, args), reads in zip(self._compiled, self._reads or ()):
            f(*(self._read(args, reads, x) if reads else args))
        return self.out

    def _failed(self, x: np.ndarray, call: int) -> None:
        """A kernel raised inside the team region (call: its index): replay the calls one by one,
        so that the kernel raises its own exception here, in the caller's thread."""
        np.copyto(self.x, x)
        for f, args in self._compiled:
            f(*args)
        name = getattr(self.calls[call][0], "__name__", "a kernel")
        raise RuntimeError(f"numbacnn: {name} failed inside a team region but not when replayed")

    @staticmethod
    def _read(args: tuple, reads: list[tuple[int, Any]], x: np.ndarray) -> tuple:
        """``args`` with the input (or views of it, see ``_input_reads``) replaced by ``x``'s."""
        a = list(args)
        for k, view in reads:
            a[k] = x if view is None else np.ndarray(view[1], np.float32, x, view[0], view[2])
        return tuple(a)

    def _make_team(self) -> Any:
        """(entry point, schedule, patches) of the team running this program's calls (``patches``:
        where team_region.run points the calls that read the input, see runtime/team_region.py), or False."""
        import numba

        if not _team.available():
            return False
        try:
            schedule = _team.schedule(self.calls, numba.get_num_threads())
        except numba.core.errors.NumbaError:  # pragma: no cover - a specialisation numba cannot pack:
            return False  # the replay serves it as before
        if schedule is None:
            return False
        base = self.x.ctypes.data
        patches = []
        for row, call in enumerate(schedule.order):
            words = schedule.buffers[row]
            for _, view in (self._reads[call] or []) if call >= 0 and self._reads else []:
                offset = 0 if view is None else view[0]
                found = np.flatnonzero(words == base + offset)  # the packed data pointers
                if len(found) == 0:  # pragma: no cover - every packed array holds its data pointer
                    return False
                patches += [(words.ctypes.data + 8 * int(k), offset) for k in found]
        patches_array = np.array(patches, np.int64).reshape(-1, 2)
        from . import team_region

        args = (schedule.rows, 1, self.x, patches_array, np.zeros(1, np.int64))
        team_region.run.compile(tuple(numba.typeof(a) for a in args))
        return entry_point(team_region.run, args), schedule, patches_array, args[-1]

    def _input_reads(self) -> list[list[tuple[int, Any]] | None]:
        """Where the recorded calls read the recording buffer self.x (see ``run``)."""
        base = self.x.ctypes.data
        out: list[list[tuple[int, Any]] | None] = []
        for _, args in self._compiled:
            reads: list[tuple[int, Any]] = []
            for k, a in enumerate(args):
                if a is self.x:
                    reads.append((k, None))
                elif (isinstance(a, np.ndarray) and a.dtype == np.float32
                      and np.may_share_memory(a, self.x)):
                    reads.append((k, (a.ctypes.data - base, a.shape, a.strides)))
            out.append(reads or None)
        return out


class DeviceInference:
    """The inference forward (``training=False``) of ``net`` through ``layers[:upto]`` for inputs of
    one ``shape`` on a device with graphs (CUDA): the input goes into a bound device buffer (through
    page-locked staging); the first run goes through the layers (compiling, allocating), the second
    captures their launches and the copies in and out as one graph (``DeviceRuns``), later runs
    launch it. ``run`` returns a new host array."""

    def __init__(self, net: Any, shape: tuple[int, ...], upto: int | None = None) -> None:
        be = self.backend = net.backend
        self.net = net
        self.upto = upto
        self.params = net.params
        self.x = be.empty(shape, np.float32)
        self._xh = be.staging(shape, np.float32)
        self._outh: Any = None  # page-locked host output
        self.device = DeviceRuns(be, self._device_run)

    def run(self, x: np.ndarray) -> np.ndarray:
        np.copyto(self._xh, x)
        self.device()
        return self._outh.copy()

    def _device_run(self) -> None:
        """The input in, the layers, the output out (one graph from the second run)."""
        be = self.backend
        be.write(self.x, self._xh)
        out = self.net.through(self.x, training=False, upto=self.upto)
        if self._outh is None:  # the first run (not captured)
            self._outh = be.staging(out.shape, out.dtype)
        be.read(self._outh, out)
