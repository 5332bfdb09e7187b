"""The cold-start warm-up: a child process compiles the conv backward kernels into numba's cache."""
import json
import os
import subprocess
import sys

import numpy as np
from conftest import ROOT

import numbacnn as nc
from numbacnn import _config
from numbacnn.backend import warmup

SCRIPT = r"""
import json, sys
import numpy as np
import numbacnn as nc
from numbacnn.backend import warmup
net = nc.build_network("lenet5", (1, 28, 28), 10, seed=3)
x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
y = np.arange(5) % 10
net.backend.start_precompile(net, x.shape[1:])  # as Trainer.fit does before its first step
started = bool(warmup._pending)
logits = net.forward(x, training=True)
_, d = nc.softmax_cross_entropy(logits, y)
net.backward(d, need_input_grad=False)
np.savez(sys.argv[1], **net.grad_dict())
import numbacnn.kernels.cpu as K
conv = [K.conv2d_backward_wide, K.conv2d_backward_positions]
print(json.dumps({"started": started, "misses": sum(sum(k.stats.cache_misses.values()) for k in conv)}))
"""


def _run(tmp_path, cache, name):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NUMBACNN_PRECOMPILE="1")
    env.pop("NUMBACNN_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / name)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["misses"] == 0  # this process loaded its conv backward kernels from the cache
    return res["started"]


def test_cold_cache_child_compiles_conv_backward_and_results_are_unchanged(tmp_path):
    cache = tmp_path / "cache"
    # empty cache: a child was started, and it compiled the conv backward kernels (the parent
    # loaded them from the cache: no cache miss)
    assert _run(tmp_path, cache, "cold.npz") is True
    index_files = {p.name.split("-")[0] for p in cache.rglob("*.nbi")}
    assert {"conv2d_wide.conv2d_backward_wide", "conv2d_positions.conv2d_backward_positions",
            "_util.sum_chunks"} <= index_files
    assert _run(tmp_path, cache, "warm.npz") is False  # warm cache: no child
    # the gradients are those of this process's own kernels, bit for bit
    net = nc.build_network("lenet5", (1, 28, 28), 10, seed=3)
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    _, d = nc.softmax_cross_entropy(net.forward(x, training=True), np.arange(5) % 10)
    net.backward(d, need_input_grad=False)
    for f in ("cold.npz", "warm.npz"):
        saved = np.load(tmp_path / f)
        for k, v in net.grad_dict().items():
            np.testing.assert_array_equal(saved[k], v, err_msg=f"{f}: {k}")


def test_no_child_without_disk_cache_or_when_switched_off(monkeypatch):
    net = nc.build_network("mnistcnn", (1, 28, 28), 10, seed=0)
    monkeypatch.setattr(warmup, "_cache_is_cold", lambda kernel: True)
    monkeypatch.setattr(warmup, "_started", set())
    monkeypatch.setenv("NUMBACNN_PRECOMPILE", "0")
    assert net.backend.start_precompile(net, (1, 28, 28)) is False
    monkeypatch.setenv("NUMBACNN_PRECOMPILE", "1")
    monkeypatch.setattr(_config, "_CACHE", False)
    assert net.backend.start_precompile(net, (1, 28, 28)) is False
    assert not warmup._pending


def test_the_trainer_starts_the_warm_up_once(monkeypatch):
    """The model never compiles ahead by itself: Trainer.fit asks the backend, once per trainer."""
    calls = []
    net = nc.build_network("conv(2,3),relu,dense(4)", (1, 6, 6), 3, seed=0)
    monkeypatch.setattr(type(net.backend), "start_precompile",
                        lambda self, n, shape: calls.append((n, shape)) or False)
    x = np.random.default_rng(0).random((10, 1, 6, 6), dtype=np.float32)
    net.forward(x, training=True)
    assert calls == []
    tr = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=4, progress=False)
    tr.fit(x, np.arange(10) % 3, 2)
    assert calls == [(net, (1, 6, 6))]


READ_ONLY_TRAIN = """
import numpy as np, numbacnn as nc
assert nc.__file__.startswith(sys.argv[1]), nc.__file__
net = nc.build_network("conv(2,3),relu,maxpool(2),dense(8),relu", (1, 6, 6), 3, seed=0)
tr = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=4, progress=False)
tr.fit(np.random.default_rng(0).random((12, 1, 6, 6), dtype=np.float32), np.arange(12) % 3, 1)
print("trained", tr.history[-1]["train_loss"])
"""


def test_no_writable_cache_directory_compiles_in_memory_after_one_warning(tmp_path):
    """A read-only install (no writable __pycache__, no user cache, no NUMBA_CACHE_DIR) imports and
    trains; numba would raise 'no locator available' at import. As root, read-only modes do not stop
    writes, so __pycache__ is a file here and the user cache lies under a file: numba's same path."""
    import shutil

    pkg = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "numbacnn"), pkg / "numbacnn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for d in [p for p in (pkg / "numbacnn").rglob("*") if p.is_dir()] + [pkg / "numbacnn"]:
        (d / "__pycache__").write_text("not a directory")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(pkg), HOME=str(blocker / "home"), XDG_CACHE_HOME=str(blocker / "cache"),
               PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", "import sys\n" + READ_ONLY_TRAIN, str(pkg)], env=env,
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trained" in r.stdout
    assert r.stderr.count("RuntimeWarning") == 1 and "set NUMBA_CACHE_DIR" in r.stderr
