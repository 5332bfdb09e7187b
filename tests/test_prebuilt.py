"""The kernel tier (numbacnn/runtime/prebuilt.py, built by ``python -m numbacnn compile``): current, used from
an empty numba cache, computing what kernels compiled for this host compute, and ignored when they do
not fit. CI compiles it before the tests; where none is built the tests that need one skip."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from numbacnn.kernels import cpu as K
from numbacnn.runtime import prebuilt

needs_level = pytest.mark.skipif(not prebuilt.status()["usable"], reason="no prebuilt kernels run here "
                                 "(not x86-64 Linux with AVX2 and FMA, none built for this Python and "
                                 "numba, or NUMBACNN_PREBUILT=0)")


def test_no_compiled_file_is_part_of_the_repository():
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    compiled = [f for f in r.stdout.splitlines() if f.endswith((".nbc", ".nbi", ".so", ".pyc"))]
    assert compiled == []


def test_a_compiled_tier_is_current():
    """Fails after a kernel or its compile flags change until ``python -m numbacnn compile`` runs
    again (a stale tier is never loaded: see test_stale_sources_fall_back_to_compiling)."""
    info = prebuilt.status()
    if not info["shipped"]:
        pytest.skip("no kernel tier compiled here (python -m numbacnn compile)")
    for level in info["shipped"]:
        assert info[level]["current"], f"{level}: recompile with python -m numbacnn compile"
        assert info[level]["triple"] == prebuilt.TRIPLE


def test_every_declared_kernel_is_in_the_tier():
    """Every kernel the package declares for export (``kernel(export=True)``) has specialisations in
    each current level of the tier: compile.py's workload reaches it, so no preset's first run
    compiles a kernel the tier could have held."""
    info = prebuilt.status()
    levels = [lv for lv in info["shipped"] if info[lv]["current"]]
    if not levels:
        pytest.skip("no current kernel tier compiled here (python -m numbacnn compile)")
    for level in levels:
        files = os.listdir(os.path.join(prebuilt.FOLDER, level))
        held = {f.split("-")[0] for f in files if f.endswith(".nbi")}
        missing = sorted(f"{fn.py_func.__module__.rsplit('.', 1)[1]}.{name}" for name in K.__all__
                         if (fn := getattr(K, name)) and
                         f"{fn.py_func.__module__.rsplit('.', 1)[1]}.{fn.py_func.__qualname__}" not in held)
        assert missing == [], f"{level}: not in compile.py's workload: {missing}"


TRAIN = r"""
import hashlib, json, sys
import numpy as np
import numbacnn as nc
from numbacnn.kernels import cpu as K
rng = np.random.default_rng(0)
out, digests = {}, {}
# the trainer's recorded steps (no 32-channel 3x3 layer: Winograd's kernels would double the compile)
for spec, opt in (("lenet5", "adam"), ("conv(6,5),relu,maxpool(2),conv(12,3,stride=2,padding=1),relu,"
                                       "dense(10)", "sgd")):
    net = nc.build_network(spec, (1, 28, 28), 10, seed=1)
    o = nc.Adam(net, lr=1e-3) if opt == "adam" else nc.SGD(net, lr=0.05, momentum=0.9, nesterov=True)
    x = rng.random((24, 1, 28, 28), dtype=np.float32)
    y = np.arange(24) % 10
    tr = nc.Trainer(net, o, batch_size=8, progress=False)
    tr.fit(x, y, 2, x, y)
    out[spec] = [float(v) for v in net.params[::97]] + [tr.history[-1]["test_loss"]]
    digests[spec] = hashlib.sha256(net.params.tobytes()).hexdigest()
x = rng.random((9, 1, 8, 8), dtype=np.float32)
y = rng.integers(0, 3, 9)
for spec, opt, kw in (  # forward and backward called one by one
        ("conv(12,3,padding=same),relu,maxpool(2),conv(8,3,padding=1),tanh,avgpool(2),"
         "conv(4,3,stride=2,padding=1),dense(8),relu", "rmsprop", dict(lr=0.01, momentum=0.5, centered=True)),
        ("conv(8,3,padding=same),bn,relu,res(conv(8,3,padding=same),bn),gap", "adamw", dict(lr=0.01))):
    net = nc.build_network(spec, (1, 8, 8), 3, seed=0)  # BatchNorm's backward, a residual block, gap
    o = nc.make_optimizer(opt, net, **kw)
    for _ in range(3):
        _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        net.backward(d)
        o.step()
    digests[opt] = hashlib.sha256(net.params.tobytes() + net.forward(x).tobytes()).hexdigest()
