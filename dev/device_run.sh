#!/bin/bash
# Checks on a lent GPU machine (device tool), in one call: bash dev/device_run.sh STAGES
# STAGES, a comma list: env, tests, profile, cudabench, train, cpubench (MNIST-sized nets);
# unpack, cifarbench, recipe, cifarcpu, torchrecipe (CIFAR-10 and airbench94: torchrecipe runs
# benchmarks/recipe_torch.py, the whole PyTorch recipe on the GPU and timed steps on 16 cores);
# mutants (dev/mutants.py on the many cores: MUTANTS_KIND kernel|other|all, MUTANTS_JOBS,
# MUTANTS_SECONDS). Logs go to $OUT.
# "train" reads mnist from .devdata/mnist: copy ../shared/data/mnist there (a folder that
# .git/info/exclude ignores) and name .devdata in the device tool's carry. "env" installs the
# package (pip install -e, no deps: the machine's image has numba, numba-cuda, torch, onnxruntime).
# CIFAR-10 travels in two calls (dev/devdata.py pack: .devdata/a, then .devdata/b); "unpack"
# decodes each call's part into /tmp/cifar. RECIPE_END: seconds from the start by which the
# recipe's seeds must end (default 380); "cifarcpu" then times the 16 CPU cores.
set -u
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/nbcache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
stages=",$1,"
has() { [[ $stages == *",$1,"* ]]; }
t0=$(date +%s)
stamp() { echo "== $1 at +$(( $(date +%s) - t0 )) s"; }
if has env; then
  stamp env
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 -c "import sys, numba, numpy; print(sys.version.split()[0], 'numba', numba.__version__, 'numpy', numpy.__version__)"
    nproc; lscpu | grep -E "Model name"; grep -o -w -E "avx512f|avx2|fma" /proc/cpuinfo | sort | uniq -c; } 2>&1 | tee "$OUT/env.txt"
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.txt" 2>&1 \
    || { echo "pip install -e failed: using PYTHONPATH"; export PYTHONPATH=$PWD; }
fi
if has tests; then
  stamp tests
  timeout 100 python3 -m pytest -q -p no:cacheprovider -o addopts= --maxfail=8 tests/cuda_checks.py \
    2>&1 | tee "$OUT/cuda_checks.txt" | tail -40
fi
if has profile; then
  stamp profile
  timeout 100 python3 dev/cuda_profile.py --nets lenet5,mnistcnn,modern --batches 256 2>&1 \
    | tee "$OUT/profile.txt"
fi
if has cudabench; then
  stamp cudabench
  timeout 80 python3 -m numbacnn.bench --device cuda --nets lenet5,mnistcnn,modern --batches 64,256,1024 --no-startup \
    --rounds 3 --block 0.2 --json "$OUT/bench_cuda.json" 2>&1 | tee "$OUT/bench_cuda.txt"
fi
if has train; then
  stamp train
  timeout 90 python3 train.py --device cuda --data .devdata/mnist 2>&1 | tee "$OUT/train_cuda.txt" | tail -25
fi
if has cpubench; then
  stamp cpubench
  timeout 170 python3 -m numbacnn.bench --threads 1,2,4,8,16 --nets lenet5,mnistcnn,modern --batches 256 \
    --rounds 2 --block 0.2 --scaling-rounds 5 --no-startup --json "$OUT/bench_cpu.json" 2>&1 \
    | tee "$OUT/bench_cpu.txt"
fi
if has unpack; then
  stamp unpack
  python3 dev/devdata.py unpack /tmp/cifar 2>&1 | tee -a "$OUT/unpack.txt"
fi
if has cifarcpu; then  # compile the CPU kernels while the GPU works (numba's cache serves the timing)
  NUMBA_NUM_THREADS=16 timeout 400 python3 -m numbacnn.bench --nets airbench94 --batches 1024 --threads 16 \
    --rounds 1 --block 0.1 --no-torch --no-onnx --no-startup >"$OUT/cifarcpu_warm.txt" 2>&1 &
  warm_pid=$!
fi
if has cifarbench; then
  stamp cifarbench
  timeout 120 python3 -m numbacnn.bench --device cuda --nets airbench94 --batches 1024 --no-startup \
    --rounds 2 --block 1 --json "$OUT/cifar_cuda_bench.json" 2>&1 | tee "$OUT/cifar_cuda_bench.txt"
fi
if has recipe; then
  stamp recipe
  end=${RECIPE_END:-380}; left=$(( end - ($(date +%s) - t0) ))
  timeout $(( left > 30 ? left : 30 )) python3 benchmarks/recipe_seeds.py --data /tmp/cifar/cifar10-dev.npz \
    --device cuda --seeds 0-4 --deadline $(( left - 10 )) --json "$OUT/recipe_cuda.json" 2>&1 \
    | tee "$OUT/recipe_cuda.txt"
fi
if has cifarcpu; then
  stamp cifarcpu
  wait "$warm_pid"; tail -3 "$OUT/cifarcpu_warm.txt"
  stamp cifarcpu-timed
  timeout 150 python3 -m numbacnn.bench --nets airbench94 --batches 1024 --threads 16 --rounds 3 --block 3 \
    --no-onnx --no-startup --json "$OUT/cifar_cpu16_bench.json" 2>&1 | tee "$OUT/cifar_cpu16_bench.txt"
fi
if has torchrecipe; then
  stamp torchrecipe
  timeout 120 python3 benchmarks/recipe_torch.py --data /tmp/cifar/cifar10-dev.npz --device cuda --steps 0 \
    --layouts channels_last,nchw --json "$OUT/recipe_torch_cuda.json" 2>&1 | tee "$OUT/recipe_torch_cuda.txt"
  NUMBA_NUM_THREADS=16 timeout 200 python3 benchmarks/recipe_torch.py --data /tmp/cifar/cifar10-dev.npz \
    --threads 16 --steps 10 --layouts numbacnn,channels_last,nchw --json "$OUT/recipe_torch_cpu16.json" 2>&1 \
    | tee "$OUT/recipe_torch_cpu16.txt"
fi
if has mutants; then
  stamp mutants
  { nproc; lscpu | grep -E "Model name"; python3 -c "import sys, numba; print(sys.version.split()[0], 'numba', numba.__version__)"
    for m in PIL onnx onnxruntime torch dask.distributed mpi4py hypothesis; do
      python3 -c "import $m" 2>/dev/null && echo "have $m" || echo "NO $m"; done; } 2>&1 | tee "$OUT/mutants_env.txt"
  timeout "${MUTANTS_SECONDS:-540}" python3 dev/mutants.py --kind "${MUTANTS_KIND:-kernel}" -j "${MUTANTS_JOBS:-14}" \
    --timeout 400 2>&1 | tee "$OUT/mutants.txt"
fi
stamp done
