"""`nest`: its C sweep (`_paths.nest_parents`) gives the numpy version's order and parents."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from badput.analysis import _nesting
from badput.analysis._nesting import nest
from badput.trace.model import NO_ID

I64 = npt.NDArray[np.int64]

pytestmark = pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")


def _ranked(kind: I64) -> object:
    def rank(at: I64) -> npt.NDArray[np.int8]:
        return kind[at].astype(np.int8)

    return rank


def _intervals(rng: np.random.Generator, n: int, shape: int) -> tuple[I64, I64, I64, I64]:
    """Threads, starts, ends, kinds: shape 0 nested, 1 overlapping."""
    g = rng.integers(0, 4, n).astype(np.int64)
    start = rng.integers(0, 30, n).astype(np.int64)
    if shape == 0:  # each inside a random earlier one on its thread, or after all of them
        end = start.copy()
        for i in range(n):
            mates = np.flatnonzero(g[:i] == g[i])
            if mates.size and rng.random() < 0.7:
                p = int(rng.choice(mates))
                start[i] = int(rng.integers(start[p], end[p] + 1))
                end[i] = int(rng.integers(start[i], end[p] + 1))
            else:
                start[i] = (int(end[mates].max()) if mates.size else 0) + int(rng.integers(0, 3))
                end[i] = start[i] + int(rng.integers(0, 25))
    else:
        end = start + rng.integers(0, 12, n)
    return g, start, end, rng.integers(0, 3, n).astype(np.int64)


def _both(monkeypatch: pytest.MonkeyPatch, *args: object) -> tuple[list[I64], list[I64]]:
    monkeypatch.delenv("BADPUT_NO_C_PATHS", raising=False)
    fast = list(nest(*args))  # type: ignore[arg-type]
    monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
    slow = list(nest(*args))  # type: ignore[arg-type]
    monkeypatch.delenv("BADPUT_NO_C_PATHS")
    return fast, slow


@pytest.mark.parametrize("shape", [0, 1])
def test_c_nest_equals_numpy_nest(monkeypatch: pytest.MonkeyPatch, shape: int) -> None:
    rng = np.random.default_rng(2100 + shape)
    with_parents = 0
    for _ in range(1500):
        n = int(rng.integers(1, 50))
        g, start, end, kind = _intervals(rng, n, shape)
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
