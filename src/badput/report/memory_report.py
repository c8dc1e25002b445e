"""`badput memory`: the snapshot report as text and as the `badput.memory/1` JSON document."""

from __future__ import annotations

import html
import os
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from badput import __version__
from badput.analysis.memory import DeviceMemory, SnapshotAnalysis
from badput.diagnose.memory import EstimateCheck, MemoryDiagnosis, MemoryFinding
from badput.report.html_report import PAGE_CSS, html_table, memory_plot
from badput.report.table import Col, fitted
from badput.report.units import format_bytes as _bytes

__all__ = [
    "MEMORY_SCHEMA",
    "encode_memory",
    "memory_document",
    "render_memory",
    "render_memory_html",
    "site_names",
]

MEMORY_SCHEMA = "badput.memory/1"
_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def memory_finding_dict(f: MemoryFinding) -> dict[str, Any]:
    """One memory finding as JSON: the shape of `analyze`'s findings, savings in bytes."""
    return {
        "id": f.id,
        "title": f.title,
        "severity": f.severity,
        "device": f.device,
        "evidence": {k: {"value": e.value, "unit": e.unit} for k, e in f.evidence.items()},
        "savings_bytes": f.savings_bytes,
        "savings_pct": round(100 * f.savings_share, 3),
        "fix": f.fix,
        "refs": f.refs,
    }


def _device(d: DeviceMemory) -> dict[str, Any]:
    return {
        "device": d.device,
        "entries": d.entries,
        "peak_allocated_bytes": d.peak_allocated_bytes,
        "peak_allocated_entry": d.peak_allocated_entry,
        "peak_allocated_time_us": d.peak_allocated_time_us,
        "peak_step": d.peak_step,
        "reserved_at_peak_bytes": d.reserved_at_peak_bytes,
        "peak_reserved_bytes": d.peak_reserved_bytes,
        "peak_reserved_entry": d.peak_reserved_entry,
        "allocated_at_peak_reserved_bytes": d.allocated_at_peak_reserved_bytes,
        "fragmentation_at_peak_reserved_bytes": d.fragmentation_at_peak_reserved_bytes,
        "initial_allocated_bytes": d.initial_allocated_bytes,
        "initial_reserved_bytes": d.initial_reserved_bytes,
        "top_sites": [{"frame": s.frame, "bytes": s.bytes, "count": s.count} for s in d.top_sites],
        "kinds_at_peak_bytes": d.kinds_at_peak,
        "segments": {
            "reserved_bytes": d.end.reserved_bytes,
            "allocated_bytes": d.end.allocated_bytes,
            "fragmentation_bytes": d.end.fragmentation_bytes,
            "count": d.end.segments,
            "largest_free_block_bytes": d.end.largest_free_block_bytes,
            "below_half_use": d.end.below_half,
            "below_half_use_share": d.end.below_half_share,
        },
        "allocs": d.allocs,
        "frees": d.frees,
        "ooms": d.ooms,
        "steps": None
        if d.steps is None
        else [
            {
                "name": s.name,
                "start_us": s.start_us,
                "allocs": s.allocs,
                "frees": s.frees,
                "alloc_bytes": s.alloc_bytes,
            }
            for s in d.steps
        ],
        "short_lived": [
            {
                "frame": s.frame,
                "bytes": s.bytes,
                "alloc_entry": s.alloc_entry,
                "entries": s.entries,
                "lifetime_us": s.lifetime_us,
            }
            for s in d.short_lived
        ],
        "expandable_segments": d.expandable,
        "warnings": d.warnings,
    }


def _check(c: EstimateCheck | None) -> dict[str, Any] | None:
    if c is None:
        return None
    e = c.estimate
    return {
        "params": e.params,
        "gpus": e.dp * e.tp * e.pp,
        "weights_bytes": e.weights_bytes,
        "grads_bytes": e.grads_bytes,
        "optimizer_bytes": e.optimizer_bytes,
        "optimizer_bytes_zero1": c.sharded_optimizer_bytes,
        "measured_optimizer_bytes": c.measured_optimizer_bytes,
        "measured_peak_allocated_bytes": c.measured_peak_bytes,
        "static_share_of_peak": c.static_share_of_peak,
        "measured_peak_share_of_estimate": c.peak_share_of_estimate,
    }


