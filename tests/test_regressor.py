"""CNNRegressor (scikit-learn's checks, targets standardised inside, R^2, multi-output, Huber) and
both estimators on series (numpy3D X), in pipelines and searches; the Trainer's regression losses
against the float64 definitions."""
import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

import numbacnn as nc
from numbacnn import CNNClassifier, CNNRegressor
from numbacnn.loss import regression_loss

SMALL = dict(architecture="conv(4,3,padding=same),relu,dense(16),relu", max_epochs=15, batch_size=16,
             random_state=0)
EXPECTED_FAILURES = {name: "mini-batch SGD: weights equal repeated rows in expectation, not bit for bit"
                     for name in ("check_sample_weight_equivalence_on_dense_data",
                                  "check_sample_weight_equivalence_on_sparse_data")}


@parametrize_with_checks([CNNRegressor(**SMALL)], expected_failed_checks=lambda est: EXPECTED_FAILURES)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("delta", [0.0, 0.5, 2.0])
def test_regression_losses_match_float64(rng, delta):
    """MSE and Huber means over batch and outputs, and their gradients, against float64 formulas
    (torch's MSELoss and HuberLoss with reduction 'mean'): relative 1e-6."""
    out = rng.standard_normal((7, 3)).astype(np.float32) * 2
    t = rng.standard_normal((7, 3)).astype(np.float32)
    loss, grad = regression_loss(out, t, delta)
    r = out.astype(np.float64) - t
    if delta == 0:
        want, dwant = (r ** 2).mean(), 2 * r / r.size
    else:
        quad = np.abs(r) <= delta
        want = np.where(quad, 0.5 * r ** 2, delta * (np.abs(r) - 0.5 * delta)).mean()
        dwant = np.where(quad, r, delta * np.sign(r)) / r.size
    assert loss == pytest.approx(want, rel=1e-6)
    np.testing.assert_allclose(grad, dwant, rtol=1e-6, atol=1e-9)
    w = rng.random(7)
    wloss, _ = regression_loss(out, t, delta, sample_weight=w)
    per = (r ** 2).mean(1) if delta == 0 else np.where(
        np.abs(r) <= delta, 0.5 * r ** 2, delta * (np.abs(r) - 0.5 * delta)).mean(1)
    assert wloss == pytest.approx((w * per).sum() / w.sum(), rel=1e-6)


def _series_task(rng, n=600, length=32):
    """Series whose targets are a windowed mean of one channel and a smoothed peak of the other:
    learnable by a small 1-D CNN."""
    x = rng.standard_normal((n, 2, length)).astype(np.float32)
    y = np.stack([x[:, 0, 4:12].mean(1) * 3, np.abs(x[:, 1, 20:28]).mean(1)], 1)
    return x, y


def test_regressor_learns_series_targets_in_their_units(rng):
    """Multi-output series regression: targets standardised inside (fit on targets around 1000
    with spread 50 learns as well as on the standardised ones), predictions in the targets' units,
    score = R^2; a 1-D y predicts 1-D."""
    x, y = _series_task(rng)
    arch = "conv1d(16,5,padding=same),bn,relu,maxpool1d(2),conv1d(16,3,padding=same),relu,dense(32),relu"
    reg = CNNRegressor(architecture=arch, max_epochs=25, random_state=0, lr_schedule="cosine")
    reg.fit(x[:500], y[:500])
    assert reg.input_shape_ == (2, 32) and reg.n_outputs_ == 2
    r2 = reg.score(x[500:], y[500:])
    assert r2 > 0.7
    shifted = CNNRegressor(architecture=arch, max_epochs=25, random_state=0, lr_schedule="cosine")
    shifted.fit(x[:500], 1000 + 50 * y[:500])
    assert shifted.score(x[500:], 1000 + 50 * y[500:]) == pytest.approx(r2, abs=1e-3)
    np.testing.assert_allclose(shifted.y_mean_, 1000 + 50 * y[:500].astype(np.float64).mean(0), rtol=1e-6)
    one = CNNRegressor(architecture=arch, max_epochs=5, random_state=0).fit(x[:500], y[:500, 0])
    assert one.predict(x[500:]).shape == (100,)
    huber = CNNRegressor(architecture=arch, max_epochs=25, random_state=0, loss="huber", huber_delta=0.5,
                         lr_schedule="cosine").fit(x[:500], y[:500])
    assert huber.score(x[500:], y[500:]) > 0.6


