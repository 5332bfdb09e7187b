"""The airbench94 recipe: its schedule, steps, network, optimizer and Lookahead ramp against the
published formulas (written out again here), and a short run through the command line."""
import json
import math

import numpy as np
import pytest
from conftest import f32

import numbacnn as nc
from numbacnn import recipes
from numbacnn.cli import main
from numbacnn.training import Callback, triangle


def _published_lr(step, total):
    """airbench94's get_lr, as published."""
    warmup_steps = int(total * 0.23)
    if step < warmup_steps:
        frac = step / warmup_steps
        return 0.2 * (1 - frac) + 1.0 * frac
    frac = (step - warmup_steps) / (total - warmup_steps)
    return 1.0 * (1 - frac) + 0.07 * frac


def test_triangle_is_airbench_s_schedule():
    for total in (426, 476, 7):
        assert [triangle(s, total) for s in range(total + 1)] == pytest.approx(
            [_published_lr(s, total) for s in range(total + 1)], rel=1e-12)


class _Record(Callback):
    def __init__(self):
        self.steps, self.lrs = [], []

    def on_step_end(self, trainer, step):
        self.steps.append(step)
        self.lrs.append(trainer.optimizer.lr)


def test_drop_last_and_max_steps_give_a_fractional_number_of_epochs(rng):
    x = f32(rng.random((50, 1, 6, 6)))
    y = np.arange(50) % 3
    net = nc.build_network("conv(4,3),relu,dense(6)", (1, 6, 6), 3, seed=0)
    trainer = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=16, progress=False, drop_last=True,
                         max_steps=7, lr_schedule="triangle")
    record = _Record()
    history = trainer.fit(x, y, 3, callbacks=[record])
    assert record.steps == [1, 2, 3, 4, 5, 6, 7]  # 3 full batches an epoch (48 examples), then 1
    assert record.lrs == pytest.approx([0.1 * _published_lr(s, 7) for s in range(7)])
    assert len(history) == 3 and trainer.epoch == 3
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        nc.Trainer(net, nc.SGD(net, lr=0.1), max_steps=0)


def _cifar_like(n, rng):
    y = np.arange(n) % 10
    x = f32(rng.random((n, 3, 32, 32)) * 0.5)
    for i, c in enumerate(y):
        x[i, c % 3, (c // 3) * 8:(c // 3) * 8 + 8, :] += 0.5
    return x, y


def test_the_network_and_optimizer_are_the_published_ones(rng):
    x, _ = _cifar_like(40, rng)
    net = recipes.airbench94_network(x, seed=0)
    kinds = [type(layer).__name__ for layer in net.layers]
    assert kinds[:3] == ["Normalize", "Conv2D", "GELU"]
    assert kinds[-4:] == ["MaxPool2D", "Flatten", "Dense", "Scale"]
    convs = [layer for layer in net.layers if layer.token == "conv"]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.use_bias) for c in convs] == [
        (3, 24, (2, 2), True), (24, 64, (3, 3), False), (64, 64, (3, 3), False), (64, 256, (3, 3), False),
        (256, 256, (3, 3), False), (256, 256, (3, 3), False), (256, 256, (3, 3), False)]
    bns = [layer for layer in net.layers if layer.token == "bn"]
    assert {(b.eps, b.momentum) for b in bns} == {(1e-12, 0.4)} and all(b.frozen == {"weight"} for b in bns)
    assert net.layers[-1].factor == pytest.approx(1 / 9) and not net.layers[-2].use_bias
    assert net.layers[1].frozen == {"weight"}
    np.testing.assert_array_equal(net.layers[1].bias, 0)
    w = convs[2].weight  # dirac filters: channel i passes through filter i
    assert all(w[i, i, 1, 1] == 1 and np.count_nonzero(w[i]) == 1 for i in range(64))
    opt = recipes.airbench94_optimizer(net)
    # per 1024 examples: lr 11.5 and weight decay 0.0153 over (1 + 1 / (1 - 0.85)); a mean loss
    assert opt.lr == pytest.approx(11.5 / (1 + 1 / 0.15)) and opt.momentum == 0.85 and opt.nesterov
    assert opt.weight_decay == pytest.approx(0.0153 / 11.5)
    (group,) = opt.groups
    assert group["lr_scale"] == 64.0 and group["weight_decay"] == pytest.approx(0.0153 / 11.5 / 64)
    bn_biases = [f"{i}.bias" for i, layer in enumerate(net.layers) if layer.token == "bn"]
    assert sorted(group["params"]) == sorted(bn_biases)
    assert opt.lookahead == {"k": 5, "alpha": 1.0, "buffers": True}


