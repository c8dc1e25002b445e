"""The HTML report of `badput report`: one self-contained file, inline SVG, no script.

Everything is drawn from the compact `JobResult` that `badput analyze` renders, so the file
grows with the steps, ranks and kernels listed, never with the events. Every string that comes
from a trace (paths, kernel names, GPU names, warnings) goes through `html.escape`; nothing
is loaded from the network (no CDN, no fonts, no scripts): the only URLs are the findings'
http(s) references, as links a reader may follow.

The colours are Okabe and Ito's colour-blind-safe palette, one hue per part (docs/html_report.md
says which colour stands for what, and why it is safe); each legend comes before the drawings
that use it.

Two timelines per GPU: the window's time axis with each step at its place (its parts drawn
as totals), and, for the median-length step and the longest step (labelled so, the median
first), the GPU's busy and idle pieces in time order, coloured by kind and idle cause
(`analysis.segments`, computed in the worker from the analysis's interval sets; pieces under
1/2,000 of the step are only counted, and drawn as one grey band).

Per GPU, the critical path (`analysis.critical_path`): its length split by part in one bar,
the ops with the most time on it, and the queue depth of each stream over the typical step
(`analysis.launch`).
"""

from __future__ import annotations

import html
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from badput import __version__
from badput.analysis.critical_path import CriticalPath
from badput.analysis.diff import DeviceDiff, TraceDiff
from badput.analysis.launch import QueueSeries
from badput.analysis.memory import MemoryTimeline
from badput.analysis.ops import NO_MODULE, STAGES, ModelAnalysis, ModuleRow, OpRow
from badput.analysis.ranks import RankSummary
from badput.analysis.results import Breakdown, DeviceAnalysis, IdleCauses, KernelStat, ratio
from badput.analysis.segments import SEGMENT_KINDS, StepSegments
from badput.diagnose import Finding, Job, JobResult, RankOutcome
from badput.diagnose.findings import JOB_RULES
from badput.report.evidence import evidence_items
from badput.report.json_report import memory_of
from badput.report.names import distinct_names
from badput.report.text import OP_COLUMNS, attribution_lines, job_title, mfu_line, op_cells
from badput.report.units import NOT_AVAILABLE, format_bytes, format_share
from badput.report.units import format_ms as _ms

__all__ = [
    "PAGE_CSS",
    "PARTS",
    "PATH_PARTS",
    "html_table",
    "memory_plot",
    "module_icicle",
    "queue_plot",
    "render_diff_html",
    "render_html",
    "roofline_plot",
    "waterfall_plot",
]

# Above this many GPUs the per-GPU sections are left out (as in the text report).
_MAX_DEVICE_SECTIONS = 8
# Steps drawn per GPU; a longer trace shows its first steps and says so.
_MAX_STEPS = 200
_MAX_RANKS = 1024
_FINDINGS_SHOWN = 10
# Ops drawn on the roofline (the largest by GPU time), module rects drawn in the icicle.
_MAX_ROOFLINE_OPS = 200
_MAX_ICICLE_RECTS = 1500
_ICICLE_DEPTH = 6
# The column of `OP_COLUMNS` with an op's GPU time; its share of the GPU time follows it.
_OP_MS_COLUMN = 4
# Width of the shortened kernel names in the top-ops table (the full name is its tooltip).
_KERNEL_NAME_WIDTH = 48

#: Okabe & Ito's colour-universal-design palette ("Color Universal Design (CUD): how to make
#: figures and presentations that are friendly to colorblind people", 2008): eight colours
#: chosen to stay apart for protan, deutan and tritan viewers. docs/html_report.md shows what
#: each colour stands for and the distances tests/test_html_palette.py checks.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "black": "#000000",
}
_OI = OKABE_ITO

#: The parts a window is split into, in drawing order: (key, label, colour). GPU work in the
#: cool hues (green, blue, sky blue), idle time by cause in the warm ones; every part its
#: own hue. `parts_for` names the trace's runtime in the runtime part's label.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("compute", "compute", _OI["bluish green"]),
    ("communication", "exposed communication", _OI["blue"]),
    ("memory", "memory (memcpy/memset)", _OI["sky blue"]),
    ("idle_dataloader", "idle: DataLoader", _OI["vermillion"]),
    ("idle_cpu", "idle: host in CPU ops", _OI["orange"]),
    ("idle_runtime", "idle: CUDA runtime/driver", _OI["reddish purple"]),
    ("idle_other", "idle: host outside any op", _OI["yellow"]),
)

#: Where a step's pieces are too short to draw one by one: a neutral grey no part uses
#: (greys keep their place under every colour-vision deficiency; this one is the grey
#: farthest from every part's colour, see docs/html_report.md).
SHORT_PIECES_COLOUR = "#CCCCCC"

_LABELS = {key: label for key, label, _ in PARTS}


def parts_for(runtime: str = "CUDA") -> tuple[tuple[str, str, str], ...]:
    """`PARTS` with the runtime part named after the trace's GPU runtime ("CUDA", "HIP")."""
    return tuple(
        (key, label.replace("CUDA", runtime) if key == "idle_runtime" else label, colour)
        for key, label, colour in PARTS
    )


def _runtime_of(devices: Iterable[DeviceAnalysis]) -> str:
    """The GPU runtime of some GPUs (`DeviceAnalysis.runtime_api`): "CUDA", "HIP", "CUDA/HIP"."""
    return "/".join(sorted({d.runtime_api for d in devices})) or "CUDA"


#: The parts of a critical path's length (`critical_path.BREAKDOWN_KEYS`): (key, label,
#: colour), in the report's palette: host work orange as the host's CPU ops, the runtime's
#: delay reddish purple as the runtime's idle part, GPU work by kind as in `PARTS`, kernel
#: gaps yellow as idle time outside any op, sync waits black.
PATH_PARTS: tuple[tuple[str, str, str], ...] = (
    ("host", "host", _OI["orange"]),
    ("launch_delay", "launch delay", _OI["reddish purple"]),
    ("gpu_compute", "GPU compute", _OI["bluish green"]),
    ("gpu_communication", "GPU communication", _OI["blue"]),
    ("gpu_memory", "GPU memcpy/memset", _OI["sky blue"]),
    ("kernel_gap", "kernel gap", _OI["yellow"]),
    ("sync_wait", "sync wait", _OI["black"]),
)
#: Ops listed under the critical path.
_PATH_OPS = 10
#: Colours of the queue-depth lines, one per stream (repeating).
_QUEUE_COLOURS = tuple(
    _OI[c]
    for c in ("blue", "orange", "bluish green", "reddish purple", "vermillion", "sky blue", "black")
)

