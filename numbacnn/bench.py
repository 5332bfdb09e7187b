"""Throughput benchmark: ``python -m numbacnn.bench``.

Trains and runs inference on lenet5, mnistcnn, modern and resnet8 (28x28x1 inputs, 10 classes) for
several batch sizes and thread counts, and prints images/second, achieved GFLOP/s, the fraction of
the float32 matmul peak (numpy `@`, measured beside each configuration's timed blocks, once per
round: the machine's speed drifts), and -- when PyTorch is importable -- PyTorch's numbers measured
in interleaved blocks (ours, theirs, ours, ...) with the median ratio (training: against the faster
of PyTorch's NCHW and channels_last layouts, round by round; in the bf16 class, numbacnn's precision
"bf16" against PyTorch's channels_last bf16 autocast, the "ours" column "fp32" where no layer of the
net has bf16 kernels and numbacnn's float32 arm stands in), and onnxruntime's inference
of the exported model when it is importable (same weights, batch and threads). Also reports the JIT
compile time from an empty cache, the warm-cache time to the first step, and peak training memory.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np

from ._text import install_hint
from .runtime.program import TEAM_AFTER

NETS = ("lenet5", "mnistcnn", "modern", "resnet8")  # presets of numbacnn.arch
SHAPE = (1, 28, 28)
# nets whose inputs are not SHAPE: CIFAR-10's colour 32x32, MLPerf Tiny's 96x96 wake-word pictures
# and 49x10 keyword-spotting MFCC frames
SHAPES: dict[str, tuple[int, ...]] = {
    "airbench94": (3, 32, 32), "mobilenetv2": (3, 32, 32), "mobilenetv1-025": (3, 96, 96),
    "dscnn": (1, 49, 10),
    # series (C, L): Wang et al.'s FCN and ResNet at GunPoint's length, MNIST-1D's CNN at its 40
    "fcn": (1, 150), "resnet1d": (1, 150), "series": (1, 150), "inceptiontime": (1, 150),
    "series-dense": (1, 100),
    "mnist1dcnn": (1, 40)}


def input_shape(net: str) -> tuple[int, ...]:
    """The per-example input shape the benchmark gives ``net``."""
    return SHAPES.get(net, SHAPE)
N_CLASSES = 10


# --- FLOP counting -----------------------------------------------------------------------------
def flops_per_image(net) -> tuple[int, int]:
    """(forward, training) multiply-add FLOPs (x2) per image of the conv and dense layers (those
    inside residual blocks included: ``Layer.macs``).

    Training counts forward + weight gradient + input gradient (3x forward), minus the input
    gradient of the first layer, which training does not compute.
    """
    counts = []
    shape = tuple(net.input_shape)
    for layer in net.layers:
        counts.append(2 * layer.macs(shape))
        shape = layer.output_shape(shape)
    fwd = sum(counts)
    first = next((f for f in counts if f), 0)
    return fwd, 3 * fwd - first


# --- timing helpers ----------------------------------------------------------------------------
def _time_block(fn, min_seconds: float) -> float:
    """Run fn repeatedly for at least min_seconds; return calls per second."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return n / dt


@numba.njit(parallel=True, fastmath={"contract"}, cache=True)  # contract: FMAs; no reassociation
def _fma_chains(x, reps):
    """Per row of x (one per thread): each element through 8 independent Horner chains of 8 FMAs,
    ``reps`` times, the result fed back into x so nothing can be hoisted. 64 FMAs per element per
    rep; the element loop vectorises (one row of lanes per chain), and 8 chains cover the FMA
    latency of 2 pipes. No loads or stores in the chains: the machine's FMA peak."""
    half, tiny = np.float32(0.5), np.float32(0.001)
    for t in numba.prange(x.shape[0]):
        xs = x[t]
        for _ in range(reps):
            for i in range(xs.shape[0]):
                v = xs[i]
                a0, a1, a2, a3 = v + tiny, v + half, v - tiny, v - half  # float32 throughout
                a4, a5, a6, a7 = v * half, v * tiny, v + v, v * v
                for _k in range(8):
                    a0, a1, a2, a3 = a0 * v + half, a1 * v + half, a2 * v + half, a3 * v + half
                    a4, a5, a6, a7 = a4 * v + half, a5 * v + half, a6 * v + half, a7 * v + half
                xs[i] = v * half + tiny * (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)))


