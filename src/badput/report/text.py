"""The terminal report of `badput analyze`: goodput first, then where the rest went."""

from __future__ import annotations

import dataclasses
import os
import statistics

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from badput.analysis.comm import link_peak_gbps
from badput.analysis.ranks import CrossRank, RankSummary
from badput.analysis.results import DeviceAnalysis, WindowSource
from badput.diagnose import Diagnosis, Finding, JobResult, Rule, diagnose_job, outcome_of
from badput.report.units import NOT_AVAILABLE, format_share
from badput.report.units import format_ms as _ms
from badput.trace.model import Trace

__all__ = ["render_job", "render_rule", "render_text"]

_FINDINGS_SHOWN = 5
# Above this many GPUs the per-GPU sections are left out of the text report (JSON has them).
_MAX_DEVICE_SECTIONS = 8
# Rows of the rank table, notes and failed traces listed before "N more".
_OUTLIER_ROWS = 10
_MAX_NOTES = 5
_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}

_BAR_WIDTH = 50
# A step table longer than this shows only the slowest steps (JSON has them all).
_MAX_STEP_ROWS = 12
_SLOWEST_STEPS = 10
_COLORS = {"compute": "green", "communication": "magenta", "memory": "blue", "idle": "red"}
_WINDOW_SOURCE = {
    WindowSource.GPU_STEPS: "GPU-side ProfilerStep annotations",
    WindowSource.CPU_STEPS: "CPU ProfilerStep spans stretched to the GPU work they launched",
    WindowSource.GPU_ACTIVITY: "no steps: span of all GPU activity",
    WindowSource.USER: "--window",
    WindowSource.NONE: "none",
}
# Idle cause -> (label in the breakdown, short label in the step table).
_CAUSES = (
    ("dataloader", "waiting on the DataLoader", "dataloader"),
    ("cpu", "host busy in CPU ops", "cpu ops"),
    ("runtime", "in CUDA runtime/driver calls", "runtime"),
    ("other", "host outside any op", "other"),
)


def _pct(part: int | float, whole: int | float) -> str:
    return f"{100 * part / whole:5.1f} %" if whole else "    – "


def _short(name: str, width: int = 60) -> str:
    """A kernel name a person can scan: no `void`, template and parameter lists elided."""
    if name.startswith("void "):
        name = name[5:]
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch in "<(":
            if depth == 0:
                out.append(ch + "…")
            depth += 1
        elif ch in ">)" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    short = "".join(out)
    return short if len(short) <= width else short[: width - 1] + "…"


def _bar(d: DeviceAnalysis) -> Text:
    b = d.breakdown
    parts = [
        ("compute", b.compute_ns),
        ("communication", b.communication_ns),
        ("memory", b.memory_ns),
        ("idle", b.idle_ns),
    ]
    total = b.total_ns or 1
    cells = [round(_BAR_WIDTH * v / total) for _, v in parts]
    cells[-1] = max(0, _BAR_WIDTH - sum(cells[:-1]))
    bar = Text()
    for (key, _), n in zip(parts, cells, strict=True):
        bar.append("█" * n if key != "idle" else "░" * n, style=_COLORS[key])
    return bar


def _findings(findings: list[Finding], title: str, with_where: bool = False) -> list[Text]:
    """The top findings, one line each with the first fix."""
    if not findings:
        return []
    lines = [Text(""), Text(title, style="bold")]
    for i, f in enumerate(findings[:_FINDINGS_SHOWN], 1):
        line = Text(f"{i}. ")
        line.append(f"[{f.severity}] ", style=_SEVERITY_STYLE[f.severity])
        line.append(f"{f.id}", style="bold")
        where = f" (rank {f.rank})" if with_where and f.rank is not None else ""
        line.append(f"{where}: {f.title}\n")
        line.append(
            f"   save ~{f.savings_ns / 1e6:,.2f} ms/step ({100 * f.savings_share:.1f} %)"
            f" · fix: {f.fix[0] if f.fix else '-'}",
            style="dim",
        )
        lines.append(line)
    more = len(findings) - _FINDINGS_SHOWN
    tail = f"{more} more in --format json; " if more > 0 else ""
    lines.append(Text(f"{tail}badput explain ID for the full explanation", style="dim"))
    return lines


