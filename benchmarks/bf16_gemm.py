"""The GEMM blocks one core runs, in GFLOP/s: float32 FMAs (microkernel.gemm_nn), bf16 pairs on
AVX512_BF16 (bf16.gemm_pairs, vdpbf16ps) and bf16 tiles on AMX (bf16.gemm_tiles, tdpbf16ps), on the
shapes of a Winograd F(4x4) layer's 36 GEMMs (tiles x in-channels @ in-channels x out-channels), and
PyTorch's bf16 matmul on one thread beside them where it is installed. Interleaved rounds, the best
of each; the CPU's flags in the first line.

    python benchmarks/bf16_gemm.py [--shapes 256x64x64,1024x256x256] [--rounds 5] [--json out.json]
"""
import argparse
import json
import time

import numba
import numpy as np

from numbacnn.bench import cpu_line
from numbacnn.kernels.cpu import bf16 as B
from numbacnn.kernels.cpu import microkernel as MK

SHAPES = "64x64x64,256x64x64,256x256x256,1024x64x64,1024x256x256,1024x64x256,4096x32x32"


def _best(fn, flop, rounds_s=0.2):
    fn()
    best, spent = float("inf"), 0.0
    while spent < rounds_s:
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
    return flop / best / 1e9


def _arms(M, K, N, rng):
    K2 = K // 2
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    y = np.zeros(M * N, np.float32)
    xf, wf = x.reshape(-1), w.reshape(-1)
    xh = np.zeros(M * K, np.uint16)
    B.round_bf16(xh, 0, xf, 0, M * K)
    wh = np.zeros(K * N, np.uint16)
    B.pack_pairs(wh, 0, 2 * N, wf, 0, N, K, N)
    arms = {"float32 FMA (gemm_nn)": lambda: MK.gemm_nn(y, 0, N, xf, 0, K, wf, 0, N, M, N, K)}
    if B.BF16_UNIT:
        arms["bf16 AVX512_BF16 (gemm_pairs)"] = lambda: B.gemm_pairs(y, 0, N, xh, 0, K, 2, wh, 0, 2 * N,
                                                                       M, N, K2, True)
    if B.AMX_UNIT and K2 % 8 == 0:
        arms["bf16 AMX (gemm_tiles)"] = lambda: B.gemm_tiles(y, 0, N, xh, 0, K, wh, 0, 2 * N, M, N, K2, True)
    try:
        import torch
    except ImportError:
        return arms
    torch.set_num_threads(1)
    tx, tw = torch.from_numpy(x).bfloat16(), torch.from_numpy(w).bfloat16()
    arms["PyTorch bf16 matmul, 1 thread"] = lambda: torch.matmul(tx, tw)
    return arms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN, comma-separated (K even)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    print(cpu_line(), f"BF16_UNIT {B.BF16_UNIT}, AMX_UNIT {B.AMX_UNIT}", sep="; ")
    rng = np.random.default_rng(0)
    rows = []
    for shape in args.shapes.split(","):
        M, K, N = (int(v) for v in shape.split("x"))
        arms = _arms(M, K, N, rng)
        got = {name: 0.0 for name in arms}
        for _ in range(args.rounds):  # interleaved: each round runs every arm once
            for name, fn in arms.items():
                got[name] = max(got[name], _best(fn, 2.0 * M * K * N))
        base = got["float32 FMA (gemm_nn)"]
        print(f"M {M} K {K} N {N}: " + ", ".join(f"{name} {v:.0f} GFLOP/s ({v / base:.2f}x)"
                                                    for name, v in got.items()))
        rows.append({"M": M, "K": K, "N": N, "gflops": got})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_line(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
