"""Change points in a benchmark's history: E-Divisive means with a seeded permutation test.

The post-merge history monitor (docs/regression-gate.md, section 5.1, tier C) looks
for lasting shifts in a series of run-level values ordered by commit. The method is E-Divisive
means (Matteson & James 2014, "A Nonparametric Approach for Multiple Change Point Analysis of
Multivariate Data"), the detector MongoDB runs on its performance series (Daly et al. 2020,
"The Use of Change Point Detection to Identify Software Performance Regressions in a
Continuous Integration System"), written here on numpy alone:

1. **Log-values.** Performance changes are ratios, so the series is analysed as ln(value): a
   5 % step is the same distance at 1 ms and at 1 s. Values must be positive.
2. **Outlier pre-pass** (robust, optional). A run of one or two adjacent points is flagged
   when every point of it sits, in the same direction, more than
   ``max(outlier_k * sigma, ln(1 + min_change))`` away from both the median of the up-to-5
   points before the run and the median of the up-to-5 points after it, while the points
   just before and just after the run are ordinary (within that distance of the median of
   both windows). ``sigma`` is the noise scale from the MAD of first differences / sqrt(2) (a
   step moves one difference, so it barely moves sigma). A point at a step matches one side
   and is kept; a shift of three or more points is left to the detector; the first and last
   points are never flagged (one side only: an outlier cannot be told from the start of a
   change). Flagged points are left out of the detection, the medians and the confirming
   counts; `find_outliers` returns them so that a report can show them.
3. **Divergence.** For a segment split into X (its first m points) and Y (the next n points)
   the energy divergence with alpha = 1 is
   ``E = 2/(mn) sum|x - y| - 1/C(m,2) sum_{i<k}|x_i - x_k| - 1/C(n,2) sum_{j<k}|y_j - y_k|``
   and the statistic is ``Q = mn / (m + n) * E``. As in the paper, the split point tau and the
   end kappa of Y are both searched (kappa need not be the segment's end, so a short level
   shift in the middle of a long segment is seen); every pairwise sum comes from a 2-D prefix
   sum of the distance matrix, so one segment of length L costs O(L^2) time and memory.
   Fixing kappa at the segment's end (MongoDB's variant) found 5 % steps under 3 % noise
   somewhat more often in our synthetic runs (72 % against 59 %) but missed nearly every
   temporary regression (8 % for 10 points, then back: 0-4 % against 100 %).
4. **Bisection with a permutation test.** Each round takes the split with the largest Q over
   all current segments, then permutes the points within every segment ``permutations`` times
   and recomputes that largest Q. The p-value is ``(1 + #{Q_perm >= Q}) / (1 + permutations)``;
   the split is kept when ``p <= p_threshold`` and the search goes on in the two halves, else
   it stops. Permutations come from a numpy Generator seeded with ``(seed, round)``, so the
   result is the same for the same input and seed. Permuting stops early once the p-value can
   no longer reach the threshold (the outcome is the same; the reported p-value is then a
   lower bound, and such a split is not reported anyway).
5. **Magnitude floor.** Each change is sized by the medians of the raw values of the segments
   on its two sides: ``change = after / before - 1``. While some change is smaller than
   ``min_change`` in absolute value, the smallest one is removed and its two segments merged
   (the neighbours' medians are then recomputed). Statistically clear but tiny changes go.
6. **Persistence rule.** A change is ``confirmed`` when at least ``min_confirm`` points follow
   its first point within the new segment (up to the next change or the end of the series).
   An unconfirmed change at the tail is a candidate to watch, not an alert.

Cost: each evaluation of a segment of L points is O(L^2) in time and memory; a significant
round costs ``permutations`` evaluations (a non-significant one usually a handful, as the
permutations stop early). On one core of a shared 2-core VM: about 10 ms for a flat series
of 60 points, 60 ms for a flat one of 500, and 1.5 s for 500 points with one change.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ChangePoint", "detect", "find_outliers"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Points on each side whose median a candidate outlier is compared with.
OUTLIER_WINDOW = 5
#: Longest run of adjacent points that the pre-pass treats as outliers (a pair of slow runs
#: is common on shared machines; three in a row are left to the detector).
MAX_OUTLIER_RUN = 2
#: Normal-consistency factor of the median absolute deviation.
MAD_TO_SIGMA = 1.4826
#: Upper bound on the elements of one batch of permuted distance matrices (memory ~ 8x this).
_BATCH_ELEMENTS = 1_000_000
#: Relative tolerance when counting permuted statistics that reach the observed one (ties and
#: rounding count as reaching it: the conservative side).
_TIE_RTOL = 1e-9


@dataclass(frozen=True)
class ChangePoint:
    """One change in a series.

    Attributes:
        index: Index (in the input) of the first point of the new segment.
        before: Median of the segment before the change (raw values, outliers excluded).
        after: Median of the segment after the change (raw values, outliers excluded).
        change: ``after / before - 1``; positive means the values went up.
        p_value: Permutation p-value of the split when it was found.
        confirmed: Persistence rule: at least ``min_confirm`` points follow ``index`` in the
            new segment.
    """

    index: int
    before: float
    after: float
    change: float
    p_value: float
    confirmed: bool


def _log_values(values: Sequence[float]) -> F64:
    """ln(values) as float64, after checking the input.

    Raises:
        ValueError: the series is empty, not one-dimensional, or holds a value that is not a
            finite positive number.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError("values must be a flat sequence of numbers")
    if x.shape[0] == 0:
        raise ValueError("values is empty: change-point detection needs a series")
    bad = ~np.isfinite(x) | (x <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"values must be finite and positive (the series is analysed as log-values); "
            f"values[{i}] = {float(x[i])!r}"
        )
    return np.log(x)


