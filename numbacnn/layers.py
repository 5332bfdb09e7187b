"""Layers: own their parameters, gradients and forward caches; validate shapes before any kernel runs.

Parametrised layers get their arrays from ``Sequential`` (views into one flat buffer) or from
``initialize(rng)`` when used alone. Buffers returned by ``forward``/``backward`` are reused by the
next call with the same batch size: copy them if you keep them (``Sequential`` does).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .backend import Backend, ConvGeometry, ConvPlan, Workspace, get_backend
from .backend.base import conv_out

Shape = tuple[int, ...]


def _pair(v: Any, what: str, layer: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, (tuple, list)) and len(v) == 2:
        a, b = v
    else:
        a = b = v
    for u in (a, b):
        if isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < minimum:
            raise ValueError(f"{layer}: {what} must be an integer >= {minimum} (or a pair), got {v!r}")
    return int(a), int(b)


def _compact(pair: tuple[int, int]) -> int | tuple[int, int]:
    return pair[0] if pair[0] == pair[1] else pair


def _positive_int(v: Any, what: str, layer: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{layer}: {what} must be a positive integer, got {v!r}")
    return int(v)


class Layer:
    """Base class. Subclasses implement ``output_shape``, ``forward`` and ``backward``; they compute
    through ``self.backend`` (set with ``device``, by ``Sequential.to``) and keep their buffers in
    the backend's workspace ``self._buffers``."""

    param_names: tuple[str, ...] = ()
    # state that is not trained but saved (BatchNorm's running statistics): arrays of the layer's
    # backend, in state_dict after the parameters, moved with the layer
    buffer_names: tuple[str, ...] = ()
    name: str = ""  # set by Sequential to "layer i (Repr)"

    def __init__(self) -> None:
        self.backend: Backend = get_backend("cpu")
        self._buffers: Workspace = self.backend.workspace()
        self._in_shape: Shape | None = None

    @property
    def device(self) -> str:
        return self.backend.name

    @device.setter
    def device(self, device: str) -> None:
        """Run on "cpu" or "cuda" from now on (workspaces are dropped, saved buffers such as running
        statistics move along; parameters are bound by the caller)."""
        old, new = self.backend, get_backend(device)
        for k in self.buffer_names:
            host = old.to_host(getattr(self, k))
            moved = new.empty(host.shape, host.dtype)
            new.write(moved, host)
            setattr(self, k, moved)
        self.backend = new
        self._buffers = self.backend.workspace()
        self.__dict__.pop("_plan", None)
        for sub in self.sublayers():
            sub.device = device

    def sublayers(self) -> list[Layer]:
        """The layers inside this one (a residual block's), in parameter order."""
        return []

    def named_buffers(self) -> dict[str, Any]:
        """The saved non-parameter state by name ("running_mean", ...), as the layer's arrays."""
        return {k: getattr(self, k) for k in self.buffer_names}

    def fuse(self, enabled: bool) -> None:
        """Set up the fusions inside this layer (a residual block's paths); see ``fuse_chain``."""

    # --- parameters ---------------------------------------------------------------------------
    def param_shapes(self) -> dict[str, Shape]:
        return {}

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             net_views: bool = False) -> None:
        """Use these arrays as parameters and gradients; ``net_views``: they are views of a
        network's flat buffers (which the network pickles, so the layer does not)."""
        for k in self.param_names:
            setattr(self, k, params[k])
            setattr(self, "d" + k, grads[k])
        self._net_views = net_views

    def reset_parameters(self, rng: np.random.Generator) -> None:
        """Fill the bound parameters in place (PyTorch's default initialisation)."""

    def initialize(self, rng: np.random.Generator | int | None = None) -> Layer:
        """Allocate and initialise this layer's own parameters (for use outside ``Sequential``)."""
        shapes = self.param_shapes()
        self.bind({k: np.zeros(s, np.float32) for k, s in shapes.items()},
                  {k: np.zeros(s, np.float32) for k, s in shapes.items()})
        self.reset_parameters(np.random.default_rng(rng))
        return self

    # --- shapes and buffers -------------------------------------------------------------------
    def output_shape(self, in_shape: Shape) -> Shape:
        """Per-example output shape for a per-example input shape; raises ValueError if invalid."""
        return in_shape

    def macs(self, in_shape: Shape) -> int:
        """Multiply-adds of one example's forward through the layer's weights (convolutions and
        dense layers, those inside residual blocks included; 0 for the others, whose elementwise
        work is not counted)."""
        return 0

    def _label(self) -> str:
        return self.name or repr(self)

    def _input(self) -> Shape:
        if self._in_shape is None:
            raise RuntimeError(f"{self._label()}: backward called before forward")
        return self._in_shape

    def _check_input(self, x: np.ndarray) -> Shape:
        if not (isinstance(x, np.ndarray) or self.backend.is_array(x)) or x.dtype != np.float32:
            raise ValueError(f"{self._label()}: expected a float32 ndarray, got "
                             f"{type(x).__name__} of dtype {getattr(x, 'dtype', None)}")
        shape = x.shape
        if shape[0] < 1:
            raise ValueError(f"{self._label()}: empty batch (shape {shape})")
        known = self.__dict__.get("_shape_checked")  # (input, output) per example, checked before
        if known is None or known[0] != shape[1:]:
            known = (shape[1:], self.output_shape(tuple(shape[1:])))
            self._shape_checked = known
        self._in_shape = shape
        return (shape[0],) + known[1]

    def _check_grad(self, dy: np.ndarray, expected: Shape) -> np.ndarray:
        if self._in_shape is None:
            raise RuntimeError(f"{self._label()}: backward called before forward")
        if getattr(dy, "shape", None) != expected:
            raise ValueError(f"{self._label()}: expected an output gradient of shape {expected}, "
                             f"got {getattr(dy, 'shape', type(dy).__name__)}")
        if not (isinstance(dy, np.ndarray) or self.backend.is_array(dy)):
            raise ValueError(f"{self._label()}: expected a numpy array, got {type(dy).__name__}")
        return self.backend.asarray(dy)

    def _buf(self, key: str, shape: Shape, dtype: Any = np.float32) -> Any:
        return self._buffers.buf(key, shape, dtype)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        raise NotImplementedError

    def infer(self, x: np.ndarray) -> np.ndarray:
        """The inference forward: ``forward(x, training=False)``, or less where an inference-only
        fusion applies (``fuse_chain``: a BatchNorm folded into the convolution before it). No
        backward may follow it."""
        return self.forward(x, training=False)

    def __getstate__(self) -> dict[str, Any]:
        # pickles carry parameters and settings, not scratch buffers, forward caches or gradients
        state = self.__dict__.copy()
        state["_buffers"] = self.backend.workspace()
        state.pop("_x", None)
        state.pop("_plan", None)
        for k in self.param_names:
            if state.get("_net_views"):  # views of the network's buffers: it rebinds them
                state.pop(k, None)
            state.pop("d" + k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for k in self.param_names:
            if k in state and "d" + k not in state:  # a layer pickled on its own: fresh gradients
                setattr(self, "d" + k, np.zeros_like(state[k]))

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments: ``type(layer).from_config(layer.get_config())`` builds an equal layer."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """The layer for ``get_config()``'s dict (JSON lists become tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()})

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _kaiming_uniform(rng: np.random.Generator, arr: np.ndarray, fan_in: int) -> None:
    # PyTorch: kaiming_uniform_(a=sqrt(5)) for weights and U(-1/sqrt(fan_in), ..) for biases
    # both reduce to a bound of 1/sqrt(fan_in).
    bound = 1.0 / math.sqrt(fan_in)
    arr[...] = rng.uniform(-bound, bound, size=arr.shape).astype(np.float32)


class Conv2D(Layer):
    """2-D convolution, weight (C_out, C_in, KH, KW) and bias (C_out,), as ``torch.nn.Conv2d``.

    padding: an int, a pair, "valid" (0) or "same" (stride 1 and odd kernels only).
    """

    param_names = ("weight", "bias")
    weight: Any  # (C_out, C_in, KH, KW); numpy or device views bound by Sequential / initialize
    bias: Any
    dweight: Any
    dbias: Any

    # inference-only fusion (fuse_chain): the BatchNorm2D folded in, and its ReLU / max pool
    infer_bn: BatchNorm2D | None = None
    infer_pool: tuple[int, int] | None = None
    # and in chains of plans that take them (Winograd's) the activations between them channel-last:
    # 1 = the input comes so from the layer before, 2 = the output goes so to the layer after
    # (ConvPlan.forward_channels_last)
    infer_layout = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | str | tuple[int, int] = 0) -> None:
        super().__init__()
        label = "Conv2D"
        self.in_channels = _positive_int(in_channels, "in_channels", label)
        self.out_channels = _positive_int(out_channels, "out_channels", label)
        self.kernel_size = _pair(kernel_size, "kernel_size", label, 1)
        self.stride = _pair(stride, "stride", label, 1)
        if isinstance(padding, str):
            if padding == "valid":
                pad = (0, 0)
            elif padding == "same":
                kh, kw = self.kernel_size
                if self.stride != (1, 1) or kh % 2 == 0 or kw % 2 == 0:
                    raise ValueError(f"{label}: padding='same' needs stride 1 and an odd kernel size, "
                                     f"got kernel_size={kernel_size!r}, stride={stride!r}")
                pad = (kh // 2, kw // 2)
            else:
                raise ValueError(f"{label}: padding must be an int, 'valid' or 'same', got {padding!r}")
        else:
            pad = _pair(padding, "padding", label, 0)
        self.padding = pad
        self._padding_arg = padding
        # set by Sequential when a ReLU follows: the ReLU is applied inside this layer's kernels
        self.fused_relu = False
        # set by Sequential (when the plan fuses_pool) when ReLU and a non-overlapping unpadded
        # MaxPool2D follow: (pool_h, pool_w); forward then returns the pooled output and the
        # backward takes the pooled gradient, while those two layers pass values through
        self.fused_pool: tuple[int, int] | None = None

    def param_shapes(self) -> dict[str, Shape]:
        kh, kw = self.kernel_size
        return {"weight": (self.out_channels, self.in_channels, kh, kw), "bias": (self.out_channels,)}

    def reset_parameters(self, rng: np.random.Generator) -> None:
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        _kaiming_uniform(rng, self.weight, fan_in)
        _kaiming_uniform(rng, self.bias, fan_in)

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3 or in_shape[0] != self.in_channels:
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.in_channels}, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        h, w = in_shape[1], in_shape[2]
        if h + 2 * ph < kh or w + 2 * pw < kw:
            raise ValueError(f"{self._label()}: input {h}x{w} with padding {self.padding} is smaller "
                             f"than the kernel {kh}x{kw}")
        return (self.out_channels, conv_out(h, kh, sh, ph), conv_out(w, kw, sw, pw))

    @property
    def geometry(self) -> ConvGeometry:
        return ConvGeometry(self.in_channels, self.out_channels, self.kernel_size, self.stride,
                            self.padding)

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
        return self.out_channels * self.in_channels * self.kernel_size[0] * self.kernel_size[1] * oh * ow

    def forward(self, x: np.ndarray, training: bool = False, backward: bool = True) -> np.ndarray:
        """``backward=False`` (``infer``): no backward follows (the fused pool's argmax may be left
        unwritten)."""
        self._check_pooled(self._check_input(x), self.fused_pool)
        return self.plan.forward(self._buffers, self.backend.asarray(x), self.weight, self.bias,
                                 self.fused_relu, self.fused_pool, backward)

    def _check_pooled(self, out_shape: Shape, pool: tuple[int, int] | None) -> None:
        if pool and (out_shape[2] < pool[0] or out_shape[3] < pool[1]):
            raise ValueError(f"{self._label()}: output {out_shape[2]}x{out_shape[3]} is smaller than "
                             f"the following max pool's window {pool[0]}x{pool[1]}")

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        return self.plan.backward(self._buffers, dy, self.weight, self.dweight, self.dbias, need_dx,
                                  self.fused_relu, self.fused_pool)

    def infer(self, x: np.ndarray) -> np.ndarray:
        """With a following BatchNorm2D folded in (``infer_bn``): its running statistics and affine
        map folded into a copy of the weights, and its ReLU and a following max pool applied in this
        convolution's epilogue. The fold runs on every call but returns at once while its inputs
        keep their bits (so always current), and counts its writes for the plan's packings."""
        bn, layout = self.infer_bn, self.infer_layout
        if bn is None and not layout:
            return self.forward(x, training=False, backward=False)
        out_shape = self._check_input(x.transpose(0, 3, 1, 2) if layout & 1 else x)
        x = self.backend.asarray(x)
        if bn is None:
            self._check_pooled(out_shape, self.fused_pool)
            return self.plan.forward_channels_last(self._buffers, x, self.weight, self.bias, self.fused_relu,
                                                   self.fused_pool, None, layout)
        self._check_pooled(out_shape, self.infer_pool)
        co = self.out_channels
        wf, bf = self._buf("w_folded", self.weight.shape), self._buf("b_folded", (co,))
        version = self.backend.batchnorm_fold(self._buffers, wf.reshape(co, -1), bf,
                                              self.weight.reshape(co, -1), self.bias, bn.weight, bn.bias,
                                              bn.running_mean, bn.running_var, bn.eps)
        if layout:
            return self.plan.forward_channels_last(self._buffers, x, wf, bf, bn.fused_relu, self.infer_pool,
                                                   version, layout)
        return self.plan.forward(self._buffers, self.backend.asarray(x), wf, bf, bn.fused_relu,
                                 self.infer_pool, backward=False, version=version)

    def get_config(self) -> dict[str, Any]:
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": _compact(self.kernel_size), "stride": _compact(self.stride),
                "padding": self._padding_arg if isinstance(self._padding_arg, str)
                else _compact(self.padding)}

    def __repr__(self) -> str:
        c = self.get_config()
        s = f"Conv2D({self.in_channels}, {self.out_channels}, {c['kernel_size']}"
        if self.stride != (1, 1):
            s += f", stride={c['stride']}"
        if self.padding != (0, 0):
            s += f", padding={c['padding']!r}"
        return s + ")"


