"""`badput roofline` output: a rich text table, a JSON document, and an HTML page.

The JSON document is `badput.roofline/1`; the page is self-contained, with an inline-SVG
log-log roofline (no script, no network).

Every string from the CSV (kernel names, rule texts, device names) is escaped in the page.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from badput import __version__
from badput.analysis.roofline import KernelRoofline, Roof, RooflineAnalysis, RuleFinding
from badput.report.html_report import PAGE_CSS, html_table
from badput.report.names import distinct_names
from badput.report.table import Col, fitted
from badput.report.text import _short

__all__ = [
    "SCHEMA",
    "encode_roofline",
    "render_roofline",
    "render_roofline_html",
    "roofline_document",
]

SCHEMA = "badput.roofline/1"

_BOUND_STYLE = {
    "memory-bound": "cyan",
    "compute-bound": "magenta",
    "latency-bound": "yellow",
    "unknown": "dim",
}
_BOUND_COLOUR = {
    "memory-bound": "#2f6fb0",
    "compute-bound": "#c0392b",
    "latency-bound": "#b7950b",
    "unknown": "#777777",
}


def _r(value: float | None, digits: int = 9) -> float | None:
    """A float rounded to `digits` significant digits for JSON; `None` stays `None`."""
    if value is None or not math.isfinite(value):
        return None
    if value == 0:
        return 0.0
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


def _pct(share: float | None) -> float | None:
    return None if share is None else _r(100 * share, 4)


def _kernel(k: KernelRoofline) -> dict[str, Any]:
    n = k.kernel
    return {
        "id": n.id,
        "name": n.name,
        "process_id": n.process_id,
        "device": n.device,
        "device_name": n.device_name,
        "cc": n.cc,
        "block_size": n.block_size,
        "grid_size": n.grid_size,
        "gpu": k.roof.label,
        "gpu_how": k.roof.how,
        "duration_us": _us(n.dur_ns),
        "flops": None if n.flops is None else {c: _r(v) for c, v in n.flops.items()},
        "achieved_tflops": _r(k.achieved_tflops),
        "dram_gbps": _r(k.dram_gbps),
        "dram_bytes": _r(n.dram_bytes),
        "arithmetic_intensity": _r(k.arithmetic_intensity),
        "bound": k.bound,
        "bound_basis": k.bound_basis,
        "precision": k.precision,
        "precision_note": k.precision_note,
        "precision_basis": k.precision_basis,
        "bound_note": k.bound_note,
        "roof_side": k.roof_side,
        "tensor_ops": None if n.tensor_ops is None else {c: _r(v) for c, v in n.tensor_ops.items()},
        "tensor_kinds": list(n.tensor_kinds),
        "peak_tflops": _r(k.peak_tflops),
        "peak_dram_gbps": _r(k.roof.peak_gbps),
        "ridge_flop_per_byte": _r(k.ridge_flop_per_byte),
        "attainable_tflops": _r(k.attainable_tflops),
        "roof_share": _r(k.roof_share),
        "distance_to_roof": _r(k.distance_to_roof),
        "dram_share": _r(k.dram_share),
        "sol_compute_pct": n.sol_compute_pct,
        "sol_memory_pct": n.sol_memory_pct,
        "dram_throughput_pct": n.dram_throughput_pct,
        "occupancy_pct": n.achieved_occupancy_pct,
        "theoretical_occupancy_pct": n.theoretical_occupancy_pct,
        "sm_frequency_hz": n.sm_frequency_hz,
        "tensor_pipe_used": n.tensor_pipe_used,
        "sources": dict(n.sources),
        "rules": [
            {
                "name": r.name,
                "type": r.type,
                "section": r.section,
                "description": r.description,
                "speedup_type": r.speedup_type,
                "estimated_speedup_pct": r.estimated_speedup_pct,
            }
            for r in n.rules
        ],
    }


def _finding(rank: int, f: RuleFinding) -> dict[str, Any]:
    return {
        "rank": rank,
        "kernel_id": f.kernel_id,
        "kernel": f.kernel_name,
        "rule": f.rule.name,
        "type": f.rule.type,
        "section": f.rule.section,
        "speedup_type": f.rule.speedup_type,
        "estimated_speedup_pct": f.rule.estimated_speedup_pct,
        "duration_us": _us(f.dur_ns),
        "est_savings_us": _us(f.savings_ns),
        "description": f.rule.description,
    }


def roofline_document(analysis: RooflineAnalysis, top: int = 0) -> dict[str, Any]:
    """The `badput.roofline/1` document: every kernel, and the findings (`top` of them, 0: all).

    Units are in the key names: `_us`, `_tflops` (1e12 FLOP/s), `_gbps` (1e9 B/s), `_pct`;
    shares (`roof_share`, `dram_share`) are fractions.
    """
    findings = analysis.findings if top <= 0 else analysis.findings[:top]
    return {
        "schema": SCHEMA,
        "badput_version": __version__,
        "file": analysis.path,
        "page": analysis.page,
        "skipped_lines": analysis.skipped_lines,
        "warnings": list(analysis.warnings),
        "kernels": [_kernel(k) for k in analysis.kernels],
        "findings": [_finding(i, f) for i, f in enumerate(findings, start=1)],
        "findings_total": len(analysis.findings),
    }


def encode_roofline(analysis: RooflineAnalysis, top: int = 0) -> str:
    """The JSON document as text, with a final newline."""
    return json.dumps(roofline_document(analysis, top), indent=2, ensure_ascii=False) + "\n"


# ---- text ----------------------------------------------------------------------------------------


def _f(value: float | None, fmt: str = ",.2f") -> str:
    return "–" if value is None else format(value, fmt)


def _roof_line(roof: Roof, precisions: Sequence[str]) -> str:
    peaks = ", ".join(
        f"{p} {_f(roof.peak_tflops(p), ',.1f')} TFLOP/s" for p in dict.fromkeys(precisions)
    )
    return f"GPU {roof.label} ({roof.how}): DRAM {roof.peak_gbps:,.0f} GB/s, {peaks}"


_KERNEL_COLS = (
    Col("ID", right=True),
    Col("kernel", elastic=True, floor=12, shrink=distinct_names),
    Col("roof"),
    Col("time us", right=True),
    Col("TFLOP/s", right=True),
    Col("DRAM GB/s", right=True, drop=1),
    Col("FLOP/B", right=True, drop=2),
    Col("bound"),
    Col("of roof", right=True),
    Col("SOL SM/mem %", right=True),
    Col("occ. %", right=True, drop=3),
)

_FINDING_COLS = (
    Col("#", right=True),
    Col("rule", elastic=True, floor=12),
    Col("on ID", right=True),
    Col("type", drop=1),
    Col("est. speedup", right=True),
    Col("saves us", right=True),
)


def _kernel_row(k: KernelRoofline) -> list[str]:
    n = k.kernel
    return [
        str(n.id),
        n.name[5:] if n.name.startswith("void ") else n.name,
        k.precision,
        _f(None if n.dur_ns is None else n.dur_ns / 1000, ",.1f"),
        _f(k.achieved_tflops, ".3g"),
        _f(k.dram_gbps, ",.1f"),
        _f(k.arithmetic_intensity, ".3g"),
        k.bound,
        "–" if k.roof_share is None else f"{100 * k.roof_share:.1f} %",
        f"{_f(n.sol_compute_pct, '.1f')} / {_f(n.sol_memory_pct, '.1f')}",
        _f(n.achieved_occupancy_pct, ".1f"),
    ]


def render_roofline(analysis: RooflineAnalysis, console: Console, top: int = 10) -> None:
    """Kernels on their rooflines, then ncu's findings ranked by estimated saving.

    Both tables fit the console (`badput.report.table.fitted`): kernel names give way first,
    numbers are never cut.

    Args:
        analysis: The roofline analysis.
        console: Where to print.
        top: Findings to list (0: all).
    """
    width = console.width
    console.print(
        f"[bold]badput roofline[/bold]: {analysis.path} ({analysis.page} page, "
        f"{len(analysis.kernels)} kernel{'s' if len(analysis.kernels) != 1 else ''})",
        markup=True,
        highlight=False,
    )
    for roof in analysis.roofs:
        used = [k.precision for k in analysis.kernels if k.roof == roof]
        console.print(_roof_line(roof, used), markup=False, highlight=False)
    fit = fitted(_KERNEL_COLS, [_kernel_row(k) for k in analysis.kernels], width)
    console.print(fit.table)
    if (note := fit.note()) is not None:
        console.print(note, style="dim", markup=False, highlight=False)
    for k in analysis.kernels:
        console.print(f"  ID {k.kernel.id}: {_basis(k)}", markup=False, highlight=False)
    shown = analysis.findings if top <= 0 else analysis.findings[:top]
    if shown:
        console.print()
        console.print(
            "[bold]ncu findings[/bold], ranked by estimated saving = estimated speedup × "
            "kernel time (for a 'local' estimate, an upper bound)",
            markup=True,
            highlight=False,
        )
        rows = [
            [
                str(i),
                x.rule.name,
                str(x.kernel_id),
                ", ".join(p for p in (x.rule.type, x.rule.speedup_type) if p),
                f"{_f(x.rule.estimated_speedup_pct, '.2f')} %",
                _f(x.savings_ns / 1000, ",.1f"),
            ]
            for i, x in enumerate(shown, start=1)
        ]
        fit = fitted(_FINDING_COLS, rows, width)
        console.print(fit.table)
        if (note := fit.note()) is not None:
            console.print(note, style="dim", markup=False, highlight=False)
        for i, x in enumerate(shown, start=1):
            console.print(f"{i:>3}. {_sentence(x.rule.description)}", markup=False, highlight=False)
        more = len(analysis.findings) - len(shown)
        if more > 0:
            console.print(f"{more} more: --top 0 or --format json lists them all")
    for w in analysis.warnings:
        console.print(f"note: {w}", markup=False, highlight=False, style="yellow")


def _basis(k: KernelRoofline) -> str:
    """How a kernel was placed and bounded, in words: the evidence each decision used."""
    roof = f"roof {k.precision} by {k.precision_basis}: {k.precision_note}"
    if k.bound == "latency-bound":
        side = f" (by the roofline alone: {k.roof_side}-bound)" if k.roof_side else ""
        return f"{roof}; {k.bound_note}{side}"
    share = "; of roof = share of peak DRAM bandwidth" if k.bound == "memory-bound" else ""
    if k.bound_basis == "SOL":
        why = (
            "tensor work is not in the FLOP counters"
            if k.kernel.tensor_pipe_used or k.kernel.flops is not None
            else "no FLOP counters in the CSV"
        )
        return f"{roof}; bound from ncu's SOL percentages ({why}){share}"
    if k.bound_basis == "no FLOPs":
        return f"{roof}; no FLOPs counted{share}"
    return roof


def _sentence(text: str) -> str:
    """The first sentence of a rule text, whole (the console folds it at spaces)."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


