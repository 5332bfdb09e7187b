"""The "direct" conv plan against "wide" (im2col + BLAS): ``python benchmarks/direct_plan.py``.

Usage: python benchmarks/direct_plan.py [helpers|steps|both] [threads]
- helpers: GFLOP/s of one example's rows (forward) and weight gradient, direct helpers against
  im2col_wide + sgemm, 64 examples, best of 5, on the shapes behind DIRECT_MAX_CKK; also the
  largest relative difference between the two.
- steps: whole training steps (as Trainer.fit takes them) of lenet5 and mnistcnn with every
  stride-1 layer short enough for "direct" built once as "direct" and once as "wide", timed in
  5 interleaved 0.6 s blocks; prints the median img/s ratio.
Not part of the package: a developer's tool (docs/performance.md, "Direct rows for short filters").
"""
import sys
import time

import numba
import numpy as np
from numba import njit

from numbacnn import tuning
from numbacnn.kernels.cpu.blas import sgemm
from numbacnn.kernels.cpu.conv2d_direct import direct_rows, direct_weight_grad
from numbacnn.kernels.cpu.conv2d_wide import im2col_wide
from numbacnn.runtime import config as _config

SHAPES = [(1, 6, 5, 28), (1, 32, 3, 28), (3, 16, 3, 34), (1, 7, 7, 28), (2, 5, 4, 20),
          (8, 16, 3, 16), (6, 16, 5, 12), (16, 32, 3, 16)]  # (C_in, C_out, kernel, input size)


@njit
def _rows_gemm(x, w, cf, yf, Co, K, Wp, L):
    ckk = x.shape[1] * K * K
    for n in range(x.shape[0]):
        im2col_wide(cf, L, x[n], K, K, Wp, L)
        sgemm(False, False, Co, L, ckk, np.float32(1.0), w, 0, ckk, cf, 0, L, np.float32(0.0), yf, 0, L)


@njit
def _rows_direct(x, w, cf, yf, Co, K, Wp, L):
    C, plane = x.shape[1], x.shape[2] * Wp
    for n in range(x.shape[0]):
        direct_rows(yf, L, x[n].reshape(C * plane), w, Co, C, plane, K, K, Wp, L)


@njit
def _dw_gemm(x, g, cf, dw, Co, K, Wp, L):
    ckk = x.shape[1] * K * K
    for n in range(x.shape[0]):
        im2col_wide(cf, L, x[n], K, K, Wp, L)
        sgemm(False, True, Co, ckk, L, np.float32(1.0), g, 0, L, cf, 0, L,
              np.float32(1.0) if n > 0 else np.float32(0.0), dw, 0, ckk)


@njit
def _dw_direct(x, g, cf, dw, Co, K, Wp, L):
    C, plane = x.shape[1], x.shape[2] * Wp
    for n in range(x.shape[0]):
        direct_weight_grad(dw, g, L, x[n].reshape(C * plane), Co, C, plane, K, K, Wp, L, n == 0)


def _best(fn, args, repeats=5):
    fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def helpers() -> None:
    rng = np.random.default_rng(0)
    print("shape (C_in -> C_out, k, size)    ckk | rows GF/s gemm direct "
          "| weight grad GF/s gemm direct | max rel diff")
    for ci, co, k, h in SHAPES:
        oh = h - k + 1
        L = (oh - 1) * h + oh
        ckk = ci * k * k
        x = rng.standard_normal((64, ci, h, h)).astype(np.float32)
        w = rng.standard_normal(co * ckk).astype(np.float32)
        g = rng.standard_normal(co * L).astype(np.float32)
        cf = np.zeros(ckk * L, np.float32)
        y = [np.zeros((co + 1) * L, np.float32) for _ in range(2)]
        dw = [np.zeros(co * ckk, np.float32) for _ in range(2)]
        t = [_best(_rows_gemm, (x, w, cf, y[0], co, k, h, L)),
             _best(_rows_direct, (x, w, cf, y[1], co, k, h, L)),
             _best(_dw_gemm, (x, g, cf, dw[0], co, k, h, L)),
             _best(_dw_direct, (x, g, cf, dw[1], co, k, h, L))]
        gf = 2 * co * L * ckk * 64 / 1e9
        diff = max(np.abs(y[0][:co * L] - y[1][:co * L]).max() / np.abs(y[0]).max(),
                   np.abs(dw[0] - dw[1]).max() / np.abs(dw[0]).max())
        print(f"{ci:2d} -> {co:2d}, {k}x{k}, {h}x{h}  {ckk:6d} | {gf / t[0]:14.1f} {gf / t[1]:6.1f} "
              f"| {gf / t[2]:21.1f} {gf / t[3]:6.1f} | {diff:.1e}")


def steps() -> None:
    from numbacnn import bench

    for net in ("lenet5", "mnistcnn"):
        for batch in (64, 256):
            models = {}
            saved = tuning.DIRECT_MAX_CKK
            for name, limit in (("wide", 0), ("direct", saved)):
                tuning.DIRECT_MAX_CKK = limit  # read when a layer first picks its plan
                models[name] = bench._Ours(net, batch)
                models[name].train_step()  # records the step with this plan
            tuning.DIRECT_MAX_CKK = saved
            rates: dict[str, list[float]] = {"wide": [], "direct": []}
            for _ in range(5):
                for name, m in models.items():
                    time.sleep(0.05)
                    rates[name].append(bench._time_block(m.train_step, 0.6) * batch)
            ratio = np.median(np.array(rates["direct"]) / np.array(rates["wide"]))
            wide, direct = np.median(rates["wide"]), np.median(rates["direct"])
            print(f"{net} batch {batch}, {numba.get_num_threads()} threads: wide {wide:.0f}, "
                  f"direct {direct:.0f} img/s, direct / wide {ratio:.2f}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "both"
    _config.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    if what in ("helpers", "both"):
        helpers()
    if what in ("steps", "both"):
        steps()
