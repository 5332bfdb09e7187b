"""Elementwise layers: ReLU, Tanh, GELU, a constant Scale, and the mobile nets' ReLU6, sigmoid, SiLU,
hard sigmoid and hard swish, on flat views of any shape."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Layer, Shape, register


class _Elementwise(Layer):
    role = "activation"

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

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return counts.reshape(in_shape)


@register
class ReLU(_Elementwise):
    """max(x, 0); the gradient passes where the output is positive.

    In a Sequential right after a Conv2D, the convolution applies it (one pass over memory fewer
    each way) and this layer passes values and gradients through unchanged (``fusion.absorbed``).
    """

    token = "relu"

    def writes_nothing(self) -> bool:
        return self.fusion.absorbed

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Relu", [x], "act")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.ReLU()

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        if self.fusion.absorbed:
            self._check_input(x)
            return x
        return super().forward(x, training)

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        if self.fusion.absorbed:
            return self._check_grad(dy, self._in_shape or ()) if need_dx else None
        return super().backward(dy, need_dx)

    def _apply(self, y, x, training):
        self.backend.run("relu_forward", y, x)

    def _apply_backward(self, dx, dy):
        self.backend.run("relu_backward", dx, dy, self._buffers["y"].reshape(-1))


@register
class Tanh(_Elementwise):
    """Hyperbolic tangent."""

    token = "tanh"

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Tanh", [x], "act")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Tanh()

    def _apply(self, y, x, training):
        self.backend.run("tanh_forward", y, x)

    def _apply_backward(self, dx, dy):
        self.backend.run("tanh_backward", dx, dy, self._buffers["y"].reshape(-1))


@register
class GELU(_Elementwise):
    """x * Phi(x) with Phi the standard normal CDF, as ``torch.nn.GELU``: the exact form
    x/2 * (1 + erf(x / sqrt 2)) (``approximate="none"``, torch's default) or
    x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3))) (``approximate="tanh"``). The CPU kernel
    evaluates erf as a rational function, within 1.3e-6 of float64 (kernels/cpu/activations.py)."""

    token = "gelu"
    token_args = ("approximate",)
    token_defaults = {"approximate": "none"}
    FORMS = ("none", "tanh")

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in self.FORMS:
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def _apply(self, y, x, training):
        self._x = x  # the backward's input: GELU' is a function of x
        self.backend.run("gelu_forward", y, x, self.approximate == "tanh")

    def _apply_backward(self, dx, dy):
        self.backend.run("gelu_backward", dx, dy, self._x, self.approximate == "tanh")

    def onnx(self, graph: Any, x: str) -> str:
        # opset 17 has no Gelu operator: the formula in Erf (or Tanh), Mul and Add
        def step(op: str, a: str, b: str | float | None, part: str) -> str:
            inputs = [a] if b is None else [a, graph.const(b) if isinstance(b, float) else b]
            return graph.node(op, inputs, "gelu", out_suffix=part, name_suffix=part)
        if self.approximate == "tanh":
            cube = step("Mul", step("Mul", x, x, "_sq"), x, "_cube")
            inner = step("Add", x, step("Mul", cube, 0.044715, "_ax3"), "_inner")
            s = step("Tanh", step("Mul", inner, 0.7978845608028654, "_u"), None, "_s")
        else:
            s = step("Erf", step("Mul", x, 0.7071067811865476, "_z"), None, "_s")
        xs = step("Mul", x, step("Add", s, 1.0, "_1s"), "_x1s")
        return graph.node("Mul", [xs, graph.const(0.5)], "gelu")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.GELU(approximate=self.approximate)

    def get_config(self) -> dict[str, Any]:
        return {"approximate": self.approximate}

    def __repr__(self) -> str:
        return "GELU()" if self.approximate == "none" else f"GELU(approximate={self.approximate!r})"


@register
class Scale(_Elementwise):
    """y = factor * x: a constant output scale (airbench multiplies its logits by 1/9); nothing is
    trained."""

    token = "scale"
    token_args = ("factor",)
    role = ""

    def __init__(self, factor: float) -> None:
        super().__init__()
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor):
            raise ValueError(f"Scale: factor must be a finite number, got {factor!r}")
        self.factor = float(factor)

    def _apply(self, y, x, training):
        self.backend.run("scale", y, x, self.factor)

    def _apply_backward(self, dx, dy):
        self.backend.run("scale", dx, dy, self.factor)

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Mul", [x, graph.const(self.factor)], "scale")

    def torch_twin(self, torch: Any) -> Any:
        factor = self.factor

        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * factor
        return Scale()

    def get_config(self) -> dict[str, Any]:
        return {"factor": self.factor}

    def __repr__(self) -> str:
        return f"Scale({self.factor:g})"


class _Gate(_Elementwise):
    """The mobile nets' activations (kernels gates.py): ``code`` names the function there; the
    backward reads the forward's input."""

    code = -1

    def _apply(self, y, x, training):
        self._x = x
        self.backend.run("gate_forward", y, x, self.code)

    def _apply_backward(self, dx, dy):
        self.backend.run("gate_backward", dx, dy, self._x, self.code)


@register
class ReLU6(_Gate):
    """min(max(x, 0), 6), as ``torch.nn.ReLU6`` (MobileNetV1/V2)."""

    token = "relu6"
    code = 0

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Clip", [x, graph.const(0.0), graph.const(6.0)], "relu6")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.ReLU6()


@register
class Sigmoid(_Gate):
    """1 / (1 + exp(-x))."""

    token = "sigmoid"
    code = 1

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("Sigmoid", [x], "sigmoid")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Sigmoid()


@register
class SiLU(_Gate):
    """x * sigmoid(x) (swish), as ``torch.nn.SiLU`` (EfficientNet, MobileNetV3's SE-free stages)."""

    token = "silu"
    token_aliases = ("swish",)
    code = 2

    def onnx(self, graph: Any, x: str) -> str:
        s = graph.node("Sigmoid", [x], "silu", out_suffix="_s", name_suffix="_s")
        return graph.node("Mul", [x, s], "silu")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.SiLU()


@register
class HardSigmoid(_Gate):
    """relu6(x + 3) / 6, as ``torch.nn.Hardsigmoid`` (MobileNetV3's squeeze-and-excitation gate)."""

    token = "hardsigmoid"
    code = 3

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("HardSigmoid", [x], "hardsigmoid", alpha=1.0 / 6.0, beta=0.5)

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Hardsigmoid()


@register
class HardSwish(_Gate):
    """x * relu6(x + 3) / 6, as ``torch.nn.Hardswish`` (MobileNetV3)."""

    token = "hardswish"
    code = 4

    def onnx(self, graph: Any, x: str) -> str:
        return graph.node("HardSwish", [x], "hardswish")

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Hardswish()
