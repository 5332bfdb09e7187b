"""precision="bf16": the bfloat16 kernels (kernels/cpu/bf16.py) and the Winograd F(4x4, 3x3) layers
that use them, against the float64 oracle with operands rounded to bf16 (reference.py); the
setting through the network, Trainer, estimators and train.py."""
import numpy as np
import pytest
import reference as ref
from conftest import choose_winograd, f32
from numba import njit

import numbacnn as nc
from numbacnn import tuning
from numbacnn.kernels.cpu import bf16 as B
from numbacnn.precision import amx_unit, bf16_unit, describe_unit


def bits_to_float(h):
    return (np.asarray(h, np.uint32) << 16).view(np.float32).astype(np.float64)


def rounded(a):
    h = np.zeros(a.size, np.uint16)
    B.round_bf16(h, 0, f32(a).reshape(-1), 0, a.size)
    return h.reshape(a.shape)


def test_rounding_is_to_nearest_with_ties_to_even(rng):
    """Every float32 class: normal values over the whole exponent range, exact ties (the low half
    0x8000, with an even and an odd upper half), subnormals, zeros, infinities and NaNs."""
    a = f32(rng.standard_normal(20000) * 10.0 ** rng.integers(-40, 38, 20000))
    ties = (rng.integers(0, 1 << 15, 200, dtype=np.uint32) << 17 | np.uint32(0x8000)
            | (rng.integers(0, 2, 200, dtype=np.uint32) << 16)).view(np.float32)
    special = f32([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-40, 3.3895314e38, np.finfo(np.float32).max])
    x = np.concatenate([a, ties, special, f32([np.nan, -np.nan])])
    got = bits_to_float(rounded(x))
    want = ref.bf16(x)
    finite = ~np.isnan(x)
    assert np.array_equal(got[finite], want[finite])
    assert np.isnan(got[~finite]).all() and np.signbit(got[-1])  # a NaN stays a NaN of its sign
    assert np.isinf(got[-3]) and got[-3] > 0  # float32's largest rounds up to inf, as torch does


@pytest.mark.parametrize("K,N", [(1, 16), (7, 16), (10, 48)])
def test_pack_pairs_lays_rows_out_in_pairs(rng, K, N):
    src = f32(rng.standard_normal((K, N + 3)))  # rows N + 3 apart: a pitch wider than the row
    K2 = (K + 1) // 2
    dst = np.full(2 + K2 * (2 * N + 4), 7, np.uint16)
    B.pack_pairs(dst, 2, 2 * N + 4, src.reshape(-1), 0, N + 3, K, N)
    r = rounded(src)
    for k in range(K2):
        row = dst[2 + k * (2 * N + 4):2 + k * (2 * N + 4) + 2 * N].reshape(N, 2)
        assert np.array_equal(row[:, 0], r[2 * k, :N])
        assert np.array_equal(row[:, 1], r[2 * k + 1, :N] if 2 * k + 1 < K else np.zeros(N, np.uint16))
    assert (dst[:2] == 7).all()  # nothing before the start


def pair_model(xh, wh, M, N, K2, first_y=None):
    """vdpbf16ps's sums in NumPy: per pair the odd term, then the even, each rounded to float32 (the
    products of bf16 values are exact; each sum rounds once)."""
    xv, wv = bits_to_float(xh).reshape(M, K2, 2), bits_to_float(wh).reshape(K2, N, 2)
    acc = np.zeros((M, N), np.float32) if first_y is None else first_y.copy()
    for k in range(K2):
        for e in (1, 0):
            acc = (acc.astype(np.float64) + xv[:, k, e, None] * wv[None, k, :, e]).astype(np.float32)
    return acc


