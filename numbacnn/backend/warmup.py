"""Cold-start JIT warm-up on the CPU: two processes share the compilation of a training step's
kernels, this one from the first kernel a step calls, a child process from the last, until they meet.

The child gets a copy of the network and optimizer, runs one training step (and one evaluation)
with every kernel replaced by a stub that records its argument types, and so learns the step's
kernel specialisations in the order a step needs them (specialisations depend on argument types
only, never on shapes or values). It then compiles them from the last one backwards into numba's
disk cache. Every specialisation, kernel or helper, is claimed before it is compiled, with a file
created exclusively in a folder both processes share (``_config.compile_hook``): when the other
process holds the claim, this one waits for it to finish and numba loads the result from the
cache. So neither compiles what the other does, and they meet in the middle of the step: the
child stops at the first kernel this process has claimed.

Started by whoever is about to train (``Trainer.fit``, the benchmark, the distributed warm-up) through
``CpuBackend.start_precompile``: only when the disk cache is on and cold for the network's kernels,
on at least 2 CPUs, and unless NUMBACNN_PRECOMPILE=0. If the child fails, is slow or exits, this
process compiles what is left as it would have without it. Timings: docs/performance.md.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np

WAIT_S = 300.0  # the longest this process waits for the child to finish one kernel
POLL_S = 0.005
_CHILD = "import sys; from numbacnn.backend import warmup; warmup.child(sys.argv[1])"


class _Session:
    """The folder two processes share: "<key>.claim" when one of them has started compiling a
    specialisation, "<key>.done" when it has finished (and numba's cache holds it). ``other_alive``
    says whether the other process is still there (the parent watches its child, the child the
    folder, which the parent removes when it is done with it)."""

    def __init__(self, folder: str, other_alive: Callable[[], bool]) -> None:
        self.folder = folder
        self.other_alive = other_alive

    def _path(self, key: str, kind: str) -> str:
        return os.path.join(self.folder, f"{key}.{kind}")

    def claim(self, key: str) -> bool:
        """Claim ``key``; False when the other process has claimed it."""
        try:
            os.close(os.open(self._path(key, "claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    def claimed(self, key: str) -> bool:
        return os.path.exists(self._path(key, "claim"))

    def mark_done(self, key: str) -> None:
        os.close(os.open(self._path(key, "done"), os.O_CREAT | os.O_WRONLY))

    def wait_done(self, key: str) -> None:
        """Until the other process has finished ``key`` or is gone, or WAIT_S have passed."""
        done = self._path(key, "done")
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(done) and self.other_alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)

    @contextmanager
    def compiling(self, dispatcher: Any, sig: tuple) -> Iterator[None]:
        """Around one compilation (``_config.compile_hook``): compile it when this process claims
        it first, else wait for the other process (numba then loads its result from the cache)."""
        key = job_key(dispatcher, sig)
        try:
            mine = self.claim(key)
        except OSError:  # the folder is gone: the other process is done with it
            mine = False
        else:
            if not mine:
                self.wait_done(key)
        try:
            yield
        finally:
            if mine:
                try:
                    self.mark_done(key)
                except OSError:
                    pass


_session: _Session | None = None
_child: subprocess.Popen | None = None


def job_key(dispatcher: Any, sig: tuple) -> str:
    """A file name for one specialisation: the function's module and name with its argument types."""
    py = dispatcher.py_func
    return hashlib.sha1(f"{py.__module__}.{py.__qualname__}{tuple(sig)}".encode()).hexdigest()


def _parent_hook(dispatcher: Any, sig: tuple) -> AbstractContextManager:
    s = _session
    if s is None or not s.other_alive():  # the child has exited: what it compiled is cached
        end()
        return nullcontext()
    return s.compiling(dispatcher, sig)


def _cache_is_cold(kernel: Any) -> bool:
    """Neither the prebuilt kernels nor numba's disk cache hold anything for ``kernel``."""
    is_cold = getattr(getattr(kernel, "_cache", None), "is_cold", None)
    return bool(is_cold()) if is_cold is not None else False


def _step_kernels(net: Any) -> list[Any]:
    """Kernels every training step of ``net`` calls, for the cold-cache check."""
    from ..kernels import cpu as K
    from ..layers import Dense

    kernels = [K.softmax_cross_entropy]
    for layer in net.layers:
        plan = getattr(layer, "plan", None)
        if plan is not None:
            kernels += [plan.forward_kernel, plan.backward_kernel]
        if isinstance(layer, Dense):
            kernels += [K.dense_forward, K.dense_backward]
    return kernels


def start_precompile(net: Any, in_shape: tuple[int, ...], optimizer: Any = None,
                     batch_size: int = 2) -> bool:
    """Start a child sharing the compilation of ``net``'s training step (with ``optimizer``'s
    update, if given) when numba's disk cache is cold for it; returns whether one was started."""
    global _session, _child
    from .. import _config

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not _config._CACHE or os.environ.get("NUMBACNN_PRECOMPILE", "1") == "0" or (cpus or 1) < 2:
        return False
    if _child is not None and _child.poll() is None:
        return False  # one child at a time
    if not any(_cache_is_cold(k) for k in _step_kernels(net)):
        return False
    folder = tempfile.mkdtemp(prefix="numbacnn-warmup-")
    try:
        with open(os.path.join(folder, "step.pkl"), "wb") as f:
            pickle.dump((net, optimizer, tuple(int(s) for s in in_shape), max(1, min(batch_size, 2))), f)
    except Exception:  # an object that does not pickle: no warm-up
        shutil.rmtree(folder, ignore_errors=True)
        return False
    env = dict(os.environ, NUMBACNN_PRECOMPILE="0")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, folder], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return False
    _child = proc
    _session = _Session(folder, lambda: proc.poll() is None)
    _config.compile_hook = _parent_hook
    atexit.register(end)
    return True


