"""Pooling over series (N, C, L): MaxPool1D, AvgPool1D, GlobalAvgPool1D and GlobalMaxPool1D, as
torch's. They run the 2-D pooling kernels on a (N, C, 1, L) view (a window of height 1)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..backend.base import conv_out
from .base import MAX_SIZE, Builder, Layer, Shape, register
from .conv1d import series_shape


def _int(v: Any, what: str, label: str, minimum: int) -> int:
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not minimum <= v <= MAX_SIZE:
        raise ValueError(f"{label}: {what} must be an integer in [{minimum}, {MAX_SIZE}], got {v!r}")
    return int(v)


class _Pool1D(Layer):
    token_args = ("kernel_size", "stride", "padding")
    token_defaults = {"stride": None, "padding": 0}
    role = "pool"

    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0) -> None:
        super().__init__()
        label = type(self).__name__
        self.kernel = _int(kernel_size, "kernel_size", label, 1)
        self.step = self.kernel if stride is None else _int(stride, "stride", label, 1)
        self.pad = _int(padding, "padding", label, 0)
        if self.pad > self.kernel // 2:
            raise ValueError(f"{label}: padding must be at most half the kernel size, got padding="
                             f"{padding!r}, kernel_size={kernel_size!r}")

    @property
    def window(self) -> tuple[int, int, int, int, int, int]:
        """The 2-D kernels' kernel, stride and padding (height, width each) on the (N, C, 1, L) view."""
        return 1, self.kernel, 1, self.step, 0, self.pad

    def output_shape(self, in_shape: Shape) -> Shape:
        c, length = series_shape(in_shape, self._label())
        if length + 2 * self.pad < self.kernel:
            raise ValueError(f"{self._label()}: series of length {length} is shorter than the window "
                             f"{self.kernel}")
        return (c, conv_out(length, self.kernel, self.step, self.pad))

    def get_config(self) -> dict[str, Any]:
        return {"kernel_size": self.kernel, "stride": self.step, "padding": self.pad}

    def __repr__(self) -> str:
        s = f"{type(self).__name__}({self.kernel}"
        if self.step != self.kernel:
            s += f", stride={self.step}"
        return s + (f", padding={self.pad}" if self.pad else "") + ")"

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        series_shape(shape, cls.token or "")
        return [cls(args["kernel_size"], stride=args["stride"], padding=args["padding"])]

    def _views(self, x: Any) -> tuple[Any, Any, tuple[int, ...]]:
        """The input's (N, C, 1, L) view, the output buffer and its (N, C, 1, L') view's shape."""
        n, c, lo = self._check_input(x)
        x = self.backend.asarray(x)
        y = self._buf("y", (n, c, lo))
        return x.reshape(n, c, 1, x.shape[2]), y, (n, c, 1, lo)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        (n, c, length), lo = self._input(), dy.shape[2]
        dx = self._buf("dx", (n, c, length))
        self._backward(dx.reshape(n, c, 1, length), dy.reshape(n, c, 1, lo))
        return dx

    def _backward(self, dx4: Any, dy4: Any) -> None:
        """The 2-D kernel's backward on the (N, C, 1, L) views of dx and dy."""
        raise NotImplementedError

    def _onnx_pool(self, graph: Any, x: str, op: str, **extra: Any) -> str:
        return graph.node(op, [x], "pool", kernel_shape=[self.kernel], strides=[self.step],
                          pads=[self.pad, self.pad], **extra)


@register
class MaxPool1D(_Pool1D):
    """Max pooling as ``torch.nn.MaxPool1d``; each example's argmax cached for the backward."""

    token = "maxpool1d"

    def onnx(self, graph: Any, x: str) -> str:
        return self._onnx_pool(graph, x, "MaxPool")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.MaxPool1d(self.kernel, self.step, self.pad)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        x4, y, shape4 = self._views(x)
        argmax = self._buf("argmax", shape4, np.int32)
        self.backend.run("maxpool2d_forward", y.reshape(shape4), argmax, x4, *self.window)
        return y

    def _backward(self, dx4: Any, dy4: Any) -> None:
        self.backend.run("maxpool2d_backward", dx4, dy4, self._buffers["argmax"], *self.window)


@register
class AvgPool1D(_Pool1D):
    """Average pooling as ``torch.nn.AvgPool1d`` (zero padding counted in the mean)."""

    token = "avgpool1d"

    def onnx(self, graph: Any, x: str) -> str:
        return self._onnx_pool(graph, x, "AveragePool", count_include_pad=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.AvgPool1d(self.kernel, self.step, self.pad)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        x4, y, shape4 = self._views(x)
        self.backend.run("avgpool2d_forward", y.reshape(shape4), x4, *self.window)
        return y

    def _backward(self, dx4: Any, dy4: Any) -> None:
        self.backend.run("avgpool2d_backward", dx4, dy4, *self.window)


@register
class GlobalAvgPool1D(Layer):
    """(N, C, L) -> (N, C): the mean of each channel over time (``torch.nn.AdaptiveAvgPool1d(1)`` +
    flatten). The spec's ``gap`` gives it on series."""

    token = "gap1d"

    def onnx(self, graph: Any, x: str) -> str:
        pooled = graph.node("GlobalAveragePool", [x], "gap", out_suffix="_3d")
        return graph.node("Flatten", [pooled], "gap", name_suffix="_flatten", axis=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Sequential(torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten())

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return np.broadcast_to(counts.reshape(-1, 1), in_shape).copy()

    def output_shape(self, in_shape: Shape) -> Shape:
        return (series_shape(in_shape, self._label())[0],)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        self.backend.run("global_avgpool2d_forward", y, self.backend.asarray(x))
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape[:2])
        if not need_dx:
            return None
        dx = self._buf("dx", shape)
        self.backend.run("global_avgpool2d_backward", dx, dy)
        return dx


@register
class GlobalMaxPool1D(Layer):
    """(N, C, L) -> (N, C): the maximum of each channel over time (``torch.amax(x, -1)``; the
    gradient goes to the first maximum, as a max pool's)."""

    token = "gmp1d"
    token_aliases = ("gmp",)

    def onnx(self, graph: Any, x: str) -> str:
        pooled = graph.node("GlobalMaxPool", [x], "gmp", out_suffix="_3d")
        return graph.node("Flatten", [pooled], "gmp", name_suffix="_flatten", axis=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Sequential(torch.nn.AdaptiveMaxPool1d(1), torch.nn.Flatten())

    def output_shape(self, in_shape: Shape) -> Shape:
        return (series_shape(in_shape, self._label())[0],)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        n, c = self._check_input(x)
        length = x.shape[2]
        y = self._buf("y", (n, c))
        argmax = self._buf("argmax", (n, c, 1, 1), np.int32)
        x4 = self.backend.asarray(x).reshape(n, c, 1, length)
        self.backend.run("maxpool2d_forward", y.reshape(n, c, 1, 1), argmax, x4, 1, length, 1, length, 0, 0)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape[:2])
        if not need_dx:
            return None
        n, c, length = shape
        dx = self._buf("dx", shape)
        self.backend.run("maxpool2d_backward", dx.reshape(n, c, 1, length), dy.reshape(n, c, 1, 1),
                         self._buffers["argmax"], 1, length, 1, length, 0, 0)
        return dx

