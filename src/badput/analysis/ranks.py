"""Many ranks: per-rank summaries, the cross-rank view, clock alignment and stragglers.

A worker analyses one trace and returns a compact, picklable `RankSummary` per device
(`summarize_rank`); the driver never holds whole traces. `cross_rank` then compares the ranks
of one job. The method, also in docs/analysis.md ("Many ranks"):

1. **Ranks.** Summaries are ordered by (rank, trace path, device). A trace without
   `distributedInfo` gets the next free rank number in trace-path order; a rank number seen
   twice keeps its first summary in that order, with a warning.
2. **Matching collectives.** Only collectives of the whole job take part: those whose group
   size is the job's world size, or unknown (traces without NCCL metadata). When every rank has
   `ProfilerStep#N` steps and the ranks share step numbers, a collective's key is (step number,
   type, index among that step's collectives of that type). Otherwise the key is (type, index
   among the rank's collectives of that type), after shifting each rank's sequence against the
   reference rank's so that their type patterns agree best (a window that starts a few
   collectives later). Both keys ignore streams: concurrent collectives on different streams
   can start in a different order on different ranks.
3. **Clocks.** A collective completes at nearly the same instant on every rank (nobody leaves
   before the last rank's data arrived), so the offset of rank r's clock is the median, over
   the collectives it shares with the reference rank (the lowest aligned rank), of
   (end on r - end on the reference). Aligned time = trace time - offset.
4. **Arrivals and waits.** A rank arrives at a collective when its kernel starts (aligned).
   For each collective that every aligned rank has, the last arriver is the rank with the
   latest arrival; each other rank waits (last arrival - its arrival). The last arriver's
   lateness is (its arrival - the second-latest arrival): had it arrived with the others
   (with the median rank), the collective would have started that much earlier on every rank.
   The wait a rank causes is (number of ranks - 1) x its lateness, summed over the collectives
   it arrives last at: the others' waiting that would disappear.
5. **Score.** A rank's straggler score is its median compute time per step (the window
   without steps) over the median of the same across ranks: 1.0 is typical, 1.3 computes 30 %
   more.
6. **Stragglers.** A rank is named when it arrives last at more than half of the matched
   collectives (`LAST_SHARE`) and its lateness per step is at least 5 % of the median step
   (`MATERIAL_SHARE`): below that, step jitter alone can put a rank last. The score is
   reported but not required: a rank slowed by its host (data loading, CPU ops) arrives last
   with an ordinary compute time, as rank 7 of the 8-rank DLRM trace does.
7. **One job or two** (`agreement`, used to group traces into jobs before any of the above).
   Two ranks of one job run the same job-wide collectives: the same kinds, the same message
   sizes for the symmetric kinds (all-reduce, all-gather, reduce-scatter, broadcast: every
   member passes the same count), and their matched collectives end together once their
   clocks are aligned (point 3). Two traces disagree when their kinds differ, when a symmetric
   kind shares no message size, when no collective matches, or when the median distance of
   the matched ends from the clock offset exceeds `END_TOLERANCE_NS` or `END_TOLERANCE_SHARE`
   of the median step, whichever is larger.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis.comm import (
    COLLECTIVE_TYPES,
    Collectives,
    CollectiveStat,
    collective_stats,
    collectives,
)
from badput.analysis.patterns import profiler_step_number
from badput.analysis.results import Breakdown, DeviceAnalysis, IdleCauses
from badput.trace.model import Trace

__all__ = [
    "END_TOLERANCE_NS",
    "END_TOLERANCE_SHARE",
    "LAST_SHARE",
    "MATERIAL_SHARE",
    "Agreement",
    "CollectiveWait",
    "CrossRank",
    "Extreme",
    "RankSummary",
    "Straggler",
    "agreement",
    "cross_rank",
    "summarize_rank",
]

I64 = npt.NDArray[np.int64]

#: A straggler arrives last at more than this share of the matched collectives.
LAST_SHARE = 0.5
#: ... and is late by at least this share of the median step per step (savings below the
#: "medium" severity of the findings are step jitter, not a straggler).
MATERIAL_SHARE = 0.05
#: Without step numbers, sequence shifts tried when aligning a rank's collectives (each way).
MAX_SHIFT = 512
#: Two ranks of one job: once their clocks are aligned, their matched collectives end within
#: this much of each other (median). The 8-rank DLRM trace's ends agree within 2 us; clocks of
#: different hosts drift a few us per second (NTP-disciplined crystals, tens of ppm at worst),
#: so a capture of some seconds stays well inside 50 us.
END_TOLERANCE_NS = 50_000
#: ... or within this share of the median step, whichever is larger: the ends of another job's
#: collectives fall anywhere in the step (a quarter of it, median, for unrelated ends).
END_TOLERANCE_SHARE = 0.05
#: Collective kinds whose message size is the same on every member (the count passed to NCCL);
#: all-to-all and send/recv sizes may differ between ranks (uneven splits, pipeline stages).
_SYMMETRIC = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@dataclass(frozen=True)
class RankSummary:
    """What a worker returns for one device of one trace: small, picklable, no trace.

    Attributes:
        trace: the trace file.
        rank: distributed rank, None if the trace has none.
        world_size: distributed world size, None if the trace has none.
        device: GPU index.
        gpu: GPU model name, None if the trace does not say.
        goodput: compute / window; None without GPU activity.
        window_start_ns: start of the analysed window (this rank's clock).
        window_ns: length of the window.
        breakdown: partition of the window.
        idle_causes: partition of the idle part.
        comm_total_ns: collective kernel time in the window, hidden or not.
        step_dur_ns: duration of each step, in time order.
        step_compute_ns: compute time of each step.
        step_start_ns: start of each step (this rank's clock).
        step_number: N of each `ProfilerStep#N`, None for other step names.
        collectives: the device's collective kernels in the window (for alignment).
        comm_stats: per collective type totals.
        warnings: the device analysis' warnings.
    """

    trace: str
    rank: int | None
    world_size: int | None
    device: int
    gpu: str | None
    goodput: float | None
    window_start_ns: int
    window_ns: int
    breakdown: Breakdown
    idle_causes: IdleCauses
    comm_total_ns: int
    step_dur_ns: tuple[int, ...]
    step_compute_ns: tuple[int, ...]
    step_start_ns: tuple[int, ...]
    step_number: tuple[int | None, ...]
    collectives: Collectives = field(compare=False, repr=False)
    comm_stats: tuple[CollectiveStat, ...]
    warnings: tuple[str, ...] = ()


def summarize_rank(trace: Trace, analysis: DeviceAnalysis) -> RankSummary:
    """Summarize one device of one trace for the cross-rank view.

    Args:
        trace: the trace the analysis was computed from.
        analysis: one device's analysis (`analyze_trace(trace)[i]`).

    Returns:
        The summary a worker sends to the driver.

    Example:
        >>> trace = load_trace("worker0.pt.trace.json.gz")  # doctest: +SKIP
        >>> summarize_rank(trace, analyze_trace(trace)[0]).rank  # doctest: +SKIP
        0
    """
    c = collectives(trace, analysis)
    steps = analysis.steps
    return RankSummary(
        trace=analysis.trace,
        rank=analysis.rank,
        world_size=analysis.world_size,
        device=analysis.device,
        gpu=analysis.gpu,
        goodput=analysis.goodput,
        window_start_ns=analysis.window_start_ns,
        window_ns=analysis.window_ns,
        breakdown=analysis.breakdown,
        idle_causes=analysis.idle_causes,
        comm_total_ns=analysis.comm.total_ns,
        step_dur_ns=tuple(s.dur_ns for s in steps),
        step_compute_ns=tuple(s.breakdown.compute_ns for s in steps),
        step_start_ns=tuple(s.start_ns for s in steps),
        step_number=tuple(profiler_step_number(s.name) for s in steps),
        collectives=c,
        comm_stats=tuple(collective_stats(c)),
        warnings=tuple(analysis.warnings),
    )


@dataclass(frozen=True)
class Extreme:
    """Spread of one quantity across ranks; ties go to the lowest rank.

    Values are nanoseconds, except `goodput` (a fraction of the window).
    """

    category: str
    min: float
    min_rank: int
    median: float
    max: float
    max_rank: int


@dataclass(frozen=True)
class Straggler:
    """A rank that holds the others back.

    Attributes:
        rank: the rank.
        score: its compute per step over the median rank's.
        wait_caused_ns: the others' waiting it causes, summed over ranks and collectives:
            (ranks - 1) x its lateness at each collective it arrives last at.
        wait_per_step_ns: its lateness per step: what every rank's step would shorten by
            if it arrived with the others (the what-if savings).
        last_share: share of the matched collectives it arrives last at.
        waits_per_step_ns: each other aligned rank's wait for it per step: its lateness summed
            over the collectives it arrives last at (every other rank arrives no later than
            the second-latest, so each waits at least that long for it), over that rank's
            steps. This is the part of their exposed communication that is the straggler's.
    """

    rank: int
    score: float
    wait_caused_ns: int
    wait_per_step_ns: float
    last_share: float
    waits_per_step_ns: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CollectiveWait:
    """One collective matched on every aligned rank.

    Attributes:
        type: collective type (`COLLECTIVE_TYPES`).
        end_ns: its end on the reference rank's clock.
        last_rank: the rank that arrived last; None when all arrived together.
        lateness_ns: last arrival - second-latest arrival.
        wait_ns: the other ranks' waits (last arrival - their arrival), summed.
    """

    type: str
    end_ns: int
    last_rank: int | None
    lateness_ns: int
    wait_ns: int


@dataclass(frozen=True)
class CrossRank:
    """The ranks of one job side by side.

    Attributes:
        ranks: the ranks compared, ascending.
        sources: (trace, device) of each rank.
        extremes: min / median / max of goodput, each breakdown category, each idle cause,
            `comm_total` and `step_time` (median step of each rank), in that order.
        clock_offset_ns: each aligned rank's clock minus the reference (lowest aligned) rank's.
        stragglers: named stragglers, worst first (most wait caused); empty when none.
        scores: straggler score of every rank.
        waits: the matched collectives, by end on the reference clock.
        waited_ns: time each aligned rank waited for the last arriver, in all.
        last_count: matched collectives each aligned rank arrived last at.
        wait_caused_ns: wait each aligned rank caused (see `Straggler`).
        step_ns: median over ranks of their median step (the window without steps).
        per_step_ns: each rank's mean time per step (the window without steps) in compute,
            communication (exposed), memory and each idle cause (`idle_runtime`, ...).
        matching: how collectives were matched: "steps", "sequence" or "none".
        warnings: what a reader of the numbers should know.
    """

    ranks: tuple[int, ...]
    sources: dict[int, tuple[str, int]]
    extremes: tuple[Extreme, ...]
    clock_offset_ns: dict[int, int]
    stragglers: tuple[Straggler, ...]
    scores: dict[int, float]
    waits: tuple[CollectiveWait, ...]
    waited_ns: dict[int, int]
    last_count: dict[int, int]
    wait_caused_ns: dict[int, int]
    step_ns: float | None
    per_step_ns: dict[int, dict[str, float]]
    matching: str
    warnings: tuple[str, ...]


# ---- ranks -------------------------------------------------------------------------------------


def _number(summaries: Sequence[RankSummary]) -> tuple[dict[int, RankSummary], list[str]]:
    """Rank number -> summary, deterministic in the input order."""
    ordered = sorted(
        summaries,
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else 0, s.trace, s.device),
    )
    by_rank: dict[int, RankSummary] = {}
    warnings: list[str] = []
    for s in ordered:
        if s.rank is None:
            continue
        if s.rank in by_rank:
            kept = by_rank[s.rank]
            warnings.append(
                f"rank {s.rank} appears twice: kept {kept.trace} (device {kept.device}), "
                f"left out {s.trace} (device {s.device})"
            )
            continue
        by_rank[s.rank] = s
    free = max(by_rank, default=-1) + 1
    for s in ordered:
        if s.rank is None:
            warnings.append(f"{s.trace} (device {s.device}) has no rank: numbered {free}")
            by_rank[free] = s
            free += 1
    return by_rank, warnings


# ---- extremes ----------------------------------------------------------------------------------


def _median_int(values: Sequence[int]) -> float | None:
    return float(statistics.median(values)) if values else None


_QUANTITIES: tuple[tuple[str, Callable[[RankSummary], float | None]], ...] = (
    ("goodput", lambda s: s.goodput),
    ("compute", lambda s: s.breakdown.compute_ns),
    ("communication", lambda s: s.breakdown.communication_ns),
    ("memory", lambda s: s.breakdown.memory_ns),
    ("idle", lambda s: s.breakdown.idle_ns),
    ("idle_runtime", lambda s: s.idle_causes.runtime_ns),
    ("idle_dataloader", lambda s: s.idle_causes.dataloader_ns),
    ("idle_cpu", lambda s: s.idle_causes.cpu_ns),
    ("idle_other", lambda s: s.idle_causes.other_ns),
    ("comm_total", lambda s: s.comm_total_ns),
    ("step_time", lambda s: _median_int(s.step_dur_ns)),
)


def _extremes(by_rank: dict[int, RankSummary]) -> tuple[Extreme, ...]:
    out = []
    for name, get in _QUANTITIES:
        values = [(float(v), r) for r, s in sorted(by_rank.items()) if (v := get(s)) is not None]
        if not values:
            continue
        lo = min(values, key=lambda vr: (vr[0], vr[1]))
        hi = max(values, key=lambda vr: (vr[0], -vr[1]))
        med = float(statistics.median(v for v, _ in values))
        out.append(Extreme(name, lo[0], lo[1], med, hi[0], hi[1]))
    return tuple(out)


def _per_step(s: RankSummary) -> dict[str, float]:
    n = max(1, len(s.step_dur_ns))
    b, c = s.breakdown, s.idle_causes
    parts = {
        "compute": b.compute_ns,
        "communication": b.communication_ns,
        "memory": b.memory_ns,
        "idle_runtime": c.runtime_ns,
        "idle_dataloader": c.dataloader_ns,
        "idle_cpu": c.cpu_ns,
        "idle_other": c.other_ns,
    }
    return {k: v / n for k, v in parts.items()}


def _scores(by_rank: dict[int, RankSummary]) -> dict[int, float]:
    """Median compute per step (the window's compute without steps) over the median rank's."""
    per_rank = {
        r: float(statistics.median(s.step_compute_ns))
        if s.step_compute_ns
        else float(s.breakdown.compute_ns)
        for r, s in sorted(by_rank.items())
    }
    if not per_rank:
        return {}
    med = statistics.median(per_rank.values())
    return {r: (v / med if med > 0 else 1.0) for r, v in per_rank.items()}


# ---- matching and clocks -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Seq:
    """One rank's job-wide collectives in start order."""

    type_code: npt.NDArray[np.int8]
    start_ns: I64
    end_ns: I64
    step: I64  # step number of the step each starts in; -1 outside numbered steps
    msg_bytes: I64  # NO_ID (negative) without NCCL metadata


Key = tuple[int, ...]


def _sequence(s: RankSummary, world: int) -> _Seq:
    c = s.collectives
    group = np.asarray(c.group_size, dtype=np.int64)
    keep = (group <= 0) | (group == world)
    start = np.asarray(c.start_ns, dtype=np.int64)[keep]
    end = np.asarray(c.end_ns, dtype=np.int64)[keep]
    code = np.asarray(c.type_code, dtype=np.int8)[keep]
    size = np.asarray(c.msg_bytes, dtype=np.int64)[keep]
    order = np.lexsort((end, start))
    start, end, code, size = start[order], end[order], code[order], size[order]
    step = np.full(start.shape[0], -1, dtype=np.int64)
    if s.step_start_ns:
        s0 = np.asarray(s.step_start_ns, dtype=np.int64)
        s1 = s0 + np.asarray(s.step_dur_ns, dtype=np.int64)
        nums = np.array([-1 if n is None else n for n in s.step_number], dtype=np.int64)
        by = np.argsort(s0, kind="stable")
        s0, s1, nums = s0[by], s1[by], nums[by]
        i = np.searchsorted(s0, start, side="right") - 1
        ok = i >= 0
        ok[ok] &= start[ok] < s1[i[ok]]
        step[ok] = nums[i[ok]]
    return _Seq(code, start, end, step, size)


def _counted(codes: Sequence[int], groups: Sequence[int], shift: dict[int, int]) -> list[Key]:
    """Key (group, type, index among the group's collectives of that type + shift)."""
    seen: dict[tuple[int, int], int] = {}
    keys: list[Key] = []
    for g, t in zip(groups, codes, strict=True):
        k = seen.get((g, t), 0)
        seen[(g, t)] = k + 1
        keys.append((g, t, k + shift.get(t, 0)))
    return keys


def _shift(ref: _Seq, seq: _Seq) -> dict[int, int]:
    """Per type index shift of `seq` against `ref` where their type patterns agree best.

    Candidate shifts s pair seq[i] with ref[i + s]. Best: most equal types, then the most
    constant end differences (a true match ends together at a constant clock offset), then the
    smallest |s|.
    """
    a, b = ref.type_code, seq.type_code
    n, m = a.shape[0], b.shape[0]
    best: tuple[int, float, int, int] | None = None
    for s in range(max(-(m - 1), -MAX_SHIFT), min(n - 1, MAX_SHIFT) + 1):
        i0, i1 = max(0, -s), min(m, n - s)
        if i1 <= i0:
            continue
        same = a[i0 + s : i1 + s] == b[i0:i1]
        matches = int(same.sum())
        if matches == 0:
            continue
        diff = (seq.end_ns[i0:i1] - ref.end_ns[i0 + s : i1 + s])[same]
        spread = float(np.median(np.abs(diff - np.median(diff))))
        cand = (-matches, spread, abs(s), s)
        if best is None or cand < best:
            best = cand
    if best is None:
        return {}
    s = best[3]
    if s >= 0:  # ref's first s collectives are not in seq
        skipped = a[:s]
        return {int(t): int((skipped == t).sum()) for t in np.unique(skipped)}
    skipped = b[:-s]
    return {int(t): -int((skipped == t).sum()) for t in np.unique(skipped)}


def _keys(seqs: dict[int, _Seq]) -> tuple[dict[int, dict[Key, int]], str]:
    """Key -> row of each rank's collectives, and the matching used."""
    ranks = sorted(seqs)
    step_sets = [set(seqs[r].step[seqs[r].step >= 0].tolist()) for r in ranks]
    common = set.intersection(*step_sets) if step_sets else set()
    out: dict[int, dict[Key, int]] = {}
    if common:
        for r in ranks:
            q = seqs[r]
            keys = _counted(q.type_code.tolist(), q.step.tolist(), {})
            out[r] = {k: i for i, k in enumerate(keys) if k[0] >= 0}
        return out, "steps"
    ref = seqs[ranks[0]]
    for r in ranks:
        q = seqs[r]
        shift = {} if r == ranks[0] else _shift(ref, q)
        keys = _counted(q.type_code.tolist(), [0] * q.type_code.shape[0], shift)
        out[r] = {k: i for i, k in enumerate(keys)}
    return out, "sequence"


def _offsets(
    seqs: dict[int, _Seq], keys: dict[int, dict[Key, int]]
) -> tuple[dict[int, int], list[str]]:
    ranks = sorted(seqs)
    ref = ranks[0]
    offsets = {ref: 0}
    warnings = []
    for r in ranks[1:]:
        common = sorted(keys[r].keys() & keys[ref].keys())
        if not common:
            warnings.append(f"rank {r}: no collective matches rank {ref}'s; clock not aligned")
            continue
        mine = np.array([keys[r][k] for k in common], dtype=np.int64)
        theirs = np.array([keys[ref][k] for k in common], dtype=np.int64)
        diff = seqs[r].end_ns[mine] - seqs[ref].end_ns[theirs]
        offsets[r] = round(float(np.median(diff)))
    return offsets, warnings


# ---- the cross-rank view -----------------------------------------------------------------------


def cross_rank(summaries: Sequence[RankSummary]) -> CrossRank:
    """Compare the ranks of one job: extremes, clock offsets, waits and stragglers.

    The result depends only on the set of summaries, not on their order.

    Args:
        summaries: one summary per rank (device) of one job.

    Returns:
        The cross-rank view; see the module docstring for the method.

    Example:
        >>> sums = [summarize_rank(t, analyze_trace(t)[0]) for t in traces]  # doctest: +SKIP
        >>> [s.rank for s in cross_rank(sums).stragglers]  # doctest: +SKIP
        [7]
    """
    by_rank, warnings = _number(summaries)
    ranks = tuple(sorted(by_rank))
    sources = {r: (by_rank[r].trace, by_rank[r].device) for r in ranks}
    scores = _scores(by_rank)
    step_medians = [
        _median_int(s.step_dur_ns) if s.step_dur_ns else float(s.window_ns)
        for s in by_rank.values()
    ]
    step_ns = float(statistics.median(v for v in step_medians if v is not None)) if ranks else None

    worlds = {s.world_size for s in by_rank.values()}
    world_size = next(iter(worlds)) if len(worlds) == 1 else None
    if len(worlds) > 1:
        sizes = ", ".join(str(w) for w in sorted(worlds, key=lambda w: (w is None, w or 0)))
        warnings.append(f"the ranks disagree on the world size ({sizes})")
    world = world_size if world_size is not None else len(ranks)
    seqs: dict[int, _Seq] = {}
    for r in ranks:
        q = _sequence(by_rank[r], world)
        left = len(by_rank[r].collectives) - q.start_ns.shape[0]
        if left:
            warnings.append(f"rank {r}: {left} collective(s) of smaller groups not compared")
        if q.start_ns.shape[0]:
            seqs[r] = q
        elif len(ranks) > 1:
            warnings.append(f"rank {r}: no collectives; it takes no part in the waits")

    offsets: dict[int, int] = {}
    waits: list[CollectiveWait] = []
    waited: dict[int, int] = {}
    last_count: dict[int, int] = {}
    caused: dict[int, int] = {}
    late_total: dict[int, int] = {}
    steps_used: dict[int, int] = {}
    matching = "none"
    if len(seqs) >= 2:
        keys, matching = _keys(seqs)
        offsets, more = _offsets(seqs, keys)
        warnings.extend(more)
        aligned = sorted(offsets)
        ref = aligned[0]
        ref_end = seqs[ref].end_ns
        full = sorted(
            set.intersection(*(set(keys[r]) for r in aligned)),
            key=lambda k: (int(ref_end[keys[ref][k]]), k),
        )
        if len(aligned) >= 2 and full:
            arrive = np.stack(
                [seqs[r].start_ns[[keys[r][k] for k in full]] - offsets[r] for r in aligned]
            )
            ends = ref_end[[keys[ref][k] for k in full]]
            waited, last_count, late_total, waits = _waits(
                aligned, arrive, ends, [k[1] for k in full]
            )
            caused = {r: (len(aligned) - 1) * v for r, v in late_total.items()}
        elif len(aligned) >= 2:
            warnings.append("no collective is on every aligned rank: no waits")
        for r in aligned:
            if matching == "steps":
                steps_used[r] = max(1, len({k[0] for k in full}))
            else:
                steps_used[r] = max(1, len(by_rank[r].step_dur_ns))
    elif len(ranks) > 1 and any(v >= 1.1 for v in scores.values()):
        warnings.append("no collectives to align: stragglers cannot be named from waits")

    stragglers = []
    for r in sorted(late_total):
        share = last_count[r] / len(waits) if waits else 0.0
        per_step = late_total[r] / max(1, steps_used.get(r, 1))
        if share > LAST_SHARE and step_ns and per_step >= MATERIAL_SHARE * step_ns:
            waits_of = {
                o: late_total[r] / max(1, steps_used.get(o, 1))
                for o in sorted(late_total)
                if o != r
            }
            stragglers.append(Straggler(r, scores[r], caused[r], per_step, share, waits_of))
    stragglers.sort(key=lambda s: (-s.wait_caused_ns, s.rank))

    return CrossRank(
        ranks=ranks,
        sources=sources,
        extremes=_extremes(by_rank),
        clock_offset_ns=offsets,
        stragglers=tuple(stragglers),
        scores=scores,
        waits=tuple(waits),
        waited_ns=waited,
        last_count=last_count,
        wait_caused_ns=caused,
        step_ns=step_ns,
        per_step_ns={r: _per_step(by_rank[r]) for r in ranks},
        matching=matching,
        warnings=tuple(warnings),
    )


def _waits(
    ranks: list[int], arrive: I64, ends: I64, codes: list[int]
) -> tuple[dict[int, int], dict[int, int], dict[int, int], list[CollectiveWait]]:
    """Per rank waits and blame from arrivals (ranks x collectives, aligned clock)."""
    last_at = arrive.max(axis=0)
    waits_rc = last_at[None, :] - arrive
    order = np.sort(arrive, axis=0)
    lateness = order[-1] - order[-2]
    last_row = np.argmax(arrive, axis=0)  # ties go to the lowest rank; lateness is 0 then
    waited = {r: int(waits_rc[i].sum()) for i, r in enumerate(ranks)}
    last_count = dict.fromkeys(ranks, 0)
    late_total = dict.fromkeys(ranks, 0)
    table = []
    for j in range(arrive.shape[1]):
        late = int(lateness[j])
        last = ranks[int(last_row[j])] if late > 0 else None
        if last is not None:
            last_count[last] += 1
            late_total[last] += late
        table.append(
            CollectiveWait(
                type=COLLECTIVE_TYPES[codes[j]],
                end_ns=int(ends[j]),
                last_rank=last,
                lateness_ns=late,
                wait_ns=int(waits_rc[:, j].sum()),
            )
        )
    return waited, last_count, late_total, table


# ---- one job or two ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """Whether two traces' job-wide collectives say they are ranks of one job.

    Attributes:
        matched: collectives matched between the two (0 when neither has any).
        end_spread_ns: median distance of the matched collectives' end differences from their
            median (the clock offset); None without matched collectives.
        tolerance_ns: the largest `end_spread_ns` of one job (`END_TOLERANCE_NS`, or
            `END_TOLERANCE_SHARE` of the median step).
        reason: why they are not one job; None when nothing in their collectives says so.
    """

    matched: int
    end_spread_ns: float | None
    tolerance_ns: float
    reason: str | None


def _kinds(codes: set[int]) -> str:
    return ", ".join(COLLECTIVE_TYPES[c] for c in sorted(codes)) or "none"


def _sizes(q: _Seq, code: int) -> set[int]:
    return {int(b) for b in q.msg_bytes[(q.type_code == code) & (q.msg_bytes > 0)]}


def agreement(a: RankSummary, b: RankSummary, world: int) -> Agreement:
    """Compare two ranks' job-wide collectives: could they be ranks of one job.

    Only collectives of the whole job take part (group size `world`, or unknown), as in
    `cross_rank`; see point 7 of the module docstring for the tests.

    Args:
        a: one rank's summary (the job's reference rank).
        b: the other rank's.
        world: the job's world size.

    Returns:
        The agreement, with the reason when they disagree.

    Example:
        >>> agreement(rank0, rank1, 8).reason is None  # doctest: +SKIP
        True
    """
    qa, qb = _sequence(a, world), _sequence(b, world)
    steps = [float(v) for s in (a, b) if (v := _median_int(s.step_dur_ns)) is not None]
    step_ns = statistics.median(steps) if steps else float(max(a.window_ns, b.window_ns))
    tolerance = max(float(END_TOLERANCE_NS), END_TOLERANCE_SHARE * step_ns)
    ka, kb = set(qa.type_code.tolist()), set(qb.type_code.tolist())
    if not ka and not kb:
        return Agreement(0, None, tolerance, None)
    if ka != kb:
        why = f"collective kinds differ ({_kinds(ka)} against {_kinds(kb)})"
        return Agreement(0, None, tolerance, why)
    for kind in _SYMMETRIC:
        code = COLLECTIVE_TYPES.index(kind)
        sa, sb = _sizes(qa, code), _sizes(qb, code)
        if sa and sb and not sa & sb:
            why = f"no {kind} message size in common ({_bytes(sa)} against {_bytes(sb)})"
            return Agreement(0, None, tolerance, why)
    keys, _ = _keys({0: qa, 1: qb})
    common = sorted(keys[0].keys() & keys[1].keys())
    if not common:
        return Agreement(0, None, tolerance, "no collective matches")
    ends_a = qa.end_ns[[keys[0][k] for k in common]]
    ends_b = qb.end_ns[[keys[1][k] for k in common]]
    diff = ends_b - ends_a
    spread = float(np.median(np.abs(diff - np.median(diff))))
    reason = None
    if spread > tolerance:
        reason = (
            f"their collectives do not end together: {spread / 1e3:,.1f} us apart (median) "
            f"once the clocks are aligned, above the {tolerance / 1e3:,.1f} us of one job"
        )
    return Agreement(len(common), spread, tolerance, reason)


def _bytes(sizes: set[int]) -> str:
    shown = sorted(sizes)[:3]
    more = f" and {len(sizes) - 3} more" if len(sizes) > 3 else ""
    return ", ".join(f"{b:,} B" for b in shown) + more
