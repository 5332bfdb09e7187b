"""Modern small-CNN pieces against the float64 oracle (tests/reference.py) and finite differences:
BatchNorm2D/1D, GlobalAvgPool2D, Residual, label smoothing, augmentation, AdamW, the one-cycle
schedule and early stopping; their errors; their bitwise independence of the thread count."""
import numpy as np
import pytest
import reference as ref
from conftest import f32
from test_gradients import numeric_grad

import numbacnn as nc
from numbacnn.augment import augmented
from numbacnn.layers.base import Fusion
from numbacnn.training import onecycle


def _bn_net(seed=0):
    """conv, BatchNorm2D (+ fused ReLU), an identity block (+ fused ReLU) and a projection residual
    block, global pooling, dense, BatchNorm1D: every new layer and path."""
    return nc.Sequential([
        nc.Conv2D(2, 3, 3, padding=1), nc.BatchNorm2D(3), nc.ReLU(),
        nc.Residual([nc.Conv2D(3, 3, 3, padding=1), nc.BatchNorm2D(3), nc.ReLU(),
                     nc.Conv2D(3, 3, 3, padding=1)]), nc.ReLU(),  # applied by the block's add
        nc.Residual([nc.Conv2D(3, 4, 3, stride=2, padding=1), nc.Tanh()],
                    shortcut=[nc.Conv2D(3, 4, 1, stride=2), nc.BatchNorm2D(4)]),
        nc.GlobalAvgPool2D(), nc.Dense(4, 5), nc.BatchNorm1D(5), nc.Tanh(), nc.Dense(5, 3)], seed=seed)


BN_SPEC = [("conv", 1, 1), ("bn", 1e-5), ("relu",),
           ("res", [("conv", 1, 1), ("bn", 1e-5), ("relu",), ("conv", 1, 1)], None), ("relu",),
           ("res", [("conv", 2, 1), ("tanh",)], [("conv", 2, 0), ("bn", 1e-5)]),
           ("gap",), ("dense",), ("bn", 1e-5), ("tanh",), ("dense",)]


def _perturbed(net, rng):
    """Random weights (BatchNorm scales away from 1, biases away from 0) so every term matters."""
    def draw(k, v):
        scale_one = k.endswith(".weight") and v.ndim == 1  # BatchNorm scales near 1
        return f32(rng.standard_normal(v.shape) * 0.5 + (1.0 if scale_one else 0.0))
    state = {k: draw(k, v) if v.dtype == np.float32 else v for k, v in net.state_dict().items()}
    state = {k: (np.abs(v) + 0.5 if "running_var" in k else v) for k, v in state.items()}
    net.load_state_dict(state)


@pytest.mark.slow
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_bn_residual_gap_network_gradients_match_finite_differences(rng, smoothing):
    net = _bn_net()
    assert net.layers[1].fusion.relu and net.layers[2].fusion.absorbed  # the block's add applies the ReLU
    _perturbed(net, rng)
    x = f32(rng.standard_normal((4, 2, 7, 7)))
    y = rng.integers(0, 3, 4)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y, label_smoothing=smoothing)
    dx = net.backward(d)
    params = [v.astype(np.float64) for k, v in net.state_dict().items() if k in net.grad_dict()]
    x64 = x.astype(np.float64)

    def f():
        return ref.network_loss(BN_SPEC, params, x64, y, smoothing)
    assert loss == pytest.approx(f(), rel=1e-5)
    for (name, g), p in zip(net.grad_dict().items(), params):
        np.testing.assert_allclose(g, numeric_grad(f, p), rtol=2e-3, atol=3e-5, err_msg=name)
    np.testing.assert_allclose(dx, numeric_grad(f, x64), rtol=2e-3, atol=3e-5)