def _noise_sigma(x: F64) -> float:
    """Robust noise scale of a series: MAD of first differences / sqrt(2)."""
    if x.shape[0] < 3:
        return 0.0
    d = np.diff(x)
    return MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)


def _outlier_mask(x: F64, k: float, min_change: float) -> npt.NDArray[np.bool_]:
    """True where a point of the log-series ``x`` is a short-lived outlier (see module doc)."""
    n = x.shape[0]
    mask = np.zeros(n, dtype=np.bool_)
    if n < 3:
        return mask
    threshold = max(k * _noise_sigma(x), math.log1p(min_change))
    w = OUTLIER_WINDOW
    for run in range(1, MAX_OUTLIER_RUN + 1):
        for i in range(1, n - run):  # a run x[i : i + run] with points on both sides
            left = x[max(0, i - w) : i]
            right = x[i + run : i + run + w]
            pts = x[i : i + run]
            dev = np.concatenate([pts - np.median(left), pts - np.median(right)])
            if not ((dev > threshold).all() or (dev < -threshold).all()):
                continue
            # The points around the run must be ordinary: else the run is part of a longer
            # shift (a short level change), which is the detector's business.
            ref = float(np.median(np.concatenate([left, right])))
            if abs(x[i - 1] - ref) <= threshold and abs(x[i + run] - ref) <= threshold:
                mask[i : i + run] = True
    return mask


def find_outliers(
    values: Sequence[float], *, outlier_k: float = 4.0, min_change: float = 0.03
) -> list[int]:
    """Indices of the outliers (runs of one or two points) that `detect` leaves out.

    Args:
        values: The series (positive numbers, in commit order).
        outlier_k: Threshold in robust noise sigmas (see the module docstring).
        min_change: A point is only an outlier if it also departs by more than this ratio.

    Returns:
        Indices into ``values``, ascending.

    Raises:
        ValueError: empty series, non-positive or non-finite values, or ``outlier_k <= 0``.
    """
    if not outlier_k > 0:
        raise ValueError(f"outlier_k must be > 0, got {outlier_k!r}")
    x = _log_values(values)
    return [int(i) for i in np.flatnonzero(_outlier_mask(x, outlier_k, min_change))]