def memory_document(analysis: SnapshotAnalysis, diagnosis: MemoryDiagnosis) -> dict[str, Any]:
    """The `badput.memory/1` document (fields may be added, never changed).

    The top-level numbers are those of the device with the highest reserved peak (`device`);
    `devices` has every device. `fragmentation_bytes` is reserved minus allocated in the
    segments at dump time.
    """
    main = analysis.main
    top: dict[str, Any] = {
        "device": None,
        "peak_allocated_bytes": 0,
        "peak_reserved_bytes": 0,
        "fragmentation_bytes": 0,
        "fragmentation_at_peak_reserved_bytes": 0,
        "top_sites": [],
    }
    if main is not None:
        full = _device(main)
        top = {
            "device": main.device,
            "peak_allocated_bytes": main.peak_allocated_bytes,
            "peak_reserved_bytes": main.peak_reserved_bytes,
            "fragmentation_bytes": main.end.fragmentation_bytes,
            "fragmentation_at_peak_reserved_bytes": main.fragmentation_at_peak_reserved_bytes,
            "top_sites": full["top_sites"],
        }
    return {
        "schema": MEMORY_SCHEMA,
        "badput_version": __version__,
        "path": analysis.path,
        **top,
        "findings": [memory_finding_dict(f) for f in diagnosis.findings],
        "estimate": _check(diagnosis.check),
        "devices": [_device(d) for d in analysis.devices],
        "allocator_settings": analysis.allocator_settings,
        "warnings": analysis.warnings,
    }


def encode_memory(document: dict[str, Any]) -> bytes:
    """Indented JSON bytes, newline-terminated."""
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"


def render_memory(analysis: SnapshotAnalysis, diagnosis: MemoryDiagnosis, console: Console) -> None:
    """The snapshot report for a terminal: peaks, sites at the peak, fragmentation, findings."""
    console.print(Text(f"memory snapshot {analysis.path}", style="bold"))
    for w in analysis.warnings:
        console.print(Text(f"note: {w}", style="yellow"))
    if not analysis.devices:
        console.print("no segments and no allocator history: nothing to report")
    for d in analysis.devices:
        _render_device(d, console)
    if diagnosis.check is not None:
        _render_check(diagnosis.check, console)
    console.print(Text("\nwhat to change", style="bold"))
    if not diagnosis.findings:
        console.print("no memory finding worth a change")
    for i, f in enumerate(diagnosis.findings, 1):
        line = Text(f"{i}. ")
        line.append(f"[{f.severity}] ", style=_SEVERITY_STYLE[f.severity])
        line.append(f.id, style="bold")
        line.append(f" (GPU {f.device}): {f.title}\n")
        line.append(
            f"   save ~{_bytes(f.savings_bytes)} at the peak ({100 * f.savings_share:.1f} % of "
            "reserved)",
            style="dim",
        )
        console.print(line)
        for step in f.fix:
            console.print(Text(f"   - {step}"))


def _site_name(frame: str, width: int) -> str:
    """A source site (`path/file.py:line:function`) in `width` characters, its numbers whole.

    Whole directories leave the middle of the path first (`/usr/…/nn/module.py:1527:f`); then
    the function name loses its end; `file.py:line:` itself is never cut (the row wraps).
    """
    if len(frame) <= width:
        return frame
    head, sep, tail = frame.rpartition("/")
    if sep:
        dirs = head.split("/")
        for keep in range(len(dirs) - 1, 0, -1):
            front = (keep + 1) // 2
            back = dirs[len(dirs) - (keep - front) :] if keep > front else []
            short = "/".join([*dirs[:front], "…", *back]) + "/" + tail
            if len(short) <= width:
                return short
        frame = f"…/{tail}"
        if len(frame) <= width:
            return frame
    parts = frame.split(":")
    if len(parts) >= 3:
        keep_text = ":".join(parts[:-1]) + ":"
        room = width - len(keep_text)
        if room >= 2:
            return keep_text + parts[-1][: room - 1] + "…"
    return frame


def site_names(frames: list[str], width: int) -> list[str]:
    """`_site_name` of each frame (a `Col.shrink` for source-site columns)."""
    return [_site_name(f, width) for f in frames]


