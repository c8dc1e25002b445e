"""`IntervalSet` against a brute-force model: sets of integer points on a small grid.

A half-open interval `[s, e)` with integer ends covers exactly the points `s, ..., e - 1`, so
every operation can be checked point by point, and a measure is a count of points.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.analysis.intervals import IntervalSet

LO, HI = -5, 40  # the grid of points (endpoints may go one past)
GRID = range(LO - 3, HI + 3)

Spans = list[tuple[int, int]]

spans_st = st.lists(st.tuples(st.integers(LO, HI), st.integers(LO, HI)), max_size=12)
PROPS = settings(max_examples=200, deadline=None)


def points(spans: Spans) -> set[int]:
    return {t for s, e in spans for t in range(s, e)}


def model_of(iset: IntervalSet) -> set[int]:
    return points(list(zip(iset.starts.tolist(), iset.ends.tolist(), strict=True)))


def canonical(pts: set[int]) -> Spans:
    """Maximal runs of consecutive points as half-open spans."""
    out: Spans = []
    for t in sorted(pts):
        if out and out[-1][1] == t:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out


def build(spans: Spans) -> IntervalSet:
    return IntervalSet.from_spans([s for s, _ in spans], [e for _, e in spans])


def check(iset: IntervalSet, expected: set[int]) -> None:
    """Same points, and the canonical form: sorted, disjoint, non-touching, non-empty."""
    assert iset.starts.dtype == np.int64 and iset.ends.dtype == np.int64
    assert iset.starts.shape == iset.ends.shape
    s, e = iset.starts.tolist(), iset.ends.tolist()
    assert all(b > a for a, b in zip(s, e, strict=True))
    assert all(e[i] < s[i + 1] for i in range(len(s) - 1))
    assert list(zip(s, e, strict=True)) == canonical(expected)
    assert len(iset) == len(canonical(expected))
    assert iset.total_ns() == len(expected)


@PROPS
@given(spans_st)
def test_from_spans(spans: Spans) -> None:
    check(build(spans), points(spans))


@PROPS
@given(spans_st, st.randoms(use_true_random=False))
def test_from_spans_order_does_not_matter(spans: Spans, rnd: object) -> None:
    shuffled = list(spans)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = build(spans), build(shuffled)
    assert a.starts.tolist() == b.starts.tolist()
    assert a.ends.tolist() == b.ends.tolist()


@PROPS
@given(spans_st, spans_st)
def test_union(a: Spans, b: Spans) -> None:
    check(build(a).union(build(b)), points(a) | points(b))


@PROPS
@given(spans_st, spans_st)
def test_intersect(a: Spans, b: Spans) -> None:
    check(build(a).intersect(build(b)), points(a) & points(b))


@PROPS
@given(spans_st, spans_st)
def test_subtract(a: Spans, b: Spans) -> None:
    check(build(a).subtract(build(b)), points(a) - points(b))


@contextlib.contextmanager
def _numpy_only() -> Iterator[None]:
    """The numpy versions of the set operations (`BADPUT_NO_C_PATHS`), for a block."""
    before = os.environ.get("BADPUT_NO_C_PATHS")
    os.environ["BADPUT_NO_C_PATHS"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["BADPUT_NO_C_PATHS"]
        else:
            os.environ["BADPUT_NO_C_PATHS"] = before


@PROPS
@given(spans_st, spans_st)
def test_intersect_and_subtract_without_the_c_helpers(a: Spans, b: Spans) -> None:
    # The tests above run the C merge of two sets (where built); these, the numpy pairing.
    with _numpy_only():
        check(build(a).intersect(build(b)), points(a) & points(b))
        check(build(a).subtract(build(b)), points(a) - points(b))


@PROPS
@given(spans_st, spans_st)
def test_from_spans_and_union_without_the_c_helpers(a: Spans, b: Spans) -> None:
    # The tests above merge the sorted spans in one C pass (span_union, where built); these,
    # numpy's running maximum, to the same sets.
    with _numpy_only():
        check(build(a), points(a))
        check(build(a).union(build(b)), points(a) | points(b))


def test_span_union_refuses_what_from_spans_never_gives_it() -> None:
    # The C pass takes non-empty spans in start order; anything else is refused, not merged.
    from badput.analysis._nesting import c_paths

    fast = c_paths()
    if fast is None:
        pytest.skip("the C helpers are not built")
    s, e = np.array([5, 1], np.int64), np.array([9, 4], np.int64)
    out_s, out_e = np.empty(2, np.int64), np.empty(2, np.int64)
    assert fast.span_union(s, e, np.array([1, 0], np.int64), out_s, out_e) == 2
    assert out_s.tolist() == [1, 5] and out_e.tolist() == [4, 9]
    with pytest.raises(ValueError, match="out of order"):
        fast.span_union(s, e, np.array([0, 1], np.int64), out_s, out_e)
    with pytest.raises(ValueError, match="empty span"):
        fast.span_union(s, np.array([9, 1], np.int64), np.array([1, 0], np.int64), out_s, out_e)
    with pytest.raises(ValueError, match="out of range"):
        fast.span_union(s, e, np.array([1, 2], np.int64), out_s, out_e)


@PROPS
@given(spans_st, st.integers(LO - 2, HI + 2), st.integers(LO - 2, HI + 2))
def test_clip(a: Spans, lo: int, hi: int) -> None:
    check(build(a).clip(lo, hi), {t for t in points(a) if lo <= t < hi})


@PROPS
@given(spans_st)
def test_contains(a: Spans) -> None:
    iset = build(a)
    pts = points(a)
    grid = np.array(list(GRID), dtype=np.int64)
    got = iset.contains(grid)
    assert got.dtype == np.bool_
    assert got.tolist() == [t in pts for t in GRID]
    # any shape, and a scalar
    square = grid[:49].reshape(7, 7)
    assert iset.contains(square).tolist() == got[:49].reshape(7, 7).tolist()
    assert bool(iset.contains(LO)) == (LO in pts)


@PROPS
@given(spans_st, st.lists(st.tuples(st.integers(LO - 2, HI + 2), st.integers(0, 50)), max_size=40))
def test_measure_between_many(a: Spans, queries: list[tuple[int, int]]) -> None:
    iset = build(a)
    pts = points(a)
    lo = np.array([q[0] for q in queries], dtype=np.int64)
    hi = np.array([q[0] + q[1] for q in queries], dtype=np.int64)
    got = iset.measure_between(lo, hi)
    assert got.dtype == np.int64
    assert got.shape == (len(queries),)
    expected = [sum(1 for t in pts if q0 <= t < q0 + w) for q0, w in queries]
    assert got.tolist() == expected


@PROPS
@given(spans_st, spans_st)
def test_algebra_laws(a: Spans, b: Spans) -> None:
    x, y = build(a), build(b)
    # A ∪ A = A, A ∩ A = A, A − A = ∅
    check(x.union(x), points(a))
    check(x.intersect(x), points(a))
    check(x.subtract(x), set())
    # commutativity, and A = (A − B) ∪ (A ∩ B) as a disjoint split
    check(x.union(y), model_of(y.union(x)))
    check(x.intersect(y), model_of(y.intersect(x)))
    diff, common = x.subtract(y), x.intersect(y)
    assert diff.total_ns() + common.total_ns() == x.total_ns()
    check(diff.union(common), points(a))
    assert diff.intersect(common).total_ns() == 0
    # measure of the union: inclusion-exclusion
    assert x.union(y).total_ns() == x.total_ns() + y.total_ns() - common.total_ns()


def test_empty_set_operations() -> None:
    e = IntervalSet.empty()
    a = build([(0, 5), (10, 20)])
    check(e, set())
    check(e.union(a), points([(0, 5), (10, 20)]))
    check(a.union(e), points([(0, 5), (10, 20)]))
    check(e.intersect(a), set())
    check(a.intersect(e), set())
    check(a.subtract(e), points([(0, 5), (10, 20)]))
    check(e.subtract(a), set())
    assert e.contains([0, 1]).tolist() == [False, False]
    assert e.measure_between([0, 5], [10, 20]).tolist() == [0, 0]


def test_span_and_touching_merge() -> None:
    check(IntervalSet.span(3, 3), set())
    check(IntervalSet.span(5, 3), set())
    check(IntervalSet.span(3, 7), set(range(3, 7)))
    touching = build([(0, 5), (5, 10), (12, 14), (14, 15)])
    assert touching.starts.tolist() == [0, 12]
    assert touching.ends.tolist() == [10, 15]
    # empty and inverted spans are ignored
    check(build([(4, 4), (9, 2), (1, 3)]), {1, 2})


def test_large_epoch_values_stay_exact() -> None:
    base = 1_712_195_495_519_689_047  # ns since the epoch, beyond float64's exact range
    a = IntervalSet.from_spans([base, base + 10], [base + 5, base + 20])
    b = IntervalSet.span(base + 3, base + 12)
    assert a.intersect(b).starts.tolist() == [base + 3, base + 10]
    assert a.intersect(b).ends.tolist() == [base + 5, base + 12]
    assert a.subtract(b).total_ns() == 3 + 8
    assert a.measure_between([base, base + 4], [base + 20, base + 11]).tolist() == [15, 2]


@PROPS
@given(
    st.lists(st.tuples(st.integers(LO, HI), st.integers(LO, HI)), max_size=12),
    st.integers(LO - 2, HI + 2),
    st.integers(LO - 2, HI + 2),
    st.integers(1, 4),
)
def test_clip_of_a_set_built_directly(a: Spans, lo: int, hi: int, block: int) -> None:
    """A set made from raw arrays (unsorted, overlapping, empty intervals) clips as the
    intersection does; the invariant's check gives the same verdict in blocks of any size."""
    import badput.analysis.intervals as intervals

    raw = IntervalSet(
        np.array([s for s, _ in a], dtype=np.int64), np.array([e for _, e in a], dtype=np.int64)
    )
    s, e = raw.starts, raw.ends
    whole = bool((e > s).all() and (s[1:] > e[:-1]).all())
    saved = intervals._CHECK_BLOCK
    intervals._CHECK_BLOCK = block
    try:
        assert raw._is_canonical() == whole
        clipped = raw.clip(lo, hi)
    finally:
        intervals._CHECK_BLOCK = saved
    want = raw.intersect(IntervalSet.span(lo, hi))
    assert clipped.starts.tolist() == want.starts.tolist()
    assert clipped.ends.tolist() == want.ends.tolist()