@functools.lru_cache(maxsize=64)
def _plan(length: int, min_segment: int) -> tuple[I64, I64, I64, F64, F64, F64]:
    """The (tau, kappa) pairs of a segment of ``length`` points and their Q coefficients.

    With P the 2-D prefix sum of the distance matrix (P[i, j] = sum of d[:i, :j]), m = tau,
    n = kappa - tau, the three pairwise sums are cross = P[t, k] - P[t, t], within X (both
    orders) = P[t, t] and within Y (both orders) = P[k, k] - 2 P[t, k] + P[t, t], so
    Q = mn/(m+n) * (2 cross/(mn) - P[t,t]/(m(m-1)) - within_y/(n(n-1)))
      = a P[t, k] - b P[t, t] - c P[k, k]
    with a = 2/(m+n) + 2 c, b = 2/(m+n) + n/((m+n)(m-1)) + c and c = m/((m+n)(n-1)).

    Returns:
        tau, kappa, the flat index t * (length + 1) + k, and the coefficients a, b, c.
    """
    t, k = np.meshgrid(
        np.arange(min_segment, length - min_segment + 1),
        np.arange(2 * min_segment, length + 1),
        indexing="ij",
    )
    ok = k - t >= min_segment
    tau = t[ok].astype(np.int64)
    kappa = k[ok].astype(np.int64)
    m = tau.astype(np.float64)
    n = (kappa - tau).astype(np.float64)
    c = m / ((m + n) * (n - 1))
    a = 2 / (m + n) + 2 * c
    b = 2 / (m + n) + n / ((m + n) * (m - 1)) + c
    return tau, kappa, tau * (length + 1) + kappa, a, b, c


def _best_splits(z: F64, min_segment: int) -> tuple[F64, I64]:
    """Largest Q over all (tau, kappa) for each row of ``z`` (shape (B, L)).

    Returns:
        The largest Q per row and the tau (size of X) where it is reached. Rows must satisfy
        ``L >= 2 * min_segment``.
    """
    rows, length = z.shape
    tau, kappa, flat, a, b, c = _plan(length, min_segment)
    p = np.zeros((rows, length + 1, length + 1))
    np.cumsum(np.abs(z[:, :, None] - z[:, None, :]), axis=1, out=p[:, 1:, 1:])
    np.cumsum(p[:, 1:, 1:], axis=2, out=p[:, 1:, 1:])
    diag = np.diagonal(p, axis1=1, axis2=2)
    q = a * p.reshape(rows, -1)[:, flat]
    q -= b * diag[:, tau]
    q -= c * diag[:, kappa]
    best = np.argmax(q, axis=1)
    return q[np.arange(rows), best], tau[best]