@pytest.mark.parametrize("shape", [(5, 3, 4, 6), (1, 3, 3, 5), (6, 4), (2, 4, 3)])
@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_matches_oracle_in_both_modes_with_running_stats(rng, shape, relu):
    c = shape[1]
    bn = (nc.BatchNorm2D if len(shape) == 4 else nc.BatchNorm1D)(c, eps=1e-3, momentum=0.2).initialize(0)
    bn.weight[:] = f32(rng.standard_normal(c))
    bn.bias[:] = f32(rng.standard_normal(c))
    bn.fusion = Fusion(relu=relu)
    x = f32(rng.standard_normal(shape) * 3 + 1)
    rm, rv = np.zeros(c), np.ones(c)
    for _ in range(3):
        y = bn.forward(x, training=True)
        want, rm, rv = ref.batchnorm_forward(x, bn.weight, bn.bias, 1e-3, True, rm, rv, 0.2)
        np.testing.assert_allclose(y, np.maximum(want, 0) if relu else want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean, rm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var, rv, rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked[0] == 3
    y = bn.forward(x, training=False)
    want = ref.batchnorm_forward(x, bn.weight, bn.bias, 1e-3, False, rm, rv)[0]
    np.testing.assert_allclose(y, np.maximum(want, 0) if relu else want, rtol=1e-5, atol=1e-5)


def test_batchnorm_eval_mode_backward_treats_statistics_as_constants(rng):
    bn = nc.BatchNorm2D(3).initialize(0)
    bn.running_mean[:] = f32(rng.standard_normal(3))
    bn.running_var[:] = f32(rng.random(3) + 0.5)
    bn.weight[:] = f32(rng.standard_normal(3))
    x = f32(rng.standard_normal((2, 3, 4, 4)))
    r = rng.standard_normal((2, 3, 4, 4))
    bn.forward(x, training=False)
    dx = bn.backward(f32(r))
    x64 = x.astype(np.float64)

    def f():
        return (ref.batchnorm_forward(x64, bn.weight, bn.bias, 1e-5, False, bn.running_mean,
                                      bn.running_var)[0] * r).sum()
    np.testing.assert_allclose(dx, numeric_grad(f, x64), rtol=1e-4, atol=1e-5)


def test_global_avgpool_matches_oracle_and_finite_differences(rng):
    gap = nc.GlobalAvgPool2D()
    x = f32(rng.standard_normal((3, 4, 5, 7)))
    np.testing.assert_allclose(gap.forward(x), ref.global_avgpool(x), rtol=1e-6, atol=1e-6)
    r = rng.standard_normal((3, 4))
    dx = gap.backward(f32(r))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(dx, numeric_grad(lambda: (ref.global_avgpool(x64) * r).sum(), x64),
                               rtol=1e-5, atol=1e-7)


def test_new_layers_are_bitwise_the_same_for_any_thread_count(rng):
    x = f32(rng.standard_normal((10, 2, 7, 7)))  # batches of 4, 4 and 2 (BatchNorm1D needs 2)
    y = rng.integers(0, 3, 10)
    runs = []
    for threads in (1, 2):
        nc.set_num_threads(threads)
        net = _bn_net(seed=4)
        tr = nc.Trainer(net, nc.AdamW(net, lr=0.01), batch_size=4, progress=False,
                        augment="shift:2,flip", lr_schedule="onecycle", label_smoothing=0.1)
        tr.fit(x, y, 2)
        runs.append(net.state_dict())
    nc.set_num_threads(None)
    for k, v in runs[0].items():
        np.testing.assert_array_equal(v, runs[1][k], err_msg=k)


def test_augmentation_kernel_matches_oracle_and_is_reproducible(rng):
    x = f32(rng.standard_normal((7, 2, 5, 6)))
    y = np.arange(7, dtype=np.int64)
    idx = np.array([3, 0, 6, 6, 2], np.int64)
    aug = nc.Augment.parse("crop:3,flip")
    moves = aug.draw(5, 1, 2, len(idx))
    assert (np.abs(moves[0]) <= 3).all() and moves[0].min() < 0 < moves[0].max() and moves[1].any()
    out, labels = augmented(x, y, idx, moves)
    np.testing.assert_array_equal(out, ref.augment(x, idx, *moves))
    np.testing.assert_array_equal(labels, idx)
    again = aug.draw(5, 1, 2, len(idx))
    assert all((a == b).all() for a, b in zip(moves, again))
    other = aug.draw(5, 1, 3, len(idx))
    assert not all((a == b).all() for a, b in zip(moves, other))


def test_onecycle_matches_torch_formula_at_its_landmarks():
    total, peak = 100, 4e-3
    assert onecycle(0, total, peak) == pytest.approx((peak / 25, 0.95))
    assert onecycle(29, total, peak) == pytest.approx((peak, 0.85))  # end of the 30 % warm-up
    assert onecycle(99, total, peak)[0] == pytest.approx(peak / 25 / 1e4)
    lrs = [onecycle(k, total, peak)[0] for k in range(total)]
    assert np.argmax(lrs) == 29 and all(np.diff(lrs[29:]) < 0) and all(np.diff(lrs[:30]) > 0)


def test_adamw_step_matches_its_formula(rng):
    net = nc.Sequential([nc.Dense(3, 2)], seed=0)
    p0 = net.params.copy()
    g = f32(rng.standard_normal(p0.shape))
    net.grads[:] = g
    opt = nc.AdamW(net, lr=0.1, weight_decay=0.5)
    opt.step()
    shrunk = p0.astype(np.float64) * (1 - 0.1 * 0.5)
    want, _, _ = ref.adam(shrunk, g.astype(np.float64), 0.0, 0.0, 0.1, 0.9, 0.999, 1e-8, 0.0, 1)
    np.testing.assert_allclose(net.params, want, rtol=1e-5, atol=1e-5)  # float32 update of ~0.1


def test_early_stopping_restores_the_best_epoch():
    rng = np.random.default_rng(0)
    x = f32(rng.random((40, 1, 6, 6)))
    y = rng.integers(0, 3, 40)  # random labels: the validation loss soon gets worse
    net = nc.build_network("conv(4,3),relu,dense(32),relu", (1, 6, 6), 3, seed=0)
    stop = nc.training.EarlyStopping(patience=2)
    snapshots = {}

    class Keep(nc.training.Callback):
        def on_epoch_end(self, trainer, stats):
            snapshots[stats["epoch"]] = trainer.net.state_dict()
    tr = nc.Trainer(net, nc.Adam(net, lr=0.05), batch_size=8, progress=False)
    hist = tr.fit(x[:30], y[:30], 30, x_val=x[30:], y_val=y[30:], callbacks=[Keep(), stop])
    losses = [h["val_loss"] for h in hist]
    assert stop.stopped and len(hist) < 30
    assert stop.best_epoch == 1 + int(np.argmin(losses)) and len(hist) == stop.best_epoch + 2
    for k, v in snapshots[stop.best_epoch].items():
        np.testing.assert_array_equal(net.state_dict()[k], v, err_msg=k)


def _zeros(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("make,message", [
    (lambda: nc.Sequential([nc.Conv2D(1, 4, 3), nc.BatchNorm2D(5)]).forward(_zeros(2, 1, 5, 5)),
     r"BatchNorm2D\(5\)\): expected input of shape \(N, 5, H, W\), got \(N, 4, 3, 3\)"),
    (lambda: nc.Sequential([nc.Dense(4, 3), nc.BatchNorm1D(3)]).forward(_zeros(1, 4), training=True),
     "expected more than 1 value per channel when training"),
    (lambda: nc.Sequential([nc.Residual([nc.Conv2D(2, 3, 3, padding=1)])]).forward(
        np.zeros((1, 2, 4, 4), np.float32)),
     r"the body gives \(N, 3, 4, 4\) but the shortcut gives \(N, 2, 4, 4\)"),
    (lambda: nc.Augment.parse("shift:2,rotate"), "unknown or malformed term 'rotate'"),
    (lambda: nc.softmax_cross_entropy(_zeros(2, 3), np.array([0, 1]), label_smoothing=1.0),
     r"label_smoothing must be a number in \[0, 1\)"),
    (lambda: nc.BatchNorm2D(4, momentum=1.5), r"momentum must be a number in \(0, 1\]"),
])
def test_bad_input_gets_one_clear_line(make, message):
    with pytest.raises(ValueError, match=message) as e:
        make()
    assert "\n" not in str(e.value)


def test_batchnorm2d_trains_at_batch_one_with_spatial_size(rng):
    net = nc.Sequential([nc.Conv2D(1, 2, 3), nc.BatchNorm2D(2), nc.ReLU(), nc.Flatten(),
                         nc.Dense(18, 2)])
    tr = nc.Trainer(net, nc.SGD(net, lr=0.01), batch_size=1, progress=False)
    hist = tr.fit(f32(rng.random((3, 1, 5, 5))), np.array([0, 1, 0]), 1)
    assert np.isfinite(hist[0]["train_loss"])


def test_presets_build_and_checkpoints_keep_running_stats(tmp_path, rng):
    for spec, shape in (("modern", (1, 28, 28)), ("resnet8", (3, 32, 32)), ("resnet8", (1, 28, 28))):
        net = nc.build_network(spec, shape, 10, seed=0)
        assert net.output_shape(shape) == (10,)
    net = nc.build_network("resnet8", (3, 12, 12), 4, seed=0)
    x = f32(rng.random((8, 3, 12, 12)))
    nc.Trainer(net, nc.Adam(net), batch_size=4, progress=False).fit(x, np.arange(8) % 4, 1)
    nc.save(net, str(tmp_path / "r8.npz"))
    back = nc.load(str(tmp_path / "r8.npz"))
    assert back.state_dict()["1.num_batches_tracked"][0] == 2
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k], v, err_msg=k)
    np.testing.assert_array_equal(back.forward(x), net.forward(x))