def _findings_by_rule(findings: list[Finding], gpus: int) -> list[Text]:
    """One line per rule over many GPUs: how many it fires on, the worst, the median."""
    if not findings:
        return []
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:  # ranked: each rule's first finding is its worst
        by_rule.setdefault(f.id, []).append(f)
    lines = [Text(""), Text("what to fix first, over all GPUs", style="bold")]
    for i, (rule_id, found) in enumerate(list(by_rule.items())[:_FINDINGS_SHOWN], 1):
        worst = found[0]
        median = statistics.median(f.savings_ns for f in found)
        line = Text(f"{i}. ")
        line.append(f"[{worst.severity}] ", style=_SEVERITY_STYLE[worst.severity])
        line.append(rule_id, style="bold")
        line.append(f" on {len(found):,} of {gpus:,} GPUs; worst (rank {worst.rank}): ")
        line.append(f"{worst.title}\n")
        line.append(
            f"   save ~{worst.savings_ns / 1e6:,.2f} ms/step ({100 * worst.savings_share:.1f} %) "
            f"at worst, median {median / 1e6:,.2f} ms/step"
            f" · fix: {worst.fix[0] if worst.fix else '-'}",
            style="dim",
        )
        lines.append(line)
    more = len(by_rule) - _FINDINGS_SHOWN
    tail = f"{more} more rules in --format json; " if more > 0 else ""
    lines.append(Text(f"{tail}badput explain ID for the full explanation", style="dim"))
    return lines


def render_rule(rule: Rule, console: Console) -> None:
    """Print a rule's full explanation."""
    console.print(Text(f"{rule.id}: {rule.title}", style="bold"))
    console.print(Text(rule.explanation))
    console.print(Text("\nSavings estimate", style="bold"))
    console.print(Text(rule.savings))
    if rule.fix:
        console.print(Text("\nFixes", style="bold"))
        for step in rule.fix:
            console.print(Text(f"- {step}"))
    if rule.refs:
        console.print(Text("\nReferences", style="bold"))
        for ref in rule.refs:
            console.print(Text(f"- {ref}"), soft_wrap=True)


def _device(d: DeviceAnalysis, top: int, findings: list[Finding]) -> Group:
    head = Text()
    gpu = f"GPU {d.device}" + (f" ({d.gpu})" if d.gpu else "")
    rank = f" · rank {d.rank}/{d.world_size}" if d.rank is not None else ""
    head.append(f"{os.path.basename(d.trace)}", style="bold")
    head.append(f" · {gpu}{rank}\n")
    if d.goodput is None:
        head.append(f"Goodput {NOT_AVAILABLE}: {d.goodput_undefined_reason}.\n", style="yellow")
        if d.device >= 0:
            steps = f"{len(d.steps)} steps, " if d.steps else ""
            head.append(
                f"window {_ms(d.window_ns)} ms ({steps}{_WINDOW_SOURCE[d.window_source]})\n",
                style="dim",
            )
        for w in d.warnings:
            head.append(f"note: {w}\n", style="yellow")
        return Group(head)
    steps = f"{len(d.steps)} steps, " if d.steps else ""
    head.append(
        f"window {_ms(d.window_ns)} ms ({steps}{_WINDOW_SOURCE[d.window_source]})\n", style="dim"
    )
    head.append("\nGoodput ", style="bold")
    head.append(format_share(d.goodput), style="bold green")
    head.append("   ")
    head.append_text(_bar(d))
    head.append("\n")

    b, c, win = d.breakdown, d.idle_causes, d.window_ns
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("where the GPU time goes")
    table.add_column("ms", justify="right")
    table.add_column("of window", justify="right")
    table.add_row(
        Text("compute", style=_COLORS["compute"]), _ms(b.compute_ns), _pct(b.compute_ns, win)
    )
    comm_note = ""
    if d.comm.total_ns:
        hidden = _pct(d.comm.overlapped_ns, d.comm.total_ns).strip()
        comm_note = f"  (of {_ms(d.comm.total_ns)} ms, {hidden} hidden)"
    table.add_row(
        Text("communication (exposed)" + comm_note, style=_COLORS["communication"]),
        _ms(b.communication_ns),
        _pct(b.communication_ns, win),
    )
    table.add_row(
        Text("memory (memcpy/memset)", style=_COLORS["memory"]),
        _ms(b.memory_ns),
        _pct(b.memory_ns, win),
    )
    table.add_row(Text("idle", style=_COLORS["idle"]), _ms(b.idle_ns), _pct(b.idle_ns, win))
    causes = sorted(_CAUSES, key=lambda kv: -getattr(c, f"{kv[0]}_ns"))
    for key, label, _ in causes:
        ns = getattr(c, f"{key}_ns")
        table.add_row(Text(f"  └ {label}", style="dim"), _ms(ns), _pct(ns, win))

    parts: list[Text | Table] = [head, table]
    parts += _findings(findings, "what to fix first")
    if d.kernels and top != 0:
        kt = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
        kt.add_column("top GPU operations", no_wrap=True, overflow="ellipsis", max_width=50)
        kt.add_column("category", no_wrap=True)
        kt.add_column("count", justify="right")
        kt.add_column("total ms", justify="right", no_wrap=True)
        kt.add_column("mean us", justify="right")
        for k in d.kernels[: top if top > 0 else None]:
            kt.add_row(
                _short(k.name),
                k.category,
                f"{k.count:,}",
                _ms(k.total_ns),
                f"{k.mean_ns / 1000:,.1f}",
            )
        parts.append(Text(""))
        parts.append(kt)
        if d.short_kernel_share is not None:
            parts.append(
                Text(
                    f"{100 * d.short_kernel_share:.1f} % of kernel time is in kernels shorter "
                    "than 10 us",
                    style="dim",
                )
            )
    stats = d.step_time_stats_ns()
    if stats is not None:
        mean, median, longest = stats
        parts.append(Text(""))
        parts.append(
            Text(
                f"steps: mean {_ms(mean)} ms · median {_ms(median)} ms · max {_ms(longest)} ms",
                style="bold",
            )
        )
        st = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("step", "ms", "compute", "comm", "memory", "idle", "main idle cause"):
            st.add_column(col, justify="left" if col in ("step", "main idle cause") else "right")
        shown = d.steps
        if len(d.steps) > _MAX_STEP_ROWS:
            slowest = sorted(range(len(d.steps)), key=lambda i: -d.steps[i].dur_ns)
            shown = [d.steps[i] for i in sorted(slowest[:_SLOWEST_STEPS])]
            parts.append(
                Text(
                    f"the {_SLOWEST_STEPS} slowest of {len(d.steps)} steps, in time order "
                    "(--format json lists all)",
                    style="dim",
                )
            )
        for s in shown:
            sb, sc = s.breakdown, s.idle_causes
            _, _, label = max(_CAUSES, key=lambda kv: getattr(sc, f"{kv[0]}_ns"))
            cause = label if sb.idle_ns else "–"
            st.add_row(
                s.name,
                _ms(s.dur_ns),
                _pct(sb.compute_ns, s.dur_ns),
                _pct(sb.communication_ns, s.dur_ns),
                _pct(sb.memory_ns, s.dur_ns),
                _pct(sb.idle_ns, s.dur_ns),
                cause,
            )
        parts.append(st)
    for warning in d.warnings:
        parts.append(Text(f"note: {warning}", style="yellow"))
    return Group(*parts)


