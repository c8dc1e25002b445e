"""Sets of time intervals as sorted, disjoint numpy arrays, with vectorized set algebra."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["IntervalSet"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class IntervalSet:
    """A union of half-open intervals `[start, end)` in nanoseconds.

    Invariant: `starts` ascending, every `end > start`, and each interval ends strictly before
    the next one starts (touching intervals are merged).
    """

    starts: I64
    ends: I64

    @staticmethod
    def empty() -> IntervalSet:
        """The empty set."""
        return IntervalSet(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    @staticmethod
    def span(start_ns: int, end_ns: int) -> IntervalSet:
        """One interval (empty if `end_ns <= start_ns`)."""
        if end_ns <= start_ns:
            return IntervalSet.empty()
        return IntervalSet(np.array([start_ns], dtype=np.int64), np.array([end_ns], dtype=np.int64))

    @staticmethod
    def from_spans(starts: npt.ArrayLike, ends: npt.ArrayLike) -> IntervalSet:
        """Union of intervals given in any order, overlapping or not; empty ones are ignored."""
        s = np.asarray(starts, dtype=np.int64)
        e = np.asarray(ends, dtype=np.int64)
        keep = e > s
        if not keep.all():
            s, e = s[keep], e[keep]
        if s.shape[0] == 0:
            return IntervalSet.empty()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        # A new interval begins where a start lies beyond everything before it.
        first = np.empty(s.shape[0], dtype=np.bool_)
        first[0] = True
        first[1:] = s[1:] > reach[:-1]
        begin = np.flatnonzero(first)
        last = np.empty_like(begin)
        last[:-1] = begin[1:] - 1
        last[-1] = s.shape[0] - 1
        return IntervalSet(s[begin], reach[last])

    def __len__(self) -> int:
        """Number of disjoint intervals."""
        return int(self.starts.shape[0])

    def total_ns(self) -> int:
        """Measure of the set."""
        return int((self.ends - self.starts).sum())

    def union(self, other: IntervalSet) -> IntervalSet:
        """Points in either set."""
        return IntervalSet.from_spans(
            np.concatenate([self.starts, other.starts]), np.concatenate([self.ends, other.ends])
        )

    def intersect(self, other: IntervalSet) -> IntervalSet:
        """Points in both sets."""
        return self._combine(other, keep_other=True)

    def subtract(self, other: IntervalSet) -> IntervalSet:
        """Points in this set and not in `other`."""
        return self._combine(other, keep_other=False)

    def clip(self, start_ns: int, end_ns: int) -> IntervalSet:
        """The part inside `[start_ns, end_ns)`."""
        return self.intersect(IntervalSet.span(start_ns, end_ns))

    def contains(self, t_ns: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each time lies in the set."""
        t = np.asarray(t_ns, dtype=np.int64)
        if len(self) == 0:
            return np.zeros(t.shape, dtype=np.bool_)
        idx = np.searchsorted(self.starts, t, side="right") - 1
        safe = np.maximum(idx, 0)
        return (idx >= 0) & (t < self.ends[safe])

    def measure_between(self, lo_ns: npt.ArrayLike, hi_ns: npt.ArrayLike) -> I64:
        """Measure of the set inside each `[lo, hi)`, for many spans at once."""
        return self._cumulative(hi_ns) - self._cumulative(lo_ns)

    def _cumulative(self, t_ns: npt.ArrayLike) -> I64:
        """Measure of the set before each time t."""
        t = np.asarray(t_ns, dtype=np.int64)
        if len(self) == 0:
            return np.zeros(t.shape, dtype=np.int64)
        lengths = self.ends - self.starts
        before = np.concatenate([[0], np.cumsum(lengths)])
        idx = np.searchsorted(self.starts, t, side="right") - 1
        safe = np.maximum(idx, 0)
        inside = np.clip(t - self.starts[safe], 0, lengths[safe])
        return np.where(idx >= 0, before[safe] + inside, 0)

    def _combine(self, other: IntervalSet, keep_other: bool) -> IntervalSet:
        if len(self) == 0:
            return self
        if len(other) == 0:
            return other if keep_other else self
        # Cut the line at every boundary of both sets; each elementary piece is wholly in or
        # out of each set, so membership of its start decides.
        cuts = np.sort(np.concatenate([self.starts, self.ends, other.starts, other.ends]))
        cuts = cuts[np.r_[True, cuts[1:] != cuts[:-1]]]
        lo, hi = cuts[:-1], cuts[1:]
        in_self = self.contains(lo)
        in_other = other.contains(lo)
        keep = in_self & (in_other if keep_other else ~in_other)
        return IntervalSet.from_spans(lo[keep], hi[keep])
