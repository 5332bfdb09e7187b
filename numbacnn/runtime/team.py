"""Recorded inference calls as one team region (``team_region.py``): the schedule ``team_region.run``
takes, built once per program from the kernels' block functions (``kernels/cpu/__init__.py``:
TEAM_BLOCKS, TEAM_SERIAL).

A team runs every call of a program in one OpenMP parallel region, with barriers only where a call
depends on an earlier one, where a replay opens a numba parallel region per parallel kernel (about
2-2.5 us each on 2 cores) and crosses from Python into each kernel. The blocks and their split are
the kernels' own, so a team computes the same bits as the replay. ``NUMBACNN_TEAM=0`` turns it off;
so does a threading layer other than numba's "omp", and a forked child (GNU OpenMP's threads do not
survive a fork).
"""
from __future__ import annotations

import os
from typing import Any

import numba
import numpy as np

from . import team_region
from .calls import Call

_forked = False


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forked() -> bool:
    """Whether this process is a fork of one that may have used team regions."""
    return _forked


_checked = False


def available() -> bool:
    """Whether team runs can be used in this process: the OpenMP entry points bound, and, checked
    once, the team's threads the ones that numba's kernels see (their ``get_thread_id`` picks their
    workspaces: a team of another runtime would share them)."""
    global _checked
    if _forked or os.environ.get("NUMBACNN_TEAM", "1") == "0":
        return False
    if not team_region.bind():
        return False
    if not _checked:
        _checked = True
        if not _threads_agree():
            team_region.unbind()
    return team_region.bind()


def _threads_agree() -> bool:
    """Whether block i of a team of as many blocks as threads runs on numba's thread i."""
    threads = 2  # a team of 2 even where numba runs 1 thread now: it may run more later
    ids = np.full(threads, -1, np.int64)
    entry = address(team_region.thread_id_block, (numba.types.int64, numba.typeof(ids)))
    thunk, buffer = _packed(team_region.pack_blocks, (ids,))
    rows = np.array([[thunk, entry, threads, buffer.ctypes.data]], np.int64)
    team_region.run(rows, threads, ids, np.zeros((0, 2), np.int64), np.zeros(1, np.int64))
    return bool(np.array_equal(ids, np.arange(threads)))


def _packed(pack: Any, args: tuple) -> tuple[int, Any]:
    """(thunk, buffer): ``args`` packed by team_region.pack_blocks or pack_serial into a buffer of its own."""
    _, size = pack(args, np.zeros(0, np.uint8))
    buffer = np.zeros(-(-size // 8) * 8, np.uint8)  # whole int64 words: patches index them
    thunk, _ = pack(args, buffer)
    return int(thunk), buffer


def address(fn: Any, argtypes: tuple) -> int:
    """The entry point (numba's calling convention) of the numba dispatcher ``fn`` compiled for
    ``argtypes`` (compiled, or loaded from the prebuilt kernels or numba's cache, first)."""
    overload = fn.overloads.get(argtypes)
    if overload is None:
        fn.compile(argtypes)
        overload = fn.overloads[argtypes]
    return int(overload.library.get_pointer_to_function(overload.fndesc.llvm_func_name))


def _arrays(args: tuple) -> list[np.ndarray]:
    return [a for a in args if isinstance(a, np.ndarray) and a.size > 0]


def _overlap(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether any array of ``a`` may share memory with one of ``b`` (their byte ranges meet)."""
    return any(np.may_share_memory(x, y) for x in a for y in b)


class Schedule:
    """A program's calls packed for ``team_region.run``: ``rows`` (int64, (rows, 4)), the packed
    arguments they point into (``buffers``, kept alive here), and per row the index of its call
    (-1 for a barrier) and its buffer as int64 (None for a barrier)."""

    def __init__(self) -> None:
        self.rows = np.zeros((0, 4), np.int64)
        self.buffers: list[Any] = []
        self.order: list[int] = []

    def add(self, call: int, thunk: int = 0, entry: int = 0, n: int = 0, buffer: Any = None) -> None:
        row = np.array([[thunk, entry, n, 0 if buffer is None else buffer.ctypes.data]], np.int64)
        self.rows = np.concatenate([self.rows, row])
        self.buffers.append(None if buffer is None else buffer.view(np.int64))
        self.order.append(call)


def schedule(calls: list[Call], threads: int) -> Schedule | None:
    """The calls packed for ``team_region.run``, or None when a call has no team form (a parallel kernel
    without block functions, or not a kernel at all).

    The calls are laid into intervals between barriers, each as early as its dependencies allow:
    a call depends on an earlier one that touches the same memory (any array argument, read or
    written: the kernels write only into their arguments). A parallel call goes in the interval
    after its last dependency's; a serial one too, or, where that dependency is the last serial
    call on a thread of its interval, on that thread after it (a thread runs its calls in order):
    weight preparations (folds, filter transforms) run beside the layers before them, spread over
    the threads (``threads``: the thread count to spread them for; any count runs them right)."""
    from ..kernels import cpu as K

    placed: list[tuple[int, int, tuple, list[np.ndarray]]] = []  # (interval, slot, packed, arrays)
    load: dict[tuple[int, int], int] = {}  # bytes of serial calls per (interval, slot)
    for fn, args in calls:
        types = tuple(numba.typeof(a) for a in args)
        memory = _arrays(args)
        parallel = fn in K.TEAM_BLOCKS
        if parallel:
            count, block = K.TEAM_BLOCKS[fn]
            entry, n = address(block, (numba.types.int64, *types)), int(count(*args))
            pack = team_region.pack_blocks
        elif fn in K.TEAM_SERIAL:
            entry, n, pack = address(fn, types), -1, team_region.pack_serial
        else:
            return None
        thunk, buffer = _packed(pack, tuple(args))
        after = 0  # the first interval the call may go in
        chains = set()  # (interval, slot) of the serial calls it depends on
        for interval, slot, _, mem in placed:
            if _overlap(memory, mem):
                if slot >= 0 and not parallel:
                    chains.add((interval, slot))
                    after = max(after, interval)
                else:
                    after = max(after, interval + 1)
        chained = [slot for interval, slot in chains if interval == after]
        if chained and len(set(chained)) > 1:
            after += 1
            chained = []
        if parallel:
            slot = -1
        elif chained:
            slot = chained[0]
        else:  # the least loaded thread of the interval
            slot = min(range(max(1, threads)), key=lambda t: load.get((after, t), 0))
        if not parallel:
            load[(after, slot)] = load.get((after, slot), 0) + sum(a.nbytes for a in memory)
            n = -1 - slot
        placed.append((after, slot, (thunk, entry, n, buffer), memory))
    out = Schedule()
    for interval in range(max((p[0] for p in placed), default=-1) + 1):
        if out.order:
            out.add(-1)
        for call, (i, _, packed, _) in enumerate(placed):
            if i == interval:
                out.add(call, *packed)
    return out
