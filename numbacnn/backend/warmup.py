"""Cold-start JIT warm-up on the CPU: the conv backward kernels, the slowest to compile, compile in a
child process while this one compiles the forward, the loss and the other backward kernels.

Kernel specialisations depend on argument types only, never on shapes or values, so the child
builds each convolution's plan, gives it zeroed workspaces for a 2-example batch, and runs the
plan's backward: numba compiles exactly the specialisations that training needs into its disk
cache, and this process loads them in its first conv backward (the CPU plans call
``wait_pending`` first). Started by whoever is about to train (``Trainer.fit``) through
``CpuBackend.start_precompile``; only with a cold cache for those kernels, with numba's disk cache
on, on at least 2 CPUs, and unless NUMBACNN_PRECOMPILE=0. If the child fails or is slow, the
parent compiles as it would have without it. Timings: docs/performance.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

WAIT_S = 300.0  # the longest the parent waits for the child
_CHILD = "import sys; from numbacnn.backend import warmup; warmup.child(sys.argv[1])"

_started: set[str] = set()  # conv backward kernels a child was started for in this process
_pending: list[subprocess.Popen] = []


def _cache_is_cold(kernel: Any) -> bool:
    try:
        index = kernel._cache._cache_file._index_path
    except AttributeError:  # caching off, or numba's internals moved: no warm-up
        return False
    return not os.path.exists(index)


def conv_jobs(net: Any, in_shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """The CPU convolutions of ``net`` with their input shapes and fusions, as JSON-able dicts."""
    jobs, shape = [], tuple(int(s) for s in in_shape)
    for layer in net.layers:
        plan = getattr(layer, "plan", None)
        if plan is not None:
            g = plan.geometry
            jobs.append({"geometry": [g.in_channels, g.out_channels, list(g.kernel), list(g.stride),
                                      list(g.padding)], "shape": list(shape),
                         "relu": bool(layer.fused_relu),
                         "pool": list(layer.fused_pool) if layer.fused_pool else None})
        shape = layer.output_shape(shape)
    return jobs


def start_backward_precompile(net: Any, in_shape: tuple[int, ...]) -> bool:
    """Start a child compiling ``net``'s conv backward kernels into numba's disk cache if that
    cache is cold for them; returns whether one was started."""
    from .. import _config

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not _config._CACHE or os.environ.get("NUMBACNN_PRECOMPILE", "1") == "0" or (cpus or 1) < 2:
        return False
    kernels = {layer.plan.backward_kernel for layer in net.layers if getattr(layer, "plan", None)}
    todo = {k for k in kernels if k.__name__ not in _started and _cache_is_cold(k)}
    if not todo:
        return False
    _started.update(k.__name__ for k in todo)
    env = dict(os.environ, NUMBACNN_PRECOMPILE="0")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(conv_jobs(net, in_shape))],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return False
    _pending.append(proc)
    return True


def wait_pending() -> None:
    """Wait for the children started so far (a CPU conv backward calls this first)."""
    while _pending:
        proc = _pending.pop()
        try:
            proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:  # compile here instead; let it finish on its own
            pass


def child(jobs_json: str) -> None:
    """The child's work: each convolution's backward on zeroed 2-example workspaces."""
    from ..kernels.cpu._plan import CpuConvPlan
    from . import get_backend
    from .base import ConvGeometry

    cpu = get_backend("cpu")
    for job in json.loads(jobs_json):
        ci, co, k, s, p = job["geometry"]
        g = ConvGeometry(ci, co, tuple(k), tuple(s), tuple(p))
        plan = cpu.conv_plan(g)
        assert isinstance(plan, CpuConvPlan)
        plan.before_backward = None
        pool = tuple(job["pool"]) if job["pool"] else None
        ws = cpu.workspace()
        weight = np.zeros((co, ci, *k), np.float32)
        # the forward's buffers, zeroed (the argmax caches must hold valid indices), without
        # running (and compiling) the forward kernel
        x = np.zeros((2, *job["shape"]), np.float32)
        ws["x"] = x
        y, _ = plan.outputs(ws, x, pool)
        y[...] = 0
        if plan.name == "gemm":
            ws.buf("cols", (2, g.ckk, y.shape[2] * y.shape[3]))[...] = 0
        plan.backward(ws, np.zeros_like(y), weight, np.zeros_like(weight), np.zeros(co, np.float32),
                      True, job["relu"], pool)
