"""The `badput.analysis/1` JSON document (pinned by tests; fields may be added, never changed)."""

from __future__ import annotations

from typing import Any

import msgspec

from badput import __version__
from badput.analysis.results import Breakdown, DeviceAnalysis, IdleCauses
from badput.diagnose import Diagnosis, Finding
from badput.trace.model import Trace

__all__ = ["SCHEMA", "analysis_document", "encode_document", "us"]

SCHEMA = "badput.analysis/1"


def us(ns: int) -> msgspec.Raw:
    """Microseconds as an exact JSON number: `1712195495519689047` ns -> `1712195495519689.047`.

    Going through float64 would lose nanoseconds of epoch timestamps; the text keeps them.
    """
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(int(ns)), 1000)
    text = f"{sign}{whole}.{frac:03d}".rstrip("0").rstrip(".") if frac else f"{sign}{whole}"
    return msgspec.Raw(text.encode())


def _breakdown(b: Breakdown) -> dict[str, Any]:
    return {
        "compute": us(b.compute_ns),
        "communication": us(b.communication_ns),
        "memory": us(b.memory_ns),
        "idle": us(b.idle_ns),
    }


def _causes(c: IdleCauses) -> dict[str, Any]:
    return {
        "runtime": us(c.runtime_ns),
        "dataloader": us(c.dataloader_ns),
        "cpu": us(c.cpu_ns),
        "other": us(c.other_ns),
    }


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
        "fix": f.fix,
        "refs": f.refs,
    }


def _device(d: DeviceAnalysis, top: int, findings: list[Finding]) -> dict[str, Any]:
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
        "steps": [
            {
                "name": s.name,
                "start_us": us(s.start_ns),
                "dur_us": us(s.dur_ns),
                "breakdown_us": _breakdown(s.breakdown),
                "idle_causes_us": _causes(s.idle_causes),
            }
            for s in d.steps
        ],
        "dropped_steps": d.dropped_steps,
        "kernels": [
            {
                "name": k.name,
                "category": k.category,
                "count": k.count,
                "total_us": us(k.total_ns),
                "mean_us": k.mean_ns / 1000,
            }
            for k in kernels
        ],
        "kernel_total_us": us(d.kernel_ns),
        "short_kernel_share": d.short_kernel_share,
        "warnings": d.warnings,
        "findings": [finding_dict(f) for f in findings],
    }


def analysis_document(
    results: list[tuple[Trace, list[DeviceAnalysis]]],
    diagnosis: Diagnosis | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The JSON document for analyzed traces.

    Args:
        results: each trace with its per-device analyses.
        diagnosis: findings of the same results; none listed when None.
        top: kernels listed per device (0 lists all).
    """
    diagnosis = diagnosis or Diagnosis()
    return {
        "schema": SCHEMA,
        "badput_version": __version__,
        "traces": [
            {
                "path": trace.path,
                "rank": trace.rank,
                "world_size": trace.world_size,
                "events": len(trace),
                "warnings": trace.warnings,
            }
            for trace, _ in results
        ],
        "findings": [finding_dict(f) for f in diagnosis.ranked],
        "devices": [
            _device(d, top, diagnosis.for_device(d)) for _, devices in results for d in devices
        ],
    }


def encode_document(document: dict[str, Any]) -> bytes:
    """Indented JSON bytes, newline-terminated."""
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"
