"""Series data: the .ts reader (header tags, channels, missing values, unequal lengths, labels and
targets), series in .npz and .csv, the format registry's refusals, and train.py on series for
classification and regression, with its one-line errors."""
import os

import numpy as np
import pytest

from numbacnn.cli import main
from numbacnn.data import FORMATS, DataError, load_dataset
from numbacnn.data.series import read_ts

TS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "timeseries")
HEADER = "# a comment\n@problemName Toy\n@timeStamps false\n@univariate false\n@dimensions 2\n"


def _ts(path, body, header=HEADER, labels="@classLabel true up down"):
    path.write_text(header + labels + "\n@data\n" + body)
    return str(path)


def _toy(n=24, length=12, seed=0, regression=False, missing=False):
    """Lines of a 2-channel .ts file whose class (or target) follows channel 0's mean."""
    rng = np.random.default_rng(seed)
    lines, labels = [], []
    for i in range(n):
        up = i % 2 == 0
        x = rng.standard_normal((2, length)) + (1.5 if up else -1.5) * np.array([[1], [0]])
        cells = [",".join(f"{v:.5f}" for v in ch) for ch in x]
        if missing and i == 3:
            cells[1] = "?," + cells[1].split(",", 1)[1]
        label = f"{x[0].mean():.4f}" if regression else ("up" if up else "down")
        lines.append(":".join(cells) + ":" + label)
        labels.append(label)
    return "\n".join(lines) + "\n", labels


def test_ts_reader_reads_channels_labels_and_the_test_file_beside(tmp_path):
    body, labels = _toy()
    train = _ts(tmp_path / "Toy_TRAIN.ts", body)
    _ts(tmp_path / "Toy_TEST.ts", _toy(10, seed=1)[0])
    s = read_ts(train)
    assert s.x.shape == (24, 2, 12) and s.x.dtype == np.float32 and s.classes == ["up", "down"]
    np.testing.assert_array_equal(s.y, [0 if lab == "up" else 1 for lab in labels])
    first = body.splitlines()[0].split(":")
    np.testing.assert_allclose(s.x[0, 1], [float(v) for v in first[1].split(",")], rtol=1e-6)
    ds = load_dataset(train)
    assert ds.is_series and ds.input_shape == (2, 12) and ds.x_test.shape == (10, 2, 12)
    assert ds.task == "classify" and ds.classes == ["up", "down"]


def test_ts_regression_targets_and_missing_values(tmp_path):
    body, labels = _toy(regression=True, missing=True)
    path = _ts(tmp_path / "R_TRAIN.ts", body, labels="@targetLabel true")
    with pytest.raises(DataError, match=r"missing values \('\?'\); give a fill value"):
        read_ts(path)
    s = read_ts(path, fill=0.25)
    assert s.classes is None and s.y.dtype == np.float32 and s.x[3, 1, 0] == np.float32(0.25)
    np.testing.assert_allclose(s.y, [float(v) for v in labels], rtol=1e-6)
    ds = load_dataset(path, fill_missing=0.0, test_size=0.25)
    assert ds.task == "regress" and len(ds.y_test) == 6


def test_unequal_lengths_need_an_explicit_length(tmp_path):
    path = _ts(tmp_path / "U.ts", "1,2,3:4,5,6:up\n1,2:3,4:down\n1,2,3,4:5,6,7,8:up\n2,2:1,1:down\n",
               header=HEADER.replace("@dimensions 2\n", "@dimensions 2\n@equalLength false\n"))
    with pytest.raises(DataError, match=r"unequal lengths \(2 to 4\); give a length.*--series-length"):
        read_ts(path)
    padded = read_ts(path, "max")
    assert padded.x.shape == (4, 2, 4)
    np.testing.assert_array_equal(padded.x[1, 0], [1, 2, 0, 0])  # zeros at the end
    np.testing.assert_array_equal(read_ts(path, 3).x[2, 1], [5, 6, 7])  # truncated
    np.testing.assert_array_equal(padded.lengths, [3, 2, 4, 2])