class _Pool2D(Layer):
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


class MaxPool2D(_Pool2D):
    """Max pooling as ``torch.nn.MaxPool2d``; caches each example's argmax for the backward.

    In a Sequential after Conv2D and ReLU (CPU), the convolution may pool in its epilogue
    (``Conv2D.fused_pool``); this layer then passes values and gradients through (``fused``).
    """

    fused = False
    infer_fused = False  # inference only: pooled in the epilogue of a conv with a folded BatchNorm

    @property
    def argmax(self) -> np.ndarray:
        """The last forward's argmax cache (N, C, OH, OW) int64, on the host: each window's winner
        as a flat index iy * W + ix into its example's input plane (ties to the first). Not kept
        while the pool is fused into its convolution (read it under ``Sequential.unfused()``)."""
        if self.fused or "argmax" not in self._buffers:
            raise RuntimeError(f"{self._label()}: no argmax cache (no unfused forward yet)")
        return np.array(self.backend.to_host(self._buffers["argmax"]), np.int64)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return x if self.infer_fused else self.forward(x, training=False)  # pooled by the conv

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.fused:
            self._in_shape = tuple(x.shape)
            return x
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        argmax = self._buf("argmax", out_shape, np.int32)
        self.backend.maxpool2d_forward(y, argmax, self.backend.asarray(x), self.kernel_size,
                                       self.stride, self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        if self.fused:
            dy = self._check_grad(dy, self._in_shape or ())
            return dy if need_dx else None
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self.backend.maxpool2d_backward(dx, dy, self._buffers["argmax"], self.kernel_size, self.stride,
                                        self.padding)
        return dx


class AvgPool2D(_Pool2D):
    """Average pooling as ``torch.nn.AvgPool2d`` (zero padding counted in the mean)."""

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        self.backend.avgpool2d_forward(y, self.backend.asarray(x), self.kernel_size, self.stride,
                                       self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self.backend.avgpool2d_backward(dx, dy, self.kernel_size, self.stride, self.padding)
        return dx


class Dense(Layer):
    """Fully connected layer, weight (out_features, in_features), as ``torch.nn.Linear``."""

    param_names = ("weight", "bias")
    weight: Any  # (out_features, in_features)
    bias: Any
    dweight: Any
    dbias: Any

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features", "Dense")
        self.out_features = _positive_int(out_features, "out_features", "Dense")

    def param_shapes(self) -> dict[str, Shape]:
        return {"weight": (self.out_features, self.in_features), "bias": (self.out_features,)}

    def reset_parameters(self, rng: np.random.Generator) -> None:
        _kaiming_uniform(rng, self.weight, self.in_features)
        _kaiming_uniform(rng, self.bias, self.in_features)

    def output_shape(self, in_shape: Shape) -> Shape:
        if in_shape != (self.in_features,):
            hint = " (add Flatten() before Dense)" if len(in_shape) > 1 else ""
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.in_features}), "
                             f"got (N, {', '.join(map(str, in_shape))}){hint}")
        return (self.out_features,)

    def macs(self, in_shape: Shape) -> int:
        return self.in_features * self.out_features

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        self._x = self.backend.asarray(x)
        self.backend.dense_forward(y, self._x, self.weight, self.bias)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n, self.out_features))
        dx = self._buf("dx", self._input()) if need_dx else None
        self.backend.dense_backward(dx, self.dweight, self.dbias, dy, self._x, self.weight)
        return dx

    def get_config(self) -> dict[str, Any]:
        return {"in_features": self.in_features, "out_features": self.out_features}

    def __repr__(self) -> str:
        return f"Dense({self.in_features}, {self.out_features})"


