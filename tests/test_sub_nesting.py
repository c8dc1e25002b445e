"""`sub_nesting`: a subset's nesting read off a nested forest equals `nest` of the subset; and
`nest`'s C sweep gives its numpy version's order and parents.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from badput.analysis import _nesting
from badput.analysis._nesting import dense_pairs, depths, nest, pair_keys, sub_nesting
from badput.trace.model import NO_ID

I64 = npt.NDArray[np.int64]


def _ranked(kind: I64) -> object:
    def rank(at: I64) -> npt.NDArray[np.int8]:
        return kind[at].astype(np.int8)

    return rank


def _random_intervals(rng: np.random.Generator, n: int, proper: bool) -> tuple[I64, I64, I64, I64]:
    """Threads, starts, ends, kinds; `proper`: a laminar family (children inside parents)."""
    g = rng.integers(0, 3, n).astype(np.int64)
    if not proper:
        start = rng.integers(0, 40, n).astype(np.int64)
        end = start + rng.integers(0, 12, n)
        return g, start, end, rng.integers(0, 3, n).astype(np.int64)
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):  # each interval inside a random earlier one on its thread, or after all
        mates = np.flatnonzero(g[:i] == g[i])
        if mates.size and rng.random() < 0.7:
            p = int(rng.choice(mates))
            lo = int(rng.integers(start[p], end[p] + 1))
            hi = int(rng.integers(lo, end[p] + 1))
            start[i], end[i] = lo, hi
        else:
            lo = int(end[mates].max()) if mates.size else 0
            start[i] = lo + int(rng.integers(0, 3))
            end[i] = start[i] + int(rng.integers(0, 30))
    return g, start, end, rng.integers(0, 3, n).astype(np.int64)


@pytest.fixture(params=["c", "numpy"])
def both_ways(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the one-pass C version and with the numpy version."""
    if request.param == "numpy":
        monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
    else:
        monkeypatch.delenv("BADPUT_NO_C_PATHS", raising=False)
    return str(request.param)


def test_sub_nesting_matches_nest_of_the_subset(both_ways: str) -> None:
    rng = np.random.default_rng(21)
    derived = refused = 0
    for trial in range(3000):
        n = int(rng.integers(1, 40))
        g, start, end, kind = _random_intervals(rng, n, proper=trial % 3 != 0)
        order, parent, g_o, s_o, e_o = nest(g, start, end, _ranked(kind))  # type: ignore[arg-type]
        keep = (rng.random(n) < 0.6) & (e_o > s_o)
        got = sub_nesting(parent, keep, g_o[keep], s_o[keep], e_o[keep])
        rows = np.sort(order[keep])  # input positions of the kept intervals
        # `nest` of the subset, given in row order as a reader would.
        want_order, want_parent, *_ = nest(g[rows], start[rows], end[rows], _ranked(kind[rows]))  # type: ignore[arg-type]
        if got is None:
            refused += 1
            continue
        derived += 1
        kept, sub_parent, depth = got
        assert np.array_equal(order[kept], rows[want_order]), trial
        assert np.array_equal(sub_parent, want_parent), trial
        assert np.array_equal(depth, depths(want_parent)), trial
    # Both outcomes happen: laminar subsets are derived, overlapping ones left to `nest`.
    assert derived > 1500 and refused > 100, (derived, refused)


def test_sub_nesting_refuses_an_overlap_nest_would_repair(both_ways: str) -> None:
    # A [0, 10) and B [5, 15) overlap; C [6, 8) lies in both. Kept: A, B.
    g = np.zeros(3, dtype=np.int64)
    start = np.array([0, 5, 6], dtype=np.int64)
    end = np.array([10, 15, 8], dtype=np.int64)
    order, parent, g_o, s_o, e_o = nest(g, start, end, _ranked(np.zeros(3, np.int64)))  # type: ignore[arg-type]
    keep = np.array([True, True, False])
    assert sub_nesting(parent, keep, g_o[keep], s_o[keep], e_o[keep]) is None
    # Kept: A and C. They nest, but `nest` of all three made C B's child (B overlaps A):
    # C's nearest kept ancestor is none, not A, so the forest is refused, not misread.
    keep = np.array([True, False, True])
    assert sub_nesting(parent, keep, g_o[keep], s_o[keep], e_o[keep]) is None
    # Kept: B and C: C's parent among them is B.
    keep = np.array([False, True, True])
    got = sub_nesting(parent, keep, g_o[keep], s_o[keep], e_o[keep])
    assert got is not None
    kept, sub_parent, depth = got
    assert order[kept].tolist() == [1, 2]
    assert sub_parent.tolist() == [NO_ID, 0] and depth.tolist() == [0, 1]


