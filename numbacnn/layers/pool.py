"""Pooling: MaxPool2D (with its argmax cache), AvgPool2D and GlobalAvgPool2D."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backend.base import conv_out
from .base import TOKENS, Builder, Layer, Shape, _compact, _pair, receptive, register
from .conv import _as_pair, _images_only, pads


class _Pool2D(Layer):
    token_args = ("kernel_size", "stride", "padding")
    token_defaults = {"stride": None, "padding": 0}
    role = "pool"

    def __init__(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        label = type(self).__name__
        self.kernel_size = _pair(kernel_size, "kernel_size", label, 1)
        self.stride = self.kernel_size if stride is None else _pair(stride, "stride", label, 1)
        self.padding = _pair(padding, "padding", label, 0)
        if self.padding[0] > self.kernel_size[0] // 2 or self.padding[1] > self.kernel_size[1] // 2:
            raise ValueError(f"{label}: padding must be at most half the kernel size, got "
                             f"padding={padding!r}, kernel_size={kernel_size!r}")

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3:
            raise ValueError(f"{self._label()}: expected input of shape (N, C, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        c, h, w = in_shape
        if h + 2 * ph < kh or w + 2 * pw < kw:
            raise ValueError(f"{self._label()}: input {h}x{w} is smaller than the window {kh}x{kw}")
        return (c, conv_out(h, kh, sh, ph), conv_out(w, kw, sw, pw))

    def get_config(self) -> dict[str, Any]:
        return {"kernel_size": _compact(self.kernel_size), "stride": _compact(self.stride),
                "padding": _compact(self.padding)}

    def __repr__(self) -> str:
        c = self.get_config()
        s = f"{type(self).__name__}({c['kernel_size']}"
        if self.stride != self.kernel_size:
            s += f", stride={c['stride']}"
        if self.padding != (0, 0):
            s += f", padding={c['padding']}"
        return s + ")"

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        _images_only(shape, cls.token or "")
        k = _as_pair(args["kernel_size"])
        s = k if args["stride"] is None else _as_pair(args["stride"])
        p = _as_pair(args["padding"])
        if adapt:
            k, s, p = _adapt_pool(shape, k, s, p)
            if k == (1, 1) and s == (1, 1):
                return []  # nothing to pool along either axis
        return [cls(k, stride=s, padding=p)]

    def _onnx_pool(self, graph: Any, x: str, op: str, **extra: Any) -> str:
        return graph.node(op, [x], "pool", kernel_shape=list(self.kernel_size), strides=list(self.stride),
                          pads=pads(self.padding), **extra)


@register
class MaxPool2D(_Pool2D):
    """Max pooling as ``torch.nn.MaxPool2d``; caches each example's argmax for the backward.

    In a Sequential after Conv2D and ReLU (CPU), the convolution may pool in its epilogue
    (``Fusion.pool``); this layer then passes values and gradients through (``fusion.absorbed``;
    ``fusion.infer_absorbed``: at inference, pooled by a convolution with a folded BatchNorm).
    """

    token = "maxpool"
    keeps_argmax = True

    def writes_nothing(self) -> bool:
        return self.fusion.absorbed or self.fusion.infer_absorbed

    def onnx(self, graph: Any, x: str) -> str:
        return self._onnx_pool(graph, x, "MaxPool")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.MaxPool2d(self.kernel_size, self.stride, self.padding)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        raise ValueError(f"cannot trace routing through {self!r} without its argmax "
                         f"(analysis.routing reads it)")

    @property
    def argmax(self) -> np.ndarray:
        """The last forward's argmax cache (N, C, OH, OW) int64, on the host: each window's winner
        as a flat index iy * W + ix into its example's input plane (ties to the first). Not kept
        while the pool is fused into its convolution (read it under ``Sequential.unfused()``)."""
        if self.fusion.absorbed or "argmax" not in self._buffers:
            raise RuntimeError(f"{self._label()}: no argmax cache (no unfused forward yet)")
        return np.array(self.backend.to_host(self._buffers["argmax"]), np.int64)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return x if self.fusion.infer_absorbed else self.forward(x, training=False)  # pooled by the conv

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.fusion.absorbed:
            self._in_shape = tuple(x.shape)
            return x
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        argmax = self._buf("argmax", out_shape, np.int32)
        self.backend.run("maxpool2d_forward", y, argmax, self.backend.asarray(x), *self.kernel_size,
                         *self.stride, *self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        if self.fusion.absorbed:
            dy = self._check_grad(dy, self._in_shape or ())
            return dy if need_dx else None
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self.backend.run("maxpool2d_backward", dx, dy, self._buffers["argmax"], *self.kernel_size,
                         *self.stride, *self.padding)
        return dx


@register
class AvgPool2D(_Pool2D):
    """Average pooling as ``torch.nn.AvgPool2d`` (zero padding counted in the mean)."""

    token = "avgpool"

    def onnx(self, graph: Any, x: str) -> str:
        return self._onnx_pool(graph, x, "AveragePool", count_include_pad=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.AvgPool2d(self.kernel_size, self.stride, self.padding)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return receptive(counts, in_shape, self.kernel_size, self.stride, self.padding, all_channels=False)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        self.backend.run("avgpool2d_forward", y, self.backend.asarray(x), *self.kernel_size, *self.stride,
                         *self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self.backend.run("avgpool2d_backward", dx, dy, *self.kernel_size, *self.stride, *self.padding)
        return dx


@register
class GlobalAvgPool2D(Layer):
    """(N, C, H, W) -> (N, C): the mean of each plane (``torch.nn.AdaptiveAvgPool2d(1)`` + flatten)."""

    token = "gap"
    token_aliases = ("globalavgpool",)

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        if len(shape) == 2:  # series (C, L): the 1-D layer (layers/pool1d.py)
            return TOKENS["gap1d"].from_spec(args, shape, adapt, build)
        if len(shape) != 3:
            raise ValueError("gap after flatten/dense")
        return [cls()]

    def onnx(self, graph: Any, x: str) -> str:
        planes = graph.node("GlobalAveragePool", [x], "gap", out_suffix="_4d")
        return graph.node("Flatten", [planes], "gap", name_suffix="_flatten", axis=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return np.broadcast_to(counts.reshape(-1, 1, 1), in_shape).copy()

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3:
            raise ValueError(f"{self._label()}: expected input of shape (N, C, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        return (in_shape[0],)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c, h, w = self._in_shape  # type: ignore[misc]
        y = self._buf("y", out_shape)
        self.backend.run("global_avgpool2d_forward", y, self.backend.asarray(x).reshape(n, c, h * w))
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape[:2])
        if not need_dx:
            return None
        dx = self._buf("dx", shape)
        self.backend.run("global_avgpool2d_backward", dx.reshape(shape[0], shape[1], -1), dy)
        return dx


def _adapt_pool(shape: Shape, k: Any, s: Any, p: Any) -> tuple[Any, Any, Any]:
    """A pool's window shrunk to 1 along an axis too short for it."""
    k, s, p = list(k), list(s), list(p)
    for ax in range(2):
        if shape[1 + ax] < k[ax]:
            k[ax], s[ax], p[ax] = 1, 1, 0
    return tuple(k), tuple(s), tuple(p)
