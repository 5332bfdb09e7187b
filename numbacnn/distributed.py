"""Data-parallel training over MPI (mpi4py): ``mpiexec -n R python -m mpi4py train.py --distributed``.

Every rank holds the whole model and the whole dataset and draws the same seeded order as one process
would. Each step, rank r takes its contiguous share of the global batch, backpropagates it (the
kernels' per-example backprop, unchanged), and one ``Allreduce`` sums the flat gradient buffer; the
loss gradient was already scaled by 1 / (global batch), so every rank then holds the gradient of one
process and takes the same optimizer step. A small second ``Allreduce`` carries the loss, accuracy and
example counts and the stop flags (Ctrl-C / SIGTERM), so that every rank stops after the same step.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ._text import install_hint

EXTRA = install_hint("mpi")
# environment variables by which MPI launchers tell a process the job's size
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE")


class DistributedError(RuntimeError):
    """Distributed training cannot start here; the message says why and what to run."""


def launcher_size() -> int | None:
    """The number of ranks an MPI launcher started, read from its environment (None: no launcher)."""
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


class DataParallel:
    """One rank's view of an MPI data-parallel job (see the module docstring).

    Parameters
    ----------
    comm : mpi4py communicator (default COMM_WORLD)
    """

    def __init__(self, comm: Any = None) -> None:
        try:
            from mpi4py import MPI
        except ImportError:
            raise DistributedError(f"distributed training needs mpi4py and an MPI library: {EXTRA}") from None
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks on this machine
        self.local_rank = self.node.Get_rank()
        self.local_size = self.node.Get_size()
        self._stats = np.zeros(5, np.float64)
        self.allreduce_seconds = 0.0  # time spent in the gradient Allreduce (for the benchmark)

    # --- work split ----------------------------------------------------------------------------
    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's contiguous part [lo, hi) of n items (parts differ in length by at most one)."""
        return self.rank * n // self.size, (self.rank + 1) * n // self.size

    def share(self, idx: np.ndarray) -> np.ndarray:
        lo, hi = self.bounds(len(idx))
        return idx[lo:hi]

    def default_threads(self) -> int:
        """Numba threads per rank: this machine's CPUs divided among its ranks."""
        from .runtime.config import cpus_available

        return max(1, cpus_available() // self.local_size)

    # --- collectives ---------------------------------------------------------------------------
    def reduce_step(self, grads: np.ndarray, loss_sum: float, correct: int, seen: int,
                    signal_flags: tuple[int, int]) -> tuple[float, int, int, tuple[int, int]]:
        """Sum the gradients (in place) and the step's statistics over the ranks."""
        import time

        t0 = time.perf_counter()
        self.comm.Allreduce(self.MPI.IN_PLACE, grads, op=self.MPI.SUM)
        self.allreduce_seconds += time.perf_counter() - t0
        s = self._stats
        s[:] = (loss_sum, correct, seen, *signal_flags)
        self.comm.Allreduce(self.MPI.IN_PLACE, s, op=self.MPI.SUM)
        return float(s[0]), int(s[1]), int(s[2]), (int(s[3]), int(s[4]))

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum over the ranks (a new array)."""
        out = np.empty_like(values)
        self.comm.Allreduce(np.ascontiguousarray(values), out, op=self.MPI.SUM)
        return out

    def broadcast_array(self, a: np.ndarray) -> None:
        """Rank 0's values of ``a`` on every rank (in place)."""
        self.comm.Bcast(a, root=0)

    def from_rank0(self, make: Callable[[], Any]) -> Any:
        """Run ``make`` on rank 0 only and hand its result to every rank; an exception raised there
        is raised on every rank (nobody is left waiting)."""
        if self.rank == 0:
            try:
                result: Any = (True, make())
            except Exception as e:  # handed to every rank, raised there
                result = (False, e)
        else:
            result = None
        ok, value = self.comm.bcast(result if self.rank == 0 else None, root=0)
        if not ok:
            raise value
        return value

    def barrier(self) -> None:
        self.comm.Barrier()

    def compile_once(self, compile_step: Callable[[], None]) -> None:
        """Only the first rank of each machine compiles (``compile_step``); the others wait, then
        load the kernels from numba's disk cache instead of compiling them again."""
        if self.local_rank == 0:
            compile_step()
        self.node.Barrier()

    def finish(self) -> None:
        """End an agreed stop (done, interrupted, diverged) cleanly: after every rank got here, MPI is
        finalised, so that a non-zero exit status does not abort the ranks still writing."""
        self.comm.Barrier()
        self.MPI.Finalize()


def start(threads: int | None) -> DataParallel:
    """The command line's entry: check the launcher, start MPI, set the threads per rank."""
    if launcher_size() is None:
        raise DistributedError("--distributed needs an MPI launcher: mpiexec -n R python -m mpi4py "
                               f"train.py --distributed ... (with mpi4py and an MPI: {EXTRA})")
    dp = DataParallel()
    from .runtime import config as _config

    _config.set_num_threads(threads if threads is not None else dp.default_threads())
    return dp


def compile_step(net: Any, x: np.ndarray) -> None:
    """Compile the training kernels of ``net`` on two examples, leaving its state as it was (the
    dropout generators and BatchNorm's running statistics are restored; the gradients are
    overwritten by the next backward)."""
    from .loss import softmax_cross_entropy

    rngs = [(layer, layer.generator_state()) for layer in net.all_layers() if layer.draws_random]
    buffers = {k: np.array(v) for k, v in net._buffer_views().items()}
    logits = net.forward(x[:2], training=True)
    _, d = softmax_cross_entropy(logits, np.zeros(len(logits), np.int64))
    net.backward(d, need_input_grad=False)
    for layer, state in rngs:
        layer.set_generator_state(*state)
    for k, v in net._buffer_views().items():
        v[...] = buffers[k]
