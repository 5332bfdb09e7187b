"""Conv2D: 2-D convolution through the backend's convolution plans, with the fusions a chain gives
it (a following ReLU and max pool; at inference a folded BatchNorm2D)."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..backend import ConvGeometry, ConvPlan
from .base import (
    Builder,
    Layer,
    Shape,
    _bias_flag,
    _compact,
    _kaiming_uniform,
    _pair,
    _positive_int,
    receptive,
    register,
)


@register
class Conv2D(Layer):
    """2-D convolution, weight (C_out, C_in, KH, KW) and bias (C_out,), as ``torch.nn.Conv2d``.

    padding: an int, a pair, "valid" (0) or "same" (stride 1 and odd kernels only).
    bias: False for none (a convolution followed by BatchNorm, whose shift makes it redundant):
    no "bias" parameter, nothing in ``state_dict`` or the optimizer for it.
    """

    param_names: tuple[str, ...] = ("weight", "bias")
    use_bias = True
    weight: Any  # (C_out, C_in, KH, KW); numpy or device views bound by Sequential / initialize
    bias: Any
    dweight: Any
    dbias: Any

    token = "conv"
    token_args: ClassVar[tuple[str, ...]] = ("filters", "kernel_size", "stride", "padding", "bias",
                                             "groups", "dilation")
    token_defaults = {"stride": 1, "padding": 0, "bias": True, "groups": 1, "dilation": 1}
    role = "conv"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | str | tuple[Any, Any] = 0,
                 bias: bool = True, groups: int = 1, dilation: int | tuple[int, int] = 1) -> None:
        super().__init__()
        label = "Conv2D"
        self.use_bias = _bias_flag(bias, label)
        if not self.use_bias:
            self.param_names = ("weight",)
        self.in_channels = _positive_int(in_channels, "in_channels", label)
        self.out_channels = _positive_int(out_channels, "out_channels", label)
        self.groups = _positive_int(groups, "groups", label)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{label}: groups={self.groups} must divide in_channels={self.in_channels} "
                             f"and out_channels={self.out_channels}")
        self.kernel_size = _pair(kernel_size, "kernel_size", label, 1)
        self.stride = _pair(stride, "stride", label, 1)
        self.dilation = _pair(dilation, "dilation", label, 1)
        self.padding, self.padding_end = _padding(padding, self.kernel_size, self.stride, self.dilation,
                                                  label)
        self._padding_arg = padding

    @property
    def effective_kernel(self) -> tuple[int, int]:
        """The window a filter spans: (K - 1) * dilation + 1 on each axis."""
        return ((self.kernel_size[0] - 1) * self.dilation[0] + 1,
                (self.kernel_size[1] - 1) * self.dilation[1] + 1)

    def param_shapes(self) -> dict[str, Shape]:
        kh, kw = self.kernel_size
        shapes: dict[str, Shape] = {"weight": (self.out_channels, self.in_channels // self.groups, kh, kw)}
        if self.use_bias:
            shapes["bias"] = (self.out_channels,)
        return shapes

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             net_views: bool = False) -> None:
        super().bind(params, grads, net_views)
        if not self.use_bias:
            self._zero_bias(self.out_channels)

    def reset_parameters(self, rng: np.random.Generator) -> None:
        fan_in = self.in_channels // self.groups * self.kernel_size[0] * self.kernel_size[1]
        _kaiming_uniform(rng, self.weight, fan_in)
        if self.use_bias:
            _kaiming_uniform(rng, self.bias, fan_in)

    # --- data-dependent and structured initialisations -------------------------------------------
    def init_whitening(self, x: np.ndarray, eps: float = 5e-4) -> Conv2D:
        """Set the weights to whiten the input's patches (airbench's first layer): with ``d`` =
        C_in * KH * KW values per patch and their (uncentred) covariance ``S = E[p p^T]`` over every
        patch of the images ``x`` (N, C_in, H, W) in float64, the filters are S's eigenvectors
        scaled by 1 / sqrt(eigenvalue + eps), largest eigenvalue first, and then the same negated:
        C_out must be 2 * d. The bias is left as it is. Returns the layer."""
        kh, kw = self.kernel_size
        d = self.in_channels * kh * kw
        if self.groups != 1 or self.dilation != (1, 1):
            raise ValueError(f"{self._label()}: whitening needs an ungrouped, undilated convolution")
        if self.out_channels != 2 * d:
            raise ValueError(f"{self._label()}: whitening needs 2 * C_in * KH * KW = {2 * d} output "
                             f"channels, the layer has {self.out_channels}")
        x = np.asarray(x)
        if x.ndim != 4 or x.shape[1] != self.in_channels or x.shape[2] < kh or x.shape[3] < kw or not len(x):
            raise ValueError(f"{self._label()}: whitening needs images (N, {self.in_channels}, H, W) of at "
                             f"least {kh}x{kw}, got shape {x.shape}")
        if not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError(f"{self._label()}: eps must be a positive number, got {eps!r}")
        patches = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (kh, kw), axis=(2, 3))
        flat = patches.transpose(0, 2, 3, 1, 4, 5).reshape(-1, d)  # (patches, C_in * KH * KW)
        cov = flat.T @ flat / len(flat)
        values, vectors = np.linalg.eigh(cov)  # ascending
        values, vectors = values[::-1], vectors[:, ::-1]
        filters = (vectors / np.sqrt(np.maximum(values, 0.0) + eps)).T.reshape(d, self.in_channels, kh, kw)
        self._set_weight(np.concatenate([filters, -filters]))
        return self

    def init_dirac(self) -> Conv2D:
        """The first min(C_out, C_in) filters pass their input channel through unchanged (1 at the
        kernel's centre, 0 elsewhere; ``torch.nn.init.dirac_`` on those filters), the rest as they
        are: a block that starts close to the identity. Returns the layer."""
        self._set_weight(None)  # bound, or a clear error
        if self.groups != 1:
            raise ValueError(f"{self._label()}: init_dirac needs an ungrouped convolution")
        w = np.array(self.backend.to_host(self.weight))
        k = min(self.out_channels, self.in_channels)
        w[:k] = 0.0
        w[np.arange(k), np.arange(k), self.kernel_size[0] // 2, self.kernel_size[1] // 2] = 1.0
        self._set_weight(w)
        return self

    def _set_weight(self, w: np.ndarray | None) -> None:
        """Write ``w`` into the bound weights (None: only check that they are bound)."""
        if getattr(self, "weight", None) is None:
            raise RuntimeError(f"{self._label()}: no weights yet (put the layer in a Sequential, or "
                               f"call initialize())")
        if w is not None:
            self.backend.write(self.weight, np.ascontiguousarray(w, np.float32))

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3 or in_shape[0] != self.in_channels:
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.in_channels}, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        (kh, kw), (sh, sw) = self.effective_kernel, self.stride
        (pt, pl), (pb, pr) = self.padding, self.padding_end
        h, w = in_shape[1], in_shape[2]
        if h + pt + pb < kh or w + pl + pr < kw:
            raise ValueError(f"{self._label()}: input {h}x{w} with padding {self._pads_text()} is smaller "
                             f"than the kernel's window {kh}x{kw}")
        return (self.out_channels, (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1)

    def _pads_text(self) -> str:
        return str(self.padding) if self.padding == self.padding_end else str(self.pads)

    @property
    def pads(self) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) zero padding."""
        return self.padding[0], self.padding_end[0], self.padding[1], self.padding_end[1]

    @property
    def geometry(self) -> ConvGeometry:
        return ConvGeometry(self.in_channels, self.out_channels, self.kernel_size, self.stride,
                            self.padding, self.groups, self.dilation, self.padding_end, self.precision)

    @property
    def runs_bf16(self) -> bool:
        return bool(getattr(self.plan, "bf16", False))

    @property
    def plan(self) -> ConvPlan:
        """How this convolution runs on its backend, chosen by ``backend.conv_plan``: on the CPU
        "direct", "wide", "positions" or "gemm" (backend/cpu_conv.py), on CUDA "gather"."""
        if "_plan" not in self.__dict__:
            self._plan = self.backend.conv_plan(self.geometry)
        return self._plan

    @property
    def strategy(self) -> str:
        return self.plan.name

    def macs(self, in_shape: Shape) -> int:
        _, oh, ow = self.output_shape(in_shape)
        return (self.out_channels * self.in_channels // self.groups * self.kernel_size[0]
                * self.kernel_size[1] * oh * ow)

    def forward(self, x: np.ndarray, training: bool = False, backward: bool = True) -> np.ndarray:
        """``backward=False`` (``infer``): no backward follows (the fused pool's argmax may be left
        unwritten)."""
        f = self.fusion
        self._check_pooled(self._check_input(x), f.pool)
        return self.plan.forward(self._buffers, self.backend.asarray(x), self.weight, self.bias,
                                 f.relu, f.pool, backward)

    def _check_pooled(self, out_shape: Shape, pool: tuple[int, int] | None) -> None:
        if pool and (out_shape[2] < pool[0] or out_shape[3] < pool[1]):
            raise ValueError(f"{self._label()}: output {out_shape[2]}x{out_shape[3]} is smaller than "
                             f"the following max pool's window {pool[0]}x{pool[1]}")

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        return self.plan.backward(self._buffers, dy, self.weight, self.dweight, self.dbias, need_dx,
                                  not self.is_frozen("weight"), self.fusion.relu, self.fusion.pool)

    def infer(self, x: np.ndarray) -> np.ndarray:
        """With a following BatchNorm2D folded in (``fusion.infer_bn``): its running statistics and affine
        map folded into a copy of the weights, and its ReLU and a following max pool applied in this
        convolution's epilogue. The fold runs on every call but returns at once while its inputs
        keep their bits (so always current), and counts its writes for the plan's packings."""
        f = self.fusion
        bn, layout = f.infer_bn, f.infer_layout
        if bn is None and not layout:
            return self.forward(x, training=False, backward=False)
        out_shape = self._check_input(x.transpose(0, 3, 1, 2) if layout & 1 else x)
        x = self.backend.asarray(x)
        if bn is None:
            self._check_pooled(out_shape, f.pool)
            return self.plan.forward_channels_last(self._buffers, x, self.weight, self.bias, f.relu, f.pool,
                                                   None, layout)
        self._check_pooled(out_shape, f.infer_pool)
        co = self.out_channels
        wf, bf = self._buf("w_folded", self.weight.shape), self._buf("b_folded", (co,))
        version = self.backend.batchnorm_fold(self._buffers, wf.reshape(co, -1), bf,
                                              self.weight.reshape(co, -1), self.bias, bn.weight, bn.bias,
                                              bn.running_mean, bn.running_var, bn.eps)
        if layout:
            return self.plan.forward_channels_last(self._buffers, x, wf, bf, bn.fusion.relu, f.infer_pool,
                                                   version, layout)
        return self.plan.forward(self._buffers, self.backend.asarray(x), wf, bf, bn.fusion.relu,
                                 f.infer_pool, backward=False, version=version)

    def get_config(self) -> dict[str, Any]:
        if isinstance(self._padding_arg, str):
            padding: Any = self._padding_arg
        elif self.padding == self.padding_end:
            padding = _compact(self.padding)
        else:
            padding = ((self.padding[0], self.padding_end[0]), (self.padding[1], self.padding_end[1]))
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": _compact(self.kernel_size), "stride": _compact(self.stride),
                "padding": padding, **({} if self.use_bias else {"bias": False}),
                **({} if self.groups == 1 else {"groups": self.groups}),
                **({} if self.dilation == (1, 1) else {"dilation": _compact(self.dilation)})}

    def __repr__(self) -> str:
        c = self.get_config()
        s = f"Conv2D({self.in_channels}, {self.out_channels}, {c['kernel_size']}"
        if self.stride != (1, 1):
            s += f", stride={c['stride']}"
        if self.padding != (0, 0) or self.padding_end != (0, 0):
            s += f", padding={c['padding']!r}"
        for key in ("groups", "dilation"):
            if key in c:
                s += f", {key}={c[key]}"
        return s + ("" if self.use_bias else ", bias=False") + ")"

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        k, s, p = _window(args, shape, adapt, "conv")
        return [cls(shape[0], args["filters"], k, stride=s, padding=p, bias=args["bias"],
                    groups=args["groups"], dilation=args["dilation"])]

    def onnx(self, graph: Any, x: str) -> str:
        t, b, left, r = self.pads
        return graph.node("Conv", [x, *graph.param(*self.param_names)], "conv",
                          kernel_shape=list(self.kernel_size), strides=list(self.stride),
                          pads=[t, left, b, r], dilations=list(self.dilation), group=self.groups)

    def torch_twin(self, torch: Any) -> Any:
        if self.padding == self.padding_end:
            return torch.nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size, self.stride,
                                   self.padding, dilation=self.dilation, groups=self.groups,
                                   bias=self.use_bias)
        t, b, left, r = self.pads

        class PaddedConv2d(torch.nn.Conv2d):  # per-side zero padding, then the convolution
            def forward(self, x):
                return super().forward(torch.nn.functional.pad(x, (left, r, t, b)))

        return PaddedConv2d(self.in_channels, self.out_channels, self.kernel_size, self.stride, 0,
                            dilation=self.dilation, groups=self.groups, bias=self.use_bias)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return receptive(counts, in_shape, self.kernel_size, self.stride, self.padding, all_channels=True,
                         d=self.dilation, p_end=self.padding_end)


