"""Telemetry beside the breakdown (`analyze --telemetry`), and the sampler's own summary.

The metrics table goes through `badput.report.table.fitted` at the console's width: metric
names give way (they fold at `_`, never shortened, since they are the keys of the JSON and
the telemetry file), and the numbers always print in full.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from badput.analysis.results import DeviceAnalysis
from badput.analysis.telemetry import TelemetryAlignment
from badput.report.table import Col, fitted_table

__all__ = [
    "alignment_document",
    "render_alignment",
    "render_device_telemetry",
    "render_sampler_summary",
    "telemetry_document",
]

_PER_CORE = re.compile(r"cpu\d+_util_pct$")


def alignment_document(a: TelemetryAlignment) -> dict[str, Any]:
    """The alignment as a JSON-ready dict (every metric, per-core CPU included)."""
    return asdict(a)


def _fmt(value: float, unit: str) -> str:
    """A value in a readable unit: bytes as GiB/MiB, bytes/s as MB/s, mW as W."""
    if unit == "bytes":
        return f"{value / 2**30:,.2f} GiB" if value >= 2**30 else f"{value / 2**20:,.1f} MiB"
    if unit == "bytes/s":
        return f"{value / 1e6:,.1f} MB/s"
    if unit == "mW":
        return f"{value / 1000:,.1f} W"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:,.0f} {unit}".strip()


def _fold_names(cells: list[str], width: int) -> list[str]:
    """Metric names on lines of at most `width`, broken after a `_` or a blank where one fits."""
    out = []
    for cell in cells:
        lines: list[str] = []
        rest = cell
        while cell_len(rest) > width:
            cut = max(rest.rfind("_", 0, width) + 1, rest.rfind(" ", 0, width + 1))
            cut = cut if cut > 0 else width
            lines.append(rest[:cut].rstrip())
            rest = rest[cut:].lstrip()
        lines.append(rest)
        out.append("\n".join(lines))
    return out


def render_alignment(a: TelemetryAlignment, console: Console) -> None:
    """The telemetry metrics inside the trace window (per-core CPU columns folded into one)."""
    console.print(
        f"telemetry: {a.samples_in_window} of {a.samples_total} samples inside the window "
        f"(clock: {a.clock})"
    )
    if a.metrics:
        cols = [
            Col("metric", elastic=True, floor=12, shrink=_fold_names),
            *(Col(h, right=True) for h in ("mean", "min", "max")),
        ]
        rows = [
            [
                "cpu_util_pct (mean of cores)" if m.name == "cpu_util_pct" else m.name,
                _fmt(m.mean, m.unit),
                _fmt(m.min, m.unit),
                _fmt(m.max, m.unit),
            ]
            for m in a.metrics
            if not _PER_CORE.match(m.name)
        ]
        console.print(fitted_table(cols, rows, console.width))
    for w in a.warnings:
        console.print(f"warning: {w}", style="yellow")


def telemetry_document(
    devices: Sequence[DeviceAnalysis], alignments: Sequence[TelemetryAlignment]
) -> list[dict[str, Any]]:
    """One entry per GPU: trace, rank, device, then the alignment's fields."""
    return [
        {"trace": d.trace, "rank": d.rank, "device": d.device, **alignment_document(a)}
        for d, a in zip(devices, alignments, strict=True)
    ]


def render_device_telemetry(
    devices: Sequence[DeviceAnalysis], alignments: Sequence[TelemetryAlignment], console: Console
) -> None:
    """The telemetry of each GPU's window, under a line naming the GPU."""
    for d, a in zip(devices, alignments, strict=True):
        rank = f"rank {d.rank} " if d.rank is not None else ""
        console.print(Text.assemble((d.trace, "bold"), f" {rank}GPU {d.device}"))
        render_alignment(a, console)


def render_sampler_summary(s: dict[str, Any], console: Console) -> None:
    """One line on what the sampler recorded and what it cost, then what it lost."""
    share = s.get("cpu_share_of_one_core")
    cost = f"{100 * share:.2f} % of one core" if share is not None else "unknown"
    hz = s.get("hz_achieved")
    console.print(
        f"badput telemetry: {s.get('samples', 0)} samples at "
        f"{hz if hz is not None else '-'} Hz (asked {s.get('hz_requested')}), "
        f"{s.get('missed_slots', 0)} slots missed; sampler CPU {s.get('sampler_cpu_s', 0):.3f} s "
        f"over {s.get('wall_s', 0):.1f} s = {cost}"
    )
    for name, n in sorted(s.get("errors", {}).items()):
        console.print(f"errors: {name}: {n} samples failed", style="yellow")
    for lost in s.get("lost", []):
        console.print(f"lost: {lost}", style="yellow")
