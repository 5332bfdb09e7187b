"""Where a training step's time goes, kernel by kernel, and a model of its speed-up on more cores.

``profile_step`` measures in this process, at one thread: every parallel kernel call of a step (its
time, its ``prange`` iteration count and the work of each iteration, the bytes of its arrays), the
cost of numba's dispatch for that call, the fork-join cost of a parallel region at 1 and 2 threads
(after as much Python as a step runs between two calls), and the serial rest of the step (Python
and numpy between the calls). ``predict`` turns a profile into the step time at p threads:

    T(p) = S + sum over calls k of [ d_k + o(p) + max(c_k * W_k(p) * M_k(q), B_k / bandwidth) ]

S: the serial rest; d_k: the dispatch of call k (serial); o(p) = o(1) + (o(2) - o(1)) * log2(p):
the fork-join cost of a parallel region; W_k(p): the work of the busiest thread when numba's static
schedule hands each thread a contiguous, equal share of the iterations, c_k the measured time per
unit of work; B_k / bandwidth: the memory ceiling (every array of the call read or written once at
the machine's whole-socket bandwidth, a stated parameter). Cores are assumed as fast as this
machine's one core, with no turbo or SMT effects.

M_k(q), for a shared machine only (``stragglers=True``): a parallel region ends when its slowest
thread does, so on cores that other tenants slow down at random a region of q = min(p, iterations)
busy threads lasts the expected slowest of q independent draws of the call's own time spread,
measured at one thread over every profiled step (times relative to their mean; ``straggle``), or,
where the call's 1-thread times were measured on each of the q cores the threads run on
(``with_core_spreads``), the expected slowest of one draw per core (``straggle_cores``): other
tenants slow one core and not the other, and a 1-thread measurement sees only the core it runs on.
On dedicated cores M = 1. The model is checked where it can be: against the measured 1 -> 2 thread
speed-up (``python -m numbacnn.bench``), with this machine's per-thread efficiency and stragglers.
"""
from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

# --- iterations per kernel call -------------------------------------------------------------------


def _even(n: int) -> np.ndarray:
    return np.ones(max(n, 0))


