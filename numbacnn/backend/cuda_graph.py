"""CUDA graphs: the kernel launches that a function makes on the launch stream
(``kernels/cuda/_launch.stream``) captured once and replayed as one graph launch. A numba.cuda
launch costs 20-45 us of host time (argument typing and packing); a graph launch a few, whatever
the number of kernels in it. Needs NVIDIA's ``cuda.bindings`` (numba-cuda's driver binding);
under the simulator there are no graphs and every launch runs as made."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..kernels.cuda._launch import stream
from .base import GraphError


def _driver() -> Any:
    """cuda.bindings' driver module, or None (the simulator, or a numba without it)."""
    from numba import config

    if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
        return None
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    return driver


def _check(drv: Any, result: tuple, what: str) -> Any:
    """The values after the CUresult of a cuda.bindings call; GraphError when it failed."""
    err, *values = result
    if err != drv.CUresult.CUDA_SUCCESS:
        raise GraphError(f"{what} failed: {getattr(err, 'name', err)}")
    return values[0] if values else None


class Graph:
    """An instantiated graph of captured launches. It holds ``keep`` (the captured calls, with the
    device arrays they read and write) so that the buffers its kernels address outlive it."""

    def __init__(self, drv: Any, exe: Any, keep: Any) -> None:
        self._drv, self._exe, self.keep = drv, exe, keep
        self._stream = drv.CUstream(int(stream().handle))
        finalizer = weakref.finalize(self, drv.cuGraphExecDestroy, exe)
        finalizer.atexit = False  # the driver may be gone by then; the process's exit frees it

    def launch(self) -> None:
        """Run the captured launches, in order, on the launch stream (asynchronously)."""
        _check(self._drv, self._drv.cuGraphLaunch(self._exe, self._stream), "cuGraphLaunch")


def capture(fn: Callable[[], Any], keep: Any = None) -> Graph | None:
    """The launches ``fn()`` makes on the launch stream as a ``Graph``, or None where there are no
    graphs (the simulator: then ``fn`` has not run). The launches are recorded, not run: launch
    the graph to run them. ``fn`` may launch kernels, copy between the device and page-locked host
    memory and allocate, but not wait for the device (no copies from pageable memory): its
    launches' arguments are baked into the graph, so it must read and write the same buffers, with
    the same sizes and scalars, every time. Raises GraphError when the driver
    refuses the capture, and what ``fn`` raises (the capture then ended)."""
    from numba import cuda

    drv = _driver()
    if drv is None:
        return None
    s = drv.CUstream(int(stream().handle))
    # relaxed: a workspace (re)allocated while capturing (another batch size ran through the same
    # layers since this program's first run) is allocated as usual, and the graph addresses it
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    with cuda.defer_cleanup():  # no device memory freed while capturing
        _check(drv, drv.cuStreamBeginCapture(s, mode), "cuStreamBeginCapture")
        try:
            fn()
        except BaseException as e:
            err, graph = drv.cuStreamEndCapture(s)
            if err == drv.CUresult.CUDA_SUCCESS:
                drv.cuGraphDestroy(graph)
                raise  # fn's own error
            raise GraphError(f"capturing failed: {getattr(err, 'name', err)} ({e})") from e
        graph = _check(drv, drv.cuStreamEndCapture(s), "cuStreamEndCapture")
    try:
        exe = _check(drv, drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    finally:
        drv.cuGraphDestroy(graph)  # the executable graph is a copy
    return Graph(drv, exe, keep)