# F(4x4, 3x3) (32 -> 32 on 12 x 12) with BatchNorm and GELU, and 2x2 and 1x1 layers' weight gradients
# (a tap per kernel row): their fast-math loops once compiled differently fresh and from the cache
x = rng.random((8, 1, 13, 13), dtype=np.float32)
y = rng.integers(0, 3, 8)
net = nc.build_network("conv(8,2,bias=False),relu,conv(32,3,padding=same),bn,gelu,conv(32,3,padding=same),bn,"
                       "gelu,maxpool(2),conv(8,1)", (1, 13, 13), 3, seed=0)
o = nc.SGD(net, lr=0.05, momentum=0.9)
for _ in range(2):
    _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
    net.backward(d)
    o.step()
f4 = "wino4_u" in net.layers[5]._buffers  # F(4x4, 3x3) trained
digests["winograd4"] = hashlib.sha256(net.params.tobytes() + net.forward(x).tobytes()).hexdigest()
misses = {name: sum(getattr(K, name).stats.cache_misses.values()) for name in K.__all__}
print(json.dumps({"params": out, "digests": digests, "compiled": {k: v for k, v in misses.items() if v},
                  "level": nc.runtime.prebuilt._level_and_stamp()[0], "f4": f4}))
"""


def _train(cache, **env_extra):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), **env_extra)
    env.pop("NUMBACNN_NO_CACHE", None)
    r = subprocess.run([sys.executable, "-c", TRAIN], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _levels_this_host_runs():
    import llvmlite.binding as ll

    host = ll.get_host_cpu_features()
    return [level for level, needs in prebuilt.LEVELS.items() if all(host.get(f, False) for f in needs)]


@pytest.mark.slow
def test_kernels_from_numba_s_cache_and_from_the_tier_compute_what_fresh_ones_do(tmp_path):
    """One test around the suite's one cold compile of these kernels (a parallel run cannot split
    it): TRAIN with the tier off, twice over one numba cache, compiling every kernel into the empty
    cache and then loading them all from it, gives the same bits (when the parallel loops were prange
    loops, fast-math 'contract' made LLVM fuse multiply-adds differently in the two, and 'reassoc'
    regrouped BatchNorm's input gradient, F(4x4, 3x3)'s transforms and a one-tap weight gradient's
    sums in a fresh compile only). Then, where a tier is compiled
    here, every level this host can run (`python -m numbacnn compile` builds the host's; with
    --all-levels an AVX-512 host also has the x86-64-v3 cap) trains from an empty cache as the
    compiled run does."""
    cache = tmp_path / "numba-cache"
    first = _train(cache, NUMBACNN_PREBUILT="0")
    second = _train(cache, NUMBACNN_PREBUILT="0")
    assert first["compiled"] and list(cache.rglob("*.nbi")) and first["level"] is None and first["f4"]
    assert second["compiled"] == {}  # every kernel came from the cache
    assert second["digests"] == first["digests"]
    info = prebuilt.status()
    if not info["usable"]:  # the tier's part: test_a_compiled_tier_is_current says why it is missing
        return
    levels = [level for level in _levels_this_host_runs() if info.get(level, {}).get("current")]
    assert levels and levels[0] == info["level"]
    for level in levels:
        pre = _train(tmp_path / level, NUMBACNN_PREBUILT=level)
        assert pre["level"] == level
        assert pre["compiled"] == {}, level  # every kernel of both nets' training and evaluation was shipped
        assert not list((tmp_path / level).rglob("*.nbi")), level
        # The same float32 arithmetic in the same order; only the instruction selection differs (on an
        # AVX2 host measured bit for bit equal; wider vectors may split fast-math reductions otherwise).
        for spec in pre["params"]:
            np.testing.assert_allclose(pre["params"][spec], first["params"][spec], rtol=1e-5, atol=1e-7,
                                       err_msg=f"{level} {spec}")


@needs_level
def test_stale_sources_fall_back_to_compiling(monkeypatch):
    """The tier is keyed by the kernels' sources: with another stamp nothing loads from it (numba's
    own cache and the compiler take over, so an edited kernel never runs its old code)."""
    from numba.core.caching import NullCache
    from numba.core.registry import cpu_target

    x = np.zeros(5, np.float32)
    K.relu_forward(x, x)  # (y, x): the 1-D float32 specialisation every ReLU uses
    sig = next(iter(K.relu_forward.overloads))
    ctx = cpu_target.target_context
    fresh = prebuilt.TieredCache(K.relu_forward.py_func, NullCache())
    assert fresh.load_overload(sig, ctx) is not None and not fresh.is_cold()
    monkeypatch.setitem(prebuilt._state, "stamp", "0" * 64)
    stale = prebuilt.TieredCache(K.relu_forward.py_func, NullCache())
    assert stale.load_overload(sig, ctx) is None


def test_every_level_holds_the_same_specialisations():
    """The AVX-512 level is compiled from the list the AVX2 level's workloads recorded: the same
    kernels, each with as many specialisations (numba numbers a kernel's files .0.nbc, .1.nbc, ...)."""
    if prebuilt.status()["shipped"] != sorted(prebuilt.LEVELS):
        pytest.skip("not every level compiled here (python -m numbacnn compile --all-levels)")
    files = {level: sorted(n for n in os.listdir(os.path.join(prebuilt.FOLDER, level)) if n.endswith(".nbc"))
             for level in prebuilt.LEVELS}
    v3 = files.pop("x86-64-v3")
    assert len(v3) > 50
    for level, names in files.items():
        assert names == v3, level


def _first_host_level():
    return (prebuilt.host_levels() or [None])[0]


def test_a_host_without_the_level_s_features_or_another_platform_uses_none(monkeypatch):
    import llvmlite.binding as ll

    for var in (*prebuilt._OFF_WHEN_SET, "NUMBACNN_PREBUILT"):
        monkeypatch.delenv(var, raising=False)
    v3 = {f: True for f in prebuilt.LEVELS["x86-64-v3"]}
    v4 = {f: True for f in prebuilt.LEVELS["x86-64-v4"]}
    monkeypatch.setattr(ll, "get_process_triple", lambda: prebuilt.TRIPLE)
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: dict(v4))  # e.g. Zen 4, Sapphire Rapids
    assert _first_host_level() == "x86-64-v4"
    monkeypatch.setenv("NUMBACNN_PREBUILT", "x86-64-v3")  # a cap: 256-bit code on an AVX-512 host
    assert _first_host_level() == "x86-64-v3"
    monkeypatch.setenv("NUMBACNN_PREBUILT", "x86-64-v5")
    with pytest.raises(ValueError, match="NUMBACNN_PREBUILT='x86-64-v5': expected 1"):
        _first_host_level()
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: dict(v4, avx512vl=False))
    monkeypatch.setenv("NUMBACNN_PREBUILT", "x86-64-v4")  # a cap, never a level the host lacks
    assert _first_host_level() == "x86-64-v3"
    monkeypatch.delenv("NUMBACNN_PREBUILT")
    assert _first_host_level() == "x86-64-v3"
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: dict(v3))
    assert _first_host_level() == "x86-64-v3"
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: dict(v3, fma=False))  # e.g. an old Xeon
    assert _first_host_level() is None
    monkeypatch.setattr(ll, "get_host_cpu_features", lambda: dict(v3))
    monkeypatch.setattr(ll, "get_process_triple", lambda: "aarch64-unknown-linux-gnu")
    assert _first_host_level() is None
    monkeypatch.setattr(ll, "get_process_triple", lambda: prebuilt.TRIPLE)
    for name in ("NUMBACNN_PREBUILT", "NUMBA_BOUNDSCHECK", "NUMBACNN_NO_CACHE", "NUMBA_OPT"):
        for var in prebuilt._OFF_WHEN_SET:
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv(name, "0" if name == "NUMBACNN_PREBUILT" else "1")
        assert _first_host_level() is None, name  # off, or compiled code the user asked to change