def memory_summary(job: JobResult, d: DeviceAnalysis) -> str | None:
    """The GPU's allocator peaks from the trace's `[memory]` events; None without them."""
    outcome = next((o for o in job.analysed if o.path == d.trace), None)
    m = next((m for m in outcome.memory if m.device == d.device), None) if outcome else None
    if m is None:
        return None
    gib = 2**30
    return (
        f"memory: peak allocated {m.peak_allocated_bytes / gib:,.2f} GiB, peak reserved "
        f"{m.peak_reserved_bytes / gib:,.2f} GiB ({m.events:,} allocator events)"
    )


def render_text(
    results: list[tuple[Trace, list[DeviceAnalysis]]],
    console: Console,
    diagnosis: Diagnosis | None = None,
    top: int = 10,
) -> None:
    """Print the report of traces analysed in this process (see `render_job`)."""
    job = diagnose_job([outcome_of(trace, devices, top=top) for trace, devices in results])
    render_job(dataclasses.replace(job, diagnosis=diagnosis or Diagnosis()), console, top=top)


def render_job(job: JobResult, console: Console, top: int = 10) -> None:
    """Print the report of a job: one section per GPU, the rank table, job-level findings.

    Above `_MAX_DEVICE_SECTIONS` GPUs the per-GPU sections give way to the findings ranked
    over every GPU, so the report stays a few screens long at any number of ranks.
    """
    diagnosis = job.diagnosis
    analysed = job.analysed
    devices = [d for o in analysed for d in o.devices]
    many = len(devices) > _MAX_DEVICE_SECTIONS
    first = True
    noted = 0
    for o in analysed:
        for warning in o.warnings:
            noted += 1
            if not many or noted <= _MAX_NOTES:
                console.print(Text(f"note: {o.path}: {warning}", style="yellow"))
    if many and noted > _MAX_NOTES:
        console.print(Text(f"note: {noted - _MAX_NOTES} more in --format json", style="yellow"))
    if not many:
        for d in devices:
            if not first:
                console.rule(style="dim")
            first = False
            console.print(_device(d, top, diagnosis.for_device(d)))
            memory = memory_summary(job, d)
            if memory is not None:
                console.print(Text(memory, style="bold"))
    if job.cross is not None:
        if not first:
            console.rule(style="dim")
        first = False
        console.print(_rank_section(job, job.cross, per_gpu_shown=not many))
    if many:
        per_gpu = [f for f in diagnosis.ranked if f.id != "straggler"]
        console.print(Group(*_findings_by_rule(per_gpu, len(devices))))
    job_level = [f for f in diagnosis.ranked if f.id == "straggler"]
    if job_level:
        console.rule(style="dim")
        console.print(Group(*_findings(job_level, "across ranks", with_where=True)))
    if job.failed:
        lines = [Text("")] if not first else []
        lines.append(Text(f"{len(job.failed)} trace(s) could not be analysed:", style="yellow"))
        for o in job.failed[:_MAX_NOTES]:
            lines.append(Text(f"  {o.path}: {o.error}", style="yellow"))
        if len(job.failed) > _MAX_NOTES:
            lines.append(Text(f"  {len(job.failed) - _MAX_NOTES} more in --format json"))
        console.print(Group(*lines))


