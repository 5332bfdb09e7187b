"""The scaling model (numbacnn/scaling.py): its iteration counts against the kernels' own prange
loops, its formula against a hand computation, and the parallel slack of the preset nets."""
import importlib
import inspect

import numpy as np
import pytest

import numbacnn as nc
from numbacnn import scaling

# every parallel CPU kernel runs in a step of one of these (strided gemm conv, unfused padded and
# unpadded max pools, average pool, tanh, dropout, the three optimizers)
SPECS = [
    ("conv(4,3,stride=2),relu,conv(12,3,padding=1),tanh,maxpool(3,stride=1,padding=1),avgpool(2),"
     "conv(16,3,padding=1),relu,maxpool(2),dropout(0.3),dense(40),relu", (2, 17, 17)),
    ("conv(6,3),relu,maxpool(3,stride=2),conv(8,3),relu,dense(12)", (1, 12, 12)),
]


def _one_step(spec, shape, n, optimizer, infer=True):
    net = nc.build_network(spec, shape, 5, seed=0)
    opt = optimizer(net)
    rng = np.random.default_rng(0)
    x = rng.random((n,) + shape, dtype=np.float32)
    y = rng.integers(0, 5, n)
    log: list = []
    with scaling._recording(log):
        _, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        net.backward(d)
        opt.step()
        if infer:
            net.predict_proba(x[:3])  # the softmax kernel runs in inference only
        # as Trainer takes a step: recorded (inside the profile's own swap), then replayed
        tr = nc.Trainer(net, opt, batch_size=n, progress=False)
        for step in range(2):
            tr._local_step(x, y, np.arange(n), step)
    return log


