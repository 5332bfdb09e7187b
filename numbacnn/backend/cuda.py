"""The CUDA backend: numba device arrays and the numba.cuda kernels of ``numbacnn.kernels.cuda``.
Importing it needs numba.cuda but no GPU; running needs a GPU or NUMBA_ENABLE_CUDASIM=1."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import cuda as KC
from ..kernels.cuda._launch import stream
from .base import Backend, ConvGeometry, ConvPlan, Shape
from .cuda_conv import GroupedPlan, TiledPlan


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self) -> None:
        from numba import cuda

        self._cuda = cuda
        self.kernels = KC

    def empty(self, shape: Shape, dtype: Any = np.float32) -> Any:
        return self._cuda.device_array(shape, dtype)

    def asarray(self, a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return self._cuda.to_device(np.ascontiguousarray(a, dtype=np.float32))
        return a

    def to_host(self, a: Any) -> np.ndarray:
        return a if isinstance(a, np.ndarray) else a.copy_to_host()

    def is_array(self, a: Any) -> bool:
        return not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host")  # also the simulator's

    def write(self, dst: Any, src: np.ndarray) -> None:
        # on the launch stream: in order with the kernels; a pageable src is staged before this
        # returns, a page-locked one (``staging``) is read while the stream runs
        dst.copy_to_device(np.ascontiguousarray(src, dtype=dst.dtype), stream=stream())

    def read(self, dst: np.ndarray, src: Any) -> None:
        src.copy_to_host(dst, stream=stream())

    def synchronize(self) -> None:
        s = stream()
        if s:
            s.synchronize()

    def staging(self, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        return self._cuda.pinned_array(shape, dtype)

    def graph(self, fn: Any, keep: Any = None) -> Any:
        from .cuda_graph import capture

        return capture(fn, keep)

    def conv_plan(self, geometry: ConvGeometry) -> ConvPlan:
        return TiledPlan(geometry) if geometry.plain else GroupedPlan(geometry)