_EXTREME_LABELS = {
    "goodput": "goodput",
    "compute": "compute ms",
    "communication": "communication (exposed) ms",
    "memory": "memory ms",
    "idle": "idle ms",
    "idle_runtime": "  └ runtime ms",
    "idle_dataloader": "  └ dataloader ms",
    "idle_cpu": "  └ cpu ops ms",
    "idle_other": "  └ other ms",
    "comm_total": "communication (all) ms",
    "step_time": "step (median) ms",
}


def _value(category: str, v: float | None) -> str:
    if category == "goodput":
        return format_share(v)
    return "–" if v is None else _ms(v)


def _rank_section(job: JobResult, cross: CrossRank, per_gpu_shown: bool) -> Group:
    summaries = [s for o in job.analysed for s in o.summaries if s.rank is not None]
    worlds = sorted({s.world_size for s in summaries if s.world_size is not None})
    head = Text()
    head.append(f"Across {len({s.rank for s in summaries})} ranks", style="bold")
    if worlds:
        head.append(f" (world size {', '.join(str(w) for w in worlds)})")
    if job.failed:
        head.append(f", {len(job.failed)} failed", style="yellow")
    if not per_gpu_shown:
        head.append(
            f"\nper-GPU sections left out above {_MAX_DEVICE_SECTIONS} GPUs; "
            "--format json has them all",
            style="dim",
        )
    parts: list[Text | Table] = [head]

    ext = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("", "min", "rank", "median", "max", "rank"):
        ext.add_column(col, justify="left" if col == "" else "right")
    for e in cross.extremes:
        ext.add_row(
            _EXTREME_LABELS.get(e.category, f"{e.category} ms"),
            _value(e.category, e.min),
            str(e.min_rank),
            _value(e.category, e.median),
            _value(e.category, e.max),
            str(e.max_rank),
        )
    parts += [Text(""), ext]

    if cross.stragglers:
        line = Text("stragglers: ", style="bold")
        line.append(
            ", ".join(
                f"rank {st.rank} (score {st.score:.2f}, others wait {_ms(st.wait_caused_ns)} ms)"
                for st in cross.stragglers[:_MAX_NOTES]
            )
        )
        if len(cross.stragglers) > _MAX_NOTES:
            line.append(f", {len(cross.stragglers) - _MAX_NOTES} more in --format json")
        parts += [Text(""), line]

    shown = _outliers(summaries, {st.rank for st in cross.stragglers})
    if shown:
        title = (
            "every rank"
            if len(shown) == len(summaries)
            else f"the {len(shown)} ranks furthest from the median (of {len(summaries)})"
        )
        parts += [Text(""), Text(title, style="bold")]
        rt = Table(box=None, pad_edge=False, header_style="bold")
        for col in RANK_COLUMNS:
            rt.add_column(col, justify="right")
        for s in shown:
            rt.add_row(*rank_cells(s, cross))
        parts.append(rt)
        parts.append(
            Text(
                "comm, memory, idle: exposed shares of the window · step: median step · "
                "comm ms: all collective time\nwaited: for the last rank to arrive · "
                "score: compute per step over the median rank's",
                style="dim",
            )
        )

    by_type = _collectives_by_type(summaries)
    if by_type:
        parts += [Text(""), Text("collectives by type, over all ranks", style="bold")]
        ct = Table(box=None, pad_edge=False, header_style="bold")
        ct.add_column(COLLECTIVE_COLUMNS[0])
        for col in COLLECTIVE_COLUMNS[1:]:
            ct.add_column(col, justify="right")
        for kind, row in by_type.items():
            ct.add_row(*collective_cells(kind, row))
        parts.append(ct)
    for warning in cross.warnings[:_MAX_NOTES]:
        parts.append(Text(f"note: {warning}", style="yellow"))
    return Group(*parts)


