"""The cross-rank view: clock alignment, waits and stragglers (`badput.analysis.ranks`).

Synthetic rank sets come from `tests/synth_ranks.py`: each step, every rank computes, then
joins an all-reduce that ends on every rank at the same true instant; one rank may compute
longer, and each rank's clock is offset by up to seconds. What the construction implies is
worked out in each test.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from badput.analysis import analyze_trace
from badput.analysis.ranks import (
    LAST_SHARE,
    MATERIAL_SHARE,
    CrossRank,
    RankSummary,
    cross_rank,
    summarize_rank,
)
from badput.trace import load_trace
from synth_ranks import RankSet, write_rank_set

US = 1_000
X_US = 300  # the slow rank's extra compute per step
STEPS = 6


def summaries(paths: Sequence[Path | str]) -> list[RankSummary]:
    out: list[RankSummary] = []
    for p in paths:
        trace = load_trace(str(p))
        out.extend(summarize_rank(trace, a) for a in analyze_trace(trace))
    return out


@pytest.fixture(scope="module")
def slow3(tmp_path_factory: pytest.TempPathFactory) -> tuple[RankSet, list[RankSummary]]:
    rs = write_rank_set(tmp_path_factory.mktemp("slow3"), slow_rank=3, extra_us=X_US)
    return rs, summaries(rs.paths)


def test_slow_rank_is_the_straggler(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    rs, sums = slow3
    cross = cross_rank(sums)
    assert cross.ranks == tuple(range(8))
    assert cross.matching == "steps"
    assert cross.warnings == ()
    # clocks differ by up to 2 s; all-reduces end together, so the offsets come back exactly
    assert max(abs(o) for o in rs.offsets_ns) > 1_000_000_000
    assert cross.clock_offset_ns == dict(enumerate(rs.offsets_ns))
    # rank 3 arrives X late at each of the 6 all-reduces; the 7 others wait X each time
    (s,) = cross.stragglers
    assert s.rank == 3
    assert s.wait_caused_ns == 7 * X_US * US * STEPS
    assert s.wait_per_step_ns == X_US * US
    assert s.last_share == 1.0
    assert s.score == pytest.approx((800 + X_US) / 800)
    assert cross.waited_ns == {r: (0 if r == 3 else X_US * US * STEPS) for r in range(8)}
    assert cross.last_count == {r: (STEPS if r == 3 else 0) for r in range(8)}
    assert len(cross.waits) == STEPS
    assert all(w.type == "all_reduce" and w.last_rank == 3 for w in cross.waits)
    assert all(w.lateness_ns == X_US * US and w.wait_ns == 7 * X_US * US for w in cross.waits)
    assert cross.scores == {r: (1.375 if r == 3 else 1.0) for r in range(8)}
    assert cross.step_ns == 2000 * US
    assert cross.per_step_ns[3]["compute"] == (800 + X_US) * US
    assert cross.per_step_ns[0]["compute"] == 800 * US


def test_wait_matches_construction_with_jitter(tmp_path: Path) -> None:
    rs = write_rank_set(tmp_path, slow_rank=5, extra_us=X_US, jitter_us=20, seed=7)
    cross = cross_rank(summaries(rs.paths))
    (s,) = cross.stragglers
    assert s.rank == 5
    # the construction: in step k the slow rank arrives c5[k] - max(others' c[k]) after the
    # second-latest rank, and the 7 others each wait at least that long for it
    late_us = [
        rs.compute_us[5][k] - max(rs.compute_us[r][k] for r in range(8) if r != 5)
        for k in range(STEPS)
    ]
    assert s.wait_caused_ns == 7 * sum(late_us) * US
    assert s.wait_caused_ns == pytest.approx(7 * X_US * US * STEPS, rel=0.05)
    assert cross.waited_ns == {r: sum(rs.waits_us[r]) * US for r in range(8)}
    offsets = cross.clock_offset_ns
    assert all(abs(offsets[r] - rs.offsets_ns[r]) <= US for r in range(8))


def test_equal_ranks_have_no_straggler(tmp_path: Path) -> None:
    rs = write_rank_set(tmp_path, jitter_us=10, seed=3)
    cross = cross_rank(summaries(rs.paths))
    assert cross.stragglers == ()
    # someone is always last, but by at most the 10 us jitter: under 5 % of a 2 ms step
    assert max(cross.last_count.values()) <= STEPS
    assert all(w.lateness_ns <= 10 * US for w in cross.waits)
    assert all(0.98 <= v <= 1.02 for v in cross.scores.values())
    assert cross.clock_offset_ns == dict(enumerate(rs.offsets_ns))


def test_thresholds() -> None:
    assert LAST_SHARE == 0.5
    assert MATERIAL_SHARE == 0.05


def test_partial_windows_align_by_step_number(tmp_path: Path) -> None:
    # rank 2's trace starts one step later, rank 6's two steps later
    rs = write_rank_set(tmp_path, slow_rank=1, extra_us=X_US, skip={2: 1, 6: 2})
    cross = cross_rank(summaries(rs.paths))
    assert cross.matching == "steps"
    assert cross.clock_offset_ns == dict(enumerate(rs.offsets_ns))
    (s,) = cross.stragglers
    # only steps 3-6 are on every rank: 4 collectives
    assert s.rank == 1 and len(cross.waits) == 4
    assert s.wait_caused_ns == 7 * X_US * US * 4
    assert s.wait_per_step_ns == X_US * US


def without_step_numbers(sums: list[RankSummary]) -> list[RankSummary]:
    return [dataclasses.replace(s, step_number=(None,) * len(s.step_number)) for s in sums]


def test_sequence_matching_without_step_numbers(
    slow3: tuple[RankSet, list[RankSummary]],
) -> None:
    rs, sums = slow3
    cross = cross_rank(without_step_numbers(sums))
    assert cross.matching == "sequence"
    assert cross.clock_offset_ns == dict(enumerate(rs.offsets_ns))
    (s,) = cross.stragglers
    assert s.rank == 3 and s.wait_caused_ns == 7 * X_US * US * STEPS


def test_sequence_matching_finds_the_shift_of_a_later_window(tmp_path: Path) -> None:
    # every collective is an all-reduce: the type pattern cannot tell shifts apart, but only
    # the true shift makes the ends differ by one constant (the jitter moves the others)
    rs = write_rank_set(tmp_path, slow_rank=4, extra_us=X_US, jitter_us=30, skip={2: 1}, seed=5)
    cross = cross_rank(without_step_numbers(summaries(rs.paths)))
    assert cross.matching == "sequence"
    assert cross.clock_offset_ns == dict(enumerate(rs.offsets_ns))
    assert [s.rank for s in cross.stragglers] == [4]
    assert len(cross.waits) == STEPS - 1


def test_order_independent(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    _, sums = slow3
    expected = cross_rank(sums)
    for seed in range(3):
        shuffled = list(sums)
        random.Random(seed).shuffle(shuffled)
        assert cross_rank(shuffled) == expected


def test_rank_summary_pickles(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    _, sums = slow3
    s = sums[3]
    data = pickle.dumps(s)
    back = pickle.loads(data)
    assert back == s
    for f in dataclasses.fields(s.collectives):
        assert np.array_equal(getattr(back.collectives, f.name), getattr(s.collectives, f.name))
    assert len(data) < 4_000  # compact: 6 steps, 6 collectives
    assert back.step_dur_ns == (2000 * US,) * STEPS
    assert back.step_compute_ns == ((800 + X_US) * US,) * STEPS
    assert back.comm_stats[0].type == "all_reduce" and back.comm_stats[0].count == STEPS


def test_single_rank(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    _, sums = slow3
    cross = cross_rank(sums[3:4])
    assert cross.ranks == (3,)
    assert cross.stragglers == () and cross.waits == () and cross.matching == "none"
    assert cross.scores == {3: 1.0}
    assert {e.category for e in cross.extremes} >= {"goodput", "comm_total", "step_time"}
    assert cross_rank([]) == CrossRank((), {}, (), {}, (), {}, (), {}, {}, {}, None, {}, "none", ())


def test_rank_without_collectives(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    _, sums = slow3
    empty = type(sums[0].collectives).empty()
    sums = [dataclasses.replace(s, collectives=empty) if s.rank == 6 else s for s in sums]
    cross = cross_rank(sums)
    assert cross.warnings == ("rank 6: no collectives; it takes no part in the waits",)
    assert 6 not in cross.clock_offset_ns and 6 in cross.scores
    (s,) = cross.stragglers
    assert s.rank == 3 and s.wait_caused_ns == 6 * X_US * US * STEPS


def test_duplicate_and_missing_ranks(slow3: tuple[RankSet, list[RankSummary]]) -> None:
    _, sums = slow3
    dup = dataclasses.replace(sums[2], trace="zz-copy.json")
    nameless = [dataclasses.replace(s, rank=None) for s in sums[6:]]
    cross = cross_rank([*sums[:6], dup, *reversed(nameless)])
    assert cross.ranks == tuple(range(8))
    assert cross.sources[2][0] == sums[2].trace  # the first by path is kept
    assert cross.sources[6][0] == sums[6].trace and cross.sources[7][0] == sums[7].trace
    assert any("rank 2 appears twice" in w for w in cross.warnings)
    assert any("has no rank: numbered 6" in w for w in cross.warnings)
    assert "the ranks disagree on the world size" not in " ".join(cross.warnings)
    mixed = cross_rank([*sums[:7], dataclasses.replace(sums[7], world_size=16)])
    assert "the ranks disagree on the world size (8, 16)" in mixed.warnings
    assert [s.rank for s in cross.stragglers] == [3]


def test_subgroup_collectives_are_not_compared(
    slow3: tuple[RankSet, list[RankSummary]],
) -> None:
    _, sums = slow3
    pairs = [
        dataclasses.replace(
            s,
            collectives=dataclasses.replace(
                s.collectives, group_size=s.collectives.group_size * 0 + 2
            ),
        )
        for s in sums
    ]
    cross = cross_rank(pairs)
    assert cross.stragglers == () and cross.waits == ()
    assert "rank 0: 6 collective(s) of smaller groups not compared" in cross.warnings


# ---- the 8-rank DLRM step ------------------------------------------------------------------


def raw_nccl_us(path: Path) -> tuple[int, float]:
    """Rank and summed NCCL kernel time of a trace, straight from its JSON."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    total = sum(
        e["dur"]
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
    )
    return doc["distributedInfo"]["rank"], total


