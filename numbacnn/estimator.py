"""CNNClassifier and CNNRegressor: scikit-learn estimators (Pipelines, GridSearchCV, clone, pickling)
on numbacnn, for images and series."""
from __future__ import annotations

import inspect
import math
import threading
from contextlib import contextmanager
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from . import recipes
from .arch import DEFAULT_ARCH, build_network
from .augment import Augment
from .data import shuffled_split, stratified_split
from .device import check_device
from .optimizers import make_optimizer
from .precision import PRECISIONS, check_precision_device
from .runtime import config as _config
from .training import Callback, Trainer

_active = 0  # fits and predictions running in this process (any thread)
_active_lock = threading.Lock()


def _threading_layer() -> str:
    """numba's threading layer ("omp", "tbb" or "workqueue"; _config started it at import)."""
    import numba

    return numba.threading_layer()


@contextmanager
def _threads(n: int | None):
    """Run with n numba threads; None: ``_config.default_threads()`` (the process's CPUs, at most
    the OMP_NUM_THREADS that joblib's and Dask's worker processes set, or an enclosing
    ``threadpoolctl.threadpool_limits``: n_jobs=2 or two Dask workers do not each run all-cores
    threads). Refuses a second concurrent caller where numba's threading layer is "workqueue",
    which is not thread-safe."""
    global _active
    with _active_lock:
        if _active and _threading_layer() == "workqueue":
            raise RuntimeError(
                "CNNClassifier: another fit or predict is running in this process, and numba's "
                "'workqueue' threading layer is not thread-safe: use single-threaded worker "
                "processes (Dask: LocalCluster(processes=True, threads_per_worker=1); joblib: the "
                "default loky backend), or install tbb or an OpenMP runtime")
        _active += 1
    before = _config.get_num_threads()
    try:
        _config.set_num_threads(n)  # None: _config.default_threads()
        yield
    finally:
        _config.set_num_threads(before)
        with _active_lock:
            _active -= 1


# the estimator's parameter for each hyperparameter a recipe sets (recipes.RECIPES' keys); a recipe
# sets the optional ones only where they are left at their defaults
_RECIPE_PARAMS = {"arch": "architecture", "optimizer": "optimizer", "lr": "learning_rate",
                  "momentum": "momentum", "nesterov": "nesterov", "weight_decay": "weight_decay",
                  "batch_size": "batch_size", "lr_schedule": "lr_schedule", "augment": "augment",
                  "label_smoothing": "label_smoothing", "epochs": "max_epochs", "tta": "tta"}
_RECIPE_OPTIONAL = ("max_epochs", "tta")


