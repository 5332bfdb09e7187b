"""JIT options and thread control: the one place where kernel compile flags are chosen."""
from __future__ import annotations

import os
import warnings
from typing import Any

import numba

from .. import tuning
from . import prebuilt
from .flags import FASTMATH, KERNEL_OPT


def _wide_vectors() -> None:
    """Code numba compiles on this host (what the prebuilt tier does not hold, or all of it where the
    tier cannot serve: another Python or numba) gets 512-bit loops on AVX-512 hosts, as the shipped
    x86-64-v4 level does (prebuilt.CODEGEN). LLVM's Intel tunings (skylake-avx512 to
    sapphirerapids) keep loops at 256-bit vectors: on a 16-core Xeon with Python 3.12 the benchmark's
    FMA loop ran at 84 GFLOP/s per core where numpy's sgemm reached 162; here, compiled as for
    skylake-avx512, 124 against 247 with this setting. It has to be set before numba builds its CPU
    target (numbacnn's first kernel): skipped where the user chose numba's CPU features
    (NUMBA_CPU_FEATURES) or 256-bit code (NUMBACNN_PREBUILT=x86-64-v3), or where numba's CPU target
    already exists."""
    from numba.core import config
    from numba.core.registry import cpu_target

    if (os.environ.get("NUMBA_CPU_FEATURES") or config.CPU_FEATURES is not None  # type: ignore[attr-defined]
            or os.environ.get("NUMBACNN_PREBUILT") == "x86-64-v3"
            or "_toplevel_target_context" in vars(cpu_target)):
        return
    import llvmlite.binding as ll

    host = ll.get_host_cpu_features()
    if host.get("avx512f", False):
        config.CPU_FEATURES = host.flatten() + ",-prefer-256-bit"  # type: ignore[attr-defined]


_wide_vectors()


# Parts of a batch in the conv backward, for race-free gradient reduction: a batch of N examples is
# split into min(N, GRAD_PARTS) parts of (nearly) equal size, each part's weight gradient is summed
# on its own, and the parts are then added in a fixed order. The split depends on the batch size
# only, so results do not depend on the thread count, and a batch of 64 or more keeps up to 64
# threads busy (docs/performance.md).
GRAD_PARTS = 64


def grad_parts(n: int) -> int:
    """The number of gradient parts of a batch of n examples (see GRAD_PARTS)."""
    return max(1, min(n, GRAD_PARTS))

_CACHE = os.environ.get("NUMBACNN_NO_CACHE", "") == ""


def _compile_at_kernel_opt(compile_sig):
    """Wrap a dispatcher's ``compile(sig)`` so that it runs with numba.config.OPT = KERNEL_OPT
    (callees compiled on the way, such as the kernels' helpers and parfor bodies, included).

    This is the one place where numbacnn reaches into numba: numba has no per-function
    optimisation level. Level 2 compiles a whole training step in about two thirds of the time of
    level 3 (18 s instead of 28 s for mnistcnn) at the same training speed (docs/performance.md); the prebuilt
    kernels are compiled at this level too."""
    from numba.core.compiler_lock import global_compiler_lock

    def compile(sig):
        with global_compiler_lock:  # reentrant; keeps other threads' compilations at their level
            saved = numba.config.OPT
            numba.config.OPT = type(saved)(KERNEL_OPT)
            try:
                return compile_sig(sig)
            finally:
                numba.config.OPT = saved
    return compile


NO_CACHE_WARNING = (
    "numbacnn: no writable cache directory for numba (the package's directory and the user cache are "
    "read-only), so every process compiles again the kernels that are not prebuilt for this machine "
    "(a digits training run: 0.5-1.5 minutes on 2 cores); set NUMBA_CACHE_DIR to a writable directory to "
    "cache them")


# Every kernel a backend may call, declared where it is defined (``kernel(export=True, team=...)``):
# {kernel package ("numbacnn.kernels.cpu"): {name: (dispatcher, team)}}. The package's namespace,
# the team region's kernels and the tests that hold the kernel tier to them derive from it.
DECLARED: dict[str, dict[str, tuple[Any, str | None]]] = {}
TEAM_FORMS = (None, "blocks", "serial")


