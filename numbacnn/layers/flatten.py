"""Flatten: images to feature vectors (a view)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Builder, Layer, Shape, register


@register
class Flatten(Layer):
    """(N, C, H, W) -> (N, C*H*W) in C order, as ``torch.nn.Flatten``."""

    token = "flatten"
    passes_through = True

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        return [cls()] if len(shape) > 1 else []

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Flatten", [x], "flatten", axis=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Flatten()

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return counts.reshape(in_shape)

    def output_shape(self, in_shape: Shape) -> Shape:
        return (math.prod(in_shape),)

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        return self.backend.asarray(x).reshape(out_shape)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n,) + self.output_shape(self._in_shape[1:]) if self._in_shape else ())
        return dy.reshape(self._in_shape) if need_dx else None
