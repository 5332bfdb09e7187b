"""Data-parallel training under a real ``mpiexec`` (the mpich wheel of the [mpi] extra), 2 ranks on
this machine, against one process; and the refusals and faults. Skipped without mpi4py/mpiexec."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, run_without, tiny_npz

import numbacnn as nc
from numbacnn.cli import main

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
# every test launches mpiexec: the slow tier
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install 'numbacnn[mpi]')")]
TRAIN = os.path.join(ROOT, "train.py")
ARCH = "conv(4,3,padding=same),relu,maxpool(2),dense(16),relu,dropout(0.3)"
# Weights after a few steps on 2 ranks equal one process's within float32 rounding of the summed
# gradients (measured: at most 1.2e-7 on weights of magnitude 0.3 after 3 steps; Adam the largest).
ATOL = 2e-6


def mpirun(args, n=2, timeout=300, env=None, **kw):
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, **(env or {})), **kw)


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    """38 images: 30 train (steps of 12, 12 and an uneven 6) and 8 test."""
    return tiny_npz(tmp_path_factory.mktemp("mpi") / "tiny.npz", 38)


def flags(npz, *extra):
    return ["--quiet", "--data", npz, "--arch", ARCH, "--batch-size", "12", "--lr-schedule", "constant",
            *extra]


@pytest.mark.parametrize("opt", [["--optimizer", "sgd"], ["--optimizer", "sgd", "--nesterov"],
                                 ["--optimizer", "rmsprop", "--momentum", "0.5"],
                                 ["--optimizer", "adam", "--weight-decay", "1e-3"]],
                         ids=["sgd", "nesterov", "rmsprop", "adam"])
def test_two_ranks_match_one_process_and_repeat_bitwise(tmp_path, npz, opt):
    args = flags(npz, "--epochs", "1", *opt)
    one = str(tmp_path / "one.npz")
    assert main(args + ["--save", one]) == 0
    runs = []
    for i in range(2):
        ck = str(tmp_path / f"two{i}.npz")
        r = mpirun([TRAIN, "--distributed", *args, "--save", ck, "--metrics-out", str(tmp_path / "m.json")])
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(nc.load(ck).params)
    np.testing.assert_array_equal(runs[0], runs[1])  # the same R, seed and flags: the same bits
    single = nc.load(one).params
    np.testing.assert_allclose(runs[0], single, rtol=0, atol=ATOL)
    assert not np.array_equal(runs[0], nc.build_network(ARCH, (1, 8, 8), 3, seed=0).params)  # it trained
    import json

    m = json.loads((tmp_path / "m.json").read_text())
    from numbacnn.runtime.config import cpus_available

    assert m["ranks"] == 2 and m["threads"] == max(1, cpus_available() // 2)  # cores shared out


def test_last_batch_smaller_than_the_ranks(tmp_path, npz):
    """Batch 7 on 30 images: the last batch holds 2 examples for 3 ranks, so one rank has none."""
    args = flags(npz, "--epochs", "1", "--batch-size", "7", "--optimizer", "sgd")
    one, three = str(tmp_path / "one.npz"), str(tmp_path / "three.npz")
    assert main(args + ["--save", one]) == 0
    r = mpirun([TRAIN, "--distributed", *args, "--save", three], n=3)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(nc.load(three).params, nc.load(one).params, rtol=0, atol=ATOL)


def test_checkpoints_move_between_rank_counts(tmp_path, npz):
    """A 2-rank checkpoint resumes in one process and a 1-process one under 2 ranks; both end where
    an uninterrupted one-process run ends (within rounding)."""
    full = str(tmp_path / "full.npz")
    assert main(flags(npz, "--epochs", "2", "--save", full)) == 0
    two_then_one = str(tmp_path / "a.npz")
    r = mpirun([TRAIN, "--distributed", *flags(npz, "--epochs", "1", "--save", two_then_one)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert main(flags(npz, "--epochs", "2", "--resume", two_then_one)) == 0
    one_then_two = str(tmp_path / "b.npz")
    assert main(flags(npz, "--epochs", "1", "--save", one_then_two)) == 0
    r = mpirun([TRAIN, "--distributed", *flags(npz, "--epochs", "2", "--resume", one_then_two)])
    assert r.returncode == 0, r.stderr[-3000:]
    for ck in (two_then_one, one_then_two):
        state = nc.load_checkpoint(ck).meta["training"]["trainer"]
        assert state["epoch"] == 2 and len(state["history"]) == 2
        np.testing.assert_allclose(nc.load(ck).params, nc.load(full).params, rtol=0, atol=ATOL)
    # --evaluate under mpiexec: the split evaluation reduces to the single-process numbers
    r = mpirun([TRAIN, "--distributed", "--evaluate", full, "--data", npz])
    assert r.returncode == 0, r.stderr[-3000:]
    local = subprocess.run([sys.executable, TRAIN, "--evaluate", full, "--data", npz], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
    assert r.stdout.splitlines()[1:] == local.stdout.splitlines()[1:]  # the confusion matrix
    (loss2, acc2), (loss1, acc1) = [[float(v) for v in out.splitlines()[0].replace(",", "").split()[-3::2]]
                                    for out in (r.stdout, local.stdout)]
    assert acc2 == acc1 and abs(loss2 - loss1) <= 1e-4


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_rank_after_the_same_step_and_the_checkpoint_resumes(tmp_path, npz, sig):
    """Ctrl-C or SIGTERM to mpiexec: exit 128 + signal, one checkpoint (rank 0's), and it resumes."""
    ck = tmp_path / "int.npz"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", TRAIN, "--distributed",
           *flags(npz, "--epochs", "100000", "--batch-size", "2", "--save", str(ck))]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert err.count("resumable checkpoint saved") == 1  # rank 0 alone reports (and writes)
    state = nc.load_checkpoint(str(ck)).meta["training"]["trainer"]
    target = str(state["epoch"] + 1)
    args = flags(npz, "--epochs", target, "--batch-size", "2", "--resume", str(ck))
    assert main(args) == 0
    assert nc.load_checkpoint(str(ck)).meta["training"]["trainer"]["epoch"] == int(target)