def fma_peak(threads: int, seconds: float = 0.15, repeats: int = 3) -> float:
    """The machine's float32 FMA peak in GFLOP/s on ``threads`` threads, measured with its own loop
    (``_fma_chains``: independent FMA chains in registers, one row of vector lanes per thread);
    the best of ``repeats`` runs of about ``seconds``."""
    from .runtime import config as _config

    before = _config.get_num_threads()
    _config.set_num_threads(threads)
    try:
        x = np.full((threads, 1024), 0.5, np.float32)
        _fma_chains(x, 1)
        t0 = time.perf_counter()
        _fma_chains(x, 10)
        reps = max(10, int(10 * seconds / max(time.perf_counter() - t0, 1e-6)))
        best = 0.0
        for _ in range(repeats):
            t0 = time.perf_counter()
            _fma_chains(x, reps)
            best = max(best, x.size * reps * 64 * 2 / (time.perf_counter() - t0) / 1e9)
    finally:
        _config.set_num_threads(before)
    return best


def matmul_peak(threads: int, n: int = 2048, repeats: int = 3) -> float:
    """numpy float32 matmul GFLOP/s on n x n matrices with ``threads`` BLAS threads."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    best = 0.0
    with threadpool_limits(threads, user_api="blas"):
        a @ b
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


class _Ours:
    def __init__(self, net_name: str, batch: int, device: str = "cpu", precision: str = "float32") -> None:
        import numbacnn as nc

        self.net = nc.build_network(net_name, input_shape(net_name), N_CLASSES, seed=0).to(device)
        self.net.set_precision(precision)
        self.opt = nc.SGD(self.net, lr=0.01, momentum=0.9)
        rng = np.random.default_rng(0)
        self.x = rng.random((batch,) + input_shape(net_name), dtype=np.float32)
        self.y = rng.integers(0, N_CLASSES, batch)
        self.trainer = nc.Trainer(self.net, self.opt, batch_size=batch, progress=False)
        self.nc = nc

    def train_step(self) -> None:  # one step as Trainer.fit takes it (recorded, then replayed)
        self.trainer.train_step(self.x, self.y)

    def infer(self) -> None:
        self.net.forward(self.x, training=False)


def torch_twin(net):
    """A ``torch.nn.Sequential`` computing what the numbacnn ``net`` computes, with its weights
    (and running statistics)."""
    import torch

    twin = torch.nn.Sequential(*[layer.torch_twin(torch) for layer in net.layers])
    twin.load_state_dict({k: torch.from_numpy(v).reshape(twin.state_dict()[k].shape)
                          for k, v in net.state_dict().items()})
    return twin


class _Torch:
    """The PyTorch twin's training step and inference; ``channels_last``: the model and the batch in
    PyTorch's NHWC memory format (its faster layout for some convolutions on CPUs)."""

    def __init__(self, net, batch: int, device: str = "cpu", channels_last: bool = False,
                 bf16: bool = False) -> None:
        import torch

        self.torch = torch
        self.bf16 = bf16  # the step under torch.autocast(bfloat16): float32 weights, bf16 products
        self.net = torch_twin(net)
        self.net.to(device)
        rng = np.random.default_rng(0)
        # like numbacnn, the batch starts on the host and is copied to the device every step
        self.x = torch.from_numpy(rng.random((batch,) + tuple(net.input_shape or SHAPE), dtype=np.float32))
        if channels_last and self.x.dim() == 4:  # (a series' (N, C, L) has no channels_last form)
            self.net.to(memory_format=torch.channels_last)
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.y = torch.from_numpy(rng.integers(0, N_CLASSES, batch))
        self.device = device

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def train_step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        x, y = self.x.to(self.device), self.y.to(self.device)
        with self.torch.autocast(self.device, dtype=self.torch.bfloat16, enabled=self.bf16):
            loss = self.torch.nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        self._sync()

    def infer(self) -> None:
        with self.torch.inference_mode():
            self.net(self.x.to(self.device)).cpu()  # numbacnn returns host logits too


class _OnnxRuntime:
    """numbacnn's exported model in onnxruntime (CPU), the inference peer."""

    def __init__(self, net, batch: int, threads: int) -> None:
        import onnxruntime as ort

        from .onnx_export import to_onnx

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(to_onnx(net).SerializeToString(), opts,
                                            providers=["CPUExecutionProvider"])
        self.x = np.random.default_rng(0).random((batch,) + tuple(net.input_shape), dtype=np.float32)

    def infer(self) -> None:
        self.session.run(None, {"input": self.x})


