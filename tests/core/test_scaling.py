"""Tests of the power-law fits against known laws and against numpy/scipy straight-line fits."""

import numpy as np
import pytest
import scipy.stats

from jaxlab.core.scaling import PowerLawFit, fit_loglog_slope, fit_power_law, predict


@pytest.mark.parametrize(
    ("x", "a", "b", "c"),
    [
        (np.logspace(15, 21, 8), 400.0, 0.15, 1.7),  # compute in FLOPs: x spans 1e15..1e21
        (np.logspace(6, 9, 6), 406.4, 0.34, 1.69),  # Chinchilla-like parameter law
        (np.arange(1.0, 9.0), 2.0, 1.0, 0.0),  # offset on the c >= 0 bound
    ],
)
def test_recovers_noiseless_law(x, a, b, c):
    fit = fit_power_law(x, a * x ** (-b) + c)
    assert fit.a == pytest.approx(a, rel=1e-4)
    assert fit.b == pytest.approx(b, rel=1e-5)
    assert fit.c == pytest.approx(c, abs=1e-5)
    assert fit.r2 == pytest.approx(1.0)
    np.testing.assert_allclose(fit.predict(x), predict(fit, x))


def test_recovers_noisy_law_within_errors():
    rng = np.random.default_rng(0)
    x = np.logspace(17, 21, 12)
    a, b, c = 2000.0, 0.2, 2.0  # the power-law term falls from 8 to 0.13, against c = 2
    y = (a * x ** (-b) + c) * (1 + 0.002 * rng.standard_normal(x.size))
    fit = fit_power_law(x, y)
    assert abs(fit.b - b) < 4 * fit.b_err and abs(fit.b - b) < 0.05 * b
    assert abs(fit.c - c) < 4 * fit.c_err
    assert abs(np.log(fit.a / a)) < 4 * fit.a_err / fit.a
    assert 0 < fit.b_err < 0.05 and fit.r2 > 0.99


def test_no_offset_matches_numpy_polyfit():
    rng = np.random.default_rng(1)
    x = np.logspace(3, 7, 7)
    y = 30.0 * x**-0.25 * np.exp(0.05 * rng.standard_normal(x.size))
    fit = fit_power_law(x, y, with_offset=False)
    coef, cov = np.polyfit(np.log(x), np.log(y), 1, cov=True)
    assert fit.b == pytest.approx(-coef[0], rel=1e-10)
    assert fit.a == pytest.approx(np.exp(coef[1]), rel=1e-10)
    assert fit.b_err == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-8)
    assert fit.a_err / fit.a == pytest.approx(np.sqrt(cov[1, 1]), rel=1e-8)
    assert fit.c == 0.0 and fit.c_err == 0.0


def test_few_points():
    fit = fit_power_law([10.0, 100.0], [2.0, 1.0], with_offset=False)
    assert fit.b == pytest.approx(np.log10(2.0)) and np.isnan(fit.b_err)
    fit3 = fit_power_law([1.0, 10.0, 100.0], [5.0, 2.5, 1.25], with_offset=False)
    assert isinstance(fit3, PowerLawFit) and fit3.b_err == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="with_offset=False"):
        fit_power_law([1.0, 10.0, 100.0], [5.0, 2.5, 1.25])
    with pytest.raises(ValueError, match="positive"):
        fit_power_law([0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0])


def test_loglog_slope_matches_scipy_linregress():
    rng = np.random.default_rng(2)
    n = np.array([64, 128, 256, 512, 1024, 2048])
    t = 1e-6 * n**1.9 * np.exp(0.1 * rng.standard_normal(n.size))
    slope, intercept = fit_loglog_slope(n, t)
    ref = scipy.stats.linregress(np.log(n), np.log(t))
    assert slope == pytest.approx(ref.slope, rel=1e-10)
    assert intercept == pytest.approx(ref.intercept, rel=1e-10)


def test_mean_sd_is_the_sample_spread():
    from jaxlab.core.scaling import mean_sd

    assert mean_sd([1.0, 2.0, 3.0]) == {"mean": 2.0, "sd": 1.0, "n": 3}  # ddof = 0 would be 0.816
    assert mean_sd([5.0]) == {"mean": 5.0, "sd": 0.0, "n": 1}
    assert mean_sd([]) == {"mean": None, "sd": None, "n": 0}


def test_format_mean_sd():
    from jaxlab.core.scaling import format_mean_sd, mean_sd

    assert format_mean_sd(mean_sd([0.5, 0.7]), 0.59) == "0.600 ± 0.141 (n=2) (paper 0.59)"
    assert format_mean_sd(mean_sd([])) == "not reached"