# ---- HTML ----------------------------------------------------------------------------------------

_PLOT_W, _PLOT_H = 760, 470
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 20, 50

_ROOFLINE_CSS = """
.roofline text{font-size:11px}
.roof-memory,.roof-compute{stroke-width:2;fill:none}
.ridge{stroke:#999;stroke-dasharray:4 3}
.grid{stroke:#eee}
.rules td,.rules th{text-align:left;vertical-align:top}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _decades(lo: float, hi: float) -> tuple[float, float]:
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))


def _placed(k: KernelRoofline) -> bool:
    """Whether a kernel has a FLOP count that places it on the intensity axis."""
    return bool(k.bound_basis == "roofline" and k.arithmetic_intensity and k.achieved_tflops)


def _axes(analysis: RooflineAnalysis) -> tuple[float, float, float, float]:
    """Plot ranges (intensity in FLOP/byte, performance in FLOP/s), whole decades.

    Every kernel's dot lies inside them: a placed kernel's (intensity, FLOP/s), and a hollow
    dot's height at the left edge (its DRAM share of the memory roof there).
    """
    xs: list[float] = []
    ys: list[float] = []
    for k in analysis.kernels:
        if k.ridge_flop_per_byte:
            xs.append(k.ridge_flop_per_byte)
        if k.peak_tflops:
            ys.append(k.peak_tflops * 1e12)
        if _placed(k):
            assert k.arithmetic_intensity is not None and k.achieved_tflops is not None
            xs.append(k.arithmetic_intensity)
            ys.append(k.achieved_tflops * 1e12)
    if not xs:
        xs = [1.0]
    x_lo, x_hi = _decades(min(xs) / 100, max(xs) * 10)
    bw = max(r.peak_gbps for r in analysis.roofs) * 1e9
    ys.append(bw * x_lo)
    for k in analysis.kernels:
        if not _placed(k) and k.dram_share:
            ys.append(k.dram_share * k.roof.peak_gbps * 1e9 * x_lo)
    y_lo, y_hi = _decades(min(ys) / 10, max(ys) * 2)
    y_lo = max(y_lo, y_hi / 1e12)  # twelve decades at most: a far outlier stays at the floor
    return x_lo, x_hi, y_lo, y_hi


class _Scale:
    def __init__(self, x_lo: float, x_hi: float, y_lo: float, y_hi: float) -> None:
        self.x_lo, self.x_hi, self.y_lo, self.y_hi = x_lo, x_hi, y_lo, y_hi
        self.w = _PLOT_W - _LEFT - _RIGHT
        self.h = _PLOT_H - _TOP - _BOTTOM

    def x(self, v: float) -> float:
        v = min(max(v, self.x_lo), self.x_hi)
        return _LEFT + self.w * math.log10(v / self.x_lo) / math.log10(self.x_hi / self.x_lo)

    def y(self, v: float) -> float:
        v = min(max(v, self.y_lo), self.y_hi)
        return _TOP + self.h * (1 - math.log10(v / self.y_lo) / math.log10(self.y_hi / self.y_lo))


def _tick(v: float) -> str:
    return f"{v:g}"


def _plot(analysis: RooflineAnalysis) -> str:
    x_lo, x_hi, y_lo, y_hi = _axes(analysis)
    s = _Scale(x_lo, x_hi, y_lo, y_hi)
    body: list[str] = []
    k_lo, k_hi = round(math.log10(x_lo)), round(math.log10(x_hi))
    for d in range(k_lo, k_hi + 1):
        x = s.x(10.0**d)
        body.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_PLOT_H - _BOTTOM}"/>'
            f'<text x="{x:.1f}" y="{_PLOT_H - _BOTTOM + 14}" text-anchor="middle">'
            f"{_tick(10.0**d)}</text>"
        )
    for d in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        y = s.y(10.0**d)
        body.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_PLOT_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_tick(10.0**d / 1e12)}'
            "</text>"
        )
    body.append(
        f'<text x="{_LEFT + s.w / 2:.0f}" y="{_PLOT_H - 12}" text-anchor="middle">'
        "arithmetic intensity (FLOP per DRAM byte)</text>"
        f'<text transform="translate(16,{_TOP + s.h / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">performance (TFLOP/s)</text>'
    )
    for roof in analysis.roofs:
        bw = roof.peak_gbps * 1e9
        precisions = dict.fromkeys(k.precision for k in analysis.kernels if k.roof == roof)
        # One compute roof per peak value: precisions that share a peak share a line (the
        # table's fp16 is the tensor rate, so "fp16/tensor").
        by_peak: dict[float, list[str]] = {}
        for p in precisions:
            peak = roof.peak_tflops(p)
            if peak:
                by_peak.setdefault(peak, []).append(p)
        top = max(by_peak, default=None)
        x_end = x_hi if top is None else min(x_hi, top * 1e12 / bw)
        body.append(
            f'<line class="roof-memory" stroke="#2f6fb0" x1="{s.x(x_lo):.1f}" '
            f'y1="{s.y(bw * x_lo):.1f}" x2="{s.x(x_end):.1f}" y2="{s.y(bw * x_end):.1f}">'
            f"<title>{_e(roof.label)} memory roof: {roof.peak_gbps:,.0f} GB/s</title></line>"
        )
        for i, (peak, names) in enumerate(sorted(by_peak.items())):
            ridge = peak * 1e12 / bw
            label = _e(f"{roof.label} {'/'.join(names)} {peak:,.1f} TFLOP/s")
            body.append(
                f'<line class="roof-compute" stroke="#c0392b" x1="{s.x(ridge):.1f}" '
                f'y1="{s.y(peak * 1e12):.1f}" x2="{s.x(x_hi):.1f}" y2="{s.y(peak * 1e12):.1f}">'
                f"<title>{label} compute roof</title></line>"
                f'<line class="ridge" x1="{s.x(ridge):.1f}" x2="{s.x(ridge):.1f}" '
                f'y1="{s.y(peak * 1e12):.1f}" y2="{_PLOT_H - _BOTTOM}">'
                f"<title>ridge: {ridge:.3g} FLOP/byte</title></line>"
                f'<text x="{s.x(x_hi) - 4:.1f}" y="{s.y(peak * 1e12) - 5:.1f}" '
                f'text-anchor="end">{label}</text>'
                f'<text x="{s.x(ridge) + 4:.1f}" y="{_PLOT_H - _BOTTOM - 6 - 13 * i}">ridge '
                f"{ridge:.3g}</text>"
            )
    for k in analysis.kernels:
        body.append(_dot(k, s))
    return (
        f'<svg class="plot roofline" width="{_PLOT_W}" height="{_PLOT_H}" '
        f'viewBox="0 0 {_PLOT_W} {_PLOT_H}" role="img" aria-label="roofline">'
        f'<rect x="{_LEFT}" y="{_TOP}" width="{s.w}" height="{s.h}" fill="none" '
        f'stroke="#ccc"/>{"".join(body)}</svg>'
    )


def _dot(k: KernelRoofline, s: _Scale) -> str:
    """One kernel: a filled dot at (intensity, FLOP/s); hollow at the left edge without FLOPs.

    A kernel without a FLOP count that places it (none counted, no counters, or tensor work the
    counters miss) has no place on the intensity axis; it is drawn at the plot's left edge,
    below the memory roof by its share of peak DRAM bandwidth, so the gap still shows that
    distance. `data-placed` says which: ``flops`` or ``dram-share``.
    """
    n = k.kernel
    colour = _BOUND_COLOUR[k.bound]
    share = "" if k.roof_share is None else f", {100 * k.roof_share:.1f} % of the roof"
    title = _e(f"{n.name} (ID {n.id}): {k.bound}{share}, {k.precision} roof")
    if _placed(k):
        assert k.arithmetic_intensity is not None and k.achieved_tflops is not None
        x, y = s.x(k.arithmetic_intensity), s.y(k.achieved_tflops * 1e12)
        return (
            f'<circle class="kernel-dot" data-placed="flops" data-id="{n.id}" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="5" fill="{colour}" stroke="#222"><title>{title}</title></circle>'
        )
    if k.dram_share is None:
        return ""
    edge = s.x_lo
    y = s.y(k.dram_share * k.roof.peak_gbps * 1e9 * edge)
    return (
        f'<circle class="kernel-dot" data-placed="dram-share" data-id="{n.id}" '
        f'cx="{s.x(edge) + 6:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="{colour}" '
        f'stroke-width="2"><title>{title}; no FLOP count to place it by: drawn at the left '
        "edge, below the memory roof by its DRAM share</title></circle>"
    )


def _bandwidth_bars(analysis: RooflineAnalysis) -> str:
    """Each kernel's DRAM bandwidth as a share of its GPU's peak."""
    rows = [k for k in analysis.kernels if k.dram_share is not None]
    if not rows:
        return ""
    label_w, bar_w, row_h = 260, 600, 18
    body = []
    for i, k in enumerate(rows):
        share = k.dram_share or 0.0
        y = i * row_h
        body.append(
            f'<g class="bw-row"><text x="0" y="{y + 13}" font-size="11">'
            f"{_e(_short(k.kernel.name, 40))}</text>"
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row_h - 6}" '
            'fill="#eee"/>'
            f'<rect class="bw-bar" x="{label_w}" y="{y + 3}" width="{bar_w * min(share, 1):.1f}" '
            f'height="{row_h - 6}" fill="#2f6fb0"><title>{_e(k.kernel.name)}: '
            f"{k.dram_gbps or 0:,.1f} of {k.roof.peak_gbps:,.0f} GB/s</title></rect>"
            f'<text x="{label_w + bar_w + 6}" y="{y + 13}" font-size="11">'
            f"{100 * share:.1f} %</text></g>"
        )
    height = len(rows) * row_h
    width = label_w + bar_w + 70
    return (
        f'<svg class="plot bandwidth" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="DRAM bandwidth">'
        f"{''.join(body)}</svg>"
    )


def _dram_rows(analysis: RooflineAnalysis) -> list[list[str]]:
    """The DRAM section's table: every kernel with DRAM bytes, bandwidth or a DRAM SOL %."""
    rows = []
    for k in analysis.kernels:
        n = k.kernel
        if n.dram_bytes is None and n.dram_bytes_per_s is None and n.dram_throughput_pct is None:
            continue
        rows.append(
            [
                _name(n.name),
                str(n.id),
                _fmt(None if n.dram_bytes is None else n.dram_bytes / 1e6, ",.3f"),
                _fmt(k.dram_gbps, ",.1f"),
                _fmt(k.roof.peak_gbps, ",.0f"),
                _fmt(None if k.dram_share is None else 100 * k.dram_share, ".1f"),
                _fmt(n.dram_throughput_pct, ".1f"),
            ]
        )
    return rows