FAIL_ON_RANK_1 = """
import sys
from mpi4py import MPI
import numbacnn.cli as cli
import numbacnn.runconfig as runconfig
if MPI.COMM_WORLD.Get_rank() == 1:
    def broken(*a, **k):
        raise cli.DataError("rank 1 cannot read its data")
    runconfig.load_dataset = broken
sys.exit(cli.main(sys.argv[1:]))
"""


def test_an_error_on_one_rank_ends_the_whole_job(npz):
    t0 = time.time()
    r = mpirun(["-c", FAIL_ON_RANK_1, "--distributed", *flags(npz, "--epochs", "50")], timeout=120)
    assert r.returncode != 0 and "rank 1 cannot read its data" in r.stderr
    assert time.time() - t0 < 100  # nobody was left waiting in a collective


def test_several_ranks_without_distributed_are_refused(npz):
    r = mpirun([TRAIN, *flags(npz, "--epochs", "1")])
    assert r.returncode == 2
    assert "started as 2 MPI ranks without --distributed" in r.stderr and "Traceback" not in r.stderr


def test_distributed_without_a_launcher_or_without_mpi4py(npz, capsys):
    assert main(flags(npz, "--distributed")) == 2
    err = capsys.readouterr().err
    assert "--distributed needs an MPI launcher" in err and "pip install 'numbacnn[mpi]'" in err
    r = run_without("mpi4py", "run", ["--distributed", *flags(npz)], env=dict(os.environ, PMI_SIZE="1"))
    assert r.returncode == 2 and "pip install 'numbacnn[mpi]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


COUNT_COMPILES = """
import json, sys
from mpi4py import MPI
import numbacnn.cli as cli
from numbacnn.kernels import cpu as K
rank = MPI.COMM_WORLD.Get_rank()
rc = cli.main(sys.argv[1:])  # finalises MPI
kernels = [K.dense_forward, K.dense_backward]
misses = sum(sum(k.stats.cache_misses.values()) for k in kernels)
print(json.dumps({"rank": rank, "misses": misses, "rc": rc}), flush=True)
"""


def test_only_one_rank_per_machine_compiles(tmp_path, npz):
    """From an empty numba cache, rank 0 compiles the training kernels while rank 1 waits, then
    loads them from the cache (no cache miss)."""
    import json

    # without the prebuilt kernels: this is about compiling
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBACNN_PREBUILT": "0"}
    r = mpirun(["-c", COUNT_COMPILES, "--distributed", "--quiet", "--data", npz, "--epochs", "1",
                "--arch", "dense(4)"], env=env, timeout=600)  # few kernels: a short cold compile
    assert r.returncode == 0, r.stderr[-3000:]
    # the ranks' lines may reach the shared stdout interleaved ('{...}{...}\n\n'): find each object
    misses = {d["rank"]: d["misses"] for d in map(json.loads, re.findall(r"\{[^{}]*\}", r.stdout))}
    assert misses[0] == 2 and misses[1] == 0, misses
    assert '"rc": 0' in r.stdout


def test_batchnorm_uses_each_ranks_batch_and_rank0s_running_statistics_everywhere(tmp_path, npz):
    """Per-rank batch statistics (as torch DDP), running statistics broadcast from rank 0 after
    every step: the job's final test loss, evaluated split over both ranks, is the one rank 0's
    checkpoint gives in one process (a rank with statistics of its own would change it)."""
    import json

    ck, metrics = str(tmp_path / "bn.npz"), tmp_path / "m.json"
    args = ["--quiet", "--data", npz, "--arch", "conv(4,3,padding=same),bn,relu,gap,dense(8),bn,relu",
            "--batch-size", "12", "--epochs", "2", "--optimizer", "sgd"]
    r = mpirun([TRAIN, "--distributed", *args, "--save", ck, "--metrics-out", str(metrics)])
    assert r.returncode == 0, r.stderr[-3000:]
    job_loss = json.loads(metrics.read_text())["epochs"][-1]["test_loss"]
    net = nc.load(ck)
    # 3 steps an epoch, both epochs (and not the compile-ahead step before training)
    assert net.state_dict()["1.num_batches_tracked"][0] == 6
    ds = nc.load_dataset(npz, seed=0)
    loss, _ = nc.evaluate(net, ds.x_test, ds.y_test)
    assert job_loss == pytest.approx(loss, rel=1e-6)


def test_dropout_inside_a_residual_block_draws_one_process_masks(tmp_path, npz):
    """set_batch_slice reaches a Dropout inside res(...): 2 ranks train what one process trains."""
    arch = "conv(4,3,padding=same),relu,res(conv(4,3,padding=same),relu,dropout(0.4)),dense(8)"
    args = ["--quiet", "--data", npz, "--arch", arch, "--batch-size", "12", "--epochs", "1",
            "--optimizer", "sgd", "--lr-schedule", "constant"]
    one, two = str(tmp_path / "one.npz"), str(tmp_path / "two.npz")
    assert main(args + ["--save", one]) == 0
    r = mpirun([TRAIN, "--distributed", *args, "--save", two])
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(nc.load(two).params, nc.load(one).params, rtol=0, atol=ATOL)
