"""Every CPU kernel (through its layer) against the float64 oracle in reference.py."""
import math
from dataclasses import replace

import numpy as np
import pytest
import reference as ref
from conftest import choose_winograd, f32

import numbacnn as nc
from numbacnn import tuning
from numbacnn.kernels import cpu as K
from numbacnn.layers.base import Fusion

NO_RECORD = np.zeros(0, np.int32)  # a fold or packing without a record: always runs

CONV_CASES = [  # (N, Ci, H, W, Co, K, stride, padding)
    (3, 1, 7, 7, 4, 3, 1, 0),
    (2, 3, 9, 8, 5, 3, 2, 1),
    (2, 2, 8, 9, 3, 3, 1, "same"),
    (1, 3, 11, 10, 2, 5, 2, 2),
    (5, 4, 6, 6, 7, 1, 1, 0),
    (2, 2, 7, 7, 3, 4, 3, 1),
    (17, 2, 5, 6, 3, 3, 1, 1),  # 17 gradient parts of one example
    (2, 2, 1, 9, 3, (1, 3), (1, 2), (0, 1)),  # non-square kernel, stride and padding (1-row input)
    (2, 2, 6, 7, 3, (3, 5), 1, (1, 0)),  # wide rows, padded rows only
    (2, 2, 6, 7, 3, (3, 2), 1, (0, 2)),  # wide rows, padded columns only, even kernel width
    (70, 1, 6, 8, 2, (2, 4), 1, 0),  # wide rows, 64 gradient parts of 1 or 2 examples
    (2, 3, 9, 9, 6, 5, 1, 0),  # wide rows, lenet-like
    (2, 3, 5, 5, 4, 5, 1, 0),  # kernel as large as the input: 1x1 output
    (130, 12, 5, 6, 32, 3, 1, 1),  # position-major, 64 parts of 2 or 3 examples, GEMMs over up to 3
    (19, 12, 6, 5, 32, 3, 1, 0),  # the same unpadded, parts of one example
    (130, 8, 5, 6, 32, 3, 1, 1),  # wide rows, grouped backward GEMMs
    (3, 9, 7, 6, 5, (3, 4), 1, (1, 2)),  # position-major, rectangular kernel and padding
    (2, 9, 3, 4, 4, (3, 4), 1, 0),  # position-major, kernel as large as the input: 1x1 output
    (2, 3, 9, 8, 4, (7, 5), 1, (3, 1)),  # position-major with few channels and a large kernel
    (150, 12, 9, 8, 32, 3, 2, 1),  # position-major strided, grouped backward GEMMs
    (1, 12, 7, 6, 32, 3, 1, 1),  # position-major, one example in 4 blocks of rows
    (1, 12, 9, 8, 32, 3, 2, 1),  # position-major strided, one example in blocks
    (3, 16, 20, 18, 48, 3, 1, 1),  # position-major, 3 blocks an example (GEMMs kept small)
    (150, 16, 12, 11, 48, 3, 1, 1),  # backward GEMMs in pieces that cross examples and groups
    (2, 16, 17, 33, 16, 3, 1, 1),  # FMA blocks of 12 x 16 with a short last one; 16 x 16 transposes,
    # the last overlapping, in and out
    (2, 16, 19, 21, 32, 3, 2, 1),  # FMA blocks of 6 x 32, strided
    (3, 32, 9, 7, 32, 3, 1, 1),  # Winograd: odd sizes (a half tile at the edges)
    (130, 32, 5, 6, 33, 3, 1, 0),  # Winograd: parts of 2-3 examples, weight GEMMs across them
    (2, 33, 16, 15, 40, 3, 1, 2),  # Winograd: padding 2, odd channel counts
    (1, 32, 30, 31, 32, 3, 1, 1),  # Winograd: one example in blocks of tile rows
    (2, 64, 34, 30, 64, 3, 1, 1),  # Winograd: weight GEMMs flushed inside an example
    (17, 12, 14, 14, 32, 3, 1, 1),  # 196 positions (at most 6 examples per GEMM)
    (3, 9, 9, 11, 5, (3, 4), (2, 3), (1, 2)),  # position-major, rectangular kernel and stride
    (2, 12, 8, 7, 4, 2, 3, 0),  # position-major, stride above the kernel: inputs never read
    (2, 12, 6, 6, 4, 5, 2, 0),  # position-major strided, 1x1 output
    (21, 16, 7, 7, 32, 3, 1, 1),  # F(4x4, 3x3): 2 x 2 tiles an example, blocks and parts across examples
    (5, 32, 9, 6, 16, 3, 1, 0),  # F(4x4, 3x3): unpadded, a part of a tile in each direction
    (3, 16, 5, 11, 48, 3, 1, 2),  # F(4x4, 3x3): padding 2, panels of 16 columns
    (70, 16, 3, 3, 64, 3, 1, 1),  # F(4x4, 3x3): 3 x 3 outputs in one tile, input gradients in groups
    (9, 24, 13, 10, 32, 3, 1, 1),  # F(4x4, 3x3): 24 input channels (one panel of 24 for the input gradient)
]


def _pad(p, k):
    return k // 2 if p == "same" else p  # "same" cases use square odd kernels


def test_conv_strategy_is_chosen_per_layer_shape():
    assert nc.Conv2D(1, 6, 5).strategy == "direct"  # stride 1, Ci*KH*KW <= 64
    assert nc.Conv2D(32, 64, 3).strategy == "winograd"  # 3x3, stride 1, 32+ channels each
    assert nc.Conv2D(64, 32, 3, padding=2).strategy == "winograd"
    assert nc.Conv2D(16, 64, 3).strategy == "positions"
    assert nc.Conv2D(32, 64, 3, padding=3).strategy == "positions"
    assert nc.Conv2D(32, 64, 5).strategy == "positions"
    assert nc.Conv2D(6, 16, 5).strategy == "positions"  # LeNet's second layer
    assert nc.Conv2D(12, 4, 3, padding=1).strategy == "positions"
    assert nc.Conv2D(8, 4, 3).strategy == "wide"  # 64 < Ci*KH*KW < 100
    assert nc.Conv2D(7, 4, 3).strategy == "direct"  # Ci*KH*KW = 63
    assert nc.Conv2D(2, 4, 9).strategy == "wide"  # too few channels for long copies
    assert nc.Conv2D(1, 32, 3).strategy == "direct"
    assert nc.Conv2D(1, 6, 5, padding=2).strategy == "direct"
    assert nc.Conv2D(1, 6, 5, stride=2).strategy == "gemm"
    assert nc.Conv2D(32, 64, 3, stride=2).strategy == "positions"  # any stride
    assert nc.Conv2D(12, 4, 3, stride=(1, 2)).strategy == "positions"
    assert nc.Conv2D(3, 8, 3, stride=2).strategy == "gemm"  # strided and narrow
    assert nc.Conv2D(3, 8, 3, stride=(1, 2)).strategy == "gemm"
    assert nc.Conv2D(8, 4, 3, stride=2).strategy == "gemm"
    # wide layers: backward GEMMs over groups of examples, up to about 1,200 rows
    from numbacnn.backend.cpu_conv import group_size

    def group(ci, co, k, rows, n=512):
        return group_size(nc.Conv2D(ci, co, k).geometry, rows, n)
    assert group(32, 64, 3, 121) == 8 and group(32, 64, 3, 196) == 6
    assert group(32, 32, 3, 576) == 2 and group(32, 32, 3, 784) == 1
    assert group(6, 16, 5, 64) == 1 and group(1, 32, 3, 676) == 1
    # never more than one gradient part: a batch of n is split into min(n, 64) parts
    assert group(32, 64, 3, 121, 256) == 4 and group(32, 64, 3, 121, 130) == 3
    assert group(32, 64, 3, 121, 128) == 2 and group(32, 64, 3, 121, 64) == 1


def _ran_as_chosen(layer):
    """The chosen plan's kernels ran: position-major ones keep a transposed input ("xt"),
    Winograd ones their transformed filters, the "direct" ones an empty im2col workspace and the
    "wide" ones a full one."""
    bufs = layer._buffers
    assert ("xt" in bufs) == (layer.strategy == "positions")
    assert ("wino_u" in bufs or "wino4_u" in bufs) == (layer.strategy == "winograd")
    if layer.strategy == "winograd":  # F(4x4, 3x3) where the chooser takes it for the input kept
        f4 = layer.plan.variant(bufs["x"].shape, layer.fusion.pool) == "winograd4"
        assert ("wino4_u" in bufs) == f4
    if layer.strategy in ("wide", "direct"):
        assert (bufs["cols"].shape[1] == 1) == (layer.strategy == "direct")


def _other_row_plan(layer, plan, monkeypatch):
    """plan "chosen": as the backend chose; "swapped": a stride-1 layer's other row plan ("wide"
    for a "direct" layer and the reverse), so that both stay checked on every shape; "winograd":
    the Winograd plan, for every 3x3 stride-1 shape whatever its channels; "winograd4": its
    F(4x4, 3x3) (output channels divisible by 16)."""
    if plan in ("winograd", "winograd4"):
        from numbacnn.backend.cpu_conv import WinogradPlan

        assert WinogradPlan.fits(layer.geometry)
        layer._plan = WinogradPlan(layer.geometry)
    if layer.strategy == "winograd":  # the Winograd kernels on every shape (small batches fall back)
        choose_winograd(monkeypatch, always=True, f4={"winograd4": True, "winograd": False}.get(plan))
    if plan == "swapped":
        from numbacnn.backend.cpu_conv import DirectPlan, WidePlan

        assert layer.strategy in ("wide", "direct")
        layer._plan = (WidePlan if layer.strategy == "direct" else DirectPlan)(layer.geometry)
    return layer


def _row_cases(cases):
    """(case, "chosen") for every case (N, Ci, H, W, Co, K, stride, padding, ...), plus (case,
    "swapped") for the stride-1 cases that run on wide rows, (case, "winograd") for those the
    Winograd plan can run and (case, "winograd4") for those its F(4x4, 3x3) can."""
    from numbacnn.backend.cpu_conv import WinogradPlan

    out = []
    for case in cases:
        out.append((*case, "chosen"))
        Ci, Co, K, S, P = case[1], case[4], case[5], case[6], case[7]
        layer = nc.Conv2D(Ci, Co, K, stride=S, padding=P)
        if layer.strategy in ("wide", "direct"):
            out.append((*case, "swapped"))
        if layer.strategy != "winograd" and WinogradPlan.fits(layer.geometry):
            out.append((*case, "winograd"))
        if WinogradPlan.fits(layer.geometry) and Co % 16 == 0:
            out.append((*case, "winograd4"))
    return out


DIRECT_CASES = [  # the direct kernels' taps (5, 3, 1 per pass) and channel pairs
    (3, 1, 9, 12, 1, (2, 1), 1, 0),  # one output channel (paired with itself), single taps
    (2, 2, 8, 13, 3, (1, 4), 1, (0, 1)),  # odd channels; 3 + 1 taps
    (2, 1, 9, 14, 5, (3, 6), 1, (1, 2)),  # 5 + 1 taps, padded
    (2, 2, 10, 13, 4, (2, 7), 1, 0),  # 5 + 1 + 1
    (2, 1, 12, 14, 2, (3, 8), 1, 1),  # 5 + 3
    (2, 1, 9, 16, 3, (2, 11), 1, (0, 3)),  # 5 + 5 + 1
    (4, 7, 6, 6, 3, 3, 1, 0),  # 63 floats per filter: the longest direct one
    (70, 1, 6, 9, 3, (2, 5), 1, 0),  # odd channels, parts of 2 examples (accumulated)
    (2, 1, 10, 11, 6, 3, 1, 1),  # 3x3: a quad of channels (9 taps a pass) and a pair, padded
    (3, 3, 9, 10, 9, 3, 1, 0),  # 3x3: two quads summed over 3 input channels, an odd last channel
]


