"""Kernels compiled ahead of time for fixed x86-64 levels and shipped with the package: a new install
loads them the way numba loads its own disk cache, instead of compiling for 20-40 s.

numba's disk cache is keyed by the source file's modification time and by the exact host CPU, so a
fresh install (new checkout, new virtualenv, new machine) always starts cold. The prebuilt tier is
numba's cache format under another key: the SHA-256 of every kernel source file (any change to a
kernel or to its flags in ``_config.py`` invalidates the whole tier) and a named instruction-set
level instead of the host's CPU name: ``x86-64-v4`` (AVX-512, compiled for 512-bit vectors) where
the host has it, else ``x86-64-v3`` (AVX2 and FMA, every x86-64 server CPU since 2015). Each kernel
looks there first, then in numba's own cache, and compiles only what neither holds. Measured
speeds against code compiled for the host CPU: docs/performance.md.

``python dev/build_prebuilt.py`` recompiles the tier: the lowest level runs every kernel
specialisation that the presets, the optimizers, evaluation and the estimator use and records them;
the other levels compile that list without running it, so any host with AVX2 builds every level. A
test fails when the kernels' sources no longer match the shipped tier. ``NUMBACNN_PREBUILT=0``
turns it off.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any

PACKAGE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(PACKAGE, "_prebuilt")
# Instruction-set levels (the x86-64 psABI's), as LLVM CPU names, with the host features each needs;
# a host runs the first level whose features it has. The last level is the one the build runs.
_V3 = ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sse4.1", "sse4.2",
       "ssse3", "cx16", "xsave")
LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64-v4": (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
    "x86-64-v3": _V3,
}
# Code generation options per level beyond its features. LLVM's x86-64-v4 keeps loops at 256-bit
# vectors (Skylake-X's tuning, for its clock drop under 512-bit code); with 512-bit vectors the
# shipped level ran 1.08x (training) and 1.15x (inference) the x86-64-v3 level against PyTorch on
# an AMD EPYC (Zen 4), as fast as code numba compiled for that CPU (docs/performance.md).
CODEGEN: dict[str, tuple[str, ...]] = {"x86-64-v4": ("-prefer-256-bit",)}
TRIPLE = "x86_64-unknown-linux-gnu"
# Settings under which the prebuilt code is not what the user asked for: numba's own code options
# (index checks, debug info, another optimisation level or CPU), or numbacnn's cache switched off.
_OFF_WHEN_SET = ("NUMBACNN_NO_CACHE", "NUMBA_BOUNDSCHECK", "NUMBA_DEBUGINFO", "NUMBA_OPT", "NUMBA_CPU_NAME",
                 "NUMBA_CPU_FEATURES", "NUMBA_DISABLE_JIT")
_BUILD_ENV = "NUMBACNN_PREBUILT_BUILD"  # set in the build's child processes: the level being built


def source_stamp() -> str:
    """SHA-256 over the kernels' sources (numbacnn/kernels/cpu/*.py) and _config.py, in name order:
    compiled code depends on every helper a kernel inlines and on the flags chosen in _config."""
    folder = os.path.join(PACKAGE, "kernels", "cpu")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))
    h = hashlib.sha256()
    for path in [*files, os.path.join(PACKAGE, "_config.py")]:
        h.update(os.path.relpath(path, PACKAGE).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _host_level() -> str | None:
    """The level whose prebuilt kernels this process can run, or None (another OS or CPU family, a
    CPU without AVX2/FMA, switched off, or a numba code option set). ``NUMBACNN_PREBUILT`` is 1 (the
    default: the highest level the host has), 0 (off) or a level's name (at most that level: e.g.
    x86-64-v3 for 256-bit code on an AVX-512 host)."""
    choice = os.environ.get("NUMBACNN_PREBUILT", "1") or "1"
    if choice == "0":
        return None
    names = list(LEVELS)
    if choice != "1" and choice not in LEVELS:
        raise ValueError(f"NUMBACNN_PREBUILT={choice!r}: expected 1 (the default), 0 (off) or one of "
                         f"{', '.join(names)}")
    if any(os.environ.get(name, "") not in ("", "0") for name in _OFF_WHEN_SET):
        return None
    import llvmlite.binding as ll

    if ll.get_process_triple() != TRIPLE:
        return None
    host = ll.get_host_cpu_features()
    for level in names[names.index(choice) if choice in LEVELS else 0:]:
        if all(host.get(f, False) for f in LEVELS[level]) and os.path.isdir(os.path.join(FOLDER, level)):
            return level
    return None


_state: dict[str, Any] = {}


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
        return self.user.load_overload(sig, target_context)

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


_ATTACHED: list[Any] = []  # every kernel's dispatcher (the build lists their specialisations)


def attach(dispatcher: Any) -> None:
    """Give a kernel's dispatcher the tiered cache (called by ``_config.kernel``)."""
    if hasattr(dispatcher, "_cache"):
        dispatcher._cache = TieredCache(dispatcher.py_func, dispatcher._cache)
        _ATTACHED.append(dispatcher)


# -- building the tier -------------------------------------------------------------------------------

