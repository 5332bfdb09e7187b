"""The layer base class, its helpers and the registry of layer types.

A layer module (conv.py, pool.py, ...) owns its classes and everything about them: parameters,
forward and backward through the backend, the spec token, the ONNX rule, the PyTorch twin, the
multiply-add count and the report's routing trace. Code outside ``numbacnn/layers`` asks a layer
(methods and class attributes declared here) and never switches on its type.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..backend import Backend, Workspace, get_backend

Shape = tuple[int, ...]
# arch's builder of nested specs: (specs, per-example input shape) -> (layers, output shape)
Builder = Callable[[Any, Shape], "tuple[list[Layer], Shape]"]


# the largest size, stride, padding or dilation a layer takes: the kernels index in 64-bit integers,
# and no real layer comes near it (a larger one is a typo or an attack, refused in one line)
MAX_SIZE = 2**31 - 1


def _pair(v: Any, what: str, layer: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, (tuple, list)) and len(v) == 2:
        a, b = v
    else:
        a = b = v
    for u in (a, b):
        if isinstance(u, bool) or not isinstance(u, (int, np.integer)) or not minimum <= u <= MAX_SIZE:
            raise ValueError(f"{layer}: {what} must be an integer in [{minimum}, {MAX_SIZE}] (or a pair), "
                             f"got {v!r}")
    return int(a), int(b)


def _compact(pair: tuple[int, int]) -> int | tuple[int, int]:
    return pair[0] if pair[0] == pair[1] else pair


def _positive_int(v: Any, what: str, layer: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_SIZE:
        raise ValueError(f"{layer}: {what} must be a positive integer (at most {MAX_SIZE}), got {v!r}")
    return int(v)


@dataclass(frozen=True)
class Fusion:
    """A layer's part in its chain's fusion plan (``fusion.plan``): work it does for the layers
    after it, or work a layer before it does in its place. Training and inference:
    ``relu`` (a Conv2D, BatchNorm2D or residual add applies the ReLU that follows), ``pool`` (a
    Conv2D max-pools its output by this window in its epilogue: forward returns the pooled output,
    backward takes the pooled gradient), ``absorbed`` (a ReLU or MaxPool2D whose work the layer
    before did: values and gradients pass through). Inference only (``Layer.infer``):
    ``infer_bn`` (the BatchNorm2D a Conv2D folds in, with that BatchNorm's ReLU), ``infer_pool``
    (the max pool such a Conv2D applies too), ``infer_layout`` (a Conv2D between Winograd layers: 1
    = its input comes channel-last, 2 = its output goes so), ``infer_absorbed`` (a BatchNorm2D
    folded, a MaxPool2D pooled by the convolution before it)."""

    relu: bool = False
    pool: tuple[int, int] | None = None
    absorbed: bool = False
    infer_bn: Any = None
    infer_pool: tuple[int, int] | None = None
    infer_layout: int = 0
    infer_absorbed: bool = False


NO_FUSION = Fusion()


class Layer:
    """Base class. Subclasses implement ``output_shape``, ``forward`` and ``backward``; they compute
    through ``self.backend`` (set with ``device``, by ``Sequential.to``) and keep their buffers in
    the backend's workspace ``self._buffers``."""

    param_names: tuple[str, ...] = ()
    # state that is not trained but saved (BatchNorm's running statistics): arrays of the layer's
    # backend, in state_dict after the parameters, moved with the layer
    buffer_names: tuple[str, ...] = ()
    name: str = ""  # set by Sequential to "layer i (Repr)"
    fusion: Fusion = NO_FUSION  # set by fusion.fuse_chain from its chain's plan

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

    @property
    def precision(self) -> str:
        """The multiplications' precision: "float32", or "bf16" (operands rounded to bfloat16,
        float32 sums, where the layer's plan has such kernels: ``bf16_layers``)."""
        return self.__dict__.get("_precision", "float32")

    @precision.setter
    def precision(self, precision: str) -> None:
        if precision != self.precision:
            self._precision = precision
            self.__dict__.pop("_plan", None)
            self._buffers = self.backend.workspace()
        for sub in self.sublayers():
            sub.precision = precision

    @property
    def runs_bf16(self) -> bool:
        """Whether some of this layer's multiplications run in bfloat16 (under precision "bf16")."""
        return False

    def set_name(self, name: str) -> None:
        """Name this layer in error messages ("layer 3 (Conv2D(1, 8, 3))"; a block names its own)."""
        self.name = name

    def sublayers(self) -> list[Layer]:
        """The layers inside this one (a residual block's), in parameter order."""
        return []

    def named_buffers(self) -> dict[str, Any]:
        """The saved non-parameter state by name ("running_mean", ...), as the layer's arrays."""
        return {k: getattr(self, k) for k in self.buffer_names}

    def paths(self) -> list[tuple[str, list[Layer]]]:
        """The chains of layers inside this one by name (a residual block's "body" and "shortcut"):
        fusion plans each chain on its own (``fusion.fuse_chain``)."""
        return []

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

    def _zero_bias(self, n: int) -> None:
        """A layer built with bias=False computes through its kernels with a bias of zeros (a fixed
        array of its backend, not a parameter) and a scratch array for the bias gradient they write."""
        for k in ("bias", "dbias"):
            arr = self.backend.empty((n,), np.float32)
            self.backend.write(arr, np.zeros(n, np.float32))
            setattr(self, k, arr)

    frozen: frozenset[str] = frozenset()  # parameters that training leaves as they are
    freeze_changes = 0  # counts every freeze or unfreeze of any layer: recorded steps compare it

    def freeze(self, *names: str) -> Layer:
        """Stop training these parameters (all of the layer's when none are named; a block's by
        their nested names, "body.0.weight"): optimizers leave them unchanged, ``state_dict`` and
        checkpoints keep them, and a convolution's or Dense layer's frozen weight costs no gradient
        work (its gradient is zeros). Returns the layer."""
        self._set_frozen(self._param_args(names, "freeze"), True)
        return self

    def unfreeze(self, *names: str) -> Layer:
        """Train these parameters again (all when none are named)."""
        self._set_frozen(self._param_args(names, "unfreeze"), False)
        return self

    @property
    def trainable(self) -> bool:
        """Whether any parameter of the layer trains; set False to freeze them all, True to unfreeze."""
        return any(not self.is_frozen(k) for k in self.param_shapes())

    @trainable.setter
    def trainable(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{self._label()}: trainable must be True or False, got {value!r}")
        self._set_frozen(tuple(self.param_shapes()), not value)

    def is_frozen(self, name: str) -> bool:
        """Whether parameter ``name`` (as in ``param_shapes``) is frozen."""
        return name in self.frozen

    def _param_args(self, names: tuple[str, ...], what: str) -> tuple[str, ...]:
        shapes = self.param_shapes()
        for n in names:
            if n not in shapes:
                have = ", ".join(shapes) or "no parameters"
                raise ValueError(f"{self._label()}: cannot {what} {n!r}: the layer has {have}")
        return names or tuple(shapes)

    def _set_frozen(self, names: tuple[str, ...], flag: bool) -> None:
        self.frozen = frozenset(self.frozen | set(names)) if flag else frozenset(self.frozen - set(names))
        Layer.freeze_changes += 1

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

    # --- the spec grammar ("conv(32,3),relu,..."; numbacnn/arch.py) ----------------------------
    # token: the layer's name in a spec (None: not in the grammar); token_args: its positional
    # parameters in order; token_defaults: those that may be left out; token_aliases: other names
    token: ClassVar[str | None] = None
    token_args: ClassVar[tuple[str, ...]] = ()
    token_defaults: ClassVar[dict[str, Any]] = {}
    token_aliases: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        """The layers that a spec token with arguments ``args`` stands for on per-example input
        ``shape`` (none, to skip it). ``adapt``: fit window sizes to inputs too small for them;
        ``build(specs, shape)``: the layers of nested specs and their output shape."""
        return [cls(**args)]

    # --- other views of the layer -------------------------------------------------------------
    # what a layer is for the training report's stages (analysis.feature_maps): "conv", "pool",
    # "activation" or ""
    role: ClassVar[str] = ""
    # inference writes no activation of its own (a view or the identity), fusions aside
    passes_through: ClassVar[bool] = False
    # the layer routes each window's gradient to its winner, readable as ``argmax`` after an
    # unfused forward (analysis.routing)
    keeps_argmax: ClassVar[bool] = False
    # the layer draws random numbers while training (``generator_state``, saved by checkpoints)
    draws_random: ClassVar[bool] = False
    # the fewest examples a training batch may hold (BatchNorm1D needs two)
    min_batch: ClassVar[int] = 1

    def smallest_batch(self, in_shape: Shape) -> int:
        """The fewest examples a training batch may hold for this layer on per-example inputs
        ``in_shape`` (BatchNorm: two values per channel to normalise by)."""
        return 1

    def generator_state(self) -> tuple[int, int]:
        """A ``draws_random`` layer's generator state, (seed, draws made)."""
        raise TypeError(f"{self._label()} draws no random numbers")

    def set_generator_state(self, seed: int, draws: int) -> None:
        raise TypeError(f"{self._label()} draws no random numbers")

    def writes_nothing(self) -> bool:
        """Whether this layer's inference writes no activation of its own: a view or the identity
        (``passes_through``), or fused into the layer before it (``fusion.fuse_chain``)."""
        return self.passes_through

    def onnx(self, graph: Any, x: str) -> str:
        """Append this layer's ONNX nodes, applied to tensor ``x``, to ``graph``
        (``onnx_export.Graph``: ``node``, ``param``, ``chain``); returns the output's name."""
        raise ValueError(f"no ONNX operator for {self!r}")

    def torch_twin(self, torch: Any) -> Any:
        """The ``torch.nn`` module computing what this layer computes (parameters in
        ``state_dict`` order; the weights are loaded by ``bench.torch_twin``)."""
        raise TypeError(f"no PyTorch twin for {self!r}")

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        """Path counts at this layer's output -> its input of per-example shape ``in_shape``
        (``analysis.trace_to_input``): windows spread them over their receptive fields,
        elementwise layers pass them on."""
        raise ValueError(f"cannot trace routing through {self!r}")


def _bias_flag(v: Any, layer: str) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{layer}: bias must be True or False, got {v!r}")
    return bool(v)


def _kaiming_uniform(rng: np.random.Generator, arr: np.ndarray, fan_in: int) -> None:
    # PyTorch: kaiming_uniform_(a=sqrt(5)) for weights and U(-1/sqrt(fan_in), ..) for biases
    # both reduce to a bound of 1/sqrt(fan_in).
    bound = 1.0 / math.sqrt(fan_in)
    arr[...] = rng.uniform(-bound, bound, size=arr.shape).astype(np.float32)


# Every public layer class by name (checkpoints rebuild layers from their class name and config),
# and by spec token (numbacnn/arch.py): filled as the layer modules define their classes.
LAYER_TYPES: dict[str, type[Layer]] = {}
TOKENS: dict[str, type[Layer]] = {}


def register(cls: type[Layer]) -> type[Layer]:
    """Class decorator: make a layer known to checkpoints and, if it has a ``token``, to the spec
    grammar (under its aliases too)."""
    LAYER_TYPES[cls.__name__] = cls
    if cls.__dict__.get("token"):
        for name in (cls.token, *cls.token_aliases):
            if name in TOKENS:
                raise ValueError(f"spec token {name!r} is taken by {TOKENS[name].__name__}")
            TOKENS[name] = cls  # type: ignore[index]
    return cls


def layer_from_config(kind: str, config: dict[str, Any]) -> Layer:
    """Rebuild a layer from its class name and ``get_config()`` (used by checkpoints)."""
    if kind not in LAYER_TYPES:
        raise ValueError(f"unknown layer type {kind!r}")
    return LAYER_TYPES[kind].from_config(config)


def receptive(g: np.ndarray, in_shape: Shape, k: tuple[int, int], s: tuple[int, int],
              p: tuple[int, int], all_channels: bool, d: tuple[int, int] = (1, 1),
              p_end: tuple[int, int] | None = None) -> np.ndarray:
    """Counts at a window layer's outputs (C', OH, OW) -> every input cell of each output's window
    (summed over the output channels and spread to every input channel for a convolution);
    dilation ``d``, padding ``p`` before and ``p_end`` (default: ``p``) after each axis."""
    c, h, w = in_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = k, s, p, d
    eh, ew = p_end or p
    oh, ow = g.shape[1:]
    src = g.sum(0, keepdims=True) if all_channels else g
    padded = np.zeros((src.shape[0], h + ph + eh + sh, w + pw + ew + sw), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            padded[:, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw] += src
    out = padded[:, ph:ph + h, pw:pw + w]
    return np.repeat(out, c, axis=0) if all_channels else out
