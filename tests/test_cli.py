"""The command line: every flag's happy path on tiny data, metrics JSON, save/resume/evaluate round
trips, exit codes and one-line errors, interruption and divergence."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import MNIST_DIR, ROOT, tiny_npz

import numbacnn as nc
from numbacnn.cli import main
from numbacnn.data import write_idx
from numbacnn.runtime import config as _config

TINY = ["--quiet", "--arch", "conv(4,3,padding=same),relu,maxpool(2),dense(16),relu", "--epochs", "2",
        "--lr-schedule", "constant"]


@pytest.fixture
def npz(tmp_path):
    return tiny_npz(tmp_path / "tiny.npz", 120)


@pytest.mark.slow
def test_default_digits_run_reaches_98_percent(tmp_path):
    """The README's digits row: seeds 0-2 reach 98 % in the median (360 test images: a seed may
    land 2-3 images either side)."""
    accuracies = []
    for seed in (0, 1, 2):
        out = tmp_path / f"m{seed}.json"
        assert main(["--quiet", "--seed", str(seed), "--metrics-out", str(out)]) == 0
        m = json.loads(out.read_text())
        accuracies.append(m["test_accuracy"])
    assert m["dataset"] == "digits" and sorted(accuracies)[1] >= 0.98 and min(accuracies) >= 0.97, accuracies
    # the documented digits recipe: adam 2e-3, batch 16, 25 epochs, constant schedule
    assert (m["optimizer"], m["hyperparameters"]["lr"], m["batch_size"], len(m["epochs"]),
            m["lr_schedule"], m["seed"]) == ("adam", 2e-3, 16, 25, "constant", 2)


def test_flags_and_metrics_schema(tmp_path, npz, capsys):
    out = tmp_path / "m.json"
    for opt in (["--optimizer", "sgd", "--momentum", "0.8", "--nesterov", "--weight-decay", "1e-4"],
                ["--optimizer", "rmsprop", "--lr", "0.002"], ["--optimizer", "adam"]):
        rc = main(TINY + ["--data", npz, "--batch-size", "16", "--seed", "3", "--threads", "1",
                          "--val-size", "0.2", "--test-size", "0.25", "--metrics-out", str(out)] + opt)
        assert rc == 0
        m = json.loads(out.read_text())
        assert set(m) >= {"dataset", "architecture", "optimizer", "test_accuracy", "epochs"}
        assert m["optimizer"] == opt[1] and len(m["epochs"]) == 2
        for e in m["epochs"]:
            assert set(e) >= {"epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
                              "seconds", "images_per_second", "val_accuracy"}
        assert m["test_accuracy"] == m["epochs"][-1]["test_accuracy"]
    nc.set_num_threads(None)
    out = capsys.readouterr().out.splitlines()  # --quiet prints the result line only
    assert len(out) == 3 and all(line.startswith("done: test accuracy ") for line in out), out


def test_progress_output_has_epoch_summary(npz, capsys):
    assert main(TINY[1:] + ["--data", npz]) == 0
    out = capsys.readouterr()
    assert "epoch 2/2: train loss" in out.out and "img/s" in out.out


def test_same_seed_same_numbers(tmp_path, npz):
    runs = []
    for i in range(2):
        out = tmp_path / f"m{i}.json"
        assert main(TINY + ["--data", npz, "--metrics-out", str(out)]) == 0
        m = json.loads(out.read_text())
        runs.append([(e["train_loss"], e["test_loss"]) for e in m["epochs"]])
    assert runs[0] == runs[1]


def test_save_evaluate_and_resume_round_trip(tmp_path, npz, capsys):
    ck = str(tmp_path / "ck.npz")
    assert main(TINY + ["--data", npz, "--save", ck]) == 0
    net = nc.load(ck)
    assert net.architecture == TINY[2] and net.input_shape == (1, 8, 8)
    capsys.readouterr()
    assert main(["--evaluate", ck, "--data", npz]) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "confusion matrix" in out
    # resume to 4 epochs = an uninterrupted 4-epoch run, bit for bit
    assert main(TINY[:3] + ["--epochs", "4", "--data", npz, "--resume", ck, "--quiet"]) == 0
    full = str(tmp_path / "full.npz")
    assert main(TINY[:3] + ["--epochs", "4", "--data", npz, "--save", full,
                            "--lr-schedule", "constant"]) == 0
    a, b = nc.load_checkpoint(ck), nc.load_checkpoint(full)
    np.testing.assert_array_equal(a.net.params, b.net.params)
    for k in a.optimizer_state:
        np.testing.assert_array_equal(a.optimizer_state[k], b.optimizer_state[k])


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_trainer_interrupted_mid_epoch_resumes_bitwise(tmp_path, schedule):
    """Stop after step 7 of epoch 2, save, reload into fresh objects, finish: same weights."""
    rng = np.random.default_rng(0)
    x = rng.random((100, 1, 8, 8)).astype(np.float32)
    y = np.arange(100) % 4
    spec = "conv(3,3),relu,dropout(0.3),dense(8),relu"

    def fresh():
        net = nc.build_network(spec, (1, 8, 8), 4, seed=1)
        opt = nc.SGD(net, lr=0.05, momentum=0.9)
        return net, opt, nc.Trainer(net, opt, batch_size=16, seed=2, progress=False,
                                    lr_schedule=schedule)

    net, opt, tr = fresh()
    tr.fit(x, y, 3)
    reference = net.params.copy()

    net, opt, tr = fresh()
    ck = str(tmp_path / "int.npz")
    orig = opt.step

    def step():  # the signal arrives during step 3 of epoch 2 (7 steps per epoch)
        orig()
        if opt.step_count == 7 + 3:
            tr.stop_signal = signal.SIGINT

    opt.step = step
    with pytest.raises(nc.TrainingInterrupted):
        tr.fit(x, y, 3)
    assert tr.epoch == 1 and tr._step == 3
    nc.save(net, ck, optimizer=opt, training={"trainer": tr.state()})
    ckpt = nc.load_checkpoint(ck)
    net2 = ckpt.net
    opt2 = nc.SGD(net2, lr=0.05, momentum=0.9)
    opt2.load_state_dict({"step": ckpt.optimizer["step"], **ckpt.optimizer_state})
    tr2 = nc.Trainer(net2, opt2, batch_size=16, seed=999, progress=False)  # state restores the rest
    tr2.load_state(ckpt.meta["training"]["trainer"])
    tr2.fit(x, y, 3)
    np.testing.assert_array_equal(net2.params, reference)


@pytest.mark.parametrize("argv,msg", [
    (["--lr", "0"], "--lr: '0' must be > 0"),
    (["--lr", "-1"], "--lr"),
    (["--batch-size", "0"], "--batch-size"),
    (["--epochs", "-3"], "--epochs"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--optimizer", "lbfgs"], "invalid choice"),
    (["--arch", "conv(8,3),relu,maxpol(2)"], "unknown layer 'maxpol' at token 3"),
    (["--metrics-out", "/nonexistent-dir/m.json"], "cannot write /nonexistent-dir/m.json"),
    (["--save", "/nonexistent-dir/c.npz"], "cannot write"),
    (["--data", "/nonexistent/mnist"], "--data: /nonexistent/mnist: no such file or directory"),
    (["--resume", "/nonexistent/ck.npz"], "--resume: /nonexistent/ck.npz: no such file"),
])
def test_bad_arguments_exit_2_with_one_line(argv, msg, capsys):
    assert main(argv + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1, err


def test_bad_data_exits_1_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "t10k-images-idx3-ubyte"
    bad.write_bytes(b"\x00\x00\x08\x03\x00")
    assert main(["--quiet", "--data", str(bad), "--labels", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "t10k-images-idx3-ubyte" in err and "Traceback" not in err


def test_resume_with_other_arch_is_explained(tmp_path, npz, capsys):
    ck = str(tmp_path / "ck.npz")
    assert main(TINY + ["--data", npz, "--save", ck]) == 0
    assert main(["--quiet", "--data", npz, "--resume", ck, "--arch", "lenet5"]) == 1
    assert "cannot resume with --arch 'lenet5'" in capsys.readouterr().err


def test_divergence_stops_with_advice_and_keeps_last_checkpoint(tmp_path, npz, capsys):
    ck = tmp_path / "ck.npz"
    assert main(TINY + ["--data", npz, "--save", str(ck)]) == 0
    before = ck.read_bytes()
    rc = main(TINY[:3] + ["--epochs", "3", "--quiet", "--data", npz, "--optimizer", "sgd", "--lr",
                          "1e30", "--save", str(ck)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "diverged" in err and "lower learning rate" in err
    assert ck.read_bytes() == before


@pytest.mark.slow
def test_sigint_saves_resumable_checkpoint_and_resume_matches(tmp_path):
    """A real Ctrl-C in a child process: exit 130, a checkpoint, and a resume that equals a full run."""
    ck = tmp_path / "ck.npz"
    args = [sys.executable, os.path.join(ROOT, "train.py"), "--quiet", "--epochs", "200",
            "--arch", "conv(4,3),relu,dense(16),relu", "--batch-size", "8", "--threads", "2"]
    proc = subprocess.Popen(args + ["--save", str(ck)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "resumable checkpoint saved" in err and "Traceback" not in err
    state = nc.load_checkpoint(str(ck)).meta["training"]["trainer"]
    done_epochs = state["epoch"]
    assert done_epochs < 200
    target = str(done_epochs + 2)
    r = subprocess.run(args[:3] + ["--epochs", target] + args[5:] + ["--resume", str(ck)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    full = tmp_path / "full.npz"
    r = subprocess.run(args[:3] + ["--epochs", target] + args[5:] + ["--save", str(full)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(nc.load(str(ck)).params, nc.load(str(full)).params)


def test_python_dash_m_entry_point(npz):
    r = subprocess.run([sys.executable, "-m", "numbacnn", "--lr", "-2"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--lr" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(MNIST_DIR), reason="shared MNIST test set not present")
def test_short_real_mnist_run(tmp_path):
    out = tmp_path / "m.json"
    assert main(["--quiet", "--data", MNIST_DIR, "--epochs", "1", "--metrics-out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["test_accuracy"] > 0.9, m["test_accuracy"]


def test_idx_file_with_labels_flag(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (40, 6, 6), dtype=np.uint8)
    write_idx(str(tmp_path / "imgs.idx3"), x)
    write_idx(str(tmp_path / "labs.idx1"), np.arange(40) % 2)
    assert main(TINY + ["--data", str(tmp_path / "imgs.idx3"), "--labels",
                        str(tmp_path / "labs.idx1")]) == 0


def _api_run(npz, arch, opt_cls, opt_kwargs, batch_size, epochs, schedule, seed=0):
    """What the CLI should do, written with the Python API: the same split, network, optimizer,
    batch order and schedule; returns the final flat parameters."""
    ds = nc.load_dataset(npz, test_size=0.2, seed=seed)
    net = nc.build_network(arch, ds.input_shape, ds.n_classes, seed=seed)
    opt = opt_cls(net, **opt_kwargs)
    nc.Trainer(net, opt, batch_size=batch_size, seed=seed, progress=False,
               lr_schedule=schedule).fit(ds.x_train, ds.y_train, epochs)
    return net.params


@pytest.mark.parametrize("flags,opt_cls,opt_kwargs", [
    (["--optimizer", "sgd", "--momentum", "0.8", "--nesterov", "--weight-decay", "1e-2", "--lr", "0.03"],
     nc.SGD, dict(lr=0.03, momentum=0.8, nesterov=True, weight_decay=1e-2)),
    (["--optimizer", "rmsprop", "--momentum", "0.5", "--weight-decay", "1e-2"],
     nc.RMSProp, dict(lr=1e-3, momentum=0.5, weight_decay=1e-2)),
    (["--optimizer", "adam", "--weight-decay", "1e-2", "--lr", "0.004"],
     nc.Adam, dict(lr=0.004, weight_decay=1e-2)),
    (["--optimizer", "sgd"], nc.SGD, dict(lr=0.05, momentum=0.9)),  # the documented defaults
    (["--optimizer", "rmsprop"], nc.RMSProp, dict(lr=1e-3)),
])
def test_optimizer_flags_and_defaults_reach_the_optimizer(tmp_path, npz, flags, opt_cls, opt_kwargs):
    """The CLI's weights equal, bit for bit, a Python API run with the settings the flags name."""
    ck = str(tmp_path / "ck.npz")
    assert main(TINY + ["--data", npz, "--batch-size", "16", "--save", ck] + flags) == 0
    expect = _api_run(npz, TINY[2], opt_cls, opt_kwargs, 16, 2, "constant")
    np.testing.assert_array_equal(nc.load(ck).params, expect)


