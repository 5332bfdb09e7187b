"""Kernels compiled ahead of time for a fixed x86-64 level and shipped with the package: a new install
loads them the way numba loads its own disk cache, instead of compiling for 20-40 s.

numba's disk cache is keyed by the source file's modification time and by the exact host CPU, so a
fresh install (new checkout, new virtualenv, new machine) always starts cold. The prebuilt tier is
numba's cache format under another key: the SHA-256 of every kernel source file (any change to a
kernel or to its flags in ``_config.py`` invalidates the whole tier) and a named instruction-set
level (``x86-64-v3``: AVX2 and FMA, every x86-64 server CPU since 2015) instead of the host's CPU
name. Each kernel looks there first (when the host has every feature of the level), then in numba's
own cache, and compiles only what neither holds. The code for the level differs from code compiled
for the host CPU only in instruction scheduling; measured speeds: docs/performance.md.

``python dev/build_prebuilt.py`` recompiles the tier (one process per level, every kernel
specialisation that the presets, the optimizers, evaluation and the estimator use); a test fails
when the kernels' sources no longer match the shipped tier. ``NUMBACNN_PREBUILT=0`` turns it off.
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
# Instruction-set levels (the x86-64 psABI's), as LLVM CPU names, with the host features each needs.
LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sse4.1",
                  "sse4.2", "ssse3", "cx16", "xsave"),
}
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
    CPU without AVX2/FMA, switched off, or a numba code option set)."""
    if os.environ.get("NUMBACNN_PREBUILT", "1") == "0":
        return None
    if any(os.environ.get(name, "") not in ("", "0") for name in _OFF_WHEN_SET):
        return None
    import llvmlite.binding as ll

    if ll.get_process_triple() != TRIPLE:
        return None
    host = ll.get_host_cpu_features()
    for level, needs in LEVELS.items():
        if all(host.get(f, False) for f in needs) and os.path.isdir(os.path.join(FOLDER, level)):
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


def attach(dispatcher: Any) -> None:
    """Give a kernel's dispatcher the tiered cache (called by ``_config.kernel``)."""
    if hasattr(dispatcher, "_cache"):
        dispatcher._cache = TieredCache(dispatcher.py_func, dispatcher._cache)


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


def build(levels: list[str] | None = None) -> None:
    """Compile the tier for this Python and numba, for each level, in a child process each (the CPU
    level is fixed when numba starts). Other Pythons' files stay while the kernels' sources match."""
    import shutil
    import tempfile

    stamp, py = source_stamp(), _python()
    for level in levels or list(LEVELS):
        target = os.path.join(FOLDER, level)
        meta = _meta(level)
        if meta.get("stamp") != stamp:
            shutil.rmtree(target, ignore_errors=True)
            meta = {}
        os.makedirs(target, exist_ok=True)
        tag = ".py" + py.replace(".", "")  # numba's cache files name the Python: ".py311."
        for name in os.listdir(target):
            if tag in name:
                os.remove(os.path.join(target, name))
        env = dict(os.environ, NUMBA_CPU_NAME=level, NUMBA_CPU_FEATURES="+" + ",+".join(LEVELS[level]),
                   NUMBACNN_PRECOMPILE="0", NUMBA_CACHE_DIR=tempfile.mkdtemp(), **{_BUILD_ENV: level})
        env.pop("NUMBACNN_NO_CACHE", None)
        subprocess.run([sys.executable, "-c", "from numbacnn import prebuilt; prebuilt._workloads()"],
                       env=env, check=True)
        builds = dict(meta.get("builds", {}), **{py: _numba_version()})
        with open(os.path.join(target, "level.json"), "w") as f:
            json.dump({"level": level, "stamp": stamp, "triple": TRIPLE, "builds": builds}, f, indent=1)
        files = [n for n in os.listdir(target) if n.endswith(".nbc") and tag in n]
        size = sum(os.path.getsize(os.path.join(target, n)) for n in files)
        print(f"{level}, Python {py}: {len(files)} specialisations, {size / 1e6:.1f} MB in {target}")


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
    ``level.json`` and ``current``, whether it was built from the current kernel sources."""
    level, stamp = _level_and_stamp()
    shipped = sorted(d for d in (os.listdir(FOLDER) if os.path.isdir(FOLDER) else []) if d in LEVELS)
    info: dict[str, Any] = {"level": level, "shipped": shipped}
    for name in shipped:
        meta = _meta(name)
        meta["current"] = meta.get("stamp") == (stamp or source_stamp())
        info[name] = meta
    info["usable"] = bool(level and info.get(level, {}).get("current")
                          and info[level].get("builds", {}).get(_python()) == _numba_version())
    return info
