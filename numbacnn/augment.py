"""Data augmentation applied per batch on the CPU, without copying the data set: random
translations (zero or reflect fill) and horizontal flips (random, or alternating by epoch), drawn
from a seed, the epoch, the step and the examples (so a resumed run draws the same), applied by the
parallel ``gather_augment`` kernel."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels import cpu as K

MAX_SHIFT = 4096  # pixels: a larger shift or crop term is refused when parsed
_TERM = re.compile(r"^(shift|crop|translate)(?::(\d+))?$|^flip(?::(random|alternate))?$")


@dataclass(frozen=True)
class Augment:
    """Random shifts of up to ``shift`` pixels along each axis (uniform in [-shift, shift]; zero
    fill, or with ``reflect`` the image mirrored across its border), and left-right flips:
    ``flip=True`` each example with probability 1/2 every step; ``flip="alternate"`` each
    example's flip drawn once (from the seed and its index) and inverted every other epoch, so
    that consecutive epochs show both sides (airbench's derandomised flip).

    ``Augment.parse("shift:2")``, ``"crop:4,flip"``, ``"translate:2,flip:alternate"``: ``crop:P``
    is torchvision's ``RandomCrop(size, padding=P)`` (pad by P with zeros, crop back at a random
    offset), which is the same as ``shift:P``; ``translate:P`` the same with reflect padding.
    Flips suit natural images, not digits or text (allowed, not checked).
    """

    shift: int = 0
    flip: bool | str = False
    reflect: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.shift, bool) or not isinstance(self.shift, (int, np.integer)) or self.shift < 0:
            raise ValueError(f"augment: shift must be a non-negative integer, got {self.shift!r}")
        if self.flip not in (False, True, "alternate"):
            raise ValueError(f"augment: flip must be True, False or 'alternate', got {self.flip!r}")

    @classmethod
    def parse(cls, spec: Any) -> Augment | None:
        """An Augment from "shift:2", "crop:4,flip", ... (None, "" or "none": no augmentation)."""
        if spec is None or isinstance(spec, Augment):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"augment must be a string such as 'shift:2' or 'crop:4,flip', got {spec!r}")
        if spec.strip().lower() in ("", "none"):
            return None
        shift, flip, fills = 0, False, set()
        flip_mode: bool | str = False
        for term in spec.split(","):
            t = term.strip().lower()
            m = _TERM.match(t)
            if not m:
                raise ValueError(f"augment: unknown or malformed term {term.strip()!r} in {spec!r}; "
                                 f"terms: shift:N, crop:N, translate:N, flip, flip:alternate "
                                 f"(e.g. 'crop:4,flip')")
            if t.startswith("flip"):
                flip_mode = "alternate" if m.group(3) == "alternate" else True
            elif m.group(2) is None:
                raise ValueError(f"augment: {m.group(1)} needs a pixel count, e.g. '{m.group(1)}:2'")
            elif int(m.group(2)) > MAX_SHIFT:
                raise ValueError(f"augment: {m.group(1)}:{m.group(2)} is more than {MAX_SHIFT} pixels")
            else:
                shift = max(shift, int(m.group(2)))
                fills.add(m.group(1) == "translate")
        if len(fills) > 1:
            raise ValueError(f"augment: {spec!r} mixes zero fill (shift, crop) and reflect fill "
                             f"(translate): choose one")
        del flip
        return cls(shift, flip_mode, reflect=fills == {True})

    def __str__(self) -> str:
        move = f"{'translate' if self.reflect else 'shift'}:{self.shift}"
        flip = {True: "flip", "alternate": "flip:alternate"}.get(self.flip)  # type: ignore[call-overload]
        terms = ([move] if self.shift else []) + ([flip] if flip else [])
        return ",".join(terms) or "none"

    def check(self, in_shape: tuple[int, ...]) -> None:
        """A ValueError unless examples of per-example shape ``in_shape`` are images (C, H, W)."""
        if len(in_shape) != 3:
            raise ValueError(f"augment: needs images (N, C, H, W), got examples of shape {in_shape}")
        if self.shift >= min(in_shape[1:]):
            raise ValueError(f"augment: a shift of {self.shift} pixels moves a {in_shape[1]}x{in_shape[2]} "
                             f"image out of view; use less than {min(in_shape[1:])}")

    def draw(self, seed: int, epoch: int, step: int, n: int | np.ndarray) -> Moves:
        """(shifts (n, 2) int64, flips (n,) bool, reflect () bool) of one step: a function of its
        arguments only. ``n``: the step's example count, or the examples' indices in the training
        set (which alternating flips need: an int stands for 0..n-1)."""
        idx = np.arange(n) if isinstance(n, (int, np.integer)) else np.asarray(n, np.int64)
        m = len(idx)
        rng = np.random.default_rng([seed, epoch, step, 0x5A17])
        shifts = rng.integers(-self.shift, self.shift + 1, size=(m, 2), dtype=np.int64)
        if self.flip == "alternate":
            flips = (_example_bits(seed, idx) ^ (epoch & 1)).astype(np.bool_)
        else:
            flips = rng.random(m) < 0.5 if self.flip else np.zeros(m, np.bool_)
        return shifts, flips, np.array(self.reflect)


Moves = tuple[np.ndarray, np.ndarray, np.ndarray]


def _example_bits(seed: int, idx: np.ndarray) -> np.ndarray:
    """One pseudo-random bit per example index for this seed (splitmix64's finaliser), as uint64."""
    with np.errstate(over="ignore"):
        z = (idx.astype(np.uint64) + np.uint64(seed % 2**63) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(0x632BE59BD9B4E019))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z >> np.uint64(63)


def gather(out: np.ndarray, labels: np.ndarray, x: np.ndarray, y: np.ndarray, idx: np.ndarray,
           moves: Moves) -> None:
    """out = the examples x[idx] moved by ``moves`` (``Augment.draw``), labels = y[idx]."""
    K.gather_augment(out, labels, x, y, idx, moves[0], moves[1], bool(moves[2]))


def augmented(x: np.ndarray, y: np.ndarray, idx: np.ndarray, moves: Moves
              ) -> tuple[np.ndarray, np.ndarray]:
    """New arrays: the batch x[idx], y[idx] with ``moves`` applied."""
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty((len(idx),) + x.shape[1:], np.float32)
    labels = np.empty(len(idx), np.int64)
    gather(out, labels, x, np.asarray(y, np.int64), np.asarray(idx, np.int64), moves)
    return out, labels
