"""Rules over analysis results: ranked findings with evidence, savings and the fix.

Per-GPU rules run where the trace is (`outcome_of`, in a worker when there are many ranks);
job-level rules run on the driver over the compact outcomes of every rank (`diagnose_job`),
after the traces are grouped into jobs (`badput.diagnose.jobs`): cross-rank views and the
straggler rule only within a job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from badput.analysis._beside import Beside
from badput.analysis.critical_path import CriticalPath, PathBeside
from badput.analysis.memory import MemoryTimeline, memory_timelines
from badput.analysis.ranks import CrossRank, RankSummary, cross_rank, summarize_rank
from badput.analysis.results import DeviceAnalysis
from badput.analysis.segments import StepSegments, pick_steps, step_segments
from badput.diagnose._rule import pct
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import RULES, Evidence, Finding, Rule, severity_of
from badput.diagnose.job import straggler
from badput.diagnose.jobs import Job, group_jobs
from badput.diagnose.rules import DEVICE_RULES
from badput.trace.model import Trace

__all__ = [
    "RULES",
    "Diagnosis",
    "Evidence",
    "Finding",
    "Job",
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
    """Every trace of a run: outcomes in (rank, path) order, its jobs, the findings.

    Attributes:
        outcomes: one per trace file, failed ones included, ordered by (rank, path).
        cross: the cross-rank view when the traces are one job; None with fewer than two
            ranks, and with several jobs (each job has its own, `jobs`).
        diagnosis: per-GPU and job-level findings of every job.
        jobs: the traces grouped into jobs (`badput.diagnose.jobs`), largest first; one job
            when they all belong together (it then holds the failed traces too).
    """

    outcomes: list[RankOutcome]
    cross: CrossRank | None
    diagnosis: Diagnosis
    jobs: list[Job] = field(default_factory=list)

    @property
    def failed(self) -> list[RankOutcome]:
        """The traces that could not be analysed."""
        return [o for o in self.outcomes if o.error is not None]

    @property
    def analysed(self) -> list[RankOutcome]:
        """The traces that were analysed."""
        return [o for o in self.outcomes if o.error is None]

    def findings_of(self, job: Job) -> list[Finding]:
        """The ranked findings of one job's traces (job-level ones included)."""
        paths = job.paths
        return [f for f in self.diagnosis.ranked if f.trace in paths]


def _rank(findings: list[Finding]) -> list[Finding]:
    """Largest savings first; a named straggler before everything (the others wait for it)."""
    return sorted(
        findings, key=lambda f: (f.id != "straggler", -f.savings_ns, f.id, f.trace, f.device)
    )


def diagnose_device(
    trace: Trace,
    analysis: DeviceAnalysis,
    jobs: int = 1,
    path: Beside[CriticalPath] | PathBeside | None = None,
) -> list[Finding]:
    """Run every per-GPU rule on one GPU of a trace.

    Args:
        trace: the trace the analysis came from.
        analysis: one GPU's analysis, with its timeline.
        jobs: with 2 or more, the findings' critical-path what-ifs run on a helper thread
            beside the rules (the same findings).
        path: with 2 or more jobs, the GPU's critical path still being found (its analysis
            has none yet): the rules run beside it, the what-ifs wait for it.

    Returns:
        Its findings, largest savings first; none where nothing can be said: a GPU without
        activity, a zero-length window, steps of zero duration, no recorded GPU time, or a
        window with nothing recorded in it (`DeviceContext.undiagnosable`).
    """
    if analysis.goodput is None or analysis.timeline is None:
        return []
    if path is not None and jobs <= 1:  # one thread: the path first, as without `path`
        analysis, path = dataclasses.replace(analysis, critical_path=path.result()), None
    ctx = DeviceContext(trace, analysis, jobs, path)
    if ctx.undiagnosable is not None:
        return []
    try:
        found = [f for rule in DEVICE_RULES if rule.check and (f := rule.check(ctx))]
        ranked = _rank(ctx.with_graph_savings(found))
        ctx.done_with_what_ifs()
        return ranked
    finally:
        ctx.close()


def outcome_of(
    trace: Trace,
    devices: list[DeviceAnalysis],
    top: int = 0,
    jobs: int = 1,
    paths: list[Beside[CriticalPath] | PathBeside | None] | None = None,
    memory: Beside[list[MemoryTimeline]] | None = None,
) -> RankOutcome:
    """Diagnose and summarize one analysed trace, and keep only what reports need.

    Args:
        trace: the trace.
        devices: its analyses (`analyze_trace`).
        top: kernels kept per GPU (0 keeps all).
        jobs: threads for the diagnosis (`diagnose_device`); the same outcome.
        paths: per device, its critical path still being found (`analyze_trace` with
            `critical_paths=False`), None where it has its own; each joins its analysis here.
        memory: the trace's memory timelines (`memory_timelines`) being found already (beside
            the analysis); found here by default.
    """
    pending = paths if paths is not None else [None] * len(devices)
    if memory is None:  # the trace's alone: beside the rules
        memory = Beside(jobs, memory_timelines, trace)
    findings = [diagnose_device(trace, d, jobs, p) for d, p in zip(devices, pending, strict=True)]
    devices = [
        d if p is None else dataclasses.replace(d, critical_path=p.result())
        for d, p in zip(devices, pending, strict=True)
    ]
    segments = [
        [seg for step in pick_steps(d.steps) if (seg := step_segments(d, step)) is not None]
        for d in devices
    ]
    summaries = [summarize_rank(trace, d) for d in devices if d.goodput is not None]
    compact = [
        dataclasses.replace(
            d,
            timeline=None,
            kernels=d.kernels[:top] if top > 0 else d.kernels,
            launch=d.launch.compact() if d.launch is not None else None,
            critical_path=d.critical_path.compact() if d.critical_path is not None else None,
        )
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
        memory=memory.result(),
    )


