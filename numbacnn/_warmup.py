"""Cold-start JIT warm-up on two cores: the conv backward kernels compile in a second process
while this one compiles the rest of the first training step.

Kernel signatures depend on argument types only, never on shapes or values, so a child process
that runs the same layers on a 2-example batch compiles exactly the specialisations that the
training step will need, and numba's disk cache hands them over. In the child every kernel but
the conv backward ones is replaced by a stand-in that only zeroes its arrays (so the forward
leaves zeroed buffers of the right shapes and types, argmax caches included); the backward then
compiles and runs the real conv backward kernels. The parent compiles the forward, the loss and
the backward of the layers above the first convolution meanwhile, and waits for the child before
its first conv backward, which then loads the kernels from the cache.

Started only with a cold cache for the network's conv backward kernels, with numba's disk cache
enabled, on at least 2 CPUs, and unless NUMBACNN_PRECOMPILE=0. If the child fails or is slow,
the parent compiles as it would have without it. Measured (mnistcnn and lenet5, empty cache,
2 cores): 23-25 s to the first training step without, 16-17 s with the child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

# kernels that the child replaces by stand-ins (attributes of numbacnn.kernels.cpu): all but the
# conv backward ones, which are the slow ones to compile; the parent compiles the cheap backward
# kernels of the layers above the convolutions while the child is still busy
_STAND_INS = ("conv2d_forward", "conv2d_forward_positions", "conv2d_forward_wide", "dense_forward",
              "dense_backward", "maxpool2d_forward", "maxpool2d_forward_nopad", "maxpool2d_backward",
              "avgpool2d_forward", "avgpool2d_backward", "relu_forward", "relu_backward",
              "tanh_forward", "tanh_backward", "dropout_forward", "dropout_backward")
_CONV_BACKWARD = {"wide": "conv2d_backward_wide", "positions": "conv2d_backward_positions",
                  "gemm": "conv2d_backward"}
WAIT_S = 300.0  # the longest the parent waits for the child (it compiles in 10-25 s)

_started: set[str] = set()  # conv backward kernels a child was started for in this process
_pending: list[subprocess.Popen] = []


def _cache_is_cold(name: str) -> bool:
    from .kernels import cpu as K

    try:
        index = getattr(K, name)._cache._cache_file._index_path
    except AttributeError:  # caching off, or numba's internals moved: no warm-up
        return False
    return not os.path.exists(index)


def start_backward_precompile(net: Any, in_shape: tuple[int, ...]) -> bool:
    """Start a child compiling ``net``'s backward kernels into numba's disk cache if that cache is
    cold for its conv backward kernels; returns whether one was started."""
    from . import _config
    from .layers import Conv2D

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not _config._CACHE or os.environ.get("NUMBACNN_PRECOMPILE", "1") == "0" or (cpus or 1) < 2:
        return False
    names = {_CONV_BACKWARD[layer.strategy] for layer in net.layers if isinstance(layer, Conv2D)}
    todo = {n for n in names - _started if _cache_is_cold(n)}
    if not todo:
        return False
    _started.update(todo)
    try:
        spec = json.dumps({"layers": [[type(layer).__name__, layer.get_config()]
                                      for layer in net.layers], "shape": [int(s) for s in in_shape]})
    except (TypeError, ValueError):  # a layer the child could not rebuild: compile here
        return False
    env = dict(os.environ, NUMBACNN_PRECOMPILE="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # numbacnn's parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys, numbacnn._warmup as w; w.child(sys.argv[1])", spec],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return False
    _pending.append(proc)
    return True


def wait_pending() -> None:
    """Wait for the children started so far (the parent's backward calls this before its first
    convolution)."""
    while _pending:
        proc = _pending.pop()
        try:
            proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:  # compile here instead; let it finish on its own
            pass


def child(spec_json: str) -> None:
    """The child's work: the network described by spec_json, a zeroing forward and a backward."""
    from .kernels import cpu as K
    from .layers import layer_from_config
    from .network import Sequential

    spec = json.loads(spec_json)

    def no_op(*args: Any) -> None:  # zeroed outputs: the argmax caches must hold valid indices
        for a in args:
            if isinstance(a, np.ndarray) and a.flags.writeable:
                a[...] = 0

    for name in _STAND_INS:
        setattr(K, name, no_op)
    net = Sequential([layer_from_config(kind, cfg) for kind, cfg in spec["layers"]], seed=0)
    out = net.forward(np.zeros((2, *spec["shape"]), np.float32), training=True)
    net.backward(np.zeros_like(out), need_input_grad=False)