def end() -> None:
    """Stop sharing (at the child's exit, and at this process's): no more claims, the folder goes.
    A child still compiling finishes its current kernel into the cache and stops."""
    global _session
    from .. import _config

    s, _session = _session, None
    _config.compile_hook = None
    if s is not None:
        shutil.rmtree(s.folder, ignore_errors=True)


def step_jobs(net: Any, optimizer: Any, in_shape: tuple[int, ...], batch: int) -> list[tuple[Any, tuple]]:
    """The kernel specialisations of one training step and one evaluation (forward, loss), in the
    order of their first call. Runs the step with every kernel replaced by a stub that records its
    argument types: call it on copies (their buffers and dropout generators move)."""
    from .._config import kernels_replaced
    from ..kernels import cpu as K
    from ..network import softmax_cross_entropy

    def stub(dispatcher: Any, current: Any, module: Any, attr: str) -> Callable:
        return lambda *args: calls.append((dispatcher, tuple(dispatcher.typeof_pyval(a) for a in args)))

    calls: list[tuple[Any, tuple]] = []
    x = np.zeros((batch, *in_shape), np.float32)
    with kernels_replaced(stub):
        y = np.zeros(batch, np.int64)
        K.gather_batch(x.reshape(batch, -1), y, x.reshape(batch, -1), y, np.arange(batch))  # a step program's
        logits = net.forward(x, training=True)
        _, d = softmax_cross_entropy(logits, y)
        net.backward(d, need_input_grad=False)
        if optimizer is not None:
            optimizer.step()
        net.forward(x, training=False)
    jobs, seen = [], set()
    for disp, sig in calls:
        if (id(disp), sig) not in seen:
            seen.add((id(disp), sig))
            jobs.append((disp, sig))
    return jobs


def child(folder: str) -> None:
    """The child's work: the step's kernels from the last needed to the first, each claimed first
    (helpers too, inside their kernel's compilation); it stops where the parent has been."""
    from .. import _config

    with open(os.path.join(folder, "step.pkl"), "rb") as f:
        net, optimizer, in_shape, batch = pickle.load(f)
    session = _Session(folder, lambda: os.path.isdir(folder))
    _config.compile_hook = session.compiling
    for disp, sig in reversed(step_jobs(net, optimizer, in_shape, batch)):
        if not os.path.isdir(folder):
            return  # the parent needs nothing more
        if session.claimed(job_key(disp, sig)):
            return  # the parent has come this far: it compiles the rest
        try:
            disp.compile(sig)
        except Exception:  # the parent compiles it again and reports the error
            pass