def test_regressor_in_a_pipeline_and_a_grid_search(rng):
    x, y = _series_task(rng, n=120)
    flat = x.reshape(len(x), -1)
    pipe = make_pipeline(FunctionTransformer(lambda a: a.reshape(len(a), 2, 32)),
                         CNNRegressor(architecture="conv1d(8,3,padding=same),relu,dense(16),relu",
                                      max_epochs=5, random_state=0))
    search = GridSearchCV(pipe, {"cnnregressor__learning_rate": [1e-3, 3e-3]}, cv=2).fit(flat, y[:, 0])
    assert set(search.best_params_) == {"cnnregressor__learning_rate"}
    assert np.isfinite(search.best_score_)


def test_classifier_takes_numpy3d_series_with_the_series_net(rng):
    """3-D X is (n_cases, n_channels, n_timepoints): "auto" builds the 1-D series net, each
    channel standardised on its own; 4-D images and 3-D images with input_shape stay images."""
    n, length = 300, 40
    x = rng.standard_normal((n, 3, length)).astype(np.float32)
    y = np.arange(n) % 2
    for i in np.flatnonzero(y):  # class 1: a bump somewhere in channel 0
        at = rng.integers(3, length - 3)
        x[i, 0, at - 2:at + 3] += np.float32(4.0) * np.array([0.5, 1, 1.5, 1, 0.5], np.float32)
    x[:, 1] = x[:, 1] * 100 + 500  # one channel on another scale
    clf = CNNClassifier(max_epochs=30, random_state=0).fit(x[:240], y[:240])
    assert clf.input_shape_ == (3, length)
    assert isinstance(clf.net_.layers[0], nc.Conv1D)
    assert np.shape(clf.x_mean_) == (3,) and clf.x_mean_[1] == pytest.approx(500, rel=0.05)
    assert clf.score(x[240:], y[240:]) > 0.9
    with pytest.raises(ValueError, match="per example, but CNNClassifier was fitted on"):
        clf.predict(x[:5, :, :30])


def test_estimators_refuse_nan_in_series(rng):
    x = rng.standard_normal((20, 1, 10))
    x[3, 0, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CNNClassifier(max_epochs=1).fit(x, np.arange(20) % 2)
    with pytest.raises(ValueError, match="NaN"):
        CNNRegressor(max_epochs=1).fit(x, np.arange(20.0))
    with pytest.raises(ValueError, match="NaN|infinity"):
        CNNRegressor(max_epochs=1).fit(rng.standard_normal((20, 1, 10)), np.r_[np.nan, np.arange(19.0)])


def test_onnx_export_of_a_series_classifier(rng, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from numbacnn.onnx_export import export_onnx

    x = rng.standard_normal((60, 2, 24)).astype(np.float32) * 5 + 2
    y = (x[:, 0].mean(1) > 2).astype(int)
    clf = CNNClassifier(max_epochs=3, random_state=0).fit(x, y)
    path = str(tmp_path / "clf.onnx")
    export_onnx(clf, path)
    got = ort.InferenceSession(path).run(None, {"X": x.reshape(60, -1)})[0]
    np.testing.assert_allclose(got, clf.predict_proba(x), rtol=1e-4, atol=1e-5)


def test_onnx_export_of_a_series_regressor(rng, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from numbacnn.onnx_export import export_onnx

    x, y = _series_task(rng, n=80)
    reg = CNNRegressor(architecture="conv1d(8,3,padding=same),bn,relu,dense(16),relu", max_epochs=3,
                       random_state=0).fit(x, 10 + 3 * y)
    path = str(tmp_path / "reg.onnx")
    export_onnx(reg, path)
    got = ort.InferenceSession(path).run(None, {"X": x.reshape(80, -1)})[0]
    np.testing.assert_allclose(got, reg.predict(x), rtol=1e-4, atol=1e-4)
