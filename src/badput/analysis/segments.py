"""One step's GPU time in order: busy and idle intervals by kind, compact enough to draw.

The analysis partitions its window into interval sets (`Timeline`): compute, exposed
communication, exposed memcpy/memset, and idle time by cause. `step_segments` cuts those sets
to one step and lists the pieces in time order, so a report can draw what the GPU did and
where it waited, gap by gap, without holding the trace. Pieces shorter than the resolution
(1/2,000 of the step by default: under a pixel at any sensible width) are left out and only
counted, which bounds the list at a few thousand entries whatever the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from badput.analysis.results import DeviceAnalysis, StepResult

__all__ = ["SEGMENT_KINDS", "StepSegments", "pick_steps", "step_segments"]

#: The kinds of segment, in the order of `StepSegments.kind` codes. Together they partition
#: the window (the same parts as the breakdown with idle split by cause).
SEGMENT_KINDS = (
    "compute",
    "communication",
    "memory",
    "idle_dataloader",
    "idle_cpu",
    "idle_runtime",
    "idle_other",
)

#: Pieces shorter than this share of the step are counted, not listed.
RESOLUTION = 1 / 2000


@dataclass(frozen=True)
class StepSegments:
    """The pieces of one step in time order.

    Attributes:
        step: the step's name.
        start_ns: the step's start on the trace clock.
        dur_ns: the step's length.
        kind: per piece, an index into `SEGMENT_KINDS`.
        offset_ns: per piece, its start relative to the step's start.
        length_ns: per piece, its length.
        hidden: pieces left out for being shorter than the resolution.
        hidden_ns: their total length.
    """

    step: str
    start_ns: int
    dur_ns: int
    kind: tuple[int, ...]
    offset_ns: tuple[int, ...]
    length_ns: tuple[int, ...]
    hidden: int = 0
    hidden_ns: int = 0


def step_segments(
    d: DeviceAnalysis, step: StepResult, resolution: float = RESOLUTION
) -> StepSegments | None:
    """The pieces of `step`, from the analysis's interval sets; None without them.

    Args:
        d: a device analysis that still holds its `timeline`.
        step: one of `d.steps`.
        resolution: pieces shorter than this share of the step are only counted.
    """
    t = d.timeline
    if t is None or step.dur_ns <= 0:
        return None
    lo, hi = step.start_ns, step.start_ns + step.dur_ns
    sets = (
        t.compute,
        t.exposed_communication,
        t.exposed_memory,
        t.idle_dataloader,
        t.idle_cpu,
        t.idle_runtime,
        t.idle_other,
    )
    starts, ends, kinds = [], [], []
    for code, s in enumerate(sets):
        c = s.clip(lo, hi)
        starts.append(c.starts)
        ends.append(c.ends)
        kinds.append(np.full(c.starts.shape[0], code, dtype=np.int64))
    start = np.concatenate(starts)
    end = np.concatenate(ends)
    kind = np.concatenate(kinds)
    order = np.argsort(start, kind="stable")
    start, end, kind = start[order], end[order], kind[order]
    length = end - start
    keep = length >= max(1, int(step.dur_ns * resolution))
    return StepSegments(
        step=step.name,
        start_ns=lo,
        dur_ns=step.dur_ns,
        kind=tuple(kind[keep].tolist()),
        offset_ns=tuple((start[keep] - lo).tolist()),
        length_ns=tuple(length[keep].tolist()),
        hidden=int((~keep).sum()),
        hidden_ns=int(length[~keep].sum()),
    )


def pick_steps(steps: list[StepResult]) -> list[StepResult]:
    """The steps worth drawing: the median-length one (typical) and the longest, if different."""
    if not steps:
        return []
    by_length = sorted(steps, key=lambda s: (s.dur_ns, s.start_ns))
    median = by_length[(len(by_length) - 1) // 2]
    longest = by_length[-1]
    return [median] if longest is median else sorted([median, longest], key=lambda s: s.start_ns)
