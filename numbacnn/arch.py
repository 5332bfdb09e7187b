"""Architecture specs: presets and the "conv(32,3),relu,maxpool(2),dense(128)" grammar shared by the
command line and the scikit-learn estimator."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .layers import (
    AvgPool2D,
    BatchNorm1D,
    BatchNorm2D,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool2D,
    Layer,
    MaxPool2D,
    Normalize,
    ReLU,
    Residual,
    Tanh,
)
from .network import Sequential

PRESETS: dict[str, str] = {
    # "auto" (the default) picks "compact" for inputs up to 16x16 and "modern" above
    "compact": "conv(32,3,padding=same),relu,conv(64,3,padding=same),relu,maxpool(2),"
               "dense(128),relu,dropout(0.5)",
    # "same" padding keeps it usable from 8x8 digits up to 28x28 MNIST
    "small": "conv(32,3,padding=same),relu,maxpool(2),conv(64,3,padding=same),relu,maxpool(2),"
             "dense(128),relu,dropout(0.25)",
    # the PyTorch reference net of shared/data/README.md and the benchmark
    "mnistcnn": "conv(32,3),relu,maxpool(2),conv(64,3),relu,maxpool(2),dense(128),relu",
    "lenet5": "conv(6,5),relu,maxpool(2),conv(16,5),relu,maxpool(2),dense(120),relu",
    "mlp": "dense(256),relu,dense(128),relu",
    # a current small CNN (docs/modern.md): four 3x3 convs with BatchNorm, two pools, dense 128
    "modern": "conv(32,3,padding=same),bn,relu,conv(32,3,padding=same),bn,relu,maxpool(2),"
              "conv(64,3,padding=same),bn,relu,conv(64,3,padding=same),bn,relu,maxpool(2),"
              "dense(128),relu,dropout(0.25)",
    # MLPerf Tiny's image-classification ResNet-8: a stem and three residual stages (16, 32, 64
    # channels; the 2nd and 3rd halve the resolution, with 1x1 projection shortcuts), global pooling
    "resnet8": "conv(16,3,padding=same),bn,relu,"
               "res(conv(16,3,padding=same),bn,relu,conv(16,3,padding=same),bn),relu,"
               "res(conv(32,3,stride=2,padding=1),bn,relu,conv(32,3,padding=same),bn),relu,"
               "res(conv(64,3,stride=2,padding=1),bn,relu,conv(64,3,padding=same),bn),relu,gap",
}
DEFAULT_ARCH = "auto"


def resolve_preset(spec: str, input_shape: tuple[int, ...]) -> str:
    """"auto" -> "compact" for images up to 16x16, else "modern"; other specs unchanged."""
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        return "compact" if max(input_shape[1:]) <= 16 else "modern"
    return spec

# name -> (positional parameter names, defaults)
_GRAMMAR: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "conv": (("filters", "kernel_size", "stride", "padding"), {"stride": 1, "padding": 0}),
    "maxpool": (("kernel_size", "stride", "padding"), {"stride": None, "padding": 0}),
    "avgpool": (("kernel_size", "stride", "padding"), {"stride": None, "padding": 0}),
    "dense": (("units",), {}),
    "relu": ((), {}),
    "tanh": ((), {}),
    "dropout": (("p",), {"p": 0.5}),
    "flatten": ((), {}),
    "bn": (("eps", "momentum"), {"eps": 1e-5, "momentum": 0.1}),
    "gap": ((), {}),
    "res": ((), {}),  # res(layer, layer, ...): a residual block around those layers
}
_ALIASES = {"batchnorm": "bn", "globalavgpool": "gap"}
_TOKEN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*$", re.S)


class ArchitectureError(ValueError):
    """A bad architecture spec; the message names the offending token."""


@dataclass
class LayerSpec:
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    token: str = ""


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ArchitectureError(f"unbalanced ')' in architecture {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ArchitectureError(f"unbalanced '(' in architecture {text!r}")
    parts.append("".join(cur))
    return parts


def _value(text: str) -> Any:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if re.fullmatch(r"[A-Za-z_]+", text):
            return text  # bare word, e.g. padding=same
        raise


def parse_architecture(spec: str) -> list[LayerSpec]:
    """Parse a preset name or a spec string into LayerSpecs (no final classifier layer)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ArchitectureError(f"architecture must be a preset (auto, {', '.join(PRESETS)}) or a spec "
                                f"string, got {spec!r}")
    text = PRESETS.get(spec.strip().lower(), spec)
    out = []
    for i, token in enumerate(_split_top(text), start=1):
        where = f"token {i} {token.strip()!r}"
        m = _TOKEN.match(token)
        if not m:
            raise ArchitectureError(f"cannot parse {where}: expected name or name(args)")
        kind, argtext = m.group(1).lower(), m.group(2)
        kind = _ALIASES.get(kind, kind)
        if kind == "res":
            if argtext is None or not argtext.strip():
                raise ArchitectureError(f"res needs the layers of its body at {where}, "
                                        f"e.g. res(conv(16,3,padding=same),bn,relu)")
            try:
                body = parse_architecture(argtext)
            except ArchitectureError as e:
                raise ArchitectureError(f"in the residual block at {where}: {e}") from None
            out.append(LayerSpec("res", {"body": body}, token.strip()))
            continue
        if kind not in _GRAMMAR:
            raise ArchitectureError(f"unknown layer {kind!r} at {where}; known layers: "
                                    f"{', '.join(_GRAMMAR)} (or a preset: auto, {', '.join(PRESETS)})")
        names, defaults = _GRAMMAR[kind]
        args: dict[str, Any] = {}
        if argtext is not None and argtext.strip():
            for j, a in enumerate(_split_top(argtext)):
                key, eq, val = a.partition("=")
                try:
                    if eq:
                        key = key.strip()
                        if key not in names:
                            raise ArchitectureError(f"{kind} has no argument {key!r} at {where}; "
                                                    f"it takes {', '.join(names) or 'none'}")
                        args[key] = _value(val)
                    else:
                        if j >= len(names):
                            raise ArchitectureError(f"too many arguments for {kind} at {where}")
                        args[names[j]] = _value(a)
                except (ValueError, SyntaxError) as e:
                    if isinstance(e, ArchitectureError):
                        raise
                    raise ArchitectureError(f"bad value {a.strip()!r} at {where}") from None
        missing = [n for n in names if n not in args and n not in defaults]
        if missing:
            raise ArchitectureError(f"{kind} needs {', '.join(missing)} at {where}")
        out.append(LayerSpec(kind, {**defaults, **args}, token.strip()))
    return out


