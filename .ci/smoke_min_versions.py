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
# the Winograd plan (transforms, small GEMMs, its backward) against the position-major plan
from numbacnn import tuning  # noqa: E402
from numbacnn.backend.cpu_conv import PositionsPlan  # noqa: E402

rng = np.random.default_rng(0)
x = rng.standard_normal((3, 32, 7, 8)).astype(np.float32)
out = {}
table = {k: v for k, v in vars(tuning).items() if k.isupper()}
for plan in ("winograd", "winograd4", "positions"):  # F(2x2, 3x3), F(4x4, 3x3)
    conv = nc.Conv2D(32, 32, 3, padding=1).initialize(0)
    assert conv.strategy == "winograd"
    if plan == "positions":
        conv._plan = PositionsPlan(conv.geometry)
    # the chooser asked, through the tuning table, for Winograd on this small batch's odd side, and
    # for F(4x4, 3x3) wherever it can run or never
    for name, value in {**table, "WINOGRAD_MIN_AREA": 0, "WINOGRAD_MIN_TILES": 0, "WINOGRAD_ODD_MIN_USED": 0,
                        "WINOGRAD_ODD_MIN_TILES": 0, "WINOGRAD4_MIN_EXAMPLES": 0, "WINOGRAD4_MIN_TILES": 0,
                        "WINOGRAD4_MIN_CHANNELS": 0 if plan == "winograd4" else 2**62}.items():
        setattr(tuning, name, value)
    y = conv.forward(x, training=True)
    assert plan == "positions" or conv.plan.variant(x.shape) == plan
    assert plan == "positions" or ("wino4_u" in conv._buffers) == (plan == "winograd4")  # what ran
    out[plan] = (y.copy(), conv.backward(np.ones_like(y)).copy(), conv.dweight.copy())
for name, value in table.items():
    setattr(tuning, name, value)
for plan in ("winograd", "winograd4"):
    for a, b in zip(out[plan], out["positions"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-4)
print(f"minimum versions: trainer test accuracy {acc:.3f}, estimator score {score:.3f}, Winograd agrees")
