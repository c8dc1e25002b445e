"""Sets of time intervals as sorted, disjoint numpy arrays, with vectorized set algebra."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import c_paths
from badput.analysis._nesting import packed as _packed

__all__ = ["IntervalSet"]

I64 = npt.NDArray[np.int64]

_CHECK_BLOCK = 1 << 20  # intervals per block of the invariant's check


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
        if (fast := c_paths()) is not None:  # the merge in one pass over the order
            out_s, out_e = np.empty(s.shape[0], np.int64), np.empty(s.shape[0], np.int64)
            k = fast.span_union(*_packed(s, e, order), out_s, out_e)
            return IntervalSet(out_s[:k].copy(), out_e[:k].copy())
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
        """The part inside `[start_ns, end_ns)`.

        For a canonical set, the intervals that overlap the span are found by two binary
        searches and only they are clipped (a step of a long trace, not the whole set).
        """
        if len(self) == 0:
            return self
        if end_ns <= start_ns:
            return IntervalSet.empty()
        if not self._is_canonical():
            return self.intersect(IntervalSet.span(start_ns, end_ns))
        first = int(np.searchsorted(self.ends, start_ns, side="right"))  # ends after the start
        stop = int(np.searchsorted(self.starts, end_ns, side="left"))  # starts before the end
        if stop <= first:
            return IntervalSet.empty()
        return IntervalSet(
            np.maximum(self.starts[first:stop], start_ns),
            np.minimum(self.ends[first:stop], end_ns),
        )

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

    def _is_canonical(self) -> bool:
        """Whether the class invariant holds (a set built directly need not keep it).

        Checked in blocks: millions of intervals make no set-sized temporaries.
        """
        s, e = self.starts, self.ends
        n = s.shape[0]
        for a in range(0, n, _CHECK_BLOCK):
            b = min(a + _CHECK_BLOCK, n)
            if not (e[a:b] > s[a:b]).all():
                return False
            last = min(b, n - 1)  # interval i < n - 1 ends before i + 1 starts
            if not (s[a + 1 : last + 1] > e[a:last]).all():
                return False
        return True

    def _complement(self) -> IntervalSet:
        """The gaps of a canonical set, with the int64 range's ends around it."""
        lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        starts = np.concatenate([[lo], self.ends])
        ends = np.concatenate([self.starts, [hi]])
        keep = ends > starts
        return IntervalSet(starts[keep], ends[keep])

    def _overlaps(self, other: IntervalSet) -> IntervalSet:
        """The intersection of two canonical sets, pair by pair of overlapping intervals.

        Interval i of this set overlaps the `other` intervals from the first that ends after
        it starts to the last that starts before it ends (both sets are sorted by starts and by
        ends). Pieces of distinct pairs neither overlap nor touch, as the inputs' intervals do
        not: no merge is needed, and the pieces come in order.
        """
        if (fast := c_paths()) is not None:  # one merge of the two in C, the same pieces
            room = len(self) + len(other)
            starts, ends = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
            k = fast.overlaps(*_packed(self.starts, self.ends, other.starts, other.ends),
                              starts, ends)  # fmt: skip
            if k == 0:
                return IntervalSet.empty()
            return IntervalSet(starts[:k].copy(), ends[:k].copy())
        first = np.searchsorted(other.ends, self.starts, side="right")
        count = np.searchsorted(other.starts, self.ends, side="left") - first
        np.maximum(count, 0, out=count)
        total = int(count.sum())
        if total == 0:
            return IntervalSet.empty()
        mine = np.repeat(np.arange(len(self), dtype=np.int64), count)
        # Index of each pair's `other` interval: its first, plus its place in the pair's run.
        theirs = np.arange(total, dtype=np.int64)
        theirs -= np.repeat(np.cumsum(count) - count - first, count)
        return IntervalSet(
            np.maximum(self.starts[mine], other.starts[theirs]),
            np.minimum(self.ends[mine], other.ends[theirs]),
        )

    def _combine(self, other: IntervalSet, keep_other: bool) -> IntervalSet:
        if len(self) == 0:
            return self
        if len(other) == 0:
            return other if keep_other else self
        if self._is_canonical() and other._is_canonical():
            # What the sweep below gives for canonical sets, without a sort or running sums.
            return self._overlaps(other if keep_other else other._complement())
        # Sweep the boundaries of both sets in time order, counting how deep inside each set
        # the line is. Each set's boundaries, interleaved, are already sorted, so the stable
        # sort only merges two sorted runs (linear time).
        n, m = 2 * len(self), 2 * len(other)
        times = np.empty(n + m, dtype=np.int64)
        times[0:n:2], times[1:n:2] = self.starts, self.ends
        times[n::2], times[n + 1 :: 2] = other.starts, other.ends
        step = np.empty(n + m, dtype=np.int8)
        step[0::2], step[1::2] = 1, -1
        order = np.argsort(times, kind="stable")
        t = times[order]
        from_self = order < n
        in_self = np.cumsum(np.where(from_self, step[order], 0), dtype=np.int64) > 0
        in_other = np.cumsum(np.where(from_self, 0, step[order]), dtype=np.int64) > 0
        # Piece i is [t[i], t[i+1]); the state after all boundaries at t[i] holds over it.
        keep = (in_self & (in_other if keep_other else ~in_other))[:-1] & (t[1:] > t[:-1])
        idx = np.flatnonzero(keep)
        if idx.shape[0] == 0:
            return IntervalSet.empty()
        lo, hi = t[idx], t[idx + 1]
        first = np.empty(idx.shape[0], dtype=np.bool_)
        first[0] = True
        first[1:] = lo[1:] != hi[:-1]
        last = np.empty_like(first)
        last[:-1] = first[1:]
        last[-1] = True
        return IntervalSet(lo[first], hi[last])
