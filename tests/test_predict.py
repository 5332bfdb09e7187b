"""python -m numbacnn predict: pictures (resized, converted), arrays, IDX and training formats give the
same predictions as the network on the same pixels; bad files get one line each, the rest goes on."""
import csv

import numpy as np
import pytest

import numbacnn as nc
from numbacnn.cli import main, run_predict
from numbacnn.data import write_idx

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def model(tmp_path):
    net = nc.build_network("conv(4,3,padding=same),relu,maxpool(2),dense(16)", (1, 8, 8), 3, seed=0)
    path = str(tmp_path / "ck.npz")
    nc.save(net, path)
    return net, path


def predict(argv):
    return main(argv, command=run_predict)


def test_pictures_arrays_and_idx_match_the_network(tmp_path, model, rng, capsys):
    net, ck = model
    grey = rng.integers(0, 256, (8, 8), dtype=np.uint8)
    Image.fromarray(grey).save(tmp_path / "a.png")
    big = rng.integers(0, 256, (24, 16, 3), dtype=np.uint8)  # colour and another size
    Image.fromarray(big).save(tmp_path / "b.png")
    np.save(tmp_path / "c.npy", grey)
    stack = rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)
    write_idx(str(tmp_path / "d-images-idx3-ubyte"), stack)
    files = [str(tmp_path / f) for f in ("a.png", "b.png", "c.npy", "d-images-idx3-ubyte")]
    assert predict([ck, *files, "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [r["file"] for r in rows] == files[:3] + [f"{files[3]}[{i}]" for i in range(3)]
    # the oracle: the same pixels through the network directly (grey levels / 255; b.png converted
    # to grey and resized with Pillow's bilinear filter, as documented)
    b = np.asarray(Image.fromarray(big).convert("L").resize((8, 8), Image.Resampling.BILINEAR))
    x = np.stack([grey, b, grey, *stack])[:, None].astype(np.float32) / np.float32(255)
    proba = net.predict_proba(x)
    np.testing.assert_array_equal([int(r["label"]) for r in rows], proba.argmax(1))
    np.testing.assert_allclose([float(r["probability"]) for r in rows], proba.max(1), rtol=1e-6)
    assert predict([ck, files[0]]) == 0
    out = capsys.readouterr().out.split()
    assert out[0] == files[0] and int(out[1]) == proba[0].argmax()


def test_bad_files_get_one_line_each_and_the_rest_is_predicted(tmp_path, model, capsys, monkeypatch):
    _, ck = model
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "good.png")
    (tmp_path / "text.png").write_bytes(b"this is not a picture")
    png = (tmp_path / "good.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(png[:len(png) // 2])
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "bomb.png")
    np.save(tmp_path / "wrong.npy", np.zeros((5, 5), np.float32))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow's guard, made small for the test
    files = [str(tmp_path / f) for f in ("text.png", "good.png", "cut.png", "bomb.png", "wrong.npy",
                                          "missing.png")]
    assert predict([ck, *files]) == 1
    cap = capsys.readouterr()
    assert cap.out.split("\t")[0] == files[1] and len(cap.out.strip().splitlines()) == 1
    err = cap.err.strip().splitlines()
    assert len(err) == 5 and "Traceback" not in cap.err
    assert "text.png: not a readable image" in err[0] and "cut.png: not a readable image" in err[1]
    assert "bomb.png: refused, larger than Pillow's decompression-bomb limit" in err[2]
    assert "wrong.npy: images of shape (1, 5, 5), the model takes (1, 8, 8)" in err[3]
    assert "missing.png: no such file" in err[4]


def test_pictures_without_pillow_name_the_extra(tmp_path, model):
    from conftest import run_without

    _, ck = model
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "a.png")
    r = run_without("PIL", "run_predict", [ck, str(tmp_path / "a.png")])
    assert r.returncode == 1 and "pip install 'numbacnn[image]'" in r.stderr
    assert "in a checkout: pip install -e '.[image]'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_predict_with_test_time_augmentation(tmp_path, model, rng, capsys):
    from numbacnn import tta

    net, ck = model
    stack = rng.integers(0, 256, (5, 8, 8), dtype=np.uint8)
    np.save(tmp_path / "s.npy", stack)
    assert predict([ck, str(tmp_path / "s.npy"), "--tta", "mirror", "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    z = tta.logits(net, stack[:, None].astype(np.float32) / np.float32(255), "mirror").astype(np.float64)
    proba = np.exp(z - z.max(1, keepdims=True))
    proba /= proba.sum(1, keepdims=True)
    np.testing.assert_array_equal([int(r["label"]) for r in rows], proba.argmax(1))
    np.testing.assert_allclose([float(r["probability"]) for r in rows], proba.max(1), rtol=1e-6)
    flat = nc.build_network("dense(4)", (1, 1, 6), 3, seed=0)
    nc.save(flat, str(tmp_path / "flat.npz"))
    np.save(tmp_path / "f.npy", rng.integers(0, 256, (2, 1, 6), dtype=np.uint8))
    assert predict([str(tmp_path / "flat.npz"), str(tmp_path / "f.npy"), "--tta", "mirror"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs images" in err[0]