def test_the_stamp_covers_every_kernel_source_and_the_jit_flags(tmp_path, monkeypatch):
    """A helper edited in another kernel file changes the stamp (numba's own cache misses that
    case), and so do the kernels' compile flags; a plan, a layer or a comment in runtime/config.py does not
    (the shipped binaries stay valid)."""
    import shutil

    from numbacnn.runtime import flags as _flags

    orig = prebuilt.source_stamp()
    copy = tmp_path / "numbacnn"
    shutil.copytree(os.path.join(ROOT, "numbacnn"), copy, ignore=shutil.ignore_patterns("__pycache__",
                                                                                         "_prebuilt"))
    monkeypatch.setattr(prebuilt, "PACKAGE", str(copy))
    base = prebuilt.source_stamp()
    assert base == orig
    for rel, changes in (("kernels/cpu/_util.py", True), ("kernels/cpu/pool.py", True),
                         ("runtime/team_region.py", True), ("runtime/parallel.py", True),
                         ("runtime/config.py", False),
                         ("backend/cpu_conv.py", False), ("layers/conv.py", False)):
        path = copy / rel
        text = path.read_text()
        path.write_text(text + "\n# edited\n")
        assert (prebuilt.source_stamp() != base) == changes, rel
        path.write_text(text)
    assert prebuilt.source_stamp() == base
    monkeypatch.setattr(_flags, "KERNEL_OPT", 3)
    assert prebuilt.source_stamp() != base
    monkeypatch.setattr(_flags, "KERNEL_OPT", 2)
    monkeypatch.setattr(_flags, "FASTMATH", {"nsz", "reassoc", "contract"})
    assert prebuilt.source_stamp() != base