class Depthwise:
    """What the depthwise layers (DepthwiseConv2D, DepthwiseConv1D) share: their config names the
    channels and the multiplier instead of Conv2D's channel counts and groups."""

    in_channels: int
    multiplier: int

    def get_config(self) -> dict[str, Any]:
        c = super().get_config()  # type: ignore[misc]
        for key in ("in_channels", "out_channels", "groups"):
            c.pop(key, None)
        return {"channels": self.in_channels, **({} if self.multiplier == 1 else
                                                 {"multiplier": self.multiplier}), **c}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()) + ")"


@register
class DepthwiseConv2D(Depthwise, Conv2D):
    """A depthwise convolution, as Keras's: ``multiplier`` filters on each of the ``channels``
    input channels, ``channels * multiplier`` outputs (a Conv2D with ``groups=channels``; weight
    (channels * multiplier, 1, KH, KW), torch's layout). Spec: ``dwconv(3, stride=2, padding=1)``."""

    token = "dwconv"
    token_args = ("kernel_size", "multiplier", "stride", "padding", "bias", "dilation")
    token_defaults = {"multiplier": 1, "stride": 1, "padding": 0, "bias": True, "dilation": 1}

    def __init__(self, channels: int, kernel_size: int | tuple[int, int], multiplier: int = 1,
                 stride: int | tuple[int, int] = 1, padding: int | str | tuple[Any, Any] = 0,
                 bias: bool = True, dilation: int | tuple[int, int] = 1) -> None:
        channels = _positive_int(channels, "channels", "DepthwiseConv2D")
        self.multiplier = _positive_int(multiplier, "multiplier", "DepthwiseConv2D")
        super().__init__(channels, channels * self.multiplier, kernel_size, stride, padding, bias,
                         groups=channels, dilation=dilation)


    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        k, s, p = _window(args, shape, adapt, "dwconv")
        return [cls(shape[0], k, args["multiplier"], stride=s, padding=p, bias=args["bias"],
                    dilation=args["dilation"])]