def _workloads() -> None:
    """Run every kernel specialisation a user's training, evaluation or estimator fit reaches: the
    presets with each optimizer, both step paths, every layer kind and conv plan."""
    import warnings

    import numpy as np

    import numbacnn as nc

    rng = np.random.default_rng(0)
    nets = [(spec, shape) for spec, shape in (
        ("compact", (1, 8, 8)), ("small", (1, 28, 28)), ("mnistcnn", (1, 28, 28)), ("lenet5", (1, 28, 28)),
        ("mlp", (1, 8, 8)), ("conv(8,3,stride=2),tanh,avgpool(2),conv(12,5,stride=2,padding=2),relu,"
                             "maxpool(3,stride=2,padding=1),dense(10),tanh,dropout(0.3)", (3, 20, 20)),
        ("conv(6,3),relu,maxpool(3,stride=1),conv(8,3,stride=2),relu,maxpool(2,stride=1),dense(6)",
         (2, 12, 12)))]
    optimizers = [lambda n: nc.Adam(n, lr=1e-3), lambda n: nc.Adam(n, lr=1e-3, weight_decay=1e-4),
                  lambda n: nc.SGD(n, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4),
                  lambda n: nc.SGD(n, lr=0.01), lambda n: nc.RMSProp(n, lr=1e-3),
                  lambda n: nc.RMSProp(n, lr=1e-3, momentum=0.9, centered=True)]
    for spec, shape in nets:
        x = rng.random((20, *shape), dtype=np.float32)
        y = np.arange(20) % 10
        for i, make_opt in enumerate(optimizers):
            net = nc.build_network(spec, shape, 10, seed=0)
            trainer = nc.Trainer(net, make_opt(net), batch_size=8, seed=0, progress=False,
                                 step_programs=i % 2 == 0)
            trainer.fit(x, y, 1, x, y)
        nc.evaluate(net, x, y)
        net.forward(x, training=False)
        logits = net.forward(x, training=True)
        _, d = nc.softmax_cross_entropy(logits, y)
        net.backward(d)  # the input gradient too (the report's saliency)
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = nc.CNNClassifier(max_epochs=1, random_state=0).fit(X[:200], y[:200],
                                                                  sample_weight=np.ones(200))
        clf.fit(X[:200], y[:200])
        clf.predict_proba(X[:50])
        clf.transform(X[:50])


def _record(path: str) -> None:
    """Write every kernel specialisation this process holds (module, name, argument types) to path."""
    import pickle

    jobs = [(d.py_func.__module__, d.py_func.__qualname__, tuple(sig)) for d in _ATTACHED
            for sig in list(d.overloads)]
    with open(path, "wb") as f:
        pickle.dump(jobs, f)


def _compile_recorded(path: str) -> None:
    """Compile the specialisations that ``_record`` wrote, without running them (a level the
    building host may not be able to run)."""
    import importlib
    import pickle

    with open(path, "rb") as f:
        jobs = pickle.load(f)
    for module, name, sig in jobs:
        getattr(importlib.import_module(module), name).compile(sig)


def build(levels: list[str] | None = None) -> None:
    """Compile the tier for this Python and numba, for each level, in a child process each (the CPU
    level is fixed when numba starts). The lowest level runs the workloads and records what they
    compiled; the others compile that record. Other Pythons' files stay while the sources match."""
    import tempfile

    stamp, py = source_stamp(), _python()
    wanted = levels or list(LEVELS)
    unknown = [level for level in wanted if level not in LEVELS]
    if unknown:
        raise ValueError(f"unknown level(s) {unknown}: choose from {list(LEVELS)}")
    base = list(LEVELS)[-1]
    record = os.path.join(tempfile.mkdtemp(), "specialisations.pkl")
    for level in [base, *(name for name in LEVELS if name != base)]:
        if level != base and level not in wanted:
            continue
        env = dict(os.environ, NUMBACNN_PRECOMPILE="0", NUMBA_CACHE_DIR=tempfile.mkdtemp())
        env.pop("NUMBACNN_NO_CACHE", None)
        if level in wanted:
            meta = _clear(level, stamp, py)
            env.update(NUMBA_CPU_NAME=level, NUMBA_CPU_FEATURES=",".join(
                [*("+" + f for f in LEVELS[level]), *CODEGEN.get(level, ())]), **{_BUILD_ENV: level})
        else:  # only to record the list: compiled for this host, into a throwaway cache
            env.update(NUMBACNN_PREBUILT="0")
            env.pop(_BUILD_ENV, None)
        code = (f"prebuilt._workloads(); prebuilt._record({record!r})" if level == base
                else f"prebuilt._compile_recorded({record!r})")
        subprocess.run([sys.executable, "-c", "from numbacnn import prebuilt; " + code], env=env, check=True,
                       cwd=os.path.dirname(PACKAGE))  # this package, not another one on the path
        if level not in wanted:
            continue
        target = os.path.join(FOLDER, level)
        builds = dict(meta.get("builds", {}), **{py: _numba_version()})
        with open(os.path.join(target, "level.json"), "w") as f:
            json.dump({"level": level, "stamp": stamp, "triple": TRIPLE, "builds": builds,
                       "codegen": list(CODEGEN.get(level, ()))}, f, indent=1)
        files = [n for n in os.listdir(target) if n.endswith(".nbc") and _tag(py) in n]
        size = sum(os.path.getsize(os.path.join(target, n)) for n in files)
        print(f"{level}, Python {py}: {len(files)} specialisations, {size / 1e6:.1f} MB in {target}")


def _tag(py: str) -> str:
    return ".py" + py.replace(".", "")  # numba's cache files name the Python: ".py311."


def _clear(level: str, stamp: str, py: str) -> dict[str, Any]:
    """Empty a level's folder of this Python's files (of every file when the sources changed);
    returns the level.json that stays valid."""
    import shutil

    target = os.path.join(FOLDER, level)
    meta = _meta(level)
    if not _current(meta, level, stamp):
        shutil.rmtree(target, ignore_errors=True)
        meta = {}
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(target):
        if _tag(py) in name:
            os.remove(os.path.join(target, name))
    return meta


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
