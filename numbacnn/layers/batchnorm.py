"""Batch normalisation: BatchNorm2D over images, BatchNorm1D over features."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Builder, Layer, Shape, _positive_int, register


@register
class BatchNorm2D(Layer):
    """Batch normalisation over (N, C, H, W) per channel, as ``torch.nn.BatchNorm2d``.

    Training: normalises with the batch's mean and biased variance and updates ``running_mean``
    and ``running_var`` (the unbiased variance) with ``momentum``; evaluation: normalises with the
    running statistics. ``weight`` (ones) and ``bias`` (zeros) are trained; the running statistics
    and ``num_batches_tracked`` are saved in ``state_dict`` under torch's names. In a Sequential a
    following ReLU is applied inside this layer's kernels (``fusion.relu``).
    """

    param_names = ("weight", "bias")
    buffer_names = ("running_mean", "running_var", "num_batches_tracked")
    spatial_dims: tuple[int, ...] = (2,)  # spatial axes of a per-example input: (C, H, W)
    weight: Any
    bias: Any
    dweight: Any
    dbias: Any

    token = "bn"
    token_args = ("eps", "momentum")
    token_defaults = {"eps": 1e-5, "momentum": 0.1}
    token_aliases = ("batchnorm",)

    @classmethod
    def from_spec(cls, args: dict[str, Any], shape: Shape, adapt: bool, build: Builder) -> list[Layer]:
        kind = BatchNorm2D if len(shape) == 3 else BatchNorm1D  # images, or features
        return [kind(shape[0], eps=args["eps"], momentum=args["momentum"])]

    def writes_nothing(self) -> bool:
        return self.fusion.infer_absorbed

    def smallest_batch(self, in_shape: Shape) -> int:
        return 1 if math.prod(in_shape[1:]) >= 2 else 2

    def onnx(self, graph: Any, x: str) -> str:
        # BatchNorm1D too: ONNX's BatchNormalization takes (N, C) and (N, C, L)
        stats = graph.param("weight", "bias", "running_mean", "running_var")
        return graph.node("BatchNormalization", [x, *stats], "batchnorm", epsilon=self.eps)

    def torch_twin(self, torch: Any) -> Any:
        kind = torch.nn.BatchNorm1d if isinstance(self, BatchNorm1D) else torch.nn.BatchNorm2d
        return kind(self.num_features, eps=self.eps, momentum=self.momentum)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return counts.reshape(in_shape)

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
        return x if self.fusion.infer_absorbed else self.forward(x, training=False)  # folded into the conv

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
            be.run("batchnorm_forward_train", y3, mean, invstd, self.running_mean, self.running_var,
                   self.num_batches_tracked, x3, self.weight, self.bias, self.eps, self.momentum,
                   self.fusion.relu)
        else:
            be.run("batchnorm_forward_eval", y3, mean, invstd, x3, self.running_mean, self.running_var,
                   self.weight, self.bias, self.eps, self.fusion.relu)
        return self._buffers["y"]

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        dy = self._check_grad(dy, self._in_shape or ())
        n, c, s = self._x.shape
        dx = self._buf("dx", self._input()) if need_dx else None
        dy3 = dy.reshape(n, c, s)
        self.backend.run("batchnorm_backward", dy3 if dx is None else dx.reshape(n, c, s), self.dweight,
                         self.dbias, dy3, self._x, self._y, self._buffers["mean"], self._buffers["invstd"],
                         self.weight, self.fusion.relu, self._batch_stats, dx is not None)
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


@register
class BatchNorm1D(BatchNorm2D):
    """Batch normalisation of (N, C) features (or (N, C, L)) per feature, as ``torch.nn.BatchNorm1d``.
    At batch 1 in training there is no variance to normalise by: a clear error, as torch's."""

    spatial_dims: tuple[int, ...] = (0, 1)
    min_batch = 2