def _padding(padding: Any, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int], label: str
             ) -> tuple[tuple[int, int], tuple[int, int]]:
    """(top, left) and (bottom, right) zero padding from an int, a pair, per-side pairs
    ((top, bottom), (left, right)), "valid", or "same" (stride 1: the output as large as the input;
    where the window (K - 1) * dilation + 1 is even the extra row or column goes below or to the
    right, as torch's)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding == "same":
            if s != (1, 1):
                raise ValueError(f"{label}: padding='same' needs stride 1, got stride={_compact(s)!r} "
                                 f"(give the padding as numbers, e.g. ((top, bottom), (left, right)))")
            total = ((k[0] - 1) * d[0], (k[1] - 1) * d[1])
            begin = (total[0] // 2, total[1] // 2)
            return begin, (total[0] - begin[0], total[1] - begin[1])
        raise ValueError(f"{label}: padding must be an int, a pair, ((top, bottom), (left, right)), "
                         f"'valid' or 'same', got {padding!r}")
    if (isinstance(padding, (tuple, list)) and len(padding) == 2
            and all(isinstance(v, (tuple, list)) for v in padding)):
        (t, b), (left, r) = (_pair(v, "padding", label, 0) for v in padding)
        return (t, left), (b, r)
    pad = _pair(padding, "padding", label, 0)
    return pad, pad


def _window(args: dict[str, Any], shape: Shape, adapt: bool, token: str) -> tuple[Any, Any, Any]:
    """A spec's (kernel, stride, padding) for a convolution on per-example ``shape``, fitted to it
    when ``adapt`` (_adapt_window)."""
    _images_only(shape, token)
    k, s, p = _as_pair(args["kernel_size"]), _as_pair(args["stride"]), args["padding"]
    return _adapt_window(shape, k, s, p) if adapt else (k, s, p)


def _images_only(shape: Shape, token: str) -> None:
    """The one-line error for a 2-D window layer's token on series or features."""
    if len(shape) == 2:
        raise ValueError(f"{token} is a 2-D layer and the input is series (C, L) = {shape}; use "
                         f"{token}1d")
    if len(shape) != 3:
        raise ValueError(f"{token} after flatten/dense")


