"""Traces into jobs: which traces are ranks of one job, and why the others are not.

A directory may hold traces of several jobs. Cross-rank tables and the straggler rule only
make sense within one, so the traces are grouped first, from the evidence each carries:

1. **A rank.** A trace without a distributed rank (`distributedInfo.rank`) is a job of its
   own: nothing says which job it belongs to.
2. **The world size.** Ranks of one job share `distributedInfo.world_size`.
3. **Distinct ranks.** A job has each rank once; a second trace of a rank already in the job
   (a rerun, a copy, another capture) starts or joins another job.
4. **Recorded together.** When both traces' clocks read wall-clock time (Kineto's
   `baseTimeNanoseconds` plus the trace time, or epoch times written directly), their windows
   start at most `MAX_APART_NS` apart. The ranks of one job are captured by the same profiler
   schedule at the same steps, so their windows start within their hosts' clock skew and a
   step or two of each other; an hour leaves room for unsynchronized clocks and long steps,
   and still tells apart runs of the same program on other hours or days.
5. **Matching collectives** (`badput.analysis.ranks.agreement`, against the job's first rank):
   the same job-wide collective kinds, a message size in common for each symmetric kind, and
   matched collectives that end together once the clocks are aligned.

Traces are taken in (rank, path) order; each joins the first job (in the order jobs were
opened) that passes every test, or opens a new one. Each job records, as notes, why its traces
were not put with the others. Process-group names (`"Process Group Name"` in NCCL metadata)
are not used: PyTorch names groups "0", "1", ... (or by a hash of their ranks), the same in
every run of a program, so they cannot tell two jobs apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from badput.analysis.ranks import CrossRank, RankSummary, agreement

if TYPE_CHECKING:
    from badput.diagnose import RankOutcome

__all__ = ["MAX_APART_NS", "Job", "group_jobs"]

#: Two traces whose windows start further apart than this (wall clock) are different jobs.
MAX_APART_NS = 3_600 * 10**9
# A trace clock at or above this reads Unix epoch time (2001-09-09): comparable across traces.
# Below it the clock starts at the capture (nsys) and says nothing about when it was recorded.
_EPOCH_NS = 10**18
# Reasons listed per trace left out of a job, before "and N more".
_MAX_REASONS = 3


@dataclass(frozen=True)
class Job:
    """Traces that are ranks of one job, with their cross-rank view.

    Attributes:
        outcomes: the job's traces, ordered by (rank, path); with a single job, the traces
            that could not be analysed too.
        cross: the cross-rank view of its ranks; None with fewer than two.
        world_size: the world size its traces record; None when they record none.
        notes: why its traces were not put together with the others' (empty for the only
            job).
    """

    outcomes: list[RankOutcome]
    cross: CrossRank | None = None
    world_size: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def analysed(self) -> list[RankOutcome]:
        """The traces that were analysed."""
        return [o for o in self.outcomes if o.error is None]

    @property
    def failed(self) -> list[RankOutcome]:
        """The traces that could not be analysed."""
        return [o for o in self.outcomes if o.error is not None]

    @property
    def ranks(self) -> list[int]:
        """The ranks of its analysed traces, ascending."""
        return sorted({o.rank for o in self.analysed if o.rank is not None})

    @property
    def paths(self) -> set[str]:
        """Its trace files."""
        return {o.path for o in self.outcomes}


def _summary(o: RankOutcome) -> RankSummary | None:
    return o.summaries[0] if o.summaries else None


def _epoch_ns(o: RankOutcome) -> int | None:
    """Wall-clock start of the trace's window (Unix epoch ns); None when its clock is not."""
    s = _summary(o)
    if s is None:
        return None
    t = (o.base_time_ns or 0) + s.window_start_ns
    return t if t >= _EPOCH_NS else None


def _apart(ns: int) -> str:
    hours = ns / 3_600e9
    return f"{hours / 24:,.1f} days" if hours >= 24 else f"{hours:,.1f} h"


def _label(members: list[RankOutcome]) -> str:
    ranks = sorted({o.rank for o in members if o.rank is not None})
    if not ranks:
        return members[0].path
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _refusal(members: list[RankOutcome], o: RankOutcome) -> str | None:
    """Why `o` cannot join the job of `members`; None when it can."""
    taken = next((m for m in members if m.rank == o.rank), None)
    if taken is not None:
        return f"rank {o.rank} is there already ({taken.path}): a second trace of it"
    ref = members[0]
    t0, t1 = _epoch_ns(ref), _epoch_ns(o)
    if t0 is not None and t1 is not None and abs(t1 - t0) > MAX_APART_NS:
        return f"recorded {_apart(abs(t1 - t0))} apart"
    a, b = _summary(ref), _summary(o)
    if a is None or b is None:
        return None
    world = o.world_size if o.world_size is not None else max(len(members) + 1, 2)
    return agreement(a, b, world).reason


def group_jobs(outcomes: Sequence[RankOutcome]) -> list[tuple[list[RankOutcome], list[str]]]:
    """Group analysed traces into jobs; see the module docstring for the tests.

    Args:
        outcomes: analysed traces, ordered by (rank, path).

    Returns:
        Each job's traces, in the input order, with the notes that say why they stand apart
        from the other jobs' traces; largest jobs first, then by first trace path. Notes are
        empty when there is one job.

    Example:
        >>> [len(m) for m, _ in group_jobs(outcomes)]  # doctest: +SKIP
        [16, 8, 2, 1]
    """
    groups: list[list[RankOutcome]] = []
    refused: list[list[tuple[int, str]]] = []  # per group: (other group, why) of its first
    for o in outcomes:
        if o.rank is None:
            groups.append([o])
            refused.append([])
            continue
        why_not = []
        for g, members in enumerate(groups):
            if members[0].rank is None or members[0].world_size != o.world_size:
                continue
            why = _refusal(members, o)
            if why is None:
                members.append(o)
                break
            why_not.append((g, why))
        else:
            groups.append([o])
            refused.append(why_not)
    if len(groups) < 2:
        return [(members, []) for members in groups]
    worlds = sorted({m[0].world_size for m in groups if m[0].rank is not None and m[0].world_size})
    out = []
    for members, why_not in zip(groups, refused, strict=True):
        first, notes = members[0], []
        if first.rank is None:
            notes.append("no distributed rank (distributedInfo): reported on its own")
        else:
            others = [w for w in worlds if w != first.world_size]
            if others:
                label = "no world size" if first.world_size is None else "world size"
                size = "" if first.world_size is None else f" {first.world_size}"
                notes.append(f"{label}{size}; traces of world size {_sizes(others)} are other jobs")
        for g, why in why_not[:_MAX_REASONS]:
            other = groups[g]
            notes.append(f"{first.path} is not with {_label(other)} ({other[0].path}): {why}")
        if len(why_not) > _MAX_REASONS:
            notes.append(f"and not with {len(why_not) - _MAX_REASONS} more job(s)")
        out.append((members, notes))
    out.sort(key=lambda g: (-len(g[0]), g[0][0].world_size is None, g[0][0].path))
    return out


def _sizes(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)
