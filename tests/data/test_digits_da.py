"""The optdigits conversion of MNIST-style images and the partial-DA tasks built from it."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from jaxlab.core.errors import ConfigError
from jaxlab.data.digits_da import area_downsample, load_task, quarter_turn, to_optdigits


def test_a_solid_square_fills_the_grid_wherever_it_is():
    for r, c, side in ((2, 3, 9), (15, 10, 12)):
        img = np.zeros((1, 28, 28), np.uint8)
        img[0, r : r + side, c : c + side] = 255
        np.testing.assert_allclose(to_optdigits(img)[0], np.ones((8, 8)))


def test_a_wide_bar_is_padded_to_a_centred_square():
    img = np.zeros((1, 28, 28), np.uint8)
    img[0, 10:16, 2:26] = 200  # 6 x 24: padded to 24 x 24, the bar covers rows 9..15 of 32
    out = to_optdigits(img)[0]
    assert np.all(out[:2] == 0) and np.all(out[-2:] == 0) and np.all(out[3:5] == 1)
    assert np.all(out * 16 == np.round(out * 16))  # counts of 16 pixels, like sklearn's digits
    assert to_optdigits(np.zeros((1, 28, 28), np.uint8)).sum() == 0


def test_area_downsample_keeps_the_mean_ink():
    img = np.random.default_rng(0).integers(0, 256, (3, 28, 28)).astype(np.uint8)
    out = area_downsample(img)
    np.testing.assert_allclose(out.mean((1, 2)) * 32 * 32, img.sum((1, 2)) / 255.0, rtol=1e-5)


@pytest.fixture(scope="module")
def tasks():
    kw = dict(target_classes=tuple(range(10)), max_source=600, max_target=600, seed=0)
    return {name: load_task(name, **kw) for name in ("digits_to_mnist", "mnist_to_digits")}


def test_the_domain_gap_is_real(tasks):
    # A logistic regression trained on one domain scores far lower on the other than in-domain.
    for name, task in tasks.items():
        clf = LogisticRegression(max_iter=500).fit(task.xs[:400], task.ys[:400])
        in_domain, cross = clf.score(task.xs[400:], task.ys[400:]), clf.score(task.xt, task.yt)
        assert in_domain > 0.8 and cross < in_domain - 0.15, (name, in_domain, cross)
        assert cross > 0.3  # but bridgeable: far above chance (0.1)


def test_the_target_keeps_only_its_classes():
    task = load_task("mnist_to_digits", target_classes=(0, 1, 2), max_source=200, max_target=100)
    assert set(np.unique(task.yt)) == {0, 1, 2} and set(np.unique(task.ys)) == set(range(10))
    assert task.outlier_classes == tuple(range(3, 10))
    assert task.xs.shape[1] == task.xt.shape[1] == 64 and task.xt.max() <= 1


@pytest.mark.parametrize(
    "kw",
    [
        {"name": "usps"},
        {"name": "fashion", "target_classes": (11,)},
        {"name": "digits_to_mnist", "outlier_factor": 0},
        {"name": "digits_to_mnist", "variant_frac": 1.0},
    ],
)
def test_bad_task_is_one_line(kw):
    with pytest.raises(ConfigError) as err:
        load_task(**kw)
    assert len(str(err.value).splitlines()) == 1


def test_the_structure_oversamples_outliers_and_turns_a_shared_subgroup_the_target_lacks():
    kw = dict(target_classes=(0, 1, 2, 3, 4), max_source=400, max_target=300, seed=3)
    base = load_task("digits_to_mnist", **kw)
    task = load_task("digits_to_mnist", outlier_factor=3, variant_frac=0.25, **kw)
    assert base.variant is None and not base.source_variant.any()
    for c in range(10):
        n_base, mine = int(np.sum(base.ys == c)), task.ys == c
        if c in task.outlier_classes:  # resampled to 3x, never turned
            assert mine.sum() == 3 * n_base and not task.variant[mine].any()
            originals = {r.tobytes() for r in base.xs[base.ys == c]}
            assert all(r.tobytes() in originals for r in task.xs[mine])
        else:  # same count, a quarter of them turned (labels kept)
            assert mine.sum() == n_base and task.variant[mine].sum() == round(0.25 * n_base)
            turned = {r.tobytes() for r in quarter_turn(base.xs[base.ys == c])}
            plain = {r.tobytes() for r in base.xs[base.ys == c]}
            assert all(r.tobytes() in turned for r in task.xs[mine & task.variant])
            assert all(r.tobytes() in plain for r in task.xs[mine & ~task.variant])
    # The target holds none of the subgroup: it is the unstructured target, and no target image
    # is a variant, so the target's mass on the subgroup is zero.
    np.testing.assert_array_equal(task.xt, base.xt)
    np.testing.assert_array_equal(task.yt, base.yt)
    variants = {r.tobytes() for r in task.xs[task.variant]}
    assert np.mean([r.tobytes() in variants for r in task.xt]) == 0.0
    assert np.all(task.ys[task.variant] < 5)  # only shared classes have variants


def test_a_quarter_turn_is_a_rotation():
    x = np.arange(64, dtype=np.float32)[None]
    img = x.reshape(8, 8)
    turned = quarter_turn(x).reshape(8, 8)
    assert turned[0, 0] == img[0, 7] and turned[7, 0] == img[0, 0]  # top-right goes top-left
    np.testing.assert_array_equal(quarter_turn(quarter_turn(quarter_turn(quarter_turn(x)))), x)