PAGE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:160px}
.card .label{font-size:12px;color:#666}.card .value{font-size:22px;font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}
td.name{max-width:640px;overflow-wrap:anywhere;font-family:monospace;font-size:12px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.sev-high{color:#c0392b;font-weight:600}.sev-medium{color:#d68910}.sev-low{color:#777}
.note{color:#8a6d00;font-size:13px}
table.ops td:nth-child(n+4){white-space:nowrap}
table.ops th:nth-child(-n+3),table.ops td:nth-child(-n+3),table.ops th:nth-child(n+9),
table.ops td:nth-child(n+9){text-align:left}
table.ops td:nth-child(2),table.ops td:nth-child(10){font-family:monospace;font-size:12px;
overflow-wrap:anywhere}
table.ops td:nth-child(10){white-space:normal;max-width:360px}
.legend i.swatch{outline:1px solid rgba(0,0,0,.25)}
.legend span{white-space:nowrap}
dl.evidence{display:grid;grid-template-columns:max-content auto;gap:0 12px;margin:2px 0 4px 12px;
font-size:12px}
dl.evidence dt{color:#555}dl.evidence dd{margin:0}
.step-label{margin:10px 0 2px}
.wide{overflow-x:auto}
"""


def _e(value: object) -> str:
    """Any value as HTML text: `<`, `>`, `&` and quotes escaped."""
    return html.escape(str(value), quote=True)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "–"


def parts_ns(b: Breakdown, c: IdleCauses) -> dict[str, int]:
    """A breakdown with its idle part split by cause, keyed as `PARTS`."""
    return {
        "compute": b.compute_ns,
        "communication": b.communication_ns,
        "memory": b.memory_ns,
        "idle_dataloader": c.dataloader_ns,
        "idle_cpu": c.cpu_ns,
        "idle_runtime": c.runtime_ns,
        "idle_other": c.other_ns,
    }


def _segments(
    parts: dict[str, int],
    x0: float,
    scale: float,
    y: float,
    h: float,
    palette: Sequence[tuple[str, str, str]] = PARTS,
) -> str:
    """Rects of one stacked bar from `x0`, `scale` pixels per ns, with hover titles.

    `palette` names the parts, in drawing order: (key, label, colour).
    """
    out = []
    x = x0
    for key, label, colour in palette:
        ns = parts.get(key, 0)
        if ns <= 0:
            continue
        w = ns * scale
        out.append(
            f'<rect class="seg" x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{h:.1f}" '
            f'fill="{colour}"><title>{_e(label)}: {_ms(ns)} ms</title></rect>'
        )
        x += w
    return "".join(out)


def _legend(palette: Sequence[tuple[str, str, str]] = PARTS, css_class: str = "parts") -> str:
    """The colour of each part, before the drawings that use it (`data-key`: the part)."""
    items = "".join(
        f'<span data-key="{_e(key)}"><i class="swatch" style="background:{c}"></i>'
        f"{_e(label)}</span>"
        for key, label, c in palette
    )
    return f'<div class="legend {css_class}-legend">{items}</div>'


def _stacked_bars(
    rows: Sequence[tuple[str, dict[str, int], int]],
    css_class: str,
    caption: str,
    palette: Sequence[tuple[str, str, str]] = PARTS,
) -> str:
    """Horizontal stacked bars, one per row (label, parts, total ns), scaled to the longest.

    `palette` names the parts (`PARTS` by default, `PATH_PARTS` for a critical path).
    """
    label_w, bar_w, row_h = 170, 900, 18
    longest = max((total for _, _, total in rows), default=0) or 1
    scale = bar_w / longest
    body = []
    for i, (label, parts, total) in enumerate(rows):
        y = i * row_h
        body.append(
            f'<g class="{css_class}"><text x="0" y="{y + 13}" font-size="11">{_e(label)}</text>'
            f"{_segments(parts, label_w, scale, y + 2, row_h - 4, palette)}"
            f'<text x="{label_w + total * scale + 4:.1f}" y="{y + 13}" font-size="10" '
            f'fill="#555">{_ms(total)} ms</text></g>'
        )
    height = max(len(rows), 1) * row_h
    width = label_w + bar_w + 80
    return (
        f'<svg class="plot {css_class}s" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_e(caption)}">{"".join(body)}</svg>'
    )


def _timeline(d: DeviceAnalysis, palette: Sequence[tuple[str, str, str]] = PARTS) -> str:
    """The window's time axis with each step at its place; parts inside a step are totals."""
    steps = d.steps[:_MAX_STEPS]
    width, h = 1070, 28
    if not steps or d.window_ns <= 0:
        return ""
    scale = width / d.window_ns
    body = []
    for s in steps:
        x0 = (s.start_ns - d.window_start_ns) * scale
        body.append(
            f'<g class="timeline-step"><title>{_e(s.name)}: {_ms(s.dur_ns)} ms</title>'
            f"{_segments(parts_ns(s.breakdown, s.idle_causes), x0, scale, 2, h - 4, palette)}"
            f'<line x1="{x0:.2f}" x2="{x0:.2f}" y1="0" y2="{h}" stroke="#222" '
            'stroke-width="0.5"/></g>'
        )
    return (
        f'<svg class="plot timeline" width="{width}" '
        f'height="{h + 14}" viewBox="0 0 {width} {h + 14}" role="img" aria-label="timeline">'
        f'{"".join(body)}<text x="0" y="{h + 12}" font-size="10">0 ms</text>'
        f'<text x="{width}" y="{h + 12}" font-size="10" text-anchor="end">'
        f"{_ms(d.window_ns)} ms</text></svg>"
    )


def html_table(head: Iterable[str], rows: Iterable[Iterable[str]], name_col: bool = False) -> str:
    """A table; cells are already HTML. `name_col` sets the first column in monospace."""
    th = "".join(f"<th>{h}</th>" for h in head)
    trs = []
    for row in rows:
        cells = list(row)
        first = f'<td class="name">{cells[0]}</td>' if name_col else f"<td>{cells[0]}</td>"
        trs.append("<tr>" + first + "".join(f"<td>{c}</td>" for c in cells[1:]) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(trs)}</tbody></table>"


def _reference(ref: str) -> str:
    """A finding's reference: a link when it is an http(s) URL, else text; escaped either way.

    Only `http:` and `https:` URLs with a host become links (never `javascript:`, `data:` or
    a relative path), and `rel="noreferrer"` keeps the report's location from the site.
    """
    url = ref.strip()
    parts = urlsplit(url) if not any(c.isspace() or ord(c) < 32 for c in url) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        return f"<code>{_e(ref)}</code>"
    return f'<a href="{_e(url)}" rel="noreferrer noopener">{_e(url)}</a>'


def _findings(findings: Sequence[Finding], with_where: bool = False) -> str:
    if not findings:
        return "<p>No finding worth a change.</p>"
    items = []
    for f in findings[:_FINDINGS_SHOWN]:
        where = ""
        if with_where and f.trace:
            rank = f" rank {f.rank}" if f.rank is not None else ""
            where = f" <small>({_e(os.path.basename(f.trace))}{rank}, GPU {f.device})</small>"
        evidence = "".join(
            f"<dt>{_e(label)}</dt><dd>{_e(value)}</dd>" for label, value in evidence_items(f)
        )
        fixes = "".join(f"<li>{_e(x)}</li>" for x in f.fix)
        refs = "".join(f"<li>{_reference(r)}</li>" for r in f.refs)
        items.append(
            f'<li class="finding"><span class="sev-{_e(f.severity)}">[{_e(f.severity)}]</span> '
            f"<b>{_e(f.title)}</b> <code>{_e(f.id)}</code>{where}<br>"
            f"saves {_ms(f.savings_ns)} ms per step ({100 * f.savings_share:.1f} %)"
            + (
                f'<div><small>evidence:</small><dl class="evidence">{evidence}</dl></div>'
                if evidence
                else ""
            )
            + f"<div>fix:<ol>{fixes}</ol></div>"
            + (f"<div><small>references:</small><ul>{refs}</ul></div>" if refs else "")
            + "</li>"
        )
    more = len(findings) - _FINDINGS_SHOWN
    tail = f"<p>{more} more in <code>--format json</code></p>" if more > 0 else ""
    return f'<ol class="findings">{"".join(items)}</ol>{tail}'


def _step_pieces(
    seg: StepSegments, which: str, palette: Sequence[tuple[str, str, str]] = PARTS
) -> str:
    """One step's busy and idle pieces in time order, on its own time axis.

    `which` says which step it is ("median step", "longest step").
    """
    width, h = 1070, 28
    scale = width / seg.dur_ns
    colours = {key: colour for key, _, colour in palette}
    labels = {key: label for key, label, _ in palette}
    body = []
    for code, off, length in zip(seg.kind, seg.offset_ns, seg.length_ns, strict=True):
        key = SEGMENT_KINDS[code]
        w = max(length * scale, 0.2)
        body.append(
            f'<rect class="piece" x="{off * scale:.2f}" y="2" width="{w:.2f}"'
            f' height="{h - 4}" fill="{colours[key]}"><title>{_e(labels[key])}: '
            f"{_ms(length)} ms at +{_ms(off)} ms</title></rect>"
        )
    hidden = (
        f" · {seg.hidden:,} pieces under {_ms(seg.dur_ns / 2000)} ms ({_ms(seg.hidden_ns)} "
        "ms in all) are drawn together in grey"
        if seg.hidden
        else ""
    )
    return (
        f'<p class="step-label"><b>{_e(which)}</b> <small>{_e(seg.step)}: '
        f"{_ms(seg.dur_ns)} ms{hidden}</small></p>"
        f'<svg class="plot step-pieces" width="{width}" height="{h + 14}" '
        f'viewBox="0 0 {width} {h + 14}" role="img" aria-label="step timeline">'
        # Under the pieces: grey where only pieces too short to draw one by one lie.
        f'<rect class="short-pieces" x="0" y="2" width="{width}" height="{h - 4}" '
        f'fill="{SHORT_PIECES_COLOUR}"><title>pieces under {_ms(seg.dur_ns / 2000)} ms, of any kind'
        "</title></rect>"
        f'{"".join(body)}<text x="0" y="{h + 12}" font-size="10">0 ms</text>'
        f'<text x="{width}" y="{h + 12}" font-size="10" text-anchor="end">'
        f"{_ms(seg.dur_ns)} ms</text></svg>"
    )


#: Colours of the memory plot's curves.
_ALLOCATED_COLOUR, _RESERVED_COLOUR = _OI["blue"], _OI["orange"]


def memory_plot(m: MemoryTimeline, caption: str | None = None, entries: bool = False) -> str:
    """Allocated and reserved bytes over time as an SVG step plot, peaks in the legend.

    Args:
        m: the timeline.
        caption: the line under the heading (HTML); by default, that the totals come from the
            trace's `[memory]` events.
        entries: the x axis counts entries (`ts_ns` holds indexes), not time.
    """
    if caption is None:
        caption = (
            f"The caching allocator's totals after each of {m.events:,} <code>[memory]</code> "
            "events of the trace."
        )
    width, height, left, bottom = 1070, 160, 70, 16
    span = max(m.end_ns - m.start_ns, 1)
    top_bytes = max(m.peak_reserved_bytes, m.peak_allocated_bytes, 1)
    plot_w, plot_h = width - left - 10, height - bottom - 8

    def points(values: Sequence[int]) -> str:
        # A step curve: each total holds until the next event.
        out: list[str] = []
        y_prev = None
        for t, v in zip(m.ts_ns.tolist(), values, strict=True):
            x = left + (t - m.start_ns) * plot_w / span
            y = 8 + plot_h * (1 - v / top_bytes)
            if y_prev is not None:
                out.append(f"{x:.1f},{y_prev:.1f}")
            out.append(f"{x:.1f},{y:.1f}")
            y_prev = y
        return " ".join(out)

    curves = (
        ("reserved", m.reserved_bytes.tolist(), _RESERVED_COLOUR, m.peak_reserved_bytes),
        ("allocated", m.allocated_bytes.tolist(), _ALLOCATED_COLOUR, m.peak_allocated_bytes),
    )
    lines = "".join(
        f'<polyline class="memory-{name}" fill="none" stroke="{colour}" stroke-width="1.2" '
        f'points="{points(values)}"><title>{name}: peak {format_bytes(peak)}</title></polyline>'
        for name, values, colour, peak in curves
    )
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{name} (peak {format_bytes(peak)})</span>'
        for name, _, colour, peak in curves
    )
    axis = (
        f'<line x1="{left}" x2="{left}" y1="8" y2="{8 + plot_h}" stroke="#999"/>'
        f'<line x1="{left}" x2="{width - 10}" y1="{8 + plot_h}" y2="{8 + plot_h}" stroke="#999"/>'
        f'<text x="{left - 4}" y="14" font-size="10" text-anchor="end">'
        f"{format_bytes(top_bytes)}</text>"
        f'<text x="{left - 4}" y="{8 + plot_h}" font-size="10" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 2}" font-size="10">'
        f"{'entry 0' if entries else '0 ms'}</text>"
        f'<text x="{width - 10}" y="{height - 2}" font-size="10" text-anchor="end">'
        f"{f'entry {m.end_ns:,}' if entries else f'{_ms(span)} ms'}</text>"
    )
    return (
        f"<h3>Memory</h3><p><small>{caption}</small></p>"
        f'<svg class="plot memory-plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="memory over time">'
        f'{axis}{lines}</svg><div class="legend">{legend}</div>'
    )


#: Colours of the waterfall's stages (`badput.analysis.ops.STAGES`), as their parts in
#: `PARTS` where there is one (idle, communication, memory copies, achieved = compute), and of
#: the peak.
_STAGE_COLOURS = dict(
    zip(
        STAGES,
        tuple(
            _OI[c]
            for c in (
                "vermillion",
                "blue",
                "sky blue",
                "yellow",
                "orange",
                "reddish purple",
                "bluish green",
            )
        ),
        strict=True,
    )
)
_PEAK_COLOUR = "#666666"


def waterfall_plot(m: ModelAnalysis) -> str:
    """The MFU waterfall as SVG bars: the peak, each loss hanging from what is left, achieved.

    Empty without a waterfall (an unknown GPU, no modelled FLOPs).
    """
    e = m.efficiency
    if not e.waterfall or e.peak_tflops is None or e.peak_tflops <= 0:
        return ""
    label_w, bar_w, row_h = 230, 760, 20
    peak = e.peak_tflops
    scale = bar_w / peak
    rows = [(f"peak ({e.precision})", 0.0, peak, peak, 1.0, _PEAK_COLOUR)]
    left = peak
    for st in e.waterfall:
        colour = _STAGE_COLOURS.get(st.stage, _PEAK_COLOUR)
        if st.stage == "achieved":
            rows.append((st.stage, 0.0, st.tflops, st.tflops, st.share_of_peak, colour))
        else:
            lo, hi = sorted((left - st.tflops, left))
            rows.append((st.stage, lo, hi, st.tflops, st.share_of_peak, colour))
            left -= st.tflops
    body = []
    for i, (label, lo, hi, value, share, colour) in enumerate(rows):
        y = i * row_h
        x0 = label_w + max(min(lo, peak), 0.0) * scale
        w = max((min(hi, peak) - max(lo, 0.0)) * scale, 0.0)
        tip = f"{label}: {value:,.1f} TFLOP/s ({format_share(share)} of peak)"
        body.append(
            f'<g class="waterfall-stage"><text x="0" y="{y + 14}" font-size="11">{_e(label)}</text>'
            f'<rect x="{x0:.2f}" y="{y + 3}" width="{w:.2f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{_e(tip)}</title></rect>'
            f'<text x="{label_w + bar_w + 6}" y="{y + 14}" font-size="10" fill="#555">'
            f"{value:,.1f} TFLOP/s · {format_share(share)}</text></g>"
        )
    width, height = label_w + bar_w + 170, len(rows) * row_h
    return (
        f'<svg class="plot waterfall" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="MFU waterfall">'
        f"{''.join(body)}</svg>"
    )


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten from below `lo` to above `hi`."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0**k for k in range(a, b + 1)]


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"1e{round(math.log10(v))}"


def roofline_plot(m: ModelAnalysis) -> str:
    """The op rows on the GPU's roofline, log-log: FLOP/byte against TFLOP/s, dots by time.

    One roof per precision of the plotted ops (`min(peak, intensity x bandwidth)`), where
    the hardware table knows the GPU; ops without FLOPs (copies) cannot sit on a log axis
    and are left out. Empty when no op has both.
    """
    ops = [
        r
        for r in m.ops
        if r.intensity is not None
        and r.intensity > 0
        and r.tflops_per_s is not None
        and r.tflops_per_s > 0
        and r.kernel_ns > 0
    ][:_MAX_ROOFLINE_OPS]
    if not ops:
        return ""
    spec = m.gpu_spec
    bw = spec.memory_bw_gbs / 1000 if spec is not None else None  # TB/s
    roofs: dict[str, float] = {}
    if spec is not None:
        for r in ops:
            if r.precision is not None and r.precision not in roofs:
                try:
                    peak = spec.peak(r.precision)
                except ValueError:
                    peak = None
                if peak:
                    roofs[r.precision] = peak
    xs = [r.intensity for r in ops if r.intensity]
    ys = [r.tflops_per_s for r in ops if r.tflops_per_s]
    # At most 6 decades of TFLOP/s below the top and 8 of intensity: a few tiny ops must not
    # squash the rest into a corner (they are drawn at the edge, their titles say so).
    x_lo, x_hi = min(xs) / 2, max(xs) * 2
    y_lo, y_hi = min(ys) / 2, max(ys) * 2
    if bw:
        for peak in roofs.values():
            ridge = peak / bw
            x_lo, x_hi = min(x_lo, ridge / 4), max(x_hi, ridge * 4)
            y_hi = max(y_hi, peak * 1.5)
    x_lo, y_lo = max(x_lo, x_hi / 1e8), max(y_lo, y_hi / 1e6)
    width, height, left, bottom, top_pad, right_pad = 1070, 360, 70, 34, 10, 120
    plot_w, plot_h = width - left - right_pad, height - bottom - top_pad
    lx_lo, lx_hi = math.log10(x_lo), math.log10(x_hi)
    ly_lo, ly_hi = math.log10(y_lo), math.log10(y_hi)

    def px(x: float) -> float:
        return left + (math.log10(x) - lx_lo) / (lx_hi - lx_lo) * plot_w

    def py(y: float) -> float:
        return top_pad + (1 - (math.log10(y) - ly_lo) / (ly_hi - ly_lo)) * plot_h

    axis = [
        f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" stroke="#999"/>',
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top_pad + plot_h}" '
        f'y2="{top_pad + plot_h}" stroke="#999"/>',
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" font-size="11" '
        'text-anchor="middle">arithmetic intensity, FLOP/byte</text>',
        f'<text x="12" y="{top_pad + plot_h / 2:.0f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {top_pad + plot_h / 2:.0f})">TFLOP/s</text>',
    ]
    for t in _log_ticks(x_lo, x_hi):
        if x_lo <= t <= x_hi:
            axis.append(
                f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top_pad}" '
                f'y2="{top_pad + plot_h}" stroke="#eee"/><text x="{px(t):.1f}" '
                f'y="{top_pad + plot_h + 14}" font-size="10" text-anchor="middle">'
                f"{_tick_label(t)}</text>"
            )
    for t in _log_ticks(y_lo, y_hi):
        if y_lo <= t <= y_hi:
            axis.append(
                f'<line x1="{left}" x2="{left + plot_w}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                f'stroke="#eee"/><text x="{left - 4}" y="{py(t) + 3:.1f}" font-size="10" '
                f'text-anchor="end">{_tick_label(t)}</text>'
            )
    lines = []
    roof = _OI["vermillion"]
    if bw:
        for prec, peak in sorted(roofs.items(), key=lambda kv: -kv[1]):
            ridge = peak / bw
            pts = [(x_lo, x_lo * bw), (ridge, peak), (x_hi, peak)]
            if x_lo * bw < y_lo:  # the slope enters the plot above its bottom edge
                pts[0] = (y_lo / bw, y_lo)
            points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            lines.append(
                f'<polyline class="roof" fill="none" stroke="{roof}" stroke-width="1.5" '
                f'points="{points}"><title>{_e(prec)} roof: {peak:,.1f} TFLOP/s, '
                f"{bw:,.2f} TB/s, ridge at {ridge:,.1f} FLOP/byte</title></polyline>"
                f'<text x="{left + plot_w + 4}" y="{py(peak) + 3:.1f}" font-size="10" '
                f'fill="{roof}">{_e(prec)} {peak:,.1f}</text>'
            )
    biggest = max(r.kernel_ns for r in ops)
    dots = []
    for r in sorted(ops, key=lambda r: -r.kernel_ns):
        assert r.intensity is not None and r.tflops_per_s is not None
        radius = max(2.0, 14 * math.sqrt(r.kernel_ns / biggest))
        colour = _OI["blue"] if r.bound == "compute" else _OI["orange"]
        cells = op_cells(r)
        tip = (
            f"{r.op} {cells[1]} {cells[2]}: {r.count:,} calls, {_ms(r.kernel_ns)} ms, "
            f"{r.tflops_per_s:,.2f} TFLOP/s at {r.intensity:,.1f} FLOP/byte"
            + (f", {format_share(r.roof_share)} of roof" if r.roof_share is not None else "")
        )
        x, y = min(max(r.intensity, x_lo), x_hi), min(max(r.tflops_per_s, y_lo), y_hi)
        if (x, y) != (r.intensity, r.tflops_per_s):
            tip += " (off the axes: drawn at the edge)"
        dots.append(
            f'<circle class="op-dot" cx="{px(x):.1f}" cy="{py(y):.1f}" '
            f'r="{radius:.1f}" fill="{colour}" fill-opacity="0.6" stroke="{colour}">'
            f"<title>{_e(tip)}</title></circle>"
        )
    return (
        f'<svg class="plot roofline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="ops on the roofline">'
        f"{''.join(axis)}{''.join(lines)}{''.join(dots)}</svg>"
        f'<div class="legend"><span><i style="background:{_OI["blue"]}"></i>compute-bound</span>'
        f'<span><i style="background:{_OI["orange"]}"></i>memory-bound or unknown</span>'
        "<span>dot area: GPU time</span></div>"
    )


_ICICLE_COLOURS = ("#5b8cc0", "#7fb07f", "#d9a25f", "#b07fb0", "#6fb7b7", "#c07f7f")


def module_icicle(modules: list[ModuleRow], total_ns: int) -> str:
    """The module tree as an SVG icicle: one row per depth, widths by rolled-up GPU time.

    Each rect holds a <title> with its path and time. Rects narrower than half a pixel
    (and what lies under them), depths past `_ICICLE_DEPTH` and rects past
    `_MAX_ICICLE_RECTS` are left out, so the page stays small at any model size.
    """
    if not modules:
        return ""
    ns = {r.path: r.kernel_ns for r in modules}
    children: dict[str, list[str]] = {}
    for r in modules:
        parent = r.path.rsplit("/", 1)[0] if "/" in r.path and r.path != NO_MODULE else ""
        children.setdefault(parent, []).append(r.path)
    span = max(total_ns, sum(ns[p] for p in children.get("", [])), 1)
    width, row_h = 1070, 20
    scale = width / span
    rects: list[str] = []
    depth_seen = 0
    # Breadth-first, largest first, so the cap drops the smallest, deepest rects.
    queue: list[tuple[str, float, int]] = []
    x = 0.0
    for path in sorted(children.get("", []), key=lambda p: (-ns[p], p)):
        queue.append((path, x, 0))
        x += ns[path] * scale
    left_out = 0
    while queue:
        path, x0, depth = queue.pop(0)
        w = ns[path] * scale
        if w < 0.5 or depth >= _ICICLE_DEPTH or len(rects) >= _MAX_ICICLE_RECTS:
            left_out += 1
            continue
        depth_seen = max(depth_seen, depth)
        y = depth * row_h
        name = path.rsplit("/", 1)[-1] if path != NO_MODULE else path
        colour = _ICICLE_COLOURS[depth % len(_ICICLE_COLOURS)]
        label = ""
        if w > 40:
            chars = int((w - 6) / 6)
            shown = name if len(name) <= chars else name[: max(chars - 1, 1)] + "…"
            label = (
                f'<text x="{x0 + 3:.1f}" y="{y + 14}" font-size="10" fill="#fff" '
                f'pointer-events="none">{_e(shown)}</text>'
            )
        rects.append(
            f'<g class="module"><rect x="{x0:.2f}" y="{y + 1}" width="{max(w - 0.5, 0.3):.2f}" '
            f'height="{row_h - 2}" fill="{colour}"><title>{_e(path)}: {_ms(ns[path])} ms '
            f"({_pct(ns[path], span)})</title></rect>{label}</g>"
        )
        cx = x0
        for child in sorted(children.get(path, []), key=lambda p: (-ns[p], p)):
            queue.append((child, cx, depth + 1))
            cx += ns[child] * scale
    height = (depth_seen + 1) * row_h
    note = (
        f"<p><small>{left_out:,} modules too small or too deep to draw are left out; "
        "--format json lists them all.</small></p>"
        if left_out
        else ""
    )
    return (
        f'<svg class="plot icicle" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="GPU time by module">'
        f"{''.join(rects)}</svg>{note}"
    )


def _op_row_html(r: OpRow, kernel: str, gpu_ns: int) -> list[str]:
    """One op row: `OP_COLUMNS`, its share of `gpu_ns` after its GPU time, its main kernel."""
    cells = [_e(c) for c in op_cells(r)]
    cells.insert(_OP_MS_COLUMN + 1, _pct(r.kernel_ns, gpu_ns))
    full = r.kernels[0] if r.kernels else ""
    cells.append(f'<span title="{_e(full)}">{_e(kernel)}</span>' if full else "–")
    return cells


def _model_html(d: DeviceAnalysis, m: ModelAnalysis, top: int) -> str:
    """MFU and its waterfall, top ops, ops on the roofline, the module icicle."""
    out = ["<h3>Model FLOPs utilisation</h3>", f'<p class="mfu"><b>{_e(mfu_line(d, m))}</b></p>']
    out.append(waterfall_plot(m))
    out += [f'<p class="note">note: {_e(n)}</p>' for n in m.efficiency.notes]
    if m.ops:
        shown = m.ops[:top] if top > 0 else m.ops
        kernels = distinct_names([r.kernels[0] if r.kernels else "" for r in shown],
                                 _KERNEL_NAME_WIDTH)  # fmt: skip
        out.append("<h3>Top ops</h3>")
        head = list(OP_COLUMNS)
        head.insert(_OP_MS_COLUMN + 1, "% of GPU time")
        # An op's GPU time holds its copies too: its share is of all the window's GPU work.
        gpu_ns = m.attributed_ns + m.unattributed_ns
        table = html_table(
            (*head, "main kernel"),
            (_op_row_html(r, k, gpu_ns) for r, k in zip(shown, kernels, strict=True)),
            name_col=True,
        )
        out.append('<div class="wide">' + table.replace("<table>", '<table class="ops">', 1))
        out.append("</div>")
        if len(shown) < len(m.ops):
            out.append(f"<p><small>{len(m.ops) - len(shown)} more ops in --format json</small></p>")
    out += [f"<p><small>{_e(line)}</small></p>" for line in attribution_lines(m)]
    roofline = roofline_plot(m)
    if roofline:
        out += [
            "<h3>Ops on the roofline</h3><p><small>One dot per op row (op, shapes, dtypes); "
            "ops without FLOPs (copies) are not drawn.</small></p>",
            roofline,
        ]
    if m.modules:
        out += [
            "<h3>GPU time by module</h3><p><small>Rolled up: a module's width holds its "
            "children's.</small></p>",
            module_icicle(m.modules, m.attributed_ns + m.unattributed_ns),
        ]
    return "".join(out)


def _critical_path(d: DeviceAnalysis, cp: CriticalPath) -> str:
    """A GPU's critical path: its breakdown bar, its length, the ops on it, the queue depth."""
    per_step = (
        f" · {_ms(cp.length_ns / len(d.steps))} ms per step over {len(d.steps):,} steps"
        if d.steps
        else ""
    )
    out = [
        "<h3>Critical path</h3><p><small>The longest chain of dependent work through the "
        "window: host time, launch delays, GPU work, kernel gaps and sync waits along it "
        "(<code>badput annotate</code> draws it on the trace).</small></p>",
        _legend(PATH_PARTS, "path"),
        _stacked_bars(
            [("critical path", cp.breakdown_ns, cp.length_ns)],
            "path-bar",
            "critical path breakdown",
            PATH_PARTS,
        ),
        f'<p class="path-length">length <b>{_ms(cp.length_ns)} ms</b>{per_step}</p>',
    ]
    if cp.top_ops:
        table = html_table(
            ("op", "ms on path", "% of path"),
            ((_e(op), _ms(ns), _pct(ns, cp.length_ns)) for op, ns in cp.top_ops[:_PATH_OPS]),
            name_col=True,
        )
        out.append(table.replace("<table>", '<table class="path-ops">', 1))
    out += [f'<p class="note">note: {_e(w)}</p>' for w in cp.warnings]
    if d.launch is not None and d.launch.typical_queues:
        out.append(queue_plot(d.launch.typical_queues, d.launch.typical_span))
    return "".join(out)


def queue_plot(series: Sequence[QueueSeries], span: tuple[int, int] | None = None) -> str:
    """Queue depth of each stream over a span as SVG step lines, one colour per stream.

    Args:
        series: the streams' step functions (`LaunchStats.typical_queues`).
        span: (start, end) of the span (`LaunchStats.typical_span`); by default from the
            first series' start to the last change.
    """
    if not series:
        return ""
    start = span[0] if span else min(int(q.times_ns[0]) for q in series)
    end = span[1] if span else max(int(q.times_ns[-1]) for q in series)
    width, height, left, bottom = 1070, 160, 70, 16
    plot_w, plot_h = width - left - 10, height - bottom - 8
    length = max(end - start, 1)
    top = max(max(int(q.depths.max()) for q in series), 1)
    lines, legend = [], []
    for i, q in enumerate(series):
        colour = _QUEUE_COLOURS[i % len(_QUEUE_COLOURS)]
        xs = [left + (t - start) * plot_w / length for t in q.times_ns.tolist()] + [left + plot_w]
        points = []
        for k, v in enumerate(q.depths.tolist()):  # each depth holds until the next change
            y = 8 + plot_h * (1 - v / top)
            points += [f"{xs[k]:.1f},{y:.1f}", f"{xs[k + 1]:.1f},{y:.1f}"]
        deepest = int(q.depths.max())
        label = f"stream {q.stream}"
        lines.append(
            f'<polyline class="queue-depth" fill="none" stroke="{colour}" stroke-width="1.2" '
            f'points="{" ".join(points)}"><title>{_e(label)}: up to {deepest:,} queued'
            f"{'' if q.exact else ' (maximum per bin)'}</title></polyline>"
        )
        legend.append(f'<span><i style="background:{colour}"></i>{_e(label)}</span>')
    axis = (
        f'<line x1="{left}" x2="{left}" y1="8" y2="{8 + plot_h}" stroke="#999"/>'
        f'<line x1="{left}" x2="{width - 10}" y1="{8 + plot_h}" y2="{8 + plot_h}" stroke="#999"/>'
        f'<text x="{left - 4}" y="14" font-size="10" text-anchor="end">{top:,}</text>'
        f'<text x="{left - 4}" y="{8 + plot_h}" font-size="10" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 2}" font-size="10">0 ms</text>'
        f'<text x="{width - 10}" y="{height - 2}" font-size="10" text-anchor="end">'
        f"{_ms(length)} ms</text>"
    )
    return (
        "<h3>Queue depth over the typical step</h3><p><small>GPU work launched and not yet "
        "finished, per stream.</small></p>"
        f'<svg class="plot queue-plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="queue depth over the typical '
        f'step">{axis}{"".join(lines)}</svg><div class="legend">{"".join(legend)}</div>'
    )


def _median_first(segments: Sequence[StepSegments]) -> list[tuple[str, StepSegments]]:
    """The drawn steps as (label, step), the median first.

    `analysis.segments.pick_steps` gives the median-length step and the longest in time order.
    """
    if len(segments) == 1:
        return [("median step (also the longest)", segments[0])]
    longest = max(segments, key=lambda s: (s.dur_ns, s.start_ns))
    rest = [("median step", s) for s in segments if s is not longest]
    return [*rest, ("longest step", longest)]


def _kernel_table(d: DeviceAnalysis, top: int) -> str:
    """The top GPU operations: count, total and mean time, and their share of kernel time.

    The share is of `DeviceAnalysis.kernel_ns`, the kernels' time in the window summed over
    streams; memcpy and memset are not kernels, so their rows have none.
    """
    kernels = d.kernels[:top] if top > 0 else d.kernels

    def share(k: KernelStat) -> str:
        return "–" if k.category == "memory" else _pct(k.total_ns, d.kernel_ns)

    table = html_table(
        ("name", "category", "count", "total ms", "% of kernel time", "mean us"),
        (
            (
                _e(k.name),
                _e(k.category),
                f"{k.count:,}",
                _ms(k.total_ns),
                share(k),
                f"{k.mean_ns / 1000:,.1f}",
            )
            for k in kernels
        ),
        name_col=True,
    )
    return (
        "<h3>Top GPU operations</h3>"
        + table.replace("<table>", '<table class="kernels">', 1)
        + f"<p><small>% of kernel time: of the {_ms(d.kernel_ns)} ms of kernels in the window "
        "(summed over streams; memcpy and memset are not kernels).</small></p>"
    )


def _device(
    d: DeviceAnalysis,
    findings: Sequence[Finding],
    top: int,
    segments: Sequence[StepSegments],
    memory: MemoryTimeline | None = None,
) -> str:
    gpu = f"GPU {d.device}" + (f" ({d.gpu})" if d.gpu else "")
    rank = f" · rank {d.rank}/{d.world_size}" if d.rank is not None else ""
    out = [f'<section class="device"><h2>{_e(os.path.basename(d.trace))} · {_e(gpu)}{rank}</h2>']
    if d.goodput is None:
        out.append(
            f'<p>goodput <b class="goodput">{NOT_AVAILABLE}</b>: '
            f"{_e(d.goodput_undefined_reason)}</p>"
        )
        out += [f'<p class="note">note: {_e(w)}</p>' for w in d.warnings]
        out.append("</section>")
        return "".join(out)
    palette = parts_for(d.runtime_api)
    window = parts_ns(d.breakdown, d.idle_causes)
    out.append(
        f'<p>goodput <b class="goodput">{format_share(d.goodput)}</b> of a '
        f"{_ms(d.window_ns)} ms window</p>"
    )
    # The legend before the first drawing: the colours are read before the bars.
    out.append(_legend(palette))
    out.append(
        _stacked_bars([("window", window, d.window_ns)], "window-bar", "window breakdown", palette)
    )
    if d.steps:
        shown = d.steps[:_MAX_STEPS]
        out.append("<h3>Steps</h3>")
        if len(d.steps) > len(shown):
            out.append(f'<p class="note">the first {len(shown)} of {len(d.steps)} steps</p>')
        rows = [(s.name, parts_ns(s.breakdown, s.idle_causes), s.dur_ns) for s in shown]
        out.append(_stacked_bars(rows, "step-bar", "breakdown per step", palette))
        out.append(
            "<h3>Timeline</h3><p><small>Steps at their place in the window; inside a step the "
            "parts are totals, not their order in time.</small></p>"
        )
        out.append(_timeline(d, palette))
        if segments:
            out.append(
                "<h3>Inside a step</h3><p><small>What the GPU did, in time order: the median "
                "step (the typical one) and the longest one.</small></p>"
            )
            out += [_step_pieces(seg, which, palette) for which, seg in _median_first(segments)]
    cp = d.critical_path
    if cp is not None and cp.length_ns > 0:
        out.append(_critical_path(d, cp))
    if memory is not None:
        out.append(memory_plot(memory))
    out.append("<h3>What to fix first</h3>")
    out.append(_findings(findings))
    if d.kernels and top != 0:
        out.append(_kernel_table(d, top))
    if d.model is not None and top != 0:
        out.append(_model_html(d, d.model, top))
    out.append(
        f"<p>communication: {_ms(d.comm.total_ns)} ms, of which "
        f"{_ms(d.comm.overlapped_ns)} ms ({_pct(d.comm.overlapped_ns, d.comm.total_ns)}) "
        "hidden under compute</p>"
    )
    for w in d.warnings:
        out.append(f'<p class="note">note: {_e(w)}</p>')
    out.append("</section>")
    return "".join(out)


def _collectives(summaries: Sequence[RankSummary]) -> str:
    rows = []
    for s in summaries:
        for c in s.comm_stats:
            rows.append(
                (
                    _e(c.type),
                    _e(s.rank if s.rank is not None else "–"),
                    f"{c.count:,}",
                    _ms(c.total_ns),
                    _pct(c.total_ns, s.window_ns),
                    _ms(c.exposed_ns),
                    _pct(c.exposed_ns, s.window_ns),
                    f"{c.busbw_gbps:,.1f}" if c.busbw_gbps is not None else "–",
                )
            )
    if not rows:
        return ""
    head = (
        "collective",
        "rank",
        "kernels",
        "total ms",
        "% of window",
        "exposed ms",
        "exposed % of window",
        "busbw GB/s",
    )
    return (
        "<h2>Communication</h2>"
        + html_table(head, rows).replace("<table>", '<table class="collectives">', 1)
        + "<p><small>% of window: of the rank's analysis window.</small></p>"
    )


def _active(outcomes: Iterable[RankOutcome]) -> list[DeviceAnalysis]:
    """The GPUs with activity of some traces."""
    return [d for o in outcomes for d in o.devices if d.goodput is not None]


def summary_numbers(job: JobResult) -> dict[str, object]:
    """What the summary cards show: job goodput, the top badput part, median step, GPUs.

    Goodput is compute over window summed over the GPUs with activity (one GPU: its goodput).
    """
    devices = [d for o in job.analysed for d in o.devices if d.goodput is not None]
    window = sum(d.window_ns for d in devices)
    totals = dict.fromkeys(_LABELS, 0)
    for d in devices:
        for key, ns in parts_ns(d.breakdown, d.idle_causes).items():
            totals[key] += ns
    badput = {k: v for k, v in totals.items() if k != "compute"}
    top_key = max(badput, key=lambda k: badput[k]) if devices else None
    steps = [s.dur_ns for d in devices for s in d.steps]
    return {
        "goodput": ratio(totals["compute"], window),
        "top_badput": top_key,
        "top_badput_share": ratio(badput[top_key], window) if top_key else None,
        "step_median_ns": statistics.median(steps) if steps else None,
        "gpus": sorted({d.gpu for d in devices if d.gpu}),
    }


def _cards(job: JobResult) -> str:
    n = summary_numbers(job)
    goodput = n["goodput"]
    top_key = n["top_badput"]
    share = n["top_badput_share"]
    step = n["step_median_ns"]
    gpus = n["gpus"]
    assert isinstance(gpus, list)
    labels = {key: label for key, label, _ in parts_for(_runtime_of(_active(job.analysed)))}
    cards = [
        ("goodput", format_share(goodput if isinstance(goodput, float) else None)),
        (
            "top badput",
            f"{_e(labels[str(top_key)])} ({100 * share:.1f} %)"
            if top_key is not None and isinstance(share, float)
            else "–",
        ),
        ("median step", f"{_ms(step)} ms" if isinstance(step, int | float) else "–"),
        ("GPU", _e(", ".join(gpus)) if gpus else "unknown"),
    ]
    body = "".join(
        f'<div class="card" data-card="{_e(label.replace(" ", "-"))}"><div class="label">'
        f'{_e(label)}</div><div class="value">{value}</div></div>'
        for label, value in cards
    )
    return f'<div class="cards">{body}</div>'


def _ranks(job: Job) -> str:
    summaries = [s for o in job.analysed for s in o.summaries if s.rank is not None]
    if len({s.rank for s in summaries}) < 2:
        return ""
    summaries = sorted(summaries, key=lambda s: (s.rank or 0, s.trace))[:_MAX_RANKS]
    rows = [
        (f"rank {s.rank}", parts_ns(s.breakdown, s.idle_causes), s.window_ns) for s in summaries
    ]
    palette = parts_for(_runtime_of(_active(job.analysed)))
    out = [
        "<h2>Per rank</h2>",
        _legend(palette),
        _stacked_bars(rows, "rank-bar", "breakdown per rank", palette),
    ]
    cross = job.cross
    if cross is not None and cross.stragglers:
        out.append(
            "<p>stragglers: "
            + ", ".join(f"rank {st.rank} (score {st.score:.2f})" for st in cross.stragglers[:10])
            + "</p>"
        )
    return "".join(out)


def _environment(job: JobResult) -> str:
    """GPUs, ranks and badput's version. Never the trace's environment variables."""
    rows = []
    for o in job.analysed:
        gpus = sorted({d.gpu or "unknown" for d in o.devices if d.goodput is not None})
        rows.append(
            (
                _e(os.path.basename(o.path)),
                _e(o.rank if o.rank is not None else "–"),
                _e(o.world_size if o.world_size is not None else "–"),
                _e(", ".join(gpus) or "no GPU activity"),
                _e(o.versions.get("cuda_runtime", "–")),
                _e(o.versions.get("cuda_driver", "–")),
                f"{o.events:,}",
            )
        )
    head = ("trace", "rank", "world size", "GPU", "CUDA runtime", "CUDA driver", "events")
    table = html_table(head, rows[:_MAX_RANKS])
    return f"<h2>Environment</h2><p>badput {_e(__version__)}</p>{table}"


def render_html(job: JobResult, top: int = 10) -> str:
    """The report of a job as one self-contained HTML document (inline CSS and SVG).

    Args:
        job: the analysed job, as `badput analyze` renders it.
        top: kernels listed per GPU (0: all).

    Returns:
        The document text.

    Example:
        >>> render_html(diagnose_job([analyze_path("t.json.gz")]))[:15]  # doctest: +SKIP
        '<!DOCTYPE html>'
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>badput report</title><style>{PAGE_CSS}</style></head><body>",
        "<h1>badput report</h1>",
        _cards(job),
    ]
    jobs = job.jobs or [Job(job.outcomes, job.cross)]
    if len(jobs) == 1:  # the job's own findings first: the other findings follow from them
        parts.append(_job_findings(job, jobs[0], unplaced=True))
    for o in job.analysed:
        for w in o.warnings:
            parts.append(f'<p class="note">note: {_e(os.path.basename(o.path))}: {_e(w)}</p>')
    many = sum(len(o.devices) for o in job.analysed) > _MAX_DEVICE_SECTIONS
    if len(jobs) > 1:
        parts.append(
            f"<p>{len(jobs)} jobs among {len(job.analysed)} traces: each is reported on its own</p>"
        )
    for i, part in enumerate(jobs):
        if len(jobs) > 1:
            parts.append(f'<h2 class="job">{_e(job_title(part, i, len(jobs)))}</h2>')
            parts.append(_job_findings(job, part))
            parts += [f'<p class="note">note: {_e(n)}</p>' for n in part.notes]
        parts += _job_parts(job, part, top, many)
    if job.failed:
        items = "".join(f"<li>{_e(o.path)}: {_e(o.error)}</li>" for o in job.failed)
        parts.append(f'<h2>Not analysed</h2><ul class="note">{items}</ul>')
    parts.append(_environment(job))
    parts.append("</body></html>\n")
    return "\n".join(p for p in parts if p)


def _job_findings(job: JobResult, part: Job, unplaced: bool = False) -> str:
    """The job-level findings of one job, with where each was found.

    A straggler comes first: the other ranks' waiting is its doing. `unplaced` adds the
    findings of no trace (`trace == ""`).
    """
    found = [f for f in job.findings_of(part) if f.job_level]
    if unplaced:
        found += [f for f in job.diagnosis.ranked if not f.trace and f not in found]
    if not found:
        return ""
    found.sort(key=lambda f: f.id not in JOB_RULES)  # stable: ranked order otherwise
    return '<section class="job-findings"><h2>Across ranks</h2>' + (
        _findings(found, with_where=True) + "</section>"
    )


def _job_parts(job: JobResult, part: Job, top: int, many: bool) -> list[str]:
    """One job after its job-level findings: ranks, GPUs, the GPUs' findings, collectives."""
    found = job.findings_of(part)
    out = []
    out.append(_ranks(part))
    devices = [
        (d, f, o.segments[i] if i < len(o.segments) else [], memory_of(o, d.device))
        for o in part.analysed
        for i, (d, f) in enumerate(zip(o.devices, o.findings, strict=True))
    ]
    if not many:
        out += [_device(d, f, top, segs, mem) for d, f, segs, mem in devices]
    else:
        out.append(
            f"<h2>Findings over {len(devices)} GPUs</h2>"
            "<p><small>per-GPU sections are left out above "
            f"{_MAX_DEVICE_SECTIONS} GPUs; --format json has them all</small></p>"
        )
        out.append(_findings([f for f in found if not f.job_level], True))
    out.append(_collectives([s for o in part.analysed for s in o.summaries]))
    return out


def _relative(delta: float, before: float) -> str:
    """A change as a signed percentage of its BEFORE value; `–` where BEFORE is zero."""
    r = ratio(delta, before)
    return "–" if r is None else f"{100 * r:+.1f} %".replace("-", "−")


#: A side's GPU name when the trace records none.
_NO_GPU_NAME = "no GPU name in the trace"


def _diff_side(label: str, trace: str, device: int, gpu: str | None) -> str:
    """One side of a GPU pair: `before file · GPU 0 (name)`; no name where `gpu` is None."""
    name = f' (<span class="gpu-name">{_e(gpu)}</span>)' if gpu is not None else ""
    return (
        f'<span class="side side-{label}"><small>{label}</small> '
        f"<code>{_e(os.path.basename(trace))}</code> · GPU {device}{name}</span>"
    )


def _diff_device(
    d: DeviceDiff, top: int, gpus: tuple[str | None, str | None] = (None, None)
) -> str:
    """One GPU pair of a diff: goodput, parts and step time before and after, kernels, ops.

    `gpus` names the GPU of each side (before, after); None where the trace does not.
    """

    def signed(ns: float) -> str:
        return f"{'+' if ns >= 0 else '−'}{_ms(abs(ns))}"

    gp = f"{format_share(d.goodput_before)} → {format_share(d.goodput_after)}"
    rows = [
        (
            _e(c.name),
            _ms(c.before_ns),
            _ms(c.after_ns),
            signed(c.delta_ns),
            _relative(c.delta_ns, c.before_ns),
        )
        for c in [*d.breakdown, *d.idle_causes, *(x for x in (d.step_mean, d.step_median) if x)]
    ]
    out = [
        f'<section class="diff-device"><h2>'
        f"{_diff_side('before', d.trace_before, d.device_before, gpus[0])} → "
        f"{_diff_side('after', d.trace_after, d.device_after, gpus[1])}</h2>",
        f'<p>goodput <b class="goodput">{gp}</b> · steps {d.steps_before} → {d.steps_after} · '
        f"GPU operations per {_e(d.per)} {d.launches_before:,.0f} → {d.launches_after:,.0f}</p>",
        html_table((f"ms per {_e(d.per)}", "before", "after", "change", "change %"), rows),
    ]
    for title, items in (
        ("slower", d.slower),
        ("faster", d.faster),
        ("appeared", d.appeared),
        ("disappeared", d.disappeared),
    ):
        shown = items[:top] if top > 0 else items
        out.append(f"<h3>Kernels {title} ({len(items)})</h3>")
        if not shown:
            out.append("<p>none</p>")
            continue
        table = html_table(
            ("name", "category", "count", f"ms per {_e(d.per)}", "change %", "mean us"),
            (
                (
                    _e(k.name),
                    _e(k.category),
                    f"{k.count_before:,} → {k.count_after:,}",
                    f"{_ms(k.per_step_before_ns)} → {_ms(k.per_step_after_ns)}",
                    _relative(k.delta_per_step_ns, k.per_step_before_ns),
                    f"{k.mean_before_ns / 1e3:,.1f} → {k.mean_after_ns / 1e3:,.1f}",
                )
                for k in shown
            ),
            name_col=True,
        )
        head, body = table.split("<tbody>", 1)  # mark the body rows only
        marked = body.replace("<tr>", f'<tr class="kernel-{title}">')
        out.append(f"{head}<tbody>{marked}")
    out.append(f"<p>{d.unchanged:,} kernels unchanged</p>")
    if d.ops is not None:
        out.append(_diff_ops_html(d, top))
    out += [f'<p class="note">note: {_e(w)}</p>' for w in d.warnings]
    out.append("</section>")
    return "".join(out)


def _diff_ops_html(d: DeviceDiff, top: int) -> str:
    """The op, module and MFU part of one GPU pair of a diff (part of `_diff_device`)."""
    from badput.report.diff_report import op_shapes_text

    o, per = d.ops, d.per
    assert o is not None

    def signed(ns: float) -> str:
        return f"{'+' if ns >= 0 else '−'}{_ms(abs(ns))}"

    def rel(status: str, r: float | None) -> str:
        if status != "matched":
            return _e(status)
        return "" if r is None else f"{100 * r:+.0f} %".replace("-", "−")

    def num(v: float | None) -> str:
        return "–" if v is None else f"{v:,.2f}"

    def share(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.0f} %"

    cut = top if top > 0 else None
    delta = o.mfu_delta
    dtext = "" if delta is None else f" ({100 * delta:+.2f} points)".replace("-", "−")

    def mfu(v: float | None) -> str:
        return NOT_AVAILABLE if v is None else f"{100 * v:.2f} %"

    out = [
        f"<h3>Ops ({len(o.ops):,}: {o.count('matched'):,} matched, {o.count('new'):,} new, "
        f"{o.count('gone'):,} gone)</h3>",
        f'<p>MFU <b class="mfu">{mfu(o.mfu_before)} → {mfu(o.mfu_after)}</b>{dtext} · '
        f"precision {_e(o.precision_before or '–')} → {_e(o.precision_after or '–')}</p>",
    ]
    shown = o.ops[:cut]
    if not shown:
        out.append("<p>none</p>")
    else:
        rows = []
        for c, shapes in zip(shown, op_shapes_text(shown), strict=True):
            cells = (
                f"{_e(c.op)}<br><small>{_e(shapes)}</small>",
                _e(c.category or "–"),
                f"{c.count_before:,} → {c.count_after:,}",
                f"{_ms(c.per_step_before_ns)} → {_ms(c.per_step_after_ns)}",
                signed(c.delta_per_step_ns),
                rel(c.status, c.rel_change),
                f"{num(c.tflops_before)} → {num(c.tflops_after)}",
                f"{share(c.roof_share_before)} → {share(c.roof_share_after)}",
                _e(c.module or "–"),
            )
            rows.append(
                f'<tr class="op-{_e(c.status)}"><td class="name">{cells[0]}</td>'
                + "".join(f"<td>{x}</td>" for x in cells[1:])
                + "</tr>"
            )
        head = (
            "op, shapes",
            "category",
            "calls",
            f"ms per {_e(per)}",
            "change ms",
            "change",
            "TFLOP/s",
            "roof",
            "module",
        )
        th = "".join(f"<th>{h}</th>" for h in head)
        out.append(f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
        if len(shown) < len(o.ops):
            out.append(f"<p>{len(o.ops) - len(shown):,} more ops with smaller changes</p>")
    if o.modules:
        mods = o.modules[:cut]
        out.append(f"<h3>Modules in both ({len(o.modules):,}, by change)</h3>")
        out.append(
            html_table(
                ("module (rolled up)", f"ms per {_e(per)} before", "after", "change ms", "change"),
                (
                    (
                        _e(m.path),
                        _ms(m.per_step_before_ns),
                        _ms(m.per_step_after_ns),
                        signed(m.delta_per_step_ns),
                        rel("matched", m.rel_change),
                    )
                    for m in mods
                ),
                name_col=True,
            )
        )
    return "".join(out)


def render_diff_html(
    diff: TraceDiff,
    top: int = 10,
    *,
    before: Sequence[DeviceAnalysis] = (),
    after: Sequence[DeviceAnalysis] = (),
) -> str:
    """`badput diff` as one self-contained HTML document (the same style as the report).

    Args:
        diff: the comparison of two traces.
        top: kernels listed per group (0: all).
        before: the BEFORE analyses `diff` was made from, for each side's GPU name (a
            `DeviceDiff` carries the trace file and device index only); without them the
            headers name the trace files and device indexes only.
        after: the AFTER analyses.
    """
    names = {(a.trace, a.device): a.gpu or _NO_GPU_NAME for a in (*before, *after)}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>badput diff</title><style>{PAGE_CSS}</style></head><body>",
        "<h1>badput diff</h1>",
    ]
    parts += [f'<p class="note">note: {_e(w)}</p>' for w in diff.warnings]
    parts += [
        _diff_device(
            d,
            top,
            (
                names.get((d.trace_before, d.device_before)),
                names.get((d.trace_after, d.device_after)),
            ),
        )
        for d in diff.devices
    ]
    parts.append(f"<p><small>badput {_e(__version__)}</small></p></body></html>")
    return "".join(parts)
