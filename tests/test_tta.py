"""Test-time augmentation: the views and their weights against an independent construction with
numpy's reflect padding; evaluate, the command line and the estimator use it."""
import numpy as np
import pytest
from conftest import f32, tiny_npz

import numbacnn as nc
from numbacnn import tta
from numbacnn.cli import main


def _views_by_hand(net, x, mode):
    f = lambda v: net.forward(np.ascontiguousarray(v), training=False).astype(np.float64)  # noqa: E731
    mirror = lambda v: 0.5 * f(v) + 0.5 * f(v[..., ::-1])  # noqa: E731
    if mode == "mirror":
        return mirror(x)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
    h, w = x.shape[2:]
    down_right, up_left = padded[:, :, 0:h, 0:w], padded[:, :, 2:h + 2, 2:w + 2]
    return 0.5 * mirror(x) + 0.25 * mirror(down_right) + 0.25 * mirror(up_left)


@pytest.mark.parametrize("mode", ["mirror", "mirror-translate"])
def test_views_and_weights_match_a_construction_by_hand(rng, mode):
    net = nc.build_network("conv(4,3,padding=same),relu,maxpool(2),dense(8)", (3, 7, 6), 5, seed=0)
    x = f32(rng.standard_normal((9, 3, 7, 6)))
    got = tta.logits(net, x, mode)
    np.testing.assert_allclose(got, _views_by_hand(net, x, mode), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, net.forward(x), atol=1e-4)  # the views matter
    np.testing.assert_array_equal(tta.logits(net, x, "none"), net.forward(x))


def test_evaluate_the_command_line_and_the_estimator_use_it(tmp_path, capsys, rng):
    x = f32(rng.random((40, 1, 6, 6)))
    y = np.arange(40) % 3
    net = nc.build_network("conv(4,3),relu,dense(8)", (1, 6, 6), 3, seed=0)
    logits = tta.logits(net, x, "mirror-translate")
    _, acc = nc.evaluate(net, x, y, batch_size=7, tta="mirror-translate")
    assert acc == pytest.approx((logits.argmax(1) == y).mean())
    data = tiny_npz(tmp_path / "d.npz", 60)
    ck = str(tmp_path / "r.npz")
    assert main(["--data", data, "--epochs", "1", "--save", ck, "--quiet", "--tta", "mirror"]) == 0
    assert "with test-time augmentation mirror" in capsys.readouterr().out
    assert main(["--data", data, "--evaluate", ck, "--tta", "mirror-translate"]) == 0
    assert "(test-time augmentation mirror-translate)" in capsys.readouterr().out
    from sklearn.datasets import load_digits

    X, Y = load_digits(return_X_y=True)
    clf = nc.CNNClassifier(max_epochs=1, random_state=0).fit(X[:100], Y[:100])
    plain = clf.predict_proba(X[:10])
    clf.set_params(tta="mirror")
    mirrored = clf.predict_proba(X[:10])
    assert not np.allclose(plain, mirrored) and np.allclose(mirrored.sum(1), 1)


def test_tta_on_inputs_that_are_not_images_is_one_clear_error(tmp_path, capsys):
    x = np.random.default_rng(0).random((30, 7))
    path = tmp_path / "flat.npz"
    np.savez(path, x=(x * 255).astype(np.uint8).reshape(30, 1, 7), y=np.arange(30) % 2)  # 1x7 "images"
    assert main(["--data", str(path), "--arch", "mlp", "--epochs", "1", "--tta", "mirror"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tta: tta 'mirror' needs images" in err[0]
    with pytest.raises(ValueError, match="tta must be one of none, mirror, mirror-translate"):
        tta.check("flip", (1, 8, 8))
    clf = nc.CNNClassifier(max_epochs=1, random_state=0, tta="mirror").fit(x, np.arange(30) % 2)
    with pytest.raises(ValueError, match="needs images"):
        clf.predict(x)
