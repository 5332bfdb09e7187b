"""Dropout: inverted dropout with masks from a counter-based generator."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .activations import _Elementwise
from .base import Layer, register


@register
class Dropout(_Elementwise):
    """Inverted dropout: zeroes each input with probability p and scales the rest by 1/(1-p).

    Identity when ``training=False``. The masks are drawn by the kernel from a counter-based
    generator (Philox4x32-10, kernels/cpu/dropout.py): whether value j of a batch is kept in the
    layer's d-th training forward depends on (seed, d, j) only, so the CPU and the GPU draw the
    same masks at any thread count, and the state is two integers, ``generator_state()`` =
    (seed, draws made), saved by checkpoints. ``Sequential``'s seed sets the seed.

    Data parallelism: ``set_offset(k)`` says that this process holds the batch's values from
    index k on (examples lo:hi of the batch: k = lo times the values per example), so that the
    ranks together apply the masks one process would; ``skip_draw()`` advances the generator of a
    rank that holds no example of a batch.
    """

    token = "dropout"
    token_args = ("p",)
    token_defaults = {"p": 0.5}
    role = ""
    passes_through = True
    draws_random = True

    def onnx(self, graph: Any, x: str) -> str:
        return x  # the identity at inference

    def torch_twin(self, torch: Any) -> Any:
        return torch.nn.Dropout(self.p)

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be a probability in [0, 1), got {p!r}")
        self.p = float(p)
        self._init_state(int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1)

    @property
    def threshold(self) -> int:
        """A value is dropped when the top 24 bits of its random word are below this."""
        return math.ceil(self.p * 2**24)

    def _init_state(self, seed: int) -> None:
        # (seed, draws made, offset, unused), uint64, on the layer's device
        self._offset = 0
        self._state = self.backend.empty((4,), np.uint64)
        self.backend.write(self._state, np.array([seed, 0, 0, 0], np.uint64))

    def reset_parameters(self, rng: np.random.Generator) -> None:
        self.set_generator_state(int(rng.integers(2**63)), 0)

    def generator_state(self) -> tuple[int, int]:
        """(seed, number of masks drawn so far)."""
        state = self.backend.to_host(self._state)
        return int(state[0]), int(state[1])

    def set_generator_state(self, seed: int, draws: int) -> None:
        if not (0 <= int(seed) < 2**64 and 0 <= int(draws) < 2**64):
            raise ValueError(f"Dropout: a generator state is two integers in [0, 2**64), got "
                             f"({seed!r}, {draws!r})")
        self.backend.write(self._state, np.array([seed, draws, self._offset, 0], np.uint64))

    def set_offset(self, offset: int) -> None:
        """This process's first value is value ``offset`` of the whole batch (data parallelism)."""
        if offset != self._offset:
            self._offset = int(offset)
            self.backend.write(self._state[2:3], np.array([offset], np.uint64))

    def skip_draw(self) -> None:
        """Advance the generator by one draw without drawing (a rank with no examples in a batch)."""
        seed, draws = self.generator_state()
        self.set_generator_state(seed, draws + 1)

    @Layer.device.setter  # type: ignore[attr-defined,misc]
    def device(self, device: str) -> None:
        state = np.array(self.backend.to_host(self._state))
        Layer.device.fset(self, device)  # type: ignore[attr-defined]
        self._state = self.backend.empty((4,), np.uint64)
        self.backend.write(self._state, state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        rng = state.pop("rng", None)  # pickled before the counter-based generator
        state.pop("batch_slice", None)
        super().__setstate__(state)
        if "_state" not in state:
            self._init_state(int(rng.integers(2**63)) if rng is not None else 0)

    def infer(self, x: np.ndarray) -> np.ndarray:
        return x  # the identity in evaluation: no kernel call, no copy (1.7 us of a batch-1 prediction)

    def _apply(self, y, x, training):
        # threshold 0 (evaluation): a mask of ones, nothing drawn
        # the mask drawn from the state (seed, draw, offset; kernels/cpu/dropout.py) with the drop
        # threshold (0: keep all) and the keep value; a draw advances the state's draw number
        threshold = self.threshold if training else 0
        self.backend.run("dropout_forward", y, self._buf("mask", x.shape), x, self._state, int(threshold),
                         1.0 / (1.0 - self.p) if training else 1.0)
        if threshold:
            self.backend.run("dropout_advance", self._state)

    def _apply_backward(self, dx, dy):
        self.backend.run("dropout_backward", dx, dy, self._buffers["mask"])

    def get_config(self) -> dict[str, Any]:
        return {"p": self.p}

    def __repr__(self) -> str:
        return f"Dropout({self.p})"
