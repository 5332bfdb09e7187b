"""Kernel calls: every call that layers, convolution plans and backends make to a kernel goes
through ``launch``, so that a training step can be captured as the list of calls it makes and
replayed (``numbacnn/runtime/program.py``).

Capturing is explicit: ``with capture() as calls:`` collects the calls made by this thread inside
the block; outside one, ``launch(fn, *args)`` is just ``fn(*args)``. Nothing is patched.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Call = tuple[Callable[..., Any], tuple]

_tape = threading.local()  # .calls: the list a capture in this thread appends to, or None


def launch(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)``; inside ``capture`` also record the call. ``fn`` must write only into
    its arguments, and the arguments must stay valid for a replay (bound buffers, parameter views)."""
    fn(*args)
    calls = getattr(_tape, "calls", None)
    if calls is not None:
        calls.append((fn, args))


@contextmanager
def capture() -> Iterator[list[Call]]:
    """Collect the ``launch`` calls this thread makes within the block, in order."""
    calls: list[Call] = []
    outer = getattr(_tape, "calls", None)
    _tape.calls = calls
    try:
        yield calls
    finally:
        _tape.calls = outer
