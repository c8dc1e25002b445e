"""The meter's summary as a table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["render_summary"]


def render_summary(s: dict[str, Any], console: Console) -> None:
    """Print where the wall time went, then steps, throughput and MFU."""
    wall = s["wall_s"] or 0.0
    t = Table(
        box=None, pad_edge=False, header_style="bold", title="badput meter", title_justify="left"
    )
    t.add_column("")
    t.add_column("s", justify="right")
    t.add_column("of wall", justify="right")

    def row(label: str, seconds: float) -> None:
        t.add_row(label, f"{seconds:,.2f}", f"{100 * seconds / wall:5.1f} %" if wall else "–")

    row("productive steps", s["productive_s"])
    for category, seconds in sorted(s["badput_s"].items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            row(f"  {category}", seconds)
    console.print(t)
    goodput = s["goodput"]
    line = f"wall {wall:,.2f} s · {s['steps']} steps"
    if goodput is not None:
        line += f" · goodput {100 * goodput:.1f} %"
    st = s["step_time_s"]
    if st["median"] is not None:
        line += (
            f" · step mean {1000 * st['mean']:.1f} ms, median {1000 * st['median']:.1f}, "
            f"p90 {1000 * st['p90']:.1f}, ideal {1000 * st['ideal']:.1f}"
        )
    console.print(line)
    if s.get("samples_per_s"):
        console.print(f"{s['samples_per_s']:,.1f} samples/s")
    if s.get("tokens_per_s"):
        console.print(f"{s['tokens_per_s']:,.1f} tokens/s")
    if s.get("mfu") is not None:
        console.print(
            f"MFU {100 * s['mfu']:.1f} % of {s['mfu_denominator_tflops']:,.1f} TFLOP/s "
            f"({s['precision']}, {s['gpu']})"
        )
    for lost in s.get("lost", []):
        console.print(f"lost: {lost}", style="yellow")