def test_unequal_lengths_resampled_on_request(tmp_path):
    """--series-fit resample: each case linearly interpolated to the length asked for (hand-worked
    values), equal cases untouched, a missing value filled before the interpolation; train and test
    files alike; the option refused where it does not apply."""
    header = HEADER.replace("@dimensions 2\n", "@dimensions 2\n@equalLength false\n")
    path = _ts(tmp_path / "R_TRAIN.ts", "0,2,4:1,1,1:up\n0,6:5,?:down\n1,2,3,4:5,6,7,8:up\n0,3:1,1:down\n",
               header=header)
    x = read_ts(path, 4, fill=-1.0, fit="resample").x
    np.testing.assert_allclose(x[0, 0], [0, 4 / 3, 8 / 3, 4], rtol=1e-6)  # 0,2,4 at 0, 2/3, 4/3, 2
    np.testing.assert_array_equal(x[1, 0], [0, 2, 4, 6])
    np.testing.assert_allclose(x[1, 1], [5, 3, 1, -1], rtol=1e-6)  # the fill, then the line through it
    np.testing.assert_array_equal(x[2], [[1, 2, 3, 4], [5, 6, 7, 8]])  # already 4 long
    np.testing.assert_allclose(read_ts(path, 2, fit="resample", fill=0.0).x[2, 0], [1, 4])  # the ends kept
    _ts(tmp_path / "R_TEST.ts", "0,1,2,3,4,5,6:0,0,0,0,0,0,0:up\n9:9:down\n", header=header)
    ds = load_dataset(path, series_length="max", series_fit="resample", fill_missing=0.0)
    np.testing.assert_allclose(ds.x_test[0, 0], [0, 2, 4, 6], rtol=1e-6)
    np.testing.assert_array_equal(ds.x_test[1, 0], [9, 9, 9, 9])
    with pytest.raises(DataError, match="series fit must be one of pad, resample"):
        read_ts(path, 4, fit="stretch")
    np.savez(tmp_path / "b.npz", x=np.zeros((4, 3, 3)), y=np.arange(4) % 2)
    with pytest.raises(DataError, match="--series-fit does not apply"):
        load_dataset(str(tmp_path / "b.npz"), series_fit="resample")


@pytest.mark.parametrize("text,message", [
    ("@problemName X\n@data\n1,2:up\n", "neither @classLabel nor @targetLabel"),
    ("@classLabel true a b\n1,2,3:c\n", "expected a header tag"),
    ("@classLabel true a b\n@data\n1,2,3:c\n", "label 'c' is not among @classLabel's a b"),
    ("@classLabel true a b\n@data\n1,2,x:a\n", "line 3: channel 1: not a number: 'x'"),
    ("@classLabel true a b\n@data\n1,2,3:a\n1,2:3,4:b\n", "line 4: 2 channels, the first case has 1"),
    ("@classLabel true a b\n@data\n1,2,3:4,5:a\n", "its channels have different lengths"),
    ("@classLabel true a b\n@dimensions 2\n@data\n1,2,3:a\n", "1 channels, the header's @dimensions says 2"),
    ("@classLabel maybe\n@data\n1:a\n", "@classlabel must be true or false"),
    ("@classLabel true a a\n@data\n1:a\n", "lists a class twice"),
    ("@classLabel true a b\n@equalLength true\n@data\n1,2:a\n1:b\n", "@equalLength true but the cases have"),
    ("@classLabel true a b\n@seriesLength 5\n@equalLength true\n@data\n1,2:a\n", "@seriesLength 5 but"),
    ("@timeStamps true\n@classLabel true a\n@data\n(0,1):a\n", "@timeStamps true"),
    ("@targetLabel true\n@data\n1,2:heavy\n", "target 'heavy' is not a number"),
    ("@classLabel true a\n@data\n1,inf:a\n", "an infinite value"),
    ("@classLabel true a\n@data\n", "no cases after @data"),
    ("# only comments\n", "no @data line"),
    ("@classLabel true a b\n@classLabel true a b\n@data\n1:a\n", "given twice"),
])
def test_broken_ts_files_get_one_line_naming_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.ts"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_ts(str(path))


