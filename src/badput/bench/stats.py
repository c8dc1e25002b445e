"""Statistics of the A/B gate: paired log-ratios over interleaved rounds.

The design (docs/regression-gate.md, section 5.1) in brief: the unit of replication is
the round, not the iteration; rounds of A and B alternate in one job, so each pair shares the
machine's state; the statistic is d_i = ln(B_i) - ln(A_i). The effect is exp(median(d)) - 1
with a seeded bootstrap confidence interval; the test is the one-sided Wilcoxon signed-rank
test (exact for n <= 25, normal approximation above); p-values are Holm-adjusted across the
benchmarks of a run; a minimum effect keeps statistically clear but tiny changes from failing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

__all__ = [
    "Comparison",
    "Decision",
    "bootstrap_ci",
    "compare",
    "decide",
    "holm",
    "log_ratios",
    "wilcoxon_greater",
]

F64 = npt.NDArray[np.float64]

#: Largest n for the exact Wilcoxon distribution (2^25 sign patterns, counted by DP).
EXACT_MAX_N = 25


class Decision(StrEnum):
    """Verdict on one benchmark metric."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no_change"
    INCONCLUSIVE = "inconclusive"


def log_ratios(base: npt.ArrayLike, head: npt.ArrayLike, higher_is_better: bool = False) -> F64:
    """Per-round d_i = ln(head_i / base_i), signed so that d > 0 means worse.

    Raises:
        ValueError: lengths differ or a value is not positive.
    """
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(head, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("base and head need the same number of rounds")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("metric values must be positive for log-ratios")
    d = np.log(b) - np.log(a)
    return -d if higher_is_better else d


def _ranks(x: F64) -> F64:
    """Average ranks (1-based) of x, ties sharing the mean of their positions."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(x.shape[0], dtype=np.float64)
    sorted_x = x[order]
    i = 0
    n = x.shape[0]
    while i < n:
        j = i
        while j + 1 < n and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_greater(d: npt.ArrayLike) -> float:
    """One-sided Wilcoxon signed-rank p-value for H1: the median of d is above 0.

    Zero differences are dropped (Wilcoxon's convention); ties share average ranks. For
    n <= 25 the p-value is exact: the permutation distribution of W+ over all 2^n sign
    patterns of the observed ranks, counted by dynamic programming on doubled (integer)
    ranks. Above that, the normal approximation with tie and continuity corrections.
    """
    x = np.asarray(d, dtype=np.float64)
    x = x[x != 0]
    n = x.shape[0]
    if n == 0:
        return 1.0
    ranks = _ranks(np.abs(x))
    w_plus = float(ranks[x > 0].sum())
    if n <= EXACT_MAX_N:
        doubled = np.rint(2 * ranks).astype(np.int64)
        total = int(doubled.sum())
        counts = np.zeros(total + 1, dtype=np.float64)
        counts[0] = 1.0
        for r in doubled.tolist():
            shifted = np.zeros_like(counts)
            shifted[r:] = counts[: total + 1 - r]
            counts = counts + shifted
        observed = round(2 * w_plus)
        return float(counts[observed:].sum() / counts.sum())
    mean = n * (n + 1) / 4
    _, tie_counts = np.unique(ranks, return_counts=True)
    var = n * (n + 1) * (2 * n + 1) / 24 - float((tie_counts**3 - tie_counts).sum()) / 48
    if var <= 0:
        return 1.0
    z = (w_plus - mean - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def bootstrap_ci(d: F64, level: float, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of exp(median(d)) - 1, seeded for reproducibility."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.shape[0], size=(resamples, d.shape[0]))
    medians = np.median(d[idx], axis=1)
    lo, hi = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return math.expm1(float(lo)), math.expm1(float(hi))


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """The statistics of one benchmark metric, before the verdict."""

    rounds: int
    effect: float  # exp(median(d)) - 1; > 0 is worse
    ci: tuple[float, float]
    p_regression: float
    p_improvement: float


def compare(
    base: npt.ArrayLike,
    head: npt.ArrayLike,
    *,
    higher_is_better: bool = False,
    alpha: float = 0.01,
    seed: int = 0,
) -> Comparison:
    """Effect, confidence interval and one-sided p-values of head against base.

    The CI has level 1 - 2*alpha, so that its bounds are one-sided at alpha, matching the
    tests.
    """
    d = log_ratios(base, head, higher_is_better)
    if d.shape[0] < 2:
        raise ValueError("need at least 2 rounds")
    effect = math.expm1(float(np.median(d)))
    ci = bootstrap_ci(d, level=1 - 2 * alpha, seed=seed)
    return Comparison(d.shape[0], effect, ci, wilcoxon_greater(d), wilcoxon_greater(-d))


def decide(
    c: Comparison, p_regression: float, p_improvement: float, alpha: float, min_effect: float
) -> Decision:
    """The verdict from (adjusted) p-values, the CI and the minimum effect.

    regression: p < alpha, CI above 0 and effect >= min_effect; improvement: the mirror;
    no change: the whole CI inside (-min_effect, +min_effect), so any change is smaller than
    what matters; else inconclusive (a CI wider than 2 x min_effect, or one that straddles
    +-min_effect: more rounds may tell).
    """
    lo, hi = c.ci
    if p_regression < alpha and lo > 0 and c.effect >= min_effect:
        return Decision.REGRESSION
    if p_improvement < alpha and hi < 0 and c.effect <= -min_effect:
        return Decision.IMPROVEMENT
    if -min_effect < lo and hi < min_effect:
        return Decision.NO_CHANGE
    return Decision.INCONCLUSIVE