def _blocks(size: int, block: int) -> np.ndarray:
    """Work of each iteration of a loop over ``size`` elements in blocks of ``block``."""
    n = -(-size // block)
    w = np.full(n, float(block))
    if n:
        w[-1] = size - (n - 1) * block
    return w


def _parts(n: int, parts: int) -> np.ndarray:
    """Examples of each gradient part (kernels/cpu/_util.py: part_bounds)."""
    c = np.arange(parts + 1)
    return np.diff((c * n) // parts).astype(float)


def _iteration_rules() -> dict[str, Callable[..., np.ndarray]]:
    """Kernel name -> function of the call's arguments (by parameter name) giving the work of
    each ``prange`` iteration. Uses the kernels' own block-size helpers."""
    from .kernels.cpu import activations, optim
    from .kernels.cpu._util import parts_rows
    from .kernels.cpu.dense import backward_grid, forward_grid

    def planes(a: dict) -> np.ndarray:
        out = a["out"] if "out" in a else a["dout"]
        return _even(out.shape[0] * out.shape[1])

    def dense_forward(a: dict) -> np.ndarray:
        (n, f_in), f_out = a["x"].shape, a["w"].shape[0]
        rb, fb = forward_grid(n, f_in, f_out)
        return np.outer(_blocks(n, rb), _blocks(f_out, fb)).ravel()

    def dense_backward(a: dict) -> np.ndarray:
        (n, f_in), f_out = a["x"].shape, a["w"].shape[0]
        ib, ob, rb = backward_grid(n, f_in, f_out, a["need_dx"])
        dw = _blocks(f_out, ob) * n  # per j: an (ob x N) @ (N x ib) GEMM
        dx = _blocks(n, rb) * f_out if a["need_dx"] else np.zeros(0)
        j = np.zeros(max(len(dw), len(dx)))
        j[:len(dw)] += dw
        j[:len(dx)] += dx
        return np.outer(_blocks(f_in, ib), j).ravel()

    def sum_parts(a: dict) -> np.ndarray:  # blocks of rows (co, a) of B * C elements, then the bias
        co, rows, b, c = a["shape"]
        p = a["dw_parts"].shape[0]
        return np.append(_blocks(co * rows, parts_rows(b * c)) * b * c * p, co * p)

    def elementwise(a: dict) -> np.ndarray:
        first = next(iter(a.values()))
        return _blocks(first.shape[0], activations._BLOCK)

    def update(a: dict) -> np.ndarray:
        return _blocks(a["p"].shape[0], optim._BLOCK)

    return {
        "conv2d_forward": lambda a: _even(a["x"].shape[0]),
        "conv2d_forward_wide": lambda a: _even(a["x"].shape[0]),
        "conv2d_forward_positions": lambda a: _even(a["x"].shape[0]),
        "conv2d_backward": lambda a: _parts(a["dout"].shape[0], a["dw_parts"].shape[0]),
        "conv2d_backward_wide": lambda a: _parts(a["dout"].shape[0], a["dw_parts"].shape[0]),
        "conv2d_backward_positions": lambda a: _parts(a["dout"].shape[0], a["dw_parts"].shape[0]),
        "dense_forward": dense_forward,
        "dense_backward": dense_backward,
        "sum_parts": sum_parts,
        "softmax_cross_entropy": lambda a: _even(a["logits"].shape[0]),
        "softmax": lambda a: _even(a["logits"].shape[0]),
        "maxpool2d_forward": planes, "maxpool2d_forward_nopad": planes,
        "maxpool2d_backward": planes, "avgpool2d_forward": planes, "avgpool2d_backward": planes,
        "relu_forward": elementwise, "relu_backward": elementwise, "tanh_forward": elementwise,
        "tanh_backward": elementwise, "dropout_forward": elementwise,
        "dropout_backward": elementwise,
        "sgd_update": update, "rmsprop_update": update, "adam_update": update,
        "gather_batch": lambda a: _even(a["out"].shape[0]),
        "copy_strided": lambda a: _even(a["dst"].shape[0] * a["dst"].shape[1]),
    }


# Per-thread scratch rows (first dimension = numba's thread count): not memory traffic of the call
_PER_THREAD = {"yw", "cols", "xt", "xpad", "gw", "dcols", "pad", "gmask", "gidx"}


@dataclass
class Call:
    """One parallel kernel call of a step, measured at one thread."""

    name: str
    seconds: float  # the whole call, dispatch included
    dispatch: float  # numba's dispatch for these arguments (typing and unboxing): serial
    work: np.ndarray  # work of each prange iteration (relative units)
    nbytes: int  # bytes of the call's arrays (per-thread scratch excluded)
    spread: np.ndarray | None = None  # the call's 1-thread times over the profiled steps / their mean
    # its 1-thread times on each core that the threads run on (straggle_cores relates them to their
    # pooled mean)
    core_spreads: list[np.ndarray] | None = None

    @property
    def iterations(self) -> int:
        return len(self.work)


@dataclass
class StepProfile:
    """A training step taken apart (one thread)."""

    net: str
    batch: int
    step: float  # seconds per step at one thread
    calls: list[Call]
    serial: float  # seconds per step outside the kernel calls (Python, numpy)
    fork_join: tuple[float, float]  # parallel-region cost at 1 and 2 threads, dispatch excluded
    measured_2: float | None = None  # measured speed-up of 2 threads over 1

    def share(self, call: Call) -> float:
        return call.seconds / self.step


def _busiest(work: np.ndarray, p: int) -> float:
    """The work of the busiest of p threads when each takes a contiguous, equal share of the
    iterations (numba's static schedule)."""
    n = len(work)
    if n == 0:
        return 0.0
    bounds = (np.arange(min(p, n) + 1) * n) // min(p, n)
    csum = np.concatenate([[0.0], np.cumsum(work)])
    return float(np.max(csum[bounds[1:]] - csum[bounds[:-1]]))


def straggle(spread: np.ndarray | None, q: int) -> float:
    """The expected slowest of q independent draws from ``spread`` (times relative to their mean),
    exactly: the largest of q draws is the i-th smallest of n sorted values with probability
    (i/n)^q - ((i-1)/n)^q. 1 for one thread, or without a measured spread."""
    if spread is None or len(spread) == 0 or q <= 1:
        return 1.0
    x = np.sort(np.asarray(spread, dtype=float))
    x = x / x.mean()
    i = np.arange(1, len(x) + 1) / len(x)
    return float(np.sum(x * (i**q - (i - 1 / len(x))**q)))


def straggle_cores(spreads: list[np.ndarray] | None, q: int) -> float:
    """The expected slowest of q threads that run on q different cores, each core's time drawn
    independently from the times measured on that core (relative to the pooled mean of all cores'
    times), exactly: the largest of the draws has the product of the cores' empirical
    distribution functions as its own. For q other than the number of measured cores, the
    expected slowest of q draws from the pooled times (``straggle``). 1 for one thread."""
    if not spreads or q <= 1:
        return 1.0
    pooled = np.concatenate([np.asarray(s, dtype=float) for s in spreads])
    if q != len(spreads):
        return straggle(pooled, q)
    mean = pooled.mean()
    values = np.sort(pooled) / mean
    cdf = np.ones(len(values))
    for s in spreads:
        cdf *= np.searchsorted(np.sort(np.asarray(s, dtype=float)) / mean, values,
                               side="right") / len(s)
    return float(np.sum(values * np.diff(cdf, prepend=0.0)))


def wait(call: Call, p: int) -> float:
    """M_k: how much longer call k's parallel compute takes at p threads on a shared machine, its
    busy threads (q = min(p, iterations)) waiting for the slowest (``straggle_cores`` where the
    call was timed on each core, else ``straggle``)."""
    q = min(p, call.iterations)
    if call.core_spreads:
        return straggle_cores(call.core_spreads, q)
    return straggle(call.spread, q)


def mean_wait(profile: StepProfile, p: int) -> float:
    """The step's ``wait`` at p threads, weighted by each call's 1-thread time."""
    total = sum(c.seconds for c in profile.calls)
    return sum(c.seconds * wait(c, p) for c in profile.calls) / total if total > 0 else 1.0


def overhead(profile: StepProfile, p: int) -> float:
    """o(p): the fork-join cost of one parallel region at p threads (log2 growth from the
    measured 1- and 2-thread costs)."""
    o1, o2 = profile.fork_join
    return o1 + max(o2 - o1, 0.0) * math.log2(p)


def predict(profile: StepProfile, p: int, bandwidth: float = 100e9, efficiency: float = 1.0,
            stragglers: bool = False) -> float:
    """Modelled seconds per step at p threads (see the module docstring); ``bandwidth`` in bytes/s;
    ``efficiency``: each thread's compute speed at p > 1 threads relative to one thread alone (1 for
    dedicated cores; ``core_efficiency()`` measures this machine's); ``stragglers``: each region
    waits for its slowest thread, drawn from the call's measured 1-thread spread (a shared
    machine; False for dedicated cores)."""
    t = profile.serial
    o1 = profile.fork_join[0]
    slow = 1.0 / efficiency if p > 1 else 1.0
    for c in profile.calls:
        total = float(c.work.sum()) or 1.0
        compute = max(c.seconds - c.dispatch - o1, 0.0) / total
        m = wait(c, p) if stragglers else 1.0
        t += c.dispatch + overhead(profile, p) + max(compute * slow * m * _busiest(c.work, p),
                                                      c.nbytes / bandwidth)
    return t


def speedup(profile: StepProfile, p: int, bandwidth: float = 100e9, efficiency: float = 1.0,
            stragglers: bool = False) -> float:
    return predict(profile, 1, bandwidth) / predict(profile, p, bandwidth, efficiency, stragglers)


# --- measuring ------------------------------------------------------------------------------------


def _parallel_kernels() -> dict[str, Any]:
    from numba.core.registry import CPUDispatcher

    from .kernels import cpu as K

    return {name: getattr(K, name) for name in K.__all__
            if isinstance(getattr(K, name), CPUDispatcher)
            and getattr(K, name).targetoptions.get("parallel")}


@contextmanager
def _recording(log: list[tuple[str, float, tuple]], info: list[tuple[bool, float]] | None = None
               ) -> Iterator[None]:
    """Within the block, every call of a parallel CPU kernel from Python (whichever numbacnn
    module calls it) appends (name, seconds, args) to log, and to ``info`` (when given) whether
    a step program replayed it (through the kernel's compiled entry point, as unprofiled) and
    the seconds the timing itself took around the call (no part of a real step). Calls from
    Python go through timing wrappers in place of the modules' names; a step program's replay
    times its own calls (program.set_timer)."""
    from . import program
    from ._config import kernels_replaced

    kernels = {id(d): name for name, d in _parallel_kernels().items()}
    clock = time.perf_counter

    def timed(dispatcher: Any, current: Any, module: Any, attr: str) -> Callable | None:
        name = kernels.get(id(dispatcher))
        if name is None:
            return None

        def call(*args):
            t_in = clock()
            r = current(*args)
            t1 = clock()
            log.append((name, t1 - t_in, args))
            if info is not None:
                info.append((False, clock() - t1))
            return r
        return call

    def replayed(dispatcher: Any, seconds: float, args: tuple, t1: float) -> None:
        name = kernels.get(id(dispatcher))
        if name is not None:
            log.append((name, seconds, args))
            if info is not None:
                info.append((True, clock() - t1))

    with kernels_replaced(timed):
        program.set_timer(replayed)
        try:
            yield
        finally:
            program.set_timer(None)


_noop = None


def _dispatch_seconds(args: tuple, repeats: int = 200, replayed: bool = False) -> float:
    """numba's cost of calling a compiled function with these arguments (type dispatch and
    unboxing; unboxing only for a step program's replayed call, which skips the dispatch),
    timed on a function that does nothing."""
    global _noop
    from .program import entry_point

    if _noop is None:
        import numba

        _noop = numba.njit(lambda *a: 0)
    _noop(*args)  # compile for these types
    f = entry_point(_noop, args) if replayed else _noop
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            f(*args)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best


def _fork_join_seconds(threads: int, gap: float = 0.0, repeats: int = 60, blocks: int = 9) -> float:
    """One parallel region of a one-iteration kernel at ``threads`` threads, dispatch excluded,
    each call after ``gap`` seconds of Python (as a step's calls come: worker threads and caches
    cool down between them): the median call of the least disturbed of ``blocks`` blocks (on a
    shared machine another process's work on the second core only adds time, by 2-8 us a call
    in some minutes)."""
    from . import _config
    from .kernels.cpu import relu_forward

    x = np.ones(1, np.float32)
    y = np.empty(1, np.float32)
    saved = _config.get_num_threads()
    _config.set_num_threads(threads)
    medians = []
    try:
        relu_forward(y, x)
        for _ in range(blocks):
            times = []
            for _ in range(repeats):
                until = time.perf_counter() + gap
                while time.perf_counter() < until:  # Python busy between two kernel calls
                    pass
                t0 = time.perf_counter()
                relu_forward(y, x)
                times.append(time.perf_counter() - t0)
            medians.append(statistics.median(times))
    finally:
        _config.set_num_threads(saved)
    return max(min(medians) - _dispatch_seconds((y, x)), 0.0)


_gemms = None


def core_efficiency(threads: int = 2, n: int = 192, repeats: int = 100) -> float:
    """This machine's compute speed per thread at ``threads`` threads against 1 thread alone:
    ``threads`` independent single-threaded GEMMs (n x n x n, through the kernels' BLAS) at once
    against one. 1 on dedicated cores; below 1 on shared or hyper-threaded ones, or when other
    processes compete for the cores (then it changes from one measurement to the next)."""
    global _gemms
    from . import _config
    from .kernels.cpu.blas import sgemm

    threads = min(threads, _config.max_threads())
    if threads < 2:
        return 1.0
    if _gemms is None:
        import numba

        @numba.njit(parallel=True, cache=False)
        def gemms(a, c, n, k, reps):
            for i in numba.prange(k):  # independent products, one per thread
                for _ in range(reps):
                    sgemm(False, False, n, n, n, np.float32(1.0), a, 0, n, a, 0, n,
                          np.float32(0.0), c[i], 0, n)
        _gemms = gemms
    a = np.random.default_rng(0).random(n * n, dtype=np.float32)
    c = np.zeros((threads, n * n), np.float32)
    saved = _config.get_num_threads()
    times = []
    try:
        for k in (1, threads):
            _config.set_num_threads(k)
            _gemms(a, c, n, k, 1)
            t0 = time.perf_counter()
            _gemms(a, c, n, k, repeats)
            times.append(time.perf_counter() - t0)
    finally:
        _config.set_num_threads(saved)
    return min(1.0, times[0] / times[1])  # the same work per thread in both


def profile_step(net_name: str, batch: int, steps: int = 10, rounds: int = 5) -> StepProfile:
    """Profile one SGD-momentum training step of a preset net on random 28x28 data, at one thread.

    The calls of each step are timed in ``rounds`` blocks of ``steps`` steps; the fastest block
    is kept (on a shared machine interference only adds time), with its per-step mean per call.
    Each call's spread (for ``straggle``) comes from its times in every step of every block."""
    from . import _config
    from .bench import _Ours

    saved = _config.get_num_threads()
    _config.set_num_threads(1)
    try:
        ours = _Ours(net_name, batch)
        for _ in range(3):
            ours.train_step()
        per_round: list[tuple[float, list[float], list[tuple[str, tuple, bool]]]] = []
        samples: list[list[float]] = []
        for _ in range(rounds):
            log: list[tuple[str, float, tuple]] = []
            info: list[tuple[bool, float]] = []
            with _recording(log, info):
                t0 = time.perf_counter()
                for _ in range(steps):
                    ours.train_step()
                dt = (time.perf_counter() - t0 - sum(w for _, w in info)) / steps  # less the wrappers
            n_calls = len(log) // steps
            secs = [statistics.fmean(log[s * n_calls + i][1] for s in range(steps))
                    for i in range(n_calls)]
            samples = samples or [[] for _ in range(n_calls)]
            for i, times in enumerate(samples):
                times.extend(log[s * n_calls + i][1] for s in range(steps))
            per_round.append((dt, secs, [(n, a, r) for (n, _, a), (r, _) in zip(log, info[:n_calls])]))
        step, seconds, shapes = min(per_round, key=lambda r: r[0])  # the least disturbed block
        rules = _iteration_rules()
        kernels = _parallel_kernels()
        calls = []
        for (name, args, replayed), sec, times in zip(shapes, seconds, samples):
            params = list(inspect.signature(kernels[name].py_func).parameters)
            named = dict(zip(params, args))
            nbytes = sum(a.nbytes for k, a in named.items() if isinstance(a, np.ndarray)
                         and not (k in _PER_THREAD and a.shape[0] == _config.max_threads()))
            spread = np.sort(np.array(times)) / statistics.fmean(times)
            calls.append(Call(name, sec, _dispatch_seconds(args, replayed=replayed),
                              rules[name](named), nbytes, spread))
        serial = max(step - sum(c.seconds for c in calls), 0.0)
        gap = min(serial / max(len(calls), 1), 5e-4)  # the Python between two kernel calls
        fork_join = (_fork_join_seconds(1, gap), _fork_join_seconds(2, gap)
                     if _config.max_threads() > 1 else _fork_join_seconds(1, gap))
        return StepProfile(net_name, batch, step, calls, serial, fork_join)
    finally:
        _config.set_num_threads(saved)


def call_times(step: Callable[[], None], seconds: float) -> list[tuple[str, list[float]]]:
    """Run ``step`` (one training step) repeatedly for about ``seconds``, timing each parallel
    kernel call: (kernel name, its time in every step) for each call of a step, in order."""
    log: list[tuple[str, float, tuple]] = []
    steps = 0
    with _recording(log):
        t0 = time.perf_counter()
        while steps == 0 or time.perf_counter() - t0 < seconds:
            step()
            steps += 1
    n = len(log) // steps
    return [(log[i][0], [log[s * n + i][1] for s in range(steps)]) for i in range(n)]


def with_core_spreads(profile: StepProfile, per_core: list[list[tuple[str, list[float]]]]) -> bool:
    """Give each call of ``profile`` its 1-thread times measured on each core (``call_times`` run
    with the thread pinned to one core, one list per core), for ``straggle_cores``. False, and the
    profile unchanged, unless every core's list has the profile's calls in its order."""
    names = [c.name for c in profile.calls]
    if len(per_core) < 2 or any([name for name, _ in core] != names for core in per_core):
        return False
    for i, call in enumerate(profile.calls):
        call.core_spreads = [np.asarray(core[i][1], dtype=float) for core in per_core]
    return True


def merge_calls(profile: StepProfile) -> list[tuple[str, int, float, int]]:
    """(kernel, calls per step, share of the step, fewest iterations of its calls), by share."""
    by: dict[str, list[Call]] = {}
    for c in profile.calls:
        by.setdefault(c.name, []).append(c)
    rows = [(n, len(cs), sum(profile.share(c) for c in cs), min(c.iterations for c in cs))
            for n, cs in by.items()]
    return sorted(rows, key=lambda r: -r[2])