def test_defaults_for_non_digits_data(tmp_path, npz):
    """No training flags on other data: adam 2e-3, batch 64, 10 epochs, cosine schedule."""
    ck, out = str(tmp_path / "ck.npz"), tmp_path / "m.json"
    assert main(["--quiet", "--arch", TINY[2], "--data", npz, "--save", ck,
                 "--metrics-out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert (m["batch_size"], len(m["epochs"]), m["lr_schedule"], m["optimizer"]) == (64, 10, "cosine", "adam")
    assert m["hyperparameters"]["lr"] == 2e-3 and m["seed"] == 0
    expect = _api_run(npz, TINY[2], nc.Adam, dict(lr=2e-3), 64, 10, "cosine")
    np.testing.assert_array_equal(nc.load(ck).params, expect)


def test_threads_flag_gives_identical_numbers(tmp_path, npz):
    runs = []
    for threads in ("1", "2"):
        ck, out = str(tmp_path / f"ck{threads}.npz"), tmp_path / f"m{threads}.json"
        assert main(TINY + ["--data", npz, "--threads", threads, "--save", ck,
                            "--metrics-out", str(out)]) == 0
        m = json.loads(out.read_text())
        # an explicit --threads runs that many, up to numba's thread ids (whatever the default:
        # OMP_NUM_THREADS, the CPU affinity)
        assert m["threads"] == min(int(threads), _config.max_threads())
        runs.append((nc.load(ck).params, [(e["train_loss"], e["test_loss"]) for e in m["epochs"]]))
    nc.set_num_threads(None)
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_interrupted_cosine_run_resumes_bitwise(tmp_path, npz, monkeypatch):
    """Stop a 4-epoch cosine run after epoch 2 (as Ctrl-C would), resume it from its checkpoint: the
    weights equal an uninterrupted run's. The resumed optimizer is built from the checkpoint, whose
    lr is already annealed, so the schedule's base lr must come from the checkpoint too."""
    args = TINY[:3] + ["--epochs", "4", "--lr-schedule", "cosine", "--data", npz]
    full = str(tmp_path / "full.npz")
    assert main(args + ["--save", full]) == 0

    orig = nc.Trainer.train_epoch

    def stop_after_epoch_2(self, *a, **k):
        stats = orig(self, *a, **k)
        if self.epoch == 2:
            self.stop_signal = signal.SIGINT
        return stats
    monkeypatch.setattr(nc.Trainer, "train_epoch", stop_after_epoch_2)
    ck = str(tmp_path / "ck.npz")
    assert main(args + ["--save", ck]) == 130
    assert nc.load_checkpoint(ck).meta["training"]["trainer"]["epoch"] == 2
    monkeypatch.setattr(nc.Trainer, "train_epoch", orig)
    assert main(["--quiet", "--data", npz, "--resume", ck]) == 0
    np.testing.assert_array_equal(nc.load(ck).params, nc.load(full).params)


def test_resume_refuses_other_batch_size_seed_or_data(tmp_path, npz, capsys):
    ck = str(tmp_path / "ck.npz")
    assert main(TINY + ["--data", npz, "--save", ck, "--seed", "3"]) == 0
    before = open(ck, "rb").read()
    capsys.readouterr()
    other = tmp_path / "other.npz"
    with np.load(npz) as f:
        x, y = f["x"].copy(), f["y"].copy()
    x[5, 0, 0] += 1  # one pixel differs
    np.savez(other, x=x, y=y)
    for argv, msg in [(["--batch-size", "32"], "was trained with --batch-size 64, cannot resume with 32"),
                      (["--seed", "4"], "was trained with --seed 3, cannot resume with 4"),
                      (["--data", str(other)], "was trained on other data")]:
        data = [] if "--data" in argv else ["--data", npz]
        assert main(["--quiet", "--resume", ck, "--epochs", "3"] + data + argv) == 1
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, err
    assert open(ck, "rb").read() == before  # nothing the user saved is touched
    assert main(["--quiet", "--resume", ck, "--epochs", "3", "--data", npz, "--seed", "3"]) == 0


def test_evaluate_prints_the_checkpoints_numbers(tmp_path, npz, capsys):
    from sklearn.metrics import confusion_matrix

    ck = str(tmp_path / "ck.npz")
    assert main(TINY + ["--data", npz, "--save", ck]) == 0
    capsys.readouterr()
    assert main(["--evaluate", ck, "--data", npz]) == 0
    lines = capsys.readouterr().out.splitlines()
    net, ds = nc.load(ck), nc.load_dataset(npz, test_size=0.2, seed=0)
    loss, acc = nc.evaluate(net, ds.x_test, ds.y_test)
    assert f"loss {loss:.4f}, accuracy {acc:.4f}" in lines[0] and f"({len(ds.y_test)} images)" in lines[0]
    printed = np.array([[int(v) for v in row.split()[1:]] for row in lines[3:]])
    np.testing.assert_array_equal(printed, confusion_matrix(ds.y_test, net.predict(ds.x_test)))


def test_auto_architecture_is_compact_up_to_16x16_and_modern_above():
    from numbacnn.arch import PRESETS

    for shape, preset in [((1, 8, 8), "compact"), ((1, 16, 16), "compact"), ((3, 16, 17), "modern"),
                          ((1, 28, 28), "modern")]:
        auto = nc.build_network("auto", shape, 10, seed=0)
        named = nc.build_network(PRESETS[preset], shape, 10, seed=0)
        assert repr(auto) == repr(named), (shape, preset)


def test_a_log_file_gets_lines_not_progress_bar_refreshes(tmp_path, npz):
    """``train.py > log.txt 2>&1``: no tqdm refreshes (carriage returns), a few lines per epoch."""
    log = tmp_path / "log.txt"
    argv = [a for a in TINY if a != "--quiet"]
    with open(log, "wb") as f:
        r = subprocess.run([sys.executable, "train.py", "--data", npz, *argv, "--batch-size", "8"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=300, cwd=ROOT)
    text = log.read_text()
    assert r.returncode == 0, text
    assert "\r" not in text  # tqdm redraws with carriage returns
    lines = text.strip().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("training step at batch"))
    epochs = [ln for ln in lines if ln.startswith("epoch ")]
    # after the summary: 12 steps an epoch, a line each; the final line
    assert len(epochs) == 2 and len(lines) - start - 1 <= 2 * 2 + 1, text


def _cli(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "numbacnn", *argv], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, **kw)


@pytest.mark.slow
def test_help_lists_the_subcommands_and_their_errors_name_them():
    for argv in (["--help"], ["help"]):
        r = _cli(*argv)
        assert r.returncode == 0 and "--epochs" in r.stdout, r.stderr
        for command in ("summary", "find-lr", "predict", "export", "report"):
            assert f"\n  {command} " in r.stdout, (command, r.stdout[-800:])
    r = _cli("help", "predict")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m numbacnn predict")
    r = _cli("predict")
    assert r.returncode == 2 and r.stderr.startswith("python -m numbacnn predict: error: "), r.stderr


def test_files_that_are_not_what_they_claim_get_one_line_naming_what_they_look_like(tmp_path, capsys):
    noise = tmp_path / "noise.npz"
    noise.write_bytes(np.random.default_rng(0).bytes(3000))
    text = tmp_path / "notes.txt"
    text.write_text("label,pixels\nnot an image file\n")
    ck = tmp_path / "ck.npz"
    assert main(TINY + ["--data", tiny_npz(tmp_path / "t.npz", 60), "--save", str(ck)]) == 0
    capsys.readouterr()
    cases = [(["--data", str(noise)], "not an .npz file", "binary data"),
             (["--evaluate", str(noise)], "not a numbacnn checkpoint", "binary data"),
             (["--data", str(text)], "not a data file numbacnn reads", "a text file")]
    for argv, what, seen in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and what in err and seen in err and "pickle" not in err, err
    r = _cli("predict", str(ck), str(text), str(noise))
    assert r.returncode == 1 and "pickle" not in r.stderr and "Traceback" not in r.stderr
    assert f"{text}: not an IDX file" in r.stderr and "it looks like a text file" in r.stderr, r.stderr


@pytest.mark.slow
def test_predict_refuses_pixels_on_a_scale_of_their_own(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert main(TINY + ["--data", tiny_npz(tmp_path / "t.npz", 60), "--save", str(ck)]) == 0
    raw = np.random.default_rng(0).integers(0, 17, (8, 8)).astype(np.float64)  # sklearn digits, 0-16
    for scale, ok in ((1.0, False), (1 / 16, True), (255 / 16, True)):
        np.save(tmp_path / "x.npy", raw * scale)
        r = _cli("predict", str(ck), str(tmp_path / "x.npy"))
        assert (r.returncode == 0) == ok, (scale, r.stderr)
        if not ok:
            assert "pixel values reach only 16" in r.stderr and "divide by 16" in r.stderr


def test_resume_past_its_epochs_says_nothing_was_trained(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    data = tiny_npz(tmp_path / "t.npz", 60)
    assert main(TINY + ["--data", data, "--save", str(ck)]) == 0
    assert "after 2 epochs" in capsys.readouterr().out
    before = ck.read_bytes()
    assert main([*TINY[:-2], "--epochs", "1", "--lr-schedule", "constant", "--data", data,
                 "--resume", str(ck)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to train: ") and "holds 2 epochs" in out and "done:" not in out, out
    assert ck.read_bytes() == before  # the checkpoint is not rewritten


def test_a_closed_pipe_ends_the_run_quietly():
    r = subprocess.run(f"{sys.executable} train.py --epochs 2 | head -1", shell=True, capture_output=True,
                       text=True, timeout=300, cwd=ROOT, executable="/bin/bash")
    assert r.stdout.startswith("numbacnn: digits:") and r.stderr == "", r.stderr