def cpu_line() -> str:
    """The CPU's model name and the flags that decide its kernels (/proc/cpuinfo; the machine's
    name elsewhere), for the line a benchmark's numbers are read against."""
    import platform

    model, flags = platform.processor() or platform.machine(), set[str]()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not flags:
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
    return f"{model} ({' '.join(f for f in wanted if f in flags) or 'none of ' + ' '.join(wanted)})"


def _percent(fraction: float | None) -> str:
    """A fraction as a 5-wide percentage column; "-" for none (a GPU's rows)."""
    return f"{'-':>5}" if fraction is None else f"{100 * fraction:5.1f}"


def _quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}, {values[0]:.2f}"
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.2f}, {q[2]:.2f}"


def _set_threads(n: int | None, torch_mod=None) -> None:
    from .runtime import config as _config

    _config.set_num_threads(n)
    if torch_mod is not None:
        torch_mod.set_num_threads(n)


@contextlib.contextmanager
def _threads(n: int, torch_mod=None) -> Iterator[None]:
    """numbacnn (and PyTorch) on ``n`` threads within, their counts restored after. PyTorch's wheels
    can share numba's libgomp: torch.set_num_threads sets that runtime's omp_set_num_threads, which
    numbacnn's default thread count then follows (_config.default_threads); a count left at 1 by a
    one-thread configuration made later runs in the process default to one thread."""
    from .runtime import config as _config

    before = (_config.get_num_threads(), torch_mod.get_num_threads() if torch_mod is not None else None)
    _set_threads(n, torch_mod)
    try:
        yield
    finally:
        _config.set_num_threads(before[0])
        if torch_mod is not None:
            torch_mod.set_num_threads(before[1])


def bench_config(net_name: str, batch: int, threads: int, rounds: int, block: float,
                 use_torch: bool, device: str = "cpu", use_onnx: bool = False,
                 fma_gflops: float | None = None) -> dict[str, Any]:
    """Interleaved timing of one (net, batch, threads) configuration; ``fma_gflops``: the FMA peak
    on ``threads`` threads, measured before the run (else here, beside the blocks). Measured
    between PyTorch's blocks, the peak loop can lose its cores to PyTorch's spinning threads.

    On "cuda" every step returns host logits (numbacnn) or synchronises (PyTorch), so the blocks
    time finished GPU work."""
    ours = _Ours(net_name, batch, device)
    theirs = _Torch(ours.net, batch, device) if use_torch else None
    # PyTorch's training in its channels_last layout too: the faster of the two is the peer; and
    # channels_last under bf16 autocast, its best arm in the bf16 class, against numbacnn's
    # precision "bf16" (its float32 arm where no layer of the net has bf16 kernels)
    theirs_cl = _Torch(ours.net, batch, device, channels_last=True) if use_torch else None
    theirs_bf16 = _Torch(ours.net, batch, device, channels_last=True, bf16=True) if use_torch else None
    ours_bf16 = _Ours(net_name, batch, device, "bf16") if device == "cpu" else None
    if ours_bf16 is not None and not ours_bf16.net.bf16_layers():
        ours_bf16 = None
    with _threads(threads, theirs.torch if theirs else None):
        return _bench_config(ours, theirs, theirs_cl, net_name, batch, threads, rounds, block, device,
                             use_onnx, fma_gflops, theirs_bf16, ours_bf16)