def _as_pair(v: Any) -> tuple[int, int]:
    return (v[0], v[1]) if isinstance(v, (tuple, list)) and len(v) == 2 else (v, v)


def _adapt_window(shape: Shape, k: Any, s: Any, p: Any) -> tuple[Any, Any, Any]:
    """A convolution's (kernel, stride, padding) fitted to an input too small for it: along an axis
    of length 1 the window shrinks to 1; where the kernel is longer than the axis, "same"-style
    padding, or a kernel as long as the axis."""
    if isinstance(p, (tuple, list)) and any(isinstance(v, (tuple, list)) for v in p):
        return k, s, p  # per-side padding: as given
    k, s = list(k), list(s)
    pad = [p, p] if not isinstance(p, (str, tuple, list)) else (list(p) if not isinstance(p, str) else p)
    if isinstance(pad, str):
        pad = [kk // 2 for kk in k] if pad == "same" else [0, 0]
    for ax in range(2):
        size = shape[1 + ax]
        if size == 1:
            k[ax], s[ax], pad[ax] = 1, 1, 0
        elif size + 2 * pad[ax] < k[ax]:
            pad[ax] = k[ax] // 2 if k[ax] % 2 else 0
            if size + 2 * pad[ax] < k[ax]:
                k[ax], pad[ax] = size, 0
    return tuple(k), tuple(s), tuple(pad)


def pads(p: tuple[int, int]) -> list[int]:
    """ONNX's pads for a (top, left) padding: the begins of every axis, then the ends."""
    return [p[0], p[1], p[0], p[1]]