class _Elementwise(Layer):
    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        self._apply(y.reshape(-1), self.backend.asarray(x).reshape(-1), training)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._in_shape or ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self._apply_backward(dx.reshape(-1), dy.reshape(-1))
        return dx

    def _apply(self, y: np.ndarray, x: np.ndarray, training: bool) -> None:
        raise NotImplementedError

    def _apply_backward(self, dx: np.ndarray, dy: np.ndarray) -> None:
        raise NotImplementedError


class ReLU(_Elementwise):
    """max(x, 0); the gradient passes where the output is positive.

    In a Sequential right after a Conv2D, the convolution applies it (one pass over memory fewer
    each way) and this layer passes values and gradients through unchanged (``fused``).
    """

    fused = False

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.fused:
            self._check_input(x)
            return x
        return super().forward(x, training)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        if self.fused:
            return self._check_grad(dy, self._in_shape or ()) if need_dx else None
        return super().backward(dy, need_dx)

    def _apply(self, y, x, training):
        self.backend.relu_forward(y, x)

    def _apply_backward(self, dx, dy):
        self.backend.relu_backward(dx, dy, self._buffers["y"].reshape(-1))


class Tanh(_Elementwise):
    """Hyperbolic tangent."""

    def _apply(self, y, x, training):
        self.backend.tanh_forward(y, x)

    def _apply_backward(self, dx, dy):
        self.backend.tanh_backward(dx, dy, self._buffers["y"].reshape(-1))