def _airbench_lookahead(deltas, per_epoch, total):
    """airbench94's training loop around its LookaheadState, written out again: ``deltas[s]`` is
    what step s + 1 adds to the weights; returns the weights after each step and epoch end."""
    net, ema, out, step = np.zeros_like(deltas[0]), None, [], 0
    for epoch in range(math.ceil(total / per_epoch)):
        for _ in range(per_epoch):
            net = net + deltas[step]
            step += 1
            if epoch >= 3 and step % 5 == 0:
                if ema is None:
                    ema = net.copy()
                else:
                    rho = 0.95**5 * (step / total) ** 3
                    ema = ema + (1 - rho) * (net - ema)  # lerp_(net, 1 - rho)
                    net = ema.copy()
            out.append(net)
            if step >= total:
                break
        if ema is not None:
            net = ema.copy()  # update(decay=1.0) after every epoch
            out.append(net)
    return out


def test_lookahead_and_the_bias_freeze_follow_airbench_s_loop(rng):
    """The schedule's synchronisations (the start epoch, the ramp, the slow weights taken at every
    epoch's end and at the last step) give the weights that airbench's loop gives."""
    x, _ = _cifar_like(20, rng)
    net = recipes.airbench94_network(x)
    opt = recipes.airbench94_optimizer(net)
    per_epoch, total = 7, 30
    schedule = recipes._Airbench94Schedule(opt, total, per_epoch)
    deltas = [rng.standard_normal(net.params.size).astype(np.float64) * 0.1 for _ in range(total)]
    start = np.array(net.params, np.float64)
    want = _airbench_lookahead(deltas, per_epoch, total)

    class T:
        epoch, optimizer = 0, opt
    T.net = net
    got, step = [], 0
    schedule.on_train_begin(T)
    for epoch in range(math.ceil(total / per_epoch)):
        for _ in range(per_epoch):
            net.params[:] += deltas[step].astype(np.float32)  # an optimizer step's update, then
            step += 1                                           # its synchronisation (SGD.step)
            opt.step_count += 1
            if opt.step_count % opt.lookahead["k"] == 0:
                opt.sync(opt.lookahead["alpha"])
            schedule.on_step_end(T, step)
            got.append(np.array(net.params, np.float64) - start)
            if step >= total:
                break
        T.epoch = epoch + 1
        schedule.on_epoch_end(T, {})
        assert ("bias" in net.layers[1].frozen) == (T.epoch >= 3)  # trained for 3 epochs
        if epoch >= 3:
            got.append(np.array(net.params, np.float64) - start)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"entry {i}")


