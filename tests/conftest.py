"""Shared fixtures: a seeded RNG and helpers to run single layers."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST_DIR = os.path.join(ROOT, "..", "shared", "data", "mnist")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def tiny_npz(path, n):
    """An npz of n learnable 8x8 images in 3 classes (a bright band per class) at path."""
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    x = rng.integers(0, 60, (n, 8, 8)).astype(np.uint8)
    for i, label in enumerate(y):
        x[i, 2 * label:2 * label + 2, :] = 250
    np.savez(path, x=x, y=y)
    return str(path)


def run_without(module, command, argv, **kw):
    """``python -c``: numbacnn's command line (``command``: "run", "run_export", ...) in a process where
    ``module`` cannot be imported, as on an install without its extra."""
    import subprocess

    code = (f"import sys; sys.modules[{module!r}] = None; from numbacnn import cli; "
            f"sys.exit(cli.main(sys.argv[1:], command=getattr(cli, {command!r})))")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, **kw)


# The everyday tier, `python -m pytest -m "not slow"`, leaves out what takes more than about 3 s on 2
# cores: tests marked slow where they stand, and here the large cases of parametrized tests (100 or
# more examples, or named below). The whole suite (CI's run) runs everything.
SLOW_CASES = ("winograd+fused pool", "2-64-34-30-64", "17-12-14-14-32", "5-12-16-14-64")


# The longest tests, longest first (minutes of one core each on 2 cores: the CUDA simulator's
# shards, the suite's cold compiles, the README's blocks, finite differences). A parallel run with
# `-n 2 --dist loadgroup` (xdist hands out one test at a time; plain `-n 2` gives each worker a block
# of consecutive tests, all of these to one) starts them first on both workers, so that they finish
# together instead of one running a long test alone at the end.
LONGEST_FIRST = ("test_cuda_kernels_in_simulator_or_on_gpu",
                 "test_kernels_from_numba_s_cache_and_from_the_tier",
                 "test_only_one_rank_per_machine_compiles",
                 "test_every_readme_python_block_runs_in_order",
                 "test_bn_residual_gap_network_gradients_match_finite_differences",
                 "test_default_digits_run_reaches_98_percent",
                 "test_report_after_training_and_from_the_checkpoint", "test_grid_search_on_a_dask_cluster",
                 "test_a_hostile_folder_loads_the_same", "test_checkpoints_move_between_rank_counts",
                 "test_short_real_mnist_run", "test_python_mode_runs_the_same_kernels",
                 "test_whole_network_gradient_matches_finite")


def _rank(item):
    return next((i for i, name in enumerate(LONGEST_FIRST) if name in item.nodeid), len(LONGEST_FIRST))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("N", 0) >= 100 or any(c in item.nodeid for c in SLOW_CASES):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_rank)  # stable: the rest keep their order


def winograd_choices(always=False, f4=None):
    """Entries of numbacnn/tuning.py that make the Winograd chooser (WinogradPlan.variant) run
    Winograd on every shape (``always``) and F(4x4, 3x3) wherever the output channels allow
    (``f4=True``) or never (``False``); ``None`` keeps the table's own."""
    out = {}
    if always:
        out.update(WINOGRAD_MIN_AREA=0, WINOGRAD_INFER_MIN_TILES=0, WINOGRAD_MIN_TILES=0,
                   WINOGRAD_ODD_MIN_USED=0, WINOGRAD_ODD_MIN_TILES=0)
    if f4 is True:
        out.update(WINOGRAD4_MIN_CHANNELS=0, WINOGRAD4_MAX_WORK=float("inf"), WINOGRAD4_MIN_EXAMPLES=0,
                   WINOGRAD4_MIN_TILES=0)
    elif f4 is False:
        out.update(WINOGRAD4_MIN_CHANNELS=2**62)
    return out


def choose_winograd(monkeypatch, always=False, f4=None):
    """Set winograd_choices(always, f4) for the test."""
    from numbacnn import tuning

    for name, value in winograd_choices(always, f4).items():
        monkeypatch.setattr(tuning, name, value)
