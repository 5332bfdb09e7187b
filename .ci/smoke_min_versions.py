"""CI smoke test on the minimum versions pyproject.toml declares: import, train a few steps, and the
estimator on digits. Run by .ci/run in a venv holding exactly those versions."""
import numba
import numpy as np
import scipy
import sklearn
from sklearn.datasets import load_digits

import numbacnn as nc

print("numba", numba.__version__, "numpy", np.__version__, "scipy", scipy.__version__,
      "scikit-learn", sklearn.__version__)
ds = nc.load_dataset(None)
net = nc.build_network("conv(4,3,padding=same),relu,maxpool(2),dense(16),relu,dropout(0.2)", (1, 8, 8), 10,
                       seed=0)
tr = nc.Trainer(net, nc.Adam(net, lr=2e-3), batch_size=32, progress=False)
tr.fit(ds.x_train, ds.y_train, 3, ds.x_test, ds.y_test)
acc = tr.history[-1]["test_accuracy"]
assert acc > 0.5, acc
X, y = load_digits(return_X_y=True)
clf = nc.CNNClassifier(architecture="conv(4,3,padding=same),relu,maxpool(2),dense(16),relu", max_epochs=6,
                       random_state=0).fit(X[:1000], y[:1000])
score = clf.score(X[1000:], y[1000:])
assert score > 0.5, score
print(f"minimum versions: trainer test accuracy {acc:.3f}, estimator score {score:.3f}")