def _dram_section(analysis: RooflineAnalysis) -> str:
    rows = _dram_rows(analysis)
    if not rows:
        return "<p>No DRAM bytes, bandwidth or DRAM throughput in the CSV.</p>"
    table = html_table(
        ["kernel", "ID", "DRAM MB", "GB/s", "peak GB/s", "% of peak", "ncu DRAM SOL %"],
        rows,
        name_col=True,
    )
    return f'<div class="dram">{table}</div>\n{_bandwidth_bars(analysis)}'


def _name(name: str) -> str:
    """A kernel name shortened for a table cell; the full name on hover."""
    return f'<span title="{_e(name)}">{_e(_short(name, 60))}</span>'


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else _e(format(value, fmt))


def render_roofline_html(analysis: RooflineAnalysis, top: int = 0) -> str:
    """The analysis as one self-contained HTML document (inline CSS and SVG, no script).

    Args:
        analysis: The roofline analysis.
        top: Findings to list (0: all).

    Returns:
        The document text.

    Example:
        >>> render_roofline_html(analysis)[:15]  # doctest: +SKIP
        '<!DOCTYPE html>'
    """
    roofs = "".join(
        f"<li>{_e(_roof_line(r, [k.precision for k in analysis.kernels if k.roof == r]))}</li>"
        for r in analysis.roofs
    )
    kernel_rows = [
        [
            _name(k.kernel.name),
            str(k.kernel.id),
            _fmt(None if k.kernel.dur_ns is None else k.kernel.dur_ns / 1000, ",.1f"),
            _fmt(k.achieved_tflops, ".3g"),
            _fmt(k.dram_gbps, ",.1f"),
            _fmt(k.arithmetic_intensity, ".3g"),
            f'<span style="color:{_BOUND_COLOUR[k.bound]}">{_e(k.bound)}</span>',
            _fmt(None if k.roof_share is None else 100 * k.roof_share, ".1f"),
            f"{_fmt(k.kernel.sol_compute_pct, '.1f')} / {_fmt(k.kernel.sol_memory_pct, '.1f')}",
            _fmt(k.kernel.achieved_occupancy_pct, ".1f"),
            _e(f"{k.precision} (by {k.precision_basis}): {k.precision_note}"),
            _e(k.bound_note),
        ]
        for k in analysis.kernels
    ]
    shown = analysis.findings if top <= 0 else analysis.findings[:top]
    finding_rows = [
        [
            f"{_name(f.kernel_name)} ({f.kernel_id})",
            _e(f.rule.name),
            _e(f"{f.rule.estimated_speedup_pct:.2f} % {f.rule.speedup_type or ''}"),
            _fmt(f.savings_ns / 1000, ",.1f"),
            _e(f.rule.description),
        ]
        for f in shown
    ]
    notes = "".join(f'<p class="note">note: {_e(w)}</p>' for w in analysis.warnings)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>badput roofline</title><style>{PAGE_CSS}{_ROOFLINE_CSS}</style></head><body>",
        f"<h1>badput roofline: {_e(os.path.basename(analysis.path))}</h1>",
        f"<p>{_e(analysis.page)} page, {len(analysis.kernels)} kernel(s); "
        f"badput {_e(__version__)}</p>",
        f"<ul>{roofs}</ul>",
        notes,
        "<h2>Roofline</h2>",
        _plot(analysis),
        "<p><small>Blue: memory roof (peak DRAM bandwidth × intensity); red: compute roof of "
        "each precision used; dashed: ridge. Yellow: latency-bound (compute and memory SOL both "
        "below 60 %). Filled dots: kernels placed by their counted "
        "FLOPs. Hollow dots: kernels without a FLOP count to place them by (none counted, no "
        "counters in the CSV, or tensor work the counters miss), drawn at the left edge below "
        "the memory roof by their share of peak DRAM bandwidth.</small></p>",
        "<h2>Kernels</h2>",
        html_table(
            [
                "kernel",
                "ID",
                "time us",
                "TFLOP/s",
                "DRAM GB/s",
                "FLOP/byte",
                "bound",
                "% of roof",
                "SOL SM / mem %",
                "occupancy %",
                "roof precision",
                "bound evidence",
            ],
            kernel_rows,
            name_col=True,
        ),
        "<h2>DRAM traffic and bandwidth, share of peak</h2>",
        _dram_section(analysis),
        "<h2>ncu findings</h2>",
        "<p><small>Ranked by estimated saving = ncu's estimated speedup × kernel time; a "
        "'local' estimate is for the part of the kernel the rule inspects, an upper bound."
        "</small></p>",
        '<div class="rules">'
        + html_table(["kernel", "rule", "est. speedup", "saves us", "what ncu says"], finding_rows)
        + "</div>"
        if finding_rows
        else "<p>No rule result with an estimated speedup.</p>",
        "</body></html>\n",
    ]
    return "\n".join(p for p in parts if p)
