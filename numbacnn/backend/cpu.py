"""The CPU backend: numpy arrays and the numba njit kernels of ``numbacnn.kernels.cpu``."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from .. import tuning as T
from ..kernels import cpu as K
from .base import Backend, ConvGeometry, ConvPlan, Shape, Workspace
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
        if PointwisePlan.fits(geometry) and geometry.in_channels >= T.POINTWISE_MIN_CHANNELS:
            return PointwisePlan(geometry)
        if (WinogradPlan.fits(geometry)
                and min(geometry.in_channels, geometry.out_channels) >= T.WINOGRAD_MIN_CHANNELS):
            return WinogradPlan(geometry)
        if geometry.ckk >= T.POSITIONS_MIN_CKK and geometry.in_channels >= T.POSITIONS_MIN_CHANNELS:
            plan: type[ConvPlan] = PositionsPlan
        elif geometry.stride == (1, 1):
            plan = DirectPlan if geometry.ckk <= T.DIRECT_MAX_CKK else WidePlan
        else:
            plan = GemmPlan
        return plan(geometry)
