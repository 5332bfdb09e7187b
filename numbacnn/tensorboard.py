"""TensorBoard logging through tensorboardX (the [tensorboard] extra; needs neither TensorFlow nor
PyTorch): a ``Trainer`` callback writing each epoch's scalars and every parameter's histogram."""
from __future__ import annotations

from typing import Any

from ._text import install_hint
from .training import Callback, Trainer

EXTRA = install_hint("tensorboard")
SCALARS = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "test_loss", "test_accuracy",
           "images_per_second")


def require_tensorboardx() -> None:
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise ImportError(f"TensorBoard logging needs tensorboardX: {EXTRA}") from None


class TensorBoardLogger(Callback):
    """After every epoch: the epoch's statistics and the learning rate as scalars ("loss/train",
    "accuracy/test", ..., "lr"), and a histogram of every parameter ("0.weight", ...), at step =
    the epoch number. View with ``tensorboard --logdir DIR``."""

    def __init__(self, logdir: str) -> None:
        require_tensorboardx()
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir)

    def on_epoch_end(self, trainer: Trainer, stats: dict[str, Any]) -> None:
        step = trainer.epoch
        for key in SCALARS:
            if key in stats:
                split, metric = key.split("_", 1)
                tag = f"{metric}/{split}" if split in ("train", "val", "test") else key
                self.writer.add_scalar(tag, float(stats[key]), step)
        self.writer.add_scalar("lr", float(trainer.optimizer.lr), step)
        for name, value in trainer.net.state_dict().items():
            self.writer.add_histogram(name, value, step)
        self.writer.flush()

    def on_train_end(self, trainer: Trainer) -> None:
        self.writer.close()