#: Columns of the per-rank table (text and Markdown reports).
RANK_COLUMNS = (
    "rank", "goodput", "comm", "memory", "idle", "step ms", "comm ms", "waited ms", "score",
)  # fmt: skip
#: Columns of the collectives-by-type table (text and Markdown reports).
COLLECTIVE_COLUMNS = (
    "type", "ranks", "kernels", "total ms", "exposed ms", "hidden", "busbw GB/s (median)",
    "of link peak",
)  # fmt: skip


def rank_cells(s: RankSummary, cross: CrossRank) -> list[str]:
    """One rank's row of the per-rank table, as `RANK_COLUMNS`."""
    b, win = s.breakdown, s.window_ns
    waited = cross.waited_ns.get(s.rank) if s.rank is not None else None
    score = cross.scores.get(s.rank) if s.rank is not None else None
    return [
        str(s.rank),
        format_share(s.goodput),
        _pct(b.communication_ns, win),
        _pct(b.memory_ns, win),
        _pct(b.idle_ns, win),
        _ms(statistics.median(s.step_dur_ns)) if s.step_dur_ns else "–",
        _ms(s.comm_total_ns),
        _ms(waited) if waited is not None else "–",
        f"{score:.2f}" if score is not None else "–",
    ]


def collective_cells(
    kind: str, row: tuple[int, int, int, int, float | None, float | None]
) -> list[str]:
    """One collective type's row, as `COLLECTIVE_COLUMNS`, from `_collectives_by_type`."""
    ranks, count, total, exposed, busbw, of_peak = row
    return [
        kind,
        f"{ranks:,}",
        f"{count:,}",
        _ms(total),
        _ms(exposed),
        _pct(total - exposed, total).strip(),
        f"{busbw:,.1f}" if busbw is not None else "–",
        f"{100 * of_peak:.0f} %" if of_peak is not None else "–",
    ]


def _outliers(summaries: list[RankSummary], stragglers: set[int]) -> list[RankSummary]:
    """At most `_OUTLIER_ROWS` ranks, the stragglers first, in rank order.

    The rest are those that spend their window most unlike the median rank (L1 distance of the
    breakdown shares).
    """
    if len(summaries) <= _OUTLIER_ROWS:
        return summaries

    def shares(s: RankSummary) -> list[float]:
        b, win = s.breakdown, s.window_ns or 1
        return [b.compute_ns / win, b.communication_ns / win, b.memory_ns / win, b.idle_ns / win]

    table = np.array([shares(s) for s in summaries])
    distance = np.abs(table - np.median(table, axis=0)).sum(axis=1)
    order = sorted(
        range(len(summaries)),
        key=lambda i: (summaries[i].rank not in stragglers, -distance[i], summaries[i].rank),
    )
    return sorted((summaries[i] for i in order[:_OUTLIER_ROWS]), key=lambda s: s.rank or 0)


def _collectives_by_type(
    summaries: list[RankSummary],
) -> dict[str, tuple[int, int, int, int, float | None, float | None]]:
    """Per collective type: ranks, kernels, total and exposed ns, median busbw over ranks.

    The last field is the median over ranks of busbw as a share of the GPU's one-way link
    peak, when the hardware table knows the GPU.
    """
    acc: dict[str, tuple[set[int | None], int, int, int, list[float], list[float]]] = {}
    for s in summaries:
        peak = link_peak_gbps(s.gpu, warn=False)
        for c in s.comm_stats:
            ranks, count, total, exposed, bw, share = acc.setdefault(
                c.type, (set(), 0, 0, 0, [], [])
            )
            ranks.add(s.rank)
            if c.busbw_gbps is not None:
                bw.append(c.busbw_gbps)
                if peak:
                    share.append(c.busbw_gbps / peak)
            acc[c.type] = (
                ranks,
                count + c.count,
                total + c.total_ns,
                exposed + c.exposed_ns,
                bw,
                share,
            )
    return {
        kind: (
            len(r),
            n,
            t,
            e,
            float(np.median(bw)) if bw else None,
            float(np.median(sh)) if sh else None,
        )
        for kind, (r, n, t, e, bw, sh) in acc.items()
    }