def test_estimator_takes_the_recipe_and_keeps_the_best_weights_with_their_statistics():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    kw = dict(architecture="conv(8,3,padding=same),bn,relu,res(conv(8,3,padding=same),bn),gap",
              input_shape=(1, 8, 8), max_epochs=30, random_state=0, early_stopping=True,
              validation_fraction=0.2, n_iter_no_change=3)
    plain = nc.CNNClassifier(**kw, learning_rate=0.1).fit(X[:300], y[:300])
    # stopped early (10-19 epochs on the machines seen, by rounding), so by construction the best
    # epoch is 3 before the last: the kept weights are not simply the last epoch's
    assert plain.n_iter_ < 30 and len(plain.validation_scores_) == plain.n_iter_
    recipe = nc.CNNClassifier(**kw, learning_rate=0.03, augment="shift:1", label_smoothing=0.1,
                              lr_schedule="onecycle", optimizer="adamw").fit(X[:300], y[:300])
    assert plain.loss_curve_ != recipe.loss_curve_
    # the kept model is the best epoch's: weights and BatchNorm statistics
    best = int(np.argmax(plain.validation_scores_))
    assert best == plain.n_iter_ - 1 - 3 and plain.best_validation_score_ == plain.validation_scores_[best]
    state = plain.net_.state_dict()
    assert state["1.num_batches_tracked"][0] == (best + 1) * -(-240 // plain.batch_size)
    with pytest.raises(ValueError, match="unknown or malformed term 'spin'"):
        nc.CNNClassifier(augment="spin").fit(X[:50], y[:50])


def test_lr_finder_suggests_the_steepest_fall_and_leaves_the_network_alone(tmp_path, capsys):
    from numbacnn.cli import main, run_find_lr
    from numbacnn.lr_finder import _steepest, find_lr

    lrs = list(np.logspace(-6, 0, 61))
    # a loss falling fastest at lr = 1e-3 (a logistic in log10(lr)), then blowing up past 1e-1
    losses = [2.0 - 1.5 / (1 + np.exp(-4 * (np.log10(lr) + 3))) + (10 * lr) ** 2 for lr in lrs]
    assert _steepest(lrs, losses) == pytest.approx(1e-3, rel=0.3)
    ds = nc.load_dataset(None)
    net = nc.build_network("compact", ds.input_shape, ds.n_classes, seed=0)
    before = net.state_dict()
    found = find_lr(net, ds.x_train, ds.y_train, steps=40, batch_size=16)
    assert len(found.lrs) == len(found.losses) and found.lrs == sorted(found.lrs)
    assert found.lrs[0] <= found.suggestion <= found.lrs[-1]
    for k, v in before.items():
        np.testing.assert_array_equal(net.state_dict()[k], v, err_msg=k)
    plot = tmp_path / "lr.png"
    assert main(["--steps", "60", "--batch-size", "16", "--plot", str(plot)], command=run_find_lr) == 0
    assert "suggested lr: " in capsys.readouterr().out and plot.stat().st_size > 1000
    # a ramp that diverges at once: no suggestion, said on one line, exit 1
    assert main(["--steps", "20", "--start-lr", "100", "--end-lr", "1e4"], command=run_find_lr) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("no suggestion: the loss did not fall over the ramp (try more --steps or a lower "
                        "--start-lr)") and len(err.splitlines()) == 1
    assert main(["--start-lr", "1", "--end-lr", "0.5"], command=run_find_lr) == 2
    assert "--start-lr 1.0 must be below --end-lr 0.5" in capsys.readouterr().err


def test_routing_traces_through_batchnorm_residual_blocks_and_global_pooling(rng):
    from numbacnn import analysis

    block = nc.Residual([nc.Conv2D(3, 3, 1), nc.BatchNorm2D(3), nc.ReLU()])
    g = np.ones((3, 4, 5), np.int64)
    # a 1x1 conv sends each output's count to all 3 input channels; the identity path adds one
    np.testing.assert_array_equal(block.trace_back(g, (3, 4, 5)), np.full((3, 4, 5), 4))
    proj = nc.Residual([nc.Conv2D(3, 2, 1, stride=2)], shortcut=[nc.Conv2D(3, 2, 1, stride=2)])
    out = proj.trace_back(np.ones((2, 2, 3), np.int64), (3, 4, 5))
    assert out[:, ::2, ::2].min() == 4 and out[:, 1::2, :].max() == 0
    net = nc.build_network("conv(2,3,padding=same),bn,relu,res(conv(2,3,padding=same),bn),maxpool(2),"
                           "res(conv(2,3,padding=same)),gap", (1, 8, 8), 3, seed=0)
    x = f32(rng.random((2, 1, 8, 8)))
    maps = analysis.trace_to_input(net, x)
    assert len(maps) == 1 and maps[0].shape == (8, 8) and maps[0].min() > 0


def test_a_last_batch_of_one_example_joins_the_previous_one_when_batchnorm1d_needs_two(rng):
    x = f32(rng.random((9, 1, 4, 4)))  # batches of 4, 4 and 1
    y = np.arange(9) % 3
    net = nc.build_network("dense(6),bn,relu", (1, 4, 4), 3, seed=0)
    tr = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=4, progress=False)
    tr.fit(x, y, 2)
    assert net.state_dict()["2.num_batches_tracked"][0] == 4  # two steps an epoch: 4 and 5
    assert sorted(k[0] for k in tr._programs) == [4, 5]
    plain = nc.build_network("dense(6),relu", (1, 4, 4), 3, seed=0)
    tr = nc.Trainer(plain, nc.SGD(plain, lr=0.1), batch_size=4, progress=False)
    tr.fit(x, y, 1)
    assert sorted(k[0] for k in tr._programs) == [1, 4]  # no BatchNorm1D: batches as they were


