"""``python -m numbacnn compile``: compile the kernels ahead of the first run, into the package's
kernel tier (numbacnn/runtime/prebuilt.py), which later runs load instead of compiling.

The host's instruction-set level by default; ``--all-levels`` builds every level this host can
compile (a release building wheels does, per Python). The lowest level runs every kernel
specialisation that the presets, the optimizers, evaluation and the estimator use and records
them; the other levels compile that list without running it, so any host with AVX2 builds every
level. Each level compiles in a child process of its own (numba's CPU target is fixed when numba
starts), with numba's code options set to the level's features. The tier is a build output, never
part of the repository.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

from . import prebuilt


def workloads() -> None:
    """Run every kernel specialisation a user's training, evaluation or estimator fit reaches: the
    presets with each optimizer, both step paths, every layer kind and conv plan."""
    import numpy as np
    from sklearn.datasets import load_digits

    import numbacnn as nc
    from numbacnn.training import evaluate_regression

    rng = np.random.default_rng(0)
    nets = [(spec, shape) for spec, shape in (
        ("compact", (1, 8, 8)), ("small", (1, 28, 28)), ("mnistcnn", (1, 28, 28)), ("lenet5", (1, 28, 28)),
        ("mlp", (1, 8, 8)), ("conv(8,3,stride=2),tanh,avgpool(2),conv(12,5,stride=2,padding=2),relu,"
                             "maxpool(3,stride=2,padding=1),dense(10),tanh,dropout(0.3)", (3, 20, 20)),
        ("conv(6,3),relu,maxpool(3,stride=1),conv(8,3,stride=2),relu,maxpool(2,stride=1),dense(6)",
         (2, 12, 12)), ("modern", (1, 28, 28)), ("resnet8", (3, 32, 32)),
        ("conv(4,3),bn,tanh,gap,dense(8),bn,relu,dense(8),bn", (1, 8, 8)),
        ("conv(8,3,padding=same,bias=False),bn,gelu,maxpool(2),conv(16,3,padding=same,bias=False),bn,"
         "gelu(tanh),gap,dense(10,bias=False),scale(0.5)", (3, 16, 16)),
        # the mobile layers: depthwise (strided, a multiplier, dilated), pointwise, grouped with
        # per-side padding, the gates
        ("conv(16,3,padding=1,bias=False),bn,relu6,dwconv(3,stride=2,padding=1),relu,conv(16,1),relu,"
         "conv(16,1,bias=False),bn,hardswish,dwconv(3,multiplier=2,padding=same,dilation=2),silu,"
         "conv(8,(3,2),groups=4,padding=((1,0),(0,1))),sigmoid,gap,dense(8),hardsigmoid", (1, 12, 10)),
        # an ungrouped conv with uneven padding (the padded plan, DS-CNN's stem)
        ("conv(8,(4,2),stride=2,padding=((1,2),(0,1))),relu,dense(10)", (1, 12, 10)),
        # series: 1-D convolutions (same, causal and dilated, strided), BatchNorm over (N, C, L),
        # branches joined along the channels, the 1-D pools
        ("conv1d(16,8,padding=same),bn,relu,cat(conv1d(8,5,padding=same) | maxpool1d(3,stride=1,padding=1)),"
         "conv1d(8,3,dilation=2,padding=causal),relu,avgpool1d(2),conv1d(8,3,stride=2),relu,gmp", (2, 40)))]
    optimizers = [lambda n: nc.Adam(n, lr=1e-3), lambda n: nc.Adam(n, lr=1e-3, weight_decay=1e-4),
                  lambda n: nc.AdamW(n, lr=1e-3),
                  lambda n: nc.SGD(n, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4),
                  lambda n: nc.SGD(n, lr=0.01), lambda n: nc.RMSProp(n, lr=1e-3),
                  lambda n: nc.RMSProp(n, lr=1e-3, momentum=0.9, centered=True),
                  lambda n: nc.SGD(n, lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4,
                                   groups=[{"params": ["*.bias"], "lr_scale": 64.0}],
                                   lookahead={"k": 2, "alpha": 0.5, "buffers": True})]
    for spec, shape in nets:
        x = rng.random((20, *shape), dtype=np.float32)
        y = np.arange(20) % 10
        for i, make_opt in enumerate(optimizers):
            colour = nc.Normalize.fit(x) if shape[0] == 3 else None  # as train.py on colour data
            net = nc.build_network(spec, shape, 10, seed=0, normalize=colour)
            trainer = nc.Trainer(net, make_opt(net), batch_size=8, seed=0, progress=False,
                                 step_programs=i % 2 == 0, lr_schedule="onecycle" if i < 2 else "constant",
                                 augment=None if len(shape) == 2 else ("shift:2,flip" if i % 3 == 0 else
                                          "translate:2,flip:alternate" if i % 3 == 1 else None),
                                 label_smoothing=0.1 if i == 1 else 0.0)
            trainer.fit(x, y, 1, x, y)
        nc.evaluate(net, x, y)
        for _ in range(4):  # an inference program's runs after the first two are one team region
            net.forward(x, training=False)
        net.predict_proba(x)
        logits = net.forward(x, training=True)
        _, d = nc.softmax_cross_entropy(logits, y)
        net.backward(d)  # the input gradient too (the report's saliency)
    # regression: the MSE and Huber losses on the regression default, trained and evaluated
    xs = rng.random((20, 1, 30), dtype=np.float32)
    targets = rng.standard_normal((20, 1)).astype(np.float32)
    for i, loss in enumerate(("mse", "huber")):
        net = nc.build_network("auto", (1, 30), 1, seed=0, regression=True)
        trainer = nc.Trainer(net, nc.Adam(net, lr=1e-3), batch_size=8, seed=0, progress=False, loss=loss,
                             step_programs=i == 0)
        trainer.fit(xs, targets, 1, xs, targets)
        evaluate_regression(net, xs, targets)
    X, y = load_digits(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = nc.CNNClassifier(max_epochs=1, random_state=0).fit(X[:200], y[:200],
                                                                  sample_weight=np.ones(200))
        clf.fit(X[:200], y[:200])
        clf.predict_proba(X[:50])
        clf.transform(X[:50])
        reg = nc.CNNRegressor(max_epochs=1, random_state=0).fit(xs[:, 0], targets[:, 0])
        reg.predict(xs[:, 0])


def record(path: str) -> None:
    """Write every kernel specialisation this process holds (module, name, argument types) to path."""
    jobs = [(d.py_func.__module__, d.py_func.__qualname__, tuple(sig)) for d in prebuilt._ATTACHED
            for sig in list(d.overloads)]
    with open(path, "wb") as f:
        pickle.dump(jobs, f)


def compile_recorded(path: str) -> None:
    """Compile the specialisations that ``record`` wrote, without running them (a level the
    building host may not be able to run)."""
    with open(path, "rb") as f:
        jobs = pickle.load(f)
    for module, name, sig in jobs:
        getattr(importlib.import_module(module), name).compile(sig)


def _tag(py: str) -> str:
    return ".py" + py.replace(".", "")  # numba's cache files name the Python: ".py311."


def _clear(level: str, stamp: str, py: str) -> dict[str, Any]:
    """Empty a level's folder of this Python's files (of every file when the sources changed);
    returns the level.json that stays valid."""
    target = os.path.join(prebuilt.FOLDER, level)
    meta = prebuilt._meta(level)
    if not prebuilt._current(meta, level, stamp):
        shutil.rmtree(target, ignore_errors=True)
        meta = {}
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(target):
        if _tag(py) in name:
            os.remove(os.path.join(target, name))
    return meta


def build(levels: list[str] | None = None, log: Any = print) -> list[str]:
    """Compile the tier for this Python and numba, for each of ``levels`` (default: the level this
    host runs). Other Pythons' files stay while the sources match. Returns the levels built."""
    levels_known = prebuilt.LEVELS
    stamp, py = prebuilt.source_stamp(), prebuilt._python()
    host = prebuilt.host_levels()
    wanted = levels or host[:1]
    unknown = [level for level in wanted if level not in levels_known]
    if unknown:
        raise ValueError(f"unknown level(s) {', '.join(unknown)}: choose from {', '.join(levels_known)}")
    if not wanted:
        raise ValueError("this host runs no level of the kernel tier (it needs x86-64 Linux with AVX2 "
                         "and FMA): the kernels compile on first use and stay in numba's cache")
    # the workloads run at a level the host runs (the first wanted one it does, else the lowest
    # level, only to record the list), the other levels compile the recorded list
    runner = next((level for level in wanted if level in host), list(levels_known)[-1])
    rec = os.path.join(tempfile.mkdtemp(), "specialisations.pkl")
    for level in [runner, *(name for name in levels_known if name in wanted and name != runner)]:
        env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp())
        env.pop("NUMBACNN_NO_CACHE", None)
        meta: dict[str, Any] = {}
        if level in wanted:
            meta = _clear(level, stamp, py)
            env.update(NUMBA_CPU_NAME=prebuilt.CPU_NAMES.get(level, level), NUMBA_CPU_FEATURES=",".join(
                [*("+" + f for f in levels_known[level]), *prebuilt.CODEGEN.get(level, ())]),
                NUMBACNN_PREBUILT="1", **{prebuilt._BUILD_ENV: level})
        else:  # only to record the list: compiled for this host, into a throwaway cache
            env.update(NUMBACNN_PREBUILT="0")
            env.pop(prebuilt._BUILD_ENV, None)
        mode = "--child-record" if level == runner else "--child-compile"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "numbacnn.runtime.compile", mode, rec], env=env, check=True)
        if level not in wanted:
            continue
        target = os.path.join(prebuilt.FOLDER, level)
        builds = dict(meta.get("builds", {}), **{py: prebuilt._numba_version()})
        with open(os.path.join(target, "level.json"), "w") as f:
            json.dump({"level": level, "stamp": stamp, "triple": prebuilt.TRIPLE, "builds": builds,
                       "codegen": list(prebuilt.CODEGEN.get(level, ()))}, f, indent=1)
        files = [n for n in os.listdir(target) if n.endswith(".nbc") and _tag(py) in n]
        size = sum(os.path.getsize(os.path.join(target, n)) for n in files)
        log(f"numbacnn: {level}, Python {py}: {len(files)} kernel specialisations, {size / 1e6:.1f} MB, "
            f"compiled in {time.perf_counter() - t0:.0f} s")
    for level in levels_known:  # a level left from older sources can never load: drop it
        if level not in wanted and not prebuilt._current(prebuilt._meta(level), level, stamp):
            shutil.rmtree(os.path.join(prebuilt.FOLDER, level), ignore_errors=True)
    return [level for level in wanted]