def test_sub_nesting_refuses_nodes_out_of_nest_order(both_ways: str) -> None:
    # Two disjoint roots given in the wrong order: not a forest `nest` made.
    parent = np.array([NO_ID, NO_ID], dtype=np.int64)
    keep = np.array([True, True])
    g = np.zeros(2, dtype=np.int64)
    start, end = np.array([10, 0], dtype=np.int64), np.array([20, 5], dtype=np.int64)
    assert sub_nesting(parent, keep, g, start, end) is None
    assert sub_nesting(parent, keep, g, start[::-1].copy(), end[::-1].copy()) is not None
    # Threads in descending order, and at one start the shorter first: refused too.
    assert sub_nesting(parent, keep, np.array([1, 0]), end[::-1].copy(), end + 30) is None
    tie = np.array([0, 0], dtype=np.int64)
    assert sub_nesting(parent, keep, g, tie, np.array([5, 9], dtype=np.int64)) is None
    assert sub_nesting(parent, keep, np.array([0, 1]), tie, np.array([5, 9])) is not None


def test_order_by_is_the_two_key_lexsort(both_ways: str) -> None:
    from badput.analysis._nesting import order_by

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 5, 17, 100, 5000):  # runs of ties past the C pass's insertion length
        for spread in (1, 3, 50, 10**9):  # from all ties to almost none
            primary = rng.integers(0, spread, n)
            if spread > 3:
                primary = np.sort(primary)  # nearly sorted, as start times are
                primary[rng.integers(0, max(n, 1), n // 10)] = rng.integers(0, spread)
            secondary = -rng.integers(0, 4, n)  # ties in both keys keep their position
            got = order_by(primary.astype(np.int64), secondary.astype(np.int64))
            assert np.array_equal(got, np.lexsort((secondary, primary))), (n, spread)


def _both(monkeypatch: pytest.MonkeyPatch, *args: object) -> tuple[list[I64], list[I64]]:
    monkeypatch.delenv("BADPUT_NO_C_PATHS", raising=False)
    fast = list(nest(*args))  # type: ignore[arg-type]
    monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
    slow = list(nest(*args))  # type: ignore[arg-type]
    monkeypatch.delenv("BADPUT_NO_C_PATHS")
    return fast, slow


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
@pytest.mark.parametrize("proper", [True, False])
def test_c_nest_equals_numpy_nest(monkeypatch: pytest.MonkeyPatch, proper: bool) -> None:
    # nest's C sweep (`_paths.event_keys`, `nest_parents`) gives the numpy version's order
    # and parents, on nested and on overlapping intervals, int64 and int32 threads.
    rng = np.random.default_rng(2100 + proper)
    with_parents = 0
    for _ in range(1500):
        n = int(rng.integers(1, 50))
        g, start, end, kind = _random_intervals(rng, n, proper)
        if rng.random() < 0.3:
            g = g.astype(np.int32)  # a Trace id column
        fast, slow = _both(monkeypatch, g, start, end, _ranked(kind))
        for a, b in zip(fast, slow, strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        _, parent, _, s_o, e_o = fast
        has = parent >= 0
        with_parents += int(has.any())
        # Every parent found comes before its child and contains it.
        assert (parent < np.arange(n)).all()
        assert (s_o[parent[has]] <= s_o[has]).all()
        assert (e_o[has] <= e_o[parent[has]]).all()
    assert with_parents > 1000  # the trials reach nodes with parents


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
def test_c_nest_orders_long_runs_of_equal_starts_as_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A coarse clock: hundreds of opens at one (thread, start), of a few lengths and kinds,
    # so that runs pass the insertion sort's length (the C pass sorts those another way).
    rng = np.random.default_rng(77)
    for n, starts in ((300, 2), (80, 1), (40, 5)):
        g = rng.integers(0, 2, n).astype(np.int64)
        start = rng.integers(0, starts, n).astype(np.int64)
        end = start + rng.integers(0, 4, n)
        kind = rng.integers(0, 3, n).astype(np.int64)
        fast, slow = _both(monkeypatch, g, start, end, _ranked(kind))
        for a, b in zip(fast, slow, strict=True):
            np.testing.assert_array_equal(a, b)
        order, _, g_o, s_o, e_o = fast
        same = (g_o[1:] == g_o[:-1]) & (s_o[1:] == s_o[:-1])
        assert same.sum() > 16  # runs longer than the insertion sort's
        # Within a run: the longer first, then the kind, then the input position.
        k_o = kind[order]
        later = (e_o[1:] < e_o[:-1]) | (
            (e_o[1:] == e_o[:-1])
            & ((k_o[1:] > k_o[:-1]) | ((k_o[1:] == k_o[:-1]) & (order[1:] > order[:-1])))
        )
        assert later[same].all()


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
@pytest.mark.parametrize("overlapping", [False, True])
def test_c_nest_holds_the_closes_or_sorts_them_past_its_budget(
    monkeypatch: pytest.MonkeyPatch, overlapping: bool
) -> None:
    # The C pass holds the open nodes' closes in order; thousands of long intervals each
    # ending after the ones still open (a staircase, no nesting) pass its budget of moves,
    # and the closes are sorted instead: the same order and parents as numpy either way.
    real = _nesting._paths
    sorted_closes: list[int] = []

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def nest_parents(self, *args: object) -> bool:
            sorted_closes.append(1)
            return bool(real.nest_parents(*args))

    monkeypatch.setattr(_nesting, "_paths", Spy())
    n = 3000
    g = np.zeros(n, dtype=np.int64)
    if overlapping:  # [i, i + n): each overlaps the n - 1 after it
        start = np.arange(n, dtype=np.int64)
        end = start + n
    else:  # nested: [i, 2n - i)
        start = np.arange(n, dtype=np.int64)
        end = 2 * n - start
    kind = np.zeros(n, dtype=np.int64)
    fast, slow = _both(monkeypatch, g, start, end, _ranked(kind))
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)
    assert sorted_closes == ([1] if overlapping else [])
    expected = np.full(n, NO_ID) if overlapping else np.arange(-1, n - 1)
    np.testing.assert_array_equal(fast[1], expected)


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
def test_c_nest_known_forest(monkeypatch: pytest.MonkeyPatch) -> None:
    # Thread 0: A [0, 10) holds B [2, 5) and C [5, 9); D [12, 13) is a root. Thread 1: E [0, 4)
    # and F [3, 8) overlap without nesting (F is a root); G [5, 5), zero-length, is inside F,
    # which the depth count (one open after E closed) misses: the climb from F finds it.
    g = np.array([0, 0, 0, 0, 1, 1, 1], dtype=np.int64)
    start = np.array([0, 2, 5, 12, 0, 3, 5], dtype=np.int64)
    end = np.array([10, 5, 9, 13, 4, 8, 5], dtype=np.int64)
    kind = np.zeros(7, dtype=np.int64)
    fast, slow = _both(monkeypatch, g, start, end, _ranked(kind))
    order, parent = fast[0], fast[1]
    np.testing.assert_array_equal(order, [0, 1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(parent, [NO_ID, 0, 0, NO_ID, NO_ID, NO_ID, 5])
    np.testing.assert_array_equal(slow[1], parent)


def test_nest_refuses_an_end_before_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    g = np.zeros(3, dtype=np.int64)
    start, end = np.array([0, 5, 6], dtype=np.int64), np.array([10, 3, 7], dtype=np.int64)
    for numpy_only in (False, True):
        if numpy_only:
            monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
        with pytest.raises(ValueError, match="ends before it starts"):
            nest(g, start, end, _ranked(np.zeros(3, dtype=np.int64)))  # type: ignore[arg-type]


def test_pair_keys_order_and_equality_are_the_pairs() -> None:
    # Packed where the ranges fit, dense ids where not: either way the keys sort as the pairs
    # do and are equal exactly where the pairs are (what the flow pairing needs of them).
    rng = np.random.default_rng(7)
    for wide in (False, True):
        a = rng.integers(0, 5, 400).astype(np.int64)
        b = rng.integers(-3, 6, 400).astype(np.int64) * (1 << 60 if wide else 1)
        keys = pair_keys(a, b.astype(np.int32) if not wide else b)
        pairs = list(zip(a.tolist(), b.tolist(), strict=True))
        for i, j in rng.integers(0, 400, (2000, 2)).tolist():
            assert (keys[i] < keys[j]) == (pairs[i] < pairs[j])
            assert (keys[i] == keys[j]) == (pairs[i] == pairs[j])
    np.testing.assert_array_equal(
        dense_pairs(a, b), np.unique(pairs, axis=0, return_inverse=True)[1].ravel()
    )


@pytest.mark.parametrize("wide", [False, True])
def test_kind_then_id_orders_by_kind_rank_then_op_id(wide: bool) -> None:
    # The rank of tied opens: by the kind's rank (negative ones too), then by op id (NO_ID
    # first); packed without a sort where the ids' range allows, by dense ranks where not.
    from badput.analysis._nesting import kind_then_id

    rng = np.random.default_rng(3)
    rank_of_kind = np.array([-1, 2, 0, 1], dtype=np.int8)
    kind = rng.integers(0, 4, 500).astype(np.int8)
    op_id = rng.integers(-1, 40, 500).astype(np.int64)
    if wide:
        op_id[::7] = rng.integers(1 << 60, 1 << 62, op_id[::7].shape[0])
    at = rng.permutation(500)[:300].astype(np.int64)
    r = kind_then_id(rank_of_kind, kind, op_id)(at)
    pairs = list(zip(rank_of_kind[kind[at]].tolist(), op_id[at].tolist(), strict=True))
    order = sorted(range(300), key=lambda i: (pairs[i], i))
    assert np.argsort(r, kind="stable").tolist() == order
    same = [pairs[i] == pairs[j] for i, j in itertools.pairwise(order)]
    assert [r[i] == r[j] for i, j in itertools.pairwise(order)] == same