@pytest.mark.parametrize("N,Ci,H,W,Co,K,S,P,plan", _row_cases(CONV_CASES + DIRECT_CASES))
def test_conv2d_forward_backward_match_oracle(rng, monkeypatch, N, Ci, H, W, Co, K, S, P, plan):
    layer = _other_row_plan(nc.Conv2D(Ci, Co, K, stride=S, padding=P).initialize(rng), plan, monkeypatch)
    x = f32(rng.standard_normal((N, Ci, H, W)))
    y = layer.forward(x, training=True)
    _ran_as_chosen(layer)
    pad = _pad(P, K) if not isinstance(P, tuple) else P
    expect = ref.conv2d_forward(x, layer.weight, layer.bias, S, pad)
    assert y.shape == expect.shape
    dout = f32(rng.standard_normal(y.shape))
    dx = layer.backward(dout)
    rdx, rdw, rdb = ref.conv2d_backward(dout, x, layer.weight, S, pad)
    if plan == "winograd4":  # F(4x4, 3x3): errors within 2e-5 of the largest value (its stated bound)
        for a, b in ((y, expect), (dx, rdx), (layer.dweight, rdw), (layer.dbias, rdb)):
            assert np.abs(a - b).max() <= 2e-5 * np.abs(b).max()
        return
    np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(layer.dbias, rdb, rtol=1e-4, atol=1e-3)



@pytest.mark.parametrize("N,Ci,H,W,Co,K,S,P", [
    (150, 16, 12, 11, 48, 3, 1, 1),  # positions: backward GEMMs in pieces across examples and groups
    (130, 32, 5, 6, 33, 3, 1, 0),  # Winograd: weight GEMMs over collected tiles, several per part
])
def test_conv2d_forward_backward_match_oracle_in_gemm_pieces(rng, monkeypatch, N, Ci, H, W, Co, K, S, P):
    """The plans cut GEMMs into pieces of _config.small_gemm_macs() multiply-adds (0, no cuts,
    unless the BLAS has small-matrix kernels: not under OPENBLAS_CORETYPE=Haswell) and Winograd's
    weight gradient collects WINOGRAD_DW_TILES tiles at most (at least a block of WINOGRAD_TILES):
    all forced small here, so that the pieces are summed (not overwritten) whatever BLAS the tests
    run with."""
    import numbacnn.backend.cpu_conv as cc

    monkeypatch.setattr(cc, "small_gemm_macs", lambda: 100_000)
    monkeypatch.setattr(tuning, "WINOGRAD_DW_TILES", 8)
    monkeypatch.setattr(tuning, "WINOGRAD_TILES", 2)  # blocks of one tile row (2 tiles) here
    layer = _other_row_plan(nc.Conv2D(Ci, Co, K, stride=S, padding=P).initialize(rng), "chosen", monkeypatch)
    x = f32(rng.standard_normal((N, Ci, H, W)))
    y = layer.forward(x, training=True)
    _ran_as_chosen(layer)
    assert layer.strategy == ("winograd" if Ci == 32 else "positions")
    np.testing.assert_allclose(y, ref.conv2d_forward(x, layer.weight, layer.bias, S, (P, P)),
                               rtol=1e-4, atol=1e-4)
    dout = f32(rng.standard_normal(y.shape))
    dx = layer.backward(dout)
    rdx, rdw, rdb = ref.conv2d_backward(dout, x, layer.weight, S, (P, P))
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(layer.dbias, rdb, rtol=1e-4, atol=1e-3)


POOL_CASES = [  # (N, C, H, W, K, S, P)
    (2, 3, 8, 8, 2, 2, 0),
    (3, 2, 7, 9, 2, 2, 0),  # odd sizes: last row/column dropped
    (2, 2, 9, 9, 3, 2, 0),  # overlapping windows
    (2, 3, 7, 6, 3, 1, 1),  # stride 1 with padding
    (1, 1, 5, 5, 3, 2, 1),
    (2, 2, 1, 7, (1, 2), (1, 2), 0),  # pooling along one axis only
    (2, 1, 5, 7, (3, 2), (2, 1), (1, 0)),
    (2, 2, 7, 8, (2, 3), (3, 2), 0),  # unpadded, stride above the window on one axis
    (2, 2, 7, 8, 3, 1, 0),  # the unrolled unpadded windows: 3x3 stride 1, 2x2 stride 1, 3x3 stride 3
    (2, 2, 6, 7, 2, 1, 0),
    (2, 2, 10, 9, 3, 3, 0),
]


@pytest.mark.parametrize("N,C,H,W,K,S,P", POOL_CASES)
@pytest.mark.parametrize("ties", [False, True])
def test_maxpool2d_matches_oracle(rng, N, C, H, W, K, S, P, ties):
    if ties:  # few distinct values: many windows hold several equal maxima
        x = f32(rng.integers(-2, 2, size=(N, C, H, W)))
    else:
        x = f32(rng.standard_normal((N, C, H, W)))
    layer = nc.MaxPool2D(K, stride=S, padding=P)
    y = layer.forward(x, training=True)
    ey, earg = ref.maxpool2d_forward(x, K, S, P)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(layer._buffers["argmax"], earg)
    dout = f32(rng.standard_normal(y.shape))
    dx = layer.backward(dout)
    np.testing.assert_allclose(dx, ref.maxpool2d_backward(dout, x, K, S, P), rtol=1e-6, atol=1e-6)


def test_maxpool2d_nan_is_the_maximum_and_padding_never_wins(rng):
    x = f32(-np.abs(rng.standard_normal((1, 1, 4, 4))) - 1.0)  # all negative: zero padding would win
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 1, 0] = np.nan  # earlier NaN in the same window: first NaN wins
    layer = nc.MaxPool2D(3, stride=1, padding=1)
    y = layer.forward(x, training=True)
    ey, earg = ref.maxpool2d_forward(x, 3, 1, 1)
    np.testing.assert_array_equal(layer._buffers["argmax"], earg)
    assert np.isnan(y[0, 0, 0, 0]) and layer._buffers["argmax"][0, 0, 0, 0] == 4
    finite = ~np.isnan(ey)
    np.testing.assert_array_equal(y[finite], ey[finite])
    assert (y[finite] < 0).all()


