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


def paired(a: list[float], b: list[float]) -> dict:
    """a - b seed by seed: mean, confidence interval, two-sided p of the paired t test, and wins (lower loss)."""
    differences = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(differences)
    mean, half = interval(differences.tolist())
    if n < 2:
        p = math.nan
    else:
        sd = float(np.std(differences, ddof=1))
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1)) if sd > 0 else float(mean == 0)
    return {"mean": mean, "low": mean - half, "high": mean + half, "p": p, "n": n,
            "a_wins": int((differences < 0).sum()), "b_wins": int((differences > 0).sum()),
            "differences": differences.tolist()}


def one_sided_p(differences: np.ndarray, bound: float, alternative: str) -> float:
    """p of the one-sample t test of H0: mean <= bound (alternative "greater") or mean >= bound ("less")."""
    n = len(differences)
    if n < 2:
        return math.nan
    shift = float(np.mean(differences)) - bound
    se = float(np.std(differences, ddof=1)) / math.sqrt(n)
    if se == 0:  # every seed gave the same difference: it is either past the bound or not
        return float(not (shift > 0 if alternative == "greater" else shift < 0))
    t = shift / se
    return float(stats.t.sf(t, n - 1) if alternative == "greater" else stats.t.cdf(t, n - 1))


def tost(differences: list[float], margin: float) -> float:
    """p of the two one-sided tests (Schuirmann 1987) of H0: |mean difference| >= margin. Below alpha: the mean
    lies within (-margin, +margin), i.e. the (1 - 2 alpha) t interval of the mean lies inside it."""
    d = np.asarray(differences, dtype=np.float64)
    return max(one_sided_p(d, -margin, "greater"), one_sided_p(d, margin, "less"))


def verdict(equivalent: bool, different: bool) -> str:
    """What a pair's tests allow one to say: equivalent (within the margin; said even where a difference smaller
    than the margin is also significant), different, or inconclusive (neither test rejects)."""
    return "equivalent" if equivalent else "different" if different else "inconclusive"


def holm(p_values: list[float], alpha: float = 1 - CONFIDENCE) -> list[bool]:
    """Which hypotheses Holm's step-down method rejects: family-wise error at most alpha over all of them."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if not p_values[i] <= alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected
