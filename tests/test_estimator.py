"""CNNClassifier: sklearn's own estimator checks, pipelines, grid search, pickling, bad input."""
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from numbacnn import CNNClassifier

SMALL = dict(architecture="conv(8,3,padding=same),relu,maxpool(2),dense(32),relu", max_epochs=15,
             batch_size=16, random_state=0)


@parametrize_with_checks([CNNClassifier(**SMALL)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))[:600]  # writers mixed across the split
    return X[idx], y[idx]


def test_fit_predict_shapes_and_attributes(digits):
    X, y = digits
    clf = CNNClassifier(**SMALL).fit(X[:400], y[:400])
    assert clf.input_shape_ == (1, 8, 8) and clf.n_features_in_ == 64
    assert clf.n_iter_ == len(clf.loss_curve_) <= 15
    assert clf.score(X[400:], y[400:]) > 0.85
    proba = clf.predict_proba(X[400:])
    np.testing.assert_allclose(proba.sum(1), 1, rtol=1e-6)
    np.testing.assert_allclose(np.log(proba), clf.predict_log_proba(X[400:]), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(1)], clf.predict(X[400:]))


def test_string_labels_images_and_non_square_features(digits):
    X, y = digits
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    clf = CNNClassifier(**SMALL).fit(X[:300].reshape(-1, 8, 8), names[y[:300]])
    assert set(clf.predict(X[300:400].reshape(-1, 8, 8))) <= set(names)
    clf4 = CNNClassifier(**SMALL).fit(X[:300].reshape(-1, 1, 8, 8).astype(np.float32), y[:300])
    assert clf4.input_shape_ == (1, 8, 8)
    clf_flat = CNNClassifier(**SMALL).fit(X[:300, :60], y[:300])  # 60 features: a 1 x 60 image
    assert clf_flat.input_shape_ == (1, 1, 60) and clf_flat.score(X[300:, :60], y[300:]) > 0.7
    clf_shape = CNNClassifier(**{**SMALL, "input_shape": (1, 4, 16)}).fit(X[:300], y[:300])
    assert clf_shape.input_shape_ == (1, 4, 16)


def test_early_stopping_and_warm_start(digits):
    X, y = digits
    clf = CNNClassifier(**{**SMALL, "early_stopping": True, "n_iter_no_change": 2,
                           "max_epochs": 40}).fit(X, y)
    assert len(clf.validation_scores_) == clf.n_iter_ < 40
    assert clf.best_validation_score_ == max(clf.validation_scores_)
    warm = CNNClassifier(**{**SMALL, "warm_start": True, "max_epochs": 2}).fit(X, y)
    w1 = warm.net_.params.copy()
    warm.fit(X, y)
    assert warm.n_iter_ == 4 and not np.array_equal(w1, warm.net_.params)


def test_partial_fit(digits):
    X, y = digits
    clf = CNNClassifier(**SMALL)
    with pytest.raises(ValueError, match="classes"):
        clf.partial_fit(X[:50], y[:50])
    for _ in range(6):
        clf.partial_fit(X[:400], y[:400], classes=np.arange(10))
    assert clf.n_iter_ == 6 and clf.score(X[400:], y[400:]) > 0.8
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[:10, :20], y[:10])


def test_pipeline_gridsearch_parallel_clone_and_pickle(digits):
    X, y = digits
    pipe = make_pipeline(MinMaxScaler(), CNNClassifier(**{**SMALL, "max_epochs": 5}))
    grid = GridSearchCV(pipe, {"cnnclassifier__learning_rate": [1e-3, 3e-3]}, cv=2, n_jobs=2)
    grid.fit(X, y)
    assert grid.best_score_ > 0.8
    scores = cross_val_score(clone(pipe), X, y, cv=3)
    assert scores.mean() > 0.8
    clf = CNNClassifier(**SMALL).fit(X, y)
    blob = pickle.dumps(clf)
    assert b"numba.core" not in blob and b"Dispatcher" not in blob  # no compiled code
    assert len(blob) < 10 * clf.net_.params.nbytes  # weights and optimizer state, no scratch buffers
    restored = pickle.loads(blob)
    np.testing.assert_array_equal(restored.predict_proba(X), clf.predict_proba(X))


def test_bad_input_errors(digits):
    X, y = digits
    with pytest.raises(NotFittedError):
        CNNClassifier().predict(X)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CNNClassifier(**SMALL).fit(Xn, y)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        CNNClassifier(**SMALL).fit(Xi, y)
    with pytest.raises(ValueError, match="1 class"):
        CNNClassifier(**SMALL).fit(X[:20], np.zeros(20))
    clf = CNNClassifier(**{**SMALL, "max_epochs": 1}).fit(X, y)
    with pytest.raises(ValueError, match="X has 10 features, but CNNClassifier is expecting 64"):
        clf.predict(X[:, :10])
    with pytest.raises(ValueError, match="optimizer"):
        CNNClassifier(optimizer="lbfgs").fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        CNNClassifier(batch_size=0).fit(X, y)
    with pytest.raises(ValueError, match="input_shape"):
        CNNClassifier(input_shape=(1, 3, 3)).fit(X, y)
