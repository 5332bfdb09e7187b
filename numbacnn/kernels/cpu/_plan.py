"""What the CPU convolution plans share: per-thread workspace rows, gradient parts per chunk of
examples reduced in a fixed order (bitwise the same for any thread count), and the fused pool's
output buffers."""
from __future__ import annotations

from typing import Any

import numpy as np

from ... import _config
from ...backend.base import ConvGeometry, ConvPlan, Pair, Workspace
from ._util import sum_parts


class CpuConvPlan(ConvPlan):
    """Base of the CPU plans: ``forward`` stores x; ``backward`` makes the gradient parts and
    reduces them after ``_backward``. ``forward_kernel`` and ``backward_kernel``: the plan's two
    parallel kernels (for the warm-up's cold-cache check)."""

    forward_kernel: Any = None
    backward_kernel: Any = None
    parts_axes = (0, 1, 2, 3)  # the weight gradient parts' axes, as axes of (Co, Ci, KH, KW)
    max_fused_window = 128  # the fused pool's argmax is an int8 offset inside the window

    def __init__(self, geometry: ConvGeometry) -> None:
        super().__init__(geometry)
        self.slots = _config.max_threads()  # rows of the per-thread workspaces (fixed per process)

    def outputs(self, ws: Workspace, x: np.ndarray, pool: Pair | None) -> tuple[np.ndarray, np.ndarray]:
        """y and the pool argmax: pooled shapes with a fused pool, else the conv output and an unused
        (N, 1, 1, 1) placeholder (one entry per example keeps the kernels' argmax[n] in bounds)."""
        n, _, h, w = x.shape
        oh, ow = self.geometry.out_hw(h, w)
        co = self.geometry.out_channels
        if pool:
            y = ws.buf("y", (n, co, oh // pool[0], ow // pool[1]))
            return y, ws.buf("pool_argmax", y.shape, np.int8)
        return ws.buf("y", (n, co, oh, ow)), ws.buf("pool_argmax", (n, 1, 1, 1), np.int8)

    def backward(self, ws: Workspace, dy: Any, weight: Any, dweight: Any, dbias: Any, need_dx: bool,
                 relu: bool, pool: Pair | None) -> Any:
        x = ws["x"]
        n = x.shape[0]
        chunks = _config.grad_parts(n)
        g = self.geometry
        dx = ws.buf("dx", x.shape) if need_dx else ws.buf("dx0", (n, 1, 1, 1))
        dw_parts = ws.buf("dw_parts", (chunks, g.out_channels, g.ckk))
        db_parts = ws.buf("db_parts", (chunks, g.out_channels))
        self._backward(ws, dx, dw_parts, db_parts, dy, weight, need_dx, relu, pool)
        dwp = dweight.transpose(self.parts_axes)  # dweight in the parts' axis order
        sum_parts(dweight.reshape(-1), dbias, dw_parts.reshape(chunks, -1), db_parts, dwp.shape,
                  tuple(s // dwp.itemsize for s in dwp.strides))
        return dx if need_dx else None

    def _backward(self, ws: Workspace, dx, dw_parts, db_parts, dy, weight, need_dx: bool, relu: bool,
                  pool: Pair | None) -> None:
        raise NotImplementedError

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

    def plane_argmax(self, ws: Workspace, pool: Pair) -> np.ndarray:
        """The fused (PKH, PKW) pool's argmax (N, Co, PH, PW) as flat indices oy * OW + ox into the
        conv's output plane (the kernels store offsets inside the window, _conv_epilogue.marked)."""
        a = ws["pool_argmax"].astype(np.int64)
        ky, kx = np.divmod(np.where(a >= 0, a, -1 - a), pool[1])
        ph, pw = a.shape[2:]
        ow = self.geometry.out_hw(*ws["x"].shape[2:])[1]
        oy = np.arange(ph)[:, None] * pool[0] + ky
        return oy * ow + np.arange(pw)[None, :] * pool[1] + kx


def group_size(g: ConvGeometry, rows: int, n: int) -> int:
    """Examples per GEMM in the backward of the "wide" and "positions" plans, for ``rows`` GEMM
    rows per example and a batch of n: about 1,200 rows at most, 1 for narrow layers
    (docs/performance.md), and never more than a gradient part holds."""
    if g.out_channels < 32 or g.ckk < 64:
        return 1
    return max(1, min(8, 1200 // max(rows, 1), -(-n // _config.grad_parts(n))))