def _as_pair(v: Any) -> tuple[int, int]:
    return (v[0], v[1]) if isinstance(v, (tuple, list)) and len(v) == 2 else (v, v)


def build_layers(spec: str | list[LayerSpec], input_shape: tuple[int, ...], n_classes: int,
                 adapt: bool = False) -> list[Layer]:
    """Layers for a per-example input shape (C, H, W) ending in dense(n_classes).

    ``adapt=True`` fits the spec to inputs too small for it (e.g. a 1 x n_features "image"): along
    an axis too short for a window, the window shrinks to 1; pools with nothing left to pool are
    skipped; convolutions whose kernel is longer than the axis get "same"-style padding.
    """
    specs = parse_architecture(resolve_preset(spec, input_shape)) if isinstance(spec, str) else spec
    if not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
        raise ArchitectureError(f"need at least 2 classes, got {n_classes!r}")
    layers, shape = _build(specs, tuple(int(s) for s in input_shape), adapt)
    if len(shape) == 3:
        layers.append(Flatten())
        shape = layers[-1].output_shape(shape)
    layers.append(Dense(shape[0], int(n_classes)))
    return layers


def _build(specs: list[LayerSpec], shape: tuple[int, ...], adapt: bool
           ) -> tuple[list[Layer], tuple[int, ...]]:
    """The layers of ``specs`` on per-example input ``shape``, and their output shape."""
    layers: list[Layer] = []
    for ls in specs:
        a = ls.args
        where = f"token {ls.token!r}"
        try:
            if ls.kind == "dense" and len(shape) == 3:
                layers.append(Flatten())
                shape = layers[-1].output_shape(shape)
            if ls.kind == "conv":
                if len(shape) != 3:
                    raise ArchitectureError(f"conv after flatten/dense at {where}")
                k, s, p = _as_pair(a["kernel_size"]), _as_pair(a["stride"]), a["padding"]
                if adapt:
                    k, s, p = _adapt_conv(shape, k, s, p)
                layers.append(Conv2D(shape[0], a["filters"], k, stride=s, padding=p))
            elif ls.kind in ("maxpool", "avgpool"):
                if len(shape) != 3:
                    raise ArchitectureError(f"{ls.kind} after flatten/dense at {where}")
                k = _as_pair(a["kernel_size"])
                s = k if a["stride"] is None else _as_pair(a["stride"])
                p = _as_pair(a["padding"])
                if adapt:
                    k, s, p = _adapt_pool(shape, k, s, p)
                    if k == (1, 1) and s == (1, 1):
                        continue  # nothing to pool along either axis
                layers.append((MaxPool2D if ls.kind == "maxpool" else AvgPool2D)(k, stride=s, padding=p))
            elif ls.kind == "dense":
                layers.append(Dense(shape[0], a["units"]))
            elif ls.kind == "flatten":
                if len(shape) == 1:
                    continue
                layers.append(Flatten())
            elif ls.kind == "relu":
                layers.append(ReLU())
            elif ls.kind == "tanh":
                layers.append(Tanh())
            elif ls.kind == "dropout":
                layers.append(Dropout(a["p"]))
            elif ls.kind == "bn":
                bn = BatchNorm2D if len(shape) == 3 else BatchNorm1D
                layers.append(bn(shape[0], eps=a["eps"], momentum=a["momentum"]))
            elif ls.kind == "gap":
                if len(shape) != 3:
                    raise ArchitectureError(f"gap after flatten/dense at {where}")
                layers.append(GlobalAvgPool2D())
            elif ls.kind == "res":
                layers.append(_residual(a["body"], shape, adapt, where))
            shape = layers[-1].output_shape(shape)
        except ArchitectureError:
            raise
        except (ValueError, TypeError) as e:
            raise ArchitectureError(f"at {where} (input {shape}): {e}") from None
    return layers, shape


