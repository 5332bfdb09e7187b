"""The CPU backend: numpy arrays and the numba njit kernels of ``numbacnn.kernels.cpu``."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from ..kernels import cpu as K
from .base import Backend, ConvGeometry, ConvPlan, Shape, Workspace
from .calls import launch
from .cpu_conv import (
    DirectPlan,
    GemmPlan,
    GroupedPlan,
    PaddedPlan,
    PointwisePlan,
    PositionsPlan,
    WidePlan,
    WinogradPlan,
)

# Convolutions with a filter of at least POSITIONS_MIN_CKK = C_in*KH*KW floats and at least
# POSITIONS_MIN_CHANNELS input channels run position-major (any stride): measured 0.7-0.92x the
# time of the "wide" plan from there on and 1.3-2x below, and 0.44-0.97x the time of "gemm" for
# strided layers (docs/performance.md has the measurements).
POSITIONS_MIN_CKK = 100
POSITIONS_MIN_CHANNELS = 3
# Stride-1 convolutions with filters of at most DIRECT_MAX_CKK floats compute their rows and weight
# gradient directly, without im2col and BLAS: 1.2-4x faster than "wide" for 1 -> 6 5x5, 1 -> 32 3x3,
# 3 -> 16 3x3 and 1 -> 7 7x7, but 0.6-1.15x for 8 -> 16 3x3 (C_in*KH*KW = 72) and longer filters.
DIRECT_MAX_CKK = 64
# 3x3 stride-1 convolutions with at least WINOGRAD_MIN_CHANNELS input and output channels run by
# Winograd F(2x2, 3x3): 1.4-1.8x faster forward and 1.2-1.5x backward than "positions" on the
# 32- and 64-channel layers of mnistcnn, modern and resnet8; forward + backward 0.59-0.82x the time
# with 24 channels (airbench94's 24 -> 64 on 31 x 31, 24 -> 24, 24 -> 32, 24 -> 48), but 1.12x at
# 16 -> 16 and 0.94x at 16 -> 32 (docs/performance.md).
WINOGRAD_MIN_CHANNELS = 24
# 1x1 stride-1 convolutions run as a GEMM an example: DS-CNN's 64 -> 64 on 25 x 5 planes at batch
# 100 trained 3x faster than on "direct" (whose input gradient runs by im2col and col2im), and
# forward + backward took 0.32-0.55x "direct"'s time from 3 to 8 input channels too (3 -> 16, 4 -> 24,
# 8 -> 16, 8 -> 64 on 8x8 to 48x48 planes, 2 threads of a Zen 5)
POINTWISE_MIN_CHANNELS = 1
_NO_DX = np.empty((1, 1), np.float32)  # dense_backward's dx when the input gradient is not needed


class CpuBackend(Backend):
    name = "cpu"
    kernels = K

    def empty(self, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        # integer buffers (argmax caches) start at 0: even a backward that read one before its
        # forward wrote it would stay in bounds
        return np.zeros(shape, dtype) if np.dtype(dtype).kind in "iu" else np.empty(shape, dtype)

    # np.ascontiguousarray(a, dtype=float32) without a Python-level call (it runs on every layer)
    asarray = staticmethod(partial(np.ascontiguousarray, dtype=np.float32))  # type: ignore[assignment]

    def to_host(self, a: Any) -> np.ndarray:
        return a

    def is_array(self, a: Any) -> bool:
        return isinstance(a, np.ndarray)

    def write(self, dst: Any, src: np.ndarray) -> None:
        dst[...] = src

    def _fold_records(self, ws: Workspace, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The fold's input record (created empty: it folds on its first call) and its count."""
        seen = ws.get("fold_seen")
        if seen is None or seen.shape != (n + 1,):
            seen = ws.buf("fold_seen", (n + 1,), np.int32)
            seen[-1] = 0
        return seen, ws.buf("fold_version", (1,), np.int32)

    def conv_plan(self, geometry: ConvGeometry) -> ConvPlan:
        if geometry.groups == 1 and geometry.dilation == (1, 1) and not geometry.plain:
            return PaddedPlan(geometry, self.conv_plan(replace(geometry, padding=(0, 0), padding_end=None)))
        if not geometry.plain:
            return GroupedPlan(geometry)
        if PointwisePlan.fits(geometry) and geometry.in_channels >= POINTWISE_MIN_CHANNELS:
            return PointwisePlan(geometry)
        if (WinogradPlan.fits(geometry)
                and min(geometry.in_channels, geometry.out_channels) >= WINOGRAD_MIN_CHANNELS):
            return WinogradPlan(geometry)
        if geometry.ckk >= POSITIONS_MIN_CKK and geometry.in_channels >= POSITIONS_MIN_CHANNELS:
            plan: type[ConvPlan] = PositionsPlan
        elif geometry.stride == (1, 1):
            plan = DirectPlan if geometry.ckk <= DIRECT_MAX_CKK else WidePlan
        else:
            plan = GemmPlan
        return plan(geometry)

    def dense_backward(self, dx, dw, db, dy, x, w, need_dw: bool = True) -> None:
        launch(K.dense_backward, _NO_DX if dx is None else dx, dw, db, dy, x, w, dx is not None, need_dw)
