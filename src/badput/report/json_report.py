"""The `badput.analysis/1` JSON document (pinned by tests; fields may be added, never changed)."""

from __future__ import annotations

import dataclasses
import operator
import statistics
from typing import Any

import msgspec

from badput import __version__
from badput.analysis.comm import CollectiveStat, link_peak_gbps
from badput.analysis.critical_path import CriticalPath
from badput.analysis.launch import LaunchStats
from badput.analysis.memory import MemoryTimeline
from badput.analysis.ops import ModelAnalysis
from badput.analysis.ranks import CrossRank, Extreme, RankSummary
from badput.analysis.results import Breakdown, DeviceAnalysis, IdleCauses, StepResult
from badput.diagnose import (
    Diagnosis,
    Finding,
    Job,
    JobResult,
    RankOutcome,
    diagnose_job,
    outcome_of,
)
from badput.trace.model import Trace

__all__ = ["SCHEMA", "analysis_document", "encode_document", "job_document", "us"]

SCHEMA = "badput.analysis/1"


# The text after the whole microseconds, for each count of nanoseconds: b"", b".001", b".5".
_FRACTION = tuple(b"" if f == 0 else b"." + (b"%03d" % f).rstrip(b"0") for f in range(1000))


def _us_text(ns: int) -> bytes:
    """The JSON number text of `us`."""
    ns = int(ns)
    if ns < 0:
        return b"-" + _us_text(-ns)
    return str(ns // 1000).encode() + _FRACTION[ns % 1000]


def us(ns: int) -> msgspec.Raw:
    """Microseconds as an exact JSON number: `1712195495519689047` ns -> `1712195495519689.047`.

    Going through float64 would lose nanoseconds of epoch timestamps; the text keeps them.
    """
    return msgspec.Raw(_us_text(ns))


class _UsObject:
    """`{"key": us(obj.key_ns), ...}` of an object as one JSON text, for fixed keys.

    Not a dict of numbers: a trace of 20,000 steps writes 40,000 breakdowns and idle causes.
    """

    def __init__(self, *keys: str) -> None:
        self.template = b"{%s}" % b",".join(b'"%s":%%s' % k.encode() for k in keys)
        self.values = operator.attrgetter(*(f"{k}_ns" for k in keys))

    def __call__(self, obj: Breakdown | IdleCauses) -> bytes:
        return self.template % tuple(map(_us_text, self.values(obj)))


_breakdown_text = _UsObject("compute", "communication", "memory", "idle")
_causes_text = _UsObject("runtime", "dataloader", "cpu", "other")


def _breakdown(b: Breakdown) -> msgspec.Raw:
    return msgspec.Raw(_breakdown_text(b))


def _causes(c: IdleCauses) -> msgspec.Raw:
    return msgspec.Raw(_causes_text(c))


def _us_list(values: list[int]) -> msgspec.Raw:
    """A JSON array of `us` numbers, as one text (a number per step of a long trace)."""
    return msgspec.Raw(b"[%s]" % b",".join(_us_text(x) for x in values))


def _step(s: StepResult) -> msgspec.Raw:
    """One row of a device's `steps` as its JSON text (name, start, duration, breakdowns)."""
    return msgspec.Raw(
        b'{"name":%s,"start_us":%s,"dur_us":%s,"breakdown_us":%s,"idle_causes_us":%s}'
        % (
            msgspec.json.encode(s.name),
            _us_text(s.start_ns),
            _us_text(s.dur_ns),
            _breakdown_text(s.breakdown),
            _causes_text(s.idle_causes),
        )
    )


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as JSON: savings in microseconds and percent of the mean step."""
    return {
        "id": f.id,
        "title": f.title,
        "severity": f.severity,
        "trace": f.trace,
        "rank": f.rank,
        "device": f.device,
        "evidence": {k: {"value": e.value, "unit": e.unit} for k, e in f.evidence.items()},
        "savings_us": round(f.savings_ns / 1000, 3),
        "savings_pct": round(100 * f.savings_share, 3),
        "critical_path_savings_us": None
        if f.graph_savings_ns is None
        else round(f.graph_savings_ns / 1000, 3),
        "fix": f.fix,
        "refs": f.refs,
    }


def memory_dict(m: MemoryTimeline | None) -> dict[str, Any] | None:
    """A GPU's memory timeline peaks as JSON (times on the trace's clock, like the window)."""
    if m is None:
        return None
    return {
        "events": m.events,
        "peak_allocated_bytes": m.peak_allocated_bytes,
        "peak_allocated_at_us": us(m.peak_allocated_ts_ns),
        "peak_reserved_bytes": m.peak_reserved_bytes,
        "peak_reserved_at_us": us(m.peak_reserved_ts_ns),
        "start_us": us(m.start_ns),
        "end_us": us(m.end_ns),
    }


def memory_of(o: RankOutcome, device: int) -> MemoryTimeline | None:
    """The memory timeline of one GPU of an outcome; None when its trace has none."""
    return next((m for m in o.memory if m.device == device), None)


def model_dict(m: ModelAnalysis | None) -> dict[str, Any]:
    """The `ops`, `op_categories`, `modules`, `efficiency` and `attribution` keys of a device.

    `op_categories` is attributed GPU time by the category of each activity's launching op
    (TraceLens's `ops_summary_by_category`); `ops` counts it by the op it belongs to.

    Every op row and module row is listed (`--top` limits only the kernel list); times are
    microseconds, `gflops` and `bytes` are per call, `tflops_per_s` is
    `gflops x count / kernel time`. Without a model every key is null.
    """
    if m is None:
        return dict.fromkeys(("ops", "op_categories", "modules", "efficiency", "attribution"))
    e = m.efficiency
    return {
        "ops": [
            {
                "op": r.op,
                "category": r.category,
                "input_dims": r.input_dims if isinstance(r.input_dims, list) else [],
                "input_types": r.input_types,
                "count": r.count,
                "kernel_time_us": us(r.kernel_ns),
                "gflops": None if r.flops is None else r.flops / 1e9,
                "bytes": r.bytes,
                "precision": r.precision,
                "tflops_per_s": r.tflops_per_s,
                "tb_per_s": r.tb_per_s,
                "intensity": r.intensity,
                "bound": r.bound,
                "roof_share": r.roof_share,
                "module": r.module,
                "kernels": r.kernels,
                "no_model_reason": r.reason,
            }
            for r in m.ops
        ],
        "op_categories": [
            {"category": c, "kernel_time_us": us(t), "count": k}
            for c, (t, k) in m.launcher_categories.items()
        ],
        "modules": [
            {"path": r.path, "depth": r.depth, "kernel_time_us": us(r.kernel_ns), "count": r.count}
            for r in m.modules
        ],
        "efficiency": {
            "modelled_flops": e.modelled_flops,
            "modelled_kernel_share": e.modelled_kernel_share,
            "precision": e.precision,
            "peak_tflops": e.peak_tflops,
            "gpu_spec": m.gpu_spec.key if m.gpu_spec is not None else None,
            "mfu": e.mfu,
            "waterfall": [
                {"stage": st.stage, "tflops": st.tflops, "share_of_peak": st.share_of_peak}
                for st in e.waterfall
            ],
            "notes": e.notes,
        },
        "attribution": {
            "attributed_us": us(m.attributed_ns),
            "unattributed_us": us(m.unattributed_ns),
            "share": m.attributed_share,
            "reasons": {k: us(v) for k, v in m.reasons.items()},
            "unmodelled_us": {k: us(v) for k, v in m.unmodelled.items()},
            "has_shapes": m.has_shapes,
        },
    }


def _device(
    d: DeviceAnalysis, top: int, findings: list[Finding], memory: MemoryTimeline | None = None
) -> dict[str, Any]:
    stats = d.step_time_stats_ns()
    kernels = d.kernels if top <= 0 else d.kernels[:top]
    return {
        "trace": d.trace,
        "rank": d.rank,
        "world_size": d.world_size,
        "device": d.device,
        "gpu": d.gpu,
        "window_start_us": us(d.window_start_ns),
        "window_us": us(d.window_ns),
        "window_source": str(d.window_source),
        "goodput": d.goodput,
        "breakdown_us": _breakdown(d.breakdown),
        "idle_causes_us": _causes(d.idle_causes),
        "comm": {"total_us": us(d.comm.total_ns), "overlapped_us": us(d.comm.overlapped_ns)},
        "step_time_us": None
        if stats is None
        else {"mean": stats[0] / 1000, "median": stats[1] / 1000, "max": us(stats[2])},
        "steps": [_step(s) for s in d.steps],
        "dropped_steps": d.dropped_steps,
        "kernels": [
            {
                "name": k.name,
                "category": k.category,
                "evidence": k.evidence,
                "count": k.count,
                "total_us": us(k.total_ns),
                "mean_us": k.mean_ns / 1000,
            }
            for k in kernels
        ],
        "kernel_total_us": us(d.kernel_ns),
        "short_kernel_share": d.short_kernel_share,
        # The critical path's own notes (missing edges, named) join the device's.
        "warnings": d.warnings
        + ([f"critical path: {w}" for w in d.critical_path.warnings] if d.critical_path else []),
        "findings": [finding_dict(f) for f in findings],
        "memory": memory_dict(memory),
        **model_dict(d.model),
        "launch": launch_dict(d.launch),
        "critical_path": critical_path_dict(d.critical_path),
    }


#: Ops listed in `critical_path.top_ops`.
TOP_PATH_OPS = 20


def critical_path_dict(cp: CriticalPath | None) -> dict[str, Any] | None:
    """The `critical_path` object of a device (`badput.analysis.critical_path`).

    None without a launch tree or GPU activity. `breakdown_us` adds up to `length_us`
    (integer nanoseconds underneath, so exactly up to the microsecond texts' rounding). The
    keys are issue 19's contract; the path's warnings go to the device's `warnings`,
    prefixed "critical path: ".
    """
    if cp is None:
        return None
    return {
        "length_us": us(cp.length_ns),
        "breakdown_us": {k: us(v) for k, v in cp.breakdown_ns.items()},
        "top_ops": [{"op": op, "on_path_us": us(ns)} for op, ns in cp.top_ops[:TOP_PATH_OPS]],
        "steps": msgspec.Raw(
            b"[%s]"
            % b",".join(
                b'{"name":%s,"length_us":%s}' % (msgspec.json.encode(name), _us_text(ns))
                for name, ns in cp.steps
            )
        ),
    }


def launch_dict(launch: LaunchStats | None) -> dict[str, Any] | None:
    """The `launch` object of a device (`badput.analysis.launch`); None without a tree."""
    if launch is None:
        return None
    delay = launch.delay
    return {
        "delay_us": None
        if delay is None
        else {
            "median": delay.median_ns / 1000,
            "p90": delay.p90_ns / 1000,
            "max": us(delay.max_ns),
        },
        "outliers": [
            {
                "op": o.op,
                "count": o.count,
                "median_delay_us": o.median_delay_ns / 1000,
                "max_delay_us": us(o.max_delay_ns),
                "total_delay_us": us(o.total_delay_ns),
            }
            for o in launch.outliers
        ],
        "queue_empty_share": launch.queue_empty_share,
        "queue_depth_max": launch.queue_depth_max,
        "slow_launch_calls": launch.slow_calls,
        "slow_launch_excess_us": us(launch.slow_call_excess_ns),
        "warnings": list(launch.warnings),
    }


def analysis_document(
    results: list[tuple[Trace, list[DeviceAnalysis]]],
    diagnosis: Diagnosis | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The JSON document for traces analysed in this process.

    Args:
        results: each trace with its per-device analyses.
        diagnosis: findings of the same results; none listed when None.
        top: kernels listed per device (0 lists all).
    """
    job = diagnose_job([outcome_of(trace, devices, top=top) for trace, devices in results])
    return job_document(dataclasses.replace(job, diagnosis=diagnosis or Diagnosis()), top=top)


def job_document(job: JobResult, top: int = 10) -> dict[str, Any]:
    """The JSON document of a job: every trace, its GPUs, findings, and the cross-rank view.

    The document depends only on the outcomes and their (rank, path) order, never on where or
    in which order they were computed: executors give byte-identical documents. `jobs` lists
    the jobs the traces were grouped into, each with its ranks, world size, traces, the notes
    that say why it stands apart and its cross-rank view (the shape of `ranks`); with one job,
    `ranks` is that job's view, with several it lists every rank without cross-rank numbers.

    Args:
        job: the outcomes of every trace with the cross-rank view and findings.
        top: kernels listed per device (0 lists all).
    """
    analysed = job.analysed
    diagnosis = job.diagnosis
    return {
        "schema": SCHEMA,
        "badput_version": __version__,
        "traces": [
            {
                "path": o.path,
                "rank": o.rank,
                "world_size": o.world_size,
                "events": o.events,
                "warnings": o.warnings,
            }
            for o in analysed
        ],
        "findings": [finding_dict(f) for f in diagnosis.ranked],
        "devices": [
            _device(d, top, diagnosis.for_device(d), memory_of(o, d.device))
            for o in analysed
            for d in o.devices
        ],
        "ranks": _ranks(job),
        "jobs": [_job(j) for j in (job.jobs or [Job(job.outcomes, job.cross)])],
        "collectives": [
            _collective(s, c) for o in analysed for s in o.summaries for c in s.comm_stats
        ],
    }


def _opt_us(ns: int | float | None) -> msgspec.Raw | None:
    return None if ns is None else us(round(ns))


def _per_rank(s: RankSummary, cross: CrossRank | None) -> dict[str, Any]:
    steps = list(s.step_dur_ns)
    rank = s.rank if cross is not None and s.rank in cross.ranks else None
    score = cross.scores.get(rank) if cross is not None and rank is not None else None
    caused = cross.wait_caused_ns.get(rank) if cross is not None and rank is not None else None
    waited = cross.waited_ns.get(rank) if cross is not None and rank is not None else None
    offset = cross.clock_offset_ns.get(rank) if cross is not None and rank is not None else None
    return {
        "rank": s.rank,
        "world_size": s.world_size,
        "trace": s.trace,
        "device": s.device,
        "gpu": s.gpu,
        "goodput": s.goodput,
        "window_start_us": us(s.window_start_ns),
        "window_us": us(s.window_ns),
        "breakdown_us": _breakdown(s.breakdown),
        "idle_causes_us": _causes(s.idle_causes),
        "comm_total_us": us(s.comm_total_ns),
        "comm_exposed_us": us(s.breakdown.communication_ns),
        "step_median_us": _opt_us(statistics.median(steps) if steps else None),
        "step_dur_us": _us_list(steps),
        "straggler_score": score,
        "wait_caused_us": _opt_us(caused),
        "waited_us": _opt_us(waited),
        "clock_offset_us": _opt_us(offset),
    }


def _extreme(e: Extreme) -> dict[str, Any]:
    # Goodput is a share; every other category is a time in ns, written in us.
    low: Any
    mid: Any
    high: Any
    if e.category == "goodput":
        low, mid, high = e.min, e.median, e.max
    else:
        low, mid, high = _opt_us(e.min), _opt_us(e.median), _opt_us(e.max)
    return {
        "category": e.category,
        "min": low,
        "min_rank": e.min_rank,
        "median": mid,
        "max": high,
        "max_rank": e.max_rank,
    }


def _ranks(job: Job | JobResult) -> dict[str, Any]:
    """The cross-rank view of one job; of a run of several jobs, its ranks without one."""
    several = isinstance(job, JobResult) and len(job.jobs) > 1
    cross = None if several else job.cross
    summaries = [s for o in job.analysed for s in o.summaries]
    return {
        "count": len({s.rank for s in summaries if s.rank is not None}),
        "per_rank": [_per_rank(s, cross) for s in summaries],
        "extremes": [_extreme(e) for e in cross.extremes] if cross else [],
        "stragglers": [
            {
                "rank": st.rank,
                "score": st.score,
                "wait_caused_us": _opt_us(st.wait_caused_ns),
                "wait_per_step_us": _opt_us(st.wait_per_step_ns),
                "last_share": st.last_share,
            }
            for st in (cross.stragglers if cross else [])
        ],
        "matching": cross.matching if cross else None,
        "failed": [{"path": o.path, "reason": o.error} for o in job.failed],
        "warnings": (
            [f"{len(job.jobs)} jobs: each job's cross-rank view is under jobs"]
            if isinstance(job, JobResult) and several
            else list(cross.warnings)
            if cross
            else []
        ),
    }


def _job(job: Job) -> dict[str, Any]:
    return {
        "ranks": job.ranks,
        "world_size": job.world_size,
        "traces": [o.path for o in job.analysed],
        "notes": job.notes,
        "cross_rank": _ranks(job),
    }


def _collective(s: RankSummary, c: CollectiveStat) -> dict[str, Any]:
    peak = link_peak_gbps(s.gpu, warn=False)
    return {
        "type": c.type,
        "rank": s.rank,
        "trace": s.trace,
        "device": s.device,
        "count": c.count,
        "total_us": us(c.total_ns),
        "exposed_us": us(c.exposed_ns),
        "msg_bytes": c.msg_bytes,
        "algbw_gbps": c.algbw_gbps,
        "busbw_gbps": c.busbw_gbps,
        "link_peak_gbps": peak,
        "busbw_of_peak": c.busbw_gbps / peak if peak and c.busbw_gbps is not None else None,
    }


def encode_document(document: dict[str, Any]) -> bytes:
    """Indented JSON bytes, newline-terminated."""
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"
