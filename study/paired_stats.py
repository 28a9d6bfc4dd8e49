"""Seed-paired statistics of a study: t confidence intervals, the paired t test, the equivalence test (TOST), and
Holm's correction."""

import math

import numpy as np
from scipy import stats

CONFIDENCE = 0.95  # of every interval a study reports


def t_quantile(df: int) -> float:
    """The two-sided CONFIDENCE quantile of Student's t with df degrees of freedom."""
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its t confidence interval over seeds (nan for a single seed)."""
    n = len(values)
    if n < 2:
        return float(np.mean(values)), math.nan
    return float(np.mean(values)), t_quantile(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


def plus_minus(value: tuple[float, float] | None, digits: int = 4) -> str:
    """(mean, half-width) as "mean ± half-width"; the mean alone for one seed (nan half-width); n/a for None (a
    cell that cannot run)."""
    if value is None:
        return "n/a"
    mean, half = value
    return f"{mean:,.{digits}f}" if math.isnan(half) else f"{mean:,.{digits}f} ± {half:,.{digits}f}"


# Differences that vary over seeds by no more than this times the losses' size are float64 rounding, not spread.
SPREAD_TOLERANCE = 1e-12


def untested(differences: np.ndarray, scale: float) -> str | None:
    """Why no t test can be made of these paired differences (None if one can): one seed, or differences equal
    over the seeds, where t is 0/0 or x/0: no evidence either way, neither significant nor equivalent. scale: the
    size of the values the differences came from (float64 rounding of them is no spread)."""
    n = len(differences)
    if n < 2:
        return f"{n} seed{'s' * (n != 1)}: no test"
    if float(np.std(differences, ddof=1)) <= SPREAD_TOLERANCE * scale:
        return f"{n} seeds, no spread: no test"
    return None


def paired(a: list[float], b: list[float]) -> dict:
    """a - b seed by seed: mean, confidence interval, two-sided p of the paired t test, and wins (lower loss).
    Where no test can be made (untested says why, in "untested"), the interval and p are nan."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    differences = a - b
    n = len(differences)
    why = untested(differences, float(np.abs(np.concatenate([a, b])).max(initial=0.0)))
    mean, half, p = float(np.mean(differences)), math.nan, math.nan
    if why is None:
        _, half = interval(differences.tolist())
        sd = float(np.std(differences, ddof=1))
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return {"mean": mean, "low": mean - half, "high": mean + half, "p": p, "n": n,
            "a_wins": int((differences < 0).sum()), "b_wins": int((differences > 0).sum()),
            "differences": differences.tolist(), "untested": why}


def one_sided_p(differences: np.ndarray, bound: float, alternative: str) -> float:
    """p of the one-sample t test of H0: mean <= bound (alternative "greater") or mean >= bound ("less")."""
    n = len(differences)
    t = (float(np.mean(differences)) - bound) / (float(np.std(differences, ddof=1)) / math.sqrt(n))
    return float(stats.t.sf(t, n - 1) if alternative == "greater" else stats.t.cdf(t, n - 1))


def tost(differences: list[float], margin: float) -> float:
    """p of the two one-sided tests (Schuirmann 1987) of H0: |mean difference| >= margin. Below alpha: the mean
    lies within (-margin, +margin), i.e. the (1 - 2 alpha) t interval of the mean lies inside it. nan where no
    test can be made (one seed, or no spread: see untested)."""
    d = np.asarray(differences, dtype=np.float64)
    if untested(d, float(np.abs(d).max(initial=0.0))):
        return math.nan
    return max(one_sided_p(d, -margin, "greater"), one_sided_p(d, margin, "less"))


def verdict(equivalent: bool, different: bool, why_untested: str | None = None) -> str:
    """What a pair's tests allow one to say: equivalent (within the margin; said even where a difference smaller
    than the margin is also significant), different, inconclusive (neither test rejects), or, where no test can
    be made, why not (untested)."""
    if why_untested:
        return why_untested
    return "equivalent" if equivalent else "different" if different else "inconclusive"


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p of each hypothesis (Holm 1979; at most 1): the smallest family-wise error at which the
    step-down method rejects it, max over the steps up to its own of (m - rank) p. A nan p (no test) counts in the
    family wherever it stands in the list, and it and every later step are nan (never rejected)."""
    order = sorted(range(len(p_values)), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted, running = [math.nan] * len(p_values), 0.0
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]):  # sorted last: it and the rest stay nan
            break
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def holm(p_values: list[float], alpha: float = 1 - CONFIDENCE) -> list[bool]:
    """Which hypotheses Holm's step-down method rejects: family-wise error at most alpha over all of them (a nan
    p is never rejected)."""
    return [p <= alpha for p in holm_adjusted(p_values)]
