"""Normalize: per-channel standardisation of the input with statistics saved in the network."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Layer, Shape, register


@register
class Normalize(Layer):
    """Per-channel standardisation of the input, y = (x - mean[c]) / std[c] (torchvision's
    ``Normalize``), as a network's first layer: the training set's channel statistics travel with
    the weights (``state_dict`` "mean" and "std", checkpoints, ONNX), so that prediction, evaluation
    and exported models apply them. Nothing is trained."""

    buffer_names = ("mean", "std")

    def onnx(self, graph: Any, x: str) -> str:
        # (x - mean) / std, the statistics shaped (C, 1, 1) for images, (C, 1) for series
        mean, std = graph.param("mean", "std", shape=(self.num_channels,) + (1,) * graph.spatial)
        centred = graph.node("Sub", [x, mean], "centre", out_suffix="_centred")
        return graph.node("Div", [centred, std], "scale")

    def torch_twin(self, torch: Any) -> Any:
        class Normalize(torch.nn.Module):  # torchvision's Normalize as a module with saved statistics
            def __init__(self, channels):
                super().__init__()
                self.register_buffer("mean", torch.zeros(channels))
                self.register_buffer("std", torch.ones(channels))

            def forward(self, x):
                shape = (-1,) + (1,) * (x.dim() - 2)  # images or series
                return (x - self.mean.view(shape)) / self.std.view(shape)
        return Normalize(self.num_channels)

    def trace_back(self, counts: np.ndarray, in_shape: Shape) -> np.ndarray:
        return counts.reshape(in_shape)

    def __init__(self, mean: Any, std: Any) -> None:
        super().__init__()
        m = np.ascontiguousarray(mean, dtype=np.float32).reshape(-1)
        sd = np.ascontiguousarray(std, dtype=np.float32).reshape(-1)
        if m.size == 0 or m.shape != sd.shape:
            raise ValueError(f"Normalize: mean and std need one value per channel, got {m.size} and "
                             f"{sd.size}")
        if not (np.isfinite(m).all() and np.isfinite(sd).all() and (sd > 0).all()):
            raise ValueError("Normalize: mean must be finite and std finite and positive")
        self.num_channels = int(m.size)
        self.mean, self.std = m, sd

    @classmethod
    def fit(cls, x: np.ndarray) -> Normalize:
        """The layer for images x (N, C, H, W) or series (N, C, L): each channel's mean and
        standard deviation, in float64 (a constant channel gets std 1)."""
        axes = (0, *range(2, x.ndim))  # images (N, C, H, W) or series (N, C, L)
        m = x.mean(axis=axes, dtype=np.float64)
        sd = x.std(axis=axes, dtype=np.float64)
        return cls(m, np.where(sd > 0, sd, 1.0))

    def output_shape(self, in_shape: Shape) -> Shape:
        if len(in_shape) not in (2, 3) or in_shape[0] != self.num_channels:
            raise ValueError(f"{self._label()}: expected input of shape (N, {self.num_channels}, H, W) or "
                             f"(N, {self.num_channels}, L), "
                             f"got (N, {', '.join(map(str, in_shape))})")
        return in_shape

    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        out_shape = self._check_input(x)
        n, c = out_shape[0], self.num_channels
        y = self._buf("y", out_shape)
        self.backend.run("normalize_forward", y.reshape(n, c, -1),
                         self.backend.asarray(x).reshape(n, c, -1), self.mean, self.std)
        return y

    def backward(self, dy: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        shape = self._input()
        dy = self._check_grad(dy, shape)
        if not need_dx:
            return None
        dx = self._buf("dx", shape)
        n, c = shape[0], shape[1]
        self.backend.run("normalize_backward", dx.reshape(n, c, -1), dy.reshape(n, c, -1), self.std)
        return dx

    def get_config(self) -> dict[str, Any]:
        host = self.backend.to_host
        return {"mean": [float(v) for v in host(self.mean)], "std": [float(v) for v in host(self.std)]}

    def __repr__(self) -> str:
        return f"Normalize({self.num_channels})"