def test_checkpoints_keep_the_generators_of_dropouts_inside_residual_blocks(tmp_path, rng):
    net = nc.build_network("conv(2,3,padding=same),res(conv(2,3,padding=same),dropout(0.5)),dense(4)",
                           (1, 6, 6), 3, seed=0)
    inner = net.layers[1].body[1]
    for _ in range(3):  # move its generator away from the seeded state
        net.forward(rng.random((2, 1, 6, 6)).astype(np.float32), training=True)
    nc.save(net, str(tmp_path / "d.npz"))
    back = nc.load(str(tmp_path / "d.npz"))
    assert back.layers[1].body[1].generator_state() == inner.generator_state()
    assert inner.generator_state()[1] == 3


def test_dropout_generators_saved_by_older_versions_still_load():
    """Pickles and checkpoints from before the counter-based masks held a numpy Generator: a
    seed is drawn from it (later masks differ from the older version's); a malformed state is a
    CheckpointError."""
    import pickle

    from numbacnn.checkpoint import CheckpointError, _dropout_state

    old = np.random.default_rng(5)
    seed, draws = _dropout_state(old.bit_generator.state, "c.npz")
    assert draws == 0 and seed == np.random.default_rng(5).integers(2**63)
    assert _dropout_state([7, 9], "c.npz") == (7, 9)
    with pytest.raises(CheckpointError, match="c.npz: a dropout generator state must be"):
        _dropout_state([7, -1], "c.npz")
    drop = nc.Dropout(0.5)
    state = drop.__getstate__()
    del state["_state"], state["_offset"]
    state.update(rng=np.random.default_rng(5), batch_slice=None)
    back = pickle.loads(pickle.dumps(drop))
    back.__setstate__(state)
    assert back.generator_state() == (seed, 0)
    assert back.forward(np.ones((2, 8), np.float32), training=True).shape == (2, 8)


