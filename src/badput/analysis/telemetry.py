"""Telemetry samples inside a trace window: per-metric mean, min and max.

Clock domains. The sampler stamps each sample with the wall clock, epoch nanoseconds
(`time.time_ns()`). Kineto takes its timestamps from the system clock too, converting CUPTI's
GPU timestamps to "time since unix epoch" (libkineto `CuptiActivityPlatform.h`,
`unixEpochTimestamp`). Older Kineto writes `ts` as epoch microseconds; newer Kineto writes
`ts` relative to `ChromeTraceBaseTime` (the system-clock time at program load, `output_json.cpp`
`transToRelativeTime`) and records that base as the top-level `baseTimeNanoseconds`. So a
window is on the epoch clock either directly (values after the year 2000) or after adding
`baseTimeNanoseconds`; without the base, relative times cannot be aligned and a warning says
so. Samples and trace must come from the same machine (or NTP-synchronised ones): the wall
clocks of two hosts differ by their offset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from badput.analysis.results import DeviceAnalysis

__all__ = [
    "EPOCH_MIN_NS",
    "MetricStats",
    "TelemetryAlignment",
    "align_devices",
    "align_telemetry",
    "metric_unit",
]

# 2000-01-01T00:00:00Z in epoch ns: a larger timestamp is on the epoch clock, a smaller one is
# relative (to a base time, or to boot for CLOCK_MONOTONIC).
EPOCH_MIN_NS = 946_684_800 * 10**9

_UNITS = (
    ("_bytes_per_s", "bytes/s"),
    ("_pct", "%"),
    ("_mhz", "MHz"),
    ("_bytes", "bytes"),
    ("_mw", "mW"),
    ("_temp_c", "C"),
)


def metric_unit(column: str) -> str:
    """The unit of a telemetry column, from its name's suffix ("" if none)."""
    for suffix, unit in _UNITS:
        if column.endswith(suffix):
            return unit
    return ""


@dataclass(frozen=True)
class MetricStats:
    """One metric inside the window: mean, min and max over the samples that have a value."""

    name: str
    unit: str
    mean: float
    min: float
    max: float
    samples: int


@dataclass(frozen=True)
class TelemetryAlignment:
    """Telemetry inside a trace window; times in epoch ns (None when not aligned).

    `clock` says how the window was put on the epoch clock: "epoch", "base_time" or
    "unaligned".
    """

    window_start_ns: int | None
    window_end_ns: int | None
    clock: str
    samples_in_window: int
    samples_total: int
    metrics: list[MetricStats] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def align_telemetry(
    columns: Mapping[str, Sequence[float | int | None]],
    window_start_ns: int,
    window_end_ns: int,
    *,
    base_time_ns: int | None = None,
) -> TelemetryAlignment:
    """Per-metric statistics of the samples inside a trace window.

    Args:
        columns: the sampler's columns (`ts_ns` in epoch ns, then one list per metric).
        window_start_ns: window start, as the trace has it (epoch, or relative to its base).
        window_end_ns: window end, same clock.
        base_time_ns: the trace's `baseTimeNanoseconds` (epoch ns), when its times are
            relative to it.

    Returns:
        The alignment; `cpu_util_pct` is added, the mean over cores of each sample.
    """
    ts = [int(t) for t in columns.get("ts_ns", []) if t is not None]
    total = len(ts)
    warnings: list[str] = []
    if window_start_ns >= EPOCH_MIN_NS:
        start, end, clock = window_start_ns, window_end_ns, "epoch"
    elif base_time_ns is not None:
        start, end, clock = (
            window_start_ns + base_time_ns,
            window_end_ns + base_time_ns,
            "base_time",
        )
    else:
        warnings.append(
            "the trace's times are not epoch times (newer Kineto writes them relative to "
            "baseTimeNanoseconds, which was not given): the telemetry cannot be aligned"
        )
        return TelemetryAlignment(None, None, "unaligned", 0, total, [], warnings)
    inside = [
        i for i, t in enumerate(columns.get("ts_ns", [])) if t is not None and start <= t <= end
    ]
    if not inside:
        span = f"{min(ts)}..{max(ts)}" if ts else "nothing"
        warnings.append(
            f"no telemetry sample inside the trace window ({start}..{end} epoch ns; the samples "
            f"cover {span}): recorded on another machine or at another time?"
        )
        return TelemetryAlignment(start, end, clock, 0, total, [], warnings)
    if len(inside) < 3:
        warnings.append(
            f"only {len(inside)} telemetry sample(s) inside the window: sample faster (--hz) "
            "or analyse a longer window"
        )
    derived = dict(columns)
    cores = [c for c in columns if c.startswith("cpu") and c.endswith("_util_pct")]
    if cores:
        per_sample: list[float | int | None] = []
        for i in range(len(columns["ts_ns"])):
            vals = [v for c in cores if (v := columns[c][i]) is not None]
            per_sample.append(sum(vals) / len(vals) if vals else None)
        derived["cpu_util_pct"] = per_sample
    metrics = []
    for name, values in derived.items():
        if name == "ts_ns":
            continue
        got = [
            float(v)
            for i in inside
            if i < len(values) and (v := values[i]) is not None and not math.isnan(float(v))
        ]
        if got:
            metrics.append(
                MetricStats(
                    name, metric_unit(name), sum(got) / len(got), min(got), max(got), len(got)
                )
            )
    return TelemetryAlignment(start, end, clock, len(inside), total, metrics, warnings)


def align_devices(
    columns: Mapping[str, Sequence[float | int | None]],
    devices: Sequence[DeviceAnalysis],
    *,
    base_time_ns: int | None = None,
) -> list[TelemetryAlignment]:
    """`align_telemetry` over each device's analysed window, in the order of `devices`.

    Args:
        columns: the sampler's columns.
        devices: the per-GPU analyses (`window_start_ns`, `window_ns`).
        base_time_ns: the trace's `baseTimeNanoseconds`, when its times are relative.
    """
    return [
        align_telemetry(
            columns,
            d.window_start_ns,
            d.window_start_ns + d.window_ns,
            base_time_ns=base_time_ns,
        )
        for d in devices
    ]
