"""Data augmentation applied per batch on the CPU, without copying the data set: random
translations (zero fill) and horizontal flips, drawn from a seed, the epoch and the step (so a
resumed run draws the same), applied by the parallel ``gather_augment`` kernel."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels import cpu as K

MAX_SHIFT = 4096  # pixels: a larger shift or crop term is refused when parsed
_TERM = re.compile(r"^(shift|crop)(?::(\d+))?$|^flip$")


@dataclass(frozen=True)
class Augment:
    """Random shifts of up to ``shift`` pixels along each axis (uniform in [-shift, shift], zero
    fill), and left-right flips with probability 1/2 when ``flip``.

    ``Augment.parse("shift:2")``, ``"crop:4,flip"``: ``crop:P`` is torchvision's
    ``RandomCrop(size, padding=P)`` (pad by P with zeros, crop back at a random offset), which is
    the same as ``shift:P``. Flips suit natural images, not digits or text (allowed, not checked).
    """

    shift: int = 0
    flip: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.shift, bool) or not isinstance(self.shift, (int, np.integer)) or self.shift < 0:
            raise ValueError(f"augment: shift must be a non-negative integer, got {self.shift!r}")

    @classmethod
    def parse(cls, spec: Any) -> Augment | None:
        """An Augment from "shift:2", "crop:4,flip", ... (None, "" or "none": no augmentation)."""
        if spec is None or isinstance(spec, Augment):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"augment must be a string such as 'shift:2' or 'crop:4,flip', got {spec!r}")
        if spec.strip().lower() in ("", "none"):
            return None
        shift, flip = 0, False
        for term in spec.split(","):
            t = term.strip().lower()
            m = _TERM.match(t)
            if not m:
                raise ValueError(f"augment: unknown or malformed term {term.strip()!r} in {spec!r}; "
                                 f"terms: shift:N, crop:N, flip (e.g. 'crop:4,flip')")
            if t == "flip":
                flip = True
            elif m.group(2) is None:
                raise ValueError(f"augment: {m.group(1)} needs a pixel count, e.g. '{m.group(1)}:2'")
            elif int(m.group(2)) > MAX_SHIFT:
                raise ValueError(f"augment: {m.group(1)}:{m.group(2)} is more than {MAX_SHIFT} pixels")
            else:
                shift = max(shift, int(m.group(2)))
        return cls(shift, flip)

    def __str__(self) -> str:
        terms = ([f"shift:{self.shift}"] if self.shift else []) + (["flip"] if self.flip else [])
        return ",".join(terms) or "none"

    def check(self, in_shape: tuple[int, ...]) -> None:
        """A ValueError unless examples of per-example shape ``in_shape`` are images (C, H, W)."""
        if len(in_shape) != 3:
            raise ValueError(f"augment: needs images (N, C, H, W), got examples of shape {in_shape}")
        if self.shift >= min(in_shape[1:]):
            raise ValueError(f"augment: a shift of {self.shift} pixels moves a {in_shape[1]}x{in_shape[2]} "
                             f"image out of view; use less than {min(in_shape[1:])}")

    def draw(self, seed: int, epoch: int, step: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(shifts (n, 2) int64, flips (n,) bool) of one step: a function of its arguments only."""
        rng = np.random.default_rng([seed, epoch, step, 0x5A17])
        shifts = rng.integers(-self.shift, self.shift + 1, size=(n, 2), dtype=np.int64)
        flips = rng.random(n) < 0.5 if self.flip else np.zeros(n, np.bool_)
        return shifts, flips


def gather(out: np.ndarray, labels: np.ndarray, x: np.ndarray, y: np.ndarray, idx: np.ndarray,
           moves: tuple[np.ndarray, np.ndarray]) -> None:
    """out = the examples x[idx] moved by ``moves`` (``Augment.draw``), labels = y[idx]."""
    K.gather_augment(out, labels, x, y, idx, moves[0], moves[1])


def augmented(x: np.ndarray, y: np.ndarray, idx: np.ndarray, moves: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
    """New arrays: the batch x[idx], y[idx] with ``moves`` applied."""
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty((len(idx),) + x.shape[1:], np.float32)
    labels = np.empty(len(idx), np.int64)
    gather(out, labels, x, np.asarray(y, np.int64), np.asarray(idx, np.int64), moves)
    return out, labels