class Dropout(_Elementwise):
    """Inverted dropout: zeroes each input with probability p and scales the rest by 1/(1-p).

    Identity when ``training=False``. The masks are drawn by the kernel from a counter-based
    generator (Philox4x32-10, kernels/cpu/dropout.py): whether value j of a batch is kept in the
    layer's d-th training forward depends on (seed, d, j) only, so the CPU and the GPU draw the
    same masks at any thread count, and the state is two integers, ``generator_state()`` =
    (seed, draws made), saved by checkpoints. ``Sequential``'s seed sets the seed.

    Data parallelism: ``set_offset(k)`` says that this process holds the batch's values from
    index k on (examples lo:hi of the batch: k = lo times the values per example), so that the
    ranks together apply the masks one process would; ``skip_draw()`` advances the generator of a
    rank that holds no example of a batch.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be a probability in [0, 1), got {p!r}")
        self.p = float(p)
        self._init_state(int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1)

    @property
    def threshold(self) -> int:
        """A value is dropped when the top 24 bits of its random word are below this."""
        return math.ceil(self.p * 2**24)

    def _init_state(self, seed: int) -> None:
        # (seed, draws made, offset, unused), uint64, on the layer's device
        self._offset = 0
        self._state = self.backend.empty((4,), np.uint64)
        self.backend.write(self._state, np.array([seed, 0, 0, 0], np.uint64))

    def reset_parameters(self, rng: np.random.Generator) -> None:
        self.set_generator_state(int(rng.integers(2**63)), 0)

    def generator_state(self) -> tuple[int, int]:
        """(seed, number of masks drawn so far)."""
        state = self.backend.to_host(self._state)
        return int(state[0]), int(state[1])

    def set_generator_state(self, seed: int, draws: int) -> None:
        if not (0 <= int(seed) < 2**64 and 0 <= int(draws) < 2**64):
            raise ValueError(f"Dropout: a generator state is two integers in [0, 2**64), got "
                             f"({seed!r}, {draws!r})")
        self.backend.write(self._state, np.array([seed, draws, self._offset, 0], np.uint64))

    def set_offset(self, offset: int) -> None:
        """This process's first value is value ``offset`` of the whole batch (data parallelism)."""
        if offset != self._offset:
            self._offset = int(offset)
            self.backend.write(self._state[2:3], np.array([offset], np.uint64))

    def skip_draw(self) -> None:
        """Advance the generator by one draw without drawing (a rank with no examples in a batch)."""
        seed, draws = self.generator_state()
        self.set_generator_state(seed, draws + 1)

    @Layer.device.setter  # type: ignore[attr-defined,misc]
    def device(self, device: str) -> None:
        state = np.array(self.backend.to_host(self._state))
        Layer.device.fset(self, device)  # type: ignore[attr-defined]
        self._state = self.backend.empty((4,), np.uint64)
        self.backend.write(self._state, state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        rng = state.pop("rng", None)  # pickled before the counter-based generator
        state.pop("batch_slice", None)
        super().__setstate__(state)
        if "_state" not in state:
            self._init_state(int(rng.integers(2**63)) if rng is not None else 0)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return x  # the identity in evaluation: no kernel call, no copy (1.7 us of a batch-1 prediction)

    def _apply(self, y, x, training):
        # threshold 0 (evaluation): a mask of ones, nothing drawn
        self.backend.dropout_forward(y, self._buf("mask", x.shape), x, self._state,
                                     self.threshold if training else 0,
                                     1.0 / (1.0 - self.p) if training else 1.0)

    def _apply_backward(self, dx, dy):
        self.backend.dropout_backward(dx, dy, self._buffers["mask"])

    def get_config(self) -> dict[str, Any]:
        return {"p": self.p}

    def __repr__(self) -> str:
        return f"Dropout({self.p})"


class Flatten(Layer):
    """(N, C, H, W) -> (N, C*H*W) in C order, as ``torch.nn.Flatten``."""

    def output_shape(self, in_shape: Shape) -> Shape:
        return (math.prod(in_shape),)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        return self.backend.asarray(x).reshape(out_shape)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n,) + self.output_shape(self._in_shape[1:]) if self._in_shape else ())
        return dy.reshape(self._in_shape) if need_dx else None


