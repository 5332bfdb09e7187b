"""Model search on Dask (joblib's dask backend, a real LocalCluster of worker processes), lean pickles,
and the guard for numba's thread-unsafe workqueue layer. Skipped without the [dask] extra."""
import copy
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from sklearn.datasets import load_digits

from numbacnn import CNNClassifier

pytestmark = pytest.mark.slow  # real Dask clusters and worker processes

SEARCH = """
import json, sys
import joblib
import numpy as np
from dask.distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from numbacnn import CNNClassifier

X, y = load_digits(return_X_y=True)
X, y = X[:400], y[:400]
est = CNNClassifier(architecture="conv(4,3,padding=same),relu,maxpool(2),dense(16),relu", max_epochs=3,
                    batch_size=32, random_state=0)
grid = {"learning_rate": [1e-3, 3e-3], "batch_size": [16, 32]}
local = GridSearchCV(est, grid, cv=3, n_jobs=1).fit(X, y)
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
        Client(cluster) as client:
    with joblib.parallel_backend("dask"):
        remote = GridSearchCV(est, grid, cv=3, n_jobs=-1).fit(X, y)
    threads = client.submit(lambda: CNNClassifier(**est.get_params()).fit(X, y).n_threads_).result()
    workers = len(client.scheduler_info()["workers"])
    client_threads = remote.best_estimator_.n_threads_  # the refit, in this process
print(json.dumps({"local": [local.best_params_, local.cv_results_["mean_test_score"].tolist()],
                  "remote": [remote.best_params_, remote.cv_results_["mean_test_score"].tolist()],
                  "worker_threads": threads, "workers": workers, "client_threads": client_threads,
                  "local_threads": local.best_estimator_.n_threads_}))
"""


def test_grid_search_on_a_dask_cluster_equals_n_jobs_1():
    pytest.importorskip("dask.distributed")
    r = subprocess.run([sys.executable, "-c", SEARCH], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["workers"] == 2
    assert res["remote"] == res["local"]  # the same best parameters and the same scores, bit for bit
    assert res["worker_threads"] == 1  # each fit follows its worker's share (Dask sets OMP_NUM_THREADS=1)
    # Dask leaves its workers' OMP_NUM_THREADS=1 in the client's environment too: the refit there still
    # takes this process's cores
    assert res["client_threads"] == res["local_threads"]
    assert res["local_threads"] >= min(2, len(os.sched_getaffinity(0)))


def test_fitted_estimator_pickles_its_weights_not_its_workspaces():
    X, y = load_digits(return_X_y=True)
    clf = CNNClassifier(random_state=0, max_epochs=2).fit(X, y)
    weights = clf.net_.params.nbytes
    blob = pickle.dumps(clf)
    assert len(blob) < 1.1 * weights, (len(blob), weights)  # 3.6 MB for 0.6 MB of weights before
    for restored in (pickle.loads(blob), copy.deepcopy(clf)):
        np.testing.assert_array_equal(restored.predict_proba(X), clf.predict_proba(X))
        assert not np.shares_memory(restored.net_.params, clf.net_.params)
        restored.partial_fit(X[:64], y[:64])  # a fresh optimizer when none was kept
    warm = CNNClassifier(random_state=0, max_epochs=1, warm_start=True).fit(X, y)
    again = pickle.loads(pickle.dumps(warm))
    warm.fit(X, y)
    again.fit(X, y)  # warm start after a round trip: the optimizer state came along
    np.testing.assert_array_equal(again.net_.params, warm.net_.params)


WORKQUEUE = """
import os, threading, time
import numpy as np
from sklearn.datasets import load_digits
import numba
import numbacnn.estimator as E
from numbacnn import CNNClassifier

X, y = load_digits(return_X_y=True)
errors = []
def fit():
    try:
        CNNClassifier(max_epochs=40, random_state=0).fit(X, y)
    except RuntimeError as e:
        errors.append(str(e))
t = threading.Thread(target=fit)
t.start()
while E._active == 0 and t.is_alive():
    time.sleep(0.01)
fit()  # a second fit while the first runs
print(numba.threading_layer(), "|", errors[0] if errors else "no error", flush=True)
os._exit(0)  # without waiting for the first fit's 40 epochs
"""


def test_concurrent_fits_on_the_workqueue_layer_are_refused_clearly():
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    r = subprocess.run([sys.executable, "-c", WORKQUEUE], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    layer, message = r.stdout.strip().split(" | ")
    assert layer == "workqueue"
    assert "'workqueue' threading layer is not thread-safe" in message and "threads_per_worker=1" in message
