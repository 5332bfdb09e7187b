"""Fuzzed loaders (random corruption gives a DataError, never a crash), checkpoint integrity, SIGTERM."""
import gzip
import io
import os
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numbacnn as nc
from numbacnn.checkpoint import CheckpointError
from numbacnn.data import DataError, load_csv, load_npz, read_idx, write_idx

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=list(HealthCheck))


def _idx_bytes(gz: bool) -> bytes:
    a = np.arange(3 * 4 * 4, dtype=np.uint8).reshape(3, 4, 4)
    payload = bytes([0, 0, 8, 3]) + np.array([3, 4, 4], ">u4").tobytes() + a.tobytes()
    return gzip.compress(payload) if gz else payload


def _corrupt(data: bytes, edits, cut) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        if b:
            b[pos % len(b)] = val
    return bytes(b[:cut]) if cut is not None else bytes(b)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)
cuts = st.one_of(st.none(), st.integers(0, 400))


@FUZZ
@given(gz=st.booleans(), edits=edits, cut=cuts)
def test_fuzzed_idx_gives_clean_errors(tmp_path_factory, gz, edits, cut):
    p = tmp_path_factory.mktemp("idx") / ("f.idx.gz" if gz else "f.idx")
    p.write_bytes(_corrupt(_idx_bytes(gz), edits, cut))
    try:
        a = read_idx(str(p))
    except DataError:
        return
    assert isinstance(a, np.ndarray)


@FUZZ
@given(edits=edits, cut=cuts, text=st.text(max_size=40))
def test_fuzzed_csv_gives_clean_errors(tmp_path_factory, edits, cut, text):
    good = "label," + ",".join(f"p{i}" for i in range(4)) + "\n1,0,10,200,255\n0,3,4,5,6\n"
    p = tmp_path_factory.mktemp("csv") / "f.csv"
    p.write_bytes(_corrupt((good + text).encode(), edits, cut))
    try:
        x, y = load_csv(str(p))
    except DataError:
        return
    assert x.dtype == np.float32 and x.shape[0] == y.shape[0]


@FUZZ
@given(edits=edits, cut=st.one_of(st.none(), st.integers(0, 3000)))
def test_fuzzed_npz_gives_clean_errors(tmp_path_factory, edits, cut):
    buf = io.BytesIO()
    np.savez(buf, x=np.arange(48, dtype=np.uint8).reshape(3, 4, 4), y=np.array([0, 1, 0]))
    p = tmp_path_factory.mktemp("npz") / "f.npz"
    p.write_bytes(_corrupt(buf.getvalue(), edits, cut))
    try:
        x, y, xt, yt = load_npz(str(p))
    except DataError:
        return
    # a zip member's bytes are CRC-checked: whatever still loads is the original data
    np.testing.assert_array_equal(x, np.arange(48, dtype=np.float32).reshape(3, 1, 4, 4) / 255)
    np.testing.assert_array_equal(y, [0, 1, 0])
    assert xt is None and yt is None


@FUZZ
@given(shape=st.lists(st.integers(0, 9), min_size=0, max_size=5),
       dtype=st.sampled_from([np.float32, np.float64, np.int32, np.uint8, np.bool_, np.complex64]))
def test_any_input_shape_gives_value_error_not_a_crash(shape, dtype):
    net = nc.Sequential([nc.Conv2D(1, 2, 3), nc.ReLU(), nc.MaxPool2D(2), nc.Flatten(),
                         nc.Dense(2 * 2 * 2, 3)], seed=0)
    x = np.ones(shape, dtype)
    try:
        out = net.forward(x)
    except ValueError:
        return
    assert out.shape == (shape[0], 3)


def _npz_with_member_field(offset: int, value: int) -> bytes:
    """An .npz whose central-directory entries carry ``value`` at ``offset`` (8: the flag bits,
    1 = encrypted; 10: the compression method)."""
    buf = io.BytesIO()
    np.savez(buf, x=np.arange(48, dtype=np.uint8).reshape(3, 4, 4), y=np.array([0, 1, 0]))
    b = bytearray(buf.getvalue())
    at = b.find(b"PK\x01\x02")
    assert at > 0
    while at >= 0:
        b[at + offset:at + offset + 2] = value.to_bytes(2, "little")
        at = b.find(b"PK\x01\x02", at + 4)
    return bytes(b)


@pytest.mark.parametrize("offset,value,what", [(8, 1, "encrypted"), (10, 99, "compression method")])
def test_encrypted_or_unknown_compression_npz_is_one_clean_error(tmp_path, offset, value, what):
    p = tmp_path / "f.npz"
    p.write_bytes(_npz_with_member_field(offset, value))
    with pytest.raises(DataError, match=what):
        load_npz(str(p))
    with pytest.raises(CheckpointError, match=what):
        nc.load_checkpoint(str(p))


