"""The backend interface: the operations every device offers, with one signature and one meaning.

Layers, optimizers and the loss call a kernel by its declared name, ``backend.run("relu_forward", y,
x)``, and never branch on the device; a backend's own operations are its arrays, its convolution
plans and the BatchNorm fold (which keeps a device's records). Arrays are the backend's own (numpy
on the CPU, numba device arrays on CUDA); outputs come first, then inputs and parameters, then
sizes, as in the kernels. Shapes: NCHW float32, argmax int32 holding
an index into each example's (H * W) input plane (or into a fused conv's output row).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..runtime.calls import launch

_NO_RECORD = np.zeros(0, np.int32)  # a fold that keeps no record (always folds)

Shape = tuple[int, ...]
Pair = tuple[int, int]


class GraphError(RuntimeError):
    """A capture or graph launch that the device's driver refused (``Backend.graph``); the message
    names the driver's error."""


def conv_out(size: int, k: int, s: int, p: int) -> int:
    """Output positions along one axis of a convolution or pooling window: input ``size``, window
    ``k``, stride ``s``, zero padding ``p`` on both sides."""
    return (size + 2 * p - k) // s + 1


@dataclass(frozen=True)
class ConvGeometry:
    """What a convolution plan needs to know about its layer."""

    in_channels: int
    out_channels: int
    kernel: Pair
    stride: Pair
    padding: Pair  # zero rows above and columns to the left
    groups: int = 1  # output channel co reads input channels of group co // (C_out / groups) only
    dilation: Pair = (1, 1)
    padding_end: Pair | None = None  # rows below and columns to the right; None: as ``padding``
    precision: str = "float32"  # "bf16": the plan's multiplications in bfloat16 where it has them

    @cached_property
    def ckk(self) -> int:
        """C_in / groups * KH * KW: the length of one filter."""
        return self.in_channels // self.groups * self.kernel[0] * self.kernel[1]

    @cached_property
    def plain(self) -> bool:
        """Ungrouped, undilated and symmetrically padded: what every plan runs."""
        return (self.groups == 1 and self.dilation == (1, 1)
                and (self.padding_end is None or self.padding_end == self.padding))

    def out_hw(self, h: int, w: int) -> Pair:
        """Output height and width for an h x w input."""
        end = self.padding_end or self.padding
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        return ((h + self.padding[0] + end[0] - (kh - 1) * dh - 1) // self.stride[0] + 1,
                (w + self.padding[1] + end[1] - (kw - 1) * dw - 1) // self.stride[1] + 1)


class Workspace(dict):
    """A layer's buffers on one backend, by name; reused while the shape and dtype stay the same.

    Buffers returned by a layer's forward/backward live here, so the next call with the same batch
    size overwrites them (``Sequential`` copies what it returns)."""

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend

    def buf(self, key: str, shape: Shape, dtype: Any = np.float32) -> Any:
        b = self.get(key)
        if b is None or b.shape != tuple(shape) or b.dtype != dtype:
            b = self.backend.empty(tuple(shape), dtype)
            self[key] = b
        return b

    def __reduce__(self):  # scratch space never travels (pickles, deep copies): an empty one does
        return (Workspace, (self.backend,))


class ConvPlan:
    """One way to run a convolution on one backend: its workspaces, its forward and backward calls,
    and whether it applies a following ReLU and max pool in its own kernels.

    ``forward`` keeps in ``ws`` what ``backward`` needs ("x", "y", and with a fused pool
    "pool_argmax"); ``pool`` is (PKH, PKW) or None, and is only given when ``fuses_pool``.
    """

    name = ""
    fuses_pool = False
    max_fused_window = 0  # the largest pool window (elements) it can fuse, when fuses_pool

    def __init__(self, geometry: ConvGeometry) -> None:
        self.geometry = geometry

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool,
                pool: Pair | None, backward: bool = True, version: Any = None) -> Any:
        """y (N, Co, OH, OW), or pooled (N, Co, OH // PKH, OW // PKW). ``backward=False``
        (inference): no backward follows, so a plan may skip what only the backward reads (the
        fused pool's argmax). ``version``: when weight is the BatchNorm fold's output, the fold's
        count of its writes (``Backend.batchnorm_fold``), which a plan that packs the weights
        compares instead of their bits."""
        raise NotImplementedError

    # whether inference chains may hand this plan channel-last activations (forward_channels_last)
    channels_last = False

    def forward_channels_last(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool,
                              pool: Pair | None, version: Any, layout: int) -> Any:
        """An inference forward (no backward follows) with x channel-last (N, H, W, C) when
        ``layout`` & 1, and its result (N, OH, OW, Co) when ``layout`` & 2; plans with
        ``channels_last`` only (layers.fuse_chain chains them)."""
        raise NotImplementedError

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        """Writes dweight (zeros unless ``need_dw``: a frozen weight costs no gradient work) and
        dbias, overwriting them; returns dx (N, Ci, H, W), or None."""
        raise NotImplementedError