def main(argv: list[str] | None = None) -> int:
    """``python -m numbacnn compile [--all-levels | --level L ...] [--status]``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m numbacnn compile",
        description="Compile the kernels ahead of the first run (1-3.5 minutes on 2 cores), into "
                    "the package's kernel tier, which every later run loads.")
    p.add_argument("--all-levels", action="store_true",
                   help="every instruction-set level (x86-64-v4-bf16, -v4 and -v3), not only this host's")
    p.add_argument("--level", action="append", choices=list(prebuilt.LEVELS), help="this level only")
    p.add_argument("--status", action="store_true", help="print what the tier holds, compile nothing")
    args = p.parse_args(argv)
    if args.status:
        print(json.dumps(prebuilt.status(), indent=1))
        return 0
    if not os.access(os.path.dirname(prebuilt.FOLDER), os.W_OK):
        print(f"python -m numbacnn compile: error: cannot write {prebuilt.FOLDER} (run it as the user "
              f"who installed numbacnn)", file=sys.stderr)
        return 1
    levels = list(prebuilt.LEVELS) if args.all_levels else args.level
    print("numbacnn: compiling the kernels for this Python and CPU (1-3.5 minutes on 2 cores) ...",
          flush=True)
    try:
        build(levels)
    except ValueError as e:
        print(f"python -m numbacnn compile: error: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"python -m numbacnn compile: error: the compile process failed (exit {e.returncode})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--child-record"]:
        workloads()
        record(args[1])
    elif args[:1] == ["--child-compile"]:
        compile_recorded(args[1])
    else:
        raise SystemExit(main(args))