def kernel(fastmath: bool = True, inline: bool = False, float_division: bool = False, export: bool = False,
           team: str | None = None):
    """Decorator for CPU kernels: ``njit`` with the project's cache and fastmath flags, compiled at
    KERNEL_OPT, never with ``parallel=True`` (a kernel's parallel loop is ``parallel.parallel_blocks``),
    loaded from the prebuilt kernels shipped with the package when they match (``prebuilt.py``).
    Where numba finds no writable cache directory (a read-only install without NUMBA_CACHE_DIR),
    what is not prebuilt compiles in memory, after one warning.
    ``inline``: numba inlines the function into its callers' code (a helper called per channel,
    with ten array arguments, cost more than its work). ``float_division``: divisions by zero give
    inf or NaN as in numpy (numba's "numpy" error model) instead of raising ZeroDivisionError: the
    check on every division kept LLVM from vectorising loops that divide (rational approximations).

    The declaration: ``export``: a kernel the backends call, in its package's namespace
    (``kernels.cpu.NAME``). ``team``: how a recorded prediction's team region (runtime/team.py) runs
    it: "blocks" (its parallel split: ``NAME_blocks(*args)`` blocks, ``NAME_block(i, *args)`` runs
    block i, both in its module, as its own ``parallel_blocks`` call) or "serial" (on one thread);
    None: a team region cannot run it (its program runs call by call)."""
    if team not in TEAM_FORMS:
        raise ValueError(f"team must be one of {TEAM_FORMS}, got {team!r}")
    flags: dict[str, Any] = dict(nogil=True, fastmath=set(FASTMATH) if fastmath else False)
    if inline:
        flags["inline"] = "always"
    if float_division:
        flags["error_model"] = "numpy"

    def decorate(func):
        global _CACHE
        try:
            dispatcher = numba.njit(cache=_CACHE, **flags)(func)
        except RuntimeError as e:  # numba: "cannot cache function ...: no locator available"
            if "no locator available" not in str(e):
                raise
            warnings.warn(NO_CACHE_WARNING, RuntimeWarning, stacklevel=2)
            _CACHE = False  # once: the other kernels compile in memory without asking again
            dispatcher = numba.njit(cache=False, **flags)(func)
        if hasattr(dispatcher, "compile"):  # not under NUMBA_DISABLE_JIT=1 (plain Python)
            dispatcher.compile = _compile_at_kernel_opt(dispatcher.compile)
            prebuilt.attach(dispatcher)  # the shipped kernels first, then numba's own cache
        if export or team:
            declare(dispatcher, team, func)
        return dispatcher
    return decorate


def declare(fn: Any, team: str | None = None, func: Any = None) -> Any:
    """Declare ``fn`` (defined as ``func``, default ``fn`` itself) a kernel of its package for
    export (``kernel(export=True)`` does it for CPU kernels; CUDA launchers are declared so, as a
    decorator); returns ``fn``."""
    func = func or fn
    DECLARED.setdefault(func.__module__.rsplit(".", 1)[0], {})[func.__name__] = (fn, team)
    return fn


def declared(package: str) -> dict[str, Any]:
    """The kernels ``package`` ("numbacnn.kernels.cpu") declared for export: {name: dispatcher}."""
    return {name: fn for name, (fn, _) in DECLARED.get(package, {}).items()}


def team_kernels(package: str) -> tuple[dict[Any, tuple[Any, Any]], frozenset]:
    """The team region's kernels of ``package``: ({entry: (count, block)} for the "blocks" form,
    the "serial" ones), their block functions found beside them by name."""
    import importlib

    blocks, serial = {}, set()
    for name, (fn, team) in DECLARED.get(package, {}).items():
        if team == "serial":
            serial.add(fn)
        elif team == "blocks":
            module = importlib.import_module(getattr(fn, "py_func", fn).__module__)
            try:
                blocks[fn] = (getattr(module, name + "_blocks"), getattr(module, name + "_block"))
            except AttributeError:
                raise TypeError(f"{module.__name__}.{name} is declared team='blocks' but its module has no "
                                f"{name}_blocks and {name}_block") from None
    return blocks, frozenset(serial)


_blas_done = False
_blas_arch = ""  # the OpenBLAS core of the kernels' BLAS, as threadpoolctl names it ("" if unknown)