class _CNNEstimator(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """What CNNClassifier and CNNRegressor share: inputs (images, series, rows), their scaling,
    the network, the trainer and its epochs, the learned features, pickling."""

    regression = False  # CNNRegressor: float targets, a regression loss
    # one mean and scale for the inputs, or one per channel (arrays of C); set by fit
    x_mean_: float | np.ndarray
    x_scale_: float | np.ndarray
    input_shape_: tuple[int, ...]
    n_outputs_: int

    # --- input handling -------------------------------------------------------------------------
    def _validate_X(self, X, reset: bool, y=None):
        kw: dict[str, Any] = dict(reset=reset, allow_nd=True, dtype=[np.float32, np.float64])
        if y is None:
            X = validate_data(self, X, **kw)
        else:
            X, y = validate_data(self, X, y, **kw, multi_output=self.regression,
                                 y_numeric=self.regression)
        if X.ndim not in (2, 3, 4):
            raise ValueError(f"X must be 2-D (n_samples, n_features), 3-D or 4-D, got {X.ndim}-D")
        return X, y

    @staticmethod
    def _is_channels_last(X: np.ndarray) -> bool:
        return X.ndim == 4 and X.shape[3] in (1, 3) and X.shape[1] not in (1, 3)

    def _resolve_shape(self, X: np.ndarray) -> tuple[int, ...]:
        if X.ndim == 4:
            if self._is_channels_last(X):
                return (X.shape[3], X.shape[1], X.shape[2])
            return tuple(X.shape[1:])
        given = None if self.input_shape is None else tuple(int(s) for s in self.input_shape)
        if X.ndim == 3:
            if given is not None:  # images (N, H, W) by an explicit (1, H, W)
                if len(given) != 3 or given != (1,) + tuple(X.shape[1:]):
                    raise ValueError(f"input_shape {self.input_shape} does not fit X of shape {X.shape} "
                                     f"(3-D X: series (n_cases, n_channels, n_timepoints), or images "
                                     f"(N, H, W) with input_shape=(1, H, W))")
                return given
            return tuple(X.shape[1:])  # series (n_cases, n_channels, n_timepoints): numpy3D
        n = X.shape[1]
        if given is not None:
            if len(given) not in (2, 3) or math.prod(given) != n:
                raise ValueError(f"input_shape {self.input_shape} does not hold {n} features")
            return given
        side = math.isqrt(n)
        return (1, side, side) if side * side == n else (1, 1, n)

    def _images(self, X: np.ndarray, shape) -> np.ndarray:
        """(N, C, H, W) (series: (N, C, L)) float32, standardised with the mean/scale of the
        training data: one pair for all values of one channel (so image structure is kept and
        unscaled 0..255 data trains), one pair per channel for colour and multichannel series."""
        shape = tuple(shape)
        last = getattr(self, "channels_last_", False)
        fitted = (shape[1], shape[2], shape[0]) if last else shape
        if X.ndim != 2 and tuple(X.shape[1:]) != fitted[len(fitted) + 1 - X.ndim:]:
            raise ValueError(f"X has shape {X.shape[1:]} per example, but {type(self).__name__} was "
                             f"fitted on {fitted}" + (" (channels last)" if last else ""))
        x: np.ndarray
        if last:
            c, h, w = shape
            # a copy (astype copies): X transposed back may be the caller's own array, scaled below
            x = X.reshape(X.shape[0], h, w, c).transpose(0, 3, 1, 2).astype(np.float32, order="C")
        else:
            x = X.reshape((X.shape[0],) + shape).astype(np.float32)
        mean, scale = np.asarray(self.x_mean_, np.float64), np.asarray(self.x_scale_, np.float64)
        axes = (-1,) + (1,) * (len(shape) - 1)
        x -= mean.astype(np.float32).reshape(axes)
        x *= (1.0 / scale).astype(np.float32).reshape(axes)
        return x

    def _make_trainer(self, seed: int) -> None:
        h = self._settings()
        kwargs: dict[str, Any] = {"lr": h["learning_rate"]}
        if h["weight_decay"] is not None:
            kwargs["weight_decay"] = h["weight_decay"]
        if h["optimizer"] == "sgd":
            kwargs.update(momentum=h["momentum"], nesterov=h["nesterov"])
        self._optimizer = make_optimizer(h["optimizer"], self.net_, **kwargs)
        self._trainer = Trainer(self.net_, self._optimizer, batch_size=h["batch_size"], seed=seed,
                                progress=self.verbose > 0, shuffle=self.shuffle, augment=h["augment"],
                                label_smoothing=h.get("label_smoothing", 0.0), lr_schedule=h["lr_schedule"],
                                loss=h.get("loss", "cross_entropy"), huber_delta=h.get("huber_delta", 1.0),
                                precision=self.precision)

    def _set_scaling(self, X: np.ndarray, w: np.ndarray | None = None) -> None:
        """One mean and std over all pixels (per channel for colour: arrays of C); with sample
        weights, rows count by their weight (as if repeated)."""
        if self.recipe == "airbench94":  # its network standardises with CIFAR-10's statistics
            self.x_mean_, self.x_scale_ = 0.0, 255.0 if float(np.max(X)) > 1.0 else 1.0
            return
        c = self.input_shape_[0]
        if c > 1:
            last = self.channels_last_
            planes = (X.reshape(len(X), *self.input_shape_[1:], c).transpose(3, 0, 1, 2) if last
                      else X.reshape(len(X), c, -1).transpose(1, 0, 2)).reshape(c, len(X), -1)
            means, stds = [], []
            for p in planes:  # (N, H*W) of one channel
                rows = p.astype(np.float64)
                m = float(np.average(rows.mean(1), weights=w))
                sd = float(np.sqrt(np.average(((rows - m) ** 2).mean(1), weights=w)))
                means.append(m)
                stds.append(sd if sd > 0 and np.isfinite(sd) else 1.0)
            self.x_mean_, self.x_scale_ = np.array(means), np.array(stds)
            return
        if w is None:
            std = float(np.std(X, dtype=np.float64))
            self.x_mean_ = float(np.mean(X, dtype=np.float64))
        else:
            rows = X.reshape(len(X), -1).astype(np.float64)
            self.x_mean_ = float(np.average(rows.mean(1), weights=w))
            std = float(np.sqrt(np.average(((rows - self.x_mean_) ** 2).mean(1), weights=w)))
        self.x_scale_ = std if std > 0 and np.isfinite(std) else 1.0

    def _fit_epochs(self, x, y, w, rng) -> None:
        x_val = y_val = None
        if self.early_stopping:  # split indices, so that the weights follow their rows
            split = shuffled_split if self.regression else stratified_split
            tr, val, _, _ = split(np.arange(len(y)), y, self.validation_fraction, int(rng.integers(2**31)))
            x, x_val, y, y_val = x[tr], x[val], y[tr], y[val]
            w = None if w is None else w[tr]
            self.validation_scores_: list[float] = []
            self.best_validation_score_ = -np.inf
        epochs = self._trainer.epoch + self._settings()["max_epochs"]
        self._trainer.fit(x, y, epochs, x_val=x_val, y_val=y_val, callbacks=[_Stopping(self)],
                          sample_weight=w)

    def transform(self, X) -> np.ndarray:
        """The learned features of X: the last hidden layer's output, the input of the final dense
        layer, (n_samples, n_features_out) float32; for pipelines that put another model on top."""
        check_is_fitted(self, "net_")
        X, _ = self._validate_X(X, reset=False)
        images = self._images(X, self.input_shape_)
        with _threads(self.n_threads):
            h = self.net_.forward(images, upto=-1)
        return h.reshape(len(h), -1)

    def __getstate__(self) -> dict[str, Any]:
        # weights and settings travel; the optimizer's state (momentum, Adam's moments, step count)
        # only where a later fit continues from it (warm_start, partial_fit)
        state = self.__dict__.copy()
        if not (self.warm_start or state.get("_continues")):
            state.pop("_optimizer", None)
            state.pop("_trainer", None)
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        # a fixed random_state gives the same bits on every run and any thread count (tested), which
        # is what scikit-learn's consistency checks fix before they compare fits
        tags.non_deterministic = False
        tags.transformer_tags.preserves_dtype = []  # transform: float32 learned features
        return tags


class CNNClassifier(ClassifierMixin, _CNNEstimator):
    """Convolutional network classifier trained with numbacnn's Numba kernels.

    Parameters
    ----------
    architecture : str, default "auto"
        Preset name ("auto": "series" for series, "compact" up to 16x16 images, "modern" above)
        or layer spec ("conv(32,3),relu,maxpool(2),dense(128),relu"); a final
        dense(n_classes) is appended. Fitted to inputs too small for it (e.g. 1 x n_features).
    input_shape : tuple (C, H, W), (C, L) or None
        How to reshape 2-D X (to images, or with (C, L) to series). None: one square channel when
        n_features is a perfect square, else a 1 x n_features image. 3-D X is series (n_cases,
        n_channels, n_timepoints), the layout aeon, sktime and tslearn call numpy3D (images
        (N, H, W) with input_shape=(1, H, W)); 4-D (N, C, H, W) X is used as it is; 4-D
        (N, H, W, C) X with C in {1, 3} (channels last, as images load from files) is
        transposed to (N, C, H, W), and later X must come in the same layout. Inputs are
        standardised with the training data's mean and standard deviation: one pair for one
        channel, one pair per channel for colour and multichannel series.
    optimizer : {"adam", "sgd", "rmsprop"}
    learning_rate : float
    momentum : float
        Momentum of "sgd" (ignored by the others).
    batch_size : int
    max_epochs : int
        Maximum passes over the training data in ``fit``.
    shuffle : bool
        Shuffle the training data every epoch.
    random_state : int or None
        Seeds initialisation, dropout, shuffling and the validation split.
    early_stopping : bool
        Hold out ``validation_fraction`` and stop when its accuracy has not improved by ``tol``
        for ``n_iter_no_change`` epochs; the best weights are kept.
    validation_fraction, n_iter_no_change, tol :
        See early_stopping; without it, training stops when the training loss has not
        improved by ``tol`` for ``n_iter_no_change`` epochs.
    class_weight : "balanced", dict {label: weight} or None
        Weights of the classes in the loss (multiplied with ``sample_weight``); "balanced" uses
        n_samples / (n_classes * count(class)).
    warm_start : bool
        Continue from the previous fit's weights.
    verbose : int
        > 0 shows tqdm progress bars and per-epoch lines.
    n_threads : int or None
        numba threads during fit/predict (None: the cores this process may use, at most the
        OMP_NUM_THREADS that joblib's and Dask's worker processes set, or an enclosing
        ``threadpoolctl.threadpool_limits``). The count used is ``n_threads_``.
    device : {"cpu", "cuda"}
    augment : str or None
        Per-batch augmentation of the images ("shift:2", "crop:4,flip"; see ``numbacnn.Augment``).
    label_smoothing : float
        Cross-entropy against targets (1 - eps) * onehot + eps / n_classes.
    lr_schedule : {"constant", "cosine", "onecycle"}
        Over ``max_epochs`` (see ``numbacnn.Trainer``; "onecycle" peaks at ``learning_rate``).
    tta : {"none", "mirror", "mirror-translate"}
        Test-time augmentation of ``predict``, ``predict_proba`` and ``score``: the logits averaged
        over mirrored (and translated) views of each image (``numbacnn.tta``); images only.
    weight_decay : float or None
        L2 weight decay (decoupled for "adamw"); None: the optimizer's default (0; "adamw" 0.01).
    nesterov : bool
        Nesterov momentum for "sgd".
    recipe : {"resnet8", "airbench94"} or None
        A published recipe sets the hyperparameters it names (``numbacnn.recipes.RESNET8``:
        architecture, optimizer, learning rate, momentum, Nesterov, weight decay, batch size,
        schedule, augmentation, label smoothing), and ``max_epochs`` and ``tta`` where they are
        left at their defaults; a hyperparameter it sets given another value is a ValueError.
        "airbench94" trains as ``numbacnn.recipes.train_airbench94`` does (its network, optimizer
        and schedule; 9.9 epochs unless ``max_epochs`` is given), on colour 32x32 images in [0, 1]
        or 0-255 (then divided by 255), in ``fit`` only (no ``partial_fit``, ``warm_start`` or
        ``early_stopping``).
    precision : {"float32", "bf16"}
        The multiplications' precision (``numbacnn.Trainer``'s; numbacnn/precision.py): "bf16" as
        torch.autocast, on the CPU only.
    """

    def __init__(self, architecture: str = DEFAULT_ARCH, input_shape: tuple[int, ...] | None = None,
                 optimizer: str = "adam", learning_rate: float = 1e-3, momentum: float = 0.9,
                 batch_size: int = 32, max_epochs: int = 20, shuffle: bool = True,
                 random_state: int | None = None, early_stopping: bool = False,
                 validation_fraction: float = 0.1, n_iter_no_change: int = 10, tol: float = 1e-4,
                 class_weight: str | dict | None = None, warm_start: bool = False, verbose: int = 0,
                 n_threads: int | None = None, device: str = "cpu", augment: str | None = None,
                 label_smoothing: float = 0.0, lr_schedule: str = "constant", tta: str = "none",
                 weight_decay: float | None = None, nesterov: bool = False,
                 recipe: str | None = None, precision: str = "float32") -> None:
        self.architecture = architecture
        self.input_shape = input_shape
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.shuffle = shuffle
        self.random_state = random_state
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.verbose = verbose
        self.n_threads = n_threads
        self.device = device
        self.augment = augment
        self.label_smoothing = label_smoothing
        self.lr_schedule = lr_schedule
        self.tta = tta
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.recipe = recipe
        self.precision = precision

    _parameter_constraints: dict = {
        "architecture": [str],
        "input_shape": [tuple, list, None],
        "optimizer": [StrOptions({"sgd", "adam", "adamw", "rmsprop"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "momentum": [Interval(Real, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "class_weight": [StrOptions({"balanced"}), dict, None],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "n_threads": [Interval(Integral, 1, None, closed="left"), None],
        "device": [StrOptions({"cpu", "cuda"})],
        "augment": [str, None],
        "label_smoothing": [Interval(Real, 0, 1, closed="left")],
        "lr_schedule": [StrOptions({"constant", "cosine", "onecycle"})],
        "tta": [StrOptions({"none", "mirror", "mirror-translate"})],
        "weight_decay": [Interval(Real, 0, None, closed="left"), None],
        "nesterov": ["boolean"],
        "recipe": [StrOptions(set(recipes.RECIPES)), None],
        "precision": [StrOptions(set(PRECISIONS))],
    }

    def _check_params(self) -> None:
        self._validate_params()  # scikit-learn's checks of _parameter_constraints
        check_precision_device(self.precision, self.device)
        check_device(self.device)
        Augment.parse(self._settings()["augment"])  # a ValueError naming a bad term (or a recipe clash)

    def _settings(self) -> dict[str, Any]:
        """The hyperparameters that fit uses, by parameter name: the estimator's own, or with a
        ``recipe`` the recipe's (``max_epochs`` and ``tta`` only where left at their defaults)."""
        own = {name: getattr(self, name) for name in _RECIPE_PARAMS.values()}
        if self.recipe is None:
            return own
        settings = recipes.RECIPES[self.recipe]
        defaults = _DEFAULTS
        sets = {name: settings[key] for key, name in _RECIPE_PARAMS.items() if key in settings}
        clash = [name for name in sets if name not in _RECIPE_OPTIONAL and own[name] != defaults[name]]
        if clash:
            raise ValueError(f"recipe={self.recipe!r} sets {', '.join(clash)} itself: leave "
                             f"{'it' if len(clash) == 1 else 'them'} at the default")
        if self.recipe == "airbench94" and (self.early_stopping or self.warm_start):
            raise ValueError("recipe='airbench94' trains on its own schedule: early_stopping and "
                             "warm_start do not apply")
        return {**own, **{name: value for name, value in sets.items()
                          if name not in _RECIPE_OPTIONAL or own[name] == defaults[name]}}

    def _example_weights(self, y: np.ndarray, sample_weight) -> np.ndarray | None:
        """Per-example weights (sample_weight x class_weight), or None when all are 1."""
        if sample_weight is None and self.class_weight is None:
            return None
        w = _check_sample_weight(sample_weight, np.empty((len(y), 1)), dtype=np.float64)
        if isinstance(self.class_weight, dict):
            w = w * np.array([float(self.class_weight.get(c, 1.0)) for c in self.classes_])[y]
        elif self.class_weight == "balanced":  # n / (classes present * count), as scikit-learn's
            counts = np.bincount(y, minlength=len(self.classes_))
            w = w * (len(y) / (np.count_nonzero(counts) * np.maximum(counts, 1)))[y]
        if np.any(w < 0):
            raise ValueError("sample weights must be non-negative")
        return w

    # --- fitting ----------------------------------------------------------------------------------
    def _init_model(self, shape, n_classes: int, rng: np.random.Generator) -> None:
        seed = int(rng.integers(2**31))
        if self.recipe != "airbench94":  # (its network is made from the training images: fit)
            self.net_ = build_network(self._settings()["architecture"], shape, n_classes, seed=seed,
                                      adapt=True)
            self.net_.to(self.device)
            self._make_trainer(int(rng.integers(2**31)))
        self.input_shape_ = tuple(shape)
        # one mean and scale, or one per channel for colour (arrays of C)
        self.x_mean_ = 0.0
        self.x_scale_ = 1.0
        self.loss_curve_: list[float] = []
        self.n_iter_ = 0

    classes_: np.ndarray

    def _encode(self, y: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        if not np.all(self.classes_[idx] == y):
            unknown = np.setdiff1d(np.unique(y), self.classes_)
            raise ValueError(f"y contains labels not seen in classes_: {unknown[:5].tolist()}")
        return idx.astype(np.int64)

    def fit(self, X, y, sample_weight=None) -> CNNClassifier:
        """Train on X (n_samples, n_features) or image arrays, y any hashable labels.

        ``sample_weight`` (n_samples,) weights each example's loss (a weighted mean per batch, times
        ``class_weight``); rows of weight 0 are left out, exactly as if they were not there."""
        self._check_params()
        warm = self.warm_start and hasattr(self, "net_")
        X, y = self._validate_X(X, reset=not warm, y=y)
        X, y, sample_weight = _drop_zero_weights(X, y, sample_weight)
        check_classification_targets(y)
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                             f"but the data contains only 1 class: {classes[0]!r}")
        shape = self._resolve_shape(X)
        if warm and (shape != self.input_shape_ or not np.array_equal(classes, self.classes_)):
            raise ValueError("warm_start needs the same input shape and classes as the previous fit")
        self.classes_ = classes
        rng = np.random.default_rng(self.random_state)
        y_all = self._encode(y)
        weights = self._example_weights(y_all, sample_weight)
        if not warm:
            self._init_model(shape, len(classes), rng)
            self.channels_last_ = self._is_channels_last(X)
            self._set_scaling(X, weights)
        x_all = self._images(X, shape)
        with _threads(self.n_threads):
            self.n_threads_ = _config.get_num_threads()
            if self.recipe == "airbench94":
                self._fit_airbench94(x_all, y_all, weights, int(rng.integers(2**31)))
            else:
                self._fit_epochs(x_all, y_all, weights, rng)
        return self

    def _fit_airbench94(self, x: np.ndarray, y: np.ndarray, w: np.ndarray | None, seed: int) -> None:
        """recipes.train_airbench94's training (network, optimizer, schedule, seed) on (x, y)."""
        epochs = self._settings()["max_epochs"]
        self.net_ = recipes.airbench94_network(x, len(self.classes_), seed).to(self.device)
        self.net_.set_precision(self.precision)
        self._trainer, schedule, rounds = recipes.airbench94_trainer(
            self.net_, len(x), seed, epochs, progress=self.verbose > 0, log=None)
        self._optimizer = self._trainer.optimizer
        self._trainer.fit(x, y, rounds, callbacks=[schedule, _Stopping(self, stop=False)],
                          sample_weight=w)

    def partial_fit(self, X, y, classes=None, sample_weight=None) -> CNNClassifier:
        """One epoch over (X, y); ``classes`` (all labels) is required on the first call, labels
        outside them are refused later, and the optimizer state (momentum, Adam's moments, step
        count) carries over between calls. ``sample_weight`` as in ``fit``."""
        first = not hasattr(self, "net_")
        if self.recipe == "airbench94":
            raise ValueError("recipe='airbench94' trains in fit only (a schedule over all its epochs)")
        if first:
            self._check_params()
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
        X, y = self._validate_X(X, reset=first, y=y)
        X, y, sample_weight = _drop_zero_weights(X, y, sample_weight)
        check_classification_targets(y)
        if first:
            self.classes_ = np.unique(np.asarray(classes))
            if len(self.classes_) < 2:
                raise ValueError(f"{type(self).__name__} needs at least 2 classes, got "
                                 f"{len(self.classes_)} class")
            self._init_model(self._resolve_shape(X), len(self.classes_),
                             np.random.default_rng(self.random_state))
            self.channels_last_ = self._is_channels_last(X)
            self._set_scaling(X, self._example_weights(self._encode(y), sample_weight))
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes {np.unique(classes)} differ from the first call's {self.classes_}")
        elif not hasattr(self, "_trainer"):  # unpickled after a fit without warm_start: the
            rng = np.random.default_rng(self.random_state)  # optimizer starts afresh
            rng.integers(2**31)
            self._make_trainer(int(rng.integers(2**31)))
        self._continues = True  # pickles keep the optimizer state from now on
        labels = self._encode(y)
        with _threads(self.n_threads):
            self.n_threads_ = _config.get_num_threads()
            self._trainer.fit(self._images(X, self.input_shape_), labels, self._trainer.epoch + 1,
                              callbacks=[_Stopping(self, stop=False)],
                              sample_weight=self._example_weights(labels, sample_weight))
        return self

    # --- prediction ---------------------------------------------------------------------------
    def _logits(self, X) -> np.ndarray:
        check_is_fitted(self, "net_")
        X, _ = self._validate_X(X, reset=False)
        from .tta import logits

        images = self._images(X, self.input_shape_)
        with _threads(self.n_threads):
            return logits(self.net_, images, self._settings()["tta"])

    def predict_log_proba(self, X) -> np.ndarray:
        z = self._logits(X).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def predict_proba(self, X) -> np.ndarray:
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

def _drop_zero_weights(X, y, sample_weight):
    """Leave out the rows of weight 0 (exactly as if they were not given)."""
    if sample_weight is None:
        return X, y, None
    w = _check_sample_weight(sample_weight, X, dtype=np.float64)
    if np.any(w < 0):
        raise ValueError("sample weights must be non-negative")
    keep = w > 0
    if not keep.any():
        raise ValueError("every sample weight is 0: nothing to train on")
    return X[keep], np.asarray(y)[keep], w[keep]


class CNNRegressor(RegressorMixin, _CNNEstimator):
    """Convolutional network regressor trained with numbacnn's Numba kernels: the network's last
    layer gives one output per target, trained on the mean squared error (or Huber's loss) of the
    targets standardised with the training targets' mean and standard deviation; ``predict``
    maps them back; ``score`` is R^2 (averaged over the targets, as scikit-learn's).

    Parameters as ``CNNClassifier``'s (architecture, input_shape, optimizer, learning_rate,
    momentum, batch_size, max_epochs, shuffle, random_state, early_stopping with
    validation_fraction, n_iter_no_change and tol, warm_start, verbose, n_threads, device,
    augment, lr_schedule, weight_decay, nesterov, precision), and:

    loss : {"mse", "huber"}
        The mean squared error (torch's ``MSELoss``) or Huber's loss (``HuberLoss``) on the
        standardised targets.
    huber_delta : float
        Where Huber's loss turns from squared to linear, in standard deviations of the targets.

    y may be (n_samples,) or (n_samples, n_targets); ``predict`` returns the same form.
    With early stopping the validation loss decides (its best weights are kept).
    """

    regression = True
    recipe = None  # the published recipes are classification recipes

    def __init__(self, architecture: str = DEFAULT_ARCH, input_shape: tuple[int, ...] | None = None,
                 optimizer: str = "adam", learning_rate: float = 1e-3, momentum: float = 0.9,
                 batch_size: int = 32, max_epochs: int = 20, shuffle: bool = True,
                 random_state: int | None = None, early_stopping: bool = False,
                 validation_fraction: float = 0.1, n_iter_no_change: int = 10, tol: float = 1e-4,
                 warm_start: bool = False, verbose: int = 0, n_threads: int | None = None,
                 device: str = "cpu", augment: str | None = None, lr_schedule: str = "constant",
                 weight_decay: float | None = None, nesterov: bool = False, loss: str = "mse",
                 huber_delta: float = 1.0, precision: str = "float32") -> None:
        self.architecture = architecture
        self.input_shape = input_shape
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.shuffle = shuffle
        self.random_state = random_state
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.n_threads = n_threads
        self.device = device
        self.augment = augment
        self.lr_schedule = lr_schedule
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self.loss = loss
        self.huber_delta = huber_delta
        self.precision = precision

    _parameter_constraints: dict = {
        **{k: v for k, v in CNNClassifier._parameter_constraints.items()
           if k not in ("class_weight", "label_smoothing", "tta", "recipe")},
        "loss": [StrOptions({"mse", "huber"})],
        "huber_delta": [Interval(Real, 0, None, closed="neither")],
    }

    def _check_params(self) -> None:
        self._validate_params()
        check_precision_device(self.precision, self.device)
        check_device(self.device)
        Augment.parse(self.augment)

    def _settings(self) -> dict[str, Any]:
        names = [n for n in _RECIPE_PARAMS.values() if n not in ("label_smoothing", "tta")]
        return {**{n: getattr(self, n) for n in names}, "loss": self.loss, "huber_delta": self.huber_delta}

    def fit(self, X, y, sample_weight=None) -> CNNRegressor:
        """Train on X (rows, images or series (n_cases, n_channels, n_timepoints)) and float
        targets y (n_samples,) or (n_samples, n_targets); ``sample_weight`` weights each example's
        loss (rows of weight 0 are left out)."""
        self._check_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        warm = self.warm_start and hasattr(self, "net_")
        X, y = self._validate_X(X, reset=not warm, y=y)
        X, y, sample_weight = _drop_zero_weights(X, y, sample_weight)
        y = np.asarray(y, np.float64)
        self._y_1d = y.ndim == 1
        targets = y.reshape(len(y), -1)
        if not np.isfinite(targets).all():
            raise ValueError("y contains NaN or infinity")
        shape = self._resolve_shape(X)
        if warm and (shape != self.input_shape_ or targets.shape[1] != self.n_outputs_):
            raise ValueError("warm_start needs the same input shape and number of targets as the "
                             "previous fit")
        rng = np.random.default_rng(self.random_state)
        w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        if not warm:
            self.n_outputs_ = targets.shape[1]
            seed = int(rng.integers(2**31))
            self.net_ = build_network(self.architecture, shape, self.n_outputs_, seed=seed, adapt=True,
                                      regression=True).to(self.device)
            self._make_trainer(int(rng.integers(2**31)))
            self.input_shape_ = tuple(shape)
            self.x_mean_ = 0.0
            self.x_scale_ = 1.0
            self.loss_curve_: list[float] = []
            self.n_iter_ = 0
            self.channels_last_ = self._is_channels_last(X)
            self._set_scaling(X, w)
            mean = np.average(targets, axis=0, weights=w)
            std = np.sqrt(np.average((targets - mean) ** 2, axis=0, weights=w))
            self.y_mean_, self.y_scale_ = mean, np.where(std > 0, std, 1.0)
        z = ((targets - self.y_mean_) / self.y_scale_).astype(np.float32)
        with _threads(self.n_threads):
            self.n_threads_ = _config.get_num_threads()
            self._trainer.target_scale = (self.y_mean_, self.y_scale_)
            self._fit_epochs(self._images(X, shape), z, w, rng)
        return self

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self, "net_")
        X, _ = self._validate_X(X, reset=False)
        x = self._images(X, self.input_shape_)
        with _threads(self.n_threads):
            z = np.concatenate([self.net_.forward(x[lo:lo + 256], training=False)
                                for lo in range(0, len(x), 256)]).astype(np.float64)
        out = z * self.y_scale_ + self.y_mean_
        return out[:, 0] if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class _Stopping(Callback):
    """The estimator's hook into Trainer.fit: records ``loss_curve_`` / ``n_iter_`` and, when
    ``stop``, stops after ``n_iter_no_change`` epochs without an improvement of ``tol`` (in
    validation accuracy with early stopping, whose best weights are then kept, else in training
    loss)."""

    def __init__(self, est: CNNClassifier, stop: bool = True) -> None:
        self.est, self.stop = est, stop
        self.best_loss, self.stall = np.inf, 0
        self.best_params: dict[str, np.ndarray] | None = None

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        est = self.est
        est.loss_curve_.append(float(stats["train_loss"]))
        est.n_iter_ += 1
        if "val_accuracy" in stats or "val_rmse" in stats:  # regression: the lower loss wins
            score = stats["val_accuracy"] if "val_accuracy" in stats else -stats["val_loss"]
            est.validation_scores_.append(score)
            if score > est.best_validation_score_ + est.tol:
                est.best_validation_score_, self.stall = score, 0
                self.best_params = trainer.net.state_dict()  # weights and BatchNorm statistics
            else:
                self.stall += 1
        else:
            self.stall = 0 if stats["train_loss"] < self.best_loss - est.tol else self.stall + 1
            self.best_loss = min(self.best_loss, stats["train_loss"])
        if self.stop and self.stall >= est.n_iter_no_change:
            trainer.stop_training = True

    def on_train_end(self, trainer: Trainer) -> None:
        if self.best_params is not None:
            trainer.net.load_state_dict(self.best_params)


__all__ = ["CNNClassifier", "CNNRegressor"]


# __init__'s defaults, which a recipe's hyperparameters may replace (CNNClassifier._settings)
_DEFAULTS = {k: p.default for k, p in inspect.signature(CNNClassifier.__init__).parameters.items()}
