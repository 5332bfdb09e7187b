"""Loaders on small files the tests write (IDX plain and gzip, npz, csv), their error messages,
the stratified split, and the downloader against a local HTTP server."""
import gzip
import hashlib
import http.server
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import MNIST_DIR

from numbacnn.data import (
    DataError,
    load_csv,
    load_dataset,
    load_digits_dataset,
    load_npz,
    read_idx,
    stratified_split,
    write_idx,
)
from numbacnn.data.download import DownloadError, download


def make_images(n=30, side=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, side, side), dtype=np.uint8), np.arange(n, dtype=np.uint8) % 3


@pytest.mark.parametrize("gz", [False, True])
def test_idx_directory_with_train_and_test(tmp_path, gz):
    ext = ".gz" if gz else ""
    x, y = make_images(30)
    xt, yt = make_images(12, seed=1)
    write_idx(str(tmp_path / f"train-images-idx3-ubyte{ext}"), x)
    write_idx(str(tmp_path / f"train-labels-idx1-ubyte{ext}"), y)
    write_idx(str(tmp_path / f"t10k-images-idx3-ubyte{ext}"), xt)
    write_idx(str(tmp_path / f"t10k-labels-idx1-ubyte{ext}"), yt % 3)
    ds = load_dataset(str(tmp_path))
    assert ds.x_train.shape == (30, 1, 6, 6) and ds.x_train.dtype == np.float32
    np.testing.assert_allclose(ds.x_train[:, 0], x / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_train, y)
    assert ds.y_train.dtype == np.int64 and ds.x_test.shape == (12, 1, 6, 6)


def test_idx_test_only_directory_is_split_stratified(tmp_path):
    x, y = make_images(30)
    write_idx(str(tmp_path / "t10k-images-idx3-ubyte.gz"), x)
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte.gz"), y)
    a = load_dataset(str(tmp_path), test_size=0.2, seed=3)
    b = load_dataset(str(tmp_path), test_size=0.2, seed=3)
    assert len(a.y_train) == 24 and len(a.y_test) == 6
    assert np.bincount(a.y_test).tolist() == [2, 2, 2]  # stratified
    np.testing.assert_array_equal(a.y_test, b.y_test)


