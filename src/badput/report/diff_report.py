"""`badput diff` output: a text report (rich) and the `badput.diff/1` JSON document."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput import __version__
from badput.analysis.diff import (
    MIN_DELTA_NS,
    MIN_REL_CHANGE,
    Change,
    DeviceDiff,
    KernelChange,
    TraceDiff,
)
from badput.report.json_report import us
from badput.report.text import _short
from badput.report.units import format_ms as _ms
from badput.report.units import format_share

__all__ = ["SCHEMA", "diff_document", "render_diff"]

SCHEMA = "badput.diff/1"


def _us(ns: float) -> Any:
    # Per-step values are means: rounded to the nanosecond, then written exactly.
    return us(round(ns))


def _change(c: Change) -> dict[str, Any]:
    return {"before": _us(c.before_ns), "after": _us(c.after_ns), "delta": _us(c.delta_ns)}


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {
        "name": k.name,
        "category": k.category,
        "count_before": k.count_before,
        "count_after": k.count_after,
        "per_step_before_us": _us(k.per_step_before_ns),
        "per_step_after_us": _us(k.per_step_after_ns),
        "delta_per_step_us": _us(k.delta_per_step_ns),
        "rel_change": k.rel_change,
        "mean_before_us": _us(k.mean_before_ns),
        "mean_after_us": _us(k.mean_after_ns),
    }


def _cut(items: list[KernelChange], top: int) -> list[KernelChange]:
    return items[: top if top > 0 else None]


def _device(d: DeviceDiff, top: int) -> dict[str, Any]:
    return {
        "trace_before": d.trace_before,
        "trace_after": d.trace_after,
        "device_before": d.device_before,
        "device_after": d.device_after,
        "per": d.per,
        "steps_before": d.steps_before,
        "steps_after": d.steps_after,
        "goodput": {
            "before": d.goodput_before,
            "after": d.goodput_after,
            "delta": d.goodput_delta,
        },
        "breakdown_us": {c.name: _change(c) for c in d.breakdown},
        "idle_causes_us": {c.name: _change(c) for c in d.idle_causes},
        "step_time_us": None
        if d.step_mean is None or d.step_median is None
        else {"mean": _change(d.step_mean), "median": _change(d.step_median)},
        "launches": {
            "before": d.launches_before,
            "after": d.launches_after,
            "delta": d.launches_after - d.launches_before,
        },
        "kernels": {
            "slower": [_kernel(k) for k in _cut(d.slower, top)],
            "faster": [_kernel(k) for k in _cut(d.faster, top)],
            "appeared": [_kernel(k) for k in _cut(d.appeared, top)],
            "disappeared": [_kernel(k) for k in _cut(d.disappeared, top)],
            "counts": {
                "slower": len(d.slower),
                "faster": len(d.faster),
                "appeared": len(d.appeared),
                "disappeared": len(d.disappeared),
                "unchanged": d.unchanged,
            },
        },
        "warnings": list(d.warnings),
    }


def diff_document(diff: TraceDiff, top: int = 10) -> dict[str, Any]:
    """The `badput.diff/1` document: times in microseconds per step (or per window, see `per`).

    Args:
        diff: the comparison.
        top: kernels to list per group (0: all); the `counts` always cover every kernel.
    """
    return {
        "schema": SCHEMA,
        "badput_version": __version__,
        "threshold": {"min_rel_change": MIN_REL_CHANGE, "min_delta_per_step_us": _us(MIN_DELTA_NS)},
        "warnings": list(diff.warnings),
        "devices": [_device(d, top) for d in diff.devices],
    }


def _signed_ms(ns: float) -> str:
    return f"{ns / 1e6:+,.2f}"


def _kernel_table(title: str, items: list[KernelChange], top: int) -> Table:
    t = Table(box=None, pad_edge=False, header_style="bold", title=title, title_justify="left")
    t.add_column("GPU operation", no_wrap=True, overflow="ellipsis", max_width=50)
    t.add_column("category", no_wrap=True)
    t.add_column("count", justify="right", no_wrap=True)
    t.add_column("us/step", justify="right", no_wrap=True)
    t.add_column("Δ us/step", justify="right", no_wrap=True)
    t.add_column("mean us", justify="right", no_wrap=True)
    for k in _cut(items, top):
        rel = "" if k.rel_change is None else f" ({100 * k.rel_change:+.0f} %)"
        t.add_row(
            _short(k.name),
            k.category,
            f"{k.count_before} → {k.count_after}",
            f"{k.per_step_before_ns / 1000:,.1f} → {k.per_step_after_ns / 1000:,.1f}",
            f"{k.delta_per_step_ns / 1000:+,.1f}{rel}",
            f"{k.mean_before_ns / 1000:,.1f} → {k.mean_after_ns / 1000:,.1f}",
        )
    return t


def _render_device(d: DeviceDiff, console: Console, top: int) -> None:
    console.rule(f"GPU {d.device_before} → GPU {d.device_after}")
    console.print(f"before: {d.trace_before} ({d.steps_before} steps)")
    console.print(f"after:  {d.trace_after} ({d.steps_after} steps)")
    delta = d.goodput_delta
    dtext = "" if delta is None else f"  ({100 * delta:+.1f} points)"
    console.print(
        Text(f"goodput {format_share(d.goodput_before)} → {format_share(d.goodput_after)}{dtext}")
    )
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column(f"ms per {d.per}")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    t.add_column("Δ", justify="right")
    rows = list(d.breakdown) + [
        Change(f"  └ idle: {c.name}", c.before_ns, c.after_ns) for c in d.idle_causes
    ]
    if d.step_mean is not None and d.step_median is not None:
        rows += [d.step_mean, d.step_median]
    for c in rows:
        t.add_row(c.name, _ms(c.before_ns), _ms(c.after_ns), _signed_ms(c.delta_ns))
    t.add_row(
        f"launches per {d.per}",
        f"{d.launches_before:,.1f}",
        f"{d.launches_after:,.1f}",
        f"{d.launches_after - d.launches_before:+,.1f}",
    )
    console.print(t)
    for title, items in (
        ("slower", d.slower),
        ("faster", d.faster),
        ("appeared", d.appeared),
        ("disappeared", d.disappeared),
    ):
        if items:
            console.print()
            console.print(_kernel_table(f"{title} ({len(items)})", items, top))
    console.print(
        Text(
            f"{d.unchanged} operations unchanged (under {100 * MIN_REL_CHANGE:.0f} % or "
            f"{MIN_DELTA_NS / 1000:.0f} us per {d.per})",
            style="dim",
        )
    )
    for w in d.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))


def render_diff(diff: TraceDiff, console: Console, top: int = 10) -> None:
    """Print the comparison: goodput, categories, step time, launches, kernel changes.

    Args:
        diff: the comparison.
        console: where to print.
        top: kernels to list per group (0: all).
    """
    for w in diff.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    for d in diff.devices:
        _render_device(d, console, top)
