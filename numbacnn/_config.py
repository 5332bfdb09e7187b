"""JIT options and thread control: the one place where kernel compile flags are chosen."""
from __future__ import annotations

import os

import numba

# Fast-math without 'nnan'/'ninf': reductions may be reordered and vectorised, but NaN and inf
# keep their IEEE meaning, so max pooling's "NaN is the maximum" and divergence checks still work.
FASTMATH = set({"nsz", "arcp", "contract", "afn", "reassoc"})

# Examples per chunk for race-free gradient reduction. Weight gradients are summed per chunk and
# the chunks are then added in a fixed order, so results do not depend on the thread count.
CHUNK = 16

_CACHE = os.environ.get("NUMBACNN_NO_CACHE", "") == ""


def kernel(parallel: bool = True, fastmath: bool = True):
    """Decorator for CPU kernels: ``njit`` with the project's cache/parallel/fastmath flags."""
    return numba.njit(
        cache=_CACHE, parallel=parallel, nogil=True, fastmath=set(FASTMATH) if fastmath else False
    )


_blas_done = False


def single_thread_kernel_blas() -> None:
    """Pin the BLAS that the kernels call (scipy's OpenBLAS, through kernels/cpu/blas.py; numba's
    ``np.dot`` uses it too) to one thread. Called once, when blas.py is imported.

    Kernels call BLAS from inside ``prange`` (one GEMM per example or block); a multi-threaded BLAS
    there would fight numba's own threads. numpy's own BLAS (used by user code) is left alone.
    """
    global _blas_done
    if _blas_done:
        return
    _blas_done = True
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library numba will call)
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scipy/threadpoolctl ship with scikit-learn
        return
    for lib in ThreadpoolController().lib_controllers:
        path = lib.filepath or ""
        if "scipy" in path and "numpy" not in path and lib.internal_api == "openblas":
            lib.set_num_threads(1)


def set_num_threads(n: int | None) -> int:
    """Set numba's thread count (None: all available); returns the count in force."""
    max_threads = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if n is None:
        n = max_threads
    if not isinstance(n, (int,)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    numba.set_num_threads(min(int(n), max_threads))
    return numba.get_num_threads()


def max_threads() -> int:
    """Upper bound of numba's thread ids: the row count of per-thread kernel workspaces."""
    return int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]


def get_num_threads() -> int:
    return numba.get_num_threads()