def _bench_config(ours: _Ours, theirs: _Torch | None, theirs_cl: _Torch | None, net_name: str, batch: int,
                  threads: int, rounds: int, block: float, device: str, use_onnx: bool,
                  fma_gflops: float | None, theirs_bf16: _Torch | None = None,
                  ours_bf16: _Ours | None = None) -> dict[str, Any]:
    onnx_rt = _OnnxRuntime(ours.net, batch, threads) if use_onnx and device == "cpu" else None
    fwd, train = flops_per_image(ours.net)
    res: dict[str, Any] = {"net": net_name, "batch": batch, "threads": threads, "device": device,
                           "flops_forward_per_image": fwd, "flops_train_per_image": train}
    peaks: list[float] = []
    fma: list[float] = []
    for mode in ("train", "infer"):
        fns = [getattr(ours, "train_step" if mode == "train" else "infer")]
        if theirs:
            fns.append(getattr(theirs, "train_step" if mode == "train" else "infer"))
        if theirs_cl and mode == "train":
            fns.append(theirs_cl.train_step)
        if theirs_bf16 and mode == "train":
            fns.append(theirs_bf16.train_step)
        if ours_bf16 and mode == "train":
            fns.append(ours_bf16.train_step)
        if onnx_rt and mode == "infer":
            fns.append(onnx_rt.infer)
        for f in fns:  # warm up (compiles, allocates; numbacnn's prediction builds its team region
            for _ in range(TEAM_AFTER + 2):  # at its (TEAM_AFTER + 1)-th run: before the timing)
                f()
        samples: list[list[float]] = [[] for _ in fns]
        for _ in range(rounds):
            for i, f in enumerate(fns):
                time.sleep(0.05)  # let the other side's spinning threads go idle
                samples[i].append(_time_block(f, block) * batch)
            if mode == "train":  # the peaks beside the blocks: the machine's speed drifts
                peaks.append(matmul_peak(threads, repeats=2))
                if fma_gflops is None:
                    fma.append(fma_peak(threads, seconds=0.05, repeats=2))
        ours_ips = statistics.median(samples[0])
        res[f"{mode}_img_s"] = ours_ips
        res[f"{mode}_gflops"] = ours_ips * (train if mode == "train" else fwd) / 1e9
        if theirs:
            res[f"torch_{mode}_img_s"] = statistics.median(samples[1])
            res[f"{mode}_ratio"] = statistics.median(a / b for a, b in zip(samples[0], samples[1]))
        if theirs_cl and mode == "train":
            res["torch_cl_train_img_s"] = statistics.median(samples[2])
            res["train_ratio_nchw"] = res["train_ratio"]
            res["train_ratio"] = statistics.median(a / max(b, c) for a, b, c in zip(*samples[:3]))
        if theirs_bf16 and mode == "train":
            res["torch_bf16_train_img_s"] = statistics.median(samples[3])
        if mode == "train":  # the bf16 class: numbacnn's bf16 arm (else its float32 one) against torch's
            mine = samples[-1] if ours_bf16 else samples[0]
            res["bf16_train_img_s"] = statistics.median(mine) if ours_bf16 else None
            if theirs_bf16:
                res["train_ratio_bf16"] = statistics.median(a / b for a, b in zip(mine, samples[3]))
        if onnx_rt and mode == "infer":
            res["onnx_infer_img_s"] = statistics.median(samples[-1])
            res["onnx_infer_ratio"] = statistics.median(a / b for a, b in zip(samples[0], samples[-1]))
    res["matmul_peak_gflops"] = statistics.median(peaks)
    res["fma_peak_gflops"] = fma_gflops if fma_gflops is not None else statistics.median(fma)
    for key, gflops, peak in (("train_fraction_of_peak", "train_gflops", "matmul_peak_gflops"),
                              ("train_fraction_of_fma_peak", "train_gflops", "fma_peak_gflops"),
                              ("infer_fraction_of_fma_peak", "infer_gflops", "fma_peak_gflops")):
        # the peaks are the host CPU's: no fraction for a GPU's rows
        res[key] = res[gflops] / res[peak] if device == "cpu" else None
    res["infer_ms_per_batch"] = 1e3 * batch / res["infer_img_s"]
    if "onnx_infer_img_s" in res:
        res["onnx_infer_ms_per_batch"] = 1e3 * batch / res["onnx_infer_img_s"]
    return res


def thread_scaling(net_name: str, batch: int, threads: int, rounds: int, block: float) -> list[float]:
    """Training throughput on ``threads`` threads over 1 thread for one model, timed in interleaved
    blocks (1, N, 1, N, ...) so that machine noise hits both: each round's ratio (report the
    median; on the shared 2-core machine single rounds of mnistcnn ranged 1.6-2.05x)."""
    ours = _Ours(net_name, batch)
    ratios = []
    for _ in range(rounds):
        rates = []
        for t in (1, threads):
            _set_threads(t)
            ours.train_step()  # one untimed step at the new thread count
            time.sleep(0.05)
            rates.append(_time_block(ours.train_step, block))
        ratios.append(rates[1] / rates[0])
    _set_threads(None)
    return ratios


