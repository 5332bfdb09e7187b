"""Conv1D: 1-D convolution over series (N, C, L), as ``torch.nn.Conv1d``. It runs through the 2-D
convolution plans on a (N, C, 1, L) view of its input (a kernel of height 1), so every plan, the
fused ReLU and the thread-count guarantees of Conv2D hold for it unchanged."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .base import MAX_SIZE, Builder, Layer, Shape, _positive_int, receptive, register
from .conv import Conv2D, Depthwise


def series_shape(in_shape: Shape, layer: str) -> tuple[int, int]:
    """(C, L) of a per-example series shape, or the one-line error for anything else."""
    if len(in_shape) != 2:
        got = "images" if len(in_shape) == 3 else "features"
        raise ValueError(f"{layer}: expected series of shape (N, C, L), got {got} "
                         f"(N, {', '.join(map(str, in_shape))}) (a 1-D layer needs series; use the 2-D "
                         f"layers for images)")
    return int(in_shape[0]), int(in_shape[1])


def _series_padding(padding: Any, k: int, s: int, d: int, label: str) -> tuple[int, int]:
    """(left, right) zero padding from an int, a (left, right) pair, "valid", "same" (stride 1:
    output as long as the input, the extra value on the right for even windows, as torch's) or
    "causal" (all (K - 1) * dilation on the left: output t sees inputs up to t only)."""
    span = (k - 1) * d
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0
        if padding == "causal":
            return span, 0
        if padding == "same":
            if s != 1:
                raise ValueError(f"{label}: padding='same' needs stride 1, got stride={s} (give the "
                                 f"padding as numbers, e.g. (left, right), or use 'causal')")
            return span // 2, span - span // 2
        raise ValueError(f"{label}: padding must be an int, (left, right), 'valid', 'same' or 'causal', "
                         f"got {padding!r}")
    if isinstance(padding, (tuple, list)) and len(padding) == 2:
        left, right = padding
    else:
        left = right = padding
    for v in (left, right):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= MAX_SIZE:
            raise ValueError(f"{label}: padding must be an integer >= 0, (left, right), 'valid', 'same' "
                             f"or 'causal', got {padding!r}")
    return int(left), int(right)


def _length(v: Any, what: str, label: str) -> int:
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    return _positive_int(v, what, label)


@register
class Conv1D(Conv2D):
    """1-D convolution, weight (C_out, C_in / groups, K) and bias (C_out,), as ``torch.nn.Conv1d``.

    padding: an int, (left, right), "valid", "same" (stride 1) or "causal" (left only).
    groups: as torch's (``groups=in_channels``: depthwise). bias=False: no bias parameter.
    """

    token = "conv1d"
    token_args: ClassVar[tuple[str, ...]] = ("filters", "kernel_size", "stride", "padding", "bias",
                                             "groups", "dilation")
    token_defaults = {"stride": 1, "padding": 0, "bias": True, "groups": 1, "dilation": 1}

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int | str | tuple[int, int] = 0, bias: bool = True, groups: int = 1,
                 dilation: int = 1) -> None:
        label = "Conv1D"
        k, s, d = (_length(v, what, label) for v, what in ((kernel_size, "kernel_size"), (stride, "stride"),
                                                           (dilation, "dilation")))
        left, right = _series_padding(padding, k, s, d, label)
        super().__init__(in_channels, out_channels, (1, k), (1, s), ((0, 0), (left, right)), bias, groups,
                         (1, d))
        self._series_padding_arg = padding

    @property
    def kernel(self) -> int:
        return self.kernel_size[1]

    def param_shapes(self) -> dict[str, Shape]:
        shapes = super().param_shapes()
        shapes["weight"] = (self.out_channels, self.in_channels // self.groups, self.kernel)
        return shapes

    def output_shape(self, in_shape: Shape) -> Shape:
        c, length = series_shape(in_shape, self._label())
        if c != self.in_channels:
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.in_channels}, L), "
                             f"got (N, {c}, {length})")
        span = self.effective_kernel[1]
        left, right = self.padding[1], self.padding_end[1]
        if length + left + right < span:
            raise ValueError(f"{self._label()}: series of length {length} with padding {(left, right)} is "
                             f"shorter than the kernel's window {span}")
        return (self.out_channels, (length + left + right - span) // self.stride[1] + 1)

    def macs(self, in_shape: Shape) -> int:
        _, out = self.output_shape(in_shape)
        return self.out_channels * self.in_channels // self.groups * self.kernel * out

    def _w4(self, w: Any) -> Any:
        return w.reshape(self.out_channels, self.in_channels // self.groups, 1, self.kernel)

    def forward(self, x: np.ndarray, training: bool = False, backward: bool = True) -> np.ndarray:
        n, co, lo = self._check_input(x)
        x = self.backend.asarray(x)
        x4 = x.reshape(n, self.in_channels, 1, x.shape[2])
        y = self.plan.forward(self._buffers, x4, self._w4(self.weight), self.bias, self.fusion.relu, None,
                              backward)
        return y.reshape(n, co, lo)

    def infer(self, x: np.ndarray) -> np.ndarray:
        """With a following BatchNorm1D folded in (``fusion.infer_bn``, as Conv2D's: its running
        statistics and affine map in a copy of the weights, its ReLU in the epilogue)."""
        bn = self.fusion.infer_bn
        if bn is None:
            return self.forward(x, training=False, backward=False)
        n, co, lo = self._check_input(x)
        x = self.backend.asarray(x)
        wf, bf = self._buf("w_folded", self.weight.shape), self._buf("b_folded", (co,))
        version = self.backend.batchnorm_fold(self._buffers, wf.reshape(co, -1), bf,
                                              self.weight.reshape(co, -1), self.bias, bn.weight, bn.bias,
                                              bn.running_mean, bn.running_var, bn.eps)
        x4 = x.reshape(n, self.in_channels, 1, x.shape[2])
        y = self.plan.forward(self._buffers, x4, self._w4(wf), bf, bn.fusion.relu, None, backward=False,
                              version=version)
        return y.reshape(n, co, lo)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape4 = self._buffers["y"].shape if "y" in self._buffers else (0, 0, 0, 0)
        dy = self._check_grad(dy, (shape4[0], shape4[1], shape4[3]))
        dx = self.plan.backward(self._buffers, dy.reshape(shape4), self._w4(self.weight),
                                self._w4(self.dweight), self.dbias, need_dx, not self.is_frozen("weight"),
                                self.fusion.relu, None)
        return None if dx is None else dx.reshape(self._input())

    def init_whitening(self, x: np.ndarray, eps: float = 5e-4) -> Conv2D:
        raise ValueError(f"{self._label()}: whitening is for 2-D convolutions")

    def init_dirac(self) -> Conv2D:
        raise ValueError(f"{self._label()}: init_dirac is for 2-D convolutions")

    def get_config(self) -> dict[str, Any]:
        p = self._series_padding_arg
        if not isinstance(p, str):
            left, right = self.padding[1], self.padding_end[1]
            p = left if left == right else (left, right)
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": self.kernel, "stride": self.stride[1], "padding": p,
                **({} if self.use_bias else {"bias": False}),
                **({} if self.groups == 1 else {"groups": self.groups}),
                **({} if self.dilation[1] == 1 else {"dilation": self.dilation[1]})}

    def __repr__(self) -> str:
        c = self.get_config()
        s = f"Conv1D({self.in_channels}, {self.out_channels}, {self.kernel}"
        for key, default in (("stride", 1), ("padding", 0)):
            if c[key] != default:
                s += f", {key}={c[key]!r}"
        for key in ("groups", "dilation"):
            if key in c:
                s += f", {key}={c[key]}"
        return s + ("" if self.use_bias else ", bias=False") + ")"

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        c, _ = series_shape(shape, "conv1d")
        return [cls(c, args["filters"], args["kernel_size"], stride=args["stride"], padding=args["padding"],
                    bias=args["bias"], groups=args["groups"], dilation=args["dilation"])]

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Conv", [x, *graph.param(*self.param_names)], "conv",
                          kernel_shape=[self.kernel], strides=[self.stride[1]],
                          pads=[self.padding[1], self.padding_end[1]], dilations=[self.dilation[1]],
                          group=self.groups)

    def torch_twin(self, torch: Any) -> Any:
        left, right = self.padding[1], self.padding_end[1]
        args = (self.in_channels, self.out_channels, self.kernel, self.stride[1])
        kw = {"dilation": self.dilation[1], "groups": self.groups, "bias": self.use_bias}
        if left == right:
            return torch.nn.Conv1d(*args, left, **kw)

        class PaddedConv1d(torch.nn.Conv1d):  # per-side zero padding, then the convolution
            def forward(self, x):
                return super().forward(torch.nn.functional.pad(x, (left, right)))

        return PaddedConv1d(*args, 0, **kw)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        c, length = in_shape
        out = receptive(counts[:, None, :], (c, 1, length), self.kernel_size, self.stride, self.padding,
                        all_channels=True, d=self.dilation, p_end=self.padding_end)
        return out[:, 0, :]


@register
class DepthwiseConv1D(Depthwise, Conv1D):
    """A depthwise 1-D convolution: ``multiplier`` filters on each of the ``channels`` input
    channels (a Conv1D with ``groups=channels``). Spec: ``dwconv1d(9, padding=same)``."""

    token = "dwconv1d"
    token_args = ("kernel_size", "multiplier", "stride", "padding", "bias", "dilation")
    token_defaults = {"multiplier": 1, "stride": 1, "padding": 0, "bias": True, "dilation": 1}

    def __init__(self, channels: int, kernel_size: int, multiplier: int = 1, stride: int = 1,
                 padding: int | str | tuple[int, int] = 0, bias: bool = True, dilation: int = 1) -> None:
        channels = _positive_int(channels, "channels", "DepthwiseConv1D")
        self.multiplier = _positive_int(multiplier, "multiplier", "DepthwiseConv1D")
        super().__init__(channels, channels * self.multiplier, kernel_size, stride, padding, bias,
                         groups=channels, dilation=dilation)

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        c, _ = series_shape(shape, "dwconv1d")
        return [cls(c, args["kernel_size"], args["multiplier"], stride=args["stride"],
                    padding=args["padding"], bias=args["bias"], dilation=args["dilation"])]
