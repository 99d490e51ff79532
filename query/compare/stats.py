"""The statistics of ``fabricflow compare``: per-window values -> change, interval, verdict. Pure (numpy and math).

The rule (docs/closed-loop.md, "When is a change significant"): each period is cut into windows, one value per
window with its sampling variance (1-in-N sampling: a count's relative error is about 1/sqrt(samples)). A period's
per-window variance is the larger of the windows' spread (the job's own fluctuation plus sampling noise) and their
mean sampling variance. A mean's variance is divided by n_eff = n (1 - r) / (1 + r) windows, r the pooled lag-1
autocorrelation (clipped to [0, 0.8]): neighbouring windows are not independent. The change is the difference of
the means with Welch's standard error and Welch-Satterthwaite's degrees of freedom over the n windows. All
comparisons of a report that can get a verdict are one family: each interval is a (1 - 0.05/m) Student-t interval
(Bonferroni), so a report about a job that did not change has at most a 5 % chance of any false verdict. The
verdict is ``improved`` or ``worse`` (by the metric's good direction) when the interval excludes zero AND the
change reaches the metric's minimum practical effect, else ``no significant change``; a metric without a good
direction gets none (``no verdict``); fewer than :data:`MIN_WINDOWS` windows with a value: ``insufficient data``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ALPHA", "MIN_WINDOWS", "Comparison", "betainc", "compare", "decide", "t_cdf", "t_ppf"]

ALPHA = 0.05
MIN_WINDOWS = 3
MAX_AUTOCORR = 0.8

IMPROVED, WORSE, SAME, NO_VERDICT, INSUFFICIENT = ("improved", "worse", "no significant change", "no verdict",
                                                   "insufficient data")


# ----------------------------------------------------------------------------- Student t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df may be fractional, as Welch's is)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`; |error| < 1e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# ----------------------------------------------------------------------------- one comparison


@dataclass
class Comparison:
    """One metric of one entity, before vs after (all in the metric's unit)."""

    before: float | None
    after: float | None
    change: float | None  # after - before
    low: float | None  # interval of the change
    high: float | None
    n_before: int
    n_after: int
    se: float | None = None
    df: float | None = None
    autocorr: float = 0.0
    relative: float | None = None  # change / |before|
    verdict: str = INSUFFICIENT
    level: float | None = None  # confidence level of the interval (after the family correction)


def _autocorr(*series: np.ndarray) -> float:
    """Pooled lag-1 autocorrelation of the demeaned series, clipped to [0, MAX_AUTOCORR]."""
    num = den = 0.0
    for x in series:
        if len(x) < 3:
            continue
        r = x - x.mean()
        num += float(np.dot(r[1:], r[:-1]))
        den += float(np.dot(r, r))
    if den <= 0:
        return 0.0
    return float(min(MAX_AUTOCORR, max(0.0, num / den)))


def _period(values: np.ndarray, sampling_var: np.ndarray) -> tuple[float, float, int]:
    """(mean, per-window variance, windows) of one period's windows that have a value."""
    n = len(values)
    mean = float(values.mean())
    spread = float(values.var(ddof=1)) if n > 1 else 0.0
    floor = float(np.nanmean(sampling_var)) if len(sampling_var) else 0.0
    return mean, max(spread, floor if math.isfinite(floor) else 0.0), n


def compare(before: np.ndarray, after: np.ndarray, var_before: np.ndarray | None = None,
            var_after: np.ndarray | None = None) -> Comparison:
    """Welch's comparison of two periods' per-window values (NaN = a window without a value), with the sampling
    variances folded in and the windows discounted by their autocorrelation. The interval and the verdict are
    set later by :func:`decide` (they depend on the family)."""
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    vb = np.zeros(len(b)) if var_before is None else np.asarray(var_before, dtype=float)
    va = np.zeros(len(a)) if var_after is None else np.asarray(var_after, dtype=float)
    kb, ka = np.isfinite(b), np.isfinite(a)
    b, vb, a, va = b[kb], vb[kb], a[ka], va[ka]
    mb = float(b.mean()) if len(b) else None
    ma = float(a.mean()) if len(a) else None
    if len(b) < MIN_WINDOWS or len(a) < MIN_WINDOWS:
        change = None if mb is None or ma is None else ma - mb
        return Comparison(mb, ma, change, None, None, len(b), len(a))
    mb, var_b, nb = _period(b, vb)
    ma, var_a, na = _period(a, va)
    r = _autocorr(b, a)
    k = (1.0 - r) / (1.0 + r)  # design effect of lag-1 autocorrelation: the variance of a mean grows by 1/k
    qb, qa = var_b / max(1.0, nb * k), var_a / max(1.0, na * k)
    se = math.sqrt(qb + qa)
    if se > 0:  # Welch-Satterthwaite over the windows themselves (the estimates of the variances use all of them)
        df = (qb + qa) ** 2 / ((qb * qb / (nb - 1.0) if qb else 0.0) + (qa * qa / (na - 1.0) if qa else 0.0))
    else:
        df = nb + na - 2.0
    d = ma - mb
    rel = d / abs(mb) if mb else None
    return Comparison(mb, ma, d, None, None, nb, na, se, df, r, rel, SAME)


def decide(c: Comparison, family: int, higher_is_better: bool | None, min_effect: float,
           alpha: float = ALPHA) -> Comparison:
    """Set the interval (Bonferroni over ``family`` comparisons) and the verdict of ``c`` in place."""
    if c.se is None:
        c.verdict = INSUFFICIENT
        return c
    level = alpha / max(1, family)
    c.level = 1.0 - level
    q = t_ppf(1.0 - level / 2.0, max(1.0, c.df)) if c.se > 0 else 0.0
    c.low, c.high = c.change - q * c.se, c.change + q * c.se
    if higher_is_better is None:
        c.verdict = NO_VERDICT
        return c
    significant = (c.low > 0 or c.high < 0) and abs(c.change) >= min_effect and c.change != 0
    if not significant:
        c.verdict = SAME
    else:
        c.verdict = IMPROVED if (c.change > 0) == higher_is_better else WORSE
    return c