def step_overhead(net_name: str, rounds: int, block: float) -> dict[str, float]:
    """What a small step costs beyond its kernels: ``net_name``'s batch-1 training step on one
    thread as Trainer.fit takes it (the batch gathered, the recorded calls replayed, the optimizer
    updated), and, interleaved with it in ``rounds`` blocks, the same step's kernel calls alone
    (the replay's compiled calls and the optimizer's, without the Python around them). Microseconds,
    medians over the rounds; ``rest_us`` is the difference."""
    from .runtime.calls import capture
    from .runtime.program import compiled

    ours = _Ours(net_name, 1)
    with _threads(1):
        for _ in range(20):
            ours.train_step()
        idx = np.arange(1, dtype=np.int64)
        program = ours.trainer._program(ours.x, ours.y, idx)
        if program is None or not program.calls:
            raise RuntimeError(f"{net_name}: no recorded step to time")
        with capture() as calls:
            ours.opt.step()
        kernels = [*program._compiled, *compiled(calls)]

        def alone() -> None:
            for f, args in kernels:
                f(*args)

        samples: tuple[list[float], list[float]] = ([], [])
        for _ in range(rounds):
            for i, fn in enumerate((ours.train_step, alone)):
                samples[i].append(1e6 / _time_block(fn, block))
    step, alone_us = (statistics.median(v) for v in samples)
    return {"step_us": step, "kernels_us": alone_us, "rest_us": step - alone_us, "calls": len(kernels)}


# --- compile time, warm start and memory (each in a fresh process) -----------------------------
_CHILD = r"""
import os, sys, time
t0 = time.perf_counter()
import numpy as np
kind, net_name, batch, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
if kind == "ours":
    import numbacnn as nc
    from numbacnn.bench import _Ours
    m = _Ours(net_name, batch)
else:
    import numbacnn as nc, torch
    from numbacnn.bench import _Torch, _Ours
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    m = _Torch(nc.build_network(net_name, (1, 28, 28), 10, seed=0), batch)
t1 = time.perf_counter()
m.train_step()
t2 = time.perf_counter()
base = status_kb("VmRSS")  # libraries and compiled code are loaded by now
for _ in range(steps):
    m.train_step()
peak = status_kb("VmHWM")  # this process's peak (ru_maxrss would include the parent's, pre-exec)
print(f"{t1 - t0} {t2 - t1} {base} {peak}")
"""


def _child(kind: str, net: str, batch: int, steps: int, env: dict[str, str]) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, net, str(batch), str(steps)],
                         capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return [float(v) for v in out.stdout.split()]


def _runs_prebuilt() -> bool:
    """Whether this process runs the prebuilt kernels (prebuilt.py) instead of compiling."""
    from .runtime.prebuilt import status

    return bool(status()["usable"])


def startup_and_memory(net: str, batch: int, threads: int, use_torch: bool) -> dict[str, Any]:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as compile_cache:
        # an empty numba cache: the shipped kernels (prebuilt.py) when this machine can run them,
        # and, in another empty cache, the same without them: every kernel compiled
        res["cold_start_prebuilt_to_first_step_s"] = None
        if _runs_prebuilt():
            imp, first, _, _ = _child("ours", net, batch, 0, dict(env, NUMBA_CACHE_DIR=cache))
            res["cold_start_prebuilt_to_first_step_s"] = imp + first
        imp, first, _, _ = _child("ours", net, batch, 0, dict(env, NUMBA_CACHE_DIR=compile_cache,
                                                              NUMBACNN_PREBUILT="0"))
        res["cold_compile_to_first_step_s"] = imp + first
        env["NUMBA_CACHE_DIR"] = compile_cache
        imp, first, base, peak = _child("ours", net, batch, 20, env)
        res["warm_start_to_first_step_s"] = imp + first
        res["peak_rss_mb"] = peak / 1024
        res["rss_after_first_step_mb"] = base / 1024
    if use_torch:
        _, _, base, peak = _child("torch", net, batch, 20, env)
        res["torch_peak_rss_mb"] = peak / 1024
        res["torch_rss_after_first_step_mb"] = base / 1024
    return res


