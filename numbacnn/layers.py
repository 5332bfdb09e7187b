"""Layers: own their parameters, gradients and forward caches; validate shapes before any kernel runs.

Parametrised layers get their arrays from ``Sequential`` (views into one flat buffer) or from
``initialize(rng)`` when used alone. Buffers returned by ``forward``/``backward`` are reused by the
next call with the same batch size: copy them if you keep them (``Sequential`` does).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _config
from .kernels import cpu as K
from .kernels import kernels_for

Shape = tuple[int, ...]

# Convolutions (any stride) run on position-major columns from POSITIONS_MIN_CKK = C_in*KH*KW and
# POSITIONS_MIN_CHANNELS input channels on (see Conv2D.strategy).
POSITIONS_MIN_CKK = 100
POSITIONS_MIN_CHANNELS = 3


def _pair(v: Any, what: str, layer: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, (tuple, list)) and len(v) == 2:
        a, b = v
    else:
        a = b = v
    for u in (a, b):
        if isinstance(u, bool) or not isinstance(u, (int, np.integer)) or u < minimum:
            raise ValueError(f"{layer}: {what} must be an integer >= {minimum} (or a pair), got {v!r}")
    return int(a), int(b)


def _to_device(a):
    """A float32 device array for a or a host array (copied once)."""
    from numba import cuda
    if isinstance(a, np.ndarray):
        return cuda.to_device(np.ascontiguousarray(a, dtype=np.float32))
    return a


def _compact(pair: tuple[int, int]) -> int | tuple[int, int]:
    return pair[0] if pair[0] == pair[1] else pair


def _positive_int(v: Any, what: str, layer: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{layer}: {what} must be a positive integer, got {v!r}")
    return int(v)


class Layer:
    """Base class. Subclasses implement ``output_shape``, ``forward`` and ``backward``."""

    param_names: tuple[str, ...] = ()
    name: str = ""  # set by Sequential to "layer i (Repr)"
    device: str = "cpu"  # set by Sequential.to(); "cuda" runs kernels.cuda on device arrays

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}
        self._in_shape: Shape | None = None

    # --- parameters ---------------------------------------------------------------------------
    def param_shapes(self) -> dict[str, Shape]:
        return {}

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        """Use these arrays (views of the network's flat buffers) as parameters and gradients."""
        for k in self.param_names:
            setattr(self, k, params[k])
            setattr(self, "d" + k, grads[k])

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

    def _label(self) -> str:
        return self.name or repr(self)

    def _input(self) -> Shape:
        if self._in_shape is None:
            raise RuntimeError(f"{self._label()}: backward called before forward")
        return self._in_shape

    def _check_input(self, x: np.ndarray) -> Shape:
        if self.device == "cuda" and not isinstance(x, np.ndarray) and hasattr(x, "copy_to_host"):
            pass  # a device array
        elif not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ValueError(f"{self._label()}: expected a float32 ndarray, got "
                             f"{type(x).__name__} of dtype {getattr(x, 'dtype', None)}")
        if x.shape[0] < 1:
            raise ValueError(f"{self._label()}: empty batch (shape {x.shape})")
        out = self.output_shape(tuple(x.shape[1:]))
        self._in_shape = tuple(x.shape)
        return (x.shape[0],) + out

    def _check_grad(self, dy: np.ndarray, expected: Shape) -> np.ndarray:
        if self._in_shape is None:
            raise RuntimeError(f"{self._label()}: backward called before forward")
        if getattr(dy, "shape", None) != expected:
            raise ValueError(f"{self._label()}: expected an output gradient of shape {expected}, "
                             f"got {getattr(dy, 'shape', type(dy).__name__)}")
        if self.device == "cuda":
            return _to_device(dy)
        if not isinstance(dy, np.ndarray):
            raise ValueError(f"{self._label()}: expected a numpy array, got {type(dy).__name__}")
        return np.ascontiguousarray(dy, dtype=np.float32)

    def _buf(self, key: str, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        b = self._buffers.get(key)
        if b is None or b.shape != tuple(shape) or b.dtype != dtype:
            if self.device == "cuda":
                from numba import cuda
                b = cuda.device_array(shape, dtype)
            else:
                # integer buffers (argmax caches) start at 0, so that even a backward that
                # somehow read one before its forward wrote it would stay in bounds
                b = np.zeros(shape, dtype) if np.dtype(dtype).kind in "iu" else np.empty(shape, dtype)
            self._buffers[key] = b
        return b

    @property
    def _K(self):
        return kernels_for(self.device)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        # pickles carry parameters and settings, not scratch buffers or forward caches
        state = self.__dict__.copy()
        state["_buffers"] = {}
        state.pop("_x", None)
        return state

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments: ``type(layer)(**layer.get_config())`` builds an equal layer."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _kaiming_uniform(rng: np.random.Generator, arr: np.ndarray, fan_in: int) -> None:
    # PyTorch: kaiming_uniform_(a=sqrt(5)) for weights and U(-1/sqrt(fan_in), ..) for biases
    # both reduce to a bound of 1/sqrt(fan_in).
    bound = 1.0 / math.sqrt(fan_in)
    arr[...] = rng.uniform(-bound, bound, size=arr.shape).astype(np.float32)


def _conv_out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


class Conv2D(Layer):
    """2-D convolution, weight (C_out, C_in, KH, KW) and bias (C_out,), as ``torch.nn.Conv2d``.

    padding: an int, a pair, "valid" (0) or "same" (stride 1 and odd kernels only).
    """

    param_names = ("weight", "bias")
    weight: Any  # (C_out, C_in, KH, KW); numpy or device views bound by Sequential / initialize
    bias: Any
    dweight: Any
    dbias: Any

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
        # set by Sequential (CPU, "wide" strategy) when ReLU and a non-overlapping unpadded
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
        return (self.out_channels, _conv_out(h, kh, sh, ph), _conv_out(w, kw, sw, pw))

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        if self.device == "cuda":
            y = self._buf("y", out_shape)
            self._x = x  # the GPU backward reads the input directly (no im2col cache)
            self._K.conv2d_forward(y, x, self.weight, self.bias, *self.stride, *self.padding,
                                   self.fused_relu)
            return y
        x = np.ascontiguousarray(x)
        n, _, oh, ow = out_shape
        kh, kw = self.kernel_size
        self._x = x
        if self.strategy in ("wide", "positions"):
            ph, pw = self.padding
            slots = _config.max_threads()
            hp, wp = x.shape[2] + 2 * ph, x.shape[3] + 2 * pw
            pk = self.fused_pool or (0, 0)
            if self.fused_pool:
                if oh < pk[0] or ow < pk[1]:
                    raise ValueError(f"{self._label()}: output {oh}x{ow} is smaller than the "
                                     f"following max pool's window {pk[0]}x{pk[1]}")
                y = self._buf("y", (n, self.out_channels, oh // pk[0], ow // pk[1]))
                argmax = self._buf("pool_argmax", y.shape, np.int32)
            else:
                y = self._buf("y", out_shape)
                # unused placeholder; one entry per example keeps the kernels' argmax[n] in bounds
                argmax = self._buf("pool_argmax", (n, 1, 1, 1), np.int32)
            ckk = self.in_channels * kh * kw
            if self.strategy == "positions":
                wt = self._buf("wt", (kh, kw, self.in_channels, self.out_channels))
                wt[...] = self.weight.transpose(2, 3, 1, 0)
                K.conv2d_forward_positions(
                    y, argmax, self._buf("yw", (slots, oh * ow, self.out_channels)),
                    self._buf("cols", (slots, oh * ow, ckk)),
                    self._buf("xt", (slots, hp * wp, self.in_channels)), x,
                    wt.reshape(ckk, self.out_channels), self.bias, *self.stride, ph, pw, kh, kw,
                    self.fused_relu, *pk)
            else:
                wide = (oh - 1) * wp + ow
                xpad = self._buf("xpad", (slots, self.in_channels, hp, wp) if ph > 0 or pw > 0
                                 else (slots, 1, 1, 1))
                K.conv2d_forward_wide(y, argmax, self._buf("yw", (slots, self.out_channels, wide)),
                                      self._buf("cols", (slots, ckk, wide)), xpad, x, self.weight,
                                      self.bias, ph, pw, self.fused_relu, *pk)
            return y
        y = self._buf("y", out_shape)
        cols = self._buf("cols", (n, self.in_channels * kh * kw, oh * ow))
        K.conv2d_forward(y, cols, x, self.weight, self.bias, *self.stride, *self.padding,
                         self.fused_relu)
        return y

    @property
    def strategy(self) -> str:
        """How the CPU kernels run; the one place where it is chosen.

        - "positions" (any stride, ckk = C_in*KH*KW >= POSITIONS_MIN_CKK and C_in >=
          POSITIONS_MIN_CHANNELS): position-major columns, one row per output position, copied
          in runs of KW*C_in floats; GEMMs (L x ckk) @ (ckk x Co) forward and over ``_group()``
          examples backward (kernels/cpu/conv2d_positions.py).
        - "wide" (other stride-1 layers): im2col by whole-row copies over the padded input width,
          a GEMM W @ cols per example forward and over ``_group()`` examples side by side
          backward (kernels/cpu/conv2d_wide.py).
        - "gemm" (other strided layers): im2col with a gather and one GEMM per example, the
          columns cached for the backward (kernels/cpu/conv2d.py).

        The crossover, measured on 2 cores (forward + backward of conv, ReLU and 2x2 pool, batch
        64, noisy): positions took 0.73-0.92x the time for 5x5 and 7x7 kernels from ckk = 100 on
        (LeNet's 6 -> 16 on 12x12: 0.85x; on 28x28 0.96x and 1.07x in two runs), 0.96x and 0.86x
        for 3x3 with 12 and 16 channels (32 -> 64: about 0.7x), 1.0-1.2x for 3x3 with 8-10
        channels, and 1.3-2x for narrow layers (3x3 with 1-6 channels). Strided (stride 2,
        forward + backward with a fused ReLU, batch 64), positions took 0.44-0.97x the time of
        "gemm": 0.83x for 32 -> 64 3x3 on 13x13, 0.97x for 16 -> 32 on 28x28, 0.44x for 8 -> 16
        5x5.
        """
        ckk = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        if ckk >= POSITIONS_MIN_CKK and self.in_channels >= POSITIONS_MIN_CHANNELS:
            return "positions"
        return "wide" if self.stride == (1, 1) else "gemm"

    def _group(self, rows: int) -> int:
        """Examples per GEMM in the backward of the "wide" and "positions" strategies, for
        ``rows`` GEMM rows (positions) per example. Grouping lengthens the weight-gradient GEMM's
        inner dimension, which pays off for wide layers (32 -> 64 channels, 3x3, positions on
        11x11: 1 example per GEMM was 2-22 % slower than 8, 4 as fast as 8, 16 3-4 % slower) and
        costs as much for narrow ones (LeNet's 6 -> 16, 5x5, in the wide strategy: 10-20 %
        slower with 8). Past about 1,200 rows the group's columns outgrow the core's cache:
        32 -> 32 on 24x24 (576 rows) took 12.3/11.9/13.1/17.3 ms with 1/2/4/8 examples per
        GEMM, 64 -> 64 on 14x14 (196 rows) 12.4/12.1/12.2/13.4 ms (batch 64, 2 cores)."""
        ckk = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        if self.out_channels < 32 or ckk < 64:
            return 1
        return max(1, min(8, 1200 // max(rows, 1)))

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if self.device == "cuda":
            dx = self._buf("dx", self._input()) if need_dx else None
            self._K.conv2d_backward(dx, self.dweight, self.dbias, self._buf("g", dy.shape), dy,
                                    self._x, self.weight, self._buffers["y"], *self.stride,
                                    *self.padding, need_dx, self.fused_relu)
            return dx
        kh, kw = self.kernel_size
        ci, co = self.in_channels, self.out_channels
        ckk = ci * kh * kw
        chunks = -(-n // _config.CHUNK)
        oh, ow = self.output_shape(self._in_shape[1:])[1:] if self._in_shape else (0, 0)
        dx = self._buf("dx", self._input()) if need_dx else self._buf("dx0", (n, 1, 1, 1))
        dw_parts = self._buf("dw_parts", (chunks, co, ckk))
        db_parts = self._buf("db_parts", (chunks, co))
        strategy = self.strategy
        if strategy in ("wide", "positions"):
            slots = _config.max_threads()
            ph, pw = self.padding
            h, w = self._x.shape[2], self._x.shape[3]
            hp, wp = h + 2 * ph, w + 2 * pw
            group = self._group(oh * ow if strategy == "positions" else (oh - 1) * wp + ow)
            y, argmax, pooled = self._buffers["y"], self._buffers["pool_argmax"], self.fused_pool is not None
            gmask = self._buf("gmask", (slots, y[0].size if pooled else 1))
        if strategy == "positions":
            gl = group * oh * ow
            wk = self._buf("wk", (co, kh, kw, ci))
            wk[...] = self.weight.transpose(0, 2, 3, 1)
            K.conv2d_backward_positions(
                dx, dw_parts, db_parts, self._buf("gw", (slots, co, gl)),
                self._buf("bcols", (slots, gl, ckk)),
                self._buf("dcols", (slots, gl, ckk) if need_dx else (slots, 1, 1)),
                self._buf("xt", (slots, hp * wp, ci)), gmask, dy, self._x, wk, y, argmax, *self.stride,
                ph, pw, kh, kw, _config.CHUNK, group, need_dx, self.fused_relu, pooled)
            dwk = self._buf("dwk", (co, kh, kw, ci))
            K.sum_chunks(dwk.reshape(-1), dw_parts.reshape(chunks, -1))
            self.dweight[...] = dwk.transpose(0, 3, 1, 2)
        else:
            if strategy == "wide":
                wide = (oh - 1) * wp + ow
                K.conv2d_backward_wide(
                    dx, dw_parts, db_parts, self._buf("gw", (slots, co, group * wide)),
                    self._buf("bcols", (slots, ckk, group * wide)),
                    self._buf("dcols", (slots, ckk, group * wide) if need_dx else (slots, 1, 1)),
                    self._buf("dpad", (slots, ci, hp, wp) if ph > 0 or pw > 0 else (slots, 1, 1, 1)),
                    gmask, dy, self._x, self.weight, y, argmax,
                    ph, pw, _config.CHUNK, group, need_dx, self.fused_relu, pooled)
            else:
                g_tmp = self._buf("g_tmp", (chunks, co, oh * ow) if self.fused_relu else (chunks, 1, 1))
                dcols = self._buf("dcols", (chunks, ckk, oh * ow) if need_dx else (chunks, 1, 1))
                K.conv2d_backward(dx, dw_parts, db_parts, dcols, g_tmp, dy, self._buffers["cols"],
                                  self.weight, self._buffers["y"], *self.stride, *self.padding,
                                  _config.CHUNK, need_dx, self.fused_relu)
            K.sum_chunks(self.dweight.reshape(-1), dw_parts.reshape(chunks, -1))
        K.sum_chunks(self.dbias, db_parts)
        return dx if need_dx else None

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
    kind = "Pool"

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
        return (c, _conv_out(h, kh, sh, ph), _conv_out(w, kw, sw, pw))

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

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.fused:
            self._in_shape = tuple(x.shape)
            return x
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        argmax = self._buf("argmax", out_shape, np.int32)
        if self.device == "cuda":
            self._K.maxpool2d_forward(y, argmax, x, *self.kernel_size, *self.stride, *self.padding)
        elif self.padding == (0, 0):
            K.maxpool2d_forward_nopad(y, argmax, np.ascontiguousarray(x), *self.kernel_size,
                                      *self.stride)
        else:
            K.maxpool2d_forward(y, argmax, np.ascontiguousarray(x), *self.kernel_size, *self.stride,
                                *self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        if self.fused:
            dy = self._check_grad(dy, self._in_shape or ())
            return dy if need_dx else None
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        if self.device == "cuda":
            self._K.maxpool2d_backward(dx, dy, self._buffers["argmax"], *self.kernel_size,
                                       *self.stride, *self.padding)
        else:
            K.maxpool2d_backward(dx, dy, self._buffers["argmax"])
        return dx


class AvgPool2D(_Pool2D):
    """Average pooling as ``torch.nn.AvgPool2d`` (zero padding counted in the mean)."""

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        if self.device != "cuda":
            x = np.ascontiguousarray(x)
        self._K.avgpool2d_forward(y, x, *self.kernel_size, *self.stride, *self.padding)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        self._K.avgpool2d_backward(dx, dy, *self.kernel_size, *self.stride, *self.padding)
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

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        if self.device == "cuda":
            self._x = x
            self._K.dense_forward(y, x, self.weight, self.bias)
            return y
        self._x = np.ascontiguousarray(x)
        K.dense_forward(y, self._x, self.weight, self.bias)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n, self.out_features))
        if self.device == "cuda":
            dx = self._buf("dx", self._input()) if need_dx else None
            self._K.dense_backward(dx, self.dweight, self.dbias, dy, self._x, self.weight, need_dx)
            return dx
        dx = self._buf("dx", self._input()) if need_dx else self._buf("dx0", (n, 1))
        K.dense_backward(dx, self.dweight, self.dbias, dy, self._x, self.weight, need_dx)
        return dx if need_dx else None

    def get_config(self) -> dict[str, Any]:
        return {"in_features": self.in_features, "out_features": self.out_features}

    def __repr__(self) -> str:
        return f"Dense({self.in_features}, {self.out_features})"


class _Elementwise(Layer):
    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        y = self._buf("y", out_shape)
        if self.device != "cuda":
            x = np.ascontiguousarray(x)
        self._apply(y.reshape(-1), x.reshape(-1), training)
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
        self._K.relu_forward(y, x)

    def _apply_backward(self, dx, dy):
        self._K.relu_backward(dx, dy, self._buffers["y"].reshape(-1))


class Tanh(_Elementwise):
    """Hyperbolic tangent."""

    def _apply(self, y, x, training):
        self._K.tanh_forward(y, x)

    def _apply_backward(self, dx, dy):
        self._K.tanh_backward(dx, dy, self._buffers["y"].reshape(-1))


class Dropout(_Elementwise):
    """Inverted dropout: zeroes each input with probability p and scales the rest by 1/(1-p).

    Identity when ``training=False``. The mask comes from ``rng`` (set by ``Sequential``'s seed).
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be a probability in [0, 1), got {p!r}")
        self.p = float(p)
        self.rng = np.random.default_rng()

    def reset_parameters(self, rng: np.random.Generator) -> None:
        self.rng = np.random.default_rng(rng.integers(2**63))

    def _apply(self, y, x, training):
        mask = np.empty(x.shape, np.float32)  # drawn on the host in both devices: same masks
        if training and self.p > 0.0:
            keep = self.rng.random(x.shape[0], dtype=np.float32) >= self.p
            np.multiply(keep, np.float32(1.0 / (1.0 - self.p)), out=mask)
        else:
            mask[:] = 1.0
        if self.device == "cuda":
            mask = _to_device(mask)
        self._buffers["mask"] = mask
        self._K.dropout_forward(y, x, mask)

    def _apply_backward(self, dx, dy):
        self._K.dropout_backward(dx, dy, self._buffers["mask"])

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
        if self.device == "cuda":
            return x.reshape(out_shape)
        return np.ascontiguousarray(x).reshape(out_shape)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n,) + self.output_shape(self._in_shape[1:]) if self._in_shape else ())
        return dy.reshape(self._in_shape) if need_dx else None


LAYER_TYPES: dict[str, type[Layer]] = {cls.__name__: cls for cls in (
    Conv2D, MaxPool2D, AvgPool2D, Dense, ReLU, Tanh, Dropout, Flatten)}


def layer_from_config(kind: str, config: dict[str, Any]) -> Layer:
    """Rebuild a layer from its class name and ``get_config()`` (used by checkpoints)."""
    if kind not in LAYER_TYPES:
        raise ValueError(f"unknown layer type {kind!r}")
    cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    return LAYER_TYPES[kind](**cfg)