def test_special_and_oversized_series_files_are_refused_unread(tmp_path):
    fifo = tmp_path / "pipe.ts"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        read_ts(str(fifo))  # never opened: no hang
    from numbacnn.data import series

    big = tmp_path / "big.ts"
    big.write_text("@classLabel true a\n@data\n" + "1,2:a\n" * 100)
    with pytest.raises(DataError, match="more than the 64 a data file may hold"):
        series.read_text(str(big), limit=64)


def test_series_in_npz_and_csv_are_said_so_not_guessed(tmp_path):
    x = np.random.default_rng(0).standard_normal((20, 3, 16)).astype(np.float32)
    y = np.arange(20) % 2
    plain = tmp_path / "s.npz"
    np.savez(plain, x=x, y=y)
    with pytest.raises(DataError, match="pixel values must lie in"):  # without a word: images
        load_dataset(str(plain))
    assert load_dataset(str(plain), series=True).input_shape == (3, 16)
    tagged = tmp_path / "t.npz"
    np.savez(tagged, x=x, y=y, layout=np.array("series"))
    assert load_dataset(str(tagged)).is_series
    np.savez(tmp_path / "w.npz", x=x, y=y, layout=np.array("movies"))
    with pytest.raises(DataError, match="layout.*'images' or 'series'"):
        load_dataset(str(tmp_path / "w.npz"))
    rows = np.column_stack([y, x[:, 0]])  # label first, then one value a column
    np.savetxt(tmp_path / "s.csv", rows, delimiter=",")
    ds = load_dataset(str(tmp_path / "s.csv"), series=True)
    assert ds.input_shape == (1, 16)
    with pytest.raises(DataError, match="pixel values must lie in"):
        load_dataset(str(tmp_path / "s.csv"))  # without --series: 4x4 images, whose values do not fit
    x[2, 1, 3] = np.nan
    np.savez(plain, x=x, y=y)
    with pytest.raises(DataError, match="series contain NaN"):
        load_dataset(str(plain), series=True)


def test_the_registry_refuses_options_where_they_do_not_apply(tmp_path):
    assert [f.name for f in FORMATS][:4] == ["an IDX directory", "CIFAR-10", "an image folder", ".ts series"]
    path = _ts(tmp_path / "Toy_TRAIN.ts", _toy()[0])
    with pytest.raises(DataError, match="--image-size does not apply to .*Toy_TRAIN.ts \\(.ts series\\)"):
        load_dataset(path, image_size=8)
    with pytest.raises(DataError, match="--series-length does not apply to the embedded digits"):
        load_dataset(None, series_length=4)
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 3, 3)), y=np.arange(4) % 2)
    with pytest.raises(DataError, match="--fill-missing does not apply"):
        load_dataset(str(tmp_path / "a.npz"), fill_missing=0.0)