def _render_device(d: DeviceMemory, console: Console) -> None:
    console.print(Text(f"\nGPU {d.device}", style="bold"))
    when = f"entry {d.peak_allocated_entry:,} of {d.entries:,}" if d.entries else "at dump time"
    if d.peak_allocated_time_us is not None:
        when += f", t = {d.peak_allocated_time_us:,} us"
    if d.peak_step is not None:
        when += f", in {d.peak_step}"
    console.print(
        f"peak allocated {_bytes(d.peak_allocated_bytes)} ({when}); reserved then "
        f"{_bytes(d.reserved_at_peak_bytes)}"
    )
    console.print(
        f"peak reserved  {_bytes(d.peak_reserved_bytes)}; allocated then "
        f"{_bytes(d.allocated_at_peak_reserved_bytes)} "
        f"(fragmentation {_bytes(d.fragmentation_at_peak_reserved_bytes)})"
    )
    if d.initial_allocated_bytes and d.entries:
        console.print(
            f"alive before the history starts: {_bytes(d.initial_allocated_bytes)}",
            style="dim",
        )
    e = d.end
    console.print(
        f"segments at dump: {e.segments} holding {_bytes(e.reserved_bytes)}, "
        f"{_bytes(e.allocated_bytes)} in use, {_bytes(e.fragmentation_bytes)} cached unused; "
        f"largest free block {_bytes(max(e.largest_free_block_bytes, default=0))}; "
        f"{100 * e.below_half_share:.0f} % of segments below half use"
    )
    width = console.width
    if d.top_sites:
        console.print(Text("alive at the allocated peak, by source site", style="bold"))
        cols: tuple[Col, ...] = (
            Col("site", elastic=True, floor=24, shrink=site_names),
            Col("bytes", right=True),
            Col("blocks", right=True),
        )
        rows = [[s.frame, _bytes(s.bytes), f"{s.count:,}"] for s in d.top_sites]
        console.print(fitted(cols, rows, width).table)
    if d.kinds_at_peak:
        kinds = ", ".join(f"{k} {_bytes(v)}" for k, v in d.kinds_at_peak.items())
        console.print(f"by stack kind: {kinds}")
    if d.entries:
        console.print(f"churn: {d.allocs:,} allocs, {d.frees:,} frees, {d.ooms} OOMs")
    if d.steps is not None:
        cols = (
            Col("step", elastic=True, floor=16),
            Col("allocs", right=True),
            Col("allocated", right=True),
            Col("frees", right=True),
        )
        rows = [
            [st.name, f"{st.allocs:,}", _bytes(st.alloc_bytes), f"{st.frees:,}"]
            for st in d.steps[:10]
        ]
        console.print(fitted(cols, rows, width).table)
        if len(d.steps) > 10:
            console.print(f"{len(d.steps) - 10} more steps: --format json lists them all")
    elif d.entries:
        console.print("per-step churn: unavailable (no ProfilerStep annotations with times)")
    if d.short_lived:
        console.print(Text("large short-lived allocations", style="bold"))
        cols = (
            Col("site", elastic=True, floor=24, shrink=site_names),
            Col("bytes", right=True),
            Col("freed after entries", right=True),
            Col("lifetime us", right=True, drop=1),
        )
        rows = [
            [
                sl.frame,
                _bytes(sl.bytes),
                f"{sl.entries:,}",
                "–" if sl.lifetime_us is None else f"{sl.lifetime_us:,}",
            ]
            for sl in d.short_lived[:5]
        ]
        fit = fitted(cols, rows, width)
        console.print(fit.table)
        if (note := fit.note()) is not None:
            console.print(Text(note, style="dim"))
    for w in d.warnings:
        console.print(Text(f"note: {w}", style="yellow"))


def share_text(share: float) -> str:
    """A share as a percentage with the digits that keep it readable (never `0 %` for > 0)."""
    pct = 100 * share
    if pct >= 10 or pct == 0:
        return f"{pct:,.0f} %"
    if pct >= 0.1:
        return f"{pct:.1f} %"
    return f"{pct:.2g} %"


def check_table(c: EstimateCheck) -> tuple[list[Col], list[list[str]]]:
    """The estimate per GPU: ZeRO-0 and, over several GPUs, the optimizer sharded (ZeRO-1)."""
    e = c.estimate
    gpus = e.dp * e.tp * e.pp
    cols = [Col("estimate per GPU", elastic=True, floor=10), Col("ZeRO-0", right=True)]
    rows = [
        ["weights", _bytes(e.weights_bytes)],
        ["gradients", _bytes(e.grads_bytes)],
        [f"optimizer ({e.bytes_per_param['optimizer']:g} B/param)", _bytes(e.optimizer_bytes)],
        ["total", _bytes(c.static_bytes)],
    ]
    if gpus > 1:
        cols.append(Col(f"ZeRO-1 over {gpus} GPUs", right=True))
        sharded = [e.weights_bytes, e.grads_bytes, c.sharded_optimizer_bytes]
        for row, value in zip(rows, [*sharded, sum(sharded)], strict=True):
            row.append(_bytes(value))
    return cols, rows


def check_lines(c: EstimateCheck) -> list[str]:
    """The measured peak as a share of the estimate, in words (after `check_table`)."""
    share = c.peak_share_of_estimate
    of = "" if share is None else f" = {share_text(share)} of the {_bytes(c.static_bytes)} estimate"
    lines = [
        f"measured allocated peak {_bytes(c.measured_peak_bytes)}{of}",
        f"optimizer allocations alive at the peak: {_bytes(c.measured_optimizer_bytes)}",
    ]
    if share is not None and share < 0.5:
        lines.append(
            "the peak is well below the estimate: the model that ran is smaller than --params "
            "says, or its states live elsewhere (CPU offload, another device)"
        )
    return lines


