"""What a ``train.py`` run trains: the data, the network, the optimizer and the schedule, from the
command line's flags, the recipes for flags left unset, and the resume policy (a checkpoint's
settings win; a conflicting flag or other training data is refused)."""
from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._files import available_memory
from ._text import plural
from .arch import DEFAULT_ARCH, build_network
from .augment import Augment
from .checkpoint import CheckpointError, load_checkpoint
from .data import Dataset, is_image_folder, load_dataset, shuffled_split, stratified_split
from .layers import Normalize
from .network import Sequential
from .optimizers import OPTIMIZERS, Optimizer, make_optimizer
from .training import LR_SCHEDULES

DEFAULT_LR = {"sgd": 0.05, "rmsprop": 1e-3}
DEFAULT_WEIGHT_DECAY = {"adamw": 0.01}  # torch's defaults; the others 0
# Recipes for flags left unset: the embedded digits (8x8, 1,437 training images) like small batches
# and more epochs; MNIST-sized data gets the usual batch 64.
RECIPES: dict[str, dict[str, Any]] = {
    "digits": {"epochs": 25, "batch_size": 16, "adam_lr": 2e-3, "lr_schedule": "constant"},
    "other": {"epochs": 10, "batch_size": 64, "adam_lr": 2e-3, "lr_schedule": "cosine"},
    # images above 16x16 (MNIST-sized and up), where "auto" picks the "modern" network: its recipe
    "images": {"epochs": 15, "batch_size": 64, "adam_lr": 4e-3, "lr_schedule": "onecycle",
               "augment": "shift:2", "label_smoothing": 0.1},
    # series (the "series" net): a number of steps rather than epochs, as the sets run from 50 to
    # thousands of series; batch 8 below 1,000 training series and 64 from there, AdamW's rate
    # scaled with the batch (on GunPoint, ItalyPowerDemand, JapaneseVowels and MNIST-1D:
    # benchmarks/series.py)
    "series": {"steps": 6000, "batch_size": 8, "large_batch_size": 64, "large_from": 1000,
               "adam_lr": 3e-4, "optimizer": "adamw", "weight_decay": 0.05, "lr_schedule": "cosine",
               "label_smoothing": 0.1},
}


