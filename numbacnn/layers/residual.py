"""Residual: a block whose output is body(x) + shortcut(x)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .base import Builder, Layer, Shape, layer_from_config, register
from .batchnorm import BatchNorm1D, BatchNorm2D
from .block import Block
from .conv import Conv2D
from .conv1d import Conv1D


@register
class Residual(Block):
    """A residual block: output = body(x) + shortcut(x), as in ResNets.

    ``layers``: the body, applied in order; ``shortcut``: None for the identity, or layers (e.g. a
    strided 1x1 Conv2D and a BatchNorm2D) where the body changes the shape. Both paths must give
    the same shape. The gradient reaching x is the sum of both paths' input gradients. Parameter
    names nest as torch's: "body.0.weight", "shortcut.0.weight", ...
    In a chain, a ReLU right after the block is applied by its add (``fusion.relu``; the ReLU then
    passes values and gradients through).
    """

    token = "res"  # res(layer, layer, ...): a residual block around those layers

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        """The block around the layers of its body; where the body changes the (C, H, W) shape,
        the shortcut is a projection: a 1x1 convolution with the stride that maps the input grid
        onto the output's, then BatchNorm."""
        body, out = build(args["body"], shape)
        if out == shape:
            return [cls(body)]
        if len(out) != len(shape) or len(shape) not in (2, 3):
            raise ValueError(f"the residual block maps {shape} to {out}: no projection shortcut for "
                             f"that (keep the body convolutional)")
        stride = []
        for ax in range(1, len(shape)):
            s = -(-shape[ax] // out[ax])
            if (shape[ax] - 1) // s + 1 != out[ax]:
                raise ValueError(f"the residual block maps {shape} to {out}: no 1x1 strided "
                                 f"projection gives that shape")
            stride.append(s)
        if len(shape) == 2:  # series: a strided 1-D projection
            return [cls(body, [Conv1D(shape[0], out[0], 1, stride=stride[0]), BatchNorm1D(out[0])])]
        return [cls(body, [Conv2D(shape[0], out[0], 1, stride=(stride[0], stride[1])), BatchNorm2D(out[0])])]

    def onnx(self, graph: Any, x: str) -> str:
        body = graph.chain(self.body, "body.", x)
        short = x if self.shortcut is None else graph.chain(self.shortcut, "shortcut.", x)
        return graph.node("Add", [body, short], "residual")

    def torch_twin(self, torch: Any) -> Any:
        nn = torch.nn

        class Residual(torch.nn.Module):
            def __init__(self, body, shortcut):
                super().__init__()
                self.body = nn.Sequential(*body)
                self.shortcut = nn.Sequential(*shortcut) if shortcut is not None else nn.Identity()

            def forward(self, x):
                return self.body(x) + self.shortcut(x)
        return Residual([sub.torch_twin(torch) for sub in self.body],
                        None if self.shortcut is None else [sub.torch_twin(torch) for sub in self.shortcut])

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        """Both paths' counts, added."""
        total = np.zeros(in_shape, np.int64)
        for path in (self.body, self.shortcut):
            if not path:
                total += counts.reshape(in_shape)
                continue
            shapes = [tuple(in_shape)]
            for sub in path:
                shapes.append(sub.output_shape(shapes[-1]))
            h = counts
            for j in range(len(path) - 1, -1, -1):
                try:
                    h = path[j].trace_back(h, shapes[j])
                except ValueError as e:
                    raise ValueError(f"inside {self!r}: {e}") from None
            total += h
        return total

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

    def paths(self) -> list[tuple[str, list[Layer]]]:
        return [("body", self.body)] + ([("shortcut", self.shortcut)] if self.shortcut else [])

    # --- computation --------------------------------------------------------------------------
    def output_shape(self, in_shape: Shape) -> Shape:
        shapes = []
        for _, path in self.paths():
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

    def _run(self, x: np.ndarray, training: bool, inference: bool) -> np.ndarray:
        out_shape = self._check_input(x)
        h = s = self.backend.asarray(x)
        for layer in self.body:
            h = layer.infer(h) if inference else layer.forward(h, training)
        for layer in self.shortcut or []:
            s = layer.infer(s) if inference else layer.forward(s, training)
        y = self._buf("y", out_shape)
        self.backend.run("add", y.reshape(-1), h.reshape(-1), s.reshape(-1), self.fusion.relu)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        if self.fusion.relu:  # the gradient through the ReLU that the forward applied
            masked = self._buf("dy_relu", dy.shape)
            self.backend.run("relu_backward", masked.reshape(-1), dy.reshape(-1),
                             self._buffers["y"].reshape(-1))
            dy = masked
        grads: list[Any] = []
        for _, path in self.paths():
            g: Any = dy
            for j in range(len(path) - 1, -1, -1):
                g = path[j].backward(g, need_dx=need_dx or j > 0)
            grads.append(g)
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        short = grads[1] if self.shortcut else dy
        self.backend.run("add", dx.reshape(-1), grads[0].reshape(-1), short.reshape(-1), False)
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