def _residual(body_specs: list[LayerSpec], shape: tuple[int, ...], adapt: bool, where: str) -> Residual:
    """A residual block; where the body changes the (C, H, W) shape, the shortcut is a projection:
    a 1x1 convolution with the stride that maps the input grid onto the output's, then BatchNorm."""
    body, out = _build(body_specs, shape, adapt)
    if out == shape:
        return Residual(body)
    if len(out) != 3 or len(shape) != 3:
        raise ArchitectureError(f"the residual block at {where} maps {shape} to {out}: no projection "
                                f"shortcut for that (keep the body convolutional)")
    stride = []
    for ax in (1, 2):
        s = -(-shape[ax] // out[ax])
        if (shape[ax] - 1) // s + 1 != out[ax]:
            raise ArchitectureError(f"the residual block at {where} maps {shape} to {out}: no 1x1 "
                                    f"strided projection gives that shape")
        stride.append(s)
    short = [Conv2D(shape[0], out[0], 1, stride=(stride[0], stride[1])), BatchNorm2D(out[0])]
    return Residual(body, short)


def _adapt_conv(shape, k, s, p):
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


def _adapt_pool(shape, k, s, p):
    k, s, p = list(k), list(s), list(p)
    for ax in range(2):
        if shape[1 + ax] < k[ax]:
            k[ax], s[ax], p[ax] = 1, 1, 0
    return tuple(k), tuple(s), tuple(p)


def build_network(spec: str, input_shape: tuple[int, ...], n_classes: int,
                  seed: int | np.random.Generator | None = None, adapt: bool = False,
                  normalize: Normalize | None = None) -> Sequential:
    """A Sequential for ``spec`` (preset or spec string) on inputs of shape (C, H, W); with
    ``normalize`` (e.g. ``Normalize.fit(x_train)``) that layer first, standardising each channel."""
    layers = build_layers(spec, input_shape, n_classes, adapt=adapt)
    net = Sequential(([normalize] if normalize is not None else []) + layers, seed=seed)
    net.architecture = spec
    net.input_shape = tuple(int(s) for s in input_shape)
    return net
