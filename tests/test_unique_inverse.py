"""`unique_inverse` and `distinct` equal `np.unique(values, return_inverse=True)`.

They replace np.unique where ids and times come in long ascending runs (its default sort
does not notice order); the answer must not depend on which sort found it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from badput.analysis._nesting import distinct, find_by_key_time, nest, unique_inverse
from badput.analysis.workload import BACKWARD_OP, OPTIMIZER_OP, workload_of
from badput.trace import load_trace
from badput.trace.model import EventKind


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(21)
    runs = np.concatenate([np.arange(k, k + 500) for k in (0, 300, 1_000, 200)])
    return [
        np.array([5, -1, 5, 3, -1, 9, 3], dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.array([7], dtype=np.int64),
        rng.integers(-1, 50, 5_000),  # many ties, NO_ID among them
        rng.integers(0, 1 << 60, 5_000),  # wide, few ties
        runs,  # ascending runs that overlap
        rng.integers(0, 100, 3_000).astype(np.int32),  # int32 ids
    ]


@pytest.mark.parametrize("values", _cases(), ids=lambda v: f"{v.dtype}-{v.shape[0]}")
def test_unique_inverse_equals_np_unique(values: np.ndarray) -> None:
    uniq, inverse = unique_inverse(values)
    want_uniq, want_inverse = np.unique(values, return_inverse=True)
    assert uniq.dtype == np.int64 and inverse.dtype == np.int64
    assert uniq.tolist() == want_uniq.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()
    assert (uniq[inverse] == values).all()


def test_unique_inverse_by_hand() -> None:
    uniq, inverse = unique_inverse(np.array([5, -1, 5, 3, -1, 9, 3]))
    assert uniq.tolist() == [-1, 3, 5, 9]
    assert inverse.tolist() == [2, 0, 2, 1, 0, 3, 1]


@pytest.mark.parametrize("bound", [10, 1 << 40])  # the table, then the sort
def test_distinct_by_table_and_by_sort(bound: int) -> None:
    values = np.array([4, -1, 4, 0, 9, 0, 9, 9], dtype=np.int64)
    uniq, inverse = distinct(values, bound)
    assert uniq.tolist() == [-1, 0, 4, 9]
    assert inverse.tolist() == [2, 0, 2, 1, 3, 1, 3, 3]


def test_workload_counts_each_op_row_once() -> None:
    demo = Path(__file__).parents[1] / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
    trace = load_trace(str(demo))
    backward = optimizer = 0
    for kind, nid in zip(trace.kind.tolist(), trace.name_id.tolist(), strict=True):
        if kind in (EventKind.CPU_OP, EventKind.ANNOTATION):
            name = trace.names[nid][:200]
            if BACKWARD_OP.search(name):
                backward += 1
            elif OPTIMIZER_OP.search(name):
                optimizer += 1
    found = workload_of(trace)
    assert found.kind == "training"
    assert (found.backward_ops, found.optimizer_ops) == (backward, optimizer)
    assert backward > 100  # the demo trace's backward pass, as a check on the count itself


def test_wide_times_take_dense_ranks_with_the_same_answers() -> None:
    """Times spanning more than int64 keys can pack are ranked (`unique_inverse`) first.

    The nesting and the (key, time) lookup on such times answer as on their dense ranks,
    which keep every order and tie.
    """
    rng = np.random.default_rng(7)
    n = 400
    ranks = np.sort(rng.integers(0, 50, 2 * n))
    wide_of = np.cumsum(np.full(100, 2**56))  # rank -> time: 2**56 apart, past 2**62 overall
    start_r = ranks[::2].copy()
    end_r = start_r + rng.integers(0, 3, n)
    g = rng.integers(0, 3, n)

    def rank(_: np.ndarray) -> np.ndarray:
        return np.zeros(_.shape[0], dtype=np.int64)

    narrow = nest(g, start_r.astype(np.int64), end_r.astype(np.int64), rank)
    wide = nest(g, wide_of[start_r], wide_of[end_r], rank)
    assert narrow[0].tolist() == wide[0].tolist() and narrow[1].tolist() == wide[1].tolist()
    assert (narrow[1] >= 0).any()  # some intervals do nest

    key_a, key_q = rng.integers(0, 5, n), rng.integers(0, 6, n)
    t_a, t_q = rng.integers(0, 60, n), rng.integers(0, 60, n)
    for exact in (True, False):
        want = find_by_key_time(
            key_a, t_a.astype(np.int64), key_q, t_q.astype(np.int64), exact=exact
        )
        got = find_by_key_time(key_a, wide_of[t_a], key_q, wide_of[t_q], exact=exact)
        assert got.tolist() == want.tolist()
        assert (want >= 0).any()
