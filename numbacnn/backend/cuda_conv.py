"""The CUDA convolution plans: "tiled" (the default: tiled implicit GEMMs in shared memory,
numbacnn/kernels/cuda/conv2d_tiled.py) and "gather" (one thread per output element, gradients by
gather, numbacnn/kernels/cuda/conv2d_gather.py; the first, simplest version, kept as a reference)."""
from __future__ import annotations

from typing import Any

from ..kernels import cuda as KC
from ..runtime.calls import launch
from .base import ConvPlan, Pair, Workspace


class GatherPlan(ConvPlan):
    name = "gather"
    fuses_pool = False

    @property
    def _forward_kernel(self) -> Any:
        return KC.conv2d_forward_gather

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        g = self.geometry
        y = ws.buf("y", (x.shape[0], g.out_channels, *g.out_hw(x.shape[2], x.shape[3])))
        ws["x"] = x  # the backward reads the input directly (no im2col cache)
        launch(self._forward_kernel, y, x, weight, bias, *g.stride, *g.padding, relu)
        return y

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        x, y = ws["x"], ws["y"]
        dx = ws.buf("dx", x.shape) if need_dx else None
        launch(KC.conv2d_backward_gather, dx, dweight, dbias, ws.buf("g", dy.shape), dy, x, weight, y,
               *self.geometry.stride, *self.geometry.padding, need_dx, need_dw, relu)
        return dx


class GroupedPlan(ConvPlan):
    """Grouped (depthwise), dilated or unevenly padded convolutions (kernels/cuda/conv2d_grouped.py)."""

    name = "grouped"
    fuses_pool = False

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        g = self.geometry
        y = ws.buf("y", (x.shape[0], g.out_channels, *g.out_hw(x.shape[2], x.shape[3])))
        ws["x"] = x
        launch(KC.conv2d_forward_grouped, y, x, weight, bias, *g.stride, *g.dilation, *g.padding,
               g.groups, relu)
        return y

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        g = self.geometry
        x, y = ws["x"], ws["y"]
        dx = ws.buf("dx", x.shape) if need_dx else None
        launch(KC.conv2d_backward_grouped, dx, dweight, dbias, ws.buf("g", dy.shape), dy, x, weight, y,
               *g.stride, *g.dilation, *g.padding, g.groups, need_dx, need_dw, relu)
        return dx


class TiledPlan(GatherPlan):
    """The gather plan's forward and workspaces with the tiled kernels; the weight gradient's chunks
    get their own workspace ("parts")."""
    name = "tiled"

    @property
    def _forward_kernel(self) -> Any:
        return KC.conv2d_forward_tiled

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        x, y = ws["x"], ws["y"]
        dx = ws.buf("dx", x.shape) if need_dx else None
        parts = ws.buf("parts", (KC.dw_workspace_size(x.shape, weight.shape, dy.shape),))
        launch(KC.conv2d_backward_tiled, dx, dweight, dbias, ws.buf("g", dy.shape), parts, dy, x,
               weight, y, *self.geometry.stride, *self.geometry.padding, need_dx, need_dw, relu)
        return dx