class BatchNorm2D(Layer):
    """Batch normalisation over (N, C, H, W) per channel, as ``torch.nn.BatchNorm2d``.

    Training: normalises with the batch's mean and biased variance and updates ``running_mean``
    and ``running_var`` (the unbiased variance) with ``momentum``; evaluation: normalises with the
    running statistics. ``weight`` (ones) and ``bias`` (zeros) are trained; the running statistics
    and ``num_batches_tracked`` are saved in ``state_dict`` under torch's names. In a Sequential a
    following ReLU is applied inside this layer's kernels (``fused_relu``).
    """

    param_names = ("weight", "bias")
    buffer_names = ("running_mean", "running_var", "num_batches_tracked")
    spatial_dims: tuple[int, ...] = (2,)  # spatial axes of a per-example input: (C, H, W)
    weight: Any
    bias: Any
    dweight: Any
    dbias: Any

    infer_folded = False  # inference only: folded into the convolution before it (fuse_chain)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        label = type(self).__name__
        self.num_features = _positive_int(num_features, "num_features", label)
        for what, v, lo in (("eps", eps, 0.0), ("momentum", momentum, 0.0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > lo or (
                    what == "momentum" and v > 1.0):
                raise ValueError(f"{label}: {what} must be a number in "
                                 f"{'(0, 1]' if what == 'momentum' else '(0, inf)'}, got {v!r}")
        self.eps = float(eps)
        self.momentum = float(momentum)
        self.running_mean = np.zeros(self.num_features, np.float32)
        self.running_var = np.ones(self.num_features, np.float32)
        self.num_batches_tracked = np.zeros(1, np.int64)
        self.fused_relu = False  # set by Sequential when a ReLU follows

    def param_shapes(self) -> dict[str, Shape]:
        return {"weight": (self.num_features,), "bias": (self.num_features,)}

    def reset_parameters(self, rng: np.random.Generator) -> None:
        self.weight[...] = 1.0
        self.bias[...] = 0.0
        for k, v in (("running_mean", 0), ("running_var", 1), ("num_batches_tracked", 0)):
            buf = getattr(self, k)
            self.backend.write(buf, np.full(buf.shape, v, buf.dtype))

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) - 1 not in self.spatial_dims or in_shape[0] != self.num_features:
            want = {BatchNorm2D: "(N, {c}, H, W)", BatchNorm1D: "(N, {c}) or (N, {c}, L)"}[type(self)]
            raise ValueError(f"{self._label()}: expected input of shape "
                             f"{want.format(c=self.num_features)}, got (N, {', '.join(map(str, in_shape))})")
        return in_shape

    def infer(self, x: np.ndarray) -> np.ndarray:
        return x if self.infer_folded else self.forward(x, training=False)  # folded: done by the conv

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c, s = out_shape[0], self.num_features, math.prod(out_shape[2:])
        if training and n * s < 2:
            raise ValueError(f"{self._label()}: expected more than 1 value per channel when "
                             f"training, got input of shape {tuple(out_shape)}")
        be = self.backend
        x3 = be.asarray(x).reshape(n, c, s)
        y3 = self._buf("y", out_shape).reshape(n, c, s)
        mean, invstd = self._buf("mean", (c,)), self._buf("invstd", (c,))
        self._x, self._y, self._batch_stats = x3, y3, bool(training)
        if training:
            be.batchnorm_forward_train(y3, mean, invstd, self.running_mean, self.running_var,
                                       self.num_batches_tracked, x3, self.weight, self.bias, self.eps,
                                       self.momentum, self.fused_relu)
        else:
            be.batchnorm_forward_eval(y3, mean, invstd, x3, self.running_mean, self.running_var,
                                      self.weight, self.bias, self.eps, self.fused_relu)
        return self._buffers["y"]

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._in_shape or ())
        n, c, s = self._x.shape
        dx = self._buf("dx", self._input()) if need_dx else None
        self.backend.batchnorm_backward(None if dx is None else dx.reshape(n, c, s), self.dweight,
                                        self.dbias, dy.reshape(n, c, s), self._x, self._y,
                                        self._buffers["mean"], self._buffers["invstd"], self.weight,
                                        self.fused_relu, self._batch_stats)
        return dx

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_y", None)
        return state

    def get_config(self) -> dict[str, Any]:
        return {"num_features": self.num_features, "eps": self.eps, "momentum": self.momentum}

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v}" for k, v, d in (("eps", self.eps, 1e-5),
                                                      ("momentum", self.momentum, 0.1)) if v != d)
        return f"{type(self).__name__}({self.num_features}{extra})"