def _counts(text: str) -> list[int]:
    """argparse type: a comma list of positive integers."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected a comma list of positive integers, got {text!r}")
    return values


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m numbacnn.bench", description=__doc__.splitlines()[0])
    p.add_argument("--nets", default=",".join(NETS), help="comma list of presets or specs")
    p.add_argument("--batches", type=_counts, default="32,64,128,256")
    p.add_argument("--threads", type=_counts, default=None,
                   help="comma list (default 1..all cores; at most NUMBA_NUM_THREADS)")
    p.add_argument("--rounds", type=_positive(int), default=5,
                   help="interleaved timed blocks per side")
    p.add_argument("--block", type=_positive(float), default=0.3, help="seconds per timed block")
    p.add_argument("--scaling-rounds", type=_positive(int), default=21,
                   help="interleaved 1-thread/N-thread rounds for the speed-up (median reported)")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch even if importable")
    p.add_argument("--no-onnx", action="store_true", help="skip onnxruntime even if importable")
    p.add_argument("--no-startup", action="store_true", help="skip compile-time/memory runs")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: numbacnn's numba.cuda kernels against PyTorch on the same GPU")
    p.add_argument("--json", metavar="FILE", help="write all results as JSON")
    args = p.parse_args(argv)

    import numba

    from .device import check_device
    from .runtime import config as _config

    check_device(args.device)
    from .arch import ArchitectureError, build_network
    for net in args.nets.split(","):
        try:
            build_network(net, input_shape(net), N_CLASSES, seed=0)
        except (ArchitectureError, ValueError) as e:
            p.error(f"--nets {net!r}: {e}")

    max_threads = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    # on a GPU the host's thread count only sets PyTorch's and numba's CPU pools: one row per net and batch
    threads = args.threads or ([1] if args.device == "cuda" else list(range(1, max_threads + 1)))
    if max(threads) > max_threads:  # numba would run fewer threads than the table says
        p.error(f"--threads {max(threads)}: numba runs at most {max_threads} threads here; set "
                f"NUMBA_NUM_THREADS={max(threads)} to run more threads than cores")
    use_torch = False
    if not args.no_torch:
        try:
            import torch  # noqa: F401
            use_torch = True
        except ImportError:
            print("PyTorch not importable: numbacnn numbers only")
    use_onnx = False
    if not args.no_onnx and args.device == "cpu":
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
            use_onnx = True
        except ImportError:
            print(f"onnxruntime not importable ({install_hint('onnx')}): no ONNX inference peer")
    nets = args.nets.split(",")
    batches = args.batches
    fma_peaks = {t: fma_peak(t) for t in threads}
    peaks = {t: matmul_peak(t) for t in threads}
    from .precision import describe_unit

    print(f"CPU: {cpu_line()}; {describe_unit('bf16')}")
    print("float32 FMA peak (own loop): "
          + ", ".join(f"{t} thr {g:.0f} GFLOP/s" for t, g in fma_peaks.items()) + "; numpy sgemm 2048^3: "
          + ", ".join(f"{t} thr {g:.0f} ({100 * g / fma_peaks[t]:.0f} %)" for t, g in peaks.items()))
    forced = os.environ.get("OPENBLAS_CORETYPE")
    print(f"kernels' BLAS: OpenBLAS {_config.kernel_blas_core() or '(core unknown)'}"
          + (f" (OPENBLAS_CORETYPE={forced} is set: OpenBLAS runs that core's kernels, numpy's and "
             f"onnxruntime's speed are not this CPU's)" if forced else ""))
    for net in nets:
        fwd, train = flops_per_image(build_network(net, input_shape(net), N_CLASSES, seed=0))
        print(f"{net}: {fwd / 1e6:.2f} MFLOP/image forward, {train / 1e6:.2f} MFLOP/image training")
    results = []
    head = f"{'net':9} {'batch':>5} {'thr':>3} | {'train img/s':>11} {'GFLOP/s':>7} {'%fma':>5}"
    head += f" | {'infer img/s':>11} {'ms':>7} {'GFLOP/s':>7} {'%fma':>5}"
    if use_torch:
        head += (f" | {'torch train':>11} {'cl':>6} {'ratio':>5} {'bf16':>6} {'ours':>6} {'ratio':>5}"
                 f" | {'torch infer':>11} {'ratio':>5}")
    if use_onnx:
        head += f" | {'onnxrt infer':>12} {'ms':>7} {'ratio':>5}"
    print(head)
    for net in nets:
        for b in batches:
            for t in threads:
                r = bench_config(net, b, t, args.rounds, args.block, use_torch, args.device, use_onnx,
                                 fma_peaks[t])
                results.append(r)
                line = (f"{net:9} {b:5d} {t:3d} | {r['train_img_s']:11.0f} {r['train_gflops']:7.1f} "
                        f"{_percent(r['train_fraction_of_fma_peak'])} | {r['infer_img_s']:11.0f} "
                        f"{r['infer_ms_per_batch']:7.3f} {r['infer_gflops']:7.1f} "
                        f"{_percent(r['infer_fraction_of_fma_peak'])}")
                if use_torch:
                    cl, bf = r.get("torch_cl_train_img_s"), r.get("torch_bf16_train_img_s")
                    mine = r.get("bf16_train_img_s")
                    line += (f" | {r['torch_train_img_s']:11.0f} {'-' if cl is None else f'{cl:.0f}':>6} "
                             f"{r['train_ratio']:5.2f} {'-' if bf is None else f'{bf:.0f}':>6} "
                             f"{'fp32' if mine is None else f'{mine:.0f}':>6} "
                             f"{r.get('train_ratio_bf16', float('nan')):5.2f} "
                             f"| {r['torch_infer_img_s']:11.0f} "
                             f"{r['infer_ratio']:5.2f}")
                if use_onnx:
                    line += (f" | {r['onnx_infer_img_s']:12.0f} {r['onnx_infer_ms_per_batch']:7.3f} "
                             f"{r['onnx_infer_ratio']:5.2f}")
                print(line, flush=True)
    _config.set_num_threads(None)
    overhead: dict[str, float] = {}
    if args.device == "cpu":
        overhead = step_overhead("lenet5", args.rounds, args.block)
        print(f"per-step overhead (lenet5, batch 1, 1 thread): a training step {overhead['step_us']:.0f} "
              f"us, its {overhead['calls']:.0f} kernel calls alone {overhead['kernels_us']:.0f} us, the "
              f"rest {overhead['rest_us']:.0f} us (the batch gathered, the calls replayed, the "
              f"optimizer's Python)", flush=True)
    scaling: dict[str, dict[int, float]] = {}
    scaling_rounds: dict[str, dict[int, list[float]]] = {}
    top = max(threads)
    if args.device == "cpu" and 1 in threads and top > 1:
        print(f"training speed-up, {top} threads over 1 (measured: interleaved blocks, median "
              f"[lower, upper quartile] of {args.scaling_rounds} rounds):")
        for net in nets:
            scaling_rounds[net] = {b: thread_scaling(net, b, top, args.scaling_rounds, args.block)
                                   for b in batches}
            scaling[net] = {b: statistics.median(v) for b, v in scaling_rounds[net].items()}
            print(f"  {net}: " + ", ".join(
                f"batch {b} {scaling[net][b]:.2f}x [{_quartiles(v)}]"
                for b, v in scaling_rounds[net].items()), flush=True)
    startup = {}
    if not args.no_startup and args.device == "cpu":
        for net in nets:
            startup[net] = startup_and_memory(net, 128, max_threads, use_torch)
            s = startup[net]
            pre = s["cold_start_prebuilt_to_first_step_s"]
            line = (f"{net}: empty cache to first step "
                    + (f"{pre:.2f} s with the prebuilt kernels, " if pre is not None else "")
                    + f"{s['cold_compile_to_first_step_s']:.1f} s compiling them, "
                    f"warm start {s['warm_start_to_first_step_s']:.2f} s; batch 128 training peak "
                    f"RSS {s['peak_rss_mb']:.0f} MB ({s['rss_after_first_step_mb']:.0f} MB after "
                    f"the first step)")
            if use_torch:
                line += (f"; PyTorch {s['torch_peak_rss_mb']:.0f} MB "
                         f"({s['torch_rss_after_first_step_mb']:.0f} MB)")
            print(line, flush=True)
    if args.json:
        import platform
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(), "cpu": cpu_line(),
                       "bf16_unit": describe_unit("bf16"), "cores": os.cpu_count(),
                       "matmul_peak_gflops": peaks, "fma_peak_gflops": fma_peaks, "results": results,
                       "thread_scaling": scaling, "thread_scaling_rounds": scaling_rounds,
                       "startup": startup, "step_overhead": overhead}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
