"""Architecture specs: presets and the "conv(32,3),relu,maxpool(2),dense(128)" grammar shared by the
command line and the scikit-learn estimator."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .layers import TOKENS, Dense, Flatten, Layer, Normalize
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
# airbench94's network (Keller Jordan's CIFAR-10 speed record) for colour 32x32 inputs: a 2x2
# whitening conv and three conv-pool-bn-gelu blocks of 64, 256, 256 channels; the recipe
# (numbacnn/recipes.py) ends it with a bias-free dense layer and a 1/9 scale
PRESETS["airbench94"] = (
    "conv(24,2),gelu,"
    "conv(64,3,padding=same,bias=False),maxpool(2),bn(1e-12,0.4),gelu,"
    "conv(64,3,padding=same,bias=False),bn(1e-12,0.4),gelu,"
    "conv(256,3,padding=same,bias=False),maxpool(2),bn(1e-12,0.4),gelu,"
    "conv(256,3,padding=same,bias=False),bn(1e-12,0.4),gelu,"
    "conv(256,3,padding=same,bias=False),maxpool(2),bn(1e-12,0.4),gelu,"
    "conv(256,3,padding=same,bias=False),bn(1e-12,0.4),gelu,"
    "maxpool(3)")


def _inverted_residuals(c_in: int, stages: tuple[tuple[int, int, int, int], ...]) -> list[str]:
    """MobileNetV2's blocks for stages of (expansion t, output channels c, blocks n, first stride
    s): a 1x1 expansion to t * C_in (none when t = 1), a 3x3 depthwise convolution, a linear 1x1
    projection, each with BatchNorm and ReLU6 but the last; a residual where the shapes match."""
    blocks = []
    for t, c, n, s in stages:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            body = (f"conv({hidden},1,bias=False),bn,relu6," if t != 1 else "")
            body += (f"dwconv(3,stride={stride},padding=1,bias=False),bn,relu6,"
                     f"conv({c},1,bias=False),bn")
            blocks.append(f"res({body})" if stride == 1 and c_in == c else body)
            c_in = c
    return blocks


def _separable(stages: tuple[tuple[int, int], ...], kernel: str = "3", padding: str = "1") -> list[str]:
    """Depthwise-separable blocks (MobileNetV1, DS-CNN) for stages of (output channels, stride):
    a depthwise convolution and a 1x1 pointwise one, each with BatchNorm and ReLU."""
    return [f"dwconv({kernel},stride={s},padding={padding},bias=False),bn,relu,conv({c},1,bias=False),bn,relu"
            for c, s in stages]


# MobileNetV2 (Sandler et al. 2018) in its CIFAR form: stride 1 in the stem and the first two
# stages for 32x32 inputs, widths 32-320, a 1280-channel 1x1 head, global pooling
PRESETS["mobilenetv2"] = ",".join([
    "conv(32,3,padding=1,bias=False),bn,relu6",
    *_inverted_residuals(32, ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                              (6, 160, 3, 2), (6, 320, 1, 1))),
    "conv(1280,1,bias=False),bn,relu6,gap"])
# MLPerf Tiny's visual wake words model: MobileNetV1 at width 0.25 (Howard et al. 2017) on 96x96
# colour images, 13 depthwise-separable blocks of 16-256 channels
PRESETS["mobilenetv1-025"] = ",".join([
    "conv(8,3,stride=2,padding=1,bias=False),bn,relu",
    *_separable(((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1), (128, 1),
                 (128, 1), (128, 1), (256, 2), (256, 1))),
    "gap"])
# MLPerf Tiny's keyword spotting DS-CNN on 49x10 MFCC frames: a (10, 4) stride-2 stem of 64
# channels (Keras's "same" padding on 49x10: 4 rows above, 5 below, a column each side), four
# depthwise-separable blocks, dropout, global pooling
PRESETS["dscnn"] = ",".join([
    "conv(64,(10,4),stride=2,padding=((4,5),(1,1)),bias=False),bn,relu,dropout(0.2)",
    *_separable(((64, 1),) * 4), "dropout(0.4),gap"])
# Series (C, L). Wang et al. 2017's fully convolutional network (FCN) and ResNet for time series
# classification: 1-D convolutions of kernels 8, 5, 3 with BatchNorm and ReLU, global pooling
PRESETS["fcn"] = ("conv1d(128,8,padding=same),bn,relu,conv1d(256,5,padding=same),bn,relu,"
                  "conv1d(128,3,padding=same),bn,relu,gap")
PRESETS["resnet1d"] = ",".join(
    f"res(conv1d({c},8,padding=same),bn,relu,conv1d({c},5,padding=same),bn,relu,conv1d({c},3,padding=same),bn),relu"
    for c in (64, 128, 128)) + ",gap"


def _inception_modules(n: int = 6, filters: int = 32, kernels: tuple[int, ...] = (40, 20, 10),
                       bottleneck: int = 32) -> list[str]:
    """InceptionTime's network (Fawaz et al. 2020): ``n`` Inception modules, each a 1x1 bottleneck
    feeding convolutions of ``kernels`` beside a max pool and 1x1 convolution, concatenated
    (4 x ``filters`` channels), BatchNorm and ReLU; a residual block around every three modules
    (a 1x1 projection and BatchNorm where the channels change)."""
    convs = "|".join(f"conv1d({filters},{k},padding=same,bias=False)" for k in kernels)
    module = (f"cat(conv1d({bottleneck},1,bias=False),cat({convs})|"
              f"maxpool1d(3,stride=1,padding=1),conv1d({filters},1,bias=False)),bn,relu")
    return [f"res({','.join([module] * 3)}),relu" for _ in range(n // 3)]


PRESETS["inceptiontime"] = ",".join([*_inception_modules(), "gap"])
# MNIST-1D's CNN (Greydanus 2020): three strided convolutions of 25 channels, a dense classifier
PRESETS["mnist1dcnn"] = ("conv1d(25,5,stride=2,padding=1),relu,conv1d(25,3,stride=2,padding=1),relu,"
                         "conv1d(25,3,stride=2,padding=1),relu")
# the default for series ("auto"): FCN's three blocks at half FCN's widths
PRESETS["series"] = ("conv1d(64,8,padding=same),bn,relu,conv1d(128,5,padding=same),bn,relu,"
                     "conv1d(64,3,padding=same),bn,relu,gap")
# the default for regression on series ("auto"): positions kept (two pools, then dense layers, no
# global pooling), as aligned series such as spectra need (Tecator: benchmarks/series.py)
PRESETS["series-dense"] = ("conv1d(16,7,padding=same),bn,relu,maxpool1d(2),conv1d(32,5,padding=same),bn,relu,"
                           "maxpool1d(2),dense(64),relu")
DEFAULT_ARCH = "auto"


def resolve_preset(spec: str, input_shape: tuple[int, ...], regression: bool = False) -> str:
    """"auto" -> "series" for series (C, L) ("series-dense" for regression), "compact" for images
    up to 16x16, else "modern"; other specs unchanged."""
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        if len(input_shape) == 2:
            return "series-dense" if regression else "series"
        return "compact" if max(input_shape[1:]) <= 16 else "modern"
    return spec

_TOKEN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*$", re.S)


class ArchitectureError(ValueError):
    """A bad architecture spec; the message names the offending token."""


class _TooDeep(ArchitectureError):
    """Blocks nested past MAX_NESTING: said once, not wrapped by every level around it."""


@dataclass
class LayerSpec:
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    token: str = ""


def _split_top(text: str, sep: str = ",") -> list[str]:
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
        if ch == sep and depth == 0:
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


MAX_NESTING = 32  # res(...) and cat(...) inside each other: deeper is refused, not a RecursionError


def parse_architecture(spec: str, _depth: int = 0) -> list[LayerSpec]:
    """Parse a preset name or a spec string into LayerSpecs (no final classifier layer)."""
    if _depth > MAX_NESTING:
        raise _TooDeep(f"res(...) and cat(...) blocks nested more than {MAX_NESTING} deep")
    if not isinstance(spec, str) or not spec.strip():
        raise ArchitectureError(f"architecture must be a preset (auto, {', '.join(PRESETS)}) or a spec "
                                f"string, got {spec!r}")
    text = PRESETS.get(spec.strip().lower(), spec)
    out = []
    for i, token in enumerate(_split_top(text), start=1):
        shown = token.strip()
        where = f"token {i} {shown if len(shown) <= 80 else shown[:77] + '...'!r}"
        m = _TOKEN.match(token)
        if not m:
            raise ArchitectureError(f"cannot parse {where}: expected name or name(args)")
        kind, argtext = m.group(1).lower(), m.group(2)
        if kind in TOKENS:
            kind = TOKENS[kind].token  # type: ignore[assignment]  # an alias: the token itself
        if kind == "cat":
            parts = _split_top(argtext or "", "|")
            if len(parts) < 2 or not all(p.strip() for p in parts):
                raise ArchitectureError(f"cat needs two or more branches of layers separated by '|' at "
                                        f"{where}, e.g. cat(conv1d(32,9,padding=same) | "
                                        f"maxpool1d(3,stride=1,padding=1),conv1d(32,1))")
            try:
                branches = [parse_architecture(p, _depth + 1) for p in parts]
            except _TooDeep:
                raise
            except ArchitectureError as e:
                raise ArchitectureError(f"in the concatenation at {where}: {e}") from None
            out.append(LayerSpec("cat", {"branches": branches}, token.strip()))
            continue
        if kind == "res":
            if argtext is None or not argtext.strip():
                raise ArchitectureError(f"res needs the layers of its body at {where}, "
                                        f"e.g. res(conv(16,3,padding=same),bn,relu)")
            try:
                body = parse_architecture(argtext, _depth + 1)
            except _TooDeep:
                raise
            except ArchitectureError as e:
                raise ArchitectureError(f"in the residual block at {where}: {e}") from None
            out.append(LayerSpec("res", {"body": body}, token.strip()))
            continue
        if kind not in TOKENS:
            raise ArchitectureError(f"unknown layer {kind!r} at {where}; known layers: "
                                    f"{', '.join(known_tokens())} (or a preset: auto, {', '.join(PRESETS)})")
        names, defaults = TOKENS[kind].token_args, TOKENS[kind].token_defaults
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


def known_tokens() -> list[str]:
    """The layer names of the spec grammar (aliases left out), in the order the layers registered."""
    return [name for name, cls in TOKENS.items() if cls.token == name]


def build_layers(spec: str | list[LayerSpec], input_shape: tuple[int, ...], n_classes: int,
                 adapt: bool = False, regression: bool = False) -> list[Layer]:
    """Layers for a per-example input shape (C, H, W) ending in dense(n_classes).

    ``regression``: ``n_classes`` is the number of regression outputs (1 or more).
    ``adapt=True`` fits the spec to inputs too small for it (e.g. a 1 x n_features "image"): along
    an axis too short for a window, the window shrinks to 1; pools with nothing left to pool are
    skipped; convolutions whose kernel is longer than the axis get "same"-style padding.
    """
    specs = (parse_architecture(resolve_preset(spec, input_shape, regression)) if isinstance(spec, str)
             else spec)
    if not isinstance(n_classes, (int, np.integer)) or n_classes < (1 if regression else 2):
        least = "1 output" if regression else "2 classes"
        raise ArchitectureError(f"need at least {least}, got {n_classes!r}")
    layers, shape = _build(specs, tuple(int(s) for s in input_shape), adapt)
    if len(shape) > 1:  # images or series left: flattened for the classifier
        layers.append(Flatten())
        shape = layers[-1].output_shape(shape)
    layers.append(Dense(shape[0], int(n_classes)))
    return layers


def _build(specs: list[LayerSpec], shape: tuple[int, ...], adapt: bool
           ) -> tuple[list[Layer], tuple[int, ...]]:
    """The layers of ``specs`` on per-example input ``shape``, and their output shape."""
    layers: list[Layer] = []

    def build(nested: list[LayerSpec], in_shape: tuple[int, ...]) -> tuple[list[Layer], tuple[int, ...]]:
        return _build(nested, in_shape, adapt)

    for ls in specs:
        where = f"token {ls.token if len(ls.token) <= 80 else ls.token[:77] + '...'!r}"
        try:
            for layer in TOKENS[ls.kind].from_spec(dict(ls.args), shape, adapt, build):
                layers.append(layer)
                shape = layer.output_shape(shape)
        except ArchitectureError:
            raise
        except (ValueError, TypeError) as e:
            raise ArchitectureError(f"at {where} (input {shape}): {e}") from None
    return layers, shape


def build_network(spec: str, input_shape: tuple[int, ...], n_classes: int,
                  seed: int | np.random.Generator | None = None, adapt: bool = False,
                  normalize: Normalize | None = None, regression: bool = False) -> Sequential:
    """A Sequential for ``spec`` (preset or spec string) on inputs of shape (C, H, W) (series:
    (C, L)), ending in ``n_classes`` outputs (``regression``: that many targets); with
    ``normalize`` (e.g. ``Normalize.fit(x_train)``) that layer first, standardising each channel."""
    layers = build_layers(spec, input_shape, n_classes, adapt=adapt, regression=regression)
    try:
        net = Sequential(([normalize] if normalize is not None else []) + layers, seed=seed)
    except ValueError as e:  # too many parameters: before anything is allocated
        raise ArchitectureError(str(e)) from None
    net.architecture = spec
    net.input_shape = tuple(int(s) for s in input_shape)
    return net