class BatchNorm1D(BatchNorm2D):
    """Batch normalisation of (N, C) features (or (N, C, L)) per feature, as ``torch.nn.BatchNorm1d``.
    At batch 1 in training there is no variance to normalise by: a clear error, as torch's."""

    spatial_dims: tuple[int, ...] = (0, 1)


class GlobalAvgPool2D(Layer):
    """(N, C, H, W) -> (N, C): the mean of each plane (``torch.nn.AdaptiveAvgPool2d(1)`` + flatten)."""

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3:
            raise ValueError(f"{self._label()}: expected input of shape (N, C, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        return (in_shape[0],)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c, h, w = self._in_shape  # type: ignore[misc]
        y = self._buf("y", out_shape)
        self.backend.global_avgpool2d_forward(y, self.backend.asarray(x).reshape(n, c, h * w))
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape[:2])
        if not need_dx:
            return None
        dx = self._buf("dx", shape)
        self.backend.global_avgpool2d_backward(dx.reshape(shape[0], shape[1], -1), dy)
        return dx


class Normalize(Layer):
    """Per-channel standardisation of the input, y = (x - mean[c]) / std[c] (torchvision's
    ``Normalize``), as a network's first layer: the training set's channel statistics travel with
    the weights (``state_dict`` "mean" and "std", checkpoints, ONNX), so that prediction, evaluation
    and exported models apply them. Nothing is trained."""

    buffer_names = ("mean", "std")

    def __init__(self, mean: Any, std: Any) -> None:
        super().__init__()
        m = np.ascontiguousarray(mean, dtype=np.float32).reshape(-1)
        sd = np.ascontiguousarray(std, dtype=np.float32).reshape(-1)
        if m.size == 0 or m.shape != sd.shape:
            raise ValueError(f"Normalize: mean and std need one value per channel, got {m.size} and "
                             f"{sd.size}")
        if not (np.isfinite(m).all() and np.isfinite(sd).all() and (sd > 0).all()):
            raise ValueError("Normalize: mean must be finite and std finite and positive")
        self.num_channels = int(m.size)
        self.mean, self.std = m, sd

    @classmethod
    def fit(cls, x: np.ndarray) -> Normalize:
        """The layer for images x (N, C, H, W): each channel's mean and standard deviation, in float64
        (a constant channel gets std 1)."""
        m = x.mean(axis=(0, 2, 3), dtype=np.float64)
        sd = x.std(axis=(0, 2, 3), dtype=np.float64)
        return cls(m, np.where(sd > 0, sd, 1.0))

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) != 3 or in_shape[0] != self.num_channels:
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.num_channels}, H, W), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        return in_shape

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c = out_shape[0], self.num_channels
        y = self._buf("y", out_shape)
        self.backend.normalize_forward(y.reshape(n, c, -1), self.backend.asarray(x).reshape(n, c, -1),
                                       self.mean, self.std)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape)
        if not need_dx:
            return None
        dx = self._buf("dx", shape)
        n, c = shape[0], shape[1]
        self.backend.normalize_backward(dx.reshape(n, c, -1), dy.reshape(n, c, -1), self.std)
        return dx

    def get_config(self) -> dict[str, Any]:
        host = self.backend.to_host
        return {"mean": [float(v) for v in host(self.mean)], "std": [float(v) for v in host(self.std)]}

    def __repr__(self) -> str:
        return f"Normalize({self.num_channels})"


