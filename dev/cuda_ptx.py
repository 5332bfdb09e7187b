"""Compile the main CUDA kernels to PTX for a GPU that is not here (sm_90: H100 / H200), before a
device call: typing errors, non-literal shared-array shapes, spills to local memory (".local") and
64-bit divisions show up here, without a GPU.

Needs numba-cuda with NVIDIA's compiler wheels (not the project's test environment), e.g.

    python -m venv /tmp/cvenv && /tmp/cvenv/bin/pip install numba-cuda==0.30.4 cuda-bindings \\
        nvidia-cuda-nvcc nvidia-cuda-nvrtc numpy scipy scikit-learn threadpoolctl tqdm
    PYTHONPATH=. /tmp/cvenv/bin/python dev/cuda_ptx.py
"""
from __future__ import annotations

import re
import sys


def main() -> int:
    try:
        import numba.cuda.dispatcher as dispatcher
        import numba_cuda  # noqa: F401  (numba's own numba.cuda cannot compile for sm_90 here)
        from numba import boolean, cuda, float32, float64, int32, int64, types
    except ImportError as e:
        print(f"dev/cuda_ptx.py needs numba-cuda and its compiler wheels: {e}", file=sys.stderr)
        return 1

    class Device:  # device functions ask for the current device's compute capability
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: Device()  # no GPU here: the one a device call gets
    from numbacnn.kernels.cuda import batchnorm as B
    from numbacnn.kernels.cuda import conv2d_tiled as CT
    from numbacnn.kernels.cuda import dense as D
    from numbacnn.kernels.cuda import loss as L
    from numbacnn.kernels.cuda import pool as PL

    a1, a2, a3, a4 = (types.Array(float32, n, "C") for n in (1, 2, 3, 4))
    i3 = types.Array(int32, 3, "C")
    d1 = types.Array(float64, 1, "C")
    l1 = types.Array(int64, 1, "C")
    i = int64
    kernels = []
    for shape, (forward, dx, dw) in CT.KERNELS.items():
        kernels += [(f"conv forward {shape}", forward, (a4, a4, a4, a1, i, i, i, i, boolean)),
                    (f"conv dx {shape}", dx, (a4, a4, a4, i, i, i, i)),
                    (f"conv dw parts {shape}", dw, (a1, a4, a4, i, i, i, i, i, i, i))]
    kernels += [
        ("conv chunk sums", CT._sum_parts, (a4, a1, a1, i)),
        ("conv relu mask", CT._grad_out, (a1, a1, a1)),
        ("dense gemm", D._gemm, (a2, a2, a2, a1, i, i, i)),
        ("maxpool forward", PL._max_forward, (a3, i3, a3, i, i, i, i, i, i)),
        ("maxpool backward", PL._max_backward, (a3, a3, i3, i, i, i, i, i, i)),
        ("avgpool forward", PL._avg_forward, (a3, a3, i, i, i, i, i, i)),
        ("avgpool backward", PL._avg_backward, (a3, a3, i, i, i, i, i, i)),
        ("batchnorm forward", B._forward_train, (a3, a1, a1, a1, a1, l1, a3, a1, a1, float64, float64,
                                                 boolean)),
        ("batchnorm backward", B._backward, (a3, a1, a1, a3, a3, a3, a1, a1, a1, boolean, boolean,
                                             boolean)),
        ("step statistics", L._stats, (d1, d1, a2, l1)),
    ]
    bad = 0
    for name, kernel, sig in kernels:
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        spills = ".local" in ptx
        div64 = len(re.findall(r"\b(?:div|rem)\.[su]64\b", ptx))
        bad += spills
        print(f"{name:34} {len(ptx):7d} chars  fma {ptx.count('fma.rn.f32'):4d}  "
              f"64-bit div/rem {div64:3d}  {'LOCAL MEMORY' if spills else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
