"""Your own data: image folders (decoding, cache, skipped pictures, layouts), CIFAR-10 batches,
class names through checkpoints, evaluation, prediction, the report and ONNX, per-channel
normalisation (the Normalize layer against its oracle), the model summary, and the estimator's
channels-last input."""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest
import reference as ref
from conftest import ROOT, f32
from test_gradients import numeric_grad

import numbacnn as nc
from numbacnn.cli import main
from numbacnn.data import DataError, load_dataset
from numbacnn.data import folders as F
from numbacnn.data.cifar import CLASSES as CIFAR_CLASSES

Image = pytest.importorskip("PIL.Image")
CLASSES = ["blue dot", "green stripes", "red square"]  # sorted, as the folders are read


def make_folder(root, n_per_class=60, split=False, size=16, seed=0):
    """Colour PNGs in 3 classes (a red square, green stripes or a blue dot over noise)."""
    rng = np.random.default_rng(seed)
    for k, name in enumerate(CLASSES):
        for part in (["train", "test"] if split else [""]):
            d = os.path.join(root, part, name)
            os.makedirs(d, exist_ok=True)
            for i in range(n_per_class if part != "test" else n_per_class // 4):
                a = rng.integers(0, 80, (size, size, 3)).astype(np.uint8)
                if k == 2:
                    y0, x0 = rng.integers(0, size // 2, 2)
                    a[y0:y0 + size // 2, x0:x0 + size // 2, 0] = 230
                elif k == 1:
                    a[::3, :, 1] = 220
                else:
                    cy, cx = rng.integers(size // 4, 3 * size // 4, 2)
                    yy, xx = np.mgrid[:size, :size]
                    a[(yy - cy) ** 2 + (xx - cx) ** 2 < (size // 5) ** 2, 2] = 240
                Image.fromarray(a).save(os.path.join(d, f"{i:03d}.png"))
    return str(root)


def _cli(*argv, timeout=300):
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


# --- Normalize -------------------------------------------------------------------------------------
def test_normalize_matches_its_oracle_and_finite_differences(rng):
    x = f32(rng.random((3, 3, 5, 7)))
    layer = nc.Normalize.fit(x)
    np.testing.assert_allclose(layer.mean, x.astype(np.float64).mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(layer.std, x.astype(np.float64).std(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(layer.forward(x), ref.normalize(x, layer.mean, layer.std), rtol=1e-6,
                               atol=1e-6)
    r = rng.standard_normal(x.shape)
    dx = layer.backward(f32(r))
    x64 = x.astype(np.float64)
    def f():
        return (ref.normalize(x64, layer.mean, layer.std) * r).sum()
    np.testing.assert_allclose(dx, numeric_grad(f, x64), rtol=1e-5, atol=1e-6)
    flat = np.ones((2, 3, 4, 4), np.float32)  # a constant channel gets std 1, not a division by 0
    assert np.all(nc.Normalize.fit(flat).std == 1.0)
    with pytest.raises(ValueError, match=r"Normalize\(3\): expected input of shape \(N, 3, H, W\)"):
        layer.forward(f32(rng.random((2, 1, 4, 4))))
    with pytest.raises(ValueError, match="std finite and positive"):
        nc.Normalize([0.0], [0.0])


def test_normalize_matches_pytorch_and_trains_the_same_replayed_and_on_any_thread_count(rng):
    torch = pytest.importorskip("torch")
    from numbacnn.bench import torch_twin

    x = f32(rng.random((12, 3, 6, 6)))
    y = rng.integers(0, 3, 12)
    net = nc.build_network("conv(4,3),relu,gap", (3, 6, 6), 3, seed=0, normalize=nc.Normalize.fit(x))
    twin = torch_twin(net)
    xt = torch.from_numpy(x).requires_grad_(True)
    out = twin(xt)
    torch.nn.functional.cross_entropy(out, torch.from_numpy(y)).backward()
    logits = net.forward(x, training=True)
    np.testing.assert_allclose(logits, out.detach().numpy(), rtol=1e-5, atol=1e-6)
    dx = net.backward(nc.softmax_cross_entropy(logits, y)[1])
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-7)
    states = []
    for threads, programs in ((1, True), (2, True), (2, False)):
        nc.set_num_threads(threads)
        n2 = nc.build_network("conv(4,3),relu,gap", (3, 6, 6), 3, seed=0, normalize=nc.Normalize.fit(x))
        tr = nc.Trainer(n2, nc.Adam(n2, lr=0.01), batch_size=5, progress=False, step_programs=programs)
        tr.fit(x, y, 2)
        states.append(n2.state_dict())
    nc.set_num_threads(None)
    for s in states[1:]:
        for k, v in states[0].items():
            np.testing.assert_array_equal(v, s[k], err_msg=k)


# --- image folders -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_image_folder_trains_evaluates_predicts_and_exports_with_class_names(tmp_path):
    """A user's scenario: a few hundred colour PNGs in 3 classes, through the command line."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    data = make_folder(tmp_path / "photos", 80)
    ck, onnx_path = str(tmp_path / "run.npz"), str(tmp_path / "m.onnx")
    r = _cli("train.py", "--data", data, "--epochs", "2", "--save", ck)
    assert r.returncode == 0, r.stderr
    assert "3 classes" in r.stdout and "Normalize(3)" in r.stdout  # the summary's first row
    assert "decoded 240 pictures of 3 classes to 3x16x16" in r.stdout + r.stderr
    assert os.path.exists(str(tmp_path / "photos.numbacnn-cache.npz"))
    ev = _cli("train.py", "--data", data, "--evaluate", ck)
    assert ev.returncode == 0, ev.stderr
    accuracy = float(ev.stdout.split("accuracy ")[1].split()[0])
    assert accuracy >= 0.9, ev.stdout  # three easy patterns
    for k, name in enumerate(CLASSES):
        assert f"  {k} {name}" in ev.stdout  # confusion-matrix rows carry the names
    png = os.path.join(data, "red square", "003.png")
    pr = _cli("-m", "numbacnn", "predict", ck, png)
    assert pr.returncode == 0 and pr.stdout.split("\t")[1] == "red square", pr.stdout + pr.stderr
    ex = _cli("-m", "numbacnn", "export", ck, onnx_path)
    assert ex.returncode == 0, ex.stderr
    net = nc.load(ck)
    assert net.classes == CLASSES and isinstance(net.layers[0], nc.Normalize)
    ds = load_dataset(data, seed=0)
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": ds.x_test})[0], net.forward(ds.x_test),
                               rtol=1e-5, atol=1e-5)
    assert json.loads(session.get_modelmeta().custom_metadata_map["classes"]) == CLASSES


def test_second_load_reads_the_cache_and_a_changed_file_rebuilds_it(tmp_path, monkeypatch):
    data = make_folder(tmp_path / "photos", 40)
    t0 = time.perf_counter()
    first = F.load_image_folder(data)
    t_first = time.perf_counter() - t0

    def no_decoding(*a, **k):
        raise AssertionError("decoded a picture although the cache holds it")
    monkeypatch.setattr(F, "read_picture", no_decoding)
    t0 = time.perf_counter()
    second = F.load_image_folder(data)
    t_second = time.perf_counter() - t0
    assert second.from_cache and not first.from_cache
    np.testing.assert_array_equal(second.x_train, first.x_train)
    np.testing.assert_array_equal(second.y_train, first.y_train)
    assert second.classes == first.classes == CLASSES
    print(f"image folder load: first {t_first * 1e3:.1f} ms, from the cache {t_second * 1e3:.1f} ms "
          f"({t_first / t_second:.0f}x)")
    monkeypatch.undo()
    pic = os.path.join(data, "blue dot", "000.png")
    os.utime(pic, ns=(0, 10**9))  # only the time changes (an editor that keeps the size)
    assert not F.load_image_folder(data).from_cache
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(pic)  # same name, new content
    os.utime(pic, ns=(0, 123456789))
    third = F.load_image_folder(data)
    assert not third.from_cache and third.x_train[0].max() == 0
    with open(F.cache_path(data), "wb") as f:
        f.write(b"damaged")  # a damaged cache is rebuilt, never fatal
    assert not F.load_image_folder(data).from_cache


def test_unreadable_pictures_are_skipped_and_counted_and_layout_errors_are_one_line(tmp_path, capsys):
    data = make_folder(tmp_path / "photos", 12)
    with open(os.path.join(data, "red square", "zz-not-a-picture.png"), "wb") as f:
        f.write(b"plain text")
    good = open(os.path.join(data, "green stripes", "000.png"), "rb").read()
    with open(os.path.join(data, "green stripes", "zz-truncated.png"), "wb") as f:
        f.write(good[:len(good) // 2])
    with open(os.path.join(data, "green stripes", "notes.txt"), "w") as f:
        f.write("not a picture: ignored")
    got = F.load_image_folder(data, cache=False)
    assert len(got.x_train) == 36
    assert sorted(os.path.basename(p) for p, _ in got.skipped) == ["zz-not-a-picture.png", "zz-truncated.png"]
    one_pass = F.load_image_folder(data, (16, 16), 3, cache=False)  # size and channels given: no headers
    np.testing.assert_array_equal(one_pass.x_train, got.x_train)
    assert [p for p, _ in one_pass.skipped] == [p for p, _ in got.skipped]
    assert all(p not in why for p, why in one_pass.skipped)  # named once, in the warning
    assert main(["--data", data, "--epochs", "1", "--quiet", "--arch", "dense(8)"]) == 0
    err = capsys.readouterr().err
    assert "warning: skipped 2 unreadable pictures" in err and "zz-truncated.png" in err
    os.makedirs(os.path.join(data, "empty"))
    with pytest.raises(DataError, match=r"empty class folder"):
        F.load_image_folder(data, cache=False)
    one = tmp_path / "one" / "cats"
    one.mkdir(parents=True)
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(one / "a.png")
    with pytest.raises(DataError, match="only one class folder"):
        F.load_image_folder(str(tmp_path / "one"), cache=False)
    (tmp_path / "none").mkdir()
    with pytest.raises(DataError, match="no class folders"):
        F.load_image_folder(str(tmp_path / "none"), cache=False)


def test_train_test_layout_sizes_and_channels(tmp_path):
    data = make_folder(tmp_path / "split", 16, split=True)
    ds = load_dataset(data)
    assert ds.classes == CLASSES and ds.input_shape == (3, 16, 16)
    assert (len(ds.y_train), len(ds.y_test)) == (48, 12)  # the test/ folder, not a random split
    odd = os.path.join(data, "train", "blue dot", "big.png")
    Image.fromarray(np.full((24, 20, 3), 200, np.uint8)).save(odd)  # resized to the common 16x16
    ds = load_dataset(data, image_size=(8, 12), channels=1)
    assert ds.input_shape == (1, 8, 12)
    assert load_dataset(data).input_shape == (3, 16, 16)
    rogue = os.path.join(data, "test", "purple")
    os.makedirs(rogue)
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(os.path.join(rogue, "a.png"))
    with pytest.raises(DataError, match="'purple' is not among the training classes"):
        load_dataset(data)
    grey = tmp_path / "grey"
    for k in range(2):  # grey pictures and a grey palette: one channel by default
        (grey / f"c{k}").mkdir(parents=True)
        Image.fromarray(np.full((6, 6), 40 * k, np.uint8)).save(grey / f"c{k}" / "a.png")
        Image.fromarray(np.full((6, 6), 90, np.uint8)).convert("P").save(grey / f"c{k}" / "b.gif")
    assert load_dataset(str(grey), test_size=0.5).input_shape == (1, 6, 6)


def test_image_options_and_bad_folders_are_one_line_cli_errors(tmp_path, capsys, npz):
    assert main(["--data", npz, "--image-size", "8", "--quiet"]) == 2
    assert "--image-size and --channels apply to image folders" in capsys.readouterr().err
    assert main(["--data", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no class folders of pictures" in err


@pytest.fixture
def npz(tmp_path):
    from conftest import tiny_npz

    return tiny_npz(tmp_path / "tiny.npz", 60)


# --- CIFAR-10 ----------------------------------------------------------------------------------------
def write_cifar(root, parts):
    """A cifar-10-batches-py/ with the official layout (bytes keys, uint8 rows of 3072 values: 1024
    R, 1024 G, 1024 B) from parts [(batch name, rows, labels)]; returns its path."""
    d = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(d)
    for name, data, labels in parts:
        with open(os.path.join(d, name), "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": list(labels),
                         b"data": np.ascontiguousarray(data), b"filenames": [b"x.png"] * len(data)}, f,
                        protocol=2)
    with open(os.path.join(d, "batches.meta"), "wb") as f:
        pickle.dump({b"label_names": [n.encode() for n in CIFAR_CLASSES], b"num_vis": 3072,
                     b"num_cases_per_batch": len(parts[0][1])}, f, protocol=2)
    return d


def make_cifar(root, rows=64, seed=0):
    """write_cifar with fabricated, learnable batches (the label's channel is bright)."""
    rng = np.random.default_rng(seed)
    parts = []
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        labels = rng.integers(0, 10, rows)
        data = rng.integers(0, 60, (rows, 3, 32, 32)).astype(np.uint8)
        data[np.arange(rows), labels % 3, :, :] += 150
        parts.append((name, data.reshape(rows, 3072), labels.tolist()))
    return write_cifar(root, parts)


CIFAR_DEV = os.path.join(ROOT, "..", "shared", "data", "cifar10", "cifar10-dev.npz")


def test_an_archive_in_cifar_s_own_format_gives_the_npz_s_arrays_and_numbers(tmp_path):
    """A cifar-10-python.tar.gz holding the same images as an npz (the official layout: five
    training batches of uint8 rows in R, G, B planes, a test batch, batches.meta) loads to the same
    float32 arrays, labels and class names, and train.py gives the same metrics from either. Real
    CIFAR-10 images (shared/data's cifar10-dev.npz) where present, else fabricated ones."""
    if os.path.exists(CIFAR_DEV):
        with np.load(CIFAR_DEV) as z:
            images, labels = z["x_train"][:3000], z["y_train"][:3000]  # (N, 32, 32, 3) uint8
    else:
        rng = np.random.default_rng(0)
        images, labels = rng.integers(0, 256, (3000, 32, 32, 3), dtype=np.uint8), np.arange(3000) % 10
    npz = tmp_path / "cifar.npz"
    np.savez(npz, x_train=images[:2400], y_train=labels[:2400], x_test=images[2400:], y_test=labels[2400:],
             classes=np.array(CIFAR_CLASSES))
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    parts = [(f"data_batch_{i + 1}", slice(480 * i, 480 * (i + 1))) for i in range(5)]
    d = write_cifar(tmp_path, [(name, rows[part], labels[part].tolist())
                               for name, part in [*parts, ("test_batch", slice(2400, 3000))]])
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(d, arcname="cifar-10-batches-py")
    a, b = load_dataset(str(npz)), load_dataset(str(archive))
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.classes == b.classes == CIFAR_CLASSES and a.x_train.dtype == np.float32
    metrics = []
    for data in (npz, archive):
        out = tmp_path / f"{data.name}.json"
        r = _cli("train.py", "--data", str(data), "--arch", "conv(8,3),relu,maxpool(2),dense(10)",
                 "--epochs", "1", "--augment", "none", "--metrics-out", str(out), "--quiet")
        assert r.returncode == 0, r.stderr
        m = json.loads(out.read_text())
        metrics.append((m["test_accuracy"], [(e["train_loss"], e["test_loss"]) for e in m["epochs"]]))
    assert metrics[0] == metrics[1]


def test_cifar_batches_and_archive_load_and_train_with_resnet8(tmp_path):
    d = make_cifar(tmp_path)
    ds = load_dataset(str(tmp_path))
    assert ds.input_shape == (3, 32, 32) and (len(ds.y_train), len(ds.y_test)) == (320, 64)
    assert ds.classes[:2] == ["airplane", "automobile"]
    raw = pickle.load(open(os.path.join(d, "data_batch_2"), "rb"), encoding="bytes")
    np.testing.assert_array_equal(ds.x_train[64:128], raw[b"data"].reshape(64, 3, 32, 32) / np.float32(255))
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(d, arcname="cifar-10-batches-py")
    from_tar = load_dataset(str(archive))
    np.testing.assert_array_equal(from_tar.x_train, ds.x_train)
    np.testing.assert_array_equal(from_tar.y_test, ds.y_test)
    ck = str(tmp_path / "run.npz")
    r = _cli("train.py", "--data", d, "--arch", "resnet8", "--epochs", "1", "--batch-size", "32",
             "--save", ck, "--quiet")
    assert r.returncode == 0, r.stderr
    net = nc.load(ck)
    assert net.classes == CIFAR_CLASSES and net.input_shape == (3, 32, 32)
    np.testing.assert_allclose(net.layers[0].mean, ds.x_train.astype(np.float64).mean(axis=(0, 2, 3)),
                               rtol=1e-5)


def test_a_corrupt_or_doctored_cifar_batch_is_one_clear_line(tmp_path, capsys):
    d = make_cifar(tmp_path, rows=8)
    batch = os.path.join(d, "data_batch_3")
    raw = open(batch, "rb").read()
    with open(batch, "wb") as f:
        f.write(raw[:len(raw) // 2])
    assert main(["--data", d, "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "data_batch_3: not a readable CIFAR-10 batch" in err

    class Doctored:  # a pickle that would run a command when loaded by pickle.load
        def __reduce__(self):
            return (os.system, ("echo owned > " + str(tmp_path / "owned"),))
    with open(batch, "wb") as f:
        pickle.dump({b"data": Doctored(), b"labels": [0]}, f, protocol=2)
    with pytest.raises(DataError, match="refused to load posix.system|refused to load os.system"):
        load_dataset(d)
    assert not (tmp_path / "owned").exists()
    os.remove(batch)
    with pytest.raises(DataError, match="data_batch_3 is missing"):
        load_dataset(d)


# --- class names -------------------------------------------------------------------------------------
def test_npz_class_names_reach_the_checkpoint_the_report_and_a_resume_check(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    x = rng.integers(0, 40, (60, 8, 8)).astype(np.uint8)
    for i, k in enumerate(y):
        x[i, 2 * k:2 * k + 2] = 250
    names = np.array(["<b>cat</b>", "dog & co", "eel"])
    path = str(tmp_path / "named.npz")
    np.savez(path, x=x, y=y, classes=names)
    ck, report = str(tmp_path / "run.npz"), str(tmp_path / "report")
    assert main(["--data", path, "--epochs", "2", "--quiet", "--save", ck, "--report", report,
                        "--arch", "conv(4,3),relu,maxpool(2),dense(16)"]) == 0
    assert nc.load(ck).classes == list(names)
    page = open(os.path.join(report, "index.html"), encoding="utf-8").read()
    assert "&lt;b&gt;cat&lt;/b&gt;, dog &amp; co, eel" in page  # the run's table lists the classes
    assert "<b>cat</b>" not in page
    np.savez(path, x=x, y=y, classes=np.array(["ant", "bee", "cow"]))
    capsys.readouterr()
    assert main(["--data", path, "--evaluate", ck]) == 1
    err = capsys.readouterr().err
    assert "trained on classes <b>cat</b>, dog & co, eel; the data has ant, bee, cow" in err
    np.savez(path, x=x, y=y, classes=np.array(["a", "b"]))
    with pytest.raises(DataError, match=r"label 2 but only 2 class names"):
        load_dataset(path)


# --- summary -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,shape", [("mnistcnn", (1, 28, 28)), ("resnet8", (3, 32, 32)),
                                        ("modern", (1, 28, 28)), ("lenet5", (1, 28, 28))])
def test_summary_counts_match_pytorch_and_the_flop_count(arch, shape):
    torch = pytest.importorskip("torch")
    from numbacnn.bench import flops_per_image, torch_twin
    from numbacnn.summary import summarize

    net = nc.build_network(arch, shape, 10, seed=0)
    s = summarize(net, batch_size=8)
    twin = torch_twin(net)
    assert s.params == sum(p.numel() for p in twin.parameters()) == sum(r.params for r in s.rows)
    assert 2 * s.macs == flops_per_image(net)[0]
    with torch.no_grad():  # the rows' shapes are what the layers give
        assert tuple(twin(torch.zeros((1, *shape))).shape[1:]) == s.rows[-1].output_shape
    text = str(s)
    assert f"parameters: {s.params:,}" in text and "training step at batch 8 (adam)" in text
    mem = s.memory
    assert mem["parameters"] == mem["gradients"] == 4 * s.params and mem["optimizer state"] == 8 * s.params
    assert mem["activations and workspaces"] > 8 * 4 * s.rows[0].output_shape[0]  # at least a map


def test_summary_command_and_method(capsys):
    r = _cli("-m", "numbacnn", "summary", "--arch", "mnistcnn", "--input", "1,28,28")
    assert r.returncode == 0, r.stderr
    assert "parameters: 225,034" in r.stdout and "Dense(1600, 128)" in r.stdout
    net = nc.Sequential([nc.Conv2D(1, 2, 3), nc.ReLU(), nc.Flatten(), nc.Dense(2 * 4 * 4, 3)], seed=0)
    with pytest.raises(ValueError, match="run it on a batch first"):
        net.summary()
    net.forward(np.zeros((2, 1, 6, 6), np.float32))
    before = net.state_dict()
    net.summary(batch_size=4)
    out = capsys.readouterr().out
    assert "input 1x6x6" in out and "training step at batch 4" in out
    for k, v in net.state_dict().items():  # measured on a copy
        np.testing.assert_array_equal(v, before[k])
    bad = _cli("-m", "numbacnn", "summary", "--arch", "mnistcnn", "--input", "1,28")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


# --- estimator: channels last and per-channel scaling -------------------------------------------------
def test_estimator_takes_channels_last_colour_images_like_channels_first(rng):
    x = rng.integers(0, 255, (60, 3, 8, 8)).astype(np.float64)
    x[:, 1] *= 0.2  # channels on different scales
    y = np.arange(60) % 2
    x[y == 1, 0, :4] = 255
    kw = dict(architecture="conv(4,3),relu,dense(8)", max_epochs=3, random_state=0)
    first = nc.CNNClassifier(**kw).fit(x, y)
    last = nc.CNNClassifier(**kw).fit(x.transpose(0, 2, 3, 1), y)
    assert last.input_shape_ == first.input_shape_ == (3, 8, 8) and last.channels_last_
    np.testing.assert_allclose(first.x_mean_, x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_array_equal(last.predict_proba(x.transpose(0, 2, 3, 1)), first.predict_proba(x))
    with pytest.raises(ValueError, match="X has 3 features"):
        last.predict(x)
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from numbacnn.onnx_export import to_onnx

    session = ort.InferenceSession(to_onnx(last).SerializeToString(), providers=["CPUExecutionProvider"])
    rows = x.transpose(0, 2, 3, 1).reshape(60, -1).astype(np.float32)
    expected = last.predict_proba(x.transpose(0, 2, 3, 1))
    np.testing.assert_allclose(session.run(None, {"X": rows})[0], expected, rtol=1e-5, atol=1e-5)


# --- downloads ---------------------------------------------------------------------------------------
def test_kmnist_download_writes_its_class_names_for_the_idx_loader(tmp_path):
    from test_data import _Server

    from numbacnn.data import write_idx
    from numbacnn.data.download import DATASETS, download

    rng = np.random.default_rng(0)
    files = {}
    for split, n in (("train", 30), ("t10k", 10)):
        for kind, arr in (("images-idx3", rng.integers(0, 255, (n, 8, 8))),
                          ("labels-idx1", np.arange(n) % 10)):
            p = tmp_path / "src" / f"{split}-{kind}-ubyte.gz"
            p.parent.mkdir(exist_ok=True)
            write_idx(str(p), arr)
            files[p.name] = p.read_bytes()
    import hashlib

    md5 = {k: hashlib.md5(v).hexdigest() for k, v in files.items()}
    assert set(md5) == set(DATASETS["kmnist"]["files"])
    with _Server(files) as srv:
        download("kmnist", str(tmp_path / "kmnist"), mirrors=[srv.url], files=md5, backoff=0,
                 log=lambda s: None)
    ds = load_dataset(str(tmp_path / "kmnist"))
    assert ds.classes == ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]
    assert gzip.decompress(files["t10k-labels-idx1-ubyte.gz"])[8:] == bytes(ds.y_test.astype(np.uint8))