@pytest.mark.parametrize("N,C,H,W,K,S,P", POOL_CASES)
def test_avgpool2d_matches_oracle(rng, N, C, H, W, K, S, P):
    x = f32(rng.standard_normal((N, C, H, W)))
    layer = nc.AvgPool2D(K, stride=S, padding=P)
    y = layer.forward(x, training=True)
    np.testing.assert_allclose(y, ref.avgpool2d_forward(x, K, S, P), rtol=1e-5, atol=1e-6)
    dout = f32(rng.standard_normal(y.shape))
    np.testing.assert_allclose(layer.backward(dout), ref.avgpool2d_backward(dout, x, K, S, P),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("N,Fi,Fo", [(1, 3, 2), (7, 13, 5), (33, 20, 11), (5, 150, 70), (4, 130, 33),
                                     (2, 300, 200), (70, 150, 70), (130, 300, 200), (65, 17, 130),
                                     (257, 200, 100)])
# grids of row and feature blocks, the last ones shorter
def test_dense_matches_oracle(rng, N, Fi, Fo):
    layer = nc.Dense(Fi, Fo).initialize(rng)
    x = f32(rng.standard_normal((N, Fi)))
    y = layer.forward(x, training=True)
    np.testing.assert_allclose(y, ref.dense_forward(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    dout = f32(rng.standard_normal(y.shape))
    dx = layer.backward(dout)
    rdx, rdw, rdb = ref.dense_backward(dout, x, layer.weight)
    np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(layer.dbias, rdb, rtol=1e-5, atol=1e-4)


def test_relu_tanh_dropout(rng):
    x = f32(rng.standard_normal((3, 2, 5, 5)))
    dout = f32(rng.standard_normal(x.shape))
    relu = nc.ReLU()
    np.testing.assert_array_equal(relu.forward(x, True), np.maximum(x, 0))
    np.testing.assert_array_equal(relu.backward(dout), np.where(x > 0, dout, 0))
    tanh = nc.Tanh()
    np.testing.assert_allclose(tanh.forward(x, True), np.tanh(x.astype(np.float64)), atol=1e-6)
    np.testing.assert_allclose(tanh.backward(dout), dout * (1 - np.tanh(x.astype(np.float64)) ** 2),
                               atol=1e-5)
    drop = nc.Dropout(0.25)
    drop.reset_parameters(np.random.default_rng(0))
    big = np.ones((64, 1000), np.float32)
    y = drop.forward(big, training=True)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    dy = drop.backward(big)
    np.testing.assert_array_equal(dy != 0, kept)  # gradient flows only where the input was kept
    np.testing.assert_array_equal(drop.forward(x, training=False), x)


def test_philox_matches_the_random123_known_answers_and_the_python_oracle():
    # Random123's kat_vectors for philox4x32_10: zeros, all ones, and the digits of pi
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((2**32 - 1,) * 4, (2**32 - 1,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    from numbacnn.kernels.cpu.dropout import philox4x32

    for counter, key, want in cases:
        assert tuple(ref.philox4x32_10(counter, key)) == want
        got = philox4x32(*(np.uint64(v) for v in (*counter, *key)))
        assert tuple(int(v) for v in got) == want


@pytest.mark.parametrize("n, offset, draw, p", [(1, 0, 0, 0.5), (37, 0, 3, 0.25), (37, 5, 2**33 + 1, 0.9),
                                                (9000, 4099, 7, 0.1), (6, 2**40 + 3, 1, 0.5),
                                                (4096, 1, 5, 0.5)])
def test_dropout_kernel_draws_the_oracle_masks(n, offset, draw, p):
    """Every value's mask against the oracle, at offsets that split a group of four, draw numbers
    and seeds above 2**32; the state's draw number is advanced by dropout_advance only. 4,096 values
    from offset 1 span one group more than a parallel block's 1,024 groups of four."""
    seed = 0xDEADBEEF12345678
    state = np.array([seed, draw, offset, 0], np.uint64)
    x = f32(np.random.default_rng(n).standard_normal(n))
    y, mask = np.empty_like(x), np.empty_like(x)
    scale = np.float32(1.0 / (1.0 - p))
    K.dropout_forward(y, mask, x, state, math.ceil(p * 2**24), scale)
    keep = ref.dropout_mask(seed, draw, offset, n, p)
    np.testing.assert_array_equal(mask, np.where(keep, scale, np.float32(0.0)))
    np.testing.assert_array_equal(y, x * mask)
    assert int(state[1]) == draw
    K.dropout_advance(state)
    assert int(state[1]) == draw + 1


def test_dropout_masks_are_uniform_and_independent(rng):
    """Kept fractions, successive draws and neighbouring values: a statistical check that the
    masks behave as independent Bernoulli(1 - p) draws (tolerances are 6 standard deviations)."""
    drop = nc.Dropout(0.3)
    drop.reset_parameters(np.random.default_rng(1))
    x = np.ones((50, 4000), np.float32)
    first = drop.forward(x, training=True) != 0
    second = drop.forward(x, training=True) != 0
    n, q = first.size, 0.7
    sd = math.sqrt(q * (1 - q) / n)
    assert abs(first.mean() - q) < 6 * sd and abs(second.mean() - q) < 6 * sd
    # independence: P(both kept) = q**2, across draws, across neighbours (in and across groups of 4)
    flat = first.reshape(-1)
    for a, b in ((first, second), (flat[:-1], flat[1:]), (flat[:-4], flat[4:]), (flat[:-3], flat[3:])):
        both = (a & b).mean()
        assert abs(both - q * q) < 6 * math.sqrt(q * q * (1 - q * q) / a.size)
    assert drop.generator_state()[1] == 2
    drop.forward(x, training=False)
    assert drop.generator_state()[1] == 2  # inference draws nothing


def test_dropout_masks_do_not_depend_on_the_thread_count():
    masks, before = [], nc.get_num_threads()
    try:
        for threads in (1, 2):
            nc.set_num_threads(threads)
            drop = nc.Dropout(0.5)
            drop.reset_parameters(np.random.default_rng(3))
            masks.append(drop.forward(np.ones((9, 1001), np.float32), training=True).copy())
    finally:
        nc.set_num_threads(before)
    np.testing.assert_array_equal(masks[0], masks[1])


def test_tanh_kernel_is_within_6_ulp_and_keeps_special_values():
    # the kernel's rational approximation against float64 np.tanh, over a dense grid, tiny
    # magnitudes, the clamp at |x| = 9 and the special values
    grid = np.concatenate([np.linspace(-12, 12, 400001), np.geomspace(1e-30, 1, 20001),
                           np.linspace(8.9, 9.1, 2001)])
    x = f32(np.concatenate([grid, -grid]))
    y = np.empty_like(x)
    K.tanh_forward(y, x)
    want = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (np.abs(y - want) / ulp).max() <= 6.0  # 4.9 measured (5.4 without FMA)
    np.testing.assert_array_equal(y[:grid.size], -y[grid.size:])  # odd
    special = f32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30])
    ys = np.empty_like(special)
    K.tanh_forward(ys, special)
    np.testing.assert_array_equal(ys, f32([0.0, -0.0, 1.0, -1.0, np.nan, 1.0, -1.0]))
    assert np.signbit(ys[1]) and not np.signbit(ys[0])
    assert np.all(np.abs(y) <= 1)


def test_softmax_cross_entropy_matches_oracle_and_is_stable(rng):
    logits = f32(rng.standard_normal((9, 7)) * 3)
    y = rng.integers(0, 7, 9)
    loss, d = nc.softmax_cross_entropy(logits, y)
    eloss, ed = ref.softmax_cross_entropy(logits, y)
    assert loss == pytest.approx(eloss, rel=1e-6)
    np.testing.assert_allclose(d, ed, rtol=1e-5, atol=1e-7)
    big = f32([[1000.0, 0.0, -1000.0], [-1e4, 1e4, 0.0]])
    loss, d = nc.softmax_cross_entropy(big, np.array([0, 0]))
    assert np.isfinite(loss) and np.isfinite(d).all()
    assert loss == pytest.approx(1e4, rel=1e-6)  # example 1: log-prob of class 0 is -2e4


@pytest.mark.parametrize("K,S", [(2, 2), (3, 2)])
def test_maxpool2d_unpadded_fast_paths_fall_back_on_nan(rng, K, S):
    x = f32(rng.standard_normal((2, 2, 6, 6)))
    x[0, 1, 2, 3] = np.nan
    x[1, 0, 0, 0] = np.nan
    x[1, 0, 0, 1] = np.nan  # two NaN in one window: the first one wins
    layer = nc.MaxPool2D(K, stride=S)
    y = layer.forward(x, training=True)
    ey, earg = ref.maxpool2d_forward(x, K, S, 0)
    np.testing.assert_array_equal(layer._buffers["argmax"], earg)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ey))
    np.testing.assert_array_equal(y[~np.isnan(y)], ey[~np.isnan(ey)])


@pytest.mark.parametrize("Ci,K,S,P,relu", [(1, 5, 1, 0, False), (2, 3, 1, (1, 0), True),
                                          (1, (2, 4), 1, 0, True), (2, 3, 2, 1, True),
                                          (8, (3, 2), 1, (1, 2), True), (9, 3, 1, 0, False),
                                          (17, (3, 2), 1, (1, 2), True), (12, 3, 1, 0, False)])
def test_first_layer_weight_gradients_match_oracle(rng, Ci, K, S, P, relu):
    """The weight-only backward of a first layer (need_dx=False), with and without a fused ReLU,
    for every strategy ("direct" up to 64 floats per filter, then "wide", "positions" from
    Ci = 12 here, "gemm" when strided)."""
    layer = nc.Conv2D(Ci, 4, K, stride=S, padding=P).initialize(rng)
    ckk = layer.geometry.ckk
    assert layer.strategy == ("gemm" if S != 1 else "positions" if Ci >= 12
                              else "direct" if ckk <= 64 else "wide")
    layer.fusion = Fusion(relu=relu)
    x = f32(rng.standard_normal((67, Ci, 9, 10)))  # 67 examples: 64 gradient parts of 1 or 2
    y = layer.forward(x, training=True)
    ref_y = ref.conv2d_forward(x, layer.weight, layer.bias, S, P)
    dout = f32(rng.standard_normal(y.shape))
    if relu:
        ref_y = np.maximum(ref_y, 0)
    np.testing.assert_allclose(y, ref_y, rtol=1e-4, atol=1e-4)
    assert layer.backward(dout, need_dx=False) is None
    g = np.where(ref_y > 0, dout, 0) if relu else dout
    _, rdw, rdb = ref.conv2d_backward(g, x, layer.weight, S, P)
    np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(layer.dbias, rdb, rtol=1e-4, atol=1e-3)


FUSED_CASES = [  # (N, Ci, H, W, Co, K, stride, padding, pool)
    (3, 2, 9, 11, 4, 3, 1, 0, 2),  # conv output 7x9: the pool drops the last row and column
    (18, 1, 8, 8, 3, 3, 1, 1, 2),  # padded, 18 gradient parts
    (2, 2, 10, 9, 3, 2, 1, 0, 3),  # 3x3 windows, stride 3 (the generic pooled epilogue)
    (2, 2, 9, 9, 3, 3, 1, 0, (2, 3)),  # rectangular windows
    (130, 12, 6, 6, 32, 3, 1, 0, 2),  # position-major, grouped backward GEMMs
    (130, 8, 6, 6, 32, 3, 1, 0, 2),  # wide rows, grouped backward GEMMs
    (3, 12, 10, 9, 5, 3, 1, 1, 3),  # position-major, padded, 3x3 windows
    (2, 12, 9, 9, 3, 3, 1, 0, (2, 3)),  # position-major, rectangular windows
    (2, 12, 7, 9, 3, 3, 1, 1, (2, 3)),  # position-major, padded, rectangular windows, odd sizes
    (4, 6, 12, 12, 16, 5, 1, 0, 2),  # position-major, LeNet's second layer
    (19, 12, 13, 12, 16, 3, 2, 1, 2),  # position-major strided, grouped backward GEMMs
    (2, 12, 11, 12, 5, 3, (2, 1), 0, (2, 3)),  # position-major, rectangular stride and windows
    (3, 1, 9, 17, 2, 2, 1, 0, (8, 16)),  # 128-element windows: the largest int8 window offsets
    (3, 12, 10, 18, 3, 3, 1, 0, (8, 16)),  # position-major, 128-element windows
    (1, 12, 13, 13, 64, 3, 1, 0, 2),  # position-major, one example in 4 blocks of pooled rows
    (5, 12, 16, 14, 64, 3, 1, 1, 2),  # position-major, 2 blocks an example (GEMMs kept small)
    (1, 12, 11, 9, 6, 3, 2, 1, (2, 3)),  # position-major strided, one example in blocks
    (2, 16, 18, 34, 32, 3, 1, 1, 2),  # FMA blocks under a fused pool, transposed input rows
    (3, 32, 13, 12, 32, 3, 1, 0, 2),  # Winograd: odd output rows dropped by the pool
    (1, 32, 16, 17, 32, 3, 1, 1, 2),  # Winograd: one example in blocks of pooled rows
    (1, 32, 14, 14, 64, 3, 1, 1, 2),  # Winograd: 7 x 7 tiles of one example in blocks of tile rows
    (2, 32, 11, 12, 34, 3, 1, 1, (2, 3)),  # Winograd: windows through the position-major path
    (2, 32, 12, 12, 32, 3, 1, 1, 3),  # Winograd: 3x3 windows, one block per example
    (6, 16, 15, 15, 32, 3, 1, 1, 2),  # F(4x4, 3x3): a 2 x 2 pool reads 14 x 14 of 15 x 15
    (3, 16, 7, 7, 16, 3, 1, 1, (2, 3)),  # F(4x4, 3x3): rectangular windows
]



@pytest.mark.parametrize("N,Ci,H,W,Co,P", [
    (1, 32, 28, 28, 32, 1),  # one example in 4 blocks of pooled rows (r0 > 0)
    (4, 32, 13, 12, 48, 0),  # an odd output row that the pool drops
    (4, 32, 10, 10, 64, 1),  # 25 pooled positions: the last 16 overlap the first 16
    (1, 32, 10, 10, 64, 1),  # blocks of fewer than 16 pooled positions: the epilogue's own path
])
def test_winograd_inference_pool_by_transposes_matches_training(rng, monkeypatch, N, Ci, H, W, Co, P):
    """Inference's fused 2x2 pool on Winograd layers with 16k channels pools along the channels and
    transposes (pool2x2_transposed): the training forward's bits (max then bias and ReLU equals
    ReLU then max), the oracle's values, and an example holding a NaN takes the exact path."""
    from numbacnn.backend.cpu_conv import WinogradPlan

    net = nc.Sequential([nc.Conv2D(Ci, Co, 3, padding=P), nc.ReLU(), nc.MaxPool2D(2)], seed=0)
    conv = net.layers[0]
    conv._plan = WinogradPlan(conv.geometry)
    choose_winograd(monkeypatch, always=True)
    net._fuse()
    x = f32(rng.standard_normal((N, Ci, H, W)))
    expect = ref.maxpool2d_forward(
        np.maximum(ref.conv2d_forward(x, conv.weight, conv.bias, 1, (P, P)), 0), 2, 2, 0)[0]
    y = net.forward(x)
    np.testing.assert_array_equal(y, net.forward(x, training=True))
    np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
    x[-1, 0, H // 2, W // 2] = np.nan
    y = net.forward(x)
    np.testing.assert_array_equal(y, net.forward(x, training=True))  # NaN where training has it
    assert np.isnan(y[-1]).any() and not np.isnan(y[:-1]).any()


@pytest.mark.parametrize("N,Ci,H,W,Co,P,relu", [
    (1, 32, 14, 14, 64, 1, True),  # modern's unpooled layer: one example in blocks of tile rows
    (2, 32, 13, 11, 48, 1, False),  # odd output sides, 3 blocks of 16 channels, no ReLU
    (3, 32, 9, 7, 32, 0, True),  # 7 x 5 outputs: the last 16 positions overlap the ones before
    (1, 32, 5, 6, 32, 0, True),  # 3 x 4 outputs (< 16 positions): the exact per-value path
])
def test_winograd_unpooled_rows_by_transposes_match_the_oracle(rng, monkeypatch, N, Ci, H, W, Co, P, relu):
    """Unpooled Winograd layers with 16k channels write their output rows through a channel-last
    scratch and 16 x 16 transposes (rows_transposed): the oracle's values, inference and training
    forwards the same bits, and NaN stays where the input puts it."""
    from numbacnn.backend.cpu_conv import WinogradPlan

    layers = [nc.Conv2D(Ci, Co, 3, padding=P)] + ([nc.ReLU()] if relu else [])
    net = nc.Sequential(layers, seed=0)
    conv = net.layers[0]
    conv._plan = WinogradPlan(conv.geometry)
    choose_winograd(monkeypatch, always=True)
    net._fuse()
    x = f32(rng.standard_normal((N, Ci, H, W)))
    expect = ref.conv2d_forward(x, conv.weight, conv.bias, 1, (P, P))
    if relu:
        expect = np.maximum(expect, 0)
    y = net.forward(x)
    assert conv.plan.variant(x.shape, None, False) in ("winograd", "winograd4")
    np.testing.assert_array_equal(y, net.forward(x, training=True))
    np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
    x[-1, 0, H // 2, W // 2] = np.nan
    y = net.forward(x)
    assert np.isnan(y[-1]).any() and not np.isnan(y[:-1]).any()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(net.forward(x, training=True)))


def _winograd_chain(rng, Co2):
    """Conv-BN-ReLU-pool, conv-BN-ReLU, conv-ReLU, flatten: three Winograd layers, an inference
    chain with channel-last activations between them; BatchNorm statistics not trivial."""
    net = nc.Sequential([nc.Conv2D(32, 32, 3, padding=1), nc.BatchNorm2D(32), nc.ReLU(), nc.MaxPool2D(2),
                         nc.Conv2D(32, Co2, 3, padding=1), nc.BatchNorm2D(Co2), nc.ReLU(),
                         nc.Conv2D(Co2, 32, 3), nc.ReLU(), nc.Flatten()], seed=3)
    for bn in (net.layers[1], net.layers[5]):
        c = bn.num_features
        bn.running_mean[:] = f32(0.3 * rng.standard_normal(c))
        bn.running_var[:] = f32(rng.random(c) + 0.5)
        bn.weight[:] = f32(1 + 0.2 * rng.standard_normal(c))
        bn.bias[:] = f32(0.2 * rng.standard_normal(c))
    return net


def _chain_oracle(net, x):
    """The float64 oracle of _winograd_chain's inference (up to its flatten)."""
    h = np.asarray(x, np.float64)
    for conv, bn, pool in ((net.layers[0], net.layers[1], True), (net.layers[4], net.layers[5], False),
                           (net.layers[7], None, False)):
        h = ref.conv2d_forward(h, conv.weight, conv.bias, 1, conv.padding)
        if bn is not None:
            h = ref.batchnorm_forward(h, *_bn(bn))[0]
        h = np.maximum(h, 0)
        if pool:
            h = ref.maxpool2d_forward(h, 2, 2, 0)[0]
    return h.reshape(len(h), -1)


@pytest.mark.parametrize("N,H,W,Co2", [
    (1, 28, 28, 64),  # modern's shapes at batch 1
    (3, 17, 13, 48),  # odd sides (half-empty last tiles, an odd row the pool drops), 3 x 16 channels
    (2, 12, 10, 40),  # channels not in 16s: the exact epilogue into channel-last rows
    (1, 8, 8, 32),  # too few tiles: the "positions" fallback converts layouts on the way
    (9, 12, 14, 32),  # 9 examples: F(4x4, 3x3) on all three layers, channel-last planes and rows
])
def test_winograd_inference_chain_hands_on_channel_last_activations(rng, N, H, W, Co2):
    """Consecutive Winograd layers hand each other channel-last activations in inference (no
    transposes between them): the same bits as the channel-first chain, the oracle's values, NaN
    kept to its example, and a forward that stops inside the chain returns channel-first features."""
    net = _winograd_chain(rng, Co2)
    convs = [net.layers[i] for i in (0, 4, 7)]
    assert [c.strategy for c in convs] == ["winograd"] * 3
    assert [c.fusion.infer_layout for c in convs] == [2, 3, 1]
    x = f32(rng.standard_normal((N, 32, H, W)))
    good = N - 1 if N > 1 else N  # with several examples the last one holds a NaN
    if N > 1:
        x[-1, 5, H // 2, W // 3] = np.nan
    y = net.forward(x)
    assert [any(k.startswith("wino4_u") for k in c._buffers) for c in convs] == [N >= 8] * 3  # what ran
    np.testing.assert_allclose(y[:good], _chain_oracle(net, x[:good]), rtol=1e-4, atol=1e-4)
    assert not np.isnan(y[:good]).any() and (N == 1 or np.isnan(y[-1]).any())
    features = net.forward(x, upto=7)  # stops between the second and third convs: channel-first
    assert features.shape == (N, Co2, H // 2, W // 2)
    h = ref.maxpool2d_forward(np.maximum(ref.batchnorm_forward(ref.conv2d_forward(
        x[:good], convs[0].weight, convs[0].bias, 1, 1), *_bn(net.layers[1]))[0], 0), 2, 2, 0)[0]
    h = np.maximum(ref.batchnorm_forward(ref.conv2d_forward(h, convs[1].weight, convs[1].bias, 1, 1),
                                         *_bn(net.layers[5]))[0], 0)
    np.testing.assert_allclose(features[:good], h, rtol=1e-4, atol=1e-4)
    for c in convs:  # the channel-first chain: the same bits
        c.fusion = replace(c.fusion, infer_layout=0)
    net.__dict__.pop("_programs", None)
    np.testing.assert_array_equal(net.forward(x), y)


def _bn(bn):
    """The reference batchnorm_forward's arguments after x, in evaluation."""
    return bn.weight, bn.bias, bn.eps, False, bn.running_mean, bn.running_var


def test_pools_over_128_elements_are_not_fused():
    """The fused pool stores int8 offsets inside the window: larger windows run as separate layers."""
    for pool, fused in (((8, 16), True), ((9, 15), False)):
        net = nc.Sequential([nc.Conv2D(1, 2, 2), nc.ReLU(), nc.MaxPool2D(pool)], seed=0)
        assert (net.layers[0].fusion.pool is not None) == fused == net.layers[2].fusion.absorbed


@pytest.mark.parametrize("N,Ci,H,W,Co,K,S,P,pool,plan", _row_cases(FUSED_CASES))
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("relu", [True, False])
def test_conv_relu_maxpool_fusion_matches_oracle(rng, monkeypatch, N, Ci, H, W, Co, K, S, P, pool, plan, ties,
                                                  relu):
    """In a Sequential, Conv2D + ReLU + MaxPool2D(stride = window), or Conv2D + MaxPool2D without
    the ReLU (relu False: negative maxima pass their gradient), run as one fused kernel (the
    pool in the conv epilogue); values, argmax routing and every gradient match the float64
    oracle of the separate layers. ties: integer data, so that many windows tie (and many
    pre-ReLU values are negative: all-zero windows route to their first element; not for
    F(4x4, 3x3), whose transforms of 1/6 and 1/24 round integer sums, and so break their ties)."""
    if ties and plan == "winograd4":
        pytest.skip("F(4x4, 3x3) rounds integer data: ties are broken by its rounding")
    layers = [nc.Conv2D(Ci, Co, K, stride=S, padding=P), nc.ReLU(), nc.MaxPool2D(pool)]
    net = nc.Sequential(layers if relu else [layers[0], layers[2]], seed=3)
    conv = _other_row_plan(net.layers[0], plan, monkeypatch)
    assert conv.fusion.pool == nc.MaxPool2D(pool).kernel_size and net.layers[-1].fusion.absorbed
    assert conv.fusion.relu == relu
    if ties:
        x = f32(rng.integers(-2, 3, (N, Ci, H, W)))
        conv.weight[...] = rng.integers(-1, 2, conv.weight.shape)
        conv.bias[...] = rng.integers(-1, 2, conv.bias.shape)
    else:
        x = f32(rng.standard_normal((N, Ci, H, W)))
    y = net.forward(x, training=True)
    _ran_as_chosen(conv)
    w, b = conv.weight.astype(np.float64), conv.bias.astype(np.float64)
    h = ref.conv2d_forward(x, w, b, S, P)
    h = np.maximum(h, 0) if relu else h
    ey, _ = ref.maxpool2d_forward(h, pool, pool, 0)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-5)
    dy = f32(rng.standard_normal(y.shape))
    dx = net.backward(dy)
    dh = ref.maxpool2d_backward(dy, h, pool, pool, 0) * ((h > 0) if relu else 1)
    rdx, rdw, rdb = ref.conv2d_backward(dh, x, w, S, P)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv.dweight, rdw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(conv.dbias, rdb, rtol=1e-4, atol=1e-3)
    # inference (no backward follows: the 2x2 epilogues keep no argmax) gives the same values
    np.testing.assert_array_equal(net.forward(x), y)


@pytest.mark.parametrize("Ci,Co,H,W,P", [(16, 16, 9, 10, 1), (12, 48, 7, 8, 0), (16, 32, 3, 4, 1)])
def test_unpooled_conv_relu_on_fma_blocks_matches_oracle(rng, Ci, Co, H, W, P):
    """Conv2D + ReLU (no pool) on "positions" with whole vectors of output channels: the FMA
    blocks' epilogue adds each block of 16 channels its biases and applies the ReLU inside the
    register transposes (and, with fewer than 16 positions an example, the scalar epilogue);
    values, the gradients through the ReLU, and inference against the float64 oracle."""
    net = nc.Sequential([nc.Conv2D(Ci, Co, 3, padding=P), nc.ReLU()], seed=2)
    conv = net.layers[0]
    assert conv.strategy == "positions" and conv.fusion.relu and conv.plan.direct_forward
    conv.bias[...] = f32(rng.standard_normal(Co))  # biases of both signs, different per channel
    x = f32(rng.standard_normal((3, Ci, H, W)))
    y = net.forward(x, training=True)
    w, b = conv.weight.astype(np.float64), conv.bias.astype(np.float64)
    h = ref.conv2d_forward(x, w, b, 1, P)
    assert (h < 0).any() and (h > 0).any()
    np.testing.assert_allclose(y, np.maximum(h, 0), rtol=1e-5, atol=1e-5)
    dy = f32(rng.standard_normal(y.shape))
    dx = net.backward(dy)
    rdx, rdw, rdb = ref.conv2d_backward(dy * (h > 0), x, w, 1, P)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv.dweight, rdw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(conv.dbias, rdb, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(net.forward(x), y)


@pytest.mark.parametrize("Ci,K,P,pool,stride", [(1, 3, 0, 2, 1), (2, 3, 1, 3, 1), (12, 3, 0, 2, 1),
                                                  (12, 3, 1, (2, 3), 1), (2, 3, 1, 2, 2)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("relu", [True, False])
def test_fused_conv_relu_pool_propagates_nan_and_inf(rng, Ci, K, P, pool, stride, bad, relu):
    """A NaN (or inf) in the input reaches the output exactly as through the separate layers
    (ReLU keeps NaN, max pooling lets the first NaN win), for every strategy, with or without
    the ReLU: the fused epilogues must not turn it into a finite number."""
    layers = [nc.Conv2D(Ci, 4, K, stride=stride, padding=P), nc.ReLU(), nc.MaxPool2D(pool)]
    net = nc.Sequential(layers if relu else [layers[0], layers[2]], seed=1)
    x = f32(rng.standard_normal((3, Ci, 12, 11)))
    x[0, 0, 4, 5] = bad
    x[2, Ci - 1, 0, 0] = -bad
    conv = net.layers[0]
    w, b = conv.weight.astype(np.float64), conv.bias.astype(np.float64)
    with np.errstate(invalid="ignore"):
        h = ref.conv2d_forward(x, w, b, stride, P)
        h = np.maximum(h, 0) if relu else h
    ey, _ = ref.maxpool2d_forward(h, pool, pool, 0)
    for training in (False, True):
        y = net.forward(x, training=training)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ey))
        np.testing.assert_array_equal(np.isinf(y), np.isinf(ey))
        assert not np.isfinite(y[0]).all() and not np.isfinite(y[2]).all()
        assert np.isfinite(y[1]).all()
        finite = np.isfinite(ey)
        np.testing.assert_allclose(y[finite], ey[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool", [2, 3])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_winograd_keeps_nan_and_never_turns_inf_into_a_finite_number(rng, monkeypatch, pool, bad):
    """Winograd's transforms add and subtract a tile's values, so an infinite input can come out as
    NaN where the direct sum gives +-inf (inf - inf), and a following ReLU keeps that NaN where it
    would have turned -inf into 0. What holds: every output that the oracle makes non-finite stays
    non-finite, a NaN input gives NaN exactly where the oracle has it, an example without bad
    values is untouched, and every finite output matches."""
    net = nc.Sequential([nc.Conv2D(32, 32, 3, padding=1), nc.ReLU(), nc.MaxPool2D(pool)], seed=1)
    conv = net.layers[0]
    assert conv.strategy == "winograd" and conv.fusion.pool
    choose_winograd(monkeypatch, always=True)
    x = f32(rng.standard_normal((3, 32, 12, 11)))
    x[0, 0, 4, 5] = bad
    x[2, 31, 0, 0] = -bad
    w, b = conv.weight.astype(np.float64), conv.bias.astype(np.float64)
    with np.errstate(invalid="ignore"):
        h = np.maximum(ref.conv2d_forward(x, w, b, 1, 1), 0)
    ey, _ = ref.maxpool2d_forward(h, pool, pool, 0)
    for training in (False, True):
        y = net.forward(x, training=training)
        assert not np.isfinite(y[~np.isfinite(ey)]).any()
        if bad != bad:
            np.testing.assert_array_equal(np.isnan(y), np.isnan(ey))
        assert np.isfinite(y[1]).all() and not np.isfinite(y[0]).all() and not np.isfinite(y[2]).all()
        finite = np.isfinite(y)
        np.testing.assert_allclose(y[finite], ey[finite], rtol=1e-5, atol=1e-5)


def test_the_fusion_plan_comes_from_the_chain_alone():
    """fusion.plan reads a chain and returns each layer's part without touching the layers; a
    Sequential gives each layer its part (Conv2D + BatchNorm2D + ReLU + MaxPool2D: the BatchNorm
    applies the ReLU in training; at inference the convolution folds the BatchNorm, its ReLU and
    the pool)."""
    from numbacnn.layers.base import NO_FUSION
    from numbacnn.layers.fusion import plan

    layers = [nc.Conv2D(1, 2, 3), nc.BatchNorm2D(2), nc.ReLU(), nc.MaxPool2D(2)]
    parts = plan(layers)
    assert all(layer.fusion is NO_FUSION for layer in layers)
    assert parts == [Fusion(infer_bn=layers[1], infer_pool=(2, 2)), Fusion(relu=True, infer_absorbed=True),
                     Fusion(absorbed=True), Fusion(infer_absorbed=True)]
    net = nc.Sequential(layers)
    assert [layer.fusion for layer in net.layers] == parts
    with net.unfused():
        assert all(layer.fusion is NO_FUSION for layer in net.layers)
    assert [layer.fusion for layer in net.layers] == parts


def test_fusion_only_where_it_is_exact():
    convs = [nc.Conv2D(1, 2, 3), nc.Conv2D(1, 2, 3, stride=2), nc.Conv2D(1, 2, 3), nc.Conv2D(1, 2, 3)]
    net = nc.Sequential([convs[0], nc.ReLU(), nc.MaxPool2D(2, stride=1)])  # overlapping windows
    assert convs[0].fusion.relu and convs[0].fusion.pool is None
    nc.Sequential([convs[1], nc.ReLU(), nc.MaxPool2D(2)])  # strided conv: the im2col strategy
    assert convs[1].fusion.relu and convs[1].fusion.pool is None
    pooled = nc.Sequential([convs[2], nc.MaxPool2D(2)])  # no ReLU between: the pool alone
    assert not convs[2].fusion.relu and convs[2].fusion.pool == (2, 2) and pooled.layers[1].fusion.absorbed
    strided = nc.Sequential([nc.Conv2D(1, 2, 3, stride=2), nc.MaxPool2D(2)])  # a plan that cannot pool
    assert strided.layers[0].fusion.pool is None and not strided.layers[1].fusion.absorbed
    nc.Sequential([convs[3], nc.ReLU(), nc.MaxPool2D(2, padding=1)])
    assert convs[3].fusion.pool is None
    assert not net.layers[2].fusion.absorbed


def test_fused_pool_window_larger_than_conv_output_is_a_clear_error():
    net = nc.Sequential([nc.Conv2D(1, 2, 3), nc.ReLU(), nc.MaxPool2D(4)])
    with pytest.raises(ValueError, match="MaxPool2D.*smaller than the window 4x4"):
        net.forward(np.zeros((1, 1, 5, 5), np.float32))


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_sgemm_with_offsets_pitches_and_beta_matches_numpy(rng, ta, tb):
    from numba import njit

    from numbacnn.kernels.cpu.blas import sgemm

    call = njit(lambda *a: sgemm(*a))
    m, n, k = 5, 7, 3
    A = f32(rng.standard_normal((k, m) if ta else (m, k)))
    B = f32(rng.standard_normal((n, k) if tb else (k, n)))
    C0 = f32(rng.standard_normal((m, n)))
    lda, ldb, ldc = A.shape[1] + 2, B.shape[1] + 3, n + 1  # row pitches wider than the rows
    a = np.zeros(3 + A.shape[0] * lda, np.float32)
    a[3:].reshape(A.shape[0], lda)[:, :A.shape[1]] = A
    b = np.zeros(1 + B.shape[0] * ldb, np.float32)
    b[1:].reshape(B.shape[0], ldb)[:, :B.shape[1]] = B
    c = np.full(2 + m * ldc, 7.0, np.float32)
    c[2:].reshape(m, ldc)[:, :n] = C0
    call(ta, tb, m, n, k, np.float32(2.0), a, 3, lda, b, 1, ldb, np.float32(1.0), c, 2, ldc)
    expect = 2 * (A.T if ta else A).astype(np.float64) @ (B.T if tb else B) + C0
    np.testing.assert_allclose(c[2:].reshape(m, ldc)[:, :n], expect, rtol=1e-5, atol=1e-5)
    assert (c[:2] == 7).all() and (c[2:].reshape(m, ldc)[:, n:] == 7).all()  # nothing else written
    with pytest.raises(IndexError, match="outside its array"):
        call(ta, tb, m, n, k, np.float32(1.0), a, 3, lda, b, 1, ldb, np.float32(0.0), c, 5, ldc)


def test_batch_gather_strided_copy_and_step_stats_match_numpy(rng):
    """The step program's data kernels against plain numpy: rows and their labels gathered in any
    order (repeats included), a 4-D copy from transposed views, and the loss mean / correct count with ties
    going to the first largest logit (as argmax)."""
    x = f32(rng.standard_normal((11, 3, 4, 5)))
    idx = np.array([10, 0, 3, 3, 7], np.int64)
    y = rng.integers(0, 10, 11)
    out = np.full((5, 60), np.nan, np.float32)
    labels = np.full(5, -1, np.int64)
    K.gather_batch(out, labels, x.reshape(11, -1), y, idx)
    np.testing.assert_array_equal(out, x[idx].reshape(5, -1))
    np.testing.assert_array_equal(labels, y[idx])
    w = f32(rng.standard_normal((6, 3, 5, 2)))
    for axes in [(2, 3, 1, 0), (0, 2, 3, 1), (0, 3, 1, 2), (0, 1, 2, 3)]:
        view = w.transpose(axes)
        dst = np.zeros(view.shape, np.float32)
        K.copy_strided(dst, view)
        np.testing.assert_array_equal(dst, view)
    losses = rng.random(9) * 3
    logits = f32(rng.integers(0, 3, (9, 4)))  # many ties
    y = rng.integers(0, 4, 9)
    stats = np.full(2, np.nan)
    K.step_stats(stats, losses, logits, y)
    assert stats[0] == pytest.approx(losses.mean(), rel=1e-15)
    assert stats[1] == int((logits.argmax(1) == y).sum())
    tied = f32([[1, 1, 0], [0, 2, 2], [3, 3, 3]])  # ties go to the first largest logit
    K.step_stats(stats, np.ones(3), tied, np.array([0, 1, 0]))
    assert stats[1] == 3
    K.step_stats(stats, np.ones(3), tied, np.array([1, 2, 2]))
    assert stats[1] == 0


@pytest.mark.parametrize("co, k", [(4, 6), (64, 2100)])  # one thread; channels in parallel
def test_batchnorm_fold_matches_the_oracle_on_one_thread_and_many(rng, co, k):
    """The inference fold of BatchNorm into the convolution before it against the float64 oracle
    (float32 rounding of a product and a sum: rtol 1e-6), below and above FOLD_SERIAL; the channels
    hold the same bits either way."""
    from numbacnn.kernels.cpu.batchnorm import FOLD_SERIAL
    assert (co * k > FOLD_SERIAL) == (co == 64)
    w = f32(rng.standard_normal((co, k)))
    b, gamma, beta, mean = (f32(rng.standard_normal(co)) for _ in range(4))
    var = f32(rng.random(co) + 0.1)
    wf, bf = np.full_like(w, np.nan), np.full_like(b, np.nan)
    K.batchnorm_fold(wf, bf, w, b, gamma, beta, mean, var, 1e-5, NO_RECORD, NO_RECORD)
    ew, eb = ref.batchnorm_fold(w, b, gamma, beta, mean, var, 1e-5)
    np.testing.assert_allclose(wf, ew, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bf, eb, rtol=1e-6, atol=1e-6)
    wf1, bf1 = np.empty_like(w[:3]), np.empty_like(b[:3])  # the first channels alone: serial
    K.batchnorm_fold(wf1, bf1, w[:3], b[:3], gamma[:3], beta[:3], mean[:3], var[:3], 1e-5, NO_RECORD,
                     NO_RECORD)
    np.testing.assert_array_equal(wf1, wf[:3])
    np.testing.assert_array_equal(bf1, bf[:3])


@pytest.mark.parametrize("first", ["predict", "train"])
def test_folded_and_plain_packings_are_never_taken_for_each_other(rng, first):
    """Inference packs the BatchNorm-folded weights (Winograd's transforms, the positions plan's
    transpose), training and unfolded forwards the plain ones, each kind in its own buffer under
    its own record: a prediction after a training forward, or after an unfolded one, with no
    weight update between (and a training forward after a prediction) runs on its own kind."""
    def build():
        net = nc.Sequential([nc.Conv2D(32, 32, 3, padding=1), nc.BatchNorm2D(32), nc.ReLU(), nc.MaxPool2D(2),
                             nc.Conv2D(32, 16, 5, padding=2), nc.BatchNorm2D(16), nc.ReLU(), nc.Flatten()],
                            seed=5)
        for bn in (net.layers[1], net.layers[5]):
            bn.running_mean[:] = f32(0.5 * rng.standard_normal(bn.num_features))
            bn.running_var[:] = f32(rng.random(bn.num_features) + 0.5)
        return net
    net = build()
    assert [net.layers[i].strategy for i in (0, 4)] == ["winograd", "positions"]
    x = f32(rng.standard_normal((4, 32, 16, 16)))
    if first == "predict":
        y = net.forward(x)
        unfolded = net.forward(x, upto=2)  # inside the first fold: the plain weights, unfolded
        np.testing.assert_array_equal(net.forward(x), y)
        with net.unfused():
            np.testing.assert_allclose(net.forward(x), y, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(net.forward(x), y)
        assert unfolded.shape == (4, 32, 16, 16)
    else:
        state = {k: v.copy() for k, v in net.state_dict().items()}
        want = net.forward(x, training=True)  # the plain weights' packing
        net.load_state_dict(state)  # the running statistics back as they were
        net.forward(x)  # a prediction packs the folded weights
        np.testing.assert_array_equal(net.forward(x, training=True), want)


def test_batchnorm_fold_skips_unchanged_inputs_and_counts_its_writes(rng):
    """With a record, a serial fold returns at once while all six inputs keep their bits (wf and bf
    are left as they are: poisoned here to show it), folds again after a change to any one of them,
    a single bit included (a zero's sign), and counts every fold that writes; with a block per
    channel (above FOLD_SERIAL) it folds and counts on every call. The packings follow the count:
    Winograd's transforms are made again exactly when it moves."""
    co, k = 4, 27
    ins = [f32(rng.standard_normal((co, k)))] + [f32(rng.standard_normal(co)) for _ in range(4)]
    ins.append(f32(rng.random(co) + 0.1))  # w, b, gamma, beta, mean, var
    seen = np.zeros(co * k + 5 * co + 1, np.int32)
    version = np.zeros(1, np.int32)
    wf, bf = np.empty((co, k), np.float32), np.empty(co, np.float32)

    def fold():
        K.batchnorm_fold(wf, bf, *ins, 1e-5, seen, version)
        ew, eb = ref.batchnorm_fold(*ins, 1e-5)
        return ew, eb

    ew, eb = fold()
    assert version[0] == 1
    np.testing.assert_allclose(wf, ew, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bf, eb, rtol=1e-6, atol=1e-6)
    wf[:], bf[:] = np.nan, np.nan
    fold()
    assert version[0] == 1 and np.isnan(wf).all() and np.isnan(bf).all()  # nothing changed: skipped
    for i, where in enumerate([(2, 5), (1,), (3,), (0,), (2,), (1,)]):
        ins[i].view(np.int32)[where] ^= 1  # the lowest bit of one value of input i
        ew, eb = fold()
        assert version[0] == 2 + i, f"input {i} changed: the fold must run"
        np.testing.assert_allclose(wf, ew, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(bf, eb, rtol=1e-6, atol=1e-6)
    ins[0][0, 0] = np.float32(0.0)
    fold()
    ins[0][0, 0] = np.float32(-0.0)  # equal as floats, not as bits: folds again
    fold()
    assert version[0] == 9
    # one block per channel: no skipping, every call counts
    from numbacnn.kernels.cpu.batchnorm import FOLD_SERIAL
    big = [f32(rng.standard_normal((64, FOLD_SERIAL // 64 + 1)))]
    big += [f32(rng.random(64) + 0.1) for _ in range(5)]
    wfb, bfb = np.empty_like(big[0]), np.empty(64, np.float32)
    seen_b = np.zeros(big[0].size + 5 * 64 + 1, np.int32)
    for n in (1, 2):
        K.batchnorm_fold(wfb, bfb, *big, 1e-5, seen_b, version)
        assert version[0] == 9 + n
    # Winograd's transforms follow the count, not the weights' bits
    w = f32(rng.standard_normal((4, 3, 3, 3)))
    u, work, useen = np.zeros((16, 3, 4), np.float32), np.zeros(18 * 12, np.float32), np.zeros(2, np.int32)
    want = np.zeros_like(u)
    K.winograd_filters(want, w, False, work, NO_RECORD, NO_RECORD)
    K.winograd_filters(u, w, False, work, useen, version)
    np.testing.assert_array_equal(u, want)
    w[0, 0, 0, 0] += 1  # not counted: the packing trusts the count (only the fold writes these)
    K.winograd_filters(u, w, False, work, useen, version)
    np.testing.assert_array_equal(u, want)
    version[0] += 1
    K.winograd_filters(u, w, False, work, useen, version)
    K.winograd_filters(want, w, False, work, NO_RECORD, NO_RECORD)
    np.testing.assert_array_equal(u, want)
    assert not np.array_equal(u[:, 0, 0], np.zeros(16))


def test_run_copies_and_adds_touch_exactly_their_runs(rng):
    """copy_run and add_run (im2col's and col2im's runs, 16 floats per vector move) against numpy,
    for runs shorter than, equal to and between multiples of 16, at odd offsets: the run's values
    (the sums as float32 adds one at a time), nothing outside it changed; gather16 (16 channels of
    a position into a channel-last plane) against a strided slice."""
    import numba

    from numbacnn.kernels.cpu._util import add_run, copy_run, gather16

    gather = numba.njit(lambda d, di, s, si, stride: gather16(d, di, s, si, stride))  # an intrinsic
    src = f32(rng.standard_normal(100))
    for n in (0, 1, 5, 15, 16, 17, 30, 32, 33, 47, 64):
        for si, di in ((0, 0), (3, 7), (100 - n, 1)):
            d = f32(rng.standard_normal(90))
            want = d.copy()
            want[di:di + n] = src[si:si + n]
            copy_run(d, np.uint64(di), src, np.uint64(si), np.uint64(n))
            np.testing.assert_array_equal(d, want)
            d = f32(rng.standard_normal(90))
            want = d.copy()
            want[di:di + n] += src[si:si + n]
            add_run(d, np.uint64(di), src, np.uint64(si), np.uint64(n))
            np.testing.assert_array_equal(d, want)
    for si, stride in ((0, 1), (5, 6), (0, 6), (100 - 1 - 15 * 5, 5)):  # the last reads src's end
        d = f32(rng.standard_normal(40))
        want = d.copy()
        want[7:23] = src[si:si + 15 * stride + 1:stride]
        gather(d, np.uint64(7), src, np.uint64(si), np.uint64(stride))
        np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("shape", [(5, 3, 2, 3), (7, 41, 2, 3)])  # one block of rows; several
@pytest.mark.parametrize("axes", [(0, 1, 2, 3), (0, 2, 3, 1)])
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_sum_parts_adds_the_parts_in_order_into_any_axis_order(rng, shape, axes, parts):
    """The gradient parts' reduction against a float32 loop over the parts in order (bit for
    bit: the order is what makes results independent of the thread count), with the parts laid
    out as a transpose of the weight (the "positions" plan's (Co, KH, KW, Ci)) or not."""
    co, ci, kh, kw = shape
    dw = np.full((co, ci, kh, kw), np.nan, np.float32)
    view = dw.transpose(axes)
    scale = 10.0 ** rng.integers(-3, 4, (parts, 1, 1, 1, 1))  # rounding differs with the order
    dw_parts = f32(rng.standard_normal((parts, *view.shape)) * scale)
    db_parts = f32(rng.standard_normal((parts, co)))
    want_w, want_b = dw_parts[0].copy(), db_parts[0].copy()
    for p in range(1, parts):
        want_w += dw_parts[p]
        want_b += db_parts[p]
    db = np.full(co, np.nan, np.float32)
    K.sum_parts(dw.reshape(-1), db, dw_parts.reshape(parts, -1), db_parts, view.shape,
                tuple(s // 4 for s in view.strides))
    np.testing.assert_array_equal(view, want_w)
    np.testing.assert_array_equal(db, want_b)


@pytest.mark.parametrize("n, parts", [(1, 1), (17, 17), (64, 64), (128, 64), (256, 64)])
def test_the_conv_backward_splits_a_batch_into_min_n_64_gradient_parts(n, parts):
    """The parallel slack of the conv backward: min(N, 64) parts whatever the thread count (64
    threads busy from batch 64 on; the reduction order depends on N only)."""
    layer = nc.Conv2D(2, 4, 3).initialize(0)
    x = np.zeros((n, 2, 6, 6), np.float32)
    y = layer.forward(x)
    layer.backward(np.ones_like(y), need_dx=False)
    assert layer._buffers["dw_parts"].shape[0] == parts


@pytest.mark.parametrize("arch, small", [("SkylakeX", True), ("Haswell", False), ("", False)])
def test_positions_backward_gemm_pieces_fit_the_blas_small_matrix_kernels(monkeypatch, arch, small):
    """The "positions" backward cuts its GEMMs into pieces of at most small_gemm_macs() multiply-adds
    where the BLAS has small-matrix kernels (OpenBLAS's AVX-512 cores), never thinner than
    MIN_GEMM_ROWS rows, and leaves them whole elsewhere; the pieces follow the shapes only."""
    from numbacnn.backend import cpu_conv
    from numbacnn.runtime import config as _config

    _config.single_thread_kernel_blas()
    monkeypatch.setattr(_config, "_blas_arch", arch)
    limit = _config.small_gemm_macs()
    assert (limit > 0) == small
    for ci, co, rows in [(16, 48, 396), (32, 32, 784), (64, 64, 1176), (32, 64, 196), (4, 8, 50),
                         (512, 512, 100)]:
        g = nc.Conv2D(ci, co, 3, padding=1).plan.geometry
        kb, mb = cpu_conv.positions_gemm_rows(g, rows)
        per_row = g.ckk * co
        if small and rows * per_row > limit and limit // per_row >= tuning.MIN_GEMM_ROWS:
            assert kb == mb and tuning.MIN_GEMM_ROWS <= kb < rows and kb * per_row <= limit
        else:
            assert (kb, mb) == (rows, rows)


def test_winograd_from_24_channels_in_and_out():
    """3x3 stride-1 layers run Winograd from WINOGRAD_MIN_CHANNELS (24) channels in and out, narrower
    ones "positions"; wide layers of other shapes never Winograd."""
    from numbacnn.tuning import WINOGRAD_MIN_CHANNELS

    assert WINOGRAD_MIN_CHANNELS == 24
    for ci, co, k, stride, plan in [(24, 64, 3, 1, "winograd"), (64, 24, 3, 1, "winograd"),
                                    (24, 24, 3, 1, "winograd"), (16, 64, 3, 1, "positions"),
                                    (64, 23, 3, 1, "positions"), (64, 64, 3, 2, "positions"),
                                    (64, 64, 5, 1, "positions")]:
        assert nc.Conv2D(ci, co, k, stride=stride, padding=1).strategy == plan, (ci, co, k, stride)


def test_wide_winograd_weight_gradients_sum_over_whole_gemms_of_tiles(rng, monkeypatch):
    """Layers of C_in * C_out >= WINOGRAD_DW_WIDE (on the FMA blocks) collect WINOGRAD_DW_TILES
    tiles per weight-gradient GEMM whatever the BLAS's small-matrix limit, narrower ones stay under
    it; a 256 -> 256 layer on 7 x 7 (16 tiles an example, 49 outputs of 64 used) with 384 tiles in
    a part: one GEMM of 256 tiles, then 128, summed, against the oracle."""
    import numbacnn.backend.cpu_conv as cc
    from numbacnn.runtime import config as _config

    monkeypatch.setattr(cc, "small_gemm_macs", lambda: 900_000)  # as with OpenBLAS's small kernels
    assert tuning.WINOGRAD_DW_TILES == 256 and tuning.WINOGRAD_DW_WIDE == 256 * 256
    assert cc.dw_tiles(256, 256) == cc.dw_tiles(512, 128) == 256
    assert cc.dw_tiles(64, 256) == 900_000 // (64 * 256) and cc.dw_tiles(24, 64) == 256
    monkeypatch.setattr(_config, "grad_parts", lambda n: 1)  # one part: its tiles in two GEMMs
    layer = _other_row_plan(nc.Conv2D(256, 256, 3, padding=1).initialize(rng), "chosen", monkeypatch)
    choose_winograd(monkeypatch, always=True, f4=False)  # F(2x2, 3x3)'s weight gradient (F(4x4) would)
    x = f32(rng.standard_normal((24, 256, 7, 7)))
    y = layer.forward(x, training=True)
    assert layer.strategy == "winograd" and layer.plan.variant(x.shape) == "winograd"
    dout = f32(rng.standard_normal(y.shape))
    dx = layer.backward(dout)
    rdx, rdw, _ = ref.conv2d_backward(dout, x, layer.weight, 1, (1, 1))
    np.testing.assert_allclose(y, ref.conv2d_forward(x, layer.weight, layer.bias, 1, (1, 1)), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-4, atol=2e-3)


def _f4(plan, shape, pool=None):
    """Whether the chooser runs a forward of this input shape by F(4x4, 3x3)."""
    return plan.variant(shape, pool) == "winograd4"


def _wino(plan, shape, pool=None, backward=True):
    """Whether the chooser runs it by Winograd, not its "positions" fallback."""
    return plan.variant(shape, pool, backward) != "positions"


def test_winograd4_runs_where_its_tiles_do_less_work(rng):
    """F(4x4, 3x3) takes Winograd layers of at least WINOGRAD4_MIN_CHANNELS channels in and out
    (output channels a multiple of 16) whose 4x4 tiles do at most the multiply-adds of the 2x2
    tiles, in batches of at least WINOGRAD4_MIN_EXAMPLES examples and WINOGRAD4_MIN_TILES tiles;
    F(2x2, 3x3) (or its fallback) runs the rest, and the backward follows the forward that ran."""

    assert (tuning.WINOGRAD4_MIN_CHANNELS, tuning.WINOGRAD4_MAX_WORK, tuning.WINOGRAD4_MIN_EXAMPLES,
            tuning.WINOGRAD4_MIN_TILES) == (24, 1.0, 8, 16)
    plan = nc.Conv2D(256, 256, 3, padding=1).plan
    assert _f4(plan, (8, 256, 7, 7)) and not _f4(plan, (7, 256, 7, 7))  # examples
    assert _f4(plan, (8, 256, 7, 7), (2, 2))  # 6 x 6 read by the pool: 4 x 36 against 9 x 16
    assert _f4(plan, (16, 256, 4, 4)) and _f4(plan, (16, 256, 3, 3))  # 36 against 64 a 4 x 4
    assert not _f4(plan, (15, 256, 3, 3))  # 15 tiles
    assert _f4(plan, (16, 256, 15, 15), (2, 2))  # 576 against 784
    assert not _f4(plan, (16, 256, 2, 2))  # one 4x4 tile (36) against one 2x2 tile (16)
    for ci, co, f4 in ((24, 64, True), (64, 24, False), (64, 72, False), (72, 64, True)):
        assert _f4(nc.Conv2D(ci, co, 3, padding=1).plan, (64, ci, 8, 8)) == f4, (ci, co)
    layer = nc.Conv2D(32, 32, 3, padding=1).initialize(rng)
    for n, f4 in ((8, True), (7, False)):
        x = f32(rng.standard_normal((n, 32, 8, 8)))
        y = layer.forward(x, training=True)
        assert _f4(layer.plan, x.shape) == f4  # 7 examples: F(2x2, 3x3)'s "positions" fallback
        rdx, rdw, _ = ref.conv2d_backward(np.ones_like(y), x, layer.weight, 1, 1)
        dx = layer.backward(np.ones_like(y))
        assert np.abs(dx - rdx).max() <= 2e-5 * np.abs(rdx).max()
        assert np.abs(layer.dweight - rdw).max() <= 2e-5 * np.abs(rdw).max()


@pytest.mark.parametrize("N,H,P,pool", [(24, 7, 1, None), (13, 7, 1, (2, 2)), (40, 3, 1, None)])
def test_winograd4_wide_layer_matches_the_oracle(rng, monkeypatch, N, H, P, pool):
    """A 256 -> 256 layer by F(4x4, 3x3) (7 x 7: 2 x 2 tiles; under a 2 x 2 pool; 3 x 3 in one tile)
    against the float64 oracle, its weight gradient summed over several GEMMs in each of two parts
    (WINOGRAD4_DW_TILES forced to 32 tiles) and its input gradient over groups of examples. The
    stated bound: errors at most 2e-5 of the largest value (F(4x4, 3x3)'s transforms reach 8: about
    5e-6 here, F(2x2, 3x3)'s about 1e-6). A frozen weight (no weight gradient) and the first layer
    (no input gradient) skip their halves."""
    from numbacnn.runtime import config as _config

    monkeypatch.setattr(tuning, "WINOGRAD4_DW_TILES", 32)
    monkeypatch.setattr(_config, "grad_parts", lambda n: min(n, 2))
    layers = [nc.Conv2D(256, 256, 3, padding=P)] + ([nc.MaxPool2D(pool)] if pool else [])
    net = nc.Sequential(layers, seed=1)
    conv = net.layers[0]
    x = f32(rng.standard_normal((N, 256, H, H)))
    y = net.forward(x, training=True)
    assert "wino4_u" in conv._buffers and (conv.fusion.pool is not None) == bool(pool)  # F(4x4, 3x3) ran
    h = ref.conv2d_forward(x, conv.weight, conv.bias, 1, P)
    want = ref.maxpool2d_forward(h, pool, pool, 0)[0] if pool else h

    def close(a, b):
        assert np.abs(a - b).max() <= 2e-5 * np.abs(b).max()

    close(y, want)
    dy = f32(rng.standard_normal(y.shape))
    dx = net.backward(dy)
    dh = ref.maxpool2d_backward(dy, h, pool, pool, 0) if pool else dy
    rdx, rdw, rdb = ref.conv2d_backward(dh, x, conv.weight, 1, P)
    close(dx, rdx)
    close(conv.dweight, rdw)
    close(conv.dbias, rdb)
    assert conv.backward(dy, need_dx=False) is None  # as the first layer: no input gradient
    close(conv.dweight, rdw)
    conv.freeze("weight")
    close(net.backward(dy), rdx)
    assert not conv.dweight.any()  # a frozen weight's gradient is zeros


def test_winograd_falls_back_to_positions_on_small_batches_and_odd_outputs(rng, monkeypatch):
    """A Winograd layer runs "positions" for batches of fewer than WINOGRAD_MIN_TILES tiles and, in
    training, for odd output sides (unless a fused pool reads only an even part) whose tiles are
    less than 3/4 used or fewer than WINOGRAD_ODD_MIN_TILES, and its backward follows the forward
    that ran; inference runs Winograd on odd sides too (half-empty last tiles), from
    WINOGRAD_INFER_MIN_TILES tiles on; all match the oracle. Layers narrower than
    WINOGRAD_WIDE_CHANNELS also run "positions" on outputs of fewer than WINOGRAD_MIN_AREA."""
    from numbacnn.tuning import (
        WINOGRAD_INFER_MIN_TILES,
        WINOGRAD_MIN_AREA,
        WINOGRAD_MIN_TILES,
        WINOGRAD_ODD_MIN_TILES,
        WINOGRAD_WIDE_CHANNELS,
    )

    choose_winograd(monkeypatch, f4=False)  # F(2x2, 3x3)'s thresholds (F(4x4, 3x3) would take these widths)
    narrow = nc.Conv2D(32, 48, 3, padding=1).initialize(rng)
    assert narrow.strategy == "winograd" and 48 < WINOGRAD_WIDE_CHANNELS and WINOGRAD_MIN_AREA == 100
    plan = narrow.plan
    assert not _wino(plan, (64, 32, 8, 8)) and not _wino(plan, (64, 32, 8, 8), None, False)
    assert _wino(plan, (64, 32, 10, 10)) and not _wino(plan, (64, 32, 9, 11))
    assert _wino(plan, (64, 32, 10, 10), None, False)
    C = WINOGRAD_WIDE_CHANNELS  # the tile thresholds alone
    layer = nc.Conv2D(C, C, 3, padding=1).initialize(rng)
    assert layer.strategy == "winograd"
    enough = -(-WINOGRAD_MIN_TILES // 4)  # examples of 4 x 4 (4 tiles) that make the threshold
    assert enough > 1
    odd = WINOGRAD_ODD_MIN_TILES // 16  # examples of 7 x 7 (16 tiles, 49 of 64 outputs used)
    assert odd * 16 == WINOGRAD_ODD_MIN_TILES and odd > WINOGRAD_MIN_TILES
    for n, h, w, winograd in [(1, 4, 4, False), (enough, 4, 4, True), (enough - 1, 4, 4, False),
                              (WINOGRAD_MIN_TILES, 7, 8, False), (3, 5, 5, False), (1, 7, 7, False),
                              (odd, 7, 7, True), (odd - 1, 7, 7, False), (odd, 7, 8, True),
                              (2 * odd, 5, 5, False), (8 * odd, 3, 3, False)]:
        assert _wino(layer.plan, (n, C, h, w)) == winograd
        if h % 2:  # a fused 2x2 pool reads an even part of an odd output: Winograd runs
            tiles = (h // 2) * (w // 2)
            assert _wino(layer.plan, (-(-WINOGRAD_MIN_TILES // tiles), C, h, w), (2, 2))
            assert not _wino(layer.plan, (-(-WINOGRAD_MIN_TILES // tiles) - 1, C, h, w), (2, 2))
        x = f32(rng.standard_normal((n, C, h, w)))
        layer._buffers.clear()  # what this shape's forward and backward leave, alone
        y = layer.forward(x, training=True)
        assert layer.plan.variant(x.shape) == ("winograd" if winograd else "positions")
        expect = ref.conv2d_forward(x, layer.weight, layer.bias, 1, 1)
        np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
        dout = f32(rng.standard_normal(y.shape))
        dx = layer.backward(dout)
        assert ("wino_u2" in layer._buffers) == winograd  # the backward of the forward that ran
        rdx, rdw, _ = ref.conv2d_backward(dout, x, layer.weight, 1, 1)
        np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
        # inference (no backward follows) runs Winograd on odd sides too, enough tiles given
        odd_tiles = n * ((h + 1) // 2) * ((w + 1) // 2)
        assert _wino(layer.plan, (n, C, h, w), None, False) == (odd_tiles >= WINOGRAD_INFER_MIN_TILES)
        y = layer.forward(x, training=False, backward=False)
        assert _wino(layer.plan, x.shape, None, False) == (odd_tiles >= WINOGRAD_INFER_MIN_TILES)
        np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(layer.dweight, rdw, rtol=1e-4, atol=1e-3)


def test_fma_blocks_and_16x16_transposes(rng):
    """microkernel.direct_positions (blocks of 12 x 16 or 6 x 32 accumulators, the last block
    overlapping, fewer positions one at a time) against a float64 convolution (stated tolerance),
    and bit for bit against itself on any prefix of the positions (a block of rows computes each
    position the same way wherever the block starts); transpose16 against NumPy at odd strides."""
    import numba

    from numbacnn.kernels.cpu._util import transpose16
    from numbacnn.kernels.cpu.microkernel import direct_positions

    for C, H, W, Co, KK, S in ((16, 5, 19, 16, 3, 1), (3, 6, 7, 32, 5, 2), (8, 4, 4, 48, 3, 1)):
        x = f32(rng.standard_normal((H, W, C)))  # channel-last
        w = f32(rng.standard_normal((KK, KK, C, Co)))
        OH, OW = (H - KK) // S + 1, (W - KK) // S + 1
        oy, ox = np.divmod(np.arange(OH * OW), OW)
        xo = ((oy * S * W + ox * S) * C).astype(np.int64)
        want = np.zeros((OH, OW, Co))
        for ky in range(KK):
            for kx in range(KK):
                patch = x[ky:ky + S * (OH - 1) + 1:S, kx:kx + S * (OW - 1) + 1:S].astype(np.float64)
                want += patch @ w[ky, kx].astype(np.float64)
        y = np.full(OH * OW * Co, np.nan, np.float32)
        direct_positions(y, x.reshape(-1), xo, w.reshape(-1), OH * OW, Co, KK, KK * C, W * C)
        np.testing.assert_allclose(y.reshape(OH, OW, Co), want, rtol=1e-5, atol=1e-4)
        for lb in {min(lb, OH * OW - 1) for lb in (1, 5, 6, 13, OH * OW - 1)}:
            part = np.full(lb * Co, np.nan, np.float32)
            direct_positions(part, x.reshape(-1), xo, w.reshape(-1), lb, Co, KK, KK * C, W * C)
            np.testing.assert_array_equal(part, y[:lb * Co])
    transpose = numba.njit(lambda d, de, do, ds, s, si, ss: transpose16(d, de, do, ds, s, si, ss))
    src = f32(rng.standard_normal(700))
    for de, do, ds in ((5, 46, 82), (400, 5, 20)):  # rows in order 41 apart; odd rows before even
        d = f32(rng.standard_normal(800))
        want = d.copy()
        for j in range(16):
            at = (do if j % 2 else de) + j // 2 * ds
            want[at:at + 16] = src[3 + j:3 + j + 16 * 37:37]
        transpose(d, de, do, ds, src, 3, 37)
        np.testing.assert_array_equal(d, want)


def test_biased_16x16_transpose_adds_the_bias_and_relu_like_numpy(rng):
    """transpose16_bias (the positions epilogue's): each value read gets its column's bias (a
    float32 add, as NumPy's) and, with relu, 0 below 0, NaN kept, before going where transpose16
    puts it; nothing else in d changes."""
    import numba

    from numbacnn.kernels.cpu._util import transpose16_bias

    run = numba.njit(lambda d, de, do, ds, s, si, ss, b, bi, relu:
                     transpose16_bias(d, de, do, ds, s, si, ss, b, bi, relu))
    src = f32(rng.standard_normal(700))
    src[3 + 2 * 37 + 5] = np.nan
    b = f32(rng.standard_normal(40))
    for relu in (False, True):
        for de, do, ds in ((5, 46, 82), (400, 5, 20)):
            d = f32(rng.standard_normal(800))
            want = d.copy()
            for j in range(16):
                at = (do if j % 2 else de) + j // 2 * ds
                col = src[3 + j:3 + j + 16 * 37:37] + b[7 + j]
                want[at:at + 16] = np.where(col < 0, np.float32(0), col) if relu else col
            run(d, de, do, ds, src, 3, 37, b, 7, relu)
            np.testing.assert_array_equal(d, want)
            assert np.isnan(d).sum() == 1


def test_gemm_blocks_against_float64_and_on_every_row_count(rng):
    """microkernel.gemm_blocks (Winograd's 16 GEMMs): against a float64 product (stated tolerance)
    at offsets inside larger arrays, for every row count from 1 to 30 (blocks of their own height,
    of 6 and of 12 rows, the last overlapping) and column counts that take 32-wide blocks, 16-wide
    ones and an overlapping last one; a row's bits do not depend on how many rows the call has,
    and nothing outside the product is written."""
    from numbacnn.kernels.cpu.microkernel import gemm_blocks

    for N, T in ((64, 32), (48, 19), (40, 33), (16, 7)):
        x = f32(rng.standard_normal(3 + 30 * T))
        w = f32(rng.standard_normal(5 + T * N))
        full = None
        for M in range(1, 31):
            y = np.full(11 + M * N + 9, np.nan, np.float32)
            gemm_blocks(y, 11, x, 3, w, 5, M, N, T)
            want = x[3:3 + M * T].reshape(M, T).astype(np.float64) @ w[5:].reshape(T, N).astype(np.float64)
            np.testing.assert_allclose(y[11:11 + M * N].reshape(M, N), want, rtol=1e-5, atol=1e-4)
            assert np.isnan(y[:11]).all() and np.isnan(y[11 + M * N:]).all()
            if M == 30:
                full = y[11:11 + M * N]
        for M in range(1, 30):
            y = np.empty(M * N, np.float32)
            gemm_blocks(y, 0, x, 3, w, 5, M, N, T)
            np.testing.assert_array_equal(y, full[:M * N], err_msg=f"{M} rows of {N} x {T}")


def test_dot_rows_against_float64_on_every_block_shape(rng):
    """microkernel.dot_rows (the dense forward's x @ w.T): against a float64 product (stated
    tolerance) at offsets and pitches inside larger arrays, for 1-9 rows (blocks of 1-4 rows),
    column counts that take 2 x 8, 4 x 4 (the last overlapping) and single-column blocks, and
    reduction lengths below, at and past a vector's 16 (the scalar tail); a row's bits do not
    depend on how many rows the call has, and nothing outside the product is written."""
    from numbacnn.kernels.cpu.microkernel import dot_rows

    for N in (1, 2, 3, 4, 5, 8, 9, 17):
        for T in (1, 7, 16, 33, 100):
            xs, ws, ys = T + 3, T + 1, N + 2
            x = f32(rng.standard_normal(5 + 9 * xs))
            w = f32(rng.standard_normal(2 + N * ws))
            full = None
            for M in range(1, 10):
                y = np.full(4 + M * ys, np.nan, np.float32)
                dot_rows(y, 4, ys, x, 5, xs, M, w, 2, ws, N, T)
                X = np.lib.stride_tricks.as_strided(x[5:], (M, T), (4 * xs, 4)).astype(np.float64)
                W = np.lib.stride_tricks.as_strided(w[2:], (N, T), (4 * ws, 4)).astype(np.float64)
                got = y[4:].reshape(M, ys)
                np.testing.assert_allclose(got[:, :N], X @ W.T, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{M} x {N} x {T}")
                assert np.isnan(y[:4]).all() and np.isnan(got[:, N:]).all()
                if M == 9:
                    full = got[:, :N].copy()
            for M in range(1, 9):
                y = np.empty(M * N, np.float32)
                dot_rows(y, 0, N, x, 5, xs, M, w, 2, ws, N, T)
                np.testing.assert_array_equal(y.reshape(M, N), full[:M], err_msg=f"{M} rows, {N} x {T}")


@pytest.mark.parametrize("first", [True, False])
def test_gemm_tn_and_gemm_nn_against_float64_with_pitches(rng, first):
    """microkernel.gemm_tn (x.T @ w, the weight gradients' products; accumulating into y when not
    ``first``) and gemm_nn (x @ w with any pitches) against float64 (stated tolerance), at offsets
    and pitches inside larger arrays, for 1-30 rows and column counts of 64-wide (gemm_tn's 4 x 64
    with AVX-512), 32-wide and 16-wide blocks (and an overlapping last one where y is overwritten);
    a row's bits do not depend on the row count, and nothing outside the product is written."""
    from numbacnn.kernels.cpu.microkernel import gemm_nn, gemm_tn

    # reductions past microkernel.TN_CHUNK (96) too: gemm_tn goes on in y from chunk to chunk
    for N, T in ((64, 9), (48, 20), (16, 3), (32, 150), (128, 130)) + (((40, 17), (40, 200)) if first
                                                                       else ()):
        xs, ws, ys = 31 + 2, N + 5, N + 3
        x = f32(rng.standard_normal(7 + T * xs))  # gemm_tn's x: (T, M) rows xs apart
        xn = f32(rng.standard_normal(7 + 30 * (T + 2)))  # gemm_nn's x: (M, T) rows T + 2 apart
        w = f32(rng.standard_normal(3 + T * ws))
        W = np.lib.stride_tricks.as_strided(w[3:], (T, N), (4 * ws, 4)).astype(np.float64)
        start = f32(rng.standard_normal(5 + 30 * ys))
        rows = {}
        for M in range(1, 31):
            y = start.copy()
            y[:5] = np.nan
            gemm_tn(y, 5, ys, x, 7, xs, w, 3, ws, M, N, T, first)
            X = np.lib.stride_tricks.as_strided(x[7:], (T, M), (4 * xs, 4)).astype(np.float64)
            got = y[5:5 + M * ys].reshape(M, ys)
            want = X.T @ W + (0 if first else start[5:5 + M * ys].reshape(M, ys)[:, :N])
            np.testing.assert_allclose(got[:, :N], want, rtol=1e-5, atol=1e-4, err_msg=f"tn {M} x {N} x {T}")
            assert np.isnan(y[:5]).all()
            np.testing.assert_array_equal(got[:, N:], start[5:5 + M * ys].reshape(M, ys)[:, N:])
            np.testing.assert_array_equal(y[5 + M * ys:], start[5 + M * ys:])
            rows.setdefault("tn", got[:1, :N].copy())
            np.testing.assert_array_equal(got[:1, :N], rows["tn"])  # row 0's bits at any row count
            y = np.full(5 + M * ys, np.nan, np.float32)
            gemm_nn(y, 5, ys, xn, 7, T + 2, w, 3, ws, M, N, T)
            X = np.lib.stride_tricks.as_strided(xn[7:], (M, T), (4 * (T + 2), 4)).astype(np.float64)
            got = y[5:].reshape(M, ys)
            np.testing.assert_allclose(got[:, :N], X @ W, rtol=1e-5, atol=1e-4, err_msg=f"nn {M} x {N} x {T}")
            assert np.isnan(y[:5]).all() and np.isnan(got[:, N:]).all()
            rows.setdefault("nn", got[:1, :N].copy())
            np.testing.assert_array_equal(got[:1, :N], rows["nn"])


@pytest.mark.parametrize("first", [True, False])
def test_gemm_nn_add_against_float64_on_ragged_widths(rng, first):
    """microkernel.gemm_nn_add (the "positions" weight gradient, summed over runs of positions):
    y (+)= x @ w with pitches, for widths of whole 32- and 16-column blocks, a ragged rest that
    OpenBLAS adds (no overlapping block, which would add twice), and widths below 16 (OpenBLAS
    alone), against float64 (stated tolerance); nothing outside the product is written."""
    from numbacnn.kernels.cpu.microkernel import gemm_nn_add

    for M, N, T in ((16, 150, 37), (6, 25, 9), (13, 64, 20), (5, 48, 3), (3, 8, 11), (16, 144, 100)):
        xs, ws, ys = T + 3, N + 2, N + 5
        x = f32(rng.standard_normal(4 + M * xs))
        w = f32(rng.standard_normal(6 + T * ws))
        start = f32(rng.standard_normal(2 + M * ys))
        y = start.copy()
        gemm_nn_add(y, 2, ys, x, 4, xs, w, 6, ws, M, N, T, first)
        X = np.lib.stride_tricks.as_strided(x[4:], (M, T), (4 * xs, 4)).astype(np.float64)
        W = np.lib.stride_tricks.as_strided(w[6:], (T, N), (4 * ws, 4)).astype(np.float64)
        got = y[2:].reshape(M, ys)
        before = start[2:].reshape(M, ys)
        want = X @ W + (0 if first else before[:, :N])
        np.testing.assert_allclose(got[:, :N], want, rtol=1e-5, atol=1e-4, err_msg=f"{M} x {N} x {T}")
        np.testing.assert_array_equal(got[:, N:], before[:, N:])
        np.testing.assert_array_equal(y[:2], start[:2])


@pytest.mark.parametrize("n", [7, 100_000])  # one block, and blocks in parallel
def test_add_relu_is_relu_of_the_sum_and_keeps_nan(rng, n):
    """add with relu (a residual block's add with the ReLU after it) against NumPy: the same bits as
    max(a + b, 0) in float32, NaN kept (as relu_forward keeps it)."""
    a, b = f32(rng.standard_normal(n)), f32(rng.standard_normal(n))
    a[0] = np.nan
    y = np.empty_like(a)
    K.add(y, a, b, True)
    want = a + b
    want[want < 0] = 0
    np.testing.assert_array_equal(y, want)