def _order(o: RankOutcome) -> tuple[bool, int, str]:
    return (o.rank is None, o.rank if o.rank is not None else 0, o.path)


def diagnose_job(outcomes: Sequence[RankOutcome]) -> JobResult:
    """Group the traces into jobs, build each job's cross-rank view, run the job-level rules.

    With a named straggler, its finding ranks first, and the other ranks' waiting for it is
    attributed to it: their `exposed-communication` savings drop by their wait for it per step
    (`Straggler.waits_per_step_ns`), with that wait in the evidence, and the finding goes when
    what is left is below the reporting floor (`severity_of`).

    Args:
        outcomes: one per trace file, in any order (failed ones included).

    Returns:
        The outcomes ordered by (rank, path) (their findings as attributed), the jobs, the
        cross-rank view of the one job (None with several, or fewer than two ranks), and every
        finding ranked.
    """
    ordered = sorted(outcomes, key=_order)
    groups = group_jobs([o for o in ordered if o.error is None])
    jobs = []
    for members, notes in groups:
        summaries = [s for o in members for s in o.summaries if s.rank is not None]
        cross = cross_rank(summaries) if len({s.rank for s in summaries}) >= 2 else None
        worlds = {o.world_size for o in members if o.world_size is not None}
        world = next(iter(worlds)) if len(worlds) == 1 else None
        jobs.append(Job(members, cross, world, notes))
    if len(jobs) <= 1:  # one job: it holds every trace, the failed ones too
        first = jobs[0] if jobs else Job([])
        jobs = [dataclasses.replace(first, outcomes=list(ordered))]
    per_device: dict[tuple[str, int], list[Finding]] = {}
    for o in ordered:
        for d, found in zip(o.devices, o.findings, strict=True):
            if d.goodput is not None:
                per_device[(d.trace, d.device)] = found
    job_level: list[Finding] = []
    for job in jobs:
        if job.cross is None:
            continue
        named = straggler(job.cross)
        if named is not None:
            job_level.append(_attribute(named, job.cross, per_device))
    ordered = [_with_findings(o, per_device) for o in ordered]
    jobs = [
        dataclasses.replace(j, outcomes=[_with_findings(o, per_device) for o in j.outcomes])
        for j in jobs
    ]
    everything = [f for found in per_device.values() for f in found] + job_level
    cross = jobs[0].cross if len(jobs) == 1 else None
    return JobResult(ordered, cross, Diagnosis(per_device, _rank(everything)), jobs)


def _with_findings(o: RankOutcome, per_device: dict[tuple[str, int], list[Finding]]) -> RankOutcome:
    """The outcome with its findings as `per_device` holds them (after attribution)."""
    found = [
        per_device.get((d.trace, d.device), f) for d, f in zip(o.devices, o.findings, strict=True)
    ]
    return o if found == o.findings else dataclasses.replace(o, findings=found)


def _attribute(
    found: Finding, cross: CrossRank, per_device: dict[tuple[str, int], list[Finding]]
) -> Finding:
    """Take the other ranks' wait for the straggler out of their exposed communication.

    Their `exposed-communication` finding keeps what is left after its wait for the straggler
    per step, or goes when that is below the reporting floor; `per_device` is updated in place.

    Returns:
        The straggler finding, with how many such findings it took over in its evidence.
    """
    s = next(st for st in cross.stragglers if st.rank == found.rank)
    reduced = dropped = 0
    for r, wait_ns in sorted(s.waits_per_step_ns.items()):
        key = cross.sources[r]
        kept: list[Finding] = []
        for f in per_device.get(key, []):
            if f.id != "exposed-communication" or f.savings_ns <= 0 or wait_ns <= 0:
                kept.append(f)
                continue
            cut = min(wait_ns, f.savings_ns)
            left = f.savings_ns - cut
            share = f.savings_share * left / f.savings_ns
            severity = severity_of(share)
            if severity is None:
                dropped += 1
                continue
            reduced += 1
            evidence = {
                **f.evidence,
                "waiting_for_straggler_per_step": ms(cut),
                "own_exposed_communication_per_step": ms(left),
                "see": Evidence(f"straggler (rank {s.rank})"),
            }
            kept.append(
                dataclasses.replace(
                    f,
                    title=(
                        f"{f.title}; {cut / 1e6:,.2f} ms per step of it is waiting for the "
                        f"straggler (rank {s.rank}), {left / 1e6:,.2f} ms ({pct(share)}) "
                        "is its own"
                    ),
                    severity=severity,
                    evidence=evidence,
                    savings_ns=left,
                    savings_share=share,
                )
            )
        if key in per_device:
            per_device[key] = _rank(kept)
    if not reduced and not dropped:
        return found
    evidence = {
        **found.evidence,
        "others_exposed_communication": Evidence(
            f"its wait taken out on {reduced + dropped} rank(s), {dropped} left below the floor"
        ),
    }
    return dataclasses.replace(found, evidence=evidence)


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