def recipe_for(ds: Dataset) -> dict[str, Any]:
    """The recipe for ``ds``, with a series recipe's batch size, epochs and rate for its size."""
    recipe = dict(RECIPES[recipe_name(ds)])
    if "steps" in recipe:
        n = len(ds.y_train)
        if n >= recipe["large_from"]:
            recipe["adam_lr"] *= recipe["large_batch_size"] / recipe["batch_size"]
            recipe["batch_size"] = recipe["large_batch_size"]
        recipe["epochs"] = max(20, -(-recipe["steps"] * recipe["batch_size"] // n))
    return recipe


class UsageError(Exception):
    """A bad command line (exit status 2)."""


def load_data(args: Any, seed: int, test_size: float, shape: tuple[int, ...] | None = None,
              progress: bool = False) -> Dataset:
    """The data of ``--data``; an image folder is read at ``--image-size`` and ``--channels``, or
    at a checkpoint's input ``shape`` (C, H, W) when those are not given."""
    size, channels = getattr(args, "image_size", None), getattr(args, "channels", None)
    folder = bool(args.data) and is_image_folder(args.data)
    if (size is not None or channels is not None) and not folder:
        raise UsageError("--image-size and --channels apply to image folders (a --data directory of "
                         "class folders)")
    if folder and shape is not None:
        size = size or tuple(shape[1:])
        channels = channels or shape[0]
    ds = load_dataset(args.data, labels=args.labels, test_size=test_size, seed=seed,
                      image_size=size if folder else None, channels=channels if folder else None,
                      cache_dir=getattr(args, "cache_dir", None), progress=progress,
                      series=getattr(args, "series", False),
                      series_length=getattr(args, "series_length", None),
                      series_fit=getattr(args, "series_fit", None),
                      fill_missing=getattr(args, "fill_missing", None))
    if ds.skipped:
        shown = "; ".join(f"{p} ({why})" for p, why in ds.skipped[:3])
        more = f" and {len(ds.skipped) - 3} more" if len(ds.skipped) > 3 else ""
        print(f"train.py: warning: skipped {plural(len(ds.skipped), 'unreadable picture')}: {shown}{more}",
              file=sys.stderr)
    return ds


def recipe_name(ds: Dataset) -> str:
    """The recipe for flags left unset: "digits" (the embedded set), "series", "images" (above
    16x16), "other"."""
    if ds.name == "digits":
        return "digits"
    if ds.is_series:
        return "series"
    shape = ds.input_shape
    return "images" if len(shape) == 3 and max(shape[1:]) > 16 and min(shape[1:]) >= 8 else "other"


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of the training images and labels (shapes, dtypes and values), stored in checkpoints
    so that a resume on other data is refused."""
    h = hashlib.sha256()
    for a in (x, y):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def check_shapes(net: Sequential, ds: Dataset, path: str) -> None:
    """A checkpoint's network fits the data: its input shape, its class names (when both have
    them), and enough classes for the labels."""
    if net.input_shape is not None and tuple(net.input_shape) != ds.input_shape:
        raise CheckpointError(f"{path}: the network expects images of shape {tuple(net.input_shape)}, "
                              f"the data has {ds.input_shape}")
    if net.classes and ds.classes and list(net.classes) != list(ds.classes):
        raise CheckpointError(f"{path}: the network was trained on classes {', '.join(net.classes)}; "
                              f"the data has {', '.join(ds.classes)}")
    n_out = net.output_shape(ds.input_shape)[0]
    if ds.n_classes > n_out:
        raise CheckpointError(f"{path}: the network has {n_out} classes, the data has labels up to "
                              f"{ds.n_classes - 1}")


@dataclass
class RunConfig:
    """A run's settings and what they built."""

    ds: Dataset
    arch: str
    opt_name: str
    seed: int
    test_size: float
    val_size: float
    epochs: int
    batch_size: int
    schedule: str
    fingerprint: str
    x_tr: np.ndarray
    y_tr: np.ndarray
    x_val: np.ndarray | None
    y_val: np.ndarray | None
    net: Sequential
    opt: Optimizer
    trainer_state: dict[str, Any] | None  # the checkpoint's Trainer.state() when resuming
    augment: str = "none"
    label_smoothing: float = 0.0
    early_stopping: int = 0  # patience in epochs; 0: off
    target_scale: tuple[float, float] = (0.0, 1.0)  # regression: the training targets' (mean, std)

    @property
    def regress(self) -> bool:
        return self.ds.task == "regress"

    def test_targets(self) -> np.ndarray:
        """The test labels, or the test targets standardised as the training targets are."""
        return _standardised(self.ds.y_test, self.target_scale) if self.regress else self.ds.y_test

    def checkpoint_meta(self, trainer_state: dict[str, Any]) -> dict[str, Any]:
        """The ``training`` metadata a checkpoint stores, for ``--resume``."""
        return {"architecture": self.arch, "optimizer_name": self.opt_name, "seed": self.seed,
                "epochs": self.epochs, "test_size": self.test_size, "val_size": self.val_size,
                "batch_size": self.batch_size, "dataset": self.ds.name,
                "data_fingerprint": self.fingerprint, "trainer": trainer_state,
                "lr_schedule": self.schedule, "augment": self.augment,
                "label_smoothing": self.label_smoothing, "early_stopping": self.early_stopping}


def _check_batch(net: Sequential, shape: tuple[int, ...], batch_size: int, n: int) -> None:
    """A batch of ``batch_size`` (or the whole training set, if smaller) is as large as every layer
    needs (``Layer.smallest_batch``: a BatchNorm two values per channel to normalise by): refused
    before training, not found mid-epoch."""
    def walk(layers: list[Any], shape: tuple[int, ...]) -> Any:
        for layer in layers:
            yield layer, shape
            for _, path in layer.paths():
                yield from walk(path, shape)
            shape = layer.output_shape(shape)

    smallest, outputs = min(batch_size, n), 0
    for layer, in_shape in walk(net.layers, tuple(shape)):
        need = layer.smallest_batch(in_shape)
        if smallest < need:
            raise UsageError(f"--batch-size {batch_size}: {layer._label()} needs at least {need} examples a "
                             f"batch (it normalises over the batch)")
        outputs += math.prod(layer.output_shape(in_shape))
    # a floor, not an estimate: each layer's output once a batch, the parameters four times (weights,
    # gradients, two optimizer moments); the step itself holds more (caches, workspaces)
    floor, have = 4 * (smallest * outputs + 4 * net.n_params), available_memory()
    if have is not None and floor > have:
        raise UsageError(f"--batch-size {batch_size}: a training step on {'x'.join(map(str, shape))} inputs "
                         f"holds at least {floor / 2**30:,.1f} GiB, this machine has {have / 2**30:,.1f} GiB "
                         f"free (a smaller --batch-size, --image-size or network)")


def _standardised(y: np.ndarray, scale: tuple[float, float]) -> np.ndarray:
    """Regression targets (N,) as float32 (N, 1), standardised by scale = (mean, std)."""
    return ((np.asarray(y, np.float64).reshape(len(y), -1) - scale[0]) / scale[1]).astype(np.float32)


def _resume_meta(args: Any, on_lead: Callable[[Callable[[], Any]], Any]) -> tuple[Any, dict[str, Any]]:
    """The checkpoint to resume (or None) and its training metadata; refuses flags that contradict it."""
    if not args.resume:
        return None, {}
    resume = on_lead(lambda: load_checkpoint(args.resume))
    tmeta: dict[str, Any] = resume.meta.get("training", {})
    if not tmeta or not tmeta.get("trainer"):
        raise CheckpointError(f"{args.resume}: holds no training state to resume (saved by nc.save?)")
    for key, known in (("optimizer_name", OPTIMIZERS), ("lr_schedule", LR_SCHEDULES)):
        if tmeta.get(key) is not None and tmeta[key] not in known:
            raise CheckpointError(f"{args.resume}: the checkpoint's metadata field 'training.{key}' holds "
                                  f"{tmeta[key]!r}; known: {', '.join(known)}")
    try:
        Augment.parse(tmeta.get("augment"))
    except ValueError as e:
        raise CheckpointError(f"{args.resume}: the checkpoint's metadata field 'training.augment': "
                              f"{e}") from None
    for flag, key in (("arch", "architecture"), ("optimizer", "optimizer_name")):
        given = getattr(args, flag)
        if given is not None and given != tmeta[key]:
            raise CheckpointError(f"{args.resume}: was trained with --{flag} {tmeta[key]!r}, "
                                  f"cannot resume with --{flag} {given!r}")
    for flag, key in (("batch_size", "batch_size"), ("seed", "seed")):
        given = getattr(args, flag)
        if given is not None and given != tmeta[key]:
            raise CheckpointError(f"{args.resume}: was trained with --{flag.replace('_', '-')} "
                                  f"{tmeta[key]}, cannot resume with {given}")
    return resume, tmeta


def _new_optimizer(args: Any, opt_name: str, net: Sequential, recipe: dict[str, Any]) -> Optimizer:
    default_lr = recipe["adam_lr"] if opt_name in ("adam", "adamw") else DEFAULT_LR[opt_name]
    wd = DEFAULT_WEIGHT_DECAY.get(opt_name, 0.0) if args.weight_decay is None else args.weight_decay
    if args.weight_decay is None and opt_name == recipe.get("optimizer"):
        wd = recipe.get("weight_decay", wd)  # the recipe's own optimizer: its decay too
    kwargs: dict[str, Any] = {"lr": args.lr or default_lr, "weight_decay": wd}
    if opt_name == "sgd":
        kwargs.update(momentum=0.9 if args.momentum is None else args.momentum, nesterov=args.nesterov)
    elif opt_name == "rmsprop":
        kwargs.update(momentum=args.momentum or 0.0)
    elif args.momentum is not None:
        raise UsageError(f"--momentum does not apply to {opt_name}")
    return make_optimizer(opt_name, net, **kwargs)


def configure(args: Any, on_lead: Callable[[Callable[[], Any]], Any], progress: bool = False) -> RunConfig:
    """The run that the parsed ``args`` ask for (``on_lead(load)``: load a checkpoint once, on
    the rank that reads files, and hand it to every rank; ``progress``: report decoding an image
    folder)."""
    resume, tmeta = _resume_meta(args, on_lead)
    seed = tmeta.get("seed", 0 if args.seed is None else args.seed)
    arch = tmeta.get("architecture", args.arch or DEFAULT_ARCH)
    opt_name = tmeta.get("optimizer_name", args.optimizer)
    test_size = tmeta.get("test_size", args.test_size)
    val_size = tmeta.get("val_size", args.val_size)

    ds = load_data(args, seed, test_size, resume.net.input_shape if resume else None, progress)
    opt_name = opt_name or recipe_for(ds).get("optimizer", "adam")
    fingerprint = data_fingerprint(ds.x_train, ds.y_train)
    if resume and tmeta.get("data_fingerprint", fingerprint) != fingerprint:
        raise CheckpointError(f"{args.resume}: was trained on other data than {ds.name} "
                              f"({len(ds.y_train)} training images of shape {ds.input_shape}); "
                              f"resume with the same --data, --test-size and seed")
    recipe = recipe_for(ds)
    epochs = args.epochs or tmeta.get("epochs") or recipe["epochs"]
    batch_size = tmeta.get("batch_size") or args.batch_size or recipe["batch_size"]
    x_tr, y_tr, x_val, y_val = ds.x_train, ds.y_train, None, None
    regress = ds.task == "regress"
    if val_size > 0:
        split = shuffled_split if regress else stratified_split
        x_tr, x_val, y_tr, y_val = split(x_tr, y_tr, val_size, seed)
    target_scale = (0.0, 1.0)
    if regress:  # targets standardised with the training part's mean and std; the reports undo it
        mean, std = float(np.mean(y_tr, dtype=np.float64)), float(np.std(y_tr, dtype=np.float64))
        target_scale = (mean, std if std > 0 else 1.0)
        y_tr = _standardised(y_tr, target_scale)
        y_val = None if y_val is None else _standardised(y_val, target_scale)

    if resume:
        net = resume.net.to(args.device)
        check_shapes(net, ds, args.resume)
        opt_info = resume.optimizer or {}
        try:  # hand-edited names, hyperparameters, step counts and arrays: one line, not a traceback
            hp = opt_info.get("hyperparameters", {})
            opt = make_optimizer(str(opt_info.get("name")), net, **hp)
            missing = sorted(set(opt.hyperparameters()) - set(hp))
            if missing:  # a default in their place would be another run than the one saved
                raise ValueError(f"the saved hyperparameters lack {', '.join(missing)}")
            opt.load_state_dict({"step": opt_info.get("step"), **resume.optimizer_state})
        except (ValueError, TypeError) as e:
            raise CheckpointError(f"{args.resume}: the optimizer: {e}") from None
    else:
        # colour images and series: each channel standardised with the training part's statistics, inside
        # the network (so prediction, evaluation and ONNX apply them too)
        norm = Normalize.fit(x_tr) if ds.input_shape[0] == 3 or ds.is_series else None
        net = build_network(arch, ds.input_shape, 1 if regress else ds.n_classes, seed=seed, normalize=norm,
                            regression=regress).to(args.device)
        net.classes = ds.classes
        net.target_scale = target_scale if regress else None
        opt = _new_optimizer(args, opt_name, net, recipe)
    _check_batch(net, ds.input_shape, batch_size, len(x_tr))
    schedule = tmeta.get("lr_schedule") or args.lr_schedule or recipe["lr_schedule"]
    moves = Augment.parse(tmeta.get("augment", args.augment or recipe.get("augment")))
    augment = str(moves) if moves is not None else "none"
    if moves is not None:
        try:
            moves.check(ds.input_shape)
        except ValueError as e:
            raise UsageError(f"--augment: {e}") from None
    smoothing = tmeta.get("label_smoothing", recipe.get("label_smoothing", 0.0)
                          if args.label_smoothing is None else args.label_smoothing)
    if regress:
        if args.label_smoothing:
            raise UsageError("--label-smoothing is for classification; the data holds regression targets")
        smoothing = 0.0
    patience = tmeta.get("early_stopping", args.early_stopping)
    if patience and val_size <= 0:
        raise UsageError("--early-stopping needs validation data: give --val-size (e.g. 0.1)")
    return RunConfig(ds, arch, opt_name, seed, test_size, val_size, epochs, batch_size, schedule,
                     fingerprint, x_tr, y_tr, x_val, y_val, net, opt,
                     tmeta.get("trainer") if resume else None, augment, smoothing, patience, target_scale)
