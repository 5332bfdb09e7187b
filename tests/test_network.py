"""Sequential, optimizers against their formulas, state dicts, validation and reproducibility."""
import numpy as np
import pytest
import reference as ref
from conftest import f32, winograd_choices

import numbacnn as nc
from numbacnn import tuning


def lenet(seed=0):
    return nc.Sequential([nc.Conv2D(1, 6, 5, padding=2), nc.ReLU(), nc.MaxPool2D(2),
                          nc.Conv2D(6, 16, 5), nc.ReLU(), nc.MaxPool2D(2), nc.Flatten(),
                          nc.Dense(400, 120), nc.ReLU(), nc.Dense(120, 10)], seed=seed)


def test_state_dict_uses_torch_names_and_layouts():
    net = lenet()
    sd = net.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias",
                        "9.weight", "9.bias"]
    assert sd["0.weight"].shape == (6, 1, 5, 5) and sd["7.weight"].shape == (120, 400)
    assert all(v.dtype == np.float32 for v in sd.values())
    assert list(net.grad_dict()) == list(sd)
    bound = 1 / np.sqrt(25)  # Kaiming-uniform bound of torch's default init, fan_in = 1*5*5
    assert np.abs(sd["0.weight"]).max() <= bound and np.abs(sd["0.weight"]).max() > 0.9 * bound
    other = lenet(seed=1)
    assert not np.array_equal(other.state_dict()["0.weight"], sd["0.weight"])
    other.load_state_dict(sd)
    x = f32(np.random.default_rng(0).random((3, 1, 28, 28)))
    np.testing.assert_array_equal(other.forward(x), net.forward(x))
    sd["0.weight"][:] = 0  # state_dict returns copies
    assert net.params.any()


def test_same_seed_same_network_and_output_is_a_fresh_array():
    a, b = lenet(7), lenet(7)
    np.testing.assert_array_equal(a.params, b.params)
    x = f32(np.random.default_rng(0).random((4, 1, 28, 28)))
    out1 = a.forward(x)
    out2 = a.forward(x * 2)
    assert not np.array_equal(out1, out2)


