"""The CPU convolution plans: one object per algorithm (kernels in numbacnn/kernels/cpu/), owning its
workspaces and its kernel calls; ``CpuBackend.conv_plan`` chooses one per layer shape.

- "direct": stride 1, short filters; rows and weight gradient computed directly (conv2d_direct.py)
- "wide": stride 1; wide rows by im2col + BLAS (conv2d_wide.py)
- "positions": long filters, any stride; position-major columns (conv2d_positions.py)
- "gemm": strided, short filters; gathered im2col columns cached for the backward (conv2d_gemm.py)
- "pointwise": 1x1 stride-1 convolutions, a GEMM an example (conv2d_pointwise.py)
- "padded": an ungrouped, undilated convolution with uneven padding, run by the plan of its
  unpadded twin on a zero-padded copy of the input (pad.py)
- "grouped": grouped (depthwise), dilated or unevenly padded convolutions, plane by plane
  (conv2d_grouped.py)

All share per-thread workspace rows and weight-gradient parts per chunk of examples, reduced in a
fixed order after the whole batch (bitwise the same for any thread count).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import tuning as T
from ..kernels import cpu as K
from ..runtime import config as _config
from ..runtime.calls import launch
from ..runtime.config import small_gemm_macs
from .base import ConvGeometry, ConvPlan, Pair, Workspace


def packed_from(ws: Workspace, key: str, weight: np.ndarray, version: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(seen, version) for a kernel that packs the weights (a transpose, Winograd's transforms):
    the record of the weights it last packed (kernels/cpu/_util.unchanged): int32, weight.size + 1,
    created empty (last element 0), so that it repacks only when the weights' bits change:
    inference packs once, however many calls follow, and a training step, which changes them,
    every time. With a ``version`` (the BatchNorm fold's count of its writes, weight being the
    folded weights), the record holds the count it packed at (_util.same_version) and the
    weights are not compared."""
    if version is not None:
        seen = ws.get(key + "_version")
        if seen is None:
            seen = ws.buf(key + "_version", (2,), np.int32)
            seen[:] = 0
        return seen, version
    seen = ws.get(key)
    if seen is None or seen.shape != (weight.size + 1,):
        seen = ws.buf(key, (weight.size + 1,), np.int32)
        seen[-1] = 0
    return seen, _NO_VERSION


def _packing(key: str, version: np.ndarray | None) -> str:
    """The workspace key of a packing of the weights: the folded weights' (inference, with the
    fold's ``version``) apart from the plain weights' (training), each with its own record
    (packed_from), so that neither is taken for the other: one buffer for both let a prediction
    after a training forward (or an unfolded one) without a weight update in between run on
    the plain weights' packing, and a training forward after a prediction on the folded ones."""
    return key if version is None else key + "_folded"


_ALWAYS = np.zeros(0, np.int32)  # no record: the kernel packs on every call
_NO_VERSION = np.zeros(0, np.int32)  # weights not written by a counting fold
_NO_OFFSETS = np.zeros(0, np.int64)  # the "positions" forward by columns and a GEMM
_NO_WEIGHTS = np.zeros((0, 0, 0, 0), np.float32)  # and its input gradient likewise
_NO_PLANES = np.zeros((1, 0), np.float32)
_NO_PAIRS = np.zeros(0, np.uint16)  # float32 GEMMs: no bf16 operands