# OpenBLAS cores whose sgemm has small-matrix kernels: products of at most 1e6 multiply-adds run
# unpacked, near the FMA peak (docs/performance.md). The convolution plans keep their GEMMs
# under that size there, and leave them whole elsewhere (a packed GEMM with few rows is slow).
_SMALL_GEMM_CORES = ("skylakex", "cooperlake", "sapphirerapids")


def single_thread_kernel_blas() -> None:
    """Pin the BLAS that the kernels call (scipy's OpenBLAS, through kernels/cpu/blas.py; numba's
    ``np.dot`` uses it too) to one thread. Called once, when blas.py is imported.

    Kernels call BLAS from inside parallel blocks (one GEMM per example or block); a multi-threaded BLAS
    there would fight numba's own threads. numpy's own BLAS (used by user code) is left alone.
    """
    global _blas_done, _blas_arch
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
            _blas_arch = str(getattr(lib, "architecture", "") or "")


def kernel_blas_core() -> str:
    """The OpenBLAS core (threadpoolctl's name, e.g. "SkylakeX") of the BLAS the kernels call, or ""."""
    single_thread_kernel_blas()
    return _blas_arch


def small_gemm_macs() -> int:
    """The largest GEMM (multiply-adds) that the kernels' BLAS multiplies with its small-matrix
    kernels, less a margin; 0 when it has none (the plans then leave their GEMMs whole)."""
    single_thread_kernel_blas()
    return 900_000 if _blas_arch.lower() in _SMALL_GEMM_CORES else 0


def cpus_available() -> int:
    """The CPUs this process may run on (its affinity mask, as taskset and MPI launchers set it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _openmp_max_threads() -> int | None:
    """omp_get_max_threads() of the OpenMP runtime numba's "omp" threading layer runs on: the
    OMP_NUM_THREADS and CPU affinity of this process, lowered by threadpoolctl's
    ``threadpool_limits`` (as scikit-learn's OpenMP estimators read it). None for other layers."""
    try:
        if numba.threading_layer() != "omp":
            return None
        import ctypes

        return int(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())
    except (OSError, AttributeError, ValueError):
        return None


# OMP_NUM_THREADS as this process had it when numbacnn was imported, read once as OpenMP runtimes read
# it when they load. Dask's LocalCluster writes OMP_NUM_THREADS=1 into the client's own environment
# before it spawns its workers (meant for them) and leaves it there: read at every fit, the client's
# GridSearchCV refit ran on one thread (4.1 s against 2.5 s on 2 cores).
_OMP_NUM_THREADS = os.environ.get("OMP_NUM_THREADS", "")


def default_threads() -> int:
    """The thread count of a run that asks for none: the CPUs this process may use, at most
    OMP_NUM_THREADS as the process had it when numbacnn was imported (joblib's loky workers and
    Dask's worker processes start with their share of the cores there) and the limit of an enclosing
    ``threadpoolctl.threadpool_limits``; at most NUMBA_NUM_THREADS."""
    n = min(max_threads(), cpus_available())
    env = _OMP_NUM_THREADS.split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        n = min(n, int(env))
    omp = _openmp_max_threads()
    if omp is not None and omp > 0:
        n = min(n, omp)
    return max(1, n)


def set_num_threads(n: int | None) -> int:
    """Set numba's thread count for the calling thread (None: ``default_threads()``); returns the
    count in force."""
    if n is None:
        n = default_threads()
    if not isinstance(n, (int,)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    numba.set_num_threads(min(int(n), max_threads()))
    return numba.get_num_threads()


def max_threads() -> int:
    """Upper bound of numba's thread ids: the row count of per-thread kernel workspaces."""
    return int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]


def get_num_threads() -> int:
    return numba.get_num_threads()


def _start_threads() -> None:
    """Start numba's thread pool now, with tuning.SPIN_COUNT as libgomp's spin unless the user chose a
    wait policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT set); libgomp reads it once, when it loads.
    The environment is restored afterwards, so other OpenMP runtimes in the process (PyTorch's,
    scikit-learn's) and child processes keep their own defaults. Then the calling thread gets
    ``default_threads()``."""
    ours = not any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
    if ours:
        os.environ["GOMP_SPINCOUNT"] = str(tuning.SPIN_COUNT)
    try:
        numba.get_num_threads()  # loads the threading layer (and libgomp with it)
    finally:
        if ours:
            os.environ.pop("GOMP_SPINCOUNT", None)
    set_num_threads(None)


_start_threads()