def test_a_short_run_from_the_command_line_and_its_bad_uses(tmp_path, capsys, rng):
    x, y = _cifar_like(60, rng)
    path = tmp_path / "c.npz"
    np.savez(path, x_train=(x[:40].transpose(0, 2, 3, 1) * 255).astype(np.uint8), y_train=y[:40],
             x_test=(x[40:].transpose(0, 2, 3, 1) * 255).astype(np.uint8), y_test=y[40:])
    metrics = tmp_path / "m.json"
    assert main(["--data", str(path), "--recipe", "airbench94", "--epochs", "1", "--quiet",
                 "--save", str(tmp_path / "r.npz"), "--metrics-out", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert "with test-time augmentation mirror-translate, after 1 steps" in out
    m = json.loads(metrics.read_text())
    assert m["recipe"] == "airbench94" and m["steps"] == 1 and 0 <= m["tta_test_accuracy"] <= 1
    assert nc.load(str(tmp_path / "r.npz")).layers[-1].factor == pytest.approx(1 / 9)
    assert main(["--data", str(path), "--recipe", "airbench94", "--arch", "mnistcnn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["train.py: error: --recipe airbench94 sets --arch itself: leave it out"]
    assert main(["--data", str(path), "--recipe", "airbench94", "--momentum", "0", "--lr", "0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["train.py: error: --recipe airbench94 sets --lr, --momentum itself: leave them out"]
    assert main(["--recipe", "airbench94"]) == 2  # the digits: 8x8 grey
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs colour 32x32 images" in err[0]
    assert main(["--recipe", "airbench95"]) == 2
    assert "invalid choice: 'airbench95'" in capsys.readouterr().err
    assert math.isfinite(m["wall_seconds"])


def test_the_resnet8_recipe_sets_its_flags_and_trains_as_they_would(tmp_path, capsys, rng):
    """--recipe resnet8 is train.py's own flags (recipes.RESNET8): the same metrics, bit for bit, as
    those flags given by hand; --epochs and --tta may be given, its other flags clash."""
    x, y = _cifar_like(30, rng)
    path = tmp_path / "c.npz"
    np.savez(path, x_train=(x[:20].transpose(0, 2, 3, 1) * 255).astype(np.uint8), y_train=y[:20],
             x_test=(x[20:].transpose(0, 2, 3, 1) * 255).astype(np.uint8), y_test=y[20:])
    base = ["--data", str(path), "--quiet", "--epochs", "2"]
    by_hand = ["--arch", "resnet8", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--nesterov",
               "--weight-decay", "5e-4", "--batch-size", "128", "--lr-schedule", "onecycle",
               "--augment", "crop:4,flip", "--label-smoothing", "0.1", "--tta", "mirror"]
    runs = []
    for argv in (["--recipe", "resnet8"], by_hand):
        out = tmp_path / f"m{len(runs)}.json"
        assert main(base + argv + ["--metrics-out", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
    for m in runs:
        m.pop("wall_seconds")
        for e in m["epochs"]:
            e.pop("seconds"), e.pop("images_per_second")
    assert runs[0] == runs[1]
    assert runs[0]["architecture"] == "resnet8" and runs[0]["tta"] == "mirror" and len(runs[0]["epochs"]) == 2
    assert runs[0]["hyperparameters"]["nesterov"] and runs[0]["batch_size"] == 128
    capsys.readouterr()
    assert main(["--data", str(path), "--recipe", "resnet8", "--lr", "0.2", "--nesterov"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["train.py: error: --recipe resnet8 sets --lr, --nesterov itself: leave them out"]
    assert recipes.RECIPES["resnet8"]["epochs"] == 25 and "resnet8" in recipes.TRAINER_RECIPES


def test_the_estimator_takes_the_resnet8_recipe_as_its_parameters_by_hand(rng):
    """CNNClassifier(recipe="resnet8") trains and predicts as the same hyperparameters given by
    hand (the recipe's own list, written out here), bit for bit; max_epochs and tta stay the
    user's where given; a hyperparameter the recipe sets, given another value, is one ValueError;
    a recipe the estimator does not know is scikit-learn's parameter error."""
    from sklearn.utils._param_validation import InvalidParameterError

    from numbacnn import CNNClassifier

    x = rng.random((40, 32, 32, 3), dtype=np.float32)  # channels last, as images load
    y = np.arange(40) % 3
    by_hand = dict(architecture="resnet8", optimizer="sgd", learning_rate=0.1, momentum=0.9, nesterov=True,
                   weight_decay=5e-4, batch_size=128, lr_schedule="onecycle", augment="crop:4,flip",
                   label_smoothing=0.1, tta="mirror")
    recipe = CNNClassifier(recipe="resnet8", max_epochs=1, random_state=0).fit(x, y)
    manual = CNNClassifier(**by_hand, max_epochs=1, random_state=0).fit(x, y)
    np.testing.assert_array_equal(recipe.predict_proba(x), manual.predict_proba(x))
    opt = recipe._optimizer
    assert (type(opt).__name__, opt.nesterov, opt.weight_decay) == ("SGD", True, 5e-4)  # (momentum: cycled)
    assert CNNClassifier(recipe="resnet8")._settings()["max_epochs"] == 25
    assert CNNClassifier(recipe="resnet8", tta="mirror-translate")._settings()["tta"] == "mirror-translate"
    with pytest.raises(ValueError, match=r"recipe='resnet8' sets learning_rate, batch_size itself"):
        CNNClassifier(recipe="resnet8", learning_rate=0.5, batch_size=8).fit(x, y)
    with pytest.raises(InvalidParameterError, match="recipe"):
        CNNClassifier(recipe="resnet9").fit(x, y)


def test_the_estimator_trains_airbench94_as_the_recipe_function_does(rng):
    """CNNClassifier(recipe="airbench94") trains what recipes.train_airbench94 trains (its network,
    optimizer, schedule; the seed the estimator draws): the same weights bit for bit, from colour
    images in [0, 1] given channels last; 0-255 images are divided by 255; what does not apply to
    a schedule over all the epochs is refused in one line."""
    from numbacnn import CNNClassifier

    x = rng.random((32, 3, 32, 32), dtype=np.float32)
    y = np.arange(32) % 10
    # 6 steps of one batch: the 5th synchronises Lookahead, the end takes its slow weights
    est = CNNClassifier(recipe="airbench94", max_epochs=6, random_state=0).fit(x.transpose(0, 2, 3, 1), y)
    draws = np.random.default_rng(0)
    draws.integers(2**31)
    seed = int(draws.integers(2**31))  # the second draw: the network's and the trainer's seed
    out = recipes.train_airbench94(x, y, seed=seed, epochs=6, log=None, progress=False)
    want = out["net"].state_dict()
    got = est.net_.state_dict()
    assert out["steps"] == 6 and list(got) == list(want)
    initial = recipes.airbench94_network(x, 10, seed).state_dict()
    assert not np.array_equal(want["3.weight"], initial["3.weight"])  # (the steps changed the weights)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert est.n_iter_ == 6 and len(est.loss_curve_) == 6
    assert est._settings()["tta"] == "mirror-translate"
    assert est.predict_proba(x.transpose(0, 2, 3, 1)).shape == (32, 10)
    x255 = np.floor(x * 255)
    assert CNNClassifier(recipe="airbench94", max_epochs=1, random_state=0).fit(x255, y).x_scale_ == 255.0
    with pytest.raises(ValueError, match="fit only"):
        CNNClassifier(recipe="airbench94").partial_fit(x, y, classes=np.arange(10))
    with pytest.raises(ValueError, match="early_stopping and warm_start do not apply"):
        CNNClassifier(recipe="airbench94", early_stopping=True).fit(x, y)
    with pytest.raises(ValueError, match="needs colour 32x32 images"):
        CNNClassifier(recipe="airbench94").fit(x[:, :, :16, :16], y)
