"""Recorded training steps (numbacnn/runtime/program.py): a replayed step computes what the layers' own
Python computes, bit for bit, for every layer kind, plan and optimizer, and skips that Python."""
import pickle
import threading

import numpy as np
import pytest

import numbacnn as nc
from numbacnn.runtime import team_region

ARCHS = [
    "conv(4,3),relu,maxpool(2),conv(8,3),relu,maxpool(2),dense(16),relu,dropout(0.3)",  # wide
    "conv(4,3),relu,conv(16,5,padding=2),relu,maxpool(2),dense(10),tanh",  # positions, padded
    "conv(4,3,stride=2),relu,avgpool(2),dense(8),dropout(0.5)",  # gemm (strided), avg pool
    "conv(3,3),maxpool(3,stride=2),dense(6)",  # unfused overlapping max pool
    # BatchNorm (+ fused ReLU), residual blocks (identity and projection), global pooling, BN1D
    "conv(4,3,padding=same),bn,relu,res(conv(4,3,padding=same),bn,relu,conv(4,3,padding=same),bn),"
    "relu,res(conv(8,3,stride=2,padding=1),bn),gap,dense(6),bn,relu",
]


def _fit(arch, optimizer, programs, epochs=2, n=23, batch=6, seed=3):
    net = nc.build_network(arch, (1, 12, 12), 5, seed=1)
    opt = nc.make_optimizer(optimizer, net, lr=0.01)
    tr = nc.Trainer(net, opt, batch_size=batch, progress=False, seed=seed, step_programs=programs)
    rng = np.random.default_rng(0)
    x = rng.random((n, 1, 12, 12), dtype=np.float32)
    y = rng.integers(0, 5, n)
    hist = tr.fit(x, y, epochs)
    return tr, net, [(h["train_loss"], h["train_accuracy"]) for h in hist]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "rmsprop", "adamw"])
def test_replayed_steps_train_to_the_same_bits(arch, optimizer):
    # 23 examples in batches of 6: two recorded shapes (6 and the last batch of 5), each replayed
    tr, net, hist = _fit(arch, optimizer, True)
    assert sorted(k[0] for k in tr._programs) == [5, 6]
    _, ref, ref_hist = _fit(arch, optimizer, False)
    assert hist == ref_hist
    for k, v in ref.state_dict().items():
        np.testing.assert_array_equal(net.state_dict()[k], v, err_msg=k)


def test_a_replayed_step_runs_no_layer_python(monkeypatch):
    net = nc.build_network(ARCHS[1], (1, 12, 12), 5, seed=1)
    tr = nc.Trainer(net, nc.SGD(net, lr=0.1, momentum=0.9), batch_size=4, progress=False)
    x = np.random.default_rng(0).random((4, 1, 12, 12), dtype=np.float32)
    y = np.arange(4) % 5
    tr.train_step(x, y)  # records
    before = net.state_dict()
    calls = []
    for layer in net.layers:
        for name in ("forward", "backward"):
            monkeypatch.setattr(layer, name, lambda *a, **k: calls.append(a))
    tr.train_step(x, y)
    assert calls == []
    assert any(not np.array_equal(before[k], v) for k, v in net.state_dict().items())  # it trained
    # the kernels are called through their compiled entry points: no numba type dispatch
    from numba.core.registry import CPUDispatcher

    program, = tr._programs.values()
    assert len(program._compiled) == len(program.calls)
    assert any(isinstance(f, CPUDispatcher) for f, _ in program.calls)  # what was captured
    assert not any(isinstance(f, CPUDispatcher) for f, _ in program._compiled)


def test_bad_labels_and_weighted_steps_take_the_checked_path():
    net = nc.build_network("conv(2,3),dense(3)", (1, 6, 6), 3, seed=0)
    tr = nc.Trainer(net, nc.SGD(net, lr=0.1), batch_size=4, progress=False)
    x = np.zeros((8, 1, 6, 6), np.float32)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        tr.train_epoch(x, np.array([0, 1, 2, 3, 0, 1, 2, 0]))
    assert tr._programs == {}
    tr.train_epoch(x, np.arange(8) % 3, sample_weight=np.ones(8))
    assert tr._programs == {}
    y = np.arange(8) % 3
    tr.train_epoch(x, y)
    assert tr._programs != {}
    y[5] = 7  # the same array, changed in place: checked again in the next epoch
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        tr.train_epoch(x, y)


