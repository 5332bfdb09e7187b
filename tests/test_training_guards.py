"""Guards that only a full range or both directions can give: every augmentation offset occurs,
flips alone train, early stopping follows its monitor's direction, and the checkpoint saved after
early stopping holds the best epoch's weights."""
import re

import numpy as np
import pytest
from conftest import tiny_npz

import numbacnn as nc
from numbacnn.augment import Augment
from numbacnn.checkpoint import load_checkpoint
from numbacnn.cli import main
from numbacnn.training import EarlyStopping


@pytest.mark.parametrize("s", [1, 2, 4])
def test_every_shift_in_the_range_occurs_and_nothing_outside_it(s):
    aug = Augment.parse(f"shift:{s}")
    shifts = np.concatenate([aug.draw(seed=0, epoch=0, step=k, n=64)[0] for k in range(20)])
    for axis in (0, 1):
        assert sorted(set(shifts[:, axis].tolist())) == list(range(-s, s + 1)), (s, axis)
    flips = Augment.parse("flip").draw(seed=0, epoch=0, step=0, n=256)[1]
    assert 0.35 < flips.mean() < 0.65  # both sides, about half each


def test_flip_alone_augments_the_training():
    x = np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32)
    y = np.arange(64) % 3
    finals = {}
    for spec in (None, "flip"):
        net = nc.build_network("conv(4,3),relu,dense(8),relu", (1, 8, 8), 3, seed=0)
        nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=16, seed=0, augment=spec).fit(x, y, 1)
        finals[spec] = net.params.copy()
    assert not np.array_equal(finals[None], finals["flip"])  # the flips changed the batches


class _Stub:
    class net:
        @staticmethod
        def state_dict():
            return {}
    stop_training = False


@pytest.mark.parametrize("monitor,values,best", [("val_accuracy", [0.5, 0.7, 0.6, 0.65, 0.62], 2),
                                                 ("val_loss", [0.9, 0.4, 0.6, 0.5, 0.7], 2)])
def test_early_stopping_follows_the_direction_of_its_monitor(monitor, values, best):
    stop = EarlyStopping(patience=10, monitor=monitor)
    trainer = _Stub()
    for epoch, v in enumerate(values, 1):
        stop.on_epoch_end(trainer, {"epoch": epoch, monitor: v})
    assert stop.best_epoch == best and stop.best == values[best - 1]


def test_the_checkpoint_saved_after_early_stopping_holds_the_best_epochs_weights(tmp_path, capsys):
    data = tiny_npz(tmp_path / "t.npz", 90)
    common = ["--data", data, "--arch", "conv(4,3,padding=same),relu,dense(32),relu", "--optimizer", "sgd",
              "--lr", "0.5", "--lr-schedule", "constant", "--val-size", "0.3", "--seed", "1"]
    ck = str(tmp_path / "es.npz")
    assert main(common + ["--epochs", "12", "--early-stopping", "2", "--save", ck]) == 0
    out = capsys.readouterr().out
    kept = int(re.search(r"kept the weights of epoch (\d+)", out).group(1))
    done = int(re.search(r"after (\d+) epochs?", out).group(1))
    assert kept < done, out  # the setup must stop after a worse epoch for the test to mean anything
    ref = str(tmp_path / "ref.npz")
    assert main(common + ["--epochs", str(kept), "--save", ref, "--quiet"]) == 0
    saved, best = load_checkpoint(ck).net.state_dict(), load_checkpoint(ref).net.state_dict()
    assert saved.keys() == best.keys()
    for k in saved:
        np.testing.assert_array_equal(saved[k], best[k], err_msg=k)