class CpuConvPlan(ConvPlan):
    """Base of the CPU plans: ``forward`` stores x; ``backward`` makes the gradient parts and
    reduces them after ``_backward``."""

    parts_axes = (0, 1, 2, 3)  # the weight gradient parts' axes, as axes of (Co, Ci, KH, KW)
    max_fused_window = 128  # the fused pool's argmax is an int8 offset inside the window

    def __init__(self, geometry: ConvGeometry) -> None:
        super().__init__(geometry)
        self.slots = _config.max_threads()  # rows of the per-thread workspaces (fixed per process)

    def outputs(self, ws: Workspace, x: np.ndarray, pool: Pair | None, shape: tuple[int, ...] | None = None,
                channels_last: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """y and the pool argmax: pooled shapes with a fused pool, else the conv output and an unused
        (N, 1, 1, 1) placeholder (one entry per example keeps the kernels' argmax[n] in bounds).
        ``shape``: x's as (N, C, H, W) when x is not laid out so; ``channels_last``: y as (N, OH,
        OW, Co) (the argmax keeps its shape)."""
        n, _, h, w = shape or x.shape
        oh, ow = self.geometry.out_hw(h, w)
        co = self.geometry.out_channels
        if pool:
            oh, ow = oh // pool[0], ow // pool[1]
            argmax = ws.buf("pool_argmax", (n, co, oh, ow), np.int8)
        else:
            argmax = ws.buf("pool_argmax", (n, 1, 1, 1), np.int8)
        if channels_last:
            return ws.buf("y_nhwc", (n, oh, ow, co)), argmax
        return ws.buf("y", (n, co, oh, ow)), argmax

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        x = ws["x"]
        n = x.shape[0]
        chunks = self.grad_parts(ws, n)
        g = self.geometry
        dx = ws.buf("dx", x.shape) if need_dx else ws.buf("dx0", (n, 1, 1, 1))
        dw_parts = ws.buf("dw_parts", (chunks, g.out_channels, g.ckk))
        db_parts = ws.buf("db_parts", (chunks, g.out_channels))
        self._backward(ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool)
        dwp = dweight.transpose(self.parts_axes)  # dweight in the parts' axis order
        launch(K.sum_parts, dweight.reshape(-1), dbias, dw_parts.reshape(chunks, -1), db_parts, dwp.shape,
               tuple(s // dwp.itemsize for s in dwp.strides))
        return dx if need_dx else None

    def _backward(self, ws: Workspace, dx, dw_parts, db_parts, dy, weight, need_dx: bool, need_dw: bool,
                  relu: bool, pool: Pair | None) -> None:
        raise NotImplementedError

    def grad_parts(self, ws: Workspace, n: int) -> int:
        """The weight gradient's parts for a batch of n (_config.grad_parts; a plan whose forward
        splits the batch itself keeps its split)."""
        return _config.grad_parts(n)

    def pooled_y(self, ws: Workspace, pool: Pair | None) -> np.ndarray:
        """The backward kernels' y: the conv output, or with a fused pool (whose argmax marks
        where the ReLU passed nothing) an unread (N, 1, 1, 1) placeholder."""
        y = ws["y"]
        return ws.buf("y0", (y.shape[0], 1, 1, 1)) if pool else y

    def pooled_workspaces(self, ws: Workspace, pool: Pair | None) -> tuple[np.ndarray, np.ndarray]:
        """gmask and gidx: a fused pool's backward workspaces per thread, float32 rows of one
        example's pooled size and int32 rows of one pooled channel more."""
        y = ws["y"]
        m = y[0].size if pool else 1
        return (ws.buf("gmask", (self.slots, m)),
                ws.buf("gidx", (self.slots, m + y[0, 0].size if pool else 1), np.int32))


def group_size(g: ConvGeometry, rows: int, n: int) -> int:
    """Examples per GEMM in the backward of the "wide" and "positions" plans, for ``rows`` GEMM
    rows per example and a batch of n: about 1,200 rows at most, 1 for narrow layers
    (docs/performance.md), and never more than a gradient part holds."""
    if g.out_channels < 32 or g.ckk < 64:
        return 1
    return max(1, min(8, 1200 // max(rows, 1), -(-n // _config.grad_parts(n))))


class GroupedPlan(CpuConvPlan):
    """Grouped, depthwise, dilated or unevenly padded convolutions: planes computed directly, the
    weight gradient in parts of the batch summed after it (any thread count: the same bits)."""

    name = "grouped"

    def _wide(self, x_shape: tuple[int, ...], y_shape: tuple[int, ...]) -> tuple[int, int] | None:
        """(padded plane size, wide workspace length) of a depthwise layer on wide rows, else None:
        the wide rows, L = (OH - 1) * Wp + OW, with room for the window's reach on both sides."""
        g = self.geometry
        if g.ckk != g.kernel[0] * g.kernel[1] or g.stride[0] != g.stride[1]:
            return None
        (s, _), (dh, dw), (kh, kw) = g.stride, g.dilation, g.kernel
        oh, ow = y_shape[2], y_shape[3]
        wp = K.depthwise_pitch(x_shape[3], ow, kw, s, dw, g.padding[1])
        hp = max(g.padding[0] + x_shape[2], s * (oh - 1) + (kh - 1) * dh + 1)
        margin = (kh - 1) * dh * wp + (kw - 1) * dw  # the input gradient's zeros on each side
        length = (oh - 1) * s * wp + (ow - 1) * s + 1  # the stride-1 wide rows the outputs lie on
        return hp * wp, max(length + 2 * margin, hp * wp + margin)

    def _flat(self, x: Any, y_shape: tuple[int, ...]) -> bool:
        """Whether a forward runs on flat planes (conv2d_forward_depthwise_flat): depthwise, stride
        1, the output the input's size, x C-contiguous."""
        g = self.geometry
        return (g.ckk == g.kernel[0] * g.kernel[1] and g.stride == (1, 1) and y_shape[2:] == x.shape[2:]
                and x.flags.c_contiguous)

    def _workspaces(self, ws: Workspace, wide: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
        """xpad and yw (the kernels' padded planes and wide rows), (threads, 1) when unread."""
        if wide is None:
            return ws.buf("xpad", (self.slots, 1)), ws.buf("yw", (self.slots, 1))
        return ws.buf("xpad", (self.slots, wide[0])), ws.buf("yw", (self.slots, wide[1]))

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        ws["x"] = x
        g = self.geometry
        y = ws.buf("y", (x.shape[0], g.out_channels, *g.out_hw(x.shape[2], x.shape[3])))
        if self._flat(x, y.shape):
            masks = depthwise_masks(ws, g, x.shape[2], x.shape[3])
            end = g.padding_end or g.padding
            xpad = ws.buf("xflat", (self.slots, (g.padding[0] + x.shape[2] + end[0]) * x.shape[3]
                                    + g.padding[1] + end[1]))
            launch(K.conv2d_forward_depthwise_flat, y, masks, xpad, x, weight, bias, *g.dilation, *g.padding,
                   relu)
            return y
        xpad, yw = self._workspaces(ws, self._wide(x.shape, y.shape))
        launch(K.conv2d_forward_grouped, y, xpad, yw, x, weight, bias, *g.stride, *g.dilation, *g.padding,
               g.groups, relu)
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool) -> None:
        g = self.geometry
        x, y = ws["x"], ws["y"]
        masked = ws.buf("g", y.shape) if relu else ws.buf("g0", (1, 1, 1, 1))
        if self._flat(x, y.shape) and dy.flags.c_contiguous and x.shape[3] <= T.DEPTHWISE_FLAT_MAX_WIDTH:
            if relu:
                launch(K.relu_backward, masked.reshape(-1), dy.reshape(-1), y.reshape(-1))
            bmasks, cmasks = depthwise_masks(ws, g, x.shape[2], x.shape[3], back=True)
            hw = x.shape[2] * x.shape[3]
            lanes = ws.buf("lanes", (self.slots, g.out_channels // x.shape[1] * (g.ckk + 1), 2))
            xpad = ws["xflat"]
            gpad = ws.buf("gflat", (self.slots, xpad.shape[1] + (g.kernel[1] + 2) * hw))
            launch(K.conv2d_backward_depthwise_flat, dx, dw_parts, db_parts, lanes, xpad, gpad, bmasks,
                   cmasks, masked if relu else dy, x, weight, *g.dilation, *g.padding, need_dx, need_dw)
            return
        wide = self._wide(x.shape, y.shape)
        lanes = ws.buf("lanes", (self.slots, g.ckk + 1, y.shape[3]) if wide is None else
                       (self.slots, g.out_channels // g.groups * (g.ckk + 1), 2))
        dpad = ws.buf("dpad", (self.slots, 1 if wide is None else wide[0]))
        ones = ws.get("ones")
        if ones is None or ones.shape != (1 if wide is None else wide[1],):
            ones = ws.buf("ones", (1 if wide is None else wide[1],))
            ones[:] = 1.0
        xpad, gw = self._workspaces(ws, wide)
        launch(K.conv2d_backward_grouped, dx, dw_parts, db_parts, masked, lanes, xpad, dpad, gw, ones, dy,
               x, weight, y, *g.stride, *g.dilation,
               *g.padding, g.groups, need_dx, need_dw, relu)


def depthwise_masks(ws: Workspace, g: ConvGeometry, h: int, w: int, back: bool = False) -> Any:
    """(KH * KW, h * w) uint8: 1 where tap (kh, kw) of an output of a stride-1, same-size plane
    reads inside the plane (the flat depthwise forward's masks), kept while the shape stays. With
    ``back``, the backward's: the masks of the flipped filters (padded (KH - 1) DH - PT rows above
    and (KW - 1) DW - PL columns left; the input gradient is their forward over the output's
    gradient) and (KW, h * w): 1 where tap column kw reads inside the plane."""
    hw = ws.buf("masks_hw", (2,), np.int64)
    taps = g.kernel[0] * g.kernel[1]
    if ws.get("masks") is None or ws["masks"].shape != (taps, h * w) or tuple(hw) != (h, w):
        (kh, kw), (dh, dw), (pt, pl) = g.kernel, g.dilation, g.padding
        ih, iw = np.arange(h)[None, :], np.arange(w)[None, :]
        for key, top, left in (("masks", pt, pl), ("bmasks", (kh - 1) * dh - pt, (kw - 1) * dw - pl)):
            r = ih + (np.arange(kh) * dh - top)[:, None]  # (kh, h): the rows a tap reads
            c = iw + (np.arange(kw) * dw - left)[:, None]
            inside = ((r >= 0) & (r < h))[:, None, :, None] & ((c >= 0) & (c < w))[None, :, None, :]
            ws.buf(key, (taps, h * w), np.uint8)[:] = inside.reshape(taps, h * w)
            if key == "masks":  # the forward's columns alone, row after row
                ws.buf("cmasks", (kw, h * w), np.uint8)[:] = np.tile((c >= 0) & (c < w), (1, h))
        hw[:] = (h, w)
    return (ws["bmasks"], ws["cmasks"]) if back else ws["masks"]


class PaddedPlan(ConvPlan):
    """Uneven zero padding ((top, bottom), (left, right)) of an ungrouped, undilated convolution:
    the input padded into a workspace, then the unpadded layer's own plan (``inner``, chosen by
    the backend) on it; the input gradient cropped from the inner plan's."""

    name = "padded"

    def __init__(self, geometry: ConvGeometry, inner: ConvPlan) -> None:
        super().__init__(geometry)
        self.inner = inner

    def _inner_ws(self, ws: Workspace) -> Workspace:
        inner = ws.get("inner")
        if inner is None:
            inner = ws["inner"] = Workspace(ws.backend)
        return inner

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        g = self.geometry
        end = g.padding_end or g.padding
        n, c, h, w = x.shape
        xp = ws.buf("xpadded", (n, c, h + g.padding[0] + end[0], w + g.padding[1] + end[1]))
        launch(K.pad2d_forward, xp, x, *g.padding)
        ws["x"] = x
        y = self.inner.forward(self._inner_ws(ws), xp, weight, bias, relu, pool, backward, version)
        ws["y"] = y
        return y

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        dxp = self.inner.backward(self._inner_ws(ws), dy, weight, dweight, dbias, need_dx, need_dw, relu,
                                  pool)
        if not need_dx:
            return None
        dx = ws.buf("dx", ws["x"].shape)
        launch(K.pad2d_backward, dx, dxp, *self.geometry.padding)
        return dx


class PointwisePlan(CpuConvPlan):
    """1x1 stride-1 unpadded convolutions: one GEMM an example each way, the weight gradient's
    GEMMs summed over each part of the batch."""

    name = "pointwise"

    @staticmethod
    def fits(g: ConvGeometry) -> bool:
        return g.plain and g.kernel == (1, 1) and g.stride == (1, 1) and g.padding == (0, 0)

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        ws["x"] = x
        n, _, h, w = x.shape
        co = self.geometry.out_channels
        y = ws.buf("y", (n, co, h, w))
        launch(K.conv2d_forward_pointwise, y.reshape(n, co, h * w), x.reshape(n, -1, h * w),
               weight.reshape(co, -1), bias, relu)
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool) -> None:
        x, y = ws["x"], ws["y"]
        n, co, h, w = y.shape
        hw = h * w
        ones = ws.get("ones")
        if ones is None or ones.shape != (hw,):
            ones = ws.buf("ones", (hw,))
            ones[:] = 1.0
        masked = ws.buf("g", (n, co, hw)) if relu else ws.buf("g0", (1, 1, 1))
        launch(K.conv2d_backward_pointwise, dx.reshape(n, -1, hw) if need_dx else ws.buf("dx1", (1, 1, 1)),
               dw_parts, db_parts, masked, ones, dy.reshape(n, co, hw), x.reshape(n, -1, hw),
               weight.reshape(co, -1), y.reshape(n, co, hw), need_dx, need_dw, relu)


class WidePlan(CpuConvPlan):
    """Stride-1 convolutions on wide rows, the rows and weight gradient by im2col and BLAS."""

    name = "wide"
    fuses_pool = True
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

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool)
        hp, wp, L = self._geometry(x)
        g = self.geometry
        launch(K.conv2d_forward_wide, y, argmax, ws.buf("yw", (self.slots, g.out_channels + 1, L)),
               ws.buf("cols", self._cols_shape(L)), ws.buf("xpad", self._pad_shape(hp, wp)),
               x, weight, bias, *g.padding, relu, *(pool or (0, 0)), self.direct,
               wide_blocks(g, x.shape), backward)
        return y

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool) -> None:
        g = self.geometry
        x, argmax = ws["x"], ws["pool_argmax"]
        hp, wp, L = self._geometry(x)
        group = group_size(g, L, x.shape[0])
        gl = group * L
        launch(K.conv2d_backward_wide,
               dx, dw_parts, db_parts, ws.buf("gw", (self.slots, g.out_channels, gl)),
               ws.buf("bcols", self._cols_shape(gl)),
               ws.buf("dcols", (self.slots, g.ckk, gl) if need_dx else (self.slots, 1, 1)),
               ws.buf("dpad", self._pad_shape(hp, wp)), *self.pooled_workspaces(ws, pool),
               dy, x, weight, self.pooled_y(ws, pool), argmax, *g.padding, group, need_dx, need_dw, relu,
               *(pool or (0, 0)), self.direct)


class DirectPlan(WidePlan):
    """The wide plan with its rows and weight gradient computed directly, for short filters
    (CpuBackend.conv_plan); the input gradient still goes through a GEMM and col2im."""

    name = "direct"
    direct = True


class PositionsPlan(CpuConvPlan):
    """Position-major columns for long filters, any stride."""

    name = "positions"
    fuses_pool = True
    parts_axes = (0, 2, 3, 1)  # (Co, KH, KW, Ci): the position-major columns' order

    def _xt_shape(self, x: np.ndarray) -> tuple[int, int, int]:
        ph, pw = self.geometry.padding
        return self.slots, (x.shape[2] + 2 * ph) * (x.shape[3] + 2 * pw), self.geometry.in_channels

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool)
        g = self.geometry
        (kh, kw), ci, co = g.kernel, g.in_channels, g.out_channels
        L = math.prod(g.out_hw(x.shape[2], x.shape[3]))
        wt = ws.buf(_packing("wt", version), (kh, kw, ci, co))
        launch(K.position_filters, wt, weight, *packed_from(ws, "wt_from", weight, version))
        direct = self.direct_forward
        launch(K.conv2d_forward_positions,
               y, argmax, ws.buf("yw", (self.slots, L, co)),
               ws.buf("cols", (self.slots, 1, 1) if direct else (self.slots, L, g.ckk)),
               ws.buf("xt", self._xt_shape(x)), x, wt.reshape(g.ckk, co), bias, *g.stride, *g.padding,
               kh, kw, relu, *(pool or (0, 0)), positions_blocks(g, x.shape, pool, direct), backward,
               self._tap_offsets(ws, x.shape) if direct else _NO_OFFSETS)
        return y

    @property
    def direct_forward(self) -> bool:
        """Whether the forward runs the FMA blocks of kernels/cpu/microkernel.py on the transposed
        plane (no columns, no GEMM): output channels in whole vectors of 16."""
        return self.geometry.out_channels % 16 == 0

    def _tap_offsets(self, ws: Workspace, shape: tuple[int, ...]) -> np.ndarray:
        """Where each output position's first tap lies in the transposed padded plane, (L,) int64:
        ((oy * SH) * Wp + ox * SW) * Ci."""
        g = self.geometry
        h, w = shape[2], shape[3]
        return _offsets(ws, *g.out_hw(h, w), g.stride[0] * (w + 2 * g.padding[1]), g.stride[1],
                        g.in_channels)

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool) -> None:
        g = self.geometry
        (kh, kw), ci, co = g.kernel, g.in_channels, g.out_channels
        x, argmax = ws["x"], ws["pool_argmax"]
        L = math.prod(g.out_hw(x.shape[2], x.shape[3]))
        group = group_size(g, L, x.shape[0])
        wk = ws.buf("wk", (co, kh, kw, ci))
        launch(K.copy_strided, wk, weight.transpose(0, 2, 3, 1))
        fma_dx = need_dx and self.fma_input_gradient
        cols_dx = need_dx and not fma_dx
        if fma_dx:  # the input gradient as a convolution by the FMA blocks (conv2d_backward_positions)
            h, w = x.shape[2:]
            wr = ws.buf("wr", (kh, kw, co, ci))
            launch(K.copy_strided, wr, weight[:, :, ::-1, ::-1].transpose(2, 3, 0, 1))
            gp = ws.buf("gp", (self.slots, (h + kh - 1) * (w + kw - 1) * co))
            dxw = ws.buf("dxw", (self.slots, h * w * ci))
            xo = self._gradient_offsets(ws, x.shape)
        else:
            wr, gp, dxw, xo = _NO_WEIGHTS, _NO_PLANES, _NO_PLANES, _NO_OFFSETS
        launch(K.conv2d_backward_positions,
               dx, dw_parts, db_parts, ws.buf("gw", (self.slots, co, group * L)),
               ws.buf("bcols", (self.slots, group * L, g.ckk)),
               ws.buf("dcols", (self.slots, group * L, g.ckk) if cols_dx else (self.slots, 1, 1)),
               ws.buf("xt", self._xt_shape(x)), *self.pooled_workspaces(ws, pool),
               dy, x, wk, self.pooled_y(ws, pool), argmax, *g.stride, *g.padding, kh, kw, group, need_dx,
               need_dw, relu, *(pool or (0, 0)), *positions_gemm_rows(g, group * L), wr, gp, dxw, xo)

    @property
    def fma_input_gradient(self) -> bool:
        """Whether the backward computes the input gradient by the FMA blocks, as the convolution of
        the zero-padded output gradient with the rotated filters: stride 1, input channels in whole
        vectors of 16, padding smaller than the kernel."""
        g = self.geometry
        return (g.stride == (1, 1) and g.in_channels % 16 == 0 and g.padding[0] < g.kernel[0]
                and g.padding[1] < g.kernel[1])

    def _gradient_offsets(self, ws: Workspace, shape: tuple[int, ...]) -> np.ndarray:
        """Where each input position's first tap lies in the transposed, padded output-gradient
        plane (width W + KW - 1, Co channels), (H * W,) int64 (made once per input size)."""
        g = self.geometry
        h, w = shape[2], shape[3]
        return _offsets(ws, h, w, w + g.kernel[1] - 1, 1, g.out_channels)


def positions_gemm_rows(g: ConvGeometry, rows: int) -> tuple[int, int]:
    """KB and MB of conv2d_backward_positions for ``rows`` positions per GEMM: the weight
    gradient's GEMM (Co x ckk x rows) summed over runs of KB positions, the input gradient's
    (rows x ckk x Co) made MB rows at a time, each piece small enough for the BLAS's small-matrix
    kernels. From the shapes (and the BLAS) only, never the thread count."""
    per_row = g.ckk * g.out_channels
    rows_fit = small_gemm_macs() // per_row
    if rows_fit < T.MIN_GEMM_ROWS or rows * per_row <= small_gemm_macs():
        return rows, rows
    return rows_fit, rows_fit


def _offsets(ws: Workspace, rows: int, cols: int, row_step: int, col_step: int, channels: int
             ) -> np.ndarray:
    """(rows * cols,) int64: (i * row_step + j * col_step) * channels for position (i, j), row-major:
    where positions start in a channel-last plane (the FMA blocks' ``xo``), made once per shape and
    kept in the workspace (which holds arrays only: the summary counts their bytes)."""
    key = f"xo_{rows}_{cols}_{row_step}_{col_step}_{channels}"
    if key not in ws:
        i, j = np.divmod(np.arange(rows * cols, dtype=np.int64), cols)
        ws[key] = (i * row_step + j * col_step) * channels
    return ws[key]


def positions_blocks(g: ConvGeometry, shape: tuple[int, ...], pool: Pair | None, direct: bool = False
                     ) -> int:
    """Blocks of whole output rows (pooled rows with a fused pool) per example in the "positions"
    forward. From the layer's and the batch's shapes only, never the thread count, so that the
    bits do not depend on it. ``direct`` (FMA blocks, no GEMM): only as many as tuning.MIN_BLOCKS asks."""
    n, _, h, w = shape
    oh, ow = g.out_hw(h, w)
    unit = pool[0] if pool else 1
    rows = oh // unit
    if rows <= 1:
        return 1
    if direct:
        return min(rows, -(-T.MIN_BLOCKS // n))
    per_row = unit * ow * g.ckk * g.out_channels
    blocks = 1
    small = small_gemm_macs()
    if rows * per_row > small >= per_row:
        blocks = -(-rows // (small // per_row))
    return min(rows, max(blocks, -(-T.MIN_BLOCKS // n)))


def wide_blocks(g: ConvGeometry, shape: tuple[int, ...]) -> int:
    """Blocks of output channels per example in the "wide" and "direct" forwards: enough for a
    batch to hold tuning.MIN_BLOCKS blocks (the batch size, never the thread count, decides)."""
    return min(g.out_channels, -(-T.MIN_BLOCKS // shape[0]))


def gemm_parts(g: ConvGeometry, shape: tuple[int, ...]) -> int:
    """Parts of the batch in the "gemm" plan, from the shapes only (never the thread count)."""
    n, _, h, w = shape
    oh, ow = g.out_hw(h, w)
    return max(1, min(_config.grad_parts(n), n * oh * ow // T.GEMM_PART_COLUMNS))


class GemmPlan(CpuConvPlan):
    """Strided convolutions with short filters: gathered im2col columns of a part of the batch side
    by side, one GEMM a part, the columns cached for the backward (which keeps the parts)."""

    name = "gemm"
    fuses_pool = False

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        ws["x"] = x
        y, _ = self.outputs(ws, x, None)
        g = self.geometry
        parts = gemm_parts(g, x.shape)
        ld = -(-x.shape[0] // parts) * y.shape[2] * y.shape[3]  # the largest part's columns
        cols = ws.buf("cols", (parts, g.ckk, ld))
        ytmp = ws.buf("ytmp", (parts, g.out_channels, ld))
        launch(K.conv2d_forward_gemm, y, cols, ytmp, x, weight, bias, *g.stride, *g.padding, relu)
        return y

    def grad_parts(self, ws: Workspace, n: int) -> int:
        return ws["cols"].shape[0]

    def _backward(self, ws, dx, dw_parts, db_parts, dy, weight, need_dx, need_dw, relu, pool) -> None:
        g = self.geometry
        chunks, ld = dw_parts.shape[0], ws["cols"].shape[2]
        g_tmp = ws.buf("g_tmp", (chunks, g.out_channels, ld))
        dcols = ws.buf("dcols", (chunks, g.ckk, ld) if need_dx else (chunks, 1, 1))
        launch(K.conv2d_backward_gemm, dx, dw_parts, db_parts, dcols, g_tmp, dy, ws["cols"], weight, ws["y"],
               *g.stride, *g.padding, need_dx, need_dw, relu)


def _winograd_tuning() -> tuple:
    """The table's entries a Winograd layer's choice reads (a change makes it choose again)."""
    return (T.WINOGRAD_MIN_AREA, T.WINOGRAD_WIDE_CHANNELS, T.WINOGRAD_INFER_MIN_TILES, T.WINOGRAD_MIN_TILES,
            T.WINOGRAD_ODD_MIN_USED, T.WINOGRAD_ODD_MIN_TILES, T.WINOGRAD4_MIN_CHANNELS, T.WINOGRAD4_MAX_WORK,
            T.WINOGRAD4_MIN_EXAMPLES, T.WINOGRAD4_MIN_TILES)


def dw_tiles(ci: int, co: int) -> int:
    """Tiles per weight-gradient GEMM (at least a block's): tuning.WINOGRAD_DW_TILES, fewer where the BLAS's
    small-matrix limit would be passed, unless the layer is as wide as tuning.WINOGRAD_DW_WIDE."""
    if ci % 16 == 0 and ci * co >= T.WINOGRAD_DW_WIDE:
        return T.WINOGRAD_DW_TILES
    return min(T.WINOGRAD_DW_TILES, small_gemm_macs() // (ci * co) or T.WINOGRAD_DW_TILES)


class WinogradPlan(CpuConvPlan):
    """3x3 filters, stride 1, padding at most 2: Winograd F(2x2, 3x3) (conv2d_winograd.py), F(4x4,
    3x3) (conv2d_winograd4.py), or the "positions" plan, chosen once per input shape (``variant``).

    With a fused pool only the outputs that the pool reads are computed (mnistcnn's 11 x 11 output
    under a 2 x 2 pool: 5 x 5 tiles). Small batches and small outputs of narrow layers run
    "positions", as do training forwards whose computed output has an odd side (half-empty last
    tiles) unless enough of their tiles' outputs are used and the batch is large; inference runs
    Winograd on odd sides too. The thresholds: numbacnn/tuning.py. The backward asks ``variant``
    for the input its forward kept, so nothing passes from the one to the other but the workspace."""

    name = "winograd"
    fuses_pool = True
    channels_last = True

    def __init__(self, geometry: ConvGeometry) -> None:
        super().__init__(geometry)
        self.fallback = PositionsPlan(geometry)
        self._variants: dict[tuple, str] = {}

    def variant(self, shape: tuple[int, ...], pool: Pair | None = None, backward: bool = True) -> str:
        """What a forward of this input shape (with this fused pool; ``backward``: a backward follows)
        runs: "winograd4", "winograd" or "positions". From the shapes only, never the thread count;
        chosen the first time a shape is seen (and again if the tuning table changed since)."""
        key = (tuple(shape), pool, backward, _winograd_tuning())
        if key not in self._variants:
            self._variants[key] = ("winograd4" if self._runs_f4(shape, pool)
                                   else "winograd" if self._runs_f2(shape, pool, backward) else "positions")
        return self._variants[key]

    def _runs_f4(self, shape: tuple[int, ...], pool: Pair | None) -> bool:
        """F(4x4, 3x3): output channels divisible by 16, WINOGRAD4_MIN_CHANNELS channels in and out,
        the 4x4 tiles' work at most WINOGRAD4_MAX_WORK of the 2x2 tiles', WINOGRAD4_MIN_EXAMPLES
        examples and WINOGRAD4_MIN_TILES tiles in the batch."""
        g = self.geometry
        if g.out_channels % 16:
            return False
        n, _, h, w = shape
        oh, ow = g.out_hw(h, w)
        th4, tw4 = tiles4(oh, ow, pool)
        th2, tw2 = self.tiles(oh, ow, pool)
        return (min(g.in_channels, g.out_channels) >= T.WINOGRAD4_MIN_CHANNELS
                and 36 * th4 * tw4 <= T.WINOGRAD4_MAX_WORK * 16 * th2 * tw2
                and n >= T.WINOGRAD4_MIN_EXAMPLES and n * th4 * tw4 >= T.WINOGRAD4_MIN_TILES)

    def _runs_f2(self, shape: tuple[int, ...], pool: Pair | None, backward: bool) -> bool:
        """F(2x2, 3x3): WINOGRAD_MIN_AREA computed outputs or WINOGRAD_WIDE_CHANNELS channels;
        WINOGRAD_INFER_MIN_TILES tiles for inference, WINOGRAD_MIN_TILES for training, and on an odd
        side WINOGRAD_ODD_MIN_USED of the tiles' outputs used and WINOGRAD_ODD_MIN_TILES tiles."""
        n, _, h, w = shape
        oh, ow = self.computed(*self.geometry.out_hw(h, w), pool)
        g = self.geometry
        if oh * ow < T.WINOGRAD_MIN_AREA and min(g.in_channels, g.out_channels) < T.WINOGRAD_WIDE_CHANNELS:
            return False
        th, tw = (oh + 1) // 2, (ow + 1) // 2
        if not backward:
            return n * th * tw >= T.WINOGRAD_INFER_MIN_TILES
        if oh % 2 == 0 and ow % 2 == 0:
            return n * th * tw >= T.WINOGRAD_MIN_TILES
        return oh * ow >= T.WINOGRAD_ODD_MIN_USED * 4 * th * tw and n * th * tw >= T.WINOGRAD_ODD_MIN_TILES

    @staticmethod
    def fits(g: ConvGeometry) -> bool:
        """Whether the plan can run the layer: 3x3 filters, stride 1, padding 0-2 on each axis."""
        return g.kernel == (3, 3) and g.stride == (1, 1) and all(0 <= p <= 2 for p in g.padding)

    @staticmethod
    def computed(h: int, w: int, pool: Pair | None) -> tuple[int, int]:
        """The part of an h x w output that is computed: all of it, or with a fused pool the rows
        and columns the pool reads."""
        return (h // pool[0] * pool[0], w // pool[1] * pool[1]) if pool else (h, w)

    @classmethod
    def tiles(cls, h: int, w: int, pool: Pair | None = None) -> tuple[int, int]:
        """Tile rows and tiles per row that cover the computed part of an h x w output (as the
        kernels' winograd_tiles)."""
        h, w = cls.computed(h, w, pool)
        return (h + 1) // 2, (w + 1) // 2

    def block_rows(self, tw: int) -> int:
        """Tile rows per block for rows of tw tiles (the shapes only, never the thread count)."""
        return max(1, T.WINOGRAD_TILES // tw)

    def forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                backward: bool = True, version: Any = None) -> Any:
        return self._forward(ws, x, weight, bias, relu, pool, backward, version, 0)

    def forward_channels_last(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool,
                              pool: Pair | None, version: Any, layout: int) -> Any:
        """Layers of an inference chain of Winograd layers (layers.fuse_chain) hand each other
        channel-last activations: the plane reads them with run copies, the epilogue writes them
        without transposes (the same bits). A call that falls back to "positions" converts on the
        way."""
        return self._forward(ws, x, weight, bias, relu, pool, False, version, layout)

    def _forward(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                 backward: bool, version: Any, layout: int) -> Any:
        shape = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if layout & 1 else x.shape
        variant = self.variant(shape, pool, backward)
        if variant == "winograd4":
            return self._forward4(ws, x, weight, bias, relu, pool, backward, version, layout, shape)
        if variant == "positions":
            if layout & 1:
                xc = ws.buf("x_nchw", shape)
                launch(K.copy_strided, xc, x.transpose(0, 3, 1, 2))
                x = xc
            y = self.fallback.forward(ws, x, weight, bias, relu, pool, backward, version)
            if layout & 2:
                yl = ws.buf("y_nhwc", (y.shape[0], y.shape[2], y.shape[3], y.shape[1]))
                launch(K.copy_strided, yl, y.transpose(0, 2, 3, 1))
                y = yl
            return y
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool, shape, layout & 2 != 0)
        g = self.geometry
        ci, co = g.in_channels, g.out_channels
        n, _, h, w = shape
        th, tw = self.tiles(*g.out_hw(h, w), pool)
        blocks = max(-(-th // self.block_rows(tw)), -(-T.MIN_BLOCKS // n))
        blocks = 1 if pool and pool[0] != 2 else min(th, blocks)
        tiles = -(-th // blocks) * tw  # the largest block's
        u = ws.buf(_packing("wino_u", version), (16, ci, co))
        launch(K.winograd_filters, u, weight, False, ws.buf("wino_work", (18 * ci * co,)),
               *packed_from(ws, "wino_u_from", weight, version))
        skew = K.conv2d_winograd.SKEW
        launch(K.conv2d_forward_winograd, y, argmax, ws.buf("wyw", (self.slots, 4 * tiles * co)),
               ws.buf("vw", (self.slots, 16 * (tiles * ci + skew))),
               ws.buf("mw", (self.slots, 16 * (tiles * co + skew))),
               ws.buf("sw", (self.slots, 8 * (tw + 1) * max(ci, co))),
               ws.buf("pw", (self.slots, (2 * tiles // tw + 2) * (2 * tw + 2) * ci)), x, u, bias,
               *g.padding, relu, *(pool or (0, 0)), blocks, backward, layout)
        return y

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        """As CpuConvPlan.backward, but the parts hold the weight gradient's transforms (Co, 16, Ci):
        they are added first and transformed once."""
        variant = self.variant(ws["x"].shape, pool, True)  # the input its forward kept
        if variant == "positions":
            return self.fallback.backward(ws, dy, weight, dweight, dbias, need_dx, need_dw, relu, pool)
        if variant == "winograd4":
            return self._backward4(ws, dy, weight, dweight, dbias, need_dx, need_dw, relu, pool)
        g = self.geometry
        ci, co = g.in_channels, g.out_channels
        x, argmax = ws["x"], ws["pool_argmax"]
        n, _, h, w = x.shape
        chunks = _config.grad_parts(n)
        dx = ws.buf("dx", x.shape) if need_dx else ws.buf("dx0", (n, 1, 1, 1))
        du_parts = ws.buf("du_parts", (chunks, co * 16 * ci))
        db_parts = ws.buf("db_parts", (chunks, co))
        oh, ow = g.out_hw(h, w)
        th, tw = self.tiles(oh, ow, pool)
        (ph, pw), ohk, owk = g.padding, min(oh, 2 * th), min(ow, 2 * tw)  # as the kernel's Hx, Wx:
        thx, twx = self.tiles(min(h, ohk + 2 - ph), min(w, owk + 2 - pw))  # the rows dx gets
        rows = self.block_rows(max(tw, twx))
        cap = max(rows * tw, dw_tiles(ci, co))
        u2 = ws.buf("wino_u2", (16, co, ci))
        launch(K.winograd_filters, u2, weight, True, ws.buf("wino_work", (18 * ci * co,)), _ALWAYS,
               _NO_VERSION)
        skew = K.conv2d_winograd.SKEW
        block = 16 * (rows * twx * max(ci, co) + skew)
        zb = ws.buf("zb", (ci,))
        zb[:] = 0  # the input gradient's "bias" in the shared epilogue
        launch(K.conv2d_backward_winograd,
               dx, du_parts, db_parts, ws.buf("wgw", (self.slots, co * oh * ow)),
               ws.buf("gpw", (self.slots, (2 * thx + 2) * (2 * twx + 2) * co)),
               ws.buf("bpw", (self.slots, (2 * th + 2) * (2 * tw + 2) * ci)),
               ws.buf("bvw", (self.slots, 16 * (cap * ci + skew))),
               ws.buf("bmw", (self.slots, 16 * (cap * co + skew))),
               ws.buf("bvx", (self.slots, block if need_dx else 1)),
               ws.buf("bmx", (self.slots, block if need_dx else 1)),
               ws.buf("byw", (self.slots, 4 * rows * twx * ci if need_dx else 1)),
               ws.buf("sw", (self.slots, 8 * (max(tw, twx) + 1) * max(ci, co))),
               zb, *self.pooled_workspaces(ws, pool),
               dy, x, u2, self.pooled_y(ws, pool), argmax, *g.padding, rows, cap, need_dx, need_dw, relu,
               *(pool or (0, 0)))
        du = ws.buf("du", (co, 16, ci))
        launch(K.sum_parts, du.reshape(-1), dbias, du_parts, db_parts, (co, 16, ci, 1), (16 * ci, ci, 1, 1))
        launch(K.winograd_filter_gradient, dweight, du)
        return dx if need_dx else None

    def _forward4(self, ws: Workspace, x: Any, weight: Any, bias: Any, relu: bool, pool: Pair | None,
                  backward: bool, version: Any, layout: int, shape: tuple[int, ...]) -> Any:
        """The forward by F(4x4, 3x3) (conv2d_winograd4.py): blocks of whole examples."""
        ws["x"] = x
        y, argmax = self.outputs(ws, x, pool, shape, layout & 2 != 0)
        g = self.geometry
        ci, co = g.in_channels, g.out_channels
        n, _, h, w = shape
        oh, ow = g.out_hw(h, w)
        th, tw = tiles4(oh, ow, pool)
        group = max(1, min(T.WINOGRAD4_TILES // (th * tw), n // T.MIN_BLOCKS))  # examples a block
        tiles = group * th * tw
        bf16 = self.bf16  # (a change of precision starts the layer's workspace afresh: records too)
        u = ws.buf(_packing("wino4_u", version), (36, ci, co))
        uh = ws.buf(_packing("wino4_uh", version), (36 * ci * co,), np.uint16) if bf16 else _NO_PAIRS
        launch(K.winograd4_filters, u, weight, False, ws.buf("wino4_work", (63 * max(ci, co),)),
               *packed_from(ws, "wino4_u_from", weight, version), uh)
        skew = K.conv2d_winograd4.SKEW
        size_v = 36 * (tiles * ci + skew)
        launch(K.conv2d_forward_winograd4, y, argmax, ws.buf("w4y", (self.slots, 16 * th * tw * co)),
               ws.buf("w4v", (self.slots, size_v)),
               ws.buf("w4m", (self.slots, 36 * (tiles * co + skew))),
               ws.buf("w4s", (self.slots, 24 * (tw + 1) * max(ci, co))),
               ws.buf("w4p", (self.slots, (4 * th + 2) * (4 * tw + 2) * ci)),
               ws.buf("w4e", (self.slots, oh * ow * co)), x, u, bias, *g.padding, relu, *(pool or (0, 0)),
               group, backward, layout, ws.buf("w4vh", (self.slots, size_v if bf16 else 1), np.uint16), uh,
               bf16)
        return y

    @property
    def bf16(self) -> bool:
        """Whether F(4x4, 3x3)'s GEMMs run in bfloat16 (kernels/cpu/bf16.py): precision "bf16" and
        both channel counts multiples of 16 (whole vectors of pairs); else float32."""
        g = self.geometry
        return g.precision == "bf16" and g.in_channels % 16 == 0 and g.out_channels % 16 == 0

    def _backward4(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                   need_dw: bool, relu: bool, pool: Pair | None) -> Any:
        """The backward of _forward4: parts of the batch hold the weight gradient's transforms
        (36, Ci, Co), added first and transformed once."""
        g = self.geometry
        ci, co = g.in_channels, g.out_channels
        (ph, pw), x, argmax = g.padding, ws["x"], ws["pool_argmax"]
        n, _, h, w = x.shape
        oh, ow = g.out_hw(h, w)
        th, tw = tiles4(oh, ow, pool)
        ohc, owc = self.computed(oh, ow, pool)
        hx, wx = min(h, ohc + 2 - ph), min(w, owc + 2 - pw)  # as the kernel's winograd4_input_rows
        thx, twx = (hx + 3) // 4, (wx + 3) // 4
        hg, wg = max(4 * thx + 2, 4 * th + 2 - ph), max(4 * twx + 2, 4 * tw + 2 - pw)
        cap = max(th * tw, T.WINOGRAD4_DW_TILES)
        parts = min(_config.grad_parts(n), max(T.WINOGRAD4_MIN_PARTS, -(-n * th * tw // cap)))
        group = max(1, min(T.WINOGRAD4_TILES // (thx * twx), -(-n // parts)))  # examples an input-grad GEMM
        dx = ws.buf("dx", x.shape) if need_dx else ws.buf("dx0", (n, 1, 1, 1))
        du_parts = ws.buf("du4_parts", (parts, 36 * ci * co))
        db_parts = ws.buf("db_parts", (parts, co))
        work = ws.buf("wino4_work", (63 * max(ci, co),))
        u2 = ws.buf("wino4_u2", (36, co, ci))
        bf16 = self.bf16
        u2h = ws.buf("wino4_u2h", (36 * co * ci,), np.uint16) if bf16 else _NO_PAIRS
        launch(K.winograd4_filters, u2, weight, True, work, _ALWAYS, _NO_VERSION, u2h)
        zb = ws.buf("zb", (ci,))
        zb[:] = 0  # the input gradient's "bias" in the shared epilogue
        skew = K.conv2d_winograd4.SKEW
        s = self.slots
        size_xv = 36 * (group * thx * twx * co + skew) if need_dx else 1
        pairs = 36 * (-(-cap // 16) * 16) if bf16 and need_dw else 0  # tiles rounded up to 16 (AMX's steps)
        launch(K.conv2d_backward_winograd4, dx, du_parts, db_parts, ws.buf("wgw", (s, co * oh * ow)),
               ws.buf("w4gp", (s, hg * wg * co)), ws.buf("w4p", (s, (4 * th + 2) * (4 * tw + 2) * ci)),
               ws.buf("w4bv", (s, 36 * (cap * ci + skew) if need_dw else 1)),
               ws.buf("w4bm", (s, 36 * (cap * co + skew) if need_dw else 1)),
               ws.buf("w4xv", (s, size_xv)),
               ws.buf("w4xm", (s, 36 * (group * thx * twx * ci + skew) if need_dx else 1)),
               ws.buf("w4xy", (s, 16 * thx * twx * ci)),
               ws.buf("w4s", (s, 24 * (max(tw, twx) + 1) * max(ci, co))),
               ws.buf("w4xe", (s, h * w * ci)), zb, *self.pooled_workspaces(ws, pool), dy, x, u2,
               self.pooled_y(ws, pool), argmax, ph, pw, group, cap, need_dx, need_dw, relu, *(pool or (0, 0)),
               ws.buf("w4xh", (s, size_xv if bf16 else 1), np.uint16),
               ws.buf("w4vp", (s, max(1, pairs * ci)), np.uint16),
               ws.buf("w4mp", (s, max(1, pairs * co)), np.uint16),
               u2h, bf16)
        du = ws.buf("du4", (36, ci, co))
        launch(K.sum_parts, du.reshape(-1), dbias, du_parts, db_parts, (36, ci, co, 1), (ci * co, co, 1, 1))
        launch(K.winograd4_filter_gradient, dweight, du, work)
        return dx if need_dx else None


def tiles4(oh: int, ow: int, pool: Pair | None = None) -> tuple[int, int]:
    """F(4x4, 3x3)'s tile rows and tiles per row over the computed part of an oh x ow output (as
    the kernels' winograd4_tiles)."""
    oh, ow = WinogradPlan.computed(oh, ow, pool)
    return (oh + 3) // 4, (ow + 3) // 4
