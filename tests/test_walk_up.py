"""`walk_up`: the C pass over the forest equals the numpy walk, level by level."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from badput.analysis import _nesting
from badput.analysis._nesting import nest, walk_up
from badput.trace.model import NO_ID

I64 = npt.NDArray[np.int64]


def _forest(rng: np.random.Generator, n: int) -> I64:
    """Parents of a random forest in open order: each node's parent comes before it."""
    parent = np.full(n, NO_ID, dtype=np.int64)
    for v in range(1, n):
        if rng.random() < 0.8:
            parent[v] = int(rng.integers(max(0, v - 6), v))  # deep chains and wide levels
    return parent


def _by_hand(parent: I64, start: I64, mask: npt.NDArray[np.bool_]) -> tuple[list[int], list[int]]:
    near, far = [], []
    for s in start.tolist():
        chain = []
        while s >= 0:
            chain.append(s)
            s = int(parent[s])
        marked = [v for v in chain if mask[v]]
        near.append(marked[0] if marked else NO_ID)
        far.append(marked[-1] if marked else NO_ID)
    return near, far


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
@pytest.mark.parametrize("seed", range(30))
def test_c_and_numpy_walks_agree_and_match_by_hand(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    parent = _forest(rng, n)
    masks = [rng.random(n) < p for p in (0.0, 0.2, 0.7, 1.0)]
    start = rng.integers(-1, n, int(rng.integers(n // 8, 2 * n))).astype(np.int64)  # NO_ID too
    c_first, c_last = walk_up(parent, start, masks)
    monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
    np_first, np_last = walk_up(parent, start, masks)
    for m, cf, cl, nf, nl in zip(masks, c_first, c_last, np_first, np_last, strict=True):
        near, far = _by_hand(parent, start, m)
        assert cf.tolist() == nf.tolist() == near
        assert cl.tolist() == nl.tolist() == far
        assert cf.dtype == cl.dtype == nf.dtype == np.int64
    # One of the two alone: the other list is empty, this one the same.
    for c_paths in (True, False):
        if c_paths:
            monkeypatch.delenv("BADPUT_NO_C_PATHS")
        first, last = walk_up(parent, start, masks, farthest=False)
        assert last == [] and [f.tolist() for f in first] == [f.tolist() for f in np_first]
        first, last = walk_up(parent, start, masks, nearest=False)
        assert first == [] and [la.tolist() for la in last] == [la.tolist() for la in np_last]


@pytest.mark.skipif(_nesting.c_paths() is None, reason="the C helpers are not built")
def test_c_pass_refuses_what_it_cannot_write() -> None:
    fast = _nesting.c_paths()
    parent = np.array([NO_ID, 0, 1], dtype=np.int64)
    mark = np.array([1, 0, 1], dtype=np.uint8)
    near, far = np.empty(3, dtype=np.int32), np.empty(3, dtype=np.int32)
    fast.marked_ancestors(parent, mark, near, None)
    assert near.tolist() == [0, 0, 2]
    fast.marked_ancestors(parent, mark, None, far)
    assert far.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="no output"):
        fast.marked_ancestors(parent, mark, None, None)
    with pytest.raises(ValueError, match="mismatched"):  # int64 outputs: not the pass's
        fast.marked_ancestors(parent, mark, np.empty(3, dtype=np.int64), None)
    with pytest.raises(ValueError, match="mismatched"):
        fast.marked_ancestors(parent, mark, near, np.empty(2, dtype=np.int32))


def test_a_forest_out_of_open_order_takes_the_numpy_walk() -> None:
    # Node 0's parent is node 2 (after it): the one-pass C walk cannot run; the answer is the
    # same walk up the parents.
    parent = np.array([2, NO_ID, NO_ID], dtype=np.int64)
    mask = np.array([False, False, True])
    first, last = walk_up(parent, np.array([0, 1], dtype=np.int64), [mask])
    assert first[0].tolist() == [2, NO_ID] and last[0].tolist() == [2, NO_ID]


def test_nest_gives_parents_in_open_order() -> None:
    # walk_up's C pass relies on it: nest's parents come before their children.
    rng = np.random.default_rng(7)
    g = rng.integers(0, 3, 2000).astype(np.int64)
    start = rng.integers(0, 500, 2000).astype(np.int64)
    end = start + rng.integers(0, 60, 2000)
    _, parent, *_ = nest(g, start, end, lambda at: np.zeros(at.shape[0], np.int8))
    assert bool((parent < np.arange(parent.shape[0])).all())
