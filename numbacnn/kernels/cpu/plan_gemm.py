"""The "gemm" plan: strided convolutions with short filters; gathered im2col columns, cached for the
backward (kernels in conv2d.py)."""
from __future__ import annotations

from typing import Any

from ...backend.base import Pair, Workspace
from ._plan import CpuConvPlan
from .conv2d import conv2d_backward, conv2d_forward


class GemmPlan(CpuConvPlan):
    name = "gemm"
    fuses_pool = False
    forward_kernel = conv2d_forward
    backward_kernel = conv2d_backward

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None) -> Any:
        ws["x"] = x
        y, _ = self.outputs(ws, x, None)
        g = self.geometry
        cols = ws.buf("cols", (x.shape[0], g.ckk, y.shape[2] * y.shape[3]))
        conv2d_forward(y, cols, x, weight, bias, *g.stride, *g.padding, relu)
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, relu, pool) -> None:
        g = self.geometry
        chunks, positions = dw_parts.shape[0], dy.shape[2] * dy.shape[3]
        g_tmp = ws.buf("g_tmp", (chunks, g.out_channels, positions) if relu else (chunks, 1, 1))
        dcols = ws.buf("dcols", (chunks, g.ckk, positions) if need_dx else (chunks, 1, 1))
        conv2d_backward(dx, dw_parts, db_parts, dcols, g_tmp, dy, ws["cols"], weight, ws["y"],
                        *g.stride, *g.padding, need_dx, relu)