def test_dlrm_extremes_and_straggler(shared_traces: Path) -> None:
    paths = sorted((shared_traces / "param-dlrm-8rank").glob("*.json.gz"))
    nccl = dict(raw_nccl_us(p) for p in paths)
    lo = min(nccl, key=lambda r: nccl[r])
    hi = max(nccl, key=lambda r: nccl[r])
    assert (lo, hi) == (7, 1)  # 1.746 and 11.336 ms (MANIFEST)
    cross = cross_rank(summaries(paths))
    comm = next(e for e in cross.extremes if e.category == "comm_total")
    assert (comm.min_rank, comm.max_rank) == (lo, hi)
    assert comm.min == pytest.approx(nccl[lo] * US) and comm.max == pytest.approx(nccl[hi] * US)
    assert cross.matching == "steps"
    # one host clock: the ranks' collectives end within 2 us of each other
    assert all(abs(o) <= 2 * US for o in cross.clock_offset_ns.values())
    # rank 7 arrives last at the 4 all-to-all SendRecvs and the first all-reduce (5 of 8)
    (s,) = cross.stragglers
    assert s.rank == 7 and s.last_share == 5 / 8
    assert 1.2e6 <= s.wait_per_step_ns <= 1.4e6
    assert s.wait_caused_ns == 7 * s.wait_per_step_ns
    assert 0.99 <= s.score <= 1.01  # its GPU compute is ordinary: the host holds it back
