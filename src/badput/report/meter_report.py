"""The meter's summary as a table, fitted to the console's width, then its figures in lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from badput.report.table import Col, fitted

__all__ = ["render_summary"]

#: What the wall time of a summary covers (`badput.meter.summary.build_summary`).
_WINDOW = "from the meter's start to its last step, data wait or phase"


def render_summary(s: dict[str, Any], console: Console) -> None:
    """Print where the wall time went, then steps, throughput, precision and MFU.

    Every figure the summary lacks is named with the reason it gives (`missing`), never
    left out silently.
    """
    wall = s["wall_s"] or 0.0
    cols = [
        Col("", elastic=True, floor=12),
        Col("s", right=True),
        Col("of wall", right=True),
    ]

    def row(label: str, seconds: float) -> list[str]:
        return [label, f"{seconds:,.2f}", f"{100 * seconds / wall:5.1f} %" if wall else "–"]

    rows = [row("productive steps", s["productive_s"])]
    for category, seconds in sorted(s["badput_s"].items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            rows.append(row(f"  {category}", seconds))
    table = fitted(cols, rows, console.width)
    console.print(Text("badput meter", style="bold"))
    console.print(table.table)
    goodput = s["goodput"]
    line = f"wall {wall:,.2f} s ({_WINDOW}) · {s['steps']:,} steps"
    if goodput is not None:
        line += f" · goodput {100 * goodput:.1f} %"
    console.print(Text(line))
    st = s["step_time_s"]
    if st["median"] is not None:
        console.print(
            Text(
                f"step mean {1000 * st['mean']:,.1f} ms, median {1000 * st['median']:,.1f}, "
                f"p90 {1000 * st['p90']:,.1f}, ideal {1000 * st['ideal']:,.1f} "
                f"(median, p90, ideal: last {s.get('window_steps', 0):,} steps)"
            )
        )
    missing: dict[str, str] = s.get("missing") or {}
    for key, unit in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        if s.get(key) is not None:
            console.print(Text(f"{s[key]:,.1f} {unit}"))
        elif key in missing:
            console.print(Text(f"{unit}: not measured, {missing[key]}", style="dim"))
    source = s.get("precision_source")
    precision = s.get("precision") or "unknown"
    console.print(Text(f"precision {precision}" + (f" ({source})" if source else "")))
    if s.get("mfu") is not None:
        console.print(
            Text(
                f"MFU {100 * s['mfu']:.1f} % of {s['mfu_denominator_tflops']:,.1f} TFLOP/s "
                f"({s['precision']}, {s['gpu']})"
            )
        )
    elif "mfu" in missing:
        console.print(Text(f"MFU: not measured, {missing['mfu']}", style="dim"))
    for lost in s.get("lost", []):
        console.print(Text(f"lost: {lost}", style="yellow"))