def _permutation_p(
    x: F64,
    segments: list[tuple[int, int]],
    q_obs: float,
    permutations: int,
    p_threshold: float,
    min_segment: int,
    rng: np.random.Generator,
) -> float:
    """Permutation p-value of the largest Q over ``segments`` (points permuted within each)."""
    testable = [(s, e) for s, e in segments if e - s >= 2 * min_segment]
    longest = max(e - s for s, e in testable)
    batch = max(1, min(64, _BATCH_ELEMENTS // (longest * longest)))
    # Stop once p = (1 + count) / (1 + permutations) can no longer be <= p_threshold.
    limit = math.floor(p_threshold * (permutations + 1) + 1e-9) - 1
    reach = q_obs - _TIE_RTOL * abs(q_obs)
    count = 0
    done = 0
    while done < permutations:
        size = min(batch, permutations - done)
        q_max = np.full(size, -np.inf)
        for s, e in testable:
            rows = np.broadcast_to(x[s:e], (size, e - s))
            q, _ = _best_splits(rng.permuted(rows, axis=1), min_segment)
            q_max = np.maximum(q_max, q)
        hits = np.flatnonzero(q_max >= reach)
        if count + hits.shape[0] > limit:
            # Past the limit the split cannot be significant: report the lower bound reached.
            return (2 + limit) / (1 + permutations)
        count += int(hits.shape[0])
        done += size
    return (1 + count) / (1 + permutations)


def _divide(
    x: F64, *, p_threshold: float, permutations: int, min_segment: int, seed: int
) -> list[tuple[int, float]]:
    """E-Divisive bisection on the log-series ``x``: (first index of new segment, p) pairs."""
    segments: list[tuple[int, int]] = [(0, x.shape[0])]
    best: dict[tuple[int, int], tuple[float, int]] = {}
    found: list[tuple[int, float]] = []
    for round_ in range(x.shape[0]):
        for seg in segments:
            s, e = seg
            if seg not in best and e - s >= 2 * min_segment:
                q, tau = _best_splits(x[None, s:e], min_segment)
                best[seg] = (float(q[0]), int(tau[0]))
        candidates = [(best[seg][0], seg) for seg in segments if seg in best]
        if not candidates:
            break
        q_obs, seg = max(candidates, key=lambda c: c[0])
        rng = np.random.default_rng((seed, round_))
        p = _permutation_p(x, segments, q_obs, permutations, p_threshold, min_segment, rng)
        if p > p_threshold:
            break
        s, e = seg
        cut = s + best[seg][1]
        found.append((cut, p))
        segments.remove(seg)
        segments += [(s, cut), (cut, e)]
    return sorted(found)


def detect(
    values: Sequence[float],
    *,
    p_threshold: float = 0.01,
    permutations: int = 199,
    min_change: float = 0.03,
    min_confirm: int = 2,
    min_segment: int = 2,
    seed: int = 0,
    outlier_k: float | None = 4.0,
) -> list[ChangePoint]:
    """Change points of a positive series in commit order (E-Divisive means, see module doc).

    Args:
        values: Run-level values (e.g. median of rounds), oldest first; all positive.
        p_threshold: A split is kept when its permutation p-value is at most this.
        permutations: Permutations per test; the smallest p-value is 1 / (1 + permutations).
        min_change: Magnitude floor: changes with ``|after / before - 1|`` below it are merged
            away.
        min_confirm: Persistence rule: points needed after a change's first point, within
            its segment, for it to be ``confirmed``.
        min_segment: Fewest points on each side of a split (at least 2: the divergence needs
            pairs within each side).
        seed: Seed of the permutations (>= 0); the same input and seed give the same result.
        outlier_k: Outlier pre-pass threshold in robust noise sigmas; None turns the pre-pass
            off.

    Returns:
        The change points, by index. Indices refer to ``values``; flagged outliers (see
        `find_outliers`) count in no segment.

    Raises:
        ValueError: empty series, a value that is not finite and positive, or a parameter out
            of range.
    """
    if not 0 < p_threshold <= 1:
        raise ValueError(f"p_threshold must be in (0, 1], got {p_threshold!r}")
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations!r}")
    if not min_change >= 0:
        raise ValueError(f"min_change must be >= 0, got {min_change!r}")
    if min_confirm < 0:
        raise ValueError(f"min_confirm must be >= 0, got {min_confirm!r}")
    if min_segment < 2:
        raise ValueError(f"min_segment must be >= 2, got {min_segment!r}")
    if outlier_k is not None and not outlier_k > 0:
        raise ValueError(f"outlier_k must be > 0 or None, got {outlier_k!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed!r}")
    x_all = _log_values(values)
    raw_all = np.asarray(values, dtype=np.float64)
    if outlier_k is None:
        keep = np.arange(x_all.shape[0])
    else:
        keep = np.flatnonzero(~_outlier_mask(x_all, outlier_k, min_change))
    x = x_all[keep]
    raw = raw_all[keep]
    n = x.shape[0]
    if n < 2 * min_segment:
        return []
    splits = _divide(
        x, p_threshold=p_threshold, permutations=permutations, min_segment=min_segment, seed=seed
    )
    cuts = [c for c, _ in splits]
    p_of = dict(splits)

    def sizes(cuts: list[int]) -> list[tuple[float, float, float]]:
        bounds = [0, *cuts, n]
        med = [float(np.median(raw[a:b])) for a, b in itertools.pairwise(bounds)]
        return [(med[i], med[i + 1], med[i + 1] / med[i] - 1) for i in range(len(cuts))]

    while cuts:
        sized = sizes(cuts)
        i = min(range(len(cuts)), key=lambda j: abs(sized[j][2]))
        if abs(sized[i][2]) >= min_change:
            break
        del cuts[i]

    bounds = [*cuts, n]
    return [
        ChangePoint(
            index=int(keep[c]),
            before=before,
            after=after,
            change=change,
            p_value=p_of[c],
            confirmed=bounds[j + 1] - c - 1 >= min_confirm,
        )
        for j, (c, (before, after, change)) in enumerate(zip(cuts, sizes(cuts), strict=True))
    ]
