"""The CUDA backend: without a GPU, a clear error; its kernels run in the CUDA simulator."""
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

import numbacnn as nc
from numbacnn.cli import main
from numbacnn.device import DeviceError, cuda_available


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error(capsys):
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        nc.Sequential([nc.Dense(3, 2)], device="cuda")
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        nc.CNNClassifier(device="cuda").fit(np.random.rand(20, 4), np.arange(20) % 2)
    assert main(["--quiet", "--device", "cuda", "--epochs", "1"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="unknown device"):
        nc.Sequential([nc.Dense(3, 2)], device="tpu")


# the checks in shards of similar length in the simulator (a parallel test run spreads them)
_TRAINING = "modern_layers or trainer_steps or estimator_on_cuda or graph"
_CONVS = "tiled_convolution or layer_matches_oracle"
SHARDS = (_TRAINING, _CONVS, f"not ({_TRAINING} or {_CONVS})")


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(len(SHARDS)))
def test_cuda_kernels_in_simulator_or_on_gpu(shard):
    """Run tests/cuda_checks.py in fresh processes (the simulator must be enabled before numba
    loads), a shard each; together the shards run every check once."""
    env = dict(os.environ)
    if not cuda_available():
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    checks = os.path.join(ROOT, "tests", "cuda_checks.py")
    r = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-rs", "-p",
                        "no:cacheprovider", "-k", SHARDS[shard], checks],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert " passed" in last, last
    # only the checks of CUDA graphs skip, and only in the simulator (it has no graphs)
    skips = [line for line in r.stdout.splitlines() if line.startswith("SKIPPED")]
    if "NUMBA_ENABLE_CUDASIM" not in env:
        assert not skips, skips
    assert all("CUDA graphs need a GPU" in line for line in skips), skips


def test_the_shards_cover_every_check_once():
    import re

    with open(os.path.join(ROOT, "tests", "cuda_checks.py")) as f:
        names = re.findall(r"^def (test_\w+)", f.read(), re.M)

    def takes(expr, name):  # -k on a name: its words joined by or / and / not
        words = set(re.findall(r"\w+", expr)) - {"or", "and", "not"}
        code = re.sub(r"\w+", lambda m: m.group(0) if m.group(0) in ("or", "and", "not")
                      else str(m.group(0) in name), expr)
        assert words
        return eval(code)

    for name in names:
        assert sum(takes(expr, name) for expr in SHARDS) == 1, name
    assert sum(n.startswith("test_graph") for n in names) == 2  # the gpu_only checks
