"""The kernel tier: kernels compiled ahead of time for fixed x86-64 levels into the package folder
(``python -m numbacnn compile``, or a wheel built with them), loaded the way numba loads its own
disk cache instead of compiling for minutes on a first run.

numba's disk cache is keyed by the source file's modification time and by the exact host CPU, so a
fresh install (new checkout, new virtualenv, new machine) always starts cold. The tier is numba's
cache format under another key: the SHA-256 of every kernel source file (any change to a kernel
file or to the kernels' compile flags invalidates the whole tier) and a named instruction-set level
instead of the host's CPU name: ``x86-64-v4`` (AVX-512, compiled for 512-bit vectors) where the host
has it, else ``x86-64-v3`` (AVX2 and FMA, every x86-64 server CPU since 2015). Each kernel looks
there first, then in numba's own cache, and compiles only what neither holds. The tier is a build
output: the repository holds no compiled file. ``NUMBACNN_PREBUILT=0`` turns it off. Where the
tier cannot serve this process (none compiled, another platform, Python, numba or CPU, or stale
sources) the first kernel compiled says so in one line (``NOTICE``).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # numbacnn/
FOLDER = os.path.join(PACKAGE, "_prebuilt")
# Instruction-set levels (the x86-64 psABI's), as LLVM CPU names, with the host features each needs;
# a host runs the first level whose features it has. The last level is the one the build runs.
_V3 = ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sse4.1", "sse4.2",
       "ssse3", "cx16", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
LEVELS: dict[str, tuple[str, ...]] = {
    # x86-64-v4-bf16 and AMX's bf16 tiles (Intel Xeons from Sapphire Rapids on)
    "x86-64-v4-amx": (*_V4, "avx512bf16", "amx-tile", "amx-bf16"),
    "x86-64-v4-bf16": (*_V4, "avx512bf16"),  # x86-64-v4 with AVX512_BF16 (kernels/cpu/bf16.py)
    "x86-64-v4": _V4,
    "x86-64-v3": _V3,
}
# The LLVM CPU a level compiles for, where its name is not one
CPU_NAMES: dict[str, str] = {"x86-64-v4-amx": "x86-64-v4", "x86-64-v4-bf16": "x86-64-v4"}
# Code generation options per level beyond its features. LLVM's x86-64-v4 keeps loops at 256-bit
# vectors (Skylake-X's tuning, for its clock drop under 512-bit code); with 512-bit vectors the
# shipped level ran 1.08x (training) and 1.15x (inference) the x86-64-v3 level against PyTorch on
# an AMD EPYC (Zen 4), as fast as code numba compiled for that CPU (docs/performance.md).
CODEGEN: dict[str, tuple[str, ...]] = {level: ("-prefer-256-bit",)
                                       for level in ("x86-64-v4-amx", "x86-64-v4-bf16", "x86-64-v4")}
TRIPLE = "x86_64-unknown-linux-gnu"
# Settings under which the prebuilt code is not what the user asked for: numba's own code options
# (index checks, debug info, another optimisation level or CPU), or numbacnn's cache switched off.
_OFF_WHEN_SET = ("NUMBACNN_NO_CACHE", "NUMBA_BOUNDSCHECK", "NUMBA_DEBUGINFO", "NUMBA_OPT", "NUMBA_CPU_NAME",
                 "NUMBA_CPU_FEATURES", "NUMBA_DISABLE_JIT")
_BUILD_ENV = "NUMBACNN_PREBUILT_BUILD"  # set in the build's child processes: the level being built


# The source files outside kernels/cpu compiled into the kernels: the kernels' parallel loop and the
# team region's runtime (its packers and its parallel region)
_RUNTIME = (("runtime", "parallel.py"), ("runtime", "team_region.py"))


def source_stamp() -> str:
    """SHA-256 over the compiled sources (numbacnn/kernels/cpu/*.py in name order, then _RUNTIME's
    files) and the compile flags that ``config.kernel`` gives them (``flags``):
    compiled code depends on every helper a kernel inlines and on those flags, and on nothing else
    (not on the plans, layers or docs)."""
    from . import flags as _flags

    folder = os.path.join(PACKAGE, "kernels", "cpu")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))
    files += [os.path.join(PACKAGE, *parts) for parts in _RUNTIME]
    h = hashlib.sha256()
    for path in files:
        h.update(os.path.relpath(path, PACKAGE).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(repr((sorted(_flags.FASTMATH), _flags.KERNEL_OPT)).encode())
    return h.hexdigest()


def _switched_off() -> bool:
    """The user turned the tier off (NUMBACNN_PREBUILT=0) or asked numba for other code."""
    return (os.environ.get("NUMBACNN_PREBUILT", "1") == "0"
            or any(os.environ.get(name, "") not in ("", "0") for name in _OFF_WHEN_SET))


def _host_level() -> str | None:
    """The level whose prebuilt kernels this process can run, or None (another OS or CPU family, a
    CPU without AVX2/FMA, switched off, or a numba code option set). ``NUMBACNN_PREBUILT`` is 1 (the
    default: the highest level the host has), 0 (off) or a level's name (at most that level: e.g.
    x86-64-v3 for 256-bit code on an AVX-512 host)."""
    for level in host_levels():
        if os.path.isdir(os.path.join(FOLDER, level)):
            return level
    return None


def host_levels() -> list[str]:
    """The levels this host's CPU runs, highest first, whether built or not (capped by a level
    named in ``NUMBACNN_PREBUILT``; none when switched off or on another platform)."""
    choice = os.environ.get("NUMBACNN_PREBUILT", "1") or "1"
    if choice not in ("0", "1") and choice not in LEVELS:
        raise ValueError(f"NUMBACNN_PREBUILT={choice!r}: expected 1 (the default), 0 (off) or one of "
                         f"{', '.join(LEVELS)}")
    if _switched_off():
        return []
    import llvmlite.binding as ll

    if ll.get_process_triple() != TRIPLE:
        return []
    host = ll.get_host_cpu_features()
    names = list(LEVELS)
    return [level for level in names[names.index(choice) if choice in LEVELS else 0:]
            if all(host.get(f, False) for f in LEVELS[level])
            and ("amx-tile" not in LEVELS[level] or amx_permitted())]


_state: dict[str, Any] = {}


def amx_permitted() -> bool:
    """Whether this process may use AMX's tiles. Linux hands a process the tile state only when it
    asks (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, kernel 5.16 and later; without it the first
    tile instruction is an illegal instruction); asked once, for every thread of the process."""
    if "amx" not in _state:
        import platform

        ok = False
        if sys.platform.startswith("linux") and platform.machine() == "x86_64":
            import ctypes

            try:  # SYS_arch_prctl 158, ARCH_REQ_XCOMP_PERM 0x1023, XFEATURE_XTILEDATA 18
                ok = ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18) == 0
            except (OSError, AttributeError):
                ok = False
        _state["amx"] = ok
    return bool(_state["amx"])


def _level_and_stamp() -> tuple[str | None, str]:
    if "level" not in _state:
        build = os.environ.get(_BUILD_ENV)
        _state["level"] = build or _host_level()
        _state["stamp"] = source_stamp() if _state["level"] else ""
    return _state["level"], _state["stamp"]


def _cache_class() -> type:
    """numba's FunctionCache with the prebuilt tier's locator and index key (built on first use, so
    that importing this module does not import numba's caching machinery)."""
    if "class" in _state:
        return _state["class"]
    from numba.core.caching import CompileResultCacheImpl, FunctionCache, _CacheLocator

    class Locator(_CacheLocator):
        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._path = os.path.join(FOLDER, _level_and_stamp()[0] or "none")

        def ensure_cache_path(self) -> None:
            os.makedirs(self._path, exist_ok=True)

        def get_cache_path(self) -> str:
            return self._path

        def get_source_stamp(self) -> str:  # type: ignore[override]
            return _level_and_stamp()[1]

        def get_disambiguator(self) -> str:
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            return cls(py_func, py_file)

    class Impl(CompileResultCacheImpl):
        _locator_classes = [Locator]

    class PrebuiltCache(FunctionCache):
        _impl_class = Impl

        def _index_key(self, sig: Any, codegen: Any) -> tuple:
            # the level's name, not the host's CPU: the code runs on every host that has its features
            sig_key, _, code_hashes = super()._index_key(sig, codegen)
            return sig_key, ("numbacnn-prebuilt", _level_and_stamp()[0], TRIPLE), code_hashes

        def has_index(self) -> bool:
            return bool(self._cache_file._load_index())

    _state["class"] = PrebuiltCache
    return PrebuiltCache


class TieredCache:
    """A kernel's cache: the prebuilt tier first (read-only), then numba's own ``user`` cache (a
    FunctionCache, or a NullCache when nothing is writable), which also receives what is compiled.
    Stands in for numba's cache object on the dispatcher (``dispatcher._cache``)."""

    def __init__(self, py_func: Any, user: Any) -> None:
        self.user = user
        self.prebuilt = None
        if _level_and_stamp()[0] is not None:
            try:
                self.prebuilt = _cache_class()(py_func)
            except Exception:  # numba's caching internals moved: numba's own cache alone
                pass
        self.building = bool(os.environ.get(_BUILD_ENV))

    @property
    def cache_path(self) -> str:
        return self.user.cache_path

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if self.prebuilt is not None:
            try:
                cres = self.prebuilt.load_overload(sig, target_context)
            except Exception:  # an unreadable or foreign file: compile instead
                cres = None
            if cres is not None or self.building:
                return cres
        cres = self.user.load_overload(sig, target_context)
        if cres is None and not self.building:
            _notice_once()
        return cres

    def save_overload(self, sig: Any, data: Any) -> None:
        if self.building and self.prebuilt is not None:
            self.prebuilt.save_overload(sig, data)
        else:
            self.user.save_overload(sig, data)

    def enable(self) -> None:
        self.user.enable()

    def disable(self) -> None:
        self.user.disable()

    def flush(self) -> None:
        self.user.flush()

    def is_cold(self) -> bool:
        """Neither tier holds anything for this kernel (its index files are missing or stale)."""
        if self.prebuilt is not None and not self.building:
            try:
                if self.prebuilt.has_index():
                    return False
            except Exception:
                pass
        index = getattr(getattr(self.user, "_cache_file", None), "_index_path", None)
        return index is not None and not os.path.exists(index)


NOTICE = ("numbacnn: compiling kernels for this machine ({why}); the first run compiles for half a "
          "minute to a minute and a half (the default digits run on 2 cores: 28 s on an AMD Zen 5, 84 s "
          "on an Intel Xeon), later runs load them from numba's cache")


def _notice_once() -> None:
    """One line on stderr when a kernel compiles because the shipped tier cannot serve this process
    (nothing when NUMBACNN_PREBUILT=0 or a numba code option turned it off on purpose)."""
    if _state.get("noticed") or _switched_off():
        return
    _state["noticed"] = True
    try:
        info = status()
    except Exception:  # pragma: no cover - a damaged install: compile silently
        return
    level = info["level"]
    if level is None and host_levels():
        why = "none compiled ahead: python -m numbacnn compile does it once"
    elif level is None:
        why = "no kernel tier for this platform or CPU: it is x86-64 Linux with AVX2 and FMA"
    elif not info.get(level, {}).get("current"):
        why = "the kernels compiled ahead are older than the kernel sources: python -m numbacnn compile"
    elif info[level].get("builds", {}).get(_python()) != _numba_version():
        shipped = ", ".join(f"numba {v} under Python {p}" for p, v in sorted(info[level]["builds"].items()))
        why = (f"the shipped kernels are for {shipped or 'no numba'}; this is numba {_numba_version()} "
               f"under Python {_python()}")
    else:
        return  # the tier is usable: a specialisation it does not hold, compiled once and cached
    sys.stderr.write(NOTICE.format(why=why) + "\n")


_ATTACHED: list[Any] = []  # every kernel's dispatcher (the build lists their specialisations)


def attach(dispatcher: Any) -> None:
    """Give a kernel's dispatcher the tiered cache (called by ``config.kernel``)."""
    if hasattr(dispatcher, "_cache"):
        dispatcher._cache = TieredCache(dispatcher.py_func, dispatcher._cache)
        _ATTACHED.append(dispatcher)


def _current(meta: dict[str, Any], level: str, stamp: str) -> bool:
    """Whether a level's level.json says it was built from these sources and code options."""
    return meta.get("stamp") == stamp and meta.get("codegen", []) == list(CODEGEN.get(level, ()))


def _python() -> str:
    return "{}.{}".format(*sys.version_info[:2])


def _meta(level: str) -> dict[str, Any]:
    try:
        with open(os.path.join(FOLDER, level, "level.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _numba_version() -> str:
    import numba

    return numba.__version__


def kernel_features() -> tuple[str, ...]:
    """The instruction-set features the kernels of this process run with: the tier's level's where
    the tier serves it, else the host's (numba compiles for the host)."""
    level = _level_and_stamp()[0]
    if level is not None and status().get("usable"):
        return LEVELS[level]
    if os.environ.get("NUMBA_CPU_FEATURES"):
        return tuple(f[1:] for f in os.environ["NUMBA_CPU_FEATURES"].split(",") if f.startswith("+"))
    import llvmlite.binding as ll

    return tuple(f for f, on in ll.get_host_cpu_features().items() if on)


def status() -> dict[str, Any]:
    """What the prebuilt tier offers this process: ``level``, the level this host can run (or None);
    ``usable``, whether it holds kernels for this Python and numba; per shipped level its
    ``level.json`` and ``current``, whether it was built from the current kernel sources and code
    generation options."""
    level, stamp = _level_and_stamp()
    shipped = sorted(d for d in (os.listdir(FOLDER) if os.path.isdir(FOLDER) else []) if d in LEVELS)
    info: dict[str, Any] = {"level": level, "shipped": shipped}
    for name in shipped:
        meta = _meta(name)
        meta["current"] = _current(meta, name, stamp or source_stamp())
        info[name] = meta
    info["usable"] = bool(level and info.get(level, {}).get("current")
                          and info[level].get("builds", {}).get(_python()) == _numba_version())
    return info