def test_stratified_split_takes_each_class_share_by_largest_remainder():
    # 4 + 3 + 3 examples of classes 0/1/2, test_size 0.25: ceil(2.5) = 3 test examples; shares
    # 1.2, 0.9, 0.9 -> floors 1, 0, 0 and the 2 left go to the largest remainders, 0.9 and 0.9
    y = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    x = np.arange(10) * 10
    for seed in range(5):
        x_tr, x_te, y_tr, y_te = stratified_split(x, y, 0.25, seed)
        assert np.bincount(y_te).tolist() == [1, 1, 1] and len(y_tr) == 7
        assert sorted(np.concatenate([x_tr, x_te]).tolist()) == x.tolist()  # a partition
        np.testing.assert_array_equal(y[x_te // 10], y_te)  # rows travel with their labels
        np.testing.assert_array_equal(y[x_tr // 10], y_tr)
    draws = {tuple(stratified_split(x, y, 0.25, seed)[1]) for seed in range(10)}
    assert len(draws) > 1  # seeded, not fixed
    np.testing.assert_array_equal(stratified_split(x, y, 0.25, 7)[1], stratified_split(x, y, 0.25, 7)[1])


def test_stratified_split_falls_back_and_rejects_what_cannot_be_split():
    y = np.array([0, 0, 0, 0, 0, 1])  # class 1 has one example: a plain random split
    x_tr, x_te, y_tr, y_te = stratified_split(np.arange(6), y, 0.5, 0)
    assert len(x_te) == 3 and sorted(np.concatenate([x_tr, x_te]).tolist()) == list(range(6))
    with pytest.raises(DataError, match="test size must lie in"):
        stratified_split(np.arange(6), y, 1.0, 0)
    with pytest.raises(DataError, match="cannot split 1 examples"):
        stratified_split(np.arange(1), np.zeros(1, int), 0.2, 0)


def test_digits_are_scikit_learns_and_load_without_importing_it():
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = load_digits_dataset()
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 0], d.images.astype(np.float32) / np.float32(16.0))
    np.testing.assert_array_equal(y, d.target)
    code = ("import sys; from numbacnn.data import load_dataset; ds = load_dataset(None); "
            "print(len(ds.y_train), len(ds.y_test), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["1437", "360", "False"], out.stderr


def test_idx_images_file_with_labels_beside_or_given(tmp_path):
    x, y = make_images(10)
    write_idx(str(tmp_path / "foo-images-idx3-ubyte"), x)
    write_idx(str(tmp_path / "foo-labels-idx1-ubyte"), y)
    ds = load_dataset(str(tmp_path / "foo-images-idx3-ubyte"), test_size=0.3)
    assert len(ds.y_train) + len(ds.y_test) == 10
    write_idx(str(tmp_path / "other.idx1"), y)
    ds = load_dataset(str(tmp_path / "foo-images-idx3-ubyte"), labels=str(tmp_path / "other.idx1"),
                      test_size=0.3)
    assert len(ds.y_train) == 7


@pytest.mark.parametrize("keys", [("x_train", "y_train", "x_test", "y_test"), ("x", "y")])
def test_npz_layouts(tmp_path, keys):
    x, y = make_images(20)
    arrays = dict(zip(keys, (x, y, x[:5], y[:5])))
    np.savez(tmp_path / "d.npz", **arrays)
    ds = load_dataset(str(tmp_path / "d.npz"))
    assert ds.x_train.shape[1:] == (1, 6, 6)
    assert len(ds.y_test) == (5 if len(keys) == 4 else 4)


@pytest.mark.parametrize("header", [True, False])
def test_csv_with_and_without_header(tmp_path, header):
    x, y = make_images(10, side=3)
    rows = [",".join(str(v) for v in [lab] + list(img.ravel())) for img, lab in zip(x, y)]
    text = ("label," + ",".join(f"p{i}" for i in range(9)) + "\n" if header else "") + "\n".join(rows)
    (tmp_path / "d.csv").write_text(text)
    xs, ys = load_csv(str(tmp_path / "d.csv"))
    assert xs.shape == (10, 1, 3, 3)
    np.testing.assert_allclose(xs[:, 0], x / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ys, y)


def test_digits_default():
    ds = load_dataset(None)
    assert ds.name == "digits" and ds.x_train.shape[1:] == (1, 8, 8)
    assert len(ds.y_train) + len(ds.y_test) == 1797 and 0 <= ds.x_train.min() and ds.x_train.max() <= 1


@pytest.mark.skipif(not os.path.isdir(MNIST_DIR), reason="shared MNIST test set not present")
def test_real_mnist_directory_loads_as_mnist10k():
    ds = load_dataset(MNIST_DIR, test_size=0.2, seed=0)
    assert ds.x_train.shape == (8000, 1, 28, 28) and ds.x_test.shape == (2000, 1, 28, 28)
    counts = np.bincount(np.concatenate([ds.y_train, ds.y_test]))
    assert counts.tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# --- bad files -------------------------------------------------------------------------------------
def _idx(tmp_path, name, arr):
    p = str(tmp_path / name)
    write_idx(p, arr)
    return p


def test_idx_errors_name_file_and_problem(tmp_path):
    x, y = make_images(10)
    img = _idx(tmp_path, "a-images-idx3-ubyte", x)
    raw = open(img, "rb").read()
    bad_magic = tmp_path / "bad-images-idx3-ubyte"
    bad_magic.write_bytes(b"\x12\x34\x08\x03" + raw[4:])
    with pytest.raises(DataError, match="bad-images.*magic"):
        read_idx(str(bad_magic))
    trunc = tmp_path / "t-images-idx3-ubyte"
    trunc.write_bytes(raw[:-7])
    with pytest.raises(DataError, match="t-images.*truncated"):
        read_idx(str(trunc))
    gzbad = tmp_path / "g-images-idx3-ubyte.gz"
    gzbad.write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(DataError, match="g-images.*gzip"):
        read_idx(str(gzbad))
    lab = _idx(tmp_path, "a-labels-idx1-ubyte", y[:7])
    with pytest.raises(DataError, match="10 images but .* 7 labels"):
        load_dataset(img)
    os.remove(lab)
    with pytest.raises(DataError, match="no labels file"):
        load_dataset(img)
    with pytest.raises(DataError, match="no such file"):
        load_dataset(str(tmp_path / "missing.npz"))


def test_npz_and_csv_errors(tmp_path):
    np.savez(tmp_path / "w.npz", images=np.zeros((3, 4, 4)))
    with pytest.raises(DataError, match="w.npz.*x_train"):
        load_npz(str(tmp_path / "w.npz"))
    np.savez(tmp_path / "r.npz", x=np.zeros((3, 4, 4)), y=np.array([0, 1, 300]))
    with pytest.raises(DataError, match="out of range"):
        load_npz(str(tmp_path / "r.npz"))
    np.savez(tmp_path / "e.npz", x=np.zeros((0, 4, 4)), y=np.zeros(0))
    with pytest.raises(DataError, match="empty"):
        load_npz(str(tmp_path / "e.npz"))
    np.savez(tmp_path / "s.npz", x_train=np.zeros((3, 4, 4)), y_train=np.zeros(3),
             x_test=np.zeros((2, 5, 5)), y_test=np.zeros(2))
    with pytest.raises(DataError, match="test images"):
        load_npz(str(tmp_path / "s.npz"))
    (tmp_path / "c.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DataError, match="c.npz"):
        load_npz(str(tmp_path / "c.npz"))
    (tmp_path / "n.csv").write_text("1,0,0,0,0\n2,0,abc,0,0\n")
    with pytest.raises(DataError, match="n.csv: line 2: non-numeric cell 'abc'"):
        load_csv(str(tmp_path / "n.csv"))
    (tmp_path / "ragged.csv").write_text("1,0,0,0,0\n2,0,0\n")
    with pytest.raises(DataError, match="line 2 has 3 columns"):
        load_csv(str(tmp_path / "ragged.csv"))
    (tmp_path / "ns.csv").write_text("1,0,0,0\n")
    with pytest.raises(DataError, match="not a square"):
        load_csv(str(tmp_path / "ns.csv"))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty"):
        load_csv(str(tmp_path / "empty.csv"))


# --- download ----------------------------------------------------------------------------------------
class _Server:
    """A tiny HTTP server on 127.0.0.1 with Range support; can cut the first response short."""

    def __init__(self, files, cut_first=False, corrupt=()):
        outer = self
        self.files, self.requests, self.cut_first, self.corrupt = files, [], cut_first, set(corrupt)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                outer.requests.append((name, self.headers.get("Range")))
                if name not in outer.files:
                    self.send_error(404)
                    return
                body = outer.files[name]
                if name in outer.corrupt:
                    body = body[:-1] + bytes([body[-1] ^ 1])
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    start = int(rng.split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if outer.cut_first and len(outer.requests) == 1:
                    self.wfile.write(body[start:start + len(body) // 2])  # then drop the connection
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _payloads():
    files = {"a.gz": gzip.compress(os.urandom(5000)), "b.gz": gzip.compress(b"labels" * 100)}
    return files, {k: hashlib.md5(v).hexdigest() for k, v in files.items()}


def test_download_resumes_a_cut_transfer_and_verifies(tmp_path):
    files, md5 = _payloads()
    with _Server(files, cut_first=True) as srv:
        paths = download("custom", str(tmp_path), mirrors=[srv.url], files=md5, backoff=0, log=lambda s: None)
    for p in paths:
        assert open(p, "rb").read() == files[os.path.basename(p)]
    assert any(r for name, r in srv.requests if name == "a.gz")  # second request used a Range header
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".part")]


def test_download_falls_back_to_next_mirror_and_never_keeps_bad_files(tmp_path):
    files, md5 = _payloads()
    with _Server(files, corrupt={"a.gz"}) as bad, _Server(files) as good:
        download("custom", str(tmp_path), mirrors=[bad.url, good.url], files=md5, backoff=0,
                 log=lambda s: None)
    assert open(tmp_path / "a.gz", "rb").read() == files["a.gz"]
    with _Server(files, corrupt={"a.gz"}) as bad:
        os.remove(tmp_path / "a.gz")
        with pytest.raises(DownloadError, match="a.gz.*checksum"):
            download("custom", str(tmp_path), mirrors=[bad.url], files=md5, retries=2, backoff=0,
                     log=lambda s: None)
    assert not (tmp_path / "a.gz").exists() and not (tmp_path / "a.gz.part").exists()


def test_download_command_line_reports_failure_cleanly(tmp_path, capsys):
    from numbacnn.data.download import main as download_main

    with _Server({}) as srv:  # serves nothing: every file is a 404
        rc = download_main(["download", "mnist", "--dir", str(tmp_path), "--mirror", srv.url,
                            "--retries", "1"])
    assert rc == 1
    assert "could not download train-images-idx3-ubyte.gz" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_fractional_labels_are_refused_not_truncated(tmp_path):
    x = np.zeros((4, 3, 3), np.uint8)
    p = tmp_path / "frac.npz"
    np.savez(p, x=x, y=np.array([0.0, 1.0, 1.5, 2.0]))
    with pytest.raises(DataError, match="whole numbers"):
        load_npz(str(p))
    np.savez(p, x=x, y=np.array([0.0, 1.0, 1.0, 2.0]))  # whole floats are fine, as integers
    _, y, _, _ = load_npz(str(p))
    assert y.dtype == np.int64 and y.tolist() == [0, 1, 1, 2]
    c = tmp_path / "frac.csv"
    c.write_text("label,a,b,c,d\n1,0,1,2,3\n2.5,4,5,6,7\n")
    with pytest.raises(DataError, match="whole numbers"):
        load_csv(str(c))
    for bad in (np.nan, np.inf):
        np.savez(p, x=x, y=np.array([0.0, 1.0, bad, 2.0]))
        with pytest.raises(DataError, match="whole numbers"):
            load_npz(str(p))