def _counted_iterations(name, args):
    """Run the kernel's Python source with a counting ``prange``: the iterations it really makes
    (its BLAS calls skipped: they cannot run as Python, and loop counts do not depend on values)."""
    kernel = scaling._parallel_kernels()[name]
    module = importlib.import_module(kernel.py_func.__module__)
    count = [0]

    def counting_prange(*a):
        r = range(*a)
        count[0] += len(r)
        return r
    saved = dict(vars(module))
    module.prange = counting_prange
    if hasattr(module, "sgemm"):
        module.sgemm = lambda *a: None
    try:
        kernel.py_func(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    finally:
        module.prange = saved["prange"]
        if "sgemm" in saved:
            module.sgemm = saved["sgemm"]
    return count[0]


@pytest.mark.parametrize("n", [1, 7, 70, 130])
def test_iteration_rules_match_the_kernels_prange_loops(n):
    log = []
    for (spec, shape), opt in zip(SPECS, (lambda net: nc.SGD(net, lr=0.1, momentum=0.9),
                                          lambda net: nc.Adam(net))):
        log += _one_step(spec, shape, n, opt)
    log += _one_step(SPECS[1][0], SPECS[1][1], n, lambda net: nc.RMSProp(net))
    rules = scaling._iteration_rules()
    seen = set()
    for name, _, args in log:
        params = list(inspect.signature(scaling._parallel_kernels()[name].py_func).parameters)
        work = rules[name](dict(zip(params, args)))
        assert len(work) == _counted_iterations(name, args), name
        assert np.all(work > 0), name
        seen.add(name)
    assert seen == set(scaling._parallel_kernels())  # every parallel kernel ran here


def test_every_parallel_kernel_has_an_iteration_rule():
    assert set(scaling._parallel_kernels()) <= set(scaling._iteration_rules())


def test_busiest_thread_under_a_static_schedule():
    w = np.array([1.0, 2, 3, 4, 5])
    assert scaling._busiest(w, 1) == 15
    assert scaling._busiest(w, 2) == 12  # [1, 2] and [3, 4, 5]
    assert scaling._busiest(w, 5) == 5
    assert scaling._busiest(w, 64) == 5  # more threads than iterations


def test_predicted_step_time_against_a_hand_computation():
    c1 = scaling.Call("a", 4e-3 + 1e-5 + 2e-6, 1e-5, np.ones(4), 0)  # 4 ms over 4 iterations
    c2 = scaling.Call("b", 1e-3 + 1e-5 + 2e-6, 1e-5, np.ones(1), int(1e9))  # 1 iteration, 1 GB
    prof = scaling.StepProfile("x", 1, 0.0, [c1, c2], serial=1e-3, fork_join=(2e-6, 4e-6))
    prof.step = scaling.predict(prof, 1, bandwidth=1e15)
    assert prof.step == pytest.approx(1e-3 + c1.seconds + c2.seconds)

    def hand(p, bandwidth=1e15):
        o = 2e-6 + 2e-6 * np.log2(p)
        return 1e-3 + 2e-5 + 2 * o + 4e-3 / min(p, 4) + max(1e-3, 1e9 / bandwidth)
    for p in (2, 4, 8, 64):
        assert scaling.predict(prof, p, bandwidth=1e15) == pytest.approx(hand(p))
    # a 100 GB/s ceiling: the 1 GB call cannot take less than 10 ms
    assert scaling.predict(prof, 8, bandwidth=1e11) == pytest.approx(hand(8, 1e11))
    # cores at half speed when several run
    assert scaling.predict(prof, 2, bandwidth=1e15, efficiency=0.5) == pytest.approx(
        1e-3 + 2e-5 + 2 * (4e-6) + 4e-3 + 2e-3)


def test_straggler_factor_is_the_expected_slowest_of_q_draws():
    """straggle: the exact expected maximum of q draws with replacement, against a hand value and
    a Monte Carlo estimate (tolerance 4 standard errors)."""
    assert scaling.straggle(np.array([0.5, 1.5]), 2) == pytest.approx(0.25 * 0.5 + 0.75 * 1.5)
    assert scaling.straggle(np.array([0.5, 1.5]), 1) == 1.0
    assert scaling.straggle(np.array([2.0, 2.0, 2.0]), 8) == pytest.approx(1.0)  # no spread
    assert scaling.straggle(None, 8) == 1.0
    rng = np.random.default_rng(3)
    x = rng.gamma(4.0, size=40)
    for q in (2, 5, 64):
        draws = rng.choice(x / x.mean(), size=(200_000, q)).max(axis=1)
        assert scaling.straggle(x, q) == pytest.approx(draws.mean(), abs=4 * draws.std() / 447)
    assert scaling.straggle(x, 10_000) == pytest.approx(x.max() / x.mean())


def test_straggler_factor_over_cores_is_the_expected_slowest_of_one_draw_per_core():
    """straggle_cores: one thread per core, each core's time drawn from its own measured times
    (relative to the pooled mean); against a hand value, a Monte Carlo estimate (tolerance 4
    standard errors) and the pooled ``straggle`` where the thread and core counts differ."""
    fast, slow = np.array([1.0, 1.0]), np.array([1.0, 3.0])  # pooled mean 1.5
    # the max is 3/1.5 when the slow core draws 3 (probability 1/2), else 1/1.5
    assert scaling.straggle_cores([fast, slow], 2) == pytest.approx(0.5 * 2 + 0.5 * (2 / 3))
    # a core that is always slower: the region always waits for it (pooled draws would not)
    a, b = np.array([1.0, 1.1]), np.array([2.0, 2.2])
    assert scaling.straggle_cores([a, b], 2) == pytest.approx(2.1 / 1.575)
    assert scaling.straggle_cores([a, b], 2) > scaling.straggle(np.concatenate([a, b]), 2)
    assert scaling.straggle_cores([a, b], 1) == 1.0 and scaling.straggle_cores(None, 2) == 1.0
    assert scaling.straggle_cores([a, b], 4) == scaling.straggle(np.concatenate([a, b]), 4)
    rng = np.random.default_rng(5)
    cores = [rng.gamma(4.0, size=30), 1.3 * rng.gamma(6.0, size=50), rng.gamma(2.0, size=20)]
    mean = np.concatenate(cores).mean()
    draws = np.max([rng.choice(c / mean, size=200_000) for c in cores], axis=0)
    assert scaling.straggle_cores(cores, 3) == pytest.approx(draws.mean(), abs=4 * draws.std() / 447)


def test_per_core_times_replace_the_profile_spread_only_for_the_same_calls():
    spread = np.array([0.5, 1.5])
    c1 = scaling.Call("a", 4e-3, 0.0, np.ones(4), 0, spread)
    c2 = scaling.Call("b", 1e-3, 0.0, np.ones(1), 0, spread)
    prof = scaling.StepProfile("x", 1, 5e-3, [c1, c2], serial=0.0, fork_join=(0.0, 0.0))
    assert not scaling.with_core_spreads(prof, [[("a", [1.0]), ("b", [1.0])]])  # one core
    assert not scaling.with_core_spreads(prof, [[("a", [1.0]), ("b", [1.0])], [("b", [1.0])]])
    assert c1.core_spreads is None and scaling.wait(c1, 2) == pytest.approx(1.25)
    core0 = [("a", [1.0, 1.0]), ("b", [2.0])]
    core1 = [("a", [1.0, 3.0]), ("b", [2.0])]
    assert scaling.with_core_spreads(prof, [core0, core1])
    assert scaling.wait(c1, 2) == pytest.approx(0.5 * 2 + 0.5 * (2 / 3))
    assert scaling.wait(c2, 2) == 1.0  # one iteration: one thread
    assert scaling.predict(prof, 2, stragglers=True) == pytest.approx(
        2e-3 * scaling.wait(c1, 2) + 1e-3)


def test_predicted_step_time_with_stragglers_against_a_hand_computation():
    """Each call's compute term waits for the slowest of min(p, iterations) threads; dispatch,
    fork-join and the serial part do not; at one thread nothing changes."""
    spread = np.array([0.5, 1.5])
    c1 = scaling.Call("a", 4e-3, 0.0, np.ones(4), 0, spread)
    c2 = scaling.Call("b", 1e-3, 0.0, np.ones(1), 0, spread)  # one iteration: one thread, no wait
    prof = scaling.StepProfile("x", 1, 5e-3, [c1, c2], serial=0.0, fork_join=(0.0, 0.0))
    assert scaling.predict(prof, 1, stragglers=True) == pytest.approx(5e-3)
    assert scaling.predict(prof, 2, stragglers=True) == pytest.approx(2e-3 * 1.25 + 1e-3)
    assert scaling.predict(prof, 2) == pytest.approx(2e-3 + 1e-3)
    q4 = scaling.straggle(spread, 4)
    assert scaling.predict(prof, 8, stragglers=True) == pytest.approx(1e-3 * q4 + 1e-3)
    assert scaling.mean_wait(prof, 2) == pytest.approx((4e-3 * 1.25 + 1e-3) / 5e-3)  # the bench's 'wait'


@pytest.mark.parametrize("net_name", ["lenet5", "mnistcnn"])
def test_preset_nets_offer_64_way_slack_in_the_conv_kernels(net_name):
    """The issue's goal: the conv kernels (over 85 % of a step) offer at least 64 independent
    iterations at batch 128 and at least 32 at batch 64; mnistcnn's 1600 -> 128 Dense layer at
    least 32 (the grids of smaller Dense layers stay coarse: finer tiles cost more than they give on
    few cores, docs/performance.md)."""
    for batch, need in ((128, 64), (64, 32)):
        log = _one_step(net_name, (1, 28, 28), batch, lambda net: nc.SGD(net, lr=0.1), infer=False)
        rules = scaling._iteration_rules()
        for name, _, args in log:
            params = list(inspect.signature(scaling._parallel_kernels()[name].py_func).parameters)
            named = dict(zip(params, args))
            n = len(rules[name](named))
            if name.startswith("conv2d"):
                assert n >= need, (name, batch, n)
            if name.startswith("dense") and named["w"].size >= 100_000:
                assert n >= 32, (name, batch, n)


def test_profile_step_adds_up():
    prof = scaling.profile_step("lenet5", 16, steps=2, rounds=2)
    assert prof.calls and all(c.seconds > 0 and c.dispatch >= 0 for c in prof.calls)
    assert prof.step == pytest.approx(prof.serial + sum(c.seconds for c in prof.calls), rel=1e-6) \
        or prof.serial == 0.0
    assert 0 < scaling.core_efficiency(2, 32, 10) <= 1
    assert scaling.predict(prof, 1) == pytest.approx(prof.step, rel=0.05) or prof.serial == 0.0
    names = [c.name for c in prof.calls]
    assert names.count("conv2d_backward_positions") == 1 and "sgd_update" in names
    assert scaling.speedup(prof, 1) == 1
    assert 1 < scaling.speedup(prof, 2) <= 2
    # every call's spread: its 4 step times relative to their mean
    assert all(len(c.spread) == 4 and c.spread.mean() == pytest.approx(1.0) for c in prof.calls)
    assert scaling.speedup(prof, 2, stragglers=True) <= scaling.speedup(prof, 2)


def test_call_times_time_every_call_of_a_step():
    from numbacnn.bench import _Ours

    ours = _Ours("lenet5", 8)
    ours.train_step()
    times = scaling.call_times(ours.train_step, 0.0)  # at least one step
    prof = scaling.profile_step("lenet5", 8, steps=2, rounds=1)
    assert [n for n, _ in times] == [c.name for c in prof.calls]
    assert all(len(t) >= 1 and min(t) > 0 for _, t in times)
    assert scaling.with_core_spreads(prof, [times, times])
    assert all(len(c.core_spreads) == 2 for c in prof.calls)
