"""Files from outside are never trusted: hostile picture folders (links, bombs, 16-bit pictures),
altered caches, hand-edited checkpoint metadata and out-of-range numbers each give one clear line
and a documented exit status, and the good pictures and files are still used."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import ROOT, tiny_npz

from numbacnn.checkpoint import _digest
from numbacnn.cli import COMMANDS, main
from numbacnn.data import folders as F
from numbacnn.data import load_dataset

Image = pytest.importorskip("PIL.Image")


def _picture(path, value, size=8):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((size, size), value, np.uint8)).save(path)


def _folder(root, n=5):
    """Classes a (dark) and b (bright), n grey PNGs each."""
    for i in range(n):
        _picture(os.path.join(root, "a", f"{i}.png"), 20 + i)
        _picture(os.path.join(root, "b", f"{i}.png"), 200 + i)


def test_links_to_folders_are_not_followed_and_bad_links_are_skipped_and_named(tmp_path):
    root = tmp_path / "pics"
    _folder(str(root))
    os.symlink("..", root / "b" / "up")  # b/up -> the folder of both classes
    os.symlink(str(root / "a"), root / "c")  # a class folder that is a link to another
    os.symlink("loop.png", root / "a" / "loop.png")  # a link to itself
    os.symlink("gone.png", root / "a" / "dangling.png")  # a link to nothing
    os.symlink(str(root / "b" / "0.png"), root / "b" / "again.png")  # a link to a picture: read
    got = F.load_image_folder(str(root), cache=False)
    assert got.classes == ["a", "b"]
    assert np.bincount(got.y_train).tolist() == [5, 6]
    assert ((got.x_train[got.y_train == 0] < 100).all() and (got.x_train[got.y_train == 1] > 100).all())
    skipped = {os.path.basename(p) for p, _ in got.skipped}
    assert skipped == {"loop.png", "dangling.png"}, got.skipped


def test_bombs_are_skipped_and_named_at_any_thread_count_without_pillows_warning(tmp_path, monkeypatch):
    root = tmp_path / "pics"
    _folder(str(root), n=6)
    for i in range(4):  # over the limit set below, under twice it: Pillow would only warn
        _picture(str(root / "a" / f"bomb{i}.png"), 30, size=40)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    for workers in (1, 2, 8):
        monkeypatch.setattr(os, "cpu_count", lambda w=workers: w - 2)  # the pool takes cpu_count + 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning would fail the test
            got = F.load_image_folder(str(root), image_size=(8, 8), channels=1, cache=False)
        assert np.bincount(got.y_train).tolist() == [6, 6]
        assert sorted(os.path.basename(p) for p, _ in got.skipped) == [f"bomb{i}.png" for i in range(4)]
        assert all("decompression-bomb limit" in why for _, why in got.skipped)


@pytest.mark.slow
def test_a_real_bomb_prints_one_named_line_and_no_pillow_warning(tmp_path):
    root = tmp_path / "pics"
    _folder(str(root), n=6)
    Image.new("L", (10000, 10000)).save(root / "a" / "bomb.png")  # 1e8 pixels: Pillow warns only
    r = subprocess.run([sys.executable, "train.py", "--data", str(root), "--epochs", "1", "--quiet",
                        "--arch", "dense(8),relu"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1 and "skipped 1 unreadable picture: " in r.stderr, r.stderr
    assert "bomb.png (refused, larger than Pillow's decompression-bomb limit" in r.stderr


def test_16_bit_grey_pictures_are_scaled_not_clipped(tmp_path):
    root = tmp_path / "pics"
    _folder(str(root), n=3)
    for name, value in (("a/wide.png", 25700), ("b/wide.png", 65535)):
        Image.fromarray(np.full((8, 8), value, np.uint16)).save(root / name)
        with Image.open(root / name) as im:
            assert im.mode.startswith("I")  # really a 16-bit picture
    for channels in (1, 3):
        got = F.load_image_folder(str(root), channels=channels, cache=False)
        wide = got.x_train[[3, 7]]  # sorted names: 0, 1, 2, wide per class
        assert (wide[0] == 100).all() and (wide[1] == 255).all(), wide[:, :, 0, 0]


def test_exif_rotated_photographs_load_upright(tmp_path):
    root = tmp_path / "pics"
    _folder(str(root), n=3)
    a = np.zeros((8, 12), np.uint8)
    a[:, 6:] = 200  # bright on the right as stored; orientation 3 (half a turn): bright on the left
    img = Image.fromarray(a)
    exif = img.getexif()
    exif[0x0112] = 3
    img.save(root / "b" / "turned.jpg", exif=exif)
    got = F.load_image_folder(str(root), image_size=(8, 12), channels=1, cache=False)
    turned = got.x_train[-1, 0].astype(int)  # b/turned.jpg sorts last
    assert turned[:, :5].mean() > 150 and turned[:, 7:].mean() < 50, turned


def test_a_cache_whose_arrays_were_replaced_is_rebuilt_not_used(tmp_path):
    root = tmp_path / "pics"
    _folder(str(root))
    fresh = F.load_image_folder(str(root), image_size=(8, 8))  # the key promises this size
    where = F.cache_path(str(root))
    with np.load(where) as z:
        arrays = {k: z[k] for k in z.files}
    for name, doctored in (("fewer rows", dict(x_train=arrays["x_train"][:4], y_train=arrays["y_train"][:4])),
                           ("another shape", dict(x_train=arrays["x_train"][:, :, :4])),
                           ("labels out of range", dict(y_train=arrays["y_train"] + 5)),
                           ("float images", dict(x_train=arrays["x_train"].astype(np.float32)))):
        forged = {k: v for k, v in {**arrays, **doctored}.items() if k != "digest"}
        np.savez(where, **forged, digest=np.array(F.arrays_digest(forged)))  # even with a matching digest
        got = F.load_image_folder(str(root), image_size=(8, 8))
        assert not got.from_cache, name
        np.testing.assert_array_equal(got.x_train, fresh.x_train)
        np.testing.assert_array_equal(got.y_train, fresh.y_train)
    # a cache path that is a directory: the run goes on, nothing is left behind
    os.remove(where)
    os.mkdir(where)
    got = F.load_image_folder(str(root), image_size=(8, 8))
    np.testing.assert_array_equal(got.x_train, fresh.x_train)
    assert os.listdir(where) == [] and [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []


def test_a_test_split_without_some_classes_keeps_the_training_labels(tmp_path):
    root = tmp_path / "pics"
    for part, names in (("train", ("a", "b", "c")), ("test", ("b", "c"))):
        for k, name in enumerate(("a", "b", "c")):
            if name in names:
                for i in range(4):
                    _picture(str(root / part / name / f"{i}.png"), 20 + 100 * k + i)
    ds = load_dataset(str(root))
    assert ds.classes == ["a", "b", "c"]
    assert sorted(set(ds.y_test.tolist())) == [1, 2]  # b and c keep their training indices
    mean = ds.x_test.reshape(len(ds.x_test), -1).mean(1) * 255
    np.testing.assert_array_equal(np.round((mean - 20) / 100).astype(int), ds.y_test)


def _edit_meta(src, dst, change):
    """A copy of checkpoint src with its metadata changed by ``change`` and the checksum recomputed,
    as someone editing the file by hand would."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta_bytes = change(arrays.pop("__meta__").tobytes())
    arrays.pop("__checksum__")
    arrays["__meta__"] = np.frombuffer(meta_bytes, np.uint8)
    arrays["__checksum__"] = np.frombuffer(_digest(meta_bytes, arrays).encode(), np.uint8)
    np.savez(dst, **arrays)