NOTICE = r"""
import numpy as np
from numbacnn.kernels import cpu as K
x = np.zeros(3, np.float32)
K.relu_forward(x, x)
K.tanh_forward(x, x)
"""


@needs_level
@pytest.mark.slow
@pytest.mark.parametrize("switch, expected", [("1", 1), ("0", 0)])
def test_compiling_because_the_tier_cannot_serve_says_so_in_one_line(tmp_path, switch, expected):
    """A kernel file edited after the build (the shipped tier is stale): the first compile says so,
    once however many kernels compile; nothing when the user turned the tier off."""
    import shutil

    copy = tmp_path / "pkg"
    shutil.copytree(os.path.join(ROOT, "numbacnn"), copy / "numbacnn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "numbacnn" / "kernels" / "cpu" / "activations.py", "a") as f:
        f.write("\n# edited after the build\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), NUMBACNN_PREBUILT=switch,
               PYTHONPATH=str(copy))
    r = subprocess.run([sys.executable, "-c", NOTICE], env=env, cwd=str(copy), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("numbacnn: compiling kernels")]
    assert len(lines) == expected, r.stderr
    if expected:
        assert "older than the kernel sources" in lines[0]


def test_the_notice_names_the_shipped_and_the_running_versions(monkeypatch, capsys):
    """Seen on a machine with Python 3.12 and numba 0.68.0: the line said "for numba ? under Python
    3.12"; it names the builds the tier holds and what runs."""
    level = "x86-64-v4"
    monkeypatch.setattr(prebuilt, "_state", {})
    monkeypatch.setattr(prebuilt, "_switched_off", lambda: False)
    monkeypatch.setattr(prebuilt, "status", lambda: {"level": level, level: {
        "current": True, "builds": {"3.11": "0.68.1"}}})
    monkeypatch.setattr(prebuilt, "_python", lambda: "3.12")
    monkeypatch.setattr(prebuilt, "_numba_version", lambda: "0.68.0")
    prebuilt._notice_once()
    prebuilt._notice_once()
    err = capsys.readouterr().err.splitlines()
    assert err == [prebuilt.NOTICE.format(why="the shipped kernels are for numba 0.68.1 under Python 3.11; "
                                              "this is numba 0.68.0 under Python 3.12")]


WIDTH = r"""
import numba
import numpy as np
import numbacnn  # noqa: F401  (sets numba's CPU features before numba's CPU target exists)

@numba.njit
def axpy(a, b):
    for i in range(a.size):
        a[i] += np.float32(2) * b[i]

a = np.ones(1000, np.float32)
axpy(a, a)
print("zmm" in next(iter(axpy.inspect_asm().values())))
"""


@pytest.mark.skipif(not __import__("llvmlite.binding").binding.get_host_cpu_features().get("avx512f"),
                    reason="no AVX-512 here")
@pytest.mark.parametrize("prebuilt_level, wide", [("0", True), ("x86-64-v3", False)])
def test_code_compiled_on_an_avx512_host_uses_512_bit_vectors(tmp_path, prebuilt_level, wide):
    """Compiled as for an Intel AVX-512 CPU (whose LLVM tuning keeps loops at 256 bits), a loop gets
    512-bit (zmm) vectors, as the shipped x86-64-v4 level has; NUMBACNN_PREBUILT=x86-64-v3 keeps
    LLVM's 256-bit choice."""
    env = dict(os.environ, NUMBA_CPU_NAME="skylake-avx512", NUMBACNN_PREBUILT=prebuilt_level,
               NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_FEATURES", None)
    r = subprocess.run([sys.executable, "-c", WIDTH], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [str(wide)]
