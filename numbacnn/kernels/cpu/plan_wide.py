"""The "wide" and "direct" plans: stride-1 convolutions on wide rows (kernels in conv2d_wide.py),
their rows and weight gradient by im2col and BLAS ("wide") or computed directly ("direct",
conv2d_direct.py)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...backend.base import Pair, Workspace
from ._plan import CpuConvPlan, group_size
from .conv2d_wide import conv2d_backward_wide, conv2d_forward_wide


class WidePlan(CpuConvPlan):
    name = "wide"
    fuses_pool = True
    forward_kernel = conv2d_forward_wide
    backward_kernel = conv2d_backward_wide
    direct = False  # the rows and weight gradient by im2col + BLAS (True: conv2d_direct.py)

    def _cols_shape(self, length: int) -> tuple[int, ...]:
        """im2col's per-thread workspace (C_in*KH*KW rows of ``length``); unused when direct."""
        return (self.slots, 1, 1) if self.direct else (self.slots, self.geometry.ckk, length)

    def _geometry(self, x: np.ndarray) -> tuple[int, int, int]:
        """Padded height and width, and the wide row length L = (OH - 1) * Wp + OW."""
        (ph, pw), (kh, kw) = self.geometry.padding, self.geometry.kernel
        hp, wp = x.shape[2] + 2 * ph, x.shape[3] + 2 * pw
        return hp, wp, (hp - kh) * wp + wp - kw + 1

    def _pad_shape(self, hp: int, wp: int) -> tuple[int, ...]:
        ph, pw = self.geometry.padding
        return (self.slots, self.geometry.in_channels, hp, wp) if ph > 0 or pw > 0 else (self.slots, 1, 1, 1)

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None) -> Any:
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool)
        hp, wp, L = self._geometry(x)
        g = self.geometry
        conv2d_forward_wide(y, argmax, ws.buf("yw", (self.slots, g.out_channels + 1, L)),
                            ws.buf("cols", self._cols_shape(L)), ws.buf("xpad", self._pad_shape(hp, wp)),
                            x, weight, bias, *g.padding, relu, *(pool or (0, 0)), self.direct)
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, relu, pool) -> None:
        g = self.geometry
        x, argmax = ws["x"], ws["pool_argmax"]
        hp, wp, L = self._geometry(x)
        group = group_size(g, L, x.shape[0])
        gl = group * L
        conv2d_backward_wide(
            dx, dw_parts, db_parts, ws.buf("gw", (self.slots, g.out_channels, gl)),
            ws.buf("bcols", self._cols_shape(gl)),
            ws.buf("dcols", (self.slots, g.ckk, gl) if need_dx else (self.slots, 1, 1)),
            ws.buf("dpad", self._pad_shape(hp, wp)), *self.pooled_workspaces(ws, pool),
            dy, x, weight, self.pooled_y(ws, pool), argmax, *g.padding, group, need_dx, relu,
            *(pool or (0, 0)), self.direct)


class DirectPlan(WidePlan):
    """The wide plan with its rows and weight gradient computed directly, for short filters
    (CpuBackend.conv_plan); the input gradient still goes through a GEMM and col2im."""

    name = "direct"
    direct = True
