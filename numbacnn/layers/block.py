"""Block: a layer made of paths of layers (a residual block's body and shortcut, a concatenation's
branches): their parameters, buffers, names, freezing and multiply-adds, nested under the paths'
names as torch's modules nest theirs ("body.0.weight", "branches.1.0.weight")."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Layer, Shape


class Block(Layer):
    """Subclasses give ``paths()`` (name, layers) and compute with them."""

    def sublayers(self) -> list[Layer]:
        return [layer for _, path in self.paths() for layer in path]

    def _named(self) -> list[tuple[str, Layer]]:
        return [(f"{p}.{j}", layer) for p, path in self.paths() for j, layer in enumerate(path)]

    def set_name(self, name: str) -> None:
        """Name this block and its layers ("layer 3 (...)", "layer 3.body.0 (Conv2D(...))")."""
        self.name = name
        head = name.split(" (")[0]
        for key, layer in self._named():
            layer.set_name(f"{head}.{key} ({layer!r})")

    # --- parameters, buffers --------------------------------------------------------------------
    def param_shapes(self) -> dict[str, Shape]:
        return {f"{key}.{p}": s for key, layer in self._named() for p, s in layer.param_shapes().items()}

    def bind(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             net_views: bool = False) -> None:
        for key, layer in self._named():
            names = layer.param_shapes()
            layer.bind({p: params[f"{key}.{p}"] for p in names},
                       {p: grads[f"{key}.{p}"] for p in names}, net_views)
        self._net_views = net_views

    def reset_parameters(self, rng: np.random.Generator) -> None:
        for layer in self.sublayers():
            layer.reset_parameters(rng)

    def _owner(self, name: str) -> tuple[Layer, str]:
        """The layer inside holding parameter ``name`` ("body.0.weight"), and its own name for it."""
        for key, layer in self._named():
            if name.startswith(key + "."):
                return layer, name[len(key) + 1:]
        raise KeyError(name)

    def is_frozen(self, name: str) -> bool:
        layer, own = self._owner(name)
        return layer.is_frozen(own)

    def _set_frozen(self, names: tuple[str, ...], flag: bool) -> None:
        for name in names:
            layer, own = self._owner(name)
            layer._set_frozen((own,), flag)

    def named_buffers(self) -> dict[str, Any]:
        return {f"{key}.{k}": v for key, layer in self._named() for k, v in layer.named_buffers().items()}

    def macs(self, in_shape: Shape) -> int:
        total = 0
        for _, path in self.paths():
            shape = in_shape
            for layer in path:
                total += layer.macs(shape)
                shape = layer.output_shape(shape)
        return total

    # --- computation: subclasses run their paths in ``_run`` ------------------------------------
    def forward(self, x: np.ndarray, training: bool = False) -> np.ndarray:
        return self._run(x, training, False)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return self._run(x, False, True)

    def _run(self, x: np.ndarray, training: bool, inference: bool) -> np.ndarray:
        raise NotImplementedError
