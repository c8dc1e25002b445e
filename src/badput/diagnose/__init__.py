"""Rules over analysis results: ranked findings with evidence, savings and the fix.

Per-GPU rules run where the trace is (`outcome_of`, in a worker when there are many ranks);
job-level rules run on the driver over the compact outcomes of every rank (`diagnose_job`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from badput.analysis.memory import MemoryTimeline, memory_timelines
from badput.analysis.ranks import CrossRank, RankSummary, cross_rank, summarize_rank
from badput.analysis.results import DeviceAnalysis
from badput.analysis.segments import StepSegments, pick_steps, step_segments
from badput.diagnose.context import DeviceContext
from badput.diagnose.findings import RULES, Evidence, Finding, Rule, severity_of
from badput.diagnose.job import straggler
from badput.diagnose.rules import DEVICE_RULES
from badput.trace.model import Trace

__all__ = [
    "RULES",
    "Diagnosis",
    "Evidence",
    "Finding",
    "JobResult",
    "RankOutcome",
    "Rule",
    "diagnose",
    "diagnose_device",
    "diagnose_job",
    "outcome_of",
    "severity_of",
]


@dataclass(frozen=True)
class Diagnosis:
    """Findings of a set of traces: per device, and all of them ranked."""

    per_device: dict[tuple[str, int], list[Finding]] = field(default_factory=dict)
    ranked: list[Finding] = field(default_factory=list)

    def for_device(self, d: DeviceAnalysis) -> list[Finding]:
        """The findings of one device, ranked."""
        return self.per_device.get((d.trace, d.device), [])


@dataclass(frozen=True)
class RankOutcome:
    """One trace file analysed and diagnosed, compact: what a worker hands to the driver.

    The Trace and the interval sets behind each analysis are dropped; what is left grows with
    the steps, the kernels listed and the collectives, not with the events.

    Attributes:
        path: the trace file.
        rank: distributed rank, None when the trace has none (or could not be read).
        world_size: distributed world size, None when the trace has none.
        events: rows read.
        warnings: the reader's warnings.
        devices: per-GPU analyses, without their timelines; kernels cut to the top listed.
        findings: per-GPU findings, ranked, in the order of `devices`.
        summaries: cross-rank summaries of the GPUs with activity.
        error: why the trace could not be analysed; None when it was.
        base_time_ns: the trace's `baseTimeNanoseconds` (epoch ns its times are relative to).
        segments: per GPU (in the order of `devices`), the typical and the longest step cut
            into busy and idle pieces in time order, for drawing.
        versions: software versions the trace records (`Trace.versions`).
        memory: per GPU, allocated and reserved bytes over time from the trace's `[memory]`
            events (`analysis.memory.memory_timelines`); empty when it has none.
    """

    path: str
    rank: int | None = None
    world_size: int | None = None
    events: int = 0
    warnings: list[str] = field(default_factory=list)
    devices: list[DeviceAnalysis] = field(default_factory=list)
    findings: list[list[Finding]] = field(default_factory=list)
    summaries: list[RankSummary] = field(default_factory=list)
    error: str | None = None
    base_time_ns: int | None = None
    segments: list[list[StepSegments]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    memory: list[MemoryTimeline] = field(default_factory=list)


@dataclass(frozen=True)
class JobResult:
    """Every rank of a job: outcomes in (rank, path) order, the cross-rank view, findings.

    Attributes:
        outcomes: one per trace file, failed ones included, ordered by (rank, path).
        cross: the cross-rank view; None with fewer than two ranks.
        diagnosis: per-GPU and job-level findings.
    """

    outcomes: list[RankOutcome]
    cross: CrossRank | None
    diagnosis: Diagnosis

    @property
    def failed(self) -> list[RankOutcome]:
        """The traces that could not be analysed."""
        return [o for o in self.outcomes if o.error is not None]

    @property
    def analysed(self) -> list[RankOutcome]:
        """The traces that were analysed."""
        return [o for o in self.outcomes if o.error is None]


def _rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.savings_ns, f.id, f.trace, f.device))


def diagnose_device(trace: Trace, analysis: DeviceAnalysis) -> list[Finding]:
    """Run every per-GPU rule on one GPU of a trace.

    Args:
        trace: the trace the analysis came from.
        analysis: one GPU's analysis, with its timeline.

    Returns:
        Its findings, largest savings first; none where nothing can be said: a GPU without
        activity, a zero-length window, steps of zero duration, no recorded GPU time, or a
        window with nothing recorded in it (`DeviceContext.undiagnosable`).
    """
    if analysis.goodput is None or analysis.timeline is None:
        return []
    ctx = DeviceContext(trace, analysis)
    if ctx.undiagnosable is not None:
        return []
    return _rank([f for rule in DEVICE_RULES if rule.check and (f := rule.check(ctx))])


def outcome_of(trace: Trace, devices: list[DeviceAnalysis], top: int = 0) -> RankOutcome:
    """Diagnose and summarize one analysed trace, and keep only what reports need.

    Args:
        trace: the trace.
        devices: its analyses (`analyze_trace`).
        top: kernels kept per GPU (0 keeps all).
    """
    findings = [diagnose_device(trace, d) for d in devices]
    segments = [
        [seg for step in pick_steps(d.steps) if (seg := step_segments(d, step)) is not None]
        for d in devices
    ]
    summaries = [summarize_rank(trace, d) for d in devices if d.goodput is not None]
    compact = [
        dataclasses.replace(d, timeline=None, kernels=d.kernels[:top] if top > 0 else d.kernels)
        for d in devices
    ]
    return RankOutcome(
        path=trace.path,
        rank=trace.rank,
        world_size=trace.world_size,
        events=len(trace),
        warnings=list(trace.warnings),
        devices=compact,
        findings=findings,
        summaries=summaries,
        base_time_ns=trace.base_time_ns,
        segments=segments,
        versions=dict(trace.versions),
        memory=memory_timelines(trace),
    )


def _order(o: RankOutcome) -> tuple[bool, int, str]:
    return (o.rank is None, o.rank if o.rank is not None else 0, o.path)


def diagnose_job(outcomes: Sequence[RankOutcome]) -> JobResult:
    """Put the ranks in order, build the cross-rank view and run the job-level rules.

    Args:
        outcomes: one per trace file, in any order (failed ones included).

    Returns:
        The outcomes ordered by (rank, path), the cross-rank view of the ranks that were
        analysed (None with fewer than two), and every finding ranked.
    """
    ordered = sorted(outcomes, key=_order)
    summaries = [s for o in ordered for s in o.summaries if s.rank is not None]
    cross = cross_rank(summaries) if len({s.rank for s in summaries}) >= 2 else None
    per_device: dict[tuple[str, int], list[Finding]] = {}
    everything: list[Finding] = []
    for o in ordered:
        for d, found in zip(o.devices, o.findings, strict=True):
            if d.goodput is None:
                continue
            per_device[(d.trace, d.device)] = found
            everything.extend(found)
    if cross is not None:
        job = straggler(cross)
        if job is not None:
            everything.append(job)
    return JobResult(ordered, cross, Diagnosis(per_device, _rank(everything)))


def diagnose(results: list[tuple[Trace, list[DeviceAnalysis]]]) -> Diagnosis:
    """Run every rule on every GPU, and the job-level rules across ranks.

    Args:
        results: traces with their analyses, as `badput analyze` computes them.

    Returns:
        Findings per device and all findings ranked by savings (largest first).

    Example:
        >>> trace = load_trace("trace.json.gz")  # doctest: +SKIP
        >>> diagnose([(trace, analyze_trace(trace))]).ranked[0].id  # doctest: +SKIP
        'data-loading'
    """
    return diagnose_job([outcome_of(trace, devices) for trace, devices in results]).diagnosis
