"""Concat: parallel branches over one input, their outputs joined along the channels (an Inception
module's kernels of several lengths beside a pooled path)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .base import Builder, Layer, Shape, layer_from_config, register
from .block import Block


@register
class Concat(Block):
    """Each branch (a list of layers) runs on the same input; the output is their outputs one after
    the other along axis 1 (``torch.cat(dim=1)``): the branches must agree on every other axis.
    The gradient reaching the input is the sum of the branches' input gradients. Parameter names
    nest as a ``torch.nn.ModuleList`` of ``Sequential``s: "branches.1.0.weight". Spec:
    ``cat(conv1d(32,9,padding=same) | conv1d(32,19,padding=same) | maxpool1d(3,stride=1,padding=1))``.
    """

    token = "cat"  # cat(layers | layers | ...): branches separated by '|'

    def __init__(self, branches: Iterable[Iterable[Layer]]) -> None:
        super().__init__()
        self.branches: list[list[Layer]] = [list(b) for b in branches]
        if len(self.branches) < 2:
            raise ValueError("Concat: needs at least two branches")
        for i, branch in enumerate(self.branches):
            if not branch:
                raise ValueError(f"Concat: branch {i} has no layers")
            for j, layer in enumerate(branch):
                if not isinstance(layer, Layer):
                    raise ValueError(f"Concat: branch {i} item {j} is {type(layer).__name__}, not a "
                                     f"numbacnn layer")
        self.name = ""

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        return [cls([build(branch, shape)[0] for branch in args["branches"]])]

    def paths(self) -> list[tuple[str, list[Layer]]]:
        return [(f"branches.{i}", branch) for i, branch in enumerate(self.branches)]

    def _shapes(self, in_shape: Shape) -> list[Shape]:
        out = []
        for branch in self.branches:
            shape = in_shape
            for layer in branch:
                shape = layer.output_shape(shape)
            out.append(shape)
        return out

    def output_shape(self, in_shape: Shape) -> Shape:
        shapes = self._shapes(in_shape)
        rest = {s[1:] for s in shapes}
        if len(rest) != 1 or any(len(s) < 2 for s in shapes):
            raise ValueError(f"{self._label()}: the branches give {', '.join(str(s) for s in shapes)}: "
                             f"they must agree on every axis but the channels")
        return (sum(s[0] for s in shapes),) + shapes[0][1:]

    def _run(self, x: np.ndarray, training: bool, inference: bool) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c_all, rest = out_shape[0], out_shape[1], math.prod(out_shape[2:])
        y = self._buf("y", out_shape)
        y4 = y.reshape(n, c_all, 1, rest)
        at = 0
        for branch in self.branches:
            h = self.backend.asarray(x)
            for layer in branch:
                h = layer.infer(h) if inference else layer.forward(h, training)
            c = h.shape[1]
            self.backend.run("copy_strided", y4[:, at:at + c], h.reshape(n, c, 1, rest))
            at += c
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._buffers["y"].shape if "y" in self._buffers else ())
        n, c_all = dy.shape[:2]
        rest = math.prod(dy.shape[2:])
        dy4 = dy.reshape(n, c_all, 1, rest)
        grads, at = [], 0
        for i, (shape, branch) in enumerate(zip(self._shapes(self._input()[1:]), self.branches)):
            c = shape[0]
            g: Any = self._buf(f"dy{i}", (n, *shape))
            self.backend.run("copy_strided", g.reshape(n, c, 1, rest), dy4[:, at:at + c])
            at += c
            for j in range(len(branch) - 1, -1, -1):
                g = branch[j].backward(g, need_dx=need_dx or j > 0)
            grads.append(g)
        if not need_dx:
            return None
        dx = self._buf("dx", self._input())
        flat = dx.reshape(-1)
        self.backend.run("add", flat, grads[0].reshape(-1), grads[1].reshape(-1), False)
        for g in grads[2:]:
            self.backend.run("add", flat, flat, g.reshape(-1), False)
        return dx

    def onnx(self, graph: Any, x: str) -> str:
        outs = [graph.chain(branch, f"branches.{i}.", x) for i, branch in enumerate(self.branches)]
        return graph.node("Concat", outs, "concat", axis=1)

    def torch_twin(self, torch: Any) -> Any:
        nn = torch.nn

        class Concat(torch.nn.Module):
            def __init__(self, branches):
                super().__init__()
                self.branches = nn.ModuleList(nn.Sequential(*b) for b in branches)

            def forward(self, x):
                return torch.cat([b(x) for b in self.branches], dim=1)
        return Concat([[sub.torch_twin(torch) for sub in branch] for branch in self.branches])

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        """Each branch's channels traced through it, added."""
        total = np.zeros(in_shape, np.int64)
        at = 0
        for branch in self.branches:
            shapes = [tuple(in_shape)]
            for sub in branch:
                shapes.append(sub.output_shape(shapes[-1]))
            c = shapes[-1][0]
            h = counts[at:at + c]
            at += c
            for j in range(len(branch) - 1, -1, -1):
                try:
                    h = branch[j].trace_back(h, shapes[j])
                except ValueError as e:
                    raise ValueError(f"inside {self!r}: {e}") from None
            total += h
        return total

    def get_config(self) -> dict[str, Any]:
        return {"branches": [[[type(layer).__name__, layer.get_config()] for layer in b]
                             for b in self.branches]}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        return cls([[layer_from_config(k, c) for k, c in b] for b in config["branches"]])

    def __repr__(self) -> str:
        return "Concat([" + ", ".join("[" + ", ".join(map(repr, b)) + "]" for b in self.branches) + "])"
