"""The cold-start warm-up: a child process shares the compilation of a training step's kernels."""
import json
import os
import subprocess
import sys

import numba
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
opt = nc.SGD(net, lr=0.1, momentum=0.9)
x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
tr = nc.Trainer(net, opt, batch_size=5, progress=False, shuffle=False)
tr.train_epoch(x, np.arange(5) % 10)  # starts the warm-up before its first step, as fit does
started = warmup._child is not None
if started:
    warmup._child.wait(600)
np.savez(sys.argv[1], **net.state_dict())
import numbacnn.kernels.cpu as K
kernels = [K.conv2d_forward_wide, K.conv2d_forward_positions, K.conv2d_backward_wide,
           K.conv2d_backward_positions, K.dense_forward, K.dense_backward, K.sgd_update]
print(json.dumps({"started": started,
                  "compiled": {k.__name__: sum(k.stats.cache_misses.values()) for k in kernels}}))
"""


def _run(tmp_path, cache, name, precompile="1"):
    # without the prebuilt kernels: this is about compiling
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NUMBACNN_PRECOMPILE=precompile, NUMBACNN_PREBUILT="0")
    env.pop("NUMBACNN_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / name)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cold_cache_work_is_shared_with_a_child_and_results_are_unchanged(tmp_path):
    cache = tmp_path / "cache"
    # empty cache: a child was started; this process compiled the step's first kernel itself
    # (cache misses) and loaded the last ones, which the child compiled first (no misses)
    cold = _run(tmp_path, cache, "cold.npz")
    assert cold["started"] is True
    assert cold["compiled"]["conv2d_forward_wide"] == 1
    assert cold["compiled"]["sgd_update"] == 0 and cold["compiled"]["conv2d_backward_wide"] == 0
    index_files = {p.name.split("-")[0] for p in cache.rglob("*.nbi")}
    assert {"conv2d_wide.conv2d_backward_wide", "conv2d_positions.conv2d_backward_positions",
            "optim.sgd_update", "_util.sum_parts"} <= index_files
    warm = _run(tmp_path, cache, "warm.npz")
    assert warm["started"] is False and not any(warm["compiled"].values())  # warm cache: no child
    alone = _run(tmp_path, tmp_path / "cache2", "alone.npz", precompile="0")
    assert alone["started"] is False and all(alone["compiled"].values())
    # one step trains to the same weights, bit for bit, whoever compiled the kernels
    ref = np.load(tmp_path / "alone.npz")
    for f in ("cold.npz", "warm.npz"):
        saved = np.load(tmp_path / f)
        for k in ref.files:
            np.testing.assert_array_equal(saved[k], ref[k], err_msg=f"{f}: {k}")


def test_no_child_without_disk_cache_or_when_switched_off(monkeypatch):
    net = nc.build_network("mnistcnn", (1, 28, 28), 10, seed=0)
    monkeypatch.setattr(warmup, "_cache_is_cold", lambda kernel: True)
    for name in ("_session", "_child"):  # as in a process that never started one
        monkeypatch.setattr(warmup, name, None)
    monkeypatch.setattr(_config, "compile_hook", None)
    monkeypatch.setenv("NUMBACNN_PRECOMPILE", "0")
    assert net.backend.start_precompile(net, (1, 28, 28)) is False
    monkeypatch.setenv("NUMBACNN_PRECOMPILE", "1")
    monkeypatch.setattr(_config, "_CACHE", False)
    assert net.backend.start_precompile(net, (1, 28, 28)) is False
    assert warmup._session is None and _config.compile_hook is None


def test_step_jobs_are_the_kernels_of_a_step_in_the_order_of_their_first_call():
    import numbacnn.kernels.cpu as K

    net = nc.build_network("conv(4,3),relu,maxpool(2),dense(8),relu", (1, 8, 8), 3, seed=0)
    opt = nc.Adam(net, lr=0.01)
    before = {k: v for k, v in vars(K).items()}
    jobs = warmup.step_jobs(net, opt, (1, 8, 8), 2)
    assert vars(K) == before  # the stubs are gone
    names = [d.__name__ for d, _ in jobs]
    assert names[:2] == ["gather_batch", "conv2d_forward_wide"]  # the batch; conv, ReLU, pool fused
    assert names.index("dense_forward") < names.index("softmax_cross_entropy") \
        < names.index("dense_backward") < names.index("conv2d_backward_wide") \
        < names.index("adam_update")
    assert len(set(names)) == len(names) and "relu_forward" in names and "sum_parts" in names
    # the recorded types are those a real call dispatches on
    (disp, sig), = [j for j in jobs if j[0].__name__ == "adam_update"]
    assert sig[0] == numba.typeof(net.params) and sig[-1] == numba.typeof(1)


def test_claims_decide_who_compiles_and_waits_end_with_the_other_process(tmp_path):
    import threading
    import time

    import numbacnn.kernels.cpu as K

    sig = (numba.typeof(np.zeros(3, np.float32)),) * 2
    key = warmup.job_key(K.relu_forward, sig)
    alive = [True]
    s = warmup._Session(str(tmp_path), lambda: alive[0])
    with s.compiling(K.relu_forward, sig):  # first: ours, done afterwards
        assert (tmp_path / f"{key}.claim").exists() and not (tmp_path / f"{key}.done").exists()
    assert (tmp_path / f"{key}.done").exists()
    other = warmup.job_key(K.relu_backward, sig + sig[:1])
    (tmp_path / f"{other}.claim").touch()  # the other process is compiling it
    threading.Timer(0.3, lambda: (tmp_path / f"{other}.done").touch()).start()
    t0 = time.monotonic()
    with s.compiling(K.relu_backward, sig + sig[:1]):
        waited = time.monotonic() - t0
    assert waited >= 0.25
    third = warmup.job_key(K.tanh_forward, sig)
    (tmp_path / f"{third}.claim").touch()
    threading.Timer(0.3, lambda: alive.__setitem__(0, False)).start()  # ... and exits without it
    t0 = time.monotonic()
    with s.compiling(K.tanh_forward, sig):
        assert 0.25 <= time.monotonic() - t0 < 5
    assert not (tmp_path / f"{third}.done").exists()


def test_the_child_stops_where_the_parent_has_been(tmp_path):
    """Every job claimed but the last: the child (a fresh process, as started by the warm-up)
    compiles the last one only, into the cache, and stops at the parent's first claim."""
    import pickle

    net = nc.build_network("conv(2,3),relu,dense(4)", (1, 6, 6), 3, seed=0)
    opt = nc.SGD(net, lr=0.1)
    folder = tmp_path / "share"
    folder.mkdir()
    with open(folder / "step.pkl", "wb") as f:
        pickle.dump((net, opt, (1, 6, 6), 2), f)
    jobs = warmup.step_jobs(*pickle.loads((folder / "step.pkl").read_bytes())[:2], (1, 6, 6), 2)
    for disp, sig in jobs[:-1]:
        (folder / f"{warmup.job_key(disp, sig)}.claim").touch()
    last, sig = jobs[-1]
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), NUMBACNN_PRECOMPILE="0",
               NUMBACNN_PREBUILT="0")
    env.pop("NUMBACNN_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", warmup._CHILD, str(folder)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (folder / f"{warmup.job_key(last, sig)}.done").exists()
    assert not any((folder / f"{warmup.job_key(d, s)}.done").exists() for d, s in jobs[:-1])
    index = {p.name.split("-")[0] for p in (tmp_path / "cache").rglob("*.nbi")}
    module = last.py_func.__module__.rsplit(".", 1)[1]
    assert f"{module}.{last.__name__}" in index
    assert not any(f"{d.py_func.__module__.rsplit('.', 1)[1]}.{d.__name__}" in index
                   for d, _ in jobs[:-1] if d is not last)


def test_the_trainer_starts_the_warm_up_once(monkeypatch):
    """The model never compiles ahead by itself: Trainer.fit asks the backend, once per trainer."""
    calls = []
    net = nc.build_network("conv(2,3),relu,dense(4)", (1, 6, 6), 3, seed=0)
    monkeypatch.setattr(type(net.backend), "start_precompile",
                        lambda self, n, shape, opt, batch: calls.append((n, shape, opt, batch)) or False)
    x = np.random.default_rng(0).random((10, 1, 6, 6), dtype=np.float32)
    net.forward(x, training=True)
    assert calls == []
    tr = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=4, progress=False)
    tr.fit(x, np.arange(10) % 3, 2)
    assert calls == [(net, (1, 6, 6), tr.optimizer, 4)]


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