def test_checkpoint_corruption_and_truncation_are_detected(tmp_path):
    net = nc.build_network("conv(2,3),relu,dense(4)", (1, 6, 6), 3, seed=0)
    path = tmp_path / "c.npz"
    nc.save(net, str(path))
    raw = path.read_bytes()
    # rewrite one parameter array inside the zip: the checksum must catch it
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    name = next(n for n in members if n.startswith("param/"))
    arr = np.load(io.BytesIO(members[name]))
    arr = arr + np.float32(1)
    b = io.BytesIO()
    np.save(b, arr)
    members[name] = b.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    path.write_bytes(out.getvalue())
    with pytest.raises(CheckpointError, match="checksum"):
        nc.load(str(path))
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="c.npz"):
        nc.load(str(path))
    np.savez(path, param=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a numbacnn checkpoint"):
        nc.load(str(path))
    with pytest.raises(CheckpointError, match="no such"):
        nc.load(str(tmp_path / "missing.npz"))


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    net = nc.build_network("dense(4)", (1, 2, 2), 2, seed=0)
    path = tmp_path / "c.npz"
    nc.save(net, str(path))
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        nc.save(net, str(path))
    assert path.read_bytes() == before  # the old checkpoint survives a failed write
    assert os.listdir(tmp_path) == ["c.npz"]


def test_sigterm_saves_checkpoint_and_exits_143(tmp_path):
    ck = tmp_path / "ck.npz"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--quiet", "--epochs",
                             "500", "--arch", "dense(8),relu", "--save", str(ck)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and "Traceback" not in err
    assert nc.load_checkpoint(str(ck)).meta["training"]["trainer"]["epoch"] >= 1


def test_write_idx_roundtrip(tmp_path):
    a = np.random.default_rng(0).integers(0, 255, (5, 3, 2), dtype=np.uint8)
    write_idx(str(tmp_path / "a.gz"), a)
    np.testing.assert_array_equal(read_idx(str(tmp_path / "a.gz")), a)


_PY_MODE_SCRIPT = r"""
import sys
import numpy as np
import numbacnn as nc
out = {}
for i, (spec, shape) in enumerate(SPECS):
    net = nc.build_network(spec, shape, 4, seed=1)
    rng = np.random.default_rng(i)
    x = rng.standard_normal((5,) + shape).astype(np.float32)
    loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), rng.integers(0, 4, 5))
    net.backward(d)
    out[f"strategies{i}"] = np.array([getattr(layer, "strategy", "") for layer in net.layers])
    for j, layer in enumerate(net.layers):
        for name in getattr(layer, "param_names", ()):
            out[f"{i}.{j}.d{name}"] = np.array(getattr(layer, "d" + name))
np.savez(sys.argv[1], **out)
"""
_PY_MODE_SPECS = [  # every conv strategy, fused and unfused pooling, padding and strides
    ("conv(4,3,padding=1),relu,maxpool(2),conv(8,3,stride=2),relu,dense(6),tanh", (8, 9, 9)),
    ("conv(12,3),relu,maxpool(2),conv(4,2),avgpool(2),dense(5)", (12, 10, 10)),
    # FMA blocks: 16 x 16 transposes in and out, 6 x 32 blocks under a strided, fused pool, the
    # input gradient of a 16-channel stride-1 layer
    ("conv(16,3,padding=1),relu,conv(16,3,padding=1),relu,conv(32,3,stride=2),relu,maxpool(2),dense(5)",
     (16, 5, 17)),
    ("conv(12,3,stride=2,padding=1),relu,maxpool(2),dense(5),relu", (12, 9, 9)),
    ("conv(32,3,padding=1),relu,maxpool(2),dense(5)", (32, 4, 18)),  # Winograd, transposed plane rows
]


@pytest.mark.slow
def test_python_mode_runs_the_same_kernels_with_numpy_bounds_checks(tmp_path):
    """Under NUMBA_DISABLE_JIT=1 (debugging, coverage) every kernel runs as Python, where NumPy
    raises on an out-of-bounds index (compiled code would read past the array silently), and
    the gradients agree with the compiled run."""
    script = tmp_path / "run.py"
    script.write_text(f"SPECS = {_PY_MODE_SPECS!r}\n" + _PY_MODE_SCRIPT)
    env = dict(os.environ)
    for name, value in (("py", "1"), ("jit", "0")):
        env["NUMBA_DISABLE_JIT"] = value
        subprocess.run([sys.executable, str(script), str(tmp_path / f"{name}.npz")], env=env,
                       check=True, timeout=300, cwd=ROOT)
    py, jit = np.load(tmp_path / "py.npz"), np.load(tmp_path / "jit.npz")
    assert set(py.files) == set(jit.files)
    strategies = {s for k in py.files if k.startswith("strategies") for s in py[k]}
    assert {"direct", "wide", "positions", "gemm", "winograd"} <= strategies
    for k in py.files:
        if not k.startswith("strategies"):
            np.testing.assert_allclose(py[k], jit[k], rtol=1e-4, atol=1e-5, err_msg=k)