def test_cli_refuses_a_bad_augment_term_and_early_stopping_without_validation(capsys):
    from numbacnn.cli import main

    assert main(["--quiet", "--augment", "shift:2,rotate"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown or malformed term 'rotate'" in err and len(err.splitlines()) == 1
    assert main(["--quiet", "--early-stopping", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--early-stopping needs validation data" in err and len(err.splitlines()) == 1


def _colour_bars(rng, n):
    """A colour 32x32 task that needs both the channels and the layout: red or blue, horizontal or
    vertical bars (4 classes) at random places, on a noisy grey background of random brightness."""
    y = rng.integers(0, 4, n)
    x = rng.random((n, 1, 1, 1)) * 0.4 + rng.normal(0, 0.08, (n, 3, 32, 32))
    for i in range(n):
        c = 0 if y[i] < 2 else 2  # red or blue
        a, b = rng.integers(2, 22, 2)
        if y[i] % 2 == 0:
            x[i, c, a:a + 3, b:b + 9] += 0.6  # horizontal
        else:
            x[i, c, a:a + 9, b:b + 3] += 0.6  # vertical
    return f32(x), y


@pytest.mark.slow
def test_resnet8_learns_a_colour_32x32_task(rng):
    """resnet8 (MLPerf Tiny's) trained on colour 32x32 images through the training recipe
    (Normalize per channel, as train.py does for colour data) tells colours and orientations
    apart on held-out images."""
    x, y = _colour_bars(rng, 640)
    grey = f32(np.repeat(x.mean(1, keepdims=True), 3, axis=1))  # the control: no colour left
    accuracy = []
    for data in (x, grey):
        net = nc.build_network("resnet8", (3, 32, 32), 4, seed=0, normalize=nc.Normalize.fit(data[:480]))
        tr = nc.Trainer(net, nc.Adam(net, lr=2e-3), batch_size=32, seed=0, progress=False,
                        lr_schedule="onecycle")
        tr.fit(data[:480], y[:480], 4)
        accuracy.append(nc.evaluate(net, data[480:], y[480:])[1])
    assert accuracy[0] >= 0.9 and accuracy[1] <= 0.75, accuracy  # (100 % and 47-54 % measured)


def test_reflect_translation_and_alternating_flips_match_the_oracle(rng):
    x = f32(rng.standard_normal((9, 2, 5, 6)))
    y = np.arange(9, dtype=np.int64)
    idx = np.array([3, 0, 8, 8, 2, 5], np.int64)
    aug = nc.Augment.parse("translate:4,flip:alternate")
    assert (aug.shift, aug.flip, aug.reflect) == (4, "alternate", True)
    assert str(aug) == "translate:4,flip:alternate"
    moves = aug.draw(5, 1, 2, idx)
    assert np.abs(moves[0]).max() == 4 and bool(moves[2])
    out, labels = augmented(x, y, idx, moves)
    np.testing.assert_array_equal(out, ref.augment(x, idx, moves[0], moves[1], reflect=True))
    np.testing.assert_array_equal(labels, idx)
    # alternating flips: an example's side depends on its index, not the step, and swaps by epoch
    all_idx = np.arange(1000)
    e0, e1, e2 = (aug.draw(5, e, 7, all_idx)[1] for e in (0, 1, 2))
    assert 0.4 < e0.mean() < 0.6
    np.testing.assert_array_equal(e1, ~e0)
    np.testing.assert_array_equal(e2, e0)
    np.testing.assert_array_equal(aug.draw(5, 0, 3, all_idx[::-1])[1], e0[::-1])
    assert not np.array_equal(aug.draw(6, 0, 0, all_idx)[1], e0)  # another seed, other sides
    with pytest.raises(ValueError, match="mixes zero fill"):
        nc.Augment.parse("shift:2,translate:2")