class Backend:
    """The operations of one device. Subclasses: ``CpuBackend`` (numba njit kernels) and
    ``CudaBackend`` (numba.cuda kernels)."""

    name = ""
    kernels: Any = None  # the module of this device's kernels (numbacnn.kernels.cpu or .cuda)

    @classmethod
    def instance(cls) -> Backend:
        """The one backend of this class (backends are stateless singletons)."""
        if cls not in _INSTANCES:
            _INSTANCES[cls] = cls()
        return _INSTANCES[cls]

    def __reduce__(self):  # pickled as "the instance of its class", unpickled as the same object
        return (type(self).instance, ())

    # --- arrays ---------------------------------------------------------------------------------
    def empty(self, shape: Shape, dtype: Any = np.float32) -> Any:
        raise NotImplementedError

    def asarray(self, a: Any) -> Any:
        """This backend's contiguous float32 array for ``a`` (a host array is copied once)."""
        raise NotImplementedError

    def to_host(self, a: Any) -> np.ndarray:
        raise NotImplementedError

    def is_array(self, a: Any) -> bool:
        raise NotImplementedError

    def write(self, dst: Any, src: np.ndarray) -> None:
        """Copy the host array ``src`` into the backend array ``dst`` (same shape; ``dst``'s dtype)."""
        raise NotImplementedError

    def read(self, dst: np.ndarray, src: Any) -> None:
        """Copy the backend array ``src`` into the host array ``dst`` (a ``staging`` array on CUDA:
        in order with the kernels, complete after ``synchronize``)."""
        np.copyto(dst, self.to_host(src))

    def synchronize(self) -> None:
        """Wait until every launch and copy made so far has finished (nothing to wait for on the
        CPU)."""

    def staging(self, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        """A host array for inputs that ``write`` copies to this device (page-locked on CUDA: its
        copies run at full speed and in order with the kernels, without waiting for them; keep it
        unchanged until the next ``to_host``)."""
        return np.empty(shape, dtype)

    def graph(self, fn: Any, keep: Any = None) -> Any:
        """The kernel launches of ``fn()`` captured as one graph that ``.launch()`` replays, or None
        where this backend has none (then ``fn`` has not run); ``keep``: what the graph holds on to
        (the buffers its launches address). Raises GraphError when the driver refuses. CUDA:
        backend/cuda_graph.py."""
        return None

    def workspace(self) -> Workspace:
        return Workspace(self)

    # --- kernels --------------------------------------------------------------------------------
    def run(self, name: str, *args: Any) -> None:
        """Launch this device's kernel ``name``: one declared ``export=True`` in ``kernels/cpu`` and
        as a launcher in ``kernels/cuda``, with the same name, signature and meaning on every device
        (outputs first, then inputs and parameters, then sizes). The one way layers, optimizers and
        the loss call kernels; a new kernel needs no operation of its own here."""
        launch(getattr(self.kernels, name), *args)

    def conv_plan(self, geometry: ConvGeometry) -> ConvPlan:
        """The convolution strategy for this layer shape; the one place where it is chosen."""
        raise NotImplementedError

    def batchnorm_fold(self, ws: Workspace, wf, bf, w, b, weight, bias, running_mean, running_var,
                       eps: float) -> Any:
        """A convolution (w (Co, K), b) and an evaluation-mode BatchNorm as one convolution (wf, bf).
        Returns the fold's count of its writes, for the plans' packings (``ConvPlan.forward``), or
        None where the backend keeps none: then the fold runs on every call."""
        seen, version = self._fold_records(ws, w.size + 5 * w.shape[0])
        launch(self.kernels.batchnorm_fold, wf, bf, w, b, weight, bias, running_mean, running_var, eps,
               seen, version)
        return version if version.shape[0] else None

    def _fold_records(self, ws: Workspace, n: int) -> tuple[Any, Any]:
        """The fold's record of its inputs (n + 1 int32) and its count (1 int32); empty: none."""
        return _NO_RECORD, _NO_RECORD


_INSTANCES: dict[type, Backend] = {}