def _render_check(c: EstimateCheck, console: Console) -> None:
    console.print(Text("\nbadput estimate memory beside the measured peak", style="bold"))
    cols, rows = check_table(c)
    console.print(fitted(cols, rows, console.width).table)
    for line in check_lines(c):
        console.print(Text(line))


def _device_html(d: DeviceMemory) -> str:
    e = html.escape
    when = f"entry {d.peak_allocated_entry:,} of {d.entries:,}" if d.entries else "at dump time"
    if d.peak_allocated_time_us is not None:
        when += f", t = {d.peak_allocated_time_us:,} us"
    if d.peak_step is not None:
        when += f", in {d.peak_step}"
    end = d.end
    parts = [
        f"<h2>GPU {d.device}</h2>",
        "<ul>",
        f"<li>peak allocated <b>{_bytes(d.peak_allocated_bytes)}</b> ({e(when)}); reserved then "
        f"{_bytes(d.reserved_at_peak_bytes)}</li>",
        f"<li>peak reserved <b>{_bytes(d.peak_reserved_bytes)}</b>; allocated then "
        f"{_bytes(d.allocated_at_peak_reserved_bytes)} (fragmentation "
        f"{_bytes(d.fragmentation_at_peak_reserved_bytes)})</li>",
        f"<li>segments at dump: {end.segments:,} holding {_bytes(end.reserved_bytes)}, "
        f"{_bytes(end.allocated_bytes)} in use, {_bytes(end.fragmentation_bytes)} cached unused; "
        f"{100 * end.below_half_share:.0f} % of segments below half use</li>",
        "</ul>",
    ]
    if d.timeline is not None:
        timed = d.peak_allocated_time_us is not None or d.entries == 0
        what = "time" if timed else "history entry (the history has no times)"
        parts.append(
            memory_plot(
                d.timeline,
                caption=(
                    f"Allocated and reserved bytes replayed from the {d.entries:,} entries of "
                    f"the allocator history, by {e(what)}; memory alive before the history "
                    "started is included."
                ),
                entries=not timed,
            )
        )
    else:
        parts.append("<p>No allocator history: the numbers are the state at dump time.</p>")
    if d.top_sites:
        parts.append("<h3>Alive at the allocated peak, by source site</h3>")
        rows = [[e(s.frame), _bytes(s.bytes), f"{s.count:,}"] for s in d.top_sites]
        parts.append(html_table(["site", "bytes", "blocks"], rows, name_col=True))
    if d.short_lived:
        parts.append("<h3>Large short-lived allocations</h3>")
        rows = [
            [
                e(sl.frame),
                _bytes(sl.bytes),
                f"{sl.entries:,}",
                f"{sl.lifetime_us:,}" if sl.lifetime_us is not None else "–",
            ]
            for sl in d.short_lived
        ]
        parts.append(
            html_table(["site", "bytes", "freed after entries", "lifetime us"], rows, True)
        )
    parts += [f'<p class="note">note: {e(w)}</p>' for w in d.warnings]
    return "\n".join(parts)


def render_memory_html(analysis: SnapshotAnalysis, diagnosis: MemoryDiagnosis) -> str:
    """The snapshot report as one self-contained HTML page (inline CSS and SVG, no script).

    Per GPU: the peaks, allocated and reserved memory over the history, what was alive at the
    peak by site, large short-lived allocations; then the findings with their fixes.

    Example:
        >>> render_memory_html(analysis, diagnosis)[:15]  # doctest: +SKIP
        '<!DOCTYPE html>'
    """
    e = html.escape
    findings = []
    for f in diagnosis.findings:
        fixes = "".join(f"<li>{e(step)}</li>" for step in f.fix)
        findings.append(
            f'<li><span class="sev-{e(f.severity)}">[{e(f.severity)}]</span> '
            f"<b>{e(f.id)}</b> (GPU {f.device}): {e(f.title)}<br><small>save ~"
            f"{_bytes(f.savings_bytes)} at the peak ({100 * f.savings_share:.1f} % of reserved)"
            f"</small><ul>{fixes}</ul></li>"
        )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>badput memory</title><style>{PAGE_CSS}</style></head><body>",
        f"<h1>badput memory: {e(os.path.basename(analysis.path))}</h1>",
        f"<p>badput {e(__version__)}</p>",
        *(f'<p class="note">note: {e(w)}</p>' for w in analysis.warnings),
        *(_device_html(d) for d in analysis.devices),
        "<h2>What to change</h2>",
        f"<ol>{''.join(findings)}</ol>" if findings else "<p>No memory finding worth a change.</p>",
        "</body></html>\n",
    ]
    return "\n".join(parts)