@pytest.mark.parametrize("M,N,K", [(1, 16, 2), (13, 32, 9), (25, 48, 150), (7, 64, 200)])
def test_gemm_pairs_sums_as_the_instruction_does(rng, M, N, K):
    """gemm_pairs against the float64 oracle of the rounded operands (float32 accumulation: within
    K * 2^-23 of the sum of |products|), bit for bit against the instruction's order of sums in
    NumPy, with x read along its rows or stored transposed, written or added to y; more steps than
    PAIR_CHUNK (the reduction in chunks), rows past a whole block."""
    x, w = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    K2 = (K + 1) // 2
    xp = np.zeros((M, 2 * K2))
    xp[:, :K] = x
    xh = rounded(xp).reshape(-1)
    wh = np.zeros(K2 * 2 * N, np.uint16)
    B.pack_pairs(wh, 0, 2 * N, f32(w).reshape(-1), 0, N, K, N)
    y = np.full(M * N, np.nan, np.float32)
    B.gemm_pairs(y, 0, N, xh, 0, 2 * K2, 2, wh, 0, 2 * N, M, N, K2, True)
    y = y.reshape(M, N)
    exact = ref.bf16(x) @ ref.bf16(w)
    bound = K * 2.0 ** -23 * (np.abs(ref.bf16(x)) @ np.abs(ref.bf16(w)))
    assert (np.abs(y - exact) <= bound + 1e-30).all()
    assert np.array_equal(y, pair_model(xh, wh, M, N, K2))
    xt = np.zeros(K2 * 2 * M, np.uint16)  # x stored transposed (K, M), packed in pairs along K
    B.pack_pairs(xt, 0, 2 * M, f32(x.T).reshape(-1), 0, M, K, M)
    y2 = np.zeros(M * N, np.float32)
    B.gemm_pairs(y2, 0, N, xt, 0, 2, 2 * M, wh, 0, 2 * N, M, N, K2, True)
    assert np.array_equal(y2.reshape(M, N), y)
    B.gemm_pairs(y2, 0, N, xt, 0, 2, 2 * M, wh, 0, 2 * N, M, N, K2, False)
    assert np.array_equal(y2.reshape(M, N), pair_model(xh, wh, M, N, K2, y))


_EMULATED = B._pair_block(6, 2, False)


@njit
def _emulated_gemm(yf, xh, wh, M, N, K2):
    for c in range(0, N, 32):
        for p in range(0, M, 6):
            _EMULATED(yf, p * N + c, N, xh, p * 2 * K2, 2 * K2, 2, min(6, M - p), wh, 2 * c, 2 * N, K2, True)


def test_the_emulated_block_sums_as_the_unit_does(rng):
    """The block compiled without AVX512_BF16 (two float32 FMAs a pair, the odd term first) gives the
    bits of the one with it (the unit's, where this CPU has it), for normal operands."""
    M, N, K2 = 9, 64, 40
    xh = rounded(rng.standard_normal(M * 2 * K2))
    wh = rounded(rng.standard_normal(K2 * 2 * N))
    y = np.zeros(M * N, np.float32)
    _emulated_gemm(y, xh, wh, M, N, K2)
    assert np.array_equal(y.reshape(M, N), pair_model(xh, wh, M, N, K2))
    y2 = np.zeros(M * N, np.float32)
    B.gemm_pairs(y2, 0, N, xh, 0, 2 * K2, 2, wh, 0, 2 * N, M, N, K2, True)
    assert np.array_equal(y, y2)


amx = pytest.mark.skipif(not B.AMX_UNIT, reason="no AMX tiles for this process (CPU, kernel target or Linux)")