class Residual(Layer):
    """A residual block: output = body(x) + shortcut(x), as in ResNets.

    ``layers``: the body, applied in order; ``shortcut``: None for the identity, or layers (e.g. a
    strided 1x1 Conv2D and a BatchNorm2D) where the body changes the shape. Both paths must give
    the same shape. The gradient reaching x is the sum of both paths' input gradients. Parameter
    names nest as torch's: "body.0.weight", "shortcut.0.weight", ...
    In a chain, a ReLU right after the block is applied by its add (``fused_relu``; the ReLU then
    passes values and gradients through).
    """

    fused_relu = False  # set by fuse_chain when a ReLU follows

    def __init__(self, layers: Iterable[Layer], shortcut: Iterable[Layer] | None = None) -> None:
        super().__init__()
        self.body: list[Layer] = list(layers)
        self.shortcut: list[Layer] | None = None if shortcut is None else list(shortcut)
        if not self.body:
            raise ValueError("Residual: the body needs at least one layer")
        for where, path in (("body", self.body), ("shortcut", self.shortcut or [])):
            for j, layer in enumerate(path):
                if not isinstance(layer, Layer):
                    raise ValueError(f"Residual: {where} item {j} is {type(layer).__name__}, "
                                     f"not a numbacnn layer")
        self.name = ""

    def _paths(self) -> list[tuple[str, list[Layer]]]:
        return [("body", self.body)] + ([("shortcut", self.shortcut)] if self.shortcut else [])

    def sublayers(self) -> list[Layer]:
        return self.body + (self.shortcut or [])

    def _named(self) -> list[tuple[str, Layer]]:
        return [(f"{p}.{j}", layer) for p, path in self._paths() for j, layer in enumerate(path)]

    def set_name(self, name: str) -> None:
        """Name this block and its layers ("layer 3 (...)", "layer 3.body.0 (Conv2D(...))")."""
        self.name = name
        head = name.split(" (")[0]
        for key, layer in self._named():
            if isinstance(layer, Residual):
                layer.set_name(f"{head}.{key} ({layer!r})")
            else:
                layer.name = f"{head}.{key} ({layer!r})"

    # --- parameters, buffers --------------------------------------------------------------------
    def param_shapes(self) -> dict[str, Shape]:
        return {f"{key}.{p}": s for key, layer in self._named() for p, s in layer.param_shapes().items()}

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             net_views: bool = False) -> None:
        for key, layer in self._named():
            names = layer.param_shapes()
            layer.bind({p: params[f"{key}.{p}"] for p in names},
                       {p: grads[f"{key}.{p}"] for p in names}, net_views)
        self._net_views = net_views

    def reset_parameters(self, rng: np.random.Generator) -> None:
        for layer in self.sublayers():
            layer.reset_parameters(rng)

    def named_buffers(self) -> dict[str, Any]:
        return {f"{key}.{k}": v for key, layer in self._named() for k, v in layer.named_buffers().items()}

    def fuse(self, enabled: bool) -> None:
        for _, path in self._paths():
            fuse_chain(path, enabled)

    # --- computation --------------------------------------------------------------------------
    def output_shape(self, in_shape: Shape) -> Shape:
        shapes = []
        for _, path in self._paths():
            shape = in_shape
            for layer in path:
                shape = layer.output_shape(shape)
            shapes.append(shape)
        short = shapes[1] if self.shortcut else in_shape
        if shapes[0] != short:
            raise ValueError(f"{self._label()}: the body gives (N, {', '.join(map(str, shapes[0]))}) but "
                             f"the shortcut gives (N, {', '.join(map(str, short))}); the paths must "
                             f"agree (give the block a shortcut, e.g. a strided 1x1 conv)")
        return shapes[0]

    def macs(self, in_shape: Shape) -> int:
        total = 0
        for _, path in self._paths():
            shape = in_shape
            for layer in path:
                total += layer.macs(shape)
                shape = layer.output_shape(shape)
        return total

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        return self._run(x, training, False)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return self._run(x, False, True)

    def _run(self, x: np.ndarray, training: bool, inference: bool) -> np.ndarray:
        out_shape = self._check_input(x)
        h = s = self.backend.asarray(x)
        for layer in self.body:
            h = layer.infer(h) if inference else layer.forward(h, training)
        for layer in self.shortcut or []:
            s = layer.infer(s) if inference else layer.forward(s, training)
        y = self._buf("y", out_shape)
        self.backend.add(y.reshape(-1), h.reshape(-1), s.reshape(-1), relu=self.fused_relu)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if self.fused_relu:  # the gradient through the ReLU that the forward applied
            masked = self._buf("dy_relu", dy.shape)
            self.backend.relu_backward(masked.reshape(-1), dy.reshape(-1), self._buffers["y"].reshape(-1))
            dy = masked
        grads: list[Any] = []
        for _, path in self._paths():
            g: Any = dy
            for j in range(len(path) - 1, -1, -1):
                g = path[j].backward(g, need_dx=need_dx or j > 0)
            grads.append(g)
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        short = grads[1] if self.shortcut else dy
        self.backend.add(dx.reshape(-1), grads[0].reshape(-1), short.reshape(-1))
        return dx

    def get_config(self) -> dict[str, Any]:
        def configs(path):
            return [[type(layer).__name__, layer.get_config()] for layer in path]
        return {"layers": configs(self.body),
                "shortcut": None if self.shortcut is None else configs(self.shortcut)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        short = config.get("shortcut")
        return cls([layer_from_config(k, c) for k, c in config["layers"]],
                   None if short is None else [layer_from_config(k, c) for k, c in short])

    def __repr__(self) -> str:
        s = f"Residual([{', '.join(map(repr, self.body))}]"
        if self.shortcut is not None:
            s += f", shortcut=[{', '.join(map(repr, self.shortcut))}]"
        return s + ")"


def fuse_chain(layers: list[Layer], enabled: bool = True) -> None:
    """Fusions along a chain of layers (a Sequential's, or a residual path's): a Conv2D or a
    BatchNorm applies the ReLU that follows it (the ReLU then passes through), and a Conv2D whose
    plan can (``fuses_pool``) also a following non-overlapping, unpadded MaxPool2D (pooled in the
    GEMM epilogue: the full-size activation is never written, read back or backpropagated
    through). ``enabled=False`` undoes them all."""
    for layer in layers:
        if isinstance(layer, (Conv2D, BatchNorm2D, Residual)):
            layer.fused_relu = False
        if isinstance(layer, Conv2D):
            layer.fused_pool = None
            layer.infer_bn, layer.infer_pool, layer.infer_layout = None, None, 0
        if isinstance(layer, BatchNorm2D):
            layer.infer_folded = False
        if isinstance(layer, (ReLU, MaxPool2D)):
            layer.fused = False
        if isinstance(layer, MaxPool2D):
            layer.infer_fused = False
        layer.fuse(enabled)
    if not enabled:
        return
    for i, layer in enumerate(layers[:-1]):
        relu = layers[i + 1]
        if isinstance(layer, Residual) and isinstance(relu, ReLU):  # the add applies it
            layer.fused_relu = relu.fused = True
            continue
        if not (isinstance(layer, (Conv2D, BatchNorm2D)) and isinstance(relu, ReLU)):
            continue
        layer.fused_relu = True
        relu.fused = True
        pool = _poolable(layer, layers[i + 2] if i + 2 < len(layers) else None)
        if pool is not None:
            layer.fused_pool = pool.kernel_size  # type: ignore[union-attr]  # a Conv2D (_poolable)
            pool.fused = True
    # inference only (Layer.infer): Conv2D + BatchNorm2D (+ ReLU (+ max pool)) as one convolution
    for i, layer in enumerate(layers[:-1]):
        bn = layers[i + 1]
        if not (isinstance(layer, Conv2D) and type(bn) is BatchNorm2D):
            continue
        layer.infer_bn = bn
        bn.infer_folded = True
        pool = _poolable(layer, layers[i + 3] if bn.fused_relu and i + 3 < len(layers) else None)
        if pool is not None:
            layer.infer_pool = pool.kernel_size
            pool.infer_fused = True
    # inference only: Winograd layers hand each other channel-last activations (Conv2D.infer_layout;
    # modern's prediction at batch 1 / 8 / 64: 0.94 / 0.96 / 0.95x the time)
    for i, layer in enumerate(layers):
        if not (isinstance(layer, Conv2D) and layer.plan.channels_last):
            continue
        j = i + 1  # the layer that reads this one's inference output
        while j < len(layers) and _passes_on(layers[j], layer):
            j += 1
        after = layers[j] if j < len(layers) else None
        if isinstance(after, Conv2D) and after.plan.channels_last:
            layer.infer_layout |= 2
            after.infer_layout |= 1


def _passes_on(layer: Layer, conv: Conv2D) -> bool:
    """Whether ``layer``'s inference passes its input on untouched because ``conv`` before it did
    its work (a folded BatchNorm2D, a fused ReLU, a fused max pool)."""
    if isinstance(layer, BatchNorm2D):
        return layer.infer_folded and conv.infer_bn is layer
    if isinstance(layer, ReLU):
        return layer.fused
    if isinstance(layer, MaxPool2D):
        return layer.infer_fused or layer.fused
    return False


def _poolable(conv: Layer, pool: Layer | None) -> MaxPool2D | None:
    """``pool`` when ``conv`` is a Conv2D whose plan can apply it in its epilogue (a
    non-overlapping, unpadded MaxPool2D whose window fits the plan's argmax offsets), else None."""
    if (isinstance(conv, Conv2D) and conv.plan.fuses_pool and isinstance(pool, MaxPool2D)
            and pool.padding == (0, 0) and pool.stride == pool.kernel_size
            and pool.kernel_size[0] * pool.kernel_size[1] <= conv.plan.max_fused_window):
        return pool
    return None


LAYER_TYPES: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2D, MaxPool2D, AvgPool2D, Dense, ReLU, Tanh, Dropout, Flatten, BatchNorm2D, BatchNorm1D,
    GlobalAvgPool2D, Residual, Normalize)}


def layer_from_config(kind: str, config: dict[str, Any]) -> Layer:
    """Rebuild a layer from its class name and ``get_config()`` (used by checkpoints)."""
    if kind not in LAYER_TYPES:
        raise ValueError(f"unknown layer type {kind!r}")
    return LAYER_TYPES[kind].from_config(config)
