"""Published training recipes, every hyperparameter as published: ``airbench94`` (Keller Jordan,
"94 % on CIFAR-10 in 3.29 seconds on a single GPU", arXiv 2404.00498), on numbacnn's layers,
optimizers and trainer.

airbench94: a 2x2 patch-whitening convolution (weights from the training images' patch covariance,
frozen; its bias trained for 3 epochs), three blocks of conv 3x3 -> max pool 2 -> BatchNorm -> GELU ->
conv 3x3 -> BatchNorm -> GELU (widths 64, 256, 256; bias-free convolutions with dirac
initialisation; BatchNorm's scale fixed at 1, momentum 0.6 in airbench's convention, eps 1e-12),
max pool 3, a bias-free linear layer and a 1/9 output scale; Nesterov SGD (momentum 0.85, lr 11.5
and weight decay 0.0153 per 1024 examples, BatchNorm biases at 64x the learning rate), label
smoothing 0.2, batch 1024 with the last partial batch dropped, 9.9 epochs on airbench's triangular
schedule, Lookahead every 5 steps from the 4th epoch with its cubic decay ramp, reflect-padded
translation by up to 2 pixels and alternating flips, and mirror + translate test-time augmentation.
The Lookahead schedule is the one airbench94 was released with; the repository later starts it at
the 5th step and takes the slow weights back only at the end (its author expects +0.01 %).

airbench sums the loss over the batch; numbacnn's trainer takes its mean, so the learning rate is
multiplied by the batch size and the weight decay divided by it: the same updates.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from .arch import PRESETS, build_layers
from .layers import Dense, Normalize, Scale
from .network import Sequential
from .optimizers import SGD
from .training import Callback, Trainer, evaluate

AIRBENCH94_SPEC = PRESETS["airbench94"]  # its final dense layer is the recipe's own
# airbench's fixed CIFAR-10 channel statistics
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)

AIRBENCH94: dict[str, Any] = {
    "epochs": 9.9, "batch_size": 1024, "lr": 11.5, "momentum": 0.85, "weight_decay": 0.0153,
    "bias_scaler": 64.0, "label_smoothing": 0.2, "whiten_bias_epochs": 3, "whiten_images": 5000,
    "whiten_eps": 5e-4, "lookahead_every": 5, "lookahead_epochs": 3, "augment": "translate:2,flip:alternate",
    "tta": "mirror-translate",
}
# MLPerf Tiny's ResNet-8 on CIFAR-10-sized colour images, with the ordinary trainer: train.py --recipe
# resnet8 sets these flags (--epochs and --tta only where not given). Nesterov SGD on a one-cycle
# schedule with L2 weight decay, pad-and-crop and flips, label smoothing, mirrored test views.
RESNET8: dict[str, Any] = {
    "arch": "resnet8", "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True,
    "weight_decay": 5e-4, "batch_size": 128, "lr_schedule": "onecycle", "augment": "crop:4,flip",
    "label_smoothing": 0.1, "epochs": 25, "tta": "mirror",
}
RECIPES = {"airbench94": AIRBENCH94, "resnet8": RESNET8}
TRAINER_RECIPES = ("resnet8",)  # recipes of train.py's own flags (airbench94 has a loop of its own)


def airbench94_network(x_train: np.ndarray, n_classes: int = 10, seed: int = 0) -> Sequential:
    """The recipe's network for images (N, 3, 32, 32) in [0, 1]: initialised (dirac filters,
    whitening from the first images of ``x_train``) and frozen where airbench freezes."""
    if x_train.ndim != 4 or x_train.shape[1:] != (3, 32, 32):
        raise ValueError(f"airbench94 needs colour 32x32 images (N, 3, 32, 32), got "
                         f"{tuple(x_train.shape[1:])}")
    layers = build_layers(AIRBENCH94_SPEC, (3, 32, 32), n_classes)
    width = layers[-1].param_shapes()["weight"][1]  # the final dense layer's inputs
    layers = layers[:-1] + [Dense(width, n_classes, bias=False), Scale(1 / 9)]
    normalize = Normalize(CIFAR_MEAN, CIFAR_STD)
    net = Sequential([normalize, *layers], seed=seed)
    net.architecture, net.input_shape = "airbench94", (3, 32, 32)
    whiten = net.layers[1]
    for layer in net.layers[2:]:
        if layer.token == "conv":
            layer.init_dirac()  # type: ignore[attr-defined]
        elif layer.token == "bn":
            layer.freeze("weight")
    images = normalize.forward(np.ascontiguousarray(x_train[:AIRBENCH94["whiten_images"]], np.float32))
    whiten.init_whitening(images, eps=AIRBENCH94["whiten_eps"])  # type: ignore[attr-defined]
    whiten.bias[...] = 0.0  # type: ignore[attr-defined]
    whiten.freeze("weight")
    return net


def airbench94_optimizer(net: Sequential) -> SGD:
    """airbench's Nesterov SGD for the mean loss over a batch of 1024: its learning rate (for the
    summed loss) times the batch, its weight decay over the batch; BatchNorm biases in a group at
    64x the learning rate with the decay scaled to match; Lookahead every 5 steps, its weight set
    by the schedule (``_Airbench94Schedule``)."""
    h, batch = AIRBENCH94, AIRBENCH94["batch_size"]
    kilostep = 1024 * (1 + 1 / (1 - h["momentum"]))
    lr_sum = h["lr"] / kilostep  # airbench's learning rate for the summed loss
    wd = h["weight_decay"] * batch / kilostep
    lr_bias = lr_sum * h["bias_scaler"]
    biases = [k for k, _ in net.param_slices()
              if k.endswith(".bias") and net.layers[int(k.split(".")[0])].token == "bn"]
    bias_group = {"params": biases, "lr_scale": h["bias_scaler"], "weight_decay": wd / lr_bias / batch}
    return SGD(net, lr=lr_sum * batch, momentum=h["momentum"], nesterov=True,
               weight_decay=wd / lr_sum / batch, groups=[bias_group],
               lookahead={"k": h["lookahead_every"], "alpha": 1.0, "buffers": True})


class _Airbench94Schedule(Callback):
    """Lookahead as airbench runs it, and the whitening bias frozen after its epochs. Before epoch
    ``lookahead_epochs`` the network trains alone (a synchronisation of weight 1 changes nothing);
    the first synchronisation from then on starts the slow weights (again weight 1), the later ones
    weigh the fast weights by 1 - 0.95^5 (step / total)^3; from then on the network also takes the
    slow weights at the end of every epoch, and at the end of training."""

    def __init__(self, opt: SGD, total_steps: int, steps_per_epoch: int) -> None:
        self.opt, self.total, self.per_epoch = opt, total_steps, steps_per_epoch
        self.started = False

    def _alpha(self, step: int) -> float:
        """The weight of the synchronisation after global step ``step`` (1-based), if it has one."""
        assert self.opt.lookahead is not None
        if not self.started:
            epoch = (step - 1) // self.per_epoch
            if step % self.opt.lookahead["k"] == 0 and epoch >= AIRBENCH94["lookahead_epochs"]:
                self.started = True  # this synchronisation takes the first slow weights
            return 1.0
        return 1.0 - 0.95**5 * (step / self.total) ** 3

    def on_train_begin(self, trainer: Trainer) -> None:
        assert self.opt.lookahead is not None
        self.opt.lookahead["alpha"] = self._alpha(trainer.optimizer.step_count + 1)

    def on_step_end(self, trainer: Trainer, step: int) -> None:
        assert self.opt.lookahead is not None
        if step >= self.total:  # the end: the network takes the slow weights
            self.opt.sync(0.0)
        else:
            self.opt.lookahead["alpha"] = self._alpha(step + 1)

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        if self.started:
            self.opt.sync(0.0)
        if trainer.epoch >= AIRBENCH94["whiten_bias_epochs"]:
            trainer.net.layers[1].freeze("bias")


def airbench94_trainer(net: Sequential, n: int, seed: int = 0, epochs: float | None = None,
                       progress: bool = True, log: Callable[[str], None] | None = print
                       ) -> tuple[Trainer, Callback, int]:
    """The recipe's trainer of ``net`` (``airbench94_network``, on its device) for ``n`` training
    images, the callback that runs its Lookahead and whitening-bias schedule, and the epochs to
    give ``Trainer.fit`` (whole epochs; ``max_steps`` ends a fractional last one). ``epochs``:
    fewer than the published 9.9 for a shorter run."""
    h = AIRBENCH94
    epochs = h["epochs"] if epochs is None else float(epochs)
    if not epochs > 0:
        raise ValueError(f"epochs must be positive, got {epochs!r}")
    batch = h["batch_size"]
    opt = airbench94_optimizer(net)
    steps_per_epoch = n // batch if n >= batch else 1
    total = math.ceil(steps_per_epoch * epochs)
    trainer = Trainer(net, opt, batch_size=min(batch, n), seed=seed, progress=progress, log=log,
                      lr_schedule="triangle", augment=h["augment"], label_smoothing=h["label_smoothing"],
                      drop_last=True, max_steps=total)
    return trainer, _Airbench94Schedule(opt, total, steps_per_epoch), math.ceil(epochs)


def train_airbench94(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray | None = None,
                     y_test: np.ndarray | None = None, seed: int = 0, epochs: float | None = None,
                     log: Callable[[str], None] | None = print, progress: bool = True,
                     device: str = "cpu", precision: str = "float32") -> dict[str, Any]:
    """Train airbench94 on (x_train, y_train) (images (N, 3, 32, 32) in [0, 1], labels 0-9) and
    evaluate it on (x_test, y_test) with and without its test-time augmentation. ``epochs``: fewer
    than the published 9.9 for a shorter run; ``device``: "cpu" or "cuda" (the network is
    initialised on the CPU, then moved); ``precision``: "float32" or "bf16" (numbacnn/precision.py).
    Returns the network, the history, the accuracies and the wall time."""
    h = AIRBENCH94
    n_classes = int(np.max(y_train)) + 1
    t0 = time.perf_counter()
    net = airbench94_network(x_train, max(n_classes, 2), seed).to(device).set_precision(precision)
    trainer, schedule, rounds = airbench94_trainer(net, len(x_train), seed, epochs, progress, log)
    # the held-out images are evaluated once, at the end (as airbench does): not after every epoch
    history = trainer.fit(x_train, y_train, rounds, callbacks=[schedule])
    train_seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"net": net, "history": history, "steps": trainer.max_steps,
                           "seconds": train_seconds}
    if x_test is not None and y_test is not None and len(y_test):
        out["test_accuracy"] = evaluate(net, x_test, y_test)[1]
        out["tta_test_accuracy"] = evaluate(net, x_test, y_test, tta=h["tta"])[1]
    out["seconds_with_tta"] = time.perf_counter() - t0
    return out
