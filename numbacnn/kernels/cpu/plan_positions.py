"""The "positions" plan: position-major columns for long filters, any stride (kernels in
conv2d_positions.py)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...backend.base import Pair, Workspace
from ._plan import CpuConvPlan, group_size
from .batch import copy_strided
from .conv2d_positions import conv2d_backward_positions, conv2d_forward_positions


class PositionsPlan(CpuConvPlan):
    name = "positions"
    fuses_pool = True
    forward_kernel = conv2d_forward_positions
    backward_kernel = conv2d_backward_positions
    parts_axes = (0, 2, 3, 1)  # (Co, KH, KW, Ci): the position-major columns' order

    def _xt_shape(self, x: np.ndarray) -> tuple[int, int, int]:
        ph, pw = self.geometry.padding
        return self.slots, (x.shape[2] + 2 * ph) * (x.shape[3] + 2 * pw), self.geometry.in_channels

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None) -> Any:
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool)
        g = self.geometry
        (kh, kw), ci, co = g.kernel, g.in_channels, g.out_channels
        L = math.prod(g.out_hw(x.shape[2], x.shape[3]))
        wt = ws.buf("wt", (kh, kw, ci, co))
        copy_strided(wt, weight.transpose(2, 3, 1, 0))
        conv2d_forward_positions(
            y, argmax, ws.buf("yw", (self.slots, L, co)), ws.buf("cols", (self.slots, L, g.ckk)),
            ws.buf("xt", self._xt_shape(x)), x, wt.reshape(g.ckk, co), bias, *g.stride, *g.padding,
            kh, kw, relu, *(pool or (0, 0)))
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, relu, pool) -> None:
        g = self.geometry
        (kh, kw), ci, co = g.kernel, g.in_channels, g.out_channels
        x, argmax = ws["x"], ws["pool_argmax"]
        L = math.prod(g.out_hw(x.shape[2], x.shape[3]))
        group = group_size(g, L, x.shape[0])
        wk = ws.buf("wk", (co, kh, kw, ci))
        copy_strided(wk, weight.transpose(0, 2, 3, 1))
        conv2d_backward_positions(
            dx, dw_parts, db_parts, ws.buf("gw", (self.slots, co, group * L)),
            ws.buf("bcols", (self.slots, group * L, g.ckk)),
            ws.buf("dcols", (self.slots, group * L, g.ckk) if need_dx else (self.slots, 1, 1)),
            ws.buf("xt", self._xt_shape(x)), *self.pooled_workspaces(ws, pool),
            dy, x, wk, self.pooled_y(ws, pool), argmax, *g.stride, *g.padding, kh, kw, group, need_dx, relu,
            *(pool or (0, 0)))