def test_train_py_on_series_and_its_errors(tmp_path, capsys):
    train = _ts(tmp_path / "Toy_TRAIN.ts", _toy(40)[0])
    _ts(tmp_path / "Toy_TEST.ts", _toy(20, seed=3)[0])
    assert main(["--data", train, "--epochs", "20", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "done: test accuracy" in out and float(out.split("test accuracy ")[1].split()[0]) >= 0.9
    assert main(["--data", train, "--epochs", "1", "--arch", "lenet5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "conv is a 2-D layer and the input is series" in err and "Traceback" not in err
    assert main(["--data", train, "--image-size", "8", "--quiet"]) == 2
    assert "--image-size and --channels apply to image folders" in capsys.readouterr().err
    assert main(["--data", train, "--label-smoothing", "0.1", "--tta", "mirror", "--epochs", "1",
                 "--quiet"]) in (1, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_train_py_regresses_a_target_label_file(tmp_path, capsys):
    train = _ts(tmp_path / "R_TRAIN.ts", _toy(60, regression=True)[0], labels="@targetLabel true")
    _ts(tmp_path / "R_TEST.ts", _toy(20, seed=5, regression=True)[0], labels="@targetLabel true")
    out_json = tmp_path / "m.json"
    assert main(["--data", train, "--epochs", "40", "--quiet", "--metrics-out", str(out_json)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("done: test rmse ") and " r2 " in line
    import json

    metrics = json.loads(out_json.read_text())
    assert metrics["test_r2"] > 0.5 and metrics["test_rmse"] > 0
    assert main(["--data", train, "--epochs", "1", "--report", str(tmp_path / "rep"), "--quiet"]) == 2
    assert "--report is for classification" in capsys.readouterr().err
    assert main(["--data", train, "--epochs", "1", "--label-smoothing", "0.1", "--quiet"]) == 2
    assert "--label-smoothing is for classification" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir(TS_DIR), reason="needs shared/data/timeseries")
def test_the_shared_ts_sets_load_as_their_readme_says():
    want = {"GunPoint": ((50, 1, 150), 150, 2), "ItalyPowerDemand": ((67, 1, 24), 1029, 2),
            "BasicMotions": ((40, 6, 100), 40, 4), "JapaneseVowels_eq": ((270, 12, 25), 370, 9),
            "MNIST1D": ((4000, 1, 40), 1000, 10)}
    for name, (shape, n_test, n_classes) in want.items():
        ds = load_dataset(os.path.join(TS_DIR, f"{name}_TRAIN.ts"))
        assert (ds.x_train.shape, len(ds.y_test), ds.n_classes) == (shape, n_test, n_classes), name
    tec = load_dataset(os.path.join(TS_DIR, "Tecator_TRAIN.ts"))
    assert tec.task == "regress" and tec.x_train.shape == (172, 1, 100) and len(tec.y_test) == 43
    with pytest.raises(DataError, match="unequal lengths"):
        load_dataset(os.path.join(TS_DIR, "JapaneseVowels_TRAIN.ts"))
    vowels = load_dataset(os.path.join(TS_DIR, "JapaneseVowels_TRAIN.ts"), series_length="max")
    assert vowels.input_shape == (12, 26)


def test_predict_reads_series_and_maps_regression_outputs_back(tmp_path, capsys):
    """A series checkpoint predicts .ts and .npy series (a file of the wrong length: one line, the
    others still predicted); a regression checkpoint prints its targets' units (the training
    targets' mean and std travel in the checkpoint)."""
    from numbacnn.cli import run_predict

    train = _ts(tmp_path / "Toy_TRAIN.ts", _toy(40)[0])
    ck = str(tmp_path / "cls.npz")
    assert main(["--data", train, "--epochs", "15", "--quiet", "--save", ck]) == 0
    capsys.readouterr()
    test = _ts(tmp_path / "Toy_TEST.ts", _toy(6, seed=9)[0])
    np.save(tmp_path / "one.npy", read_ts(test).x[0])  # (C, L): one series
    np.save(tmp_path / "short.npy", np.zeros((2, 2, 5), np.float32))
    assert main([ck, test, str(tmp_path / "one.npy"), str(tmp_path / "short.npy")],
                command=run_predict) == 1
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 7 and all(line.split("\t")[1] in ("up", "down") for line in lines)
    assert "short.npy: series of shape (2, 5), the model takes (2, 12)" in err
    reg_train = _ts(tmp_path / "R_TRAIN.ts", _toy(40, regression=True)[0], labels="@targetLabel true")
    rck = str(tmp_path / "reg.npz")
    assert main(["--data", reg_train, "--epochs", "30", "--quiet", "--save", rck]) == 0
    capsys.readouterr()
    net = nc_load(rck)
    s = read_ts(reg_train)
    fitted = load_dataset(reg_train).y_train  # the training part of the seeded split (no _TEST file)
    assert net.target_scale == pytest.approx((float(np.mean(fitted, dtype=np.float64)),
                                              float(np.std(fitted, dtype=np.float64))))
    assert main([rck, reg_train], command=run_predict) == 0
    values = np.array([float(line.split("\t")[1]) for line in capsys.readouterr().out.splitlines()])
    mean, std = net.target_scale
    want = net.forward(net_input(s.x))[:, 0].astype(np.float64) * std + mean
    np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-5)
    assert np.corrcoef(values, s.y)[0, 1] > 0.8  # the targets' units, and learned


def nc_load(path):
    import numbacnn as nc

    return nc.load(path)


def net_input(x):
    return np.ascontiguousarray(x, np.float32)
