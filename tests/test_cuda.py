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


@pytest.mark.slow
def test_cuda_kernels_in_simulator_or_on_gpu():
    """Run tests/cuda_checks.py in a fresh process (the simulator must be enabled before numba loads)."""
    env = dict(os.environ)
    if not cuda_available():
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider",
                        os.path.join(ROOT, "tests", "cuda_checks.py")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert " passed" in last, last
    # only the checks of CUDA graphs skip, and only in the simulator (it has no graphs)
    with open(os.path.join(ROOT, "tests", "cuda_checks.py")) as f:
        gpu_only = f.read().count("\n@gpu_only\n")
    if "NUMBA_ENABLE_CUDASIM" in env:
        assert gpu_only and f"{gpu_only} skipped" in last, last
    else:
        assert "skipped" not in last, last
