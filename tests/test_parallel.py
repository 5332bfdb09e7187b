"""The kernels' parallel loop (numbacnn/runtime/parallel.py): every block runs once, split over numba's
threads as a prange splits; the thread count set for the caller holds; a block that raises in a
thread raises in the caller; a cached kernel finds its blocks again in a new process."""
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from conftest import ROOT

from numbacnn.runtime import config as _config
from numbacnn.runtime.parallel import parallel_blocks


@_config.kernel()
def _mark_block(i, seen, threads, x):
    if x[i] < 0:
        raise ValueError("a negative entry")
    seen[i] += 1
    threads[i] = numba.get_thread_id()


@_config.kernel()
def _mark(seen, threads, x):
    parallel_blocks(x.shape[0], _mark_block, (seen, threads, x))


def _run(n):
    seen = np.zeros(n, np.int64)
    threads = np.full(n, -1, np.int64)
    _mark(seen, threads, np.arange(n, dtype=np.float64))
    return seen, threads


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1001])
def test_every_block_runs_once_split_in_order_over_the_threads(n):
    for t in (1, 2):
        saved = numba.get_num_threads()
        numba.set_num_threads(t)
        try:
            seen, threads = _run(n)
        finally:
            numba.set_num_threads(saved)
        assert (seen == 1).all(), (n, t)
        # blocks [n * p / T, n * (p + 1) / T) on part p: contiguous, in order, balanced
        expected = np.concatenate([np.full(n * (p + 1) // t - n * p // t, p) for p in range(t)])
        if n > 1:
            assert sorted(np.unique(threads)) == sorted(np.unique(expected)), (n, t)
            assert (np.diff(threads) != 0).sum() == len(np.unique(expected)) - 1, (n, t)
        else:  # one block runs in the calling thread
            assert threads[0] == numba.get_thread_id()


@pytest.mark.parametrize("n, bad", [(1, 0), (2, 1), (9, 3), (9, 8)])
def test_a_block_that_raises_in_a_thread_raises_in_the_caller(n, bad):
    x = np.arange(n, dtype=np.float64)
    x[bad] = -1.0
    with pytest.raises(ValueError, match="a negative entry"):
        _mark(np.zeros(n, np.int64), np.zeros(n, np.int64), x)
    seen, _ = _run(n)  # and the next call works
    assert (seen == 1).all()


def test_a_cached_kernel_binds_its_blocks_in_a_new_process(tmp_path):
    """The kernel is compiled in one process and loaded from numba's cache in the next, which has
    to bind the block's symbol before the kernel's code loads (else LLVM aborts the process)."""
    code = ("import numpy as np, numbacnn.kernels.cpu as K\n"
            "x = np.arange(-3000, 3000, dtype=np.float32); y = np.empty_like(x)\n"
            "K.relu_forward(y, x); print(int(y.sum()), sum(K.relu_forward.stats.cache_hits.values()))\n")
    env = dict(os.environ, NUMBACNN_PREBUILT="0", NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    total = sum(range(3000))
    assert runs[0].stdout.split() == [str(total), "0"]  # compiled
    assert runs[1].stdout.split() == [str(total), "1"]  # loaded from the cache, blocks bound