def _json_edit(fn):
    def change(raw):
        meta = json.loads(raw)
        fn(meta)
        return json.dumps(meta).encode()
    return change


@pytest.mark.slow
def test_hand_edited_checkpoint_metadata_is_one_line_everywhere(tmp_path, capsys):
    data = tiny_npz(tmp_path / "t.npz", 60)
    ck = str(tmp_path / "ck.npz")
    assert main(["--quiet", "--data", data, "--arch", "dense(8),relu", "--epochs", "1", "--save", ck]) == 0
    edits = {"malformed JSON": lambda raw: raw[:-5],
             "a list for the metadata": lambda raw: b"[1, 2]",
             "a list for training": _json_edit(lambda m: m.update(training=[1])),
             "a number for the layers": _json_edit(lambda m: m.update(layers=3)),
             "a number for the input shape": _json_edit(lambda m: m.update(input_shape=7)),
             "a string for the classes": _json_edit(lambda m: m.update(classes="abc")),
             "a list for the trainer": _json_edit(lambda m: m["training"].update(trainer=[])),
             "a string for the epoch": _json_edit(lambda m: m["training"]["trainer"].update(epoch="2")),
             "a number for the history": _json_edit(lambda m: m["training"]["trainer"].update(history=5))}
    for i, (name, change) in enumerate(edits.items()):
        bad = str(tmp_path / f"bad{i}.npz")
        _edit_meta(ck, bad, change)
        for argv in (["--evaluate", bad, "--data", data], ["--resume", bad, "--data", data, "--epochs", "2",
                                                             "--save", str(tmp_path / "out.npz")]):
            assert main(argv) == 1, (name, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and bad in err and "metadata" in err, (name, err)
        for command in ("predict", "export"):
            extra = [data] if command == "predict" else [str(tmp_path / "m.onnx")]
            if i == 0:  # the first edit as a user runs the commands; the others in this process
                r = subprocess.run([sys.executable, "-m", "numbacnn", command, bad, *extra],
                                   capture_output=True, text=True, timeout=300, cwd=ROOT)
                rc, err = r.returncode, r.stderr
            else:
                rc, err = main([bad, *extra], command=COMMANDS[command]), capsys.readouterr().err
            assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, (name, command, err)


HUGE = "99999999999999999999"


@pytest.mark.parametrize("flag", ["--epochs", "--batch-size", "--seed", "--threads", "--early-stopping",
                                  "--lr", "--momentum", "--weight-decay", "--test-size", "--val-size",
                                  "--label-smoothing", "--image-size"])
def test_every_numeric_flag_is_range_checked_before_any_work(flag, capsys):
    for value in (HUGE, "-1", "nan"):
        if flag in ("--lr", "--momentum", "--weight-decay") and value == HUGE:
            continue  # a large float is a valid (if unwise) setting; it diverges with one line
        assert main([flag, value, "--epochs" if flag != "--epochs" else "--seed", "1"]) == 2, (flag, value)
        err = capsys.readouterr().err
        assert err.startswith("train.py: error: ") and err.count("\n") == 1, err


def test_augment_terms_are_range_checked_before_any_work(capsys):
    for spec in (f"shift:{HUGE}", f"crop:{HUGE},flip"):
        assert main(["--augment", spec]) == 2
        err = capsys.readouterr().err
        assert "more than 4096 pixels" in err and err.count("\n") == 1, err
    assert main(["--augment", "shift:8", "--epochs", "1"]) == 2  # digits are 8x8: refused before training
    err = capsys.readouterr().err
    assert "moves a 8x8 image out of view" in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_a_hostile_folder_loads_the_same_at_every_thread_count_in_fresh_processes(tmp_path):
    r = subprocess.run([sys.executable, "benchmarks/hostile_folder.py", "--pictures", "120", "--processes",
                        "2", "--threads", "1,2,8", "--dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "every load the same: yes"
    # 120 pictures, 12 hostile: the 2 folder links are not pictures; the 2 bombs, 2 looping and 1
    # dangling links and 1 truncated file are skipped; 16-bit, palette, CMYK and EXIF-rotated ones load
    assert all("pictures 112, skipped 6," in line for line in lines[1:4]), lines


@pytest.mark.parametrize("arch,message", [
    ("conv(1000000000000,3)", "out_channels must be a positive integer (at most 2147483647)"),
    ("dense(10**30)", "bad value"),
    ("dense(1000000000000000000000000000000)", "out_features must be a positive integer (at most"),
    ("conv(4,3,stride=1000000000000000000000)", "stride must be an integer in [1, 2147483647]"),
    ("dense(100000),dense(100000)", "the network has 10,00"),
    ("res(" * 3000 + "relu" + ")" * 3000, "nested more than 32 deep"),
])
def test_absurd_sizes_and_nesting_are_refused_before_anything_is_allocated(capsys, arch, message):
    assert main(["--arch", arch, "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err) < 400, err[:400]


def test_a_batchnorm_that_cannot_normalise_one_example_is_refused_before_training(capsys):
    assert main(["--arch", "dense(16),bn,relu", "--batch-size", "1", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--batch-size 1: layer 2 (BatchNorm1D(16))" in err and "at least 2 examples" in err
    # BatchNorm over images (or series) has values enough in one example
    assert main(["--arch", "conv(4,3),bn,relu", "--batch-size", "1", "--epochs", "1", "--quiet"]) == 0


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    import numbacnn.runconfig as rc

    def exhausted(*a, **k):
        raise MemoryError
    monkeypatch.setattr(rc, "load_dataset", exhausted)
    assert main(["--epochs", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("train.py: error: out of memory (a smaller --batch-size, --image-size or network "
                           "may fit)")


def _lying_npy(n_claimed, dtype="<f4", data=b"\0" * 64):
    """An .npy stream whose header claims n_claimed values but which holds only ``data``."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False,
                                                "shape": (n_claimed,)})
    return buf.getvalue() + data


def test_sizes_read_from_files_are_checked_before_anything_is_allocated(tmp_path, monkeypatch, capsys):
    """A checkpoint member whose header claims 4 TiB, an .npy for predict claiming 2^30 images, a
    training .npz likewise, and a deflated member that would expand 1000x: one line each, nothing
    allocated (the good files beside the bad one are still predicted)."""
    import zipfile

    import numbacnn as nc
    from numbacnn import _files
    from numbacnn.checkpoint import CheckpointError, load_checkpoint

    net = nc.build_network("conv(2,3),relu", (1, 8, 8), 3, seed=0)
    good = tmp_path / "good.npz"
    nc.save(net, str(good))
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            dst.writestr(info, _lying_npy(2**40) if info.filename == "param/0.weight.npy" else body)
    with pytest.raises(CheckpointError,
                       match=r"member param/0.weight.npy's header promises 4,398,046,511,104 "):
        load_checkpoint(str(bad))
    claims = tmp_path / "claims.npy"
    claims.write_bytes(_lying_npy(2**30 * 64, "|u1"))
    real = tmp_path / "real.npy"
    np.save(real, np.zeros((1, 8, 8), np.float32))
    assert main([str(good), str(claims), str(real)], command=COMMANDS["predict"]) == 1
    out, err = capsys.readouterr()
    assert "header promises 68,719,476,736 bytes of array data" in err and "real.npy" in out
    data = tmp_path / "data.npz"
    with zipfile.ZipFile(data, "w") as z:
        z.writestr("x.npy", _lying_npy(2**30 * 64, "|u1"))
        z.writestr("y.npy", _lying_npy(2**30, "<i8"))
    assert main(["--data", str(data), "--quiet"]) == 1
    assert "header promises" in capsys.readouterr().err
    monkeypatch.setattr(_files, "BOMB_MIN_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _lying_npy(2 << 20, "|u1", b"\0" * (2 << 20)))
    with pytest.raises(_files.UntrustedSize, match="would expand from"):
        _files.check_npz(str(bomb))


def test_endless_and_exploding_inputs_are_refused_with_bounded_reads(tmp_path, capsys):
    """A csv that is a link to /dev/zero, a FIFO given as labels, and an IDX gzip whose data
    expands far past what its header promises: one line each, the bomb stopped one byte past the
    header's size instead of decompressed whole."""
    import gzip
    import struct

    from numbacnn.data import DataError, read_idx

    zero = tmp_path / "zero.csv"
    os.symlink("/dev/zero", zero)
    assert main(["--data", str(zero), "--quiet"]) == 1
    assert "not a regular file (a device, FIFO or socket is not read)" in capsys.readouterr().err
    from numbacnn.data import write_idx

    images = tmp_path / "train-images-idx3-ubyte"
    write_idx(str(images), np.zeros((6, 4, 4), np.uint8))
    fifo = tmp_path / "labels-fifo"
    os.mkfifo(fifo)
    assert main(["--data", str(images), "--labels", str(fifo), "--quiet"]) == 1  # never opened: no hang
    assert "labels-fifo: not a regular file" in capsys.readouterr().err
    bomb = tmp_path / "bomb-images-idx3-ubyte.gz"
    header = bytes([0, 0, 0x08, 3]) + struct.pack(">3I", 10, 2, 2)  # promises 40 bytes of pixels
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(header)
        for _ in range(64):
            f.write(b"\0" * (1 << 20))  # 64 MiB of zeros, about 64 KB compressed
    assert os.path.getsize(bomb) < 1 << 20
    with pytest.raises(DataError, match="expands past the 56 bytes its header promises"):
        read_idx(str(bomb))


def _stamp(paths):
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in paths}


def test_an_output_that_names_an_input_is_refused_and_nothing_is_written(tmp_path, capsys):
    """--save / --metrics-out / --report over the data, a link to it, a .ts file's test file, a
    picture folder; predict --out over a file it reads; export over its checkpoint: exit 2, one line,
    every input byte for byte as it was. --save over --resume stays allowed (it continues a run)."""
    data = tmp_path / "d.npz"
    tiny_npz(str(data), 30)
    link = tmp_path / "link.npz"
    os.symlink(data, link)
    ck = tmp_path / "ck.npz"
    assert main(["--data", str(data), "--epochs", "1", "--save", str(ck), "--quiet"]) == 0
    series = tmp_path / "S_TRAIN.ts"
    rows = "".join(f"{','.join(str((i * j) % 7) for j in range(12))}:{i % 2}\n" for i in range(12))
    series.write_text(f"@problemName S\n@univariate true\n@equalLength true\n@seriesLength 12\n"
                      f"@classLabel true 0 1\n@data\n{rows}")
    series_test = tmp_path / "S_TEST.ts"
    series_test.write_text(series.read_text())
    pics = tmp_path / "pics"
    _folder(str(pics))
    before = _stamp([data, ck, series, series_test, pics / "a" / "0.png"])
    cases = [
        (main, ["--data", str(data), "--epochs", "1", "--save", str(data)], "overwrite the input --data"),
        (main, ["--data", str(data), "--epochs", "1", "--save", str(link)], "overwrite the input --data"),
        (main, ["--data", str(data), "--epochs", "2", "--resume", str(ck), "--metrics-out", str(ck)],
         "would overwrite the input --resume"),
        (main, ["--data", str(series), "--epochs", "1", "--save", str(series_test)], "S_TEST.ts"),
        (main, ["--data", str(pics), "--epochs", "1", "--save", str(pics / "a" / "0.png")],
         "lies inside the input --data"),
        (main, ["--data", str(pics), "--epochs", "1", "--report", str(pics / "r")], "inside the input"),
        (lambda a: main(a, command=COMMANDS["predict"]), [str(ck), str(data), "--out", str(data)],
         "would overwrite the input file"),
        (lambda a: main(a, command=COMMANDS["export"]), [str(ck), str(ck)], "overwrite the input checkpoint"),
    ]
    for run, argv, message in cases:
        assert run(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "nothing was written" in err and len(err.strip().splitlines()) == 1, err
        assert _stamp([data, ck, series, series_test, pics / "a" / "0.png"]) == before, argv
    assert not (pics / "r").exists()
    o = str(tmp_path / "o")
    assert main(["--data", str(data), "--save", o, "--metrics-out", o]) == 2
    assert "--save and --metrics-out name the same file" in capsys.readouterr().err
    # continuing a run into its own checkpoint is what --resume with --save is for
    assert main(["--data", str(data), "--epochs", "2", "--resume", str(ck), "--save", str(ck),
                 "--quiet"]) == 0


def test_complex_valued_images_and_series_are_refused(tmp_path, capsys):
    for name, x, extra, what in (("c.npz", np.ones((8, 4, 4), np.complex64), [], "images"),
                                 ("s.npz", np.ones((8, 1, 16), np.complex128), ["--series"], "series")):
        np.savez(tmp_path / name, x=x, y=np.arange(8) % 2)
        assert main(["--data", str(tmp_path / name), "--epochs", "1", "--quiet", *extra]) == 1
        assert f"{what} must be real numbers, got dtype complex" in capsys.readouterr().err


FIFO_FOLDER = """
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
for c, v in (("a", 20), ("b", 200)):
    os.makedirs(os.path.join(root, c))
    for i in range(4):
        Image.fromarray(np.full((8, 8), v + i, np.uint8)).save(os.path.join(root, c, f"{i}.png"))
os.mkfifo(os.path.join(root, "a", "pipe.png"))
from numbacnn.data import folders as F
for size, channels in ((None, None), ((8, 8), 1)):  # with the header pass and without it
    got = F.load_image_folder(root, size, channels, cache=False, log=lambda s: None)
    assert len(got.x_train) == 8, got.x_train.shape
    assert [(os.path.basename(p), why) for p, why in got.skipped] == [
        ("pipe.png", "not a regular file (a FIFO); skipped unread")], got.skipped
print("ok")
"""


def test_a_fifo_named_like_a_picture_is_skipped_and_named_without_hanging(tmp_path):
    got = subprocess.run([sys.executable, "-c", FIFO_FOLDER, str(tmp_path / "pics")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-2000:]


def test_picture_sizes_that_cannot_fit_are_refused_before_decoding(tmp_path, monkeypatch, capsys):
    """--image-size past Pillow's bomb limit; pictures or a training step larger than the memory
    left: one line each, before a picture is decoded or a step is run."""
    import numbacnn.runconfig as rc

    root = tmp_path / "pics"
    _folder(str(root))
    assert main(["--data", str(root), "--image-size", "65536", "--epochs", "1", "--quiet"]) == 1
    assert "pictures of 65536x65536 are 4,294,967,296 pixels each, over Pillow's" in capsys.readouterr().err
    monkeypatch.setattr(F, "read_picture", lambda *a: pytest.fail("decoded a picture"))
    monkeypatch.setattr(F, "available_memory", lambda: 10 * 3 * 64 * 64 * 5 - 1)
    assert main(["--data", str(root), "--image-size", "64", "--channels", "3", "--epochs", "1",
                 "--quiet"]) == 1
    assert "10 pictures of 3x64x64 need about" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(rc, "available_memory", lambda: 2**10)
    assert main(["--data", str(root), "--arch", "conv(64,3),relu,gap", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--batch-size 64: a training step on 1x8x8 inputs holds at least" in err and "0.0 GiB free" in err


def test_a_cache_with_arrays_of_another_shape_is_rebuilt_without_an_image_size(tmp_path):
    """The folder decides the shape (no --image-size, no --channels): a cache whose arrays were
    swapped for pictures of another shape, key kept, is rebuilt from the pictures."""
    root = tmp_path / "pics"
    _folder(str(root))
    fresh = F.load_image_folder(str(root))
    where = F.cache_path(str(root))
    with np.load(where) as z:
        arrays = {k: z[k] for k in z.files}
    assert F.load_image_folder(str(root)).from_cache
    for doctored in (dict(x_train=np.zeros((len(arrays["x_train"]), 1, 4, 4), np.uint8)),
                     dict(x_train=np.zeros((len(arrays["x_train"]), 3, 8, 8), np.uint8)),
                     dict(x_train=arrays["x_train"] // 2)):
        np.savez(where, **{**arrays, **doctored})
        got = F.load_image_folder(str(root))
        assert not got.from_cache
        np.testing.assert_array_equal(got.x_train, fresh.x_train)


def _rewrite(src, dst, meta_change=None, arrays_change=None):
    """A copy of checkpoint src with its metadata (a dict) and arrays changed, the checksum recomputed."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files if not k.startswith("__")}
        meta = json.loads(z["__meta__"].tobytes())
    if meta_change:
        meta_change(meta)
    if arrays_change:
        arrays_change(arrays)
    meta_bytes = json.dumps(meta).encode()
    arrays["__meta__"] = np.frombuffer(meta_bytes, np.uint8)
    arrays["__checksum__"] = np.frombuffer(_digest(meta_bytes, arrays).encode(), np.uint8)
    np.savez(dst, **arrays)


def _opt(m):
    return m["optimizer"]


def _trainer(m):
    return m["training"]["trainer"]


def _mid_epoch(m, step, seen):
    _trainer(m).update(epoch_rng=_trainer(m)["rng"], step=step, partial={"loss": 1.0, "correct": 0,
                                                                         "seen": seen, "seconds": 0.1})


def _hp(**kw):
    return lambda m: _opt(m)["hyperparameters"].update(**kw)


def _tr(**kw):
    return lambda m: _trainer(m).update(**kw)


def _state(name, fn):
    return lambda a: a.update({f"opt/{name}": fn(a[f"opt/{name}"])})


RESUME_EDITS = {  # name: (metadata change, arrays change, what the line names)
    "unknown optimizer": (lambda m: _opt(m).update(name="nope"), None, "unknown optimizer 'nope'"),
    "another optimizer's hyperparameters": (lambda m: _opt(m).update(name="sgd"), None, "betas"),
    "no step count": (lambda m: _opt(m).pop("step"), None, "step count must be a whole number"),
    "a step count as text": (lambda m: _opt(m).update(step="5"), None, "got '5'"),
    "a negative step count": (lambda m: _opt(m).update(step=-3), None, "got -3"),
    "a fractional step count": (lambda m: _opt(m).update(step=1.5), None, "got 1.5"),
    "a learning rate as text": (_hp(lr="fast"), None, "lr must be a number"),
    "a negative learning rate": (_hp(lr=-1), None, "lr must lie in"),
    "an unknown hyperparameter": (_hp(foo=1), None, "'foo'"),
    "three betas": (_hp(betas=[0.9] * 3), None, "betas must be a pair"),
    "a missing learning rate": (lambda m: _opt(m)["hyperparameters"].pop("lr"), None, "lack lr"),
    "a state of the wrong shape": (None, _state("exp_avg", lambda v: v[:7]), "has shape (7,)"),
    "a float64 state": (None, _state("exp_avg", lambda v: v.astype(np.float64)), "dtype float64"),
    "a missing state": (None, lambda a: a.pop("opt/exp_avg"), "missing 'exp_avg'"),
    "an unknown state": (None, lambda a: a.update({"opt/momentum": np.zeros(3, np.float32)}),
                         "unknown entries 'momentum'"),
    "a NaN state": (None, _state("exp_avg", lambda v: np.full_like(v, np.nan)), "NaN or infinite"),
    "a negative mean of squares": (None, _state("exp_avg_sq", lambda v: -np.ones_like(v)), "negative values"),
    "another generator's state": (_tr(rng={"bit_generator": "MT19937", "state": {}}), None, "field 'rng'"),
    "an empty generator state": (_tr(rng={}), None, "field 'rng'"),
    "a generator state with text": (lambda m: _trainer(m)["rng"]["state"].update(inc="x"), None,
                                    "field 'rng'"),
    "an epoch generator of nothing": (_tr(epoch_rng={"a": 1}), None, "field 'epoch_rng'"),
    "a partial epoch with text": (lambda m: _trainer(m)["partial"].update(seen="x"), None, "field 'partial'"),
    "an empty partial epoch": (_tr(partial={}), None, "field 'partial'"),
    "a partial epoch with more right than seen": (lambda m: _trainer(m)["partial"].update(correct=10**6),
                                                  None, "field 'partial'"),
    "a partial epoch with a NaN loss": (lambda m: _trainer(m)["partial"].update(loss=float("nan")), None,
                                        "field 'partial'"),
    "an epoch record with text": (_tr(history=[{"epoch": "x"}]), None, "field 'history'"),
    "an epoch record short of epochs": (_tr(history=[]), None, "holds 0 epochs"),
    "a huge epoch": (_tr(epoch=10**20), None, "field 'epoch'"),
    "a step past the epoch's end": (lambda m: _mid_epoch(m, 7, 30), None, "an epoch here has 1 steps"),
    "a step with nothing seen": (lambda m: _mid_epoch(m, 1, 0), None, "0 examples seen"),
    "no trainer": (lambda m: m["training"].pop("trainer"), None, "holds no training state"),
    "a negative base rate": (_tr(base_lr=-1.0), None, "field 'base_lr'"),
    "an unknown trainer schedule": (_tr(lr_schedule="zzz"), None, "field 'lr_schedule'"),
    "an unknown run schedule": (lambda m: m["training"].update(lr_schedule="zzz"), None,
                                "training.lr_schedule"),
    "an unknown augmentation": (lambda m: m["training"].update(augment="flip=x"), None, "training.augment"),
    "an unknown optimizer name": (lambda m: m["training"].update(optimizer_name="zzz"), None,
                                  "training.optimizer_name"),
    "another batch size in the trainer": (_tr(batch_size=3), None, "field 'batch_size'"),
}


def test_hand_edited_training_states_on_resume_are_one_line(tmp_path, capsys):
    """Optimizer names, hyperparameters, step counts and state arrays, the trainer's generators,
    partial epoch and records, edited by hand (checksum recomputed): exit 1, one line naming the
    checkpoint and the field, nothing written; the unedited checkpoint still resumes."""
    data = tiny_npz(tmp_path / "t.npz", 60)
    ck = str(tmp_path / "ck.npz")
    assert main(["--quiet", "--data", data, "--epochs", "1", "--save", ck]) == 0
    out = tmp_path / "out.npz"
    for name, (meta_change, arrays_change, message) in RESUME_EDITS.items():
        bad = str(tmp_path / "bad.npz")
        _rewrite(ck, bad, meta_change, arrays_change)
        rc = main(["--quiet", "--data", data, "--epochs", "2", "--resume", bad, "--save", str(out)])
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and bad in err and message in err, (name, err)
        assert not out.exists(), name
    _rewrite(ck, str(tmp_path / "same.npz"))
    assert main(["--quiet", "--data", data, "--epochs", "2", "--resume", str(tmp_path / "same.npz")]) == 0
