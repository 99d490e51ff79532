"""sinks/compare/stats.py: Student t from first principles, and the verdict rule on synthetic windows."""

from __future__ import annotations

import numpy as np
import pytest

from query.compare.stats import MIN_WINDOWS, betainc, compare, decide, t_cdf, t_ppf


@pytest.mark.parametrize("p,df,q", [(0.975, 10, 2.228138852), (0.995, 5, 4.032142984), (0.975, 1, 12.70620474),
                                    (0.95, 30, 1.697260887), (0.9995, 3, 12.92397863), (0.975, 1e6, 1.959966)])
def test_t_quantiles(p, df, q):
    assert t_ppf(p, df) == pytest.approx(q, rel=1e-6)
    assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_ppf(1 - p, df) == pytest.approx(-q, rel=1e-6)


def test_betainc_edges_and_symmetry():
    assert betainc(2, 3, 0) == 0 and betainc(2, 3, 1) == 1
    assert betainc(2.5, 1.5, 0.3) == pytest.approx(1 - betainc(1.5, 2.5, 0.7), abs=1e-12)


def _run(b, a, better=False, family=1, min_effect=0.0, vb=None, va=None):
    return decide(compare(np.array(b, float), np.array(a, float), vb, va), family, better, min_effect)


def test_a_clear_drop_of_a_lower_is_better_metric_is_improved_and_of_a_higher_is_better_one_worse():
    rng = np.random.default_rng(1)
    b, a = 10 + rng.normal(0, 0.5, 15), 7 + rng.normal(0, 0.5, 15)
    assert _run(b, a, better=False).verdict == "improved"
    assert _run(b, a, better=True).verdict == "worse"
    c = _run(b, a, better=None)
    assert c.verdict == "no verdict" and c.high < 0


def test_noise_is_no_significant_change_and_the_minimum_effect_holds():
    rng = np.random.default_rng(2)
    b, a = 10 + rng.normal(0, 1, 15), 10 + rng.normal(0, 1, 15)
    assert _run(b, a).verdict == "no significant change"
    tiny = _run(np.full(15, 10.0) + rng.normal(0, 0.001, 15), np.full(15, 10.01) + rng.normal(0, 0.001, 15),
                min_effect=0.05)
    assert tiny.low > 0 and tiny.verdict == "no significant change"  # real but smaller than what matters


def test_the_sampling_variance_is_a_floor_under_calm_looking_windows():
    b, a = [0.10, 0.10, 0.10, 0.10, 0.10], [0.12, 0.12, 0.12, 0.12, 0.12]
    assert _run(b, a, better=False).verdict == "worse"  # no spread at all: any difference counts
    v = [0.1 * 0.9 / 50] * 5  # ... but each share came from 50 sampled packets
    assert _run(b, a, better=False, vb=v, va=v).verdict == "no significant change"


def test_autocorrelated_windows_widen_the_interval():
    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.normal(0, 1, 40))
    c = compare(walk[:20], walk[20:])
    iid = compare(rng.permutation(walk[:20]), rng.permutation(walk[20:]))
    assert c.autocorr > 0.5 and c.se > iid.se


def test_a_larger_family_widens_every_interval():
    rng = np.random.default_rng(4)
    b, a = 10 + rng.normal(0, 1, 12), 10.8 + rng.normal(0, 1, 12)
    one, many = _run(b, a, family=1), _run(b, a, family=100)
    assert many.high - many.low > one.high - one.low and many.level > one.level


def test_too_few_windows_is_insufficient_data():
    c = _run([1, 2], [5, 6, 7, 8], better=False)
    assert c.verdict == "insufficient data" and c.low is None and c.n_before == 2 < MIN_WINDOWS
    nan = _run([1, np.nan, np.nan, 2, np.nan], [1, 2, 3])
    assert nan.verdict == "insufficient data" and nan.n_before == 2
