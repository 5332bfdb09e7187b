"""The benchmark tool: FLOP counts against a hand count, and a tiny end-to-end run to JSON."""
import json

import numpy as np
import pytest

import numbacnn as nc
from numbacnn import bench


def test_flops_per_image_match_a_hand_count():
    net = nc.build_network("lenet5", (1, 28, 28), 10, seed=0)
    conv1 = 2 * 6 * 1 * 5 * 5 * 24 * 24
    conv2 = 2 * 16 * 6 * 5 * 5 * 8 * 8
    dense = 2 * 256 * 120 + 2 * 120 * 10
    fwd = conv1 + conv2 + dense
    # training: forward, weight gradients and input gradients, minus the first layer's input gradient
    assert bench.flops_per_image(net) == (fwd, 3 * fwd - conv1)


def test_the_fma_loop_computes_the_64_fmas_per_element_it_counts():
    """The peak loop's arithmetic against a float64 transcription (so the FLOPs it counts are done,
    not folded away), and the peak is a positive number."""
    x = np.linspace(0.1, 0.9, 37, dtype=np.float32)[None]
    want = x.astype(np.float64)[0].copy()
    for _ in range(3):
        v = want
        a = [v + 0.001, v + 0.5, v - 0.001, v - 0.5, v * 0.5, v * 0.001, v + v, v * v]
        for _k in range(8):
            a = [ai * v + 0.5 for ai in a]
        want = v * 0.5 + 0.001 * (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])))
    bench._fma_chains(x, 3)
    np.testing.assert_allclose(x[0], want, rtol=1e-5)
    assert bench.fma_peak(1, seconds=0.01, repeats=1) > 0


def test_time_block_counts_calls_per_second():
    import time

    rate = bench._time_block(lambda: time.sleep(0.01), 0.1)  # each call takes at least 10 ms
    assert 10 < rate <= 100


def test_bench_runs_end_to_end_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--nets", "lenet5", "--batches", "8", "--threads", "1,2", "--rounds", "1",
                       "--scaling-rounds", "3", "--block", "0.01", "--no-torch", "--no-startup",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["results"]
    assert [(r["net"], r["batch"], r["threads"]) for r in rows] == [("lenet5", 8, 1), ("lenet5", 8, 2)]
    for r in rows:
        assert r["train_img_s"] > 0 and r["infer_img_s"] > 0
        assert abs(r["train_gflops"] - r["train_img_s"] * r["flops_train_per_image"] / 1e9) < 1e-6
        assert r["matmul_peak_gflops"] > 0
        assert abs(r["train_fraction_of_peak"] - r["train_gflops"] / r["matmul_peak_gflops"]) < 1e-9
        assert abs(r["train_fraction_of_fma_peak"] - r["train_gflops"] / r["fma_peak_gflops"]) < 1e-9
        assert abs(r["infer_ms_per_batch"] - 1e3 * 8 / r["infer_img_s"]) < 1e-9
        try:  # onnxruntime runs the exported model beside ours when it is installed
            import onnxruntime  # noqa: F401
            assert r["onnx_infer_img_s"] > 0 and r["onnx_infer_ratio"] > 0
        except ImportError:
            assert "onnx_infer_img_s" not in r
    rounds = data["thread_scaling_rounds"]["lenet5"]["8"]
    assert len(rounds) == 3 and all(r > 0 for r in rounds)
    assert data["thread_scaling"]["lenet5"]["8"] == sorted(rounds)[1]  # the median
    # the batch-1 step beside its kernels alone: the recorded step's calls and the optimizer's one
    over = data["step_overhead"]
    assert over["step_us"] > 0 and over["kernels_us"] > 0
    assert abs(over["rest_us"] - (over["step_us"] - over["kernels_us"])) < 1e-9
    net = nc.build_network("lenet5", (1, 28, 28), 10, seed=0)
    tr = nc.Trainer(net, nc.SGD(net, lr=0.01, momentum=0.9), batch_size=1, progress=False)
    tr.train_step(np.zeros((1, 1, 28, 28), np.float32), np.zeros(1, np.int64))
    program = tr._program(np.zeros((1, 1, 28, 28), np.float32), np.zeros(1, np.int64), np.arange(1))
    assert over["calls"] == len(program.calls) + 1
    out = capsys.readouterr().out
    assert "per-step overhead (lenet5, batch 1, 1 thread): a training step" in out
    assert "lenet5" in out and "training speed-up, 2 threads over 1 (measured" in out
    from numbacnn.precision import describe_unit  # the CPU and the bf16 unit that ran, in the first line

    first = out.splitlines()[0]
    assert first.startswith("CPU: ") and first.endswith(describe_unit("bf16")), first
    assert data["cpu"] == bench.cpu_line() and data["bf16_unit"] == describe_unit("bf16")
    assert "modelled" not in json.dumps(data).lower()  # measured numbers only