def test_load_state_dict_rejects_mismatches():
    net = lenet()
    sd = net.state_dict()
    bad = dict(sd)
    bad["3.weight"] = np.zeros((16, 6, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"3\.weight.*\(16, 6, 3, 3\)"):
        net.load_state_dict(bad)
    with pytest.raises(ValueError, match="missing"):
        net.load_state_dict({k: v for k, v in sd.items() if k != "0.bias"})


@pytest.mark.parametrize("x_shape,match", [
    ((2, 3, 28, 28), r"layer 0 \(Conv2D\(1, 6, 5.*expected input of shape \(N, 1, H, W\)"),
    ((2, 1, 20, 20), r"layer 7 \(Dense\(400, 120\)\).*\(N, 400\).*\(N, 144\)"),
    ((2, 1, 28), r"layer 0"),
])
def test_shape_mismatch_names_the_layer(x_shape, match):
    net = lenet()
    with pytest.raises(ValueError, match=match):
        net.forward(np.zeros(x_shape, np.float32))


def test_bad_inputs_raise_value_errors():
    net = lenet()
    with pytest.raises(ValueError, match="floating-point"):
        net.forward(np.zeros((2, 1, 28, 28), np.int64))
    with pytest.raises(ValueError, match="non-empty"):
        net.forward(np.zeros((0, 1, 28, 28), np.float32))
    with pytest.raises(RuntimeError, match="forward"):
        lenet().backward(np.zeros((2, 10), np.float32))
    net.forward(np.zeros((2, 1, 28, 28), np.float32), training=True)
    with pytest.raises(ValueError, match=r"\(2, 10\)"):
        net.backward(np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="labels"):
        nc.softmax_cross_entropy(np.zeros((2, 10), np.float32), np.array([0, 10]))
    assert nc.Conv2D(1, 2, 4, padding="same").pads == (1, 2, 1, 2)  # an even kernel: as torch
    for stride in (2, (1, 2), (2, 1)):
        with pytest.raises(ValueError, match="padding='same' needs stride 1"):
            nc.Conv2D(1, 2, 3, stride=stride, padding="same")
    assert nc.Conv2D(1, 2, (3, 5), padding="same").padding == (1, 2)
    with pytest.raises(ValueError, match="padding"):
        nc.MaxPool2D(2, padding=2)
    with pytest.raises(ValueError, match="kernel_size"):
        nc.Conv2D(1, 2, 0)
    with pytest.raises(ValueError, match="not a numbacnn layer"):
        nc.Sequential([nc.ReLU(), "dense"])


def _one_step(net, x, y):
    net.backward(nc.softmax_cross_entropy(net.forward(x, training=True), y)[1])


@pytest.mark.parametrize("name,kwargs", [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=1e-2)),
    ("sgd", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("sgd", dict(lr=0.1, momentum=0.5, dampening=0.3)),
    ("rmsprop", dict(lr=0.01)),
    ("rmsprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=1e-3, alpha=0.9)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2)),
])
def test_optimizer_steps_follow_their_formulas(rng, name, kwargs):
    net = nc.Sequential([nc.Flatten(), nc.Dense(12, 5), nc.ReLU(), nc.Dense(5, 3)], seed=0)
    opt = nc.make_optimizer(name, net, **kwargs)
    x = f32(rng.standard_normal((8, 1, 3, 4)))
    y = rng.integers(0, 3, 8)
    p = net.params.astype(np.float64)
    state = [np.zeros_like(p) for _ in range(3)]
    for t in range(1, 4):
        _one_step(net, x, y)
        g = net.grads.astype(np.float64)
        opt.step()
        if name == "sgd":
            p, state[0] = ref.sgd(p, g, state[0], kwargs["lr"], kwargs.get("momentum", 0),
                                  kwargs.get("dampening", 0), kwargs.get("weight_decay", 0),
                                  kwargs.get("nesterov", False), t == 1)
        elif name == "rmsprop":
            p, state[0], state[1], state[2] = ref.rmsprop(
                p, g, state[0], state[1], state[2], kwargs["lr"], kwargs.get("alpha", 0.99), 1e-8,
                kwargs.get("weight_decay", 0), kwargs.get("momentum", 0), kwargs.get("centered", False))
        else:
            b1, b2 = kwargs.get("betas", (0.9, 0.999))
            p, state[0], state[1] = ref.adam(p, g, state[0], state[1], kwargs["lr"], b1, b2,
                                             kwargs.get("eps", 1e-8), kwargs.get("weight_decay", 0), t)
        np.testing.assert_allclose(net.params, p, rtol=1e-5, atol=1e-6)
        p = net.params.astype(np.float64)  # follow the float32 trajectory


@pytest.mark.parametrize("name", ["sgd", "nesterov", "rmsprop", "adam"])
def test_optimizer_state_below_the_smallest_normal_float_is_flushed_to_zero(rng, name):
    """A parameter whose gradient stays zero decays its optimizer state into subnormal floats, which
    x86 cores compute on a slow path (kernels/cpu/optim.py): the state is flushed to zero there, and
    everywhere else follows the float64 formula; a NaN gradient still reaches the state."""
    from numbacnn.kernels import cpu as K

    tiny = np.finfo(np.float32).tiny
    M = 3000  # several parallel blocks (8192 each: one), the tail past a vector's lanes
    p = f32(rng.standard_normal(M))
    g = np.zeros(M, np.float32)
    g[:100] = rng.standard_normal(100)  # live parameters
    g[100] = np.nan
    # state: normal values that decay below tiny in this step, subnormal ones, ordinary ones
    s0 = np.concatenate([f32(rng.standard_normal(100)), f32(tiny * rng.uniform(1.0, 1.1, 1000)),
                         f32(tiny * rng.uniform(0.01, 0.9, 1000)), f32(rng.uniform(1e-30, 1e-3, 900))])
    s0[100] = 1.0
    s = [s0.copy(), np.abs(s0), s0.copy()]
    p64, g64, st64 = p.astype(np.float64), g.astype(np.float64), [a.astype(np.float64) for a in s]
    if name in ("sgd", "nesterov"):
        K.sgd_update(p, g, s[0], 0.1, 0.5, 0.0, 0.0, name == "nesterov", False)
        want_p, want = ref.sgd(p64, g64, st64[0], 0.1, 0.5, 0.0, 0.0, name == "nesterov", False)
        got, want = [s[0]], [want]
    elif name == "rmsprop":
        s[0] = np.abs(s[0])
        st64[0] = s[0].astype(np.float64)
        K.rmsprop_update(p, g, s[0], s[1], s[2], 0.01, 0.5, 1e-8, 0.0, 0.5, False)
        want_p, *want = ref.rmsprop(p64, g64, *st64, 0.01, 0.5, 1e-8, 0.0, 0.5, False)
        got, want = [s[0], s[2]], [want[0], want[2]]
    else:
        K.adam_update(p, g, s[0], s[1], 0.01, 0.5, 0.5, 1e-8, 0.0, 3, False)
        want_p, *want = ref.adam(p64, g64, st64[0], st64[1], 0.01, 0.5, 0.5, 1e-8, 0.0, 3)
        got = s[:2]
    # float32's rounding of each term: 2 ulp of the terms' size (the sums cancel where d is live)
    scale = np.abs(s0).astype(np.float64) + np.abs(g64) + np.abs(g64) ** 2
    if name == "rmsprop":  # and its momentum's term d / (sqrt(sq) + eps)
        scale += np.abs(g64) / (np.sqrt(np.abs(want[0])) + 1e-8)
    for a, w in zip(got, want):
        assert np.isnan(a[100]) and np.isnan(w[100])
        w = np.where(np.abs(w) < tiny, 0.0, w)  # flushed: exactly zero, never subnormal
        assert not np.any((a != 0) & (np.abs(a) < tiny))
        ok = ~np.isnan(w)
        np.testing.assert_array_equal(a[ok] == 0, w[ok] == 0)
        assert np.all(np.abs(a[ok] - w[ok]) <= 2.4e-7 * (np.abs(w[ok]) + scale[ok]))
    ok = ~np.isnan(want_p)
    np.testing.assert_allclose(p[ok], want_p[ok], rtol=1e-5, atol=1e-7)


def test_centered_rmsprop_stays_finite_where_its_square_average_is_flushed():
    """Centered RMSProp's variance sq - ga * ga: with sq flushed below the smallest normal float32 and
    ga still normal (a valid state: ga * ga <= sq), it would fall below zero by less than that and
    give NaN; it is flushed too, so the step divides by eps and the parameter stays put."""
    from numbacnn.kernels import cpu as K

    tiny = np.finfo(np.float32).tiny
    M = 1000
    p = np.ones(M, np.float32)
    g = np.zeros(M, np.float32)
    sq = np.full(M, 1.05 * tiny, np.float32)
    ga = np.full(M, 1e-19, np.float32)  # ga * ga = 1e-38 < sq
    buf = np.zeros(M, np.float32)
    K.rmsprop_update(p, g, sq, ga, buf, 0.01, 0.5, 1e-8, 0.0, 0.0, True)
    assert np.all(sq == 0) and np.all(ga == np.float32(5e-20))
    np.testing.assert_array_equal(p, np.ones(M, np.float32))


def test_optimizer_rejects_bad_hyperparameters():
    net = nc.Sequential([nc.Dense(3, 2)], seed=0)
    for bad in (dict(lr=0), dict(lr=-1), dict(lr=float("nan")), dict(lr=0.1, momentum=-0.5)):
        with pytest.raises(ValueError):
            nc.SGD(net, **bad)
    with pytest.raises(ValueError, match="Nesterov"):
        nc.SGD(net, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="unknown optimizer"):
        nc.make_optimizer("lbfgs", net, lr=0.1)
    with pytest.raises(ValueError, match="beta"):
        nc.Adam(net, betas=(1.0, 0.9))


def test_a_few_sgd_steps_reduce_the_loss(rng):
    net = lenet(seed=0)
    y = rng.integers(0, 10, 32)
    x = f32(rng.random((32, 1, 28, 28)) * 0.5)
    for n, label in enumerate(y):  # a learnable signal: a bright band whose row encodes the class
        x[n, 0, 2 * label + 4:2 * label + 6, 4:24] += 1.0
    opt = nc.SGD(net, lr=0.02, momentum=0.9)
    losses = []
    for _ in range(25):
        loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        net.backward(d, need_input_grad=False)
        opt.step()
        losses.append(loss)
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(b < a for a, b in zip(losses[:5], losses[1:6])), losses


THREADS_SCRIPT = """
import hashlib, sys
import numpy as np
import numba
import numbacnn as nc
from numbacnn import tuning

TABLE = {k: v for k, v in vars(tuning).items() if k.isupper()}
CHOICES = WINOGRAD_CHOICES  # the chooser asked for Winograd on every shape, F(4x4, 3x3) or never
WINOGRAD = ("conv(32,3,padding=1),relu,maxpool(2),conv(96,3,padding=1),relu,conv(96,3,padding=1),dense(10)",
            (40, 25, 23))
SPECS = {
    "lenet5": ("lenet5", (1, 28, 28)),
    "strided": ("conv(4,3,stride=2),relu,conv(8,3),relu,dense(150),relu", (1, 28, 28)),
    "positions strided": ("conv(12,3,stride=2),relu,conv(16,3,stride=2,padding=1),dense(70)", (3, 15, 15)),
    "overlapping pools": ("conv(4,3),maxpool(3,stride=2),relu,conv(12,3,padding=1),tanh,"
                          "maxpool(3,stride=1,padding=1),avgpool(3,stride=2,padding=1),dense(40)",
                          (2, 17, 17)),
    "grouped GEMMs": ("conv(8,3,padding=1),relu,conv(32,3),relu,maxpool(2),conv(32,3,padding=1),"
                      "relu,dense(40)", (1, 10, 10)),
    # 3 blocks of rows an example ("positions": a Winograd layer runs it on odd output sides; 60
    # output channels: columns and GEMMs, whose blocks the shapes choose, not FMA blocks)
    "row blocks": ("conv(60,3,padding=1),relu,dense(10)", (64, 7, 7)),
    # Winograd F(2x2, 3x3): a fused pool over odd rows, tile-row blocks, weight GEMMs collected
    # across a part's examples and flushed between them (96 x 96 channels: 97 tiles at most, 36 an
    # example); 40 input channels: OpenBLAS GEMMs (not a multiple of 16), whose bits depend on the
    # blocks
    "winograd": WINOGRAD,
    # the same layers on F(4x4, 3x3) where its rule takes them (the batch of 130: blocks of whole
    # examples, weight gradients over parts of the batch), F(2x2, 3x3) for the 1 and 3 examples
    "winograd4": WINOGRAD,
    # the grouped plan: depthwise (a multiplier, stride 2, dilation), grouped 1x1, a fused ReLU, the
    # gates; the pointwise plan (1x1, with and without a fused ReLU); the padded plan (uneven padding)
    "grouped": ("conv(8,3,padding=1),relu,dwconv(3,multiplier=2,stride=2,padding=1),relu,conv(16,1),relu,"
                "conv(16,1),conv(16,1,groups=4),"
                "hardswish,dwconv(3,dilation=2,padding=same),relu6,conv(12,(3,2),groups=4,padding=((1,0),(0,1))),"
                "silu,conv(8,(3,2),stride=2,padding=((1,0),(0,1))),relu,dense(20),sigmoid", (3, 12, 11)),
    # series: 1-D convolutions (same, causal and dilated, strided, grouped, depthwise), BatchNorm over
    # (N, C, L), a residual block with a 1-D projection, the 1-D pools, nested concatenations
    "series": ("conv1d(32,8,padding=same),bn,relu,maxpool1d(3,stride=2,padding=1),"
               "res(conv1d(64,5,stride=2,padding=2),bn,relu,conv1d(64,3,padding=causal,dilation=2),bn),relu,"
               "dwconv1d(3,padding=same),avgpool1d(2),conv1d(16,3,groups=4),relu,"
               "cat(conv1d(8,1),cat(conv1d(8,9,padding=same)|conv1d(8,4,padding=same))|maxpool1d(3,stride=1,padding=1)),"
               "bn,relu,gmp", (3, 75)),
}
rng = np.random.default_rng(0)
for name, (spec, shape) in SPECS.items():
    # 130 examples: 64 gradient parts of 2 or 3 examples, backward GEMMs over groups of them
    x = rng.random((130,) + shape, dtype=np.float32)
    y = rng.integers(0, 10, 130)
    for threads in (1, 2, 3, 16):
        nc.set_num_threads(threads)
        assert numba.get_num_threads() == threads
        net = nc.build_network(spec, shape, 10, seed=5)
        wino = [la for la in net.layers
                if name.startswith("winograd") and getattr(la, "strategy", "") == "winograd"]
        for key, value in {**TABLE, **CHOICES.get(name, {})}.items():
            setattr(tuning, key, value)  # winograd specs: odd sides, batches 1 and 3 too
        opt = nc.Adam(net, lr=1e-3)
        for _ in range(3):
            _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
            dx = net.backward(d)
            opt.step()
        if wino:  # which Winograd the training steps ran
            ran_f4 = [any(k.startswith("wino4_u") for k in layer._buffers) for layer in wino]
            assert len(ran_f4) == 3 and set(ran_f4) == {name == "winograd4"}, (name, ran_f4)
        small = net.forward(x[:1]).tobytes() + net.forward(x[:3]).tobytes()  # row blocks per example
        h = hashlib.sha256(net.params.tobytes() + net.grads.tobytes() + dx.tobytes() + small).hexdigest()
        print(name, threads, h)
"""


@pytest.mark.slow
def test_results_identical_for_1_2_3_and_16_threads():
    """Gradient parts reduced in a fixed order: the thread count does not change any bit, for
    every conv strategy (grouped backward GEMMs and Winograd included), fused and unfused
    (overlapping, padded) pools and Dense layers on grids of tiles. In a child with 16 numba
    threads, so that 3 and 16 run whatever the machine's core count."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_NUM_THREADS="16")
    choices = {"winograd": winograd_choices(True, False), "winograd4": winograd_choices(True, None)}
    script = THREADS_SCRIPT.replace("WINOGRAD_CHOICES", repr(choices))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    hashes: dict[str, dict[str, str]] = {}
    for line in r.stdout.splitlines():
        *name, threads, digest = line.split()
        hashes.setdefault(" ".join(name), {})[threads] = digest
    assert len(hashes) == 10
    for name, by_threads in hashes.items():
        assert set(by_threads) == {"1", "2", "3", "16"}, name
        assert len(set(by_threads.values())) == 1, (name, by_threads)


def test_eval_forward_in_slices_matches_training_forward(rng):
    net = nc.Sequential([nc.Conv2D(1, 2, 3), nc.ReLU(), nc.Flatten(), nc.Dense(2 * 4 * 4, 3)], seed=0)
    x = f32(rng.random((600, 1, 6, 6)))  # > EVAL_BATCH: evaluated in slices
    full = net.forward(x, training=True)
    np.testing.assert_allclose(net.forward(x), full, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(net.predict(x), full.argmax(1))
    proba = net.predict_proba(x)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)


def test_kernels_compile_at_kernel_opt_and_restore_numbas_level():
    """_config.kernel compiles at KERNEL_OPT and puts numba's level back, also after an error."""
    import numba

    from numbacnn.runtime import config as _config

    before = numba.config.OPT
    seen = _config._compile_at_kernel_opt(lambda sig: int(numba.config.OPT))(())
    assert seen == _config.KERNEL_OPT and numba.config.OPT == before

    def fail(sig):
        raise RuntimeError("compile failed")
    with pytest.raises(RuntimeError, match="compile failed"):
        _config._compile_at_kernel_opt(fail)(())
    assert numba.config.OPT == before

    @_config.kernel()
    def add_one(a):
        return a + 1.0
    assert add_one(np.float32(1.0)) == 2.0 and numba.config.OPT == before


def test_inference_slices_follow_the_widest_written_activation(rng, monkeypatch):
    """eval_slice: the largest power of two whose widest layer (input and output as inference
    writes them: the fused ReLU and pool, the folded BatchNorm add nothing) fits the per-core
    budget; forward(training=False) runs those slices, the same bits as calling it on each."""
    import numbacnn.network as nw

    net = nc.Sequential([nc.Conv2D(1, 4, 3, padding=1), nc.BatchNorm2D(4), nc.ReLU(), nc.MaxPool2D(2),
                         nc.Flatten(), nc.Dense(4 * 4 * 4, 3)], seed=0)
    widest = 4 * (8 * 8 + 4 * 4 * 4)  # bytes: the convolution's input and its pooled output
    monkeypatch.setattr(nw.os, "cpu_count", lambda: 2)
    for budget, size in ((widest * 16, 32), (widest * 16 - 1, 16), (widest * 9, 16),
                         (widest * 64, 128), (widest * 10_000, tuning.EVAL_BATCH)):
        monkeypatch.setattr(tuning, "SLICE_BYTES_PER_CORE", budget)
        net._slices.clear()  # eval_slice keeps its answers
        assert net.eval_slice((1, 8, 8)) == size, budget
    monkeypatch.setattr(tuning, "SLICE_BYTES_PER_CORE", widest * 20 // 2)  # 20 examples fit: 16
    net._slices.clear()
    x = f32(rng.random((2 * 16 + 5, 1, 8, 8)))
    whole = net.forward(x)
    np.testing.assert_array_equal(
        whole, np.concatenate([net.forward(x[lo:lo + 16]) for lo in range(0, len(x), 16)]))
    np.testing.assert_allclose(whole, net.forward(x, keep=True), rtol=1e-5, atol=1e-5)  # one batch


def test_repeated_predictions_follow_inputs_weights_and_shapes(rng):
    """A prediction of the shape predicted last skips forward's checks (the program is kept); it
    still reads the new input, the current weights, and falls back to the full path for other
    dtypes, layouts and shapes, and after the fusions change or the network is pickled."""
    import pickle

    net = nc.build_network("conv(4,3),bn,relu,maxpool(2),flatten,dense(6)", (2, 8, 8), 3, seed=0)
    x1 = rng.random((1, 2, 8, 8), dtype=np.float32)
    x3 = rng.random((3, 2, 8, 8), dtype=np.float32)

    def want(x):
        return net.through(x.astype(np.float32), False, inference=False).copy()

    for _ in range(4):
        np.testing.assert_allclose(net.forward(x1), want(x1), rtol=1e-5, atol=1e-6)
    assert net._last_prediction is not None and net._last_prediction[0] == x1.shape
    y = x1 * np.float32(2)
    np.testing.assert_allclose(net.forward(y), want(y), rtol=1e-5, atol=1e-6)  # the new input
    np.testing.assert_allclose(net.forward(y.astype(np.float64)), want(y), rtol=1e-5, atol=1e-6)
    wide = np.zeros((1, 2, 8, 16), np.float32)
    wide[..., ::2] = y
    np.testing.assert_allclose(net.forward(wide[..., ::2]), want(y), rtol=1e-5, atol=1e-6)
    net.params[:] *= np.float32(0.5)  # weights written in place
    np.testing.assert_allclose(net.forward(y), want(y), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.forward(x3), want(x3), rtol=1e-5, atol=1e-6)  # another shape
    np.testing.assert_allclose(net.forward(y), want(y), rtol=1e-5, atol=1e-6)  # and back
    np.testing.assert_allclose(net.forward(y, upto=-1), net.through(y, False, upto=-1), rtol=1e-5,
                               atol=1e-6)
    with net.unfused():
        assert net._last_prediction is None
        np.testing.assert_allclose(net.forward(y), want(y), rtol=1e-5, atol=1e-6)
    copy = pickle.loads(pickle.dumps(net))
    assert copy._last_prediction is None
    np.testing.assert_array_equal(copy.forward(y), net.forward(y))
    with pytest.raises(ValueError, match="floating-point"):
        net.forward(y.astype(np.int32))
