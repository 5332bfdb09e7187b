"""numbacnn in company: the thread count a run takes when it asks for none (CPU affinity,
OMP_NUM_THREADS, threadpoolctl limits), and ratios within one run that guard against OpenMP threads
busy-waiting while other processes want the cores (two trainings at once, parallel model search).
Ratios of wall times measured in the same test, never wall-clock limits."""
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT

TRAIN = [sys.executable, "train.py", "--epochs", "4", "--quiet"]


def _python(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=dict(base, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@pytest.mark.slow
def test_default_threads_follow_omp_num_threads_affinity_and_threadpool_limits():
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs and sched_setaffinity")
    both = len(os.sched_getaffinity(0))  # the CPUs this process may use, not the host's count
    code = ("import numbacnn as nc; from threadpoolctl import threadpool_limits; "
            "a = nc.get_num_threads()\n"
            "with threadpool_limits(1): b = nc.set_num_threads(None)\n"
            "print(a, b, nc.set_num_threads(None))")
    assert _python(code) == f"{both} 1 {both}"
    assert _python(code, OMP_NUM_THREADS="1").split()[0] == "1"  # joblib's and Dask's workers set it
    pinned = _python("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
                     "import numbacnn as nc; print(nc.get_num_threads())")
    assert pinned == "1"  # taskset / an MPI launcher's binding


@pytest.mark.slow
def test_estimator_follows_an_enclosing_threadpool_limit():
    code = ("from threadpoolctl import threadpool_limits; from sklearn.datasets import load_digits; "
            "from numbacnn import CNNClassifier; X, y = load_digits(return_X_y=True)\n"
            "with threadpool_limits(1): print(CNNClassifier(max_epochs=1).fit(X[:200], y[:200]).n_threads_)")
    assert _python(code) == "1"


@pytest.mark.slow
def test_the_environment_the_user_set_is_kept_and_ours_is_not_left_behind():
    code = "import os, numbacnn; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    assert _python(code) == "None None"  # the spin is libgomp's, not exported to child processes
    assert _python(code, GOMP_SPINCOUNT="123") == "123 None"
    assert _python(code, OMP_WAIT_POLICY="active") == "None active"


def _wall(commands: list[list[str]], together: bool) -> float:
    t = time.perf_counter()
    if together:
        procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.DEVNULL) for c in commands]
        assert [p.wait(timeout=600) for p in procs] == [0] * len(procs)
    else:
        for c in commands:
            subprocess.run(c, cwd=ROOT, stdout=subprocess.DEVNULL, check=True, timeout=600)
    return time.perf_counter() - t


@pytest.mark.slow
@pytest.mark.alone
def test_two_trainings_at_once_take_no_longer_than_one_after_the_other():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    subprocess.run(TRAIN, cwd=ROOT, check=True, capture_output=True, timeout=600)  # kernels cached
    ratios = []
    for _ in range(2):
        ratios.append(_wall([TRAIN, TRAIN], together=True) / _wall([TRAIN, TRAIN], together=False))
    # libgomp's default spin made this 3-4x on 2 cores; now 0.67 on a Xeon, 0.85-0.94 on a Zen 5. A loose
    # bound, as the CI's shared machines are noisy: the spin itself is measured by the idle test below
    assert min(ratios) <= 1.5, ratios


IDLE = """
import time
import numpy as np
import numbacnn as nc
net = nc.build_network("lenet5", (1, 28, 28), 10, seed=0)
x = np.random.default_rng(0).random((64, 1, 28, 28), dtype=np.float32)
net.forward(x)
idle = 0.0
for _ in range(40):  # a parallel forward, then 20 ms in which this process has nothing to do
    net.forward(x)
    t = time.process_time()
    time.sleep(0.02)
    idle += time.process_time() - t
print(nc.get_num_threads(), idle / 40)
"""


@pytest.mark.slow
def test_idle_threads_sleep_instead_of_spinning():
    """What makes company cheap, measured directly and without other processes: after a parallel
    kernel, numbacnn's OpenMP threads spin for a moment and sleep, so 20 ms of the main thread's
    sleep cost the process almost no CPU time. Zen 4, 2 threads: 0.15 ms of CPU time each; with
    libgomp's default spin (GOMP_SPINCOUNT=300000) 7.8 ms: the other thread busy-waits."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    r = subprocess.run([sys.executable, "-c", IDLE], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=dict(base, NUMBA_NUM_THREADS="2", OMP_NUM_THREADS="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    threads, idle = r.stdout.split()
    assert threads == "2"
    assert float(idle) < 1e-3, f"{1000 * float(idle):.2f} ms of CPU time in 20 ms of idleness"


SEARCH = """
import json, time
import joblib
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, cross_validate
from numbacnn import CNNClassifier

X, y = load_digits(return_X_y=True)
X = X / 16
# 60 epochs: about a second a search on a Zen 5, so that Dask's own cost of sending the tasks (50-70 ms
# a search there) is not what the ratio measures
est = CNNClassifier(architecture="conv(8,3,padding=same),relu,maxpool(2),dense(32),relu", max_epochs=60,
                    random_state=0)
def search(n_jobs):
    t = time.perf_counter()
    g = GridSearchCV(est, {"learning_rate": [1e-3, 3e-3]}, cv=3, n_jobs=n_jobs).fit(X, y)
    return time.perf_counter() - t, g.best_estimator_.n_threads_
def folds(n_jobs):  # the threads each fold's fit took where it ran
    cv = cross_validate(est.set_params(max_epochs=1), X, y, cv=2, n_jobs=n_jobs, return_estimator=True)
    est.set_params(max_epochs=60)
    return [e.n_threads_ for e in cv["estimator"]]
search(2)  # the workers start and load their kernels once
res = {"sequential": min(search(1), search(1)), "n_jobs=2": min(search(2), search(2)),
       "folds n_jobs=2": folds(2)}
from dask.distributed import Client, LocalCluster
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \\
        Client(c):
    with joblib.parallel_backend("dask"):
        search(-1)
        res["dask"] = min(search(-1), search(-1))
        res["folds dask"] = folds(-1)
print(json.dumps(res))
"""


@pytest.mark.slow
@pytest.mark.alone
def test_parallel_model_search_shares_the_cores_and_refits_on_all_of_them():
    """What makes a parallel search cheap, asked of the estimators themselves: each fold's fit in a
    worker (joblib's loky, Dask's LocalCluster) takes its share of the cores, one thread, and the
    refit in this process takes all of them, though Dask's LocalCluster writes OMP_NUM_THREADS=1 into
    this process's environment (a refit that took it for its own made Dask's search 1.2x sequential).
    The wall-time ratio is a loose guard against workers spinning for their cores, which made such
    searches 3-4x slower; Dask's own cost of sending tasks put it at 0.8-1.22x on 2-core machines."""
    pytest.importorskip("dask.distributed")
    both = len(os.sched_getaffinity(0))
    if both < 2:
        pytest.skip("needs 2 CPUs")
    res = json.loads(_python(SEARCH).splitlines()[-1])
    for arm in ("sequential", "n_jobs=2", "dask"):
        assert res[arm][1] == both, (arm, res)  # the refit's threads
    assert res["folds n_jobs=2"] == [1, 1], res
    assert res["folds dask"] == [1, 1], res
    assert res["n_jobs=2"][0] <= 1.6 * res["sequential"][0], res
    assert res["dask"][0] <= 1.6 * res["sequential"][0], res