def test_a_pickled_trainer_records_again_and_continues_the_same():
    tr, net, _ = _fit(ARCHS[0], "adam", True, epochs=1)
    clone = pickle.loads(pickle.dumps(tr))
    assert clone._programs == {}
    rng = np.random.default_rng(0)
    x = rng.random((23, 1, 12, 12), dtype=np.float32)
    y = rng.integers(0, 5, 23)
    tr.fit(x, y, 2)
    clone.fit(x, y, 2)
    for k, v in tr.net.state_dict().items():
        np.testing.assert_array_equal(clone.net.state_dict()[k], v, err_msg=k)


def test_recording_beside_another_thread_training_records_only_its_own_calls():
    """A capture collects the calls of its own thread only: threads training meanwhile (recording
    or not) are neither recorded nor disturbed."""
    results = {}

    def train(name, programs):
        results[name] = _fit(ARCHS[0], "sgd", programs, epochs=3, n=60, batch=5, seed=7)

    threads = [threading.Thread(target=train, args=(f"t{i}", i % 2 == 0)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, ref, ref_hist = _fit(ARCHS[0], "sgd", False, epochs=3, n=60, batch=5, seed=7)
    for name, (_, net, hist) in results.items():
        assert hist == ref_hist, name
        for k, v in ref.state_dict().items():
            np.testing.assert_array_equal(net.state_dict()[k], v, err_msg=f"{name}: {k}")
    nets = {name: r[1] for name, r in results.items()}
    for name in ("t0", "t2"):  # each program binds its own net's buffers only
        for program in results[name][0]._programs.values():
            arrays = [a for _, args in program.calls for a in args if isinstance(a, np.ndarray)]
            assert any(np.shares_memory(a, nets[name].params) for a in arrays)
            for other, net in nets.items():
                if other != name:
                    assert not any(np.shares_memory(a, net.params) or np.shares_memory(a, net.grads)
                                   for a in arrays), (name, other)


@pytest.mark.parametrize("arch", ARCHS)
def test_replayed_inference_is_the_layers_forward_bit_for_bit_as_weights_change(arch, monkeypatch):
    """``forward(training=False)`` records each input shape once and replays it: the same bits as
    the layers' own forward, after training steps and a load_state_dict change the weights and
    statistics, and at batch 1, a full slice and a remainder."""
    net = nc.build_network(arch, (1, 12, 12), 5, seed=1)
    rng = np.random.default_rng(2)
    x = rng.random((300, 1, 12, 12), dtype=np.float32)  # a slice of 256 and one of 44

    def layers_path(xs):
        return np.concatenate([net.through(xs[lo:lo + 256].copy(), False, inference=True).copy()
                               for lo in range(0, len(xs), 256)])
    for stage in range(3):
        if stage == 1:
            tr = nc.Trainer(net, nc.Adam(net, lr=0.01), batch_size=32, progress=False)
            tr.fit(x[:64], np.arange(64) % 5, 1)
        if stage == 2:
            net.load_state_dict({k: v * np.float32(0.5) if v.dtype == np.float32 else v
                                 for k, v in net.state_dict().items()})
        for xs in (x[:1], x):
            np.testing.assert_array_equal(net.forward(xs), layers_path(xs))  # recorded (stage 0)
            other = np.ascontiguousarray(xs[::-1]) + np.float32(0.25)
            np.testing.assert_array_equal(net.forward(other), layers_path(other))  # replayed
    assert set(net._programs) == {((1, 1, 12, 12), None), ((256, 1, 12, 12), None), ((44, 1, 12, 12), None)}
    features = net.forward(x[:5], upto=-1)  # the estimator's transform: a program of its own
    np.testing.assert_array_equal(features, net.through(x[:5].copy(), False, upto=-1, inference=True))
    for layer in net.layers:  # replays run no layer Python
        monkeypatch.setattr(layer, "forward", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    net.forward(x[:1])
    with net.unfused():  # other kernels: recorded again (and the layers are called)
        with pytest.raises(AssertionError):
            net.forward(x[:1])


def test_batchnorm_folded_into_convolutions_for_inference_matches_the_unfolded_forward(rng):
    """Inference folds Conv2D + BatchNorm2D (+ ReLU + max pool) into one convolution: the fold
    kernel against its float64 oracle, and whole networks against the unfolded evaluation forward
    (which stays the path of forward(keep=True), backward and the report)."""
    import reference as ref

    from numbacnn.kernels import cpu as K

    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b, gamma, beta, mean = (rng.standard_normal(5).astype(np.float32) for _ in range(4))
    var = rng.random(5).astype(np.float32) + np.float32(0.1)
    wf, bf = np.empty_like(w), np.empty_like(b)
    K.batchnorm_fold(wf.reshape(5, -1), bf, w.reshape(5, -1), b, gamma, beta, mean, var, 1e-5,
                     *(np.zeros(0, np.int32),) * 2)
    ew, eb = ref.batchnorm_fold(w, b, gamma, beta, mean, var, 1e-5)
    np.testing.assert_allclose(wf, ew, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bf, eb, rtol=1e-6, atol=1e-6)
    for arch in ("modern", ARCHS[4]):
        net = nc.build_network(arch, (1, 16, 16), 5, seed=1)
        x = rng.random((40, 1, 16, 16), dtype=np.float32)
        nc.Trainer(net, nc.Adam(net, lr=0.01), batch_size=20, progress=False).fit(x, np.arange(40) % 5, 1)
        absorbed = [ly for ly in net.all_layers() if ly.fusion.infer_absorbed]
        assert any(isinstance(ly, nc.BatchNorm2D) for ly in absorbed)  # BatchNorms folded into convs
        assert all(isinstance(ly, (nc.BatchNorm2D, nc.MaxPool2D)) for ly in absorbed)
        got = net.forward(x)
        unfolded = net.through(x.copy(), False).copy()
        np.testing.assert_allclose(got, unfolded, rtol=1e-5, atol=1e-5 * np.abs(unfolded).max())
        if arch == "modern":  # the folded path ran: its rounding differs somewhere
            assert not np.array_equal(got, unfolded)


def test_only_the_most_recently_used_inference_shapes_are_kept(rng):
    """Each recorded inference shape holds its activations: a caller predicting batches of many
    sizes keeps at most INFERENCE_PROGRAMS of them, the most recently used."""
    from numbacnn.network import INFERENCE_PROGRAMS

    net = nc.build_network(ARCHS[0], (1, 12, 12), 5, seed=1)
    x = rng.random((40, 1, 12, 12), dtype=np.float32)
    for n in range(1, 10):
        got = net.forward(x[:n])
        np.testing.assert_array_equal(got, net.through(x[:n].copy(), False, inference=True))
    net.forward(x[:6])  # used again: the newest
    assert list(net._programs) == [((n, 1, 12, 12), None) for n in (7, 8, 9, 6)][-INFERENCE_PROGRAMS:]


def test_a_forward_cut_between_a_convolution_and_its_batchnorm_is_not_folded(rng):
    """forward(x, upto=k) stops at layer k: a Conv2D whose BatchNorm lies beyond the cut gives its
    own output, not the folded one."""
    net = nc.build_network("conv(4,3),bn,relu,maxpool(2),dense(6)", (1, 10, 10), 3, seed=0)
    x = rng.random((5, 1, 10, 10), dtype=np.float32)
    net.layers[1].running_mean[...] = 3.0  # a BatchNorm far from the identity
    for upto in (1, 2, 3, -1):
        want = net.through(x.copy(), False, upto=upto).copy()  # the layers' own forward
        np.testing.assert_allclose(net.forward(x, upto=upto), want, rtol=1e-5, atol=1e-5)
    assert [key[1] for key in net._programs] == [-1]  # only the cut that keeps the folds replays


def test_packed_weights_follow_every_change_of_the_weights():
    """The transposed ("positions") and Winograd-transformed filters are packed once and reused
    while the weights' bits stay the same (kernels/cpu/_util.unchanged; for folded weights the
    fold's count of its writes): after in-place writes through a layer's arrays or the flat
    parameter buffer, load_state_dict and changes to any of a folded BatchNorm's inputs,
    predictions equal those of a fresh network built from the same state (its own packing), at a
    Winograd batch and at a "positions" one (both packings of the same folded weights)."""
    arch = ("conv(32,3,padding=same),relu,conv(32,3,padding=same),bn,relu,maxpool(2),"
            "conv(16,5,padding=same),relu,gap")
    net = nc.build_network(arch, (1, 8, 8), 4, seed=0)
    convs = [layer for layer in net.layers if isinstance(layer, nc.Conv2D)]
    assert [conv.strategy for conv in convs[1:]] == ["winograd", "positions"]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((n, 1, 8, 8)).astype(np.float32) for n in (16, 1)]
    bn = net.layers[3]

    def check(what):
        fresh = nc.build_network(arch, (1, 8, 8), 4, seed=1)
        fresh.load_state_dict(net.state_dict())
        for x in xs:
            np.testing.assert_array_equal(net.forward(x), fresh.forward(x), err_msg=what)

    check("first calls")
    check("unchanged weights: packed layouts reused")
    convs[1].weight[3, 5, 1, 1] += np.float32(0.5)
    check("one weight of the Winograd layer written in place")
    convs[2].weight[0, 0, 2, 2] = -convs[2].weight[1, 0, 0, 0]
    check("one weight of the positions layer written in place")
    net.params[:] *= np.float32(0.75)
    check("the flat parameter buffer scaled")
    bn.running_var[:] *= np.float32(2.0)
    check("BatchNorm statistics (the folded weights) changed")
    bn.weight[1] = -bn.weight[1]
    check("BatchNorm's scale of one channel changed")
    bn.running_mean[0] += np.float32(1.0)
    bn.bias[2] = np.float32(-0.25)
    check("BatchNorm's shift changed (the folded bias)")
    convs[1].bias[3] = np.float32(0.125)
    check("the folded convolution's own bias changed")
    convs[1].weight[0, 0, 0, 0] = np.float32(0.0)
    check("a folded weight set to +0")
    convs[1].weight[0, 0, 0, 0] = np.float32(-0.0)
    check("and to -0 (other bits, the same value)")
    net.load_state_dict({k: v[::-1].copy() if v.ndim == 4 else v for k, v in net.state_dict().items()})
    check("load_state_dict")


@pytest.mark.parametrize("arch", ARCHS + ["dense(12),relu", "flatten"])
def test_replays_read_the_input_where_it_lies_and_never_write_it(arch):
    """A replayed inference reads a contiguous float32 input in place (the calls that read the
    recording buffer, or a view of it such as a Flatten's, get the caller's array): the same bits
    as the layers' forward on a copy, the input untouched; read-only and strided inputs are
    copied first, and a program whose output is a view of its input (a lone Flatten) copies."""
    net = nc.build_network(arch, (1, 12, 12), 5, seed=1)
    rng = np.random.default_rng(3)
    x = rng.random((6, 1, 12, 12), dtype=np.float32)
    net.forward(x)  # recorded
    for xs in (rng.random((6, 1, 12, 12), dtype=np.float32), x * np.float32(2)):
        before = xs.copy()
        expect = net.through(xs.copy(), False, inference=True).copy()
        np.testing.assert_array_equal(net.forward(xs), expect)
        np.testing.assert_array_equal(xs, before)  # never written
        frozen = xs.copy()
        frozen.flags.writeable = False
        np.testing.assert_array_equal(net.forward(frozen), expect)
        wide = np.zeros((6, 1, 12, 24), np.float32)
        wide[..., ::2] = xs
        np.testing.assert_array_equal(net.forward(wide[..., ::2]), expect)
    assert any(net._inference(x.shape, None)._reads)  # some call reads the input in place
    features = nc.build_network("flatten", (1, 12, 12), 3, seed=0)
    for xs in (x, x + np.float32(1)):  # layers[:-1] is the Flatten: its output views the input
        np.testing.assert_array_equal(features.forward(xs, upto=-1), xs.reshape(6, -1))
    assert features._inference(x.shape, -1)._reads is None


def _team_or_skip():
    import numba

    from numbacnn.runtime import team

    numba.get_num_threads()
    if numba.threading_layer() != "omp":
        pytest.skip(f"team regions need numba's omp threading layer, not {numba.threading_layer()}")
    assert team.available()  # omp: libgomp is loaded and its entry points bound
    return team


@pytest.mark.parametrize("arch,shape", [(a, (1, 12, 12)) for a in ARCHS]
                         + [("lenet5", (1, 28, 28)), ("mnistcnn", (1, 28, 28)), ("modern", (1, 28, 28)),
                            ("conv(8,3,padding=1),bn,relu,conv(8,3),tanh", (3, 9, 9)),
                            ("conv(16,3,padding=1),bn,gelu,scale(0.5),maxpool(2)", (3, 8, 8)),  # airbench94's
                            ("conv(8,3,padding=1),bn,relu6,dwconv(3,padding=1),hardswish,conv(8,1),sigmoid,"
                             "silu,hardsigmoid", (3, 8, 8)),  # the mobile nets' gates
                            ("conv1d(8,5,padding=same),bn,relu,cat(conv1d(4,3,padding=same) | "
                             "maxpool1d(3,stride=1,padding=1)),gap", (2, 20))])  # series, concatenation
def test_team_runs_give_the_replay_bits_at_any_thread_count(arch, shape, monkeypatch):
    """From its third run an inference program runs its calls as one team region (one OpenMP
    parallel region, barriers where calls depend on each other): the same bits as the replay and as
    the layers' own forward, at 1 and 2 threads, batch 1 and 3, the input read in place or copied."""
    _team_or_skip()
    net = nc.build_network(arch, shape, 5, seed=1)
    rng = np.random.default_rng(4)
    for n in (1, 3):
        x = rng.random((n, *shape), dtype=np.float32)
        expect = net.through(x.copy(), False, inference=True).copy()
        for run in range(4):
            xs = x * np.float32(run + 1)
            want = net.through(xs.copy(), False, inference=True).copy()
            np.testing.assert_array_equal(net.forward(xs), want)
        program = net._inference(x.shape, None)
        assert program.team, "the program did not switch to a team"
        for threads in (1, 2):
            with _numba_threads(threads):
                np.testing.assert_array_equal(net.forward(x), expect)
                strided = np.zeros((n, *shape[:-1], 2 * shape[-1]), np.float32)
                strided[..., ::2] = x
                np.testing.assert_array_equal(net.forward(strided[..., ::2]), expect)  # copied first
    monkeypatch.setenv("NUMBACNN_TEAM", "0")
    replay = nc.build_network(arch, shape, 5, seed=1)
    for _ in range(4):
        out = replay.forward(x)
    assert not replay._inference(x.shape, None).team
    np.testing.assert_array_equal(out, expect)


def _region_run(rows, threads, x, patches):
    """team_region.run, which must report no failed call."""
    assert team_region.run(rows, threads, x, patches, np.zeros(1, np.int64)) == 0


def _explode(a):
    """A serial "kernel" that raises where a[0] < 0 (and counts its calls in a[1])."""
    a[1] += 1
    if a[0] < 0:
        raise ValueError("negative on purpose")


def test_a_kernel_error_inside_a_team_reaches_the_caller(monkeypatch):
    """A kernel that raises inside the team region stops the prediction with its own exception,
    in the caller: the region reports the failed row, and the program replays the calls one by
    one, so the kernel raises as it would outside a team."""
    import numba

    from numbacnn.kernels import cpu as K

    team = _team_or_skip()
    explode = numba.njit(_explode)
    flag = np.array([1, 0], np.int64)
    entry = team.address(explode, (numba.typeof(flag),))
    thunk, buffer = team._packed(team_region.pack_serial, (flag,))
    rows = np.array([[thunk, entry, -1, buffer.ctypes.data]] * 2, np.int64)
    failed = np.zeros(1, np.int64)
    assert team_region.run(rows, 2, flag, np.zeros((0, 2), np.int64), failed) == 0 and flag[1] == 2
    flag[0] = -1
    assert team_region.run(rows, 2, flag, np.zeros((0, 2), np.int64), failed) in (1, 2)  # a failed row + 1
    assert flag[1] == 4  # the other calls still ran

    monkeypatch.setattr(K, "TEAM_SERIAL", K.TEAM_SERIAL | {explode})
    net = nc.build_network("lenet5", (1, 28, 28), 10, seed=0)
    x = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    flag[:] = (1, 0)
    program = net._inference(x.shape, None)
    net.forward(x)  # records
    program.calls.append((explode, (flag,)))
    program._compiled.append((explode, (flag,)))
    program._reads = None
    for _ in range(3):
        out = net.forward(x).copy()
    assert program.team and flag[1] == 3
    flag[0] = -1
    with pytest.raises(ValueError, match="negative on purpose"):
        net.forward(x)
    flag[0] = 1
    np.testing.assert_array_equal(net.forward(x), out)  # and the next prediction runs as before


class _numba_threads:
    def __init__(self, n):
        self.n = n

    def __enter__(self):
        import numba

        self.saved = numba.get_num_threads()
        numba.set_num_threads(min(self.n, numba.config.NUMBA_NUM_THREADS))

    def __exit__(self, *exc):
        import numba

        numba.set_num_threads(self.saved)


def test_team_barriers_go_where_calls_depend_on_each_other():
    """Calls go into intervals between barriers as early as the memory they touch allows: an
    independent call shares the first interval, a dependent one waits for the barrier, a serial
    one runs on one thread beside the blocks; the team computes what the calls in order compute."""
    team = _team_or_skip()
    from numbacnn.kernels import cpu as K

    rng = np.random.default_rng(5)
    x, z = rng.standard_normal((2, 20000)).astype(np.float32)  # 3 blocks of 8192
    y1, y2, y3 = (np.zeros_like(x) for _ in range(3))
    calls = [(K.relu_forward, (y1, x)), (K.add, (y2, y1, x, False)), (K.tanh_forward, (y3, z))]
    schedule = team.schedule(calls, 2)
    assert schedule.order == [0, 2, -1, 1]  # tanh touches nothing of the others; add reads relu's output
    assert list(schedule.rows[2]) == [0, 0, 0, 0] and schedule.rows[0, 2] == 3  # a barrier; 3 blocks
    no_patches = np.zeros((0, 2), np.int64)
    _region_run(schedule.rows, 2, x, no_patches)
    np.testing.assert_array_equal(y1, np.maximum(x, 0))
    np.testing.assert_array_equal(y2, np.maximum(x, 0) + x)
    want = np.empty_like(x)
    K.tanh_forward(want, z)
    np.testing.assert_array_equal(y3, want)
    filters = (np.zeros((16, 2, 2), np.float32), rng.random((2, 2, 3, 3), dtype=np.float32), False,
               np.zeros(72, np.float32), np.zeros(0, np.int32), np.zeros(0, np.int32))
    schedule = team.schedule([(K.relu_forward, (y1, x)), (K.winograd_filters, filters)], 2)
    assert schedule.order == [0, 1] and schedule.rows[1, 2] < 0  # serial, beside the blocks
    u = np.zeros_like(filters[0])
    K.winograd_filters(u, *filters[1:])
    y1[:] = 0
    _region_run(schedule.rows, 1, x, no_patches)  # any thread count
    np.testing.assert_array_equal(filters[0], u)
    np.testing.assert_array_equal(y1, np.maximum(x, 0))
    assert team.schedule([(K.dense_backward, ())], 2) is None  # no team form: the program replays


def test_team_of_no_thread_count_runs_numbas_count():
    """team.run given 0 threads asks numba's threading layer (the calling thread's count, as
    numba.set_num_threads left it): blocks of a 1-thread team all run on thread 0, of 2 threads
    on threads 0 and 1."""
    team = _team_or_skip()
    import numba


    ids = np.full(2, -1, np.int64)
    entry = team.address(team_region.thread_id_block, (numba.types.int64, numba.typeof(ids)))
    thunk, buffer = team._packed(team_region.pack_blocks, (ids,))
    rows = np.array([[thunk, entry, 2, buffer.ctypes.data]], np.int64)
    for threads, want in ((1, [0, 0]), (2, [0, 1])):
        if threads > numba.config.NUMBA_NUM_THREADS:
            continue
        ids[:] = -1
        with _numba_threads(threads):
            _region_run(rows, 0, ids, np.zeros((0, 2), np.int64))
        assert list(ids) == want, threads


def test_team_points_the_input_reads_at_the_callers_array():
    """team.run points the packed data pointers that read the recorded input (or a view of it, at
    an offset) at the array it is given: the calls then read that array, not the recording."""
    team = _team_or_skip()
    from numbacnn.kernels import cpu as K

    rng = np.random.default_rng(7)
    recording = np.zeros(20000, np.float32)
    y = np.zeros(19900, np.float32)
    schedule = team.schedule([(K.relu_forward, (y, recording[100:]))], 2)
    words = schedule.buffers[0]
    found = np.flatnonzero(words == recording[100:].ctypes.data)
    assert len(found) == 1  # the view's data pointer, packed once
    patches = np.array([[words.ctypes.data + 8 * int(k), 400] for k in found], np.int64)
    for _ in range(2):
        x = rng.standard_normal(20000).astype(np.float32)
        _region_run(schedule.rows, 2, x, patches)
        np.testing.assert_array_equal(y, np.maximum(x[100:], 0))


def test_team_uses_the_openmp_runtime_that_numba_uses(tmp_path):
    """A process can hold two OpenMP runtimes (PyTorch ships its own libgomp, loaded globally
    before numba's): the team binds the one numba's kernels call (they pick their workspaces by
    its thread numbers), checked by running a team once, and computes the replay's bits."""
    import shutil
    import subprocess
    import sys

    _team_or_skip()

    decoy = tmp_path / "libgomp-decoy.so.1"
    shutil.copy(team_region.bound_runtime(), decoy)
    code = f"""
import ctypes
ctypes.CDLL({str(decoy)!r}, mode=ctypes.RTLD_GLOBAL)  # as torch loads its own, before numba
import numpy as np
import numbacnn as nc
from numbacnn.runtime import team_region as team
net = nc.build_network("lenet5", (1, 28, 28), 10, seed=0)
x = np.random.default_rng(0).random((64, 1, 28, 28), dtype=np.float32)
want = net.through(x.copy(), False, inference=True).copy()
for _ in range(5):
    out = net.forward(x)
assert np.array_equal(out, want)
assert net._inference(x.shape, None).team and team.bound_runtime() == {str(decoy)!r}, team.bound_runtime()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_forked_child_does_not_use_team_regions():
    """GNU OpenMP's threads do not survive a fork: a child process makes no team and replays the
    programs it inherited."""
    import multiprocessing

    team = _team_or_skip()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply(team.available) is False
        assert pool.apply(team.forked) is True  # a program made before the fork replays there
    assert team.available() and not team.forked()


class _GraphBackend:
    """A backend stand-in for DeviceRuns: ``graph`` returns a graph that counts its launches
    (capturing records the work, it does not run it), or refuses like a driver."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.captures = 0
        self.syncs = 0

    def graph(self, fn, keep=None):
        from numbacnn.backend.base import GraphError

        self.captures += 1
        if self.refuse:
            raise GraphError("cuGraphInstantiate failed: CUDA_ERROR_TEST")

        class Graph:
            launches = 0

            def launch(self):
                Graph.launches += 1

        return Graph()

    def synchronize(self):
        self.syncs += 1


def test_device_runs_go_through_the_layers_once_then_as_one_graph():
    """The first run calls the work itself, the second captures it (without running it: the graph
    launch runs it), later runs only launch; each run waits for the device."""
    from numbacnn.runtime.program import DeviceRuns

    be, ran = _GraphBackend(), []
    runs = DeviceRuns(be, lambda: ran.append(1))
    runs()
    assert (len(ran), be.captures, runs.graph) == (1, 0, None)
    runs()
    runs()
    assert (len(ran), be.captures, type(runs.graph).launches, be.syncs) == (1, 1, 2, 3)


def test_a_refused_capture_warns_and_runs_launch_by_launch():
    from numbacnn.runtime.program import DeviceRuns

    be, ran = _GraphBackend(refuse=True), []
    runs = DeviceRuns(be, lambda: ran.append(1))
    runs()
    with pytest.warns(RuntimeWarning, match="CUDA_ERROR_TEST.*launch by launch"):
        runs()
    runs()
    assert (len(ran), be.captures, runs.graph) == (3, 1, False)


@pytest.mark.parametrize("arch", sorted(nc.PRESETS))
def test_every_preset_s_prediction_runs_as_one_team(arch):
    """Every kernel a preset's prediction calls is declared for the team region (``kernel(team=...)``):
    a kernel left out would make that preset's repeated predictions run call by call."""
    _team_or_skip()
    from numbacnn.bench import input_shape

    net = nc.build_network(arch, input_shape(arch), 4, seed=0)
    x = np.random.default_rng(0).random((2, *input_shape(arch)), dtype=np.float32)
    for _ in range(4):
        net.forward(x)
    program = net._inference(x.shape, None)
    from numbacnn.kernels import cpu as K

    left = sorted({fn.py_func.__name__ for fn, _ in getattr(program, "calls", [])
                   if fn not in K.TEAM_BLOCKS and fn not in K.TEAM_SERIAL})
    assert program.team, f"{arch}: kernels without a team form: {left}"
