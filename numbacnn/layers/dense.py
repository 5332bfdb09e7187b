"""Dense: the fully connected layer."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Builder, Layer, Shape, _bias_flag, _kaiming_uniform, _positive_int, register
from .flatten import Flatten


@register
class Dense(Layer):
    """Fully connected layer, weight (out_features, in_features), as ``torch.nn.Linear``;
    ``bias=False`` for none."""

    param_names: tuple[str, ...] = ("weight", "bias")
    use_bias = True
    weight: Any  # (out_features, in_features)
    bias: Any
    dweight: Any
    dbias: Any

    token = "dense"
    token_args = ("units", "bias")
    token_defaults = {"bias": True}

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        flat: list[Layer] = [Flatten()] if len(shape) > 1 else []  # a dense after images flattens them
        return flat + [cls(math.prod(shape), args["units"], bias=args["bias"])]

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Gemm", [x, *graph.param(*self.param_names)], "dense", transB=1)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Linear(self.in_features, self.out_features, bias=self.use_bias)

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features", "Dense")
        self.out_features = _positive_int(out_features, "out_features", "Dense")
        self.use_bias = _bias_flag(bias, "Dense")
        if not self.use_bias:
            self.param_names = ("weight",)

    def param_shapes(self) -> dict[str, Shape]:
        shapes: dict[str, Shape] = {"weight": (self.out_features, self.in_features)}
        if self.use_bias:
            shapes["bias"] = (self.out_features,)
        return shapes

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             net_views: bool = False) -> None:
        super().bind(params, grads, net_views)
        if not self.use_bias:
            self._zero_bias(self.out_features)

    def reset_parameters(self, rng: np.random.Generator) -> None:
        _kaiming_uniform(rng, self.weight, self.in_features)
        if self.use_bias:
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
        self.backend.run("dense_forward", y, self._x, self.weight, self.bias)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        n = self._in_shape[0] if self._in_shape else 0
        dy = self._check_grad(dy, (n, self.out_features))
        dx = self._buf("dx", self._input()) if need_dx else None
        # without dx the kernel writes none: a (1, 1) stand-in keeps its signature
        self.backend.run("dense_backward", self._buf("no_dx", (1, 1)) if dx is None else dx, self.dweight,
                         self.dbias, dy, self._x, self.weight, dx is not None, not self.is_frozen("weight"))
        return dx

    def get_config(self) -> dict[str, Any]:
        return {"in_features": self.in_features, "out_features": self.out_features,
                **({} if self.use_bias else {"bias": False})}

    def __repr__(self) -> str:
        return f"Dense({self.in_features}, {self.out_features}{'' if self.use_bias else ', bias=False'})"