@pytest.mark.parametrize("args, names", [
    (["--threads", "a"], "--threads"), (["--threads", "0"], "--threads"),
    (["--threads", "1,999"], "NUMBA_NUM_THREADS"), (["--batches", "x"], "--batches"),
    (["--batches", "8,-1"], "--batches"), (["--rounds", "0"], "--rounds"),
    (["--block", "inf"], "--block"), (["--scaling-rounds", "x"], "--scaling-rounds"),
    (["--nets", "lenet5,foo"], "'foo'"),
])
def test_bad_arguments_get_one_line_errors(args, names, capsys):
    """Before: a traceback for a non-integer list, and threads above numba's limit silently ran at
    the limit while the table (and PyTorch) said otherwise."""
    with pytest.raises(SystemExit) as e:
        bench.main(args + ["--no-torch", "--no-onnx", "--no-startup"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert names in err[-1] and "Traceback" not in "".join(err)


def test_inference_is_timed_after_its_team_region_is_built(monkeypatch):
    """The prediction builds its one-region team at its (TEAM_AFTER + 1)-th run (40-50 ms, seconds
    where its code is not cached): the warm-up runs past it, so no timed block pays for it (seen on a
    16-core machine with a cold cache: the first configuration's inference read 3-4x slow)."""
    seen = []
    timed = bench._time_block

    def check(fn, seconds):
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, bench._Ours) and fn.__name__ == "infer":
            programs = owner.net.__dict__.get("_programs", {})
            seen.append([p.team is not None for p in programs.values()])
        return timed(fn, seconds)

    monkeypatch.setattr(bench, "_time_block", check)
    bench.bench_config("lenet5", 4, 1, 1, 0.01, use_torch=False)
    assert seen == [[True]]


def test_fractions_of_the_host_peak_print_as_a_dash_where_there_are_none():
    """A GPU row has no fraction of the host CPU's FMA peak: its column shows "-", not 1613 %."""
    from numbacnn.bench import _percent

    assert _percent(None) == "    -"
    assert _percent(0.6543) == " 65.4"


def test_pytorch_s_training_peer_is_the_faster_of_its_two_layouts(monkeypatch):
    """Training is compared with PyTorch in NCHW and in channels_last (the model's weights and the
    batch in NHWC memory; the same outputs), round by round against the faster of the two; bf16
    autocast in channels_last is timed too and reported with its own ratio."""
    torch = pytest.importorskip("torch")
    ours = bench._Ours("lenet5", 4)
    nchw, cl = bench._Torch(ours.net, 4), bench._Torch(ours.net, 4, channels_last=True)
    layouts = [(m.weight.is_contiguous(), m.weight.is_contiguous(memory_format=torch.channels_last))
               for m in cl.net.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1]
    assert layouts == [(False, True)]  # lenet5's second convolution (its first reads one channel)
    with torch.no_grad():
        torch.testing.assert_close(cl.net(cl.x), nchw.net(nchw.x), rtol=1e-5, atol=1e-5)
    # ours, NCHW, channels_last, channels_last with bf16 autocast; 2 rounds
    rates = iter([100.0, 50.0, 80.0, 40.0, 100.0, 90.0, 60.0, 200.0])

    def timed(fn, seconds):
        owner = getattr(fn, "__self__", None)
        return next(rates) if isinstance(owner, (bench._Ours, bench._Torch)) and \
            getattr(fn, "__name__", "") == "train_step" else 1.0

    monkeypatch.setattr(bench, "_time_block", timed)
    from numbacnn.runtime import config as _config

    before = (_config.get_num_threads(), torch.get_num_threads(), _config.default_threads())
    r = bench.bench_config("lenet5", 4, 1, 2, 0.01, use_torch=True, fma_gflops=1.0)
    # one thread inside, the counts as they were after: PyTorch's wheels can share numba's libgomp,
    # whose omp_set_num_threads numbacnn's default follows
    assert (_config.get_num_threads(), torch.get_num_threads(), _config.default_threads()) == before
    assert r["torch_train_img_s"] == r["torch_cl_train_img_s"] == pytest.approx(4 * 70.0)  # medians
    assert r["train_ratio"] == pytest.approx((100 / 80 + 100 / 90) / 2)  # the faster layout changed
    assert r["train_ratio_nchw"] == pytest.approx((100 / 50 + 100 / 90) / 2)
    # the bf16 arm beside, its own ratio (numbacnn trains in float32)
    assert r["torch_bf16_train_img_s"] == pytest.approx(4 * 120.0)
    assert r["train_ratio_bf16"] == pytest.approx((100 / 40 + 100 / 200) / 2)


def test_pytorch_s_airbench94_loop_freezes_groups_and_schedules_as_numbacnn_s_recipe(rng):
    """benchmarks/recipe_torch.py, the PyTorch side of the whole-run comparison: the same initial
    weights, frozen parameters (whitening weight, BatchNorm scales; the whitening bias after 3
    epochs) left unchanged, the learning rates of numbacnn's recipe for the summed loss, Lookahead
    from the 4th epoch."""
    torch = pytest.importorskip("torch")
    import importlib.util
    import pathlib

    from numbacnn.recipes import airbench94_network, airbench94_optimizer

    path = pathlib.Path(__file__).parent.parent / "benchmarks" / "recipe_torch.py"
    spec = importlib.util.spec_from_file_location("recipe_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = rng.random((64, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, 10, 64)
    torch.manual_seed(0)
    run = mod.TorchAirbench94(torch, x, y, seed=0, layout="nchw", batch=16)
    net = airbench94_network(x, 10, seed=0)
    twin = {k: v.detach().numpy().reshape(-1) for k, v in run.model.state_dict().items()}
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(twin[k], v.reshape(-1), err_msg=k)
    frozen = {k for k, _ in net.param_slices() if net.is_frozen(k)}
    assert frozen == {k for k, p in run.model.named_parameters() if not p.requires_grad}
    opt = airbench94_optimizer(net)
    batch = 1024  # numbacnn's recipe takes the mean loss: its rates over the batch are the summed loss's
    assert [g["lr"] for g in run.opt.param_groups] == pytest.approx([opt.lr / batch * 64, opt.lr / batch])
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    assert "1.bias" in before and run.whiten is list(run.model)[1]
    assert (run.per_epoch, run.total) == (4, 40)  # batches of 16: four steps an epoch
    run.train(12)  # three epochs: the whitening bias trains in them, and no more
    bias = run.whiten.bias.detach().clone()
    assert not torch.equal(bias, before["1.bias"])
    run.train(14)
    assert run.slow is None  # the 4th epoch starts at step 13: the first synchronisation is the 15th
    run.train(15)
    assert run.slow is not None
    run.train()
    after = run.model.state_dict()
    for k, _ in run.model.named_parameters():
        changed = not torch.equal(before[k], after[k])
        assert changed == (k not in frozen), k
    assert [g["lr"] for g in run.opt.param_groups] == pytest.approx(
        [opt.lr / batch * 64 * mod.triangle(39, 40), opt.lr / batch * mod.triangle(39, 40)])
    assert torch.equal(run.whiten.bias, bias)