@amx
@pytest.mark.parametrize("M,N,K2", [(16, 16, 8), (5, 32, 16), (37, 48, 40), (70, 64, 96), (33, 16, 24)])
def test_gemm_tiles_sums_within_float32s_bound(rng, M, N, K2):
    """gemm_tiles (AMX's tdpbf16ps) against the float64 oracle of the rounded operands, within K *
    2^-23 of the sum of |products|; whole 16-row blocks, a tail, fewer than 16 rows, 16-wide and
    32-wide column blocks, steps of 8 and of 16 pairs; added to y; the same bits whatever rows a
    call covers (the order of the sums is per row), as a split among threads needs."""
    K = 2 * K2
    x, w = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    xh = rounded(x).reshape(-1)
    wh = np.zeros(K2 * 2 * N, np.uint16)
    B.pack_pairs(wh, 0, 2 * N, f32(w).reshape(-1), 0, N, K, N)
    ys = N + 16  # C's rows wider than N: the pitch is honoured
    y = np.full(M * ys, np.nan, np.float32)
    B.gemm_tiles(y, 0, ys, xh, 0, K, wh, 0, 2 * N, M, N, K2, True)
    got = y.reshape(M, ys)
    assert np.isnan(got[:, N:]).all()  # nothing past N
    got = got[:, :N].astype(np.float64)
    exact = ref.bf16(x) @ ref.bf16(w)
    bound = K * 2.0 ** -23 * (np.abs(ref.bf16(x)) @ np.abs(ref.bf16(w)))
    assert (np.abs(got - exact) <= bound + 1e-30).all()
    assert np.abs(got - exact).max() > 0 or K2 <= 8  # float32 sums, not float64's
    split = np.full(M * ys, np.nan, np.float32)
    for r0, r1 in ((0, M // 3), (M // 3, M)):
        B.gemm_tiles(split, r0 * ys, ys, xh, r0 * K, K, wh, 0, 2 * N, r1 - r0, N, K2, True)
    assert np.array_equal(split.reshape(M, ys)[:, :N], got)
    B.gemm_tiles(y, 0, ys, xh, 0, K, wh, 0, 2 * N, M, N, K2, False)
    assert (np.abs(y.reshape(M, ys)[:, :N] - 2 * exact) <= 2 * bound + 1e-30).all()


@pytest.mark.parametrize("TB", [1, 21, 32])
def test_weight_gemms_ignore_what_the_scratch_held(rng, TB):
    """The F(4x4) weight gradient's 36 bf16 GEMMs (dU[k] = V[k]^T @ dM[k]) write the same values
    whatever their packed scratch held before (NaN here, as a diverged step leaves it): the pair
    rows past the last tile (odd TB, and on AMX up to the next 16) are zeros, not stale values that
    a zero times NaN would carry in. Within float32's bound of the rounded operands' product."""
    from numbacnn.kernels.cpu.conv2d_winograd4 import _weight_gemms4_pairs

    Ci, Co = 16, 32
    T16 = (TB + 15) // 16 * 16
    v, m = rng.standard_normal((36, TB, Ci)), rng.standard_normal((36, TB, Co))
    vp = np.full(36 * Ci * T16, 0x7FC0, np.uint16)  # bf16 NaN
    mp = np.full(36 * Co * T16, 0x7FC0, np.uint16)
    du = np.full(36 * Ci * Co, np.nan, np.float32)
    mf, vf = f32(m).reshape(-1), f32(v).reshape(-1)
    _weight_gemms4_pairs(du, mf, vf, vp, mp, Co, Ci, TB, TB * Co, TB * Ci, True)
    du = du.reshape(36, Ci, Co)
    exact = np.einsum("kti,kto->kio", ref.bf16(v), ref.bf16(m))
    bound = 2 * TB * 2.0 ** -23 * np.einsum("kti,kto->kio", np.abs(ref.bf16(v)), np.abs(ref.bf16(m)))
    assert (np.abs(du - exact) <= bound + 1e-30).all()


@pytest.mark.parametrize("T,C,T1", [(13, 5, 16), (45, 37, 48), (32, 16, 32)])
def test_round_transposed_stores_columns_as_rows(rng, T, C, T1):
    """Odd and even T, blocks of 16 pairs and 16 columns with tails, zeros to T1, a pitch wider
    than T1; nothing written before d0 or past a row's T1."""
    ld = T1 + 4
    src = f32(rng.standard_normal((T, C + 2)))  # rows C + 2 apart
    dst = np.full(4 + C * ld, 7, np.uint16)
    B.round_transposed(dst, 4, ld, src.reshape(-1), 0, C + 2, T, C, T1)
    r = rounded(src)
    for c in range(C):
        row = dst[4 + c * ld:4 + (c + 1) * ld]
        assert np.array_equal(row[:T], r[:, c]) and (row[T:T1] == 0).all() and (row[T1:] == 7).all()
    assert (dst[:4] == 7).all()


# --- Winograd F(4x4, 3x3) in bf16 --------------------------------------------------------------------
# The stated bounds, as fractions of the largest value: against the bf16 oracle (transforms in
# float64, then rounded) 4e-3, for the rare element that float32 transforms round to the other side
# of a bf16 rounding boundary (one bf16 step, 2^-8 relative, carried through the output transform);
# against the exact convolution the bf16 rounding of F(4x4)'s transformed values shows (1-8 % here),
# so a layer that skipped the rounding would fail the first bound's twin below.
BF16_BOUND = 4e-3


def close(a, b):
    assert np.abs(a - b).max() <= BF16_BOUND * np.abs(b).max()


def rounding_shows(a, exact):
    assert np.abs(a - exact).max() > 2 * BF16_BOUND * np.abs(exact).max()


@pytest.mark.parametrize("N,Ci,Co,H,P", [(4, 32, 32, 8, 1), (3, 64, 48, 7, 1), (2, 32, 32, 10, 0),
                                          (3, 48, 32, 6, 2),
                                          (3, 32, 32, 3, 1)])  # one tile an example: odd tile counts
def test_winograd4_bf16_matches_the_bf16_oracle(rng, monkeypatch, N, Ci, Co, H, P):
    """Forward, input gradient, weight and bias gradients of a F(4x4, 3x3) layer at precision bf16
    against reference.winograd4_bf16_*; the input gradient skipped for a first layer; back at
    float32 the layer gives float32's bits again."""
    choose_winograd(monkeypatch, always=True, f4=True)
    net = nc.Sequential([nc.Conv2D(Ci, Co, 3, padding=P)], seed=1)
    conv = net.layers[0]
    x = f32(rng.standard_normal((N, Ci, H, H)))
    y32 = net.forward(x, training=True).copy()
    net.set_precision("bf16")
    assert conv.runs_bf16 and net.bf16_layers() == [conv.name]
    y = net.forward(x, training=True)
    assert conv.plan.variant(x.shape) == "winograd4"
    want = ref.winograd4_bf16_forward(x, conv.weight, conv.bias, P)
    exact = ref.conv2d_forward(x, conv.weight, conv.bias, 1, P)
    close(y, want)
    rounding_shows(y, exact)
    dy = f32(rng.standard_normal(y.shape))
    dx = net.backward(dy)
    rdx, rdw, rdb = ref.winograd4_bf16_backward(dy, x, conv.weight, P)
    close(dx, rdx)
    close(conv.dweight, rdw)
    np.testing.assert_allclose(conv.dbias, rdb, rtol=1e-5, atol=1e-4)  # float32 sums, unrounded
    rounding_shows(conv.dweight, ref.conv2d_backward(dy, x, conv.weight, 1, P)[1])
    assert conv.backward(dy, need_dx=False) is None
    close(conv.dweight, rdw)
    net.set_precision("float32")
    assert not conv.runs_bf16
    assert np.array_equal(net.forward(x, training=True), y32)


def test_winograd4_bf16_with_a_fused_relu_and_pool(rng, monkeypatch):
    """conv + ReLU + 2x2 max pool fused into the bf16 layer: the pool of the ReLU of the bf16 oracle,
    the gradient routed to each example's own argmax before the rounded transforms."""
    choose_winograd(monkeypatch, always=True, f4=True)
    net = nc.Sequential([nc.Conv2D(32, 32, 3, padding=1), nc.ReLU(), nc.MaxPool2D(2)], seed=2)
    net.set_precision("bf16")
    conv = net.layers[0]
    x = f32(rng.standard_normal((3, 32, 8, 8)))
    y = net.forward(x, training=True)
    assert conv.fusion.pool is not None and conv.runs_bf16
    h = np.maximum(ref.winograd4_bf16_forward(x, conv.weight, conv.bias, 1), 0)
    close(y, ref.maxpool2d_forward(h, 2, 2, 0)[0])
    dy = f32(rng.standard_normal(y.shape))
    dx = net.backward(dy)
    dh = ref.maxpool2d_backward(dy, h, 2, 2, 0) * (h > 0)
    rdx, rdw, _ = ref.winograd4_bf16_backward(dh, x, conv.weight, 1)
    close(dx, rdx)
    close(conv.dweight, rdw)


def test_bf16_steps_are_the_same_bits_on_one_thread_and_two(rng, monkeypatch):
    """A training step at precision bf16 gives the same bits whatever the thread count (the weight
    gradient summed in parts of the batch fixed by the shapes, as in float32)."""
    choose_winograd(monkeypatch, always=True, f4=True)
    monkeypatch.setattr(tuning, "WINOGRAD_MIN_CHANNELS", 16)
    x = f32(rng.standard_normal((8, 16, 8, 8)))
    y = rng.integers(0, 3, 8)
    out = []
    before = nc.get_num_threads()
    try:
        for threads in (1, 2):
            nc.set_num_threads(threads)
            net = nc.Sequential([nc.Conv2D(16, 32, 3, padding=1), nc.ReLU(), nc.Conv2D(32, 16, 3, padding=1),
                                 nc.ReLU(), nc.GlobalAvgPool2D(), nc.Dense(16, 3)], seed=3)
            opt = nc.SGD(net, lr=0.1, momentum=0.9)
            tr = nc.Trainer(net, opt, batch_size=8, progress=False, precision="bf16")
            assert len(net.bf16_layers()) == 2
            for _ in range(3):
                tr.train_step(x, y)
            out.append(net.params.copy())
    finally:
        nc.set_num_threads(before)
    assert np.array_equal(out[0], out[1])


def test_precision_is_checked_and_reported():
    net = nc.Sequential([nc.Conv2D(1, 4, 3), nc.Flatten(), nc.Dense(4 * 4 * 4, 2)], seed=0)
    for bad in ("fp16", "bfloat16", None, 16):
        with pytest.raises(ValueError, match="precision must be one of float32, bf16"):
            net.set_precision(bad)
    with pytest.raises(ValueError, match="precision must be one of"):
        nc.Trainer(net, nc.SGD(net, lr=0.1), precision="half")
    assert net.set_precision("bf16").bf16_layers() == []  # no F(4x4) layer: every layer float32
    assert describe_unit("bf16").startswith("precision bf16 on AMX" if amx_unit() else
                                            "precision bf16 on AVX512_BF16" if bf16_unit()
                                            else "precision bf16 emulated")
    assert (bf16_unit(), amx_unit()) == (B.BF16_UNIT, B.AMX_UNIT)  # the line names the unit that runs


def test_train_py_precision_flag(tmp_path, capsys):
    """--precision: an unknown value and bf16 on CUDA get one line and exit 2; a bf16 run says so in
    its first line (the unit) and the next (the layers), and records it in --metrics-out."""
    from conftest import tiny_npz

    from numbacnn.cli import main

    for argv, msg in ((["--precision", "fp16"], "invalid choice: 'fp16'"),
                      (["--precision", "bf16", "--device", "cuda"], "--precision bf16 runs on the CPU only")):
        assert main(argv + ["--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, err
    out = tmp_path / "m.json"
    data = tiny_npz(tmp_path / "t.npz", 60)
    arch = "conv(4,3,padding=same),relu,maxpool(2),dense(16),relu"
    assert main(["--data", data, "--arch", arch, "--epochs", "1", "--precision", "bf16", "--metrics-out",
                 str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(describe_unit("bf16")), lines[0]
    assert ("AVX512_BF16 (vdpbf16ps)" in lines[0]) == bf16_unit(), lines[0]
    assert ("AMX (tdpbf16ps)" in lines[0]) == amx_unit(), lines[0]
    assert lines[1].startswith("precision bf16: no layer of this network has bf16 kernels"), lines[1]
    import json

    assert json.loads(out.read_text())["precision"] == "bf16"


def test_estimators_take_the_precision():
    from numbacnn import CNNClassifier, CNNRegressor

    for cls in (CNNClassifier, CNNRegressor):
        assert cls().get_params()["precision"] == "float32"
        X = np.random.default_rng(0).random((8, 64), dtype=np.float32)
        y = np.arange(8) % 2
        with pytest.raises(ValueError, match="precision"):
            cls(input_shape=(1, 8, 8), precision="fp16", max_epochs=1).fit(X, y)
        with pytest.raises(ValueError, match="precision bf16 runs on the CPU only"):
            cls(input_shape=(1, 8, 8), precision="bf16", device="cuda", max_epochs=1).fit(X, y)
        est = cls(input_shape=(1, 8, 8), precision="bf16", max_epochs=1,
                  architecture="conv(4,3),relu,dense(4)")
        est.fit(X, y)
        assert est.net_.precision == "bf16"
