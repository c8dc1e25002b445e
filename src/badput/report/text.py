"""The terminal report of `badput analyze`: goodput first, then where the rest went."""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
import textwrap
from collections.abc import Sequence

import numpy as np
from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from badput.analysis.comm import link_peak_gbps
from badput.analysis.ops import NO_MODULE, ModelAnalysis, ModuleRow, OpRow, above_roof
from badput.analysis.ranks import CrossRank, RankSummary
from badput.analysis.results import DeviceAnalysis, WindowSource
from badput.diagnose import Diagnosis, Finding, Job, JobResult, Rule, diagnose_job, outcome_of
from badput.report.evidence import evidence_line
from badput.report.names import distinct_names
from badput.report.table import Col as _Col
from badput.report.table import distinct, fitted
from badput.report.table import fitted_table as _fitted
from badput.report.units import (
    NOT_AVAILABLE,
    elide_middle,
    format_dtypes,
    format_shapes,
    format_share,
    plural,
    trim_head,
)
from badput.report.units import format_ms as _ms
from badput.trace.model import Trace

__all__ = [
    "OP_COLUMNS",
    "above_roof_lines",
    "attribution_lines",
    "kernel_window_note",
    "mfu_line",
    "module_tree",
    "op_cells",
    "render_job",
    "render_rule",
    "render_text",
    "wrap_text",
]

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


# A number and its unit, kept on one line when a paragraph wraps ("9.9 %", "1.31 ms").
_NUMBER_UNIT = re.compile(
    r"(?<=\d) (?=(?:%|ms|us|ns|s|B|KiB|MiB|GiB|MB|GB|GB/s|TFLOP/s|x|ms/step)(?![\w/]))"
)
_KEEP = "\u00a0"  # no-break space: textwrap never breaks at it (only at ASCII blanks)


def wrap_text(text: str, width: int, indent: str = "") -> str:
    r"""`text` folded to `width` columns at blanks, never between a number and its unit.

    Lines after the first start with `indent`. A word longer than the width stays whole
    (the terminal folds it), so no number is ever split.

    Example:
        >>> wrap_text("save 9.9 % of the step", 12, "  ")
        'save 9.9 %\n  of the\n  step'
    """
    if width <= len(indent) + 8 or cell_len(text) <= width:
        return text
    kept = _NUMBER_UNIT.sub(_KEEP, text.replace(_KEEP, " "))
    lines = textwrap.wrap(
        kept,
        width=width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(lines).replace(_KEEP, " ")


def _para(text: str, width: int, style: str | None = None, indent: str = "") -> Text:
    """One paragraph of prose as rich text, folded by `wrap_text`."""
    return Text(wrap_text(text, width, indent), style=style or "")


def launch_line(d: DeviceAnalysis) -> str:
    """One line of launch statistics: delay, queue depth, starved queues (issue 19)."""
    launch = d.launch
    assert launch is not None and launch.delay is not None
    delay = launch.delay
    text = (
        f"launch delay (kernel start - end of its launch call): median "
        f"{delay.median_ns / 1e3:,.1f} us, p90 {delay.p90_ns / 1e3:,.1f} us, max "
        f"{delay.max_ns / 1e3:,.1f} us; queue depth max {launch.queue_depth_max}"
    )
    if launch.queue_empty_share is not None:
        text += (
            f"; every queue empty while the host ran {100 * launch.queue_empty_share:.1f} % "
            "of the window"
        )
    if launch.outliers:
        top = launch.outliers[0]
        text += (
            f"; slowest launches under {top.op} ({top.count}, max {top.max_delay_ns / 1e3:,.1f} us)"
        )
    return text


#: Labels of the critical path's parts (`BREAKDOWN_KEYS`), in report order.
PATH_PARTS = {
    "host": "host",
    "launch_delay": "launch delay",
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU communication",
    "gpu_memory": "GPU memory",
    "kernel_gap": "kernel gaps",
    "sync_wait": "sync wait",
}
#: Ops named in the critical-path lines.
PATH_OPS_SHOWN = 5


def critical_path_lines(d: DeviceAnalysis) -> list[str]:
    """The critical path in two lines: its length and breakdown, and the ops on it (issue 19)."""
    cp = d.critical_path
    assert cp is not None and cp.length_ns > 0
    length = cp.length_ns
    steps = len(d.steps)
    per = f" ({length / steps / 1e6:,.2f} ms a step)" if steps > 1 else ""
    parts = " · ".join(
        f"{label} {100 * cp.breakdown_ns[key] / length:.1f} %"
        for key, label in PATH_PARTS.items()
        if cp.breakdown_ns[key] > 0
    )
    lines = [f"critical path {length / 1e6:,.2f} ms{per}: {parts}"]
    if cp.top_ops:
        ops = " · ".join(f"{op} {ns / 1e6:,.2f} ms" for op, ns in cp.top_ops[:PATH_OPS_SHOWN])
        lines.append(f"on it: {ops}")
    if cp.top_modules:
        mods = " · ".join(f"{m} {ns / 1e6:,.2f} ms" for m, ns in cp.top_modules[:PATH_OPS_SHOWN])
        lines.append(f"modules on it (GPU side): {mods}")
    return lines


def _pct(part: int | float, whole: int | float) -> str:
    return f"{100 * part / whole:5.1f} %" if whole else "    – "


# Widest a name column grows on a wide terminal.
_KERNEL_NAME_CAP = 80
_OP_NAME_CAP = 40
_SHAPES_CAP = 60
# Module rows: deepest level listed.
_MODULE_DEPTH = 4
_WATERFALL_BAR = 20


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
    return short if len(short) <= width else trim_head(short[: width - 1]) + "…"


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


def _headline(number: str, severity: str, rule_id: str, rest: str, width: int) -> Text:
    """`1. [high] rule-id...`: the finding's first line(s), severity and id styled."""
    line = Text(wrap_text(f"{number}[{severity}] {rule_id}{rest}", width, "   "))
    start = len(number)
    line.stylize(_SEVERITY_STYLE[severity], start, start + len(severity) + 2)
    line.stylize("bold", start + len(severity) + 3, start + len(severity) + 3 + len(rule_id))
    return line


def _findings(
    findings: list[Finding], title: str, with_where: bool = False, width: int = 120
) -> list[Text]:
    """The top findings: each with its saving, its first fix and its key evidence."""
    if not findings:
        return []
    lines = [Text(""), Text(title, style="bold")]
    for i, f in enumerate(findings[:_FINDINGS_SHOWN], 1):
        where = f" (rank {f.rank})" if with_where and f.rank is not None else ""
        lines.append(_headline(f"{i}. ", f.severity, f.id, f"{where}: {f.title}", width))
        save = (
            f"   save ~{f.savings_ns / 1e6:,.2f} ms/step ({100 * f.savings_share:.1f} %)"
            f"{graph_savings_text(f)} · fix: {f.fix[0] if f.fix else '-'}"
        )
        lines.append(_para(save, width, "dim", "   "))
        evidence = evidence_line(f)
        if evidence is not None:
            lines.append(_para("   " + evidence, width, "dim", "   "))
    more = len(findings) - _FINDINGS_SHOWN
    tail = f"{more} more in --format json; " if more > 0 else ""
    lines.append(_para(f"{tail}badput explain ID for the full explanation", width, "dim"))
    return lines


def graph_savings_text(f: Finding) -> str:
    """The saving along the critical path, where the finding has one (", 1.23 ms along ...")."""
    if f.graph_savings_ns is None:
        return ""
    return f", {f.graph_savings_ns / 1e6:,.2f} ms along the critical path"


def _findings_by_rule(findings: list[Finding], gpus: int, width: int = 120) -> list[Text]:
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
        rest = (
            f" on {len(found):,} of {plural(gpus, 'GPU')}; worst (rank {worst.rank}): {worst.title}"
        )
        lines.append(_headline(f"{i}. ", worst.severity, rule_id, rest, width))
        save = (
            f"   save ~{worst.savings_ns / 1e6:,.2f} ms/step ({100 * worst.savings_share:.1f} %) "
            f"at worst, median {median / 1e6:,.2f} ms/step"
            f" · fix: {worst.fix[0] if worst.fix else '-'}"
        )
        lines.append(_para(save, width, "dim", "   "))
        evidence = evidence_line(worst)
        if evidence is not None:
            lines.append(_para(f"   worst {evidence}", width, "dim", "   "))
    more = len(by_rule) - _FINDINGS_SHOWN
    tail = f"{plural(more, 'more rule')} in --format json; " if more > 0 else ""
    lines.append(_para(f"{tail}badput explain ID for the full explanation", width, "dim"))
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


def _kernel_table(d: DeviceAnalysis, top: int, width: int) -> Table:
    """The top GPU operations by total time, names shortened to stay apart and fit."""
    shown = d.kernels[: top if top > 0 else None]
    names = [k.name for k in shown]
    cols = [
        _Col(
            "top GPU operations",
            elastic=True,
            floor=16,
            cap=_KERNEL_NAME_CAP,
            shrink=lambda _cells, w: distinct_names(names, w),
        ),
        _Col("category"),
        _Col("count", right=True),
        _Col("total ms", right=True),
        _Col("mean us", right=True),
    ]
    rows = [
        [name, k.category, f"{k.count:,}", _ms(k.total_ns), f"{k.mean_ns / 1000:,.1f}"]
        for name, k in zip(distinct_names(names, _KERNEL_NAME_CAP), shown, strict=True)
    ]
    return _fitted(cols, rows, width)


def kernel_window_note(d: DeviceAnalysis) -> str:
    """What the kernel table's totals count, against the window the breakdown is clipped to.

    A GPU operation is listed when it starts in the window and counted whole, so a kernel
    that runs past the window's end adds time the breakdown above leaves out (a kernel
    table row can exceed the window's communication time). Where the analysis measured that
    time (`kernels_outside_window_ns`), the note gives it.
    """
    outside = d.kernels_outside_window_ns
    basis = "totals: whole GPU operations that start in the window, not clipped to it"
    if outside > 0:
        return f"{basis}; {_ms(outside)} ms of them runs past the window's end"
    return basis


#: Columns of the top-ops table (text, Markdown and HTML reports).
OP_COLUMNS = ("op", "shapes", "dtype", "calls", "GPU ms", "TFLOP/s", "of roof", "bound")


def _tflops(v: float) -> str:
    """TFLOP/s with one decimal, two below 1 (memory-bound ops run at a fraction of one)."""
    return f"{v:,.1f}" if abs(v) >= 1 else f"{v:.2f}"


def op_cells(r: OpRow) -> list[str]:
    """One op row as `OP_COLUMNS`: names whole, numbers formatted, `–` where unknown."""
    return [
        r.op,
        format_shapes(r.input_dims),
        format_dtypes(r.input_types, r.input_dims),
        f"{r.count:,}",
        _ms(r.kernel_ns),
        _tflops(r.tflops_per_s) if r.tflops_per_s is not None else "–",
        f"{100 * r.roof_share:.1f} %" if r.roof_share is not None else "–",
        r.bound or "–",
    ]


def _op_names(cells: list[str], width: int) -> list[str]:
    """Op names within `width`: without `aten::` when one does not fit, then shortened."""
    if any(cell_len(c) > width for c in cells):
        cells = [c.removeprefix("aten::") for c in cells]
    return distinct_names(cells, width)


def _op_table(m: ModelAnalysis, top: int, width: int) -> Table:
    """The top ops; where op and shapes do not both fit, shapes go under the op's name."""
    rows = [op_cells(r) for r in m.ops[: top if top > 0 else None]]
    numbers = [
        _Col("dtype"),
        *(_Col(h, right=True) for h in OP_COLUMNS[3:7]),
        _Col("bound"),
    ]
    fixed = sum(
        max([cell_len(c.header), *(cell_len(r[i + 2]) for r in rows)])
        for i, c in enumerate(numbers)
    )
    op_w = min(max(cell_len(r[0]) for r in rows), _OP_NAME_CAP)
    shapes_w = min(max(cell_len(r[1]) for r in rows), _SHAPES_CAP)
    if op_w + shapes_w + 2 + fixed + 2 * len(numbers) <= width:
        cols = [
            _Col("top ops", elastic=True, floor=10, cap=_OP_NAME_CAP, shrink=_op_names),
            _Col("shapes", elastic=True, floor=10, cap=_SHAPES_CAP, shrink=_shapes),
            *numbers,
        ]
        return _fitted(cols, rows, width)
    merged = [[f"{r[0]}\n  {r[1]}", *r[2:]] for r in rows]
    cols = [_Col("top ops, shapes", elastic=True, floor=14, shrink=_op_and_shapes), *numbers]
    return _fitted(cols, merged, width)


def _compact_shapes(shapes: str) -> str:
    """Repeated consecutive argument shapes once, counted: `a · a · a` -> `a ×3`."""
    out: list[tuple[str, int]] = []
    for part in shapes.split(" · "):
        if out and out[-1][0] == part:
            out[-1] = (part, out[-1][1] + 1)
        else:
            out.append((part, 1))
    return " · ".join(p if n == 1 else f"{p} ×{n}" for p, n in out)


_PART = " · "


def _elide_parts(text: str, width: int, around: int | None = None) -> str:
    """`a · b · c · d` within `width`, whole shapes left out from the middle (`a … d`).

    A shape is a row of numbers: it is shown whole or not at all. With `around`, the part
    of that index is kept too (where two cells differ). Falls back to middle elision, which
    never cuts a number either, when not even one whole shape fits.
    """
    if cell_len(text) <= width:
        return text
    parts = text.split(_PART)
    n = len(parts)
    for k in range(n - 1, 0, -1):
        head = (k + 1) // 2
        keep = [*range(head), *range(n - (k - head), n)]
        if around is not None and around not in keep:
            keep = sorted({*keep[: max(k - 1, 1)], around})
        shown = "… " if keep[0] else ""
        for i, j in zip([keep[0] - 1, *keep], keep, strict=False):
            shown += ("" if j == keep[0] else _PART if j == i + 1 else " … ") + parts[j]
        shown += " …" if keep[-1] != n - 1 else ""
        if cell_len(shown) <= width:
            return shown
    return elide_middle(text, width)


def _shapes(cells: list[str], width: int) -> list[str]:
    """Shapes within `width`: repeats counted when one does not fit, whole shapes left out.

    Cells that would print alike keep the shape where they differ.
    """
    if any(cell_len(c) > width for c in cells):
        cells = [_compact_shapes(c) for c in cells]
    shown = [_elide_parts(c, width) for c in cells]
    by_text: dict[str, set[str]] = {}
    for c, text in zip(cells, shown, strict=True):
        by_text.setdefault(text, set()).add(c)
    for i, c in enumerate(cells):
        group = by_text[shown[i]]
        if len(group) < 2:
            continue
        parts = c.split(_PART)
        others = [o.split(_PART) for o in group if o != c]
        at = min(
            next((k for k, (a, b) in enumerate(zip(parts, o, strict=False)) if a != b), 0)
            for o in others
        )
        shown[i] = _elide_parts(c, width, around=at)
    return distinct(cells, shown, width)


_SHAPE_LINES = 3


def _wrap_parts(text: str, width: int) -> list[str]:
    """`a · b · c` as lines of whole shapes within `width` (a shape wider than that alone)."""
    lines: list[str] = []
    for part in text.split(_PART):
        if lines and cell_len(lines[-1]) + len(_PART) + cell_len(part) <= width:
            lines[-1] += _PART + part
        else:
            lines.append(part)
    return lines


def _op_and_shapes(cells: list[str], width: int) -> list[str]:
    """Cells of the op's name and its shapes, indented under it, within `width`.

    Shapes are numbers: they wrap onto up to `_SHAPE_LINES` lines, whole shapes per line (a
    repeated shape counted, `a ×2`, where that takes fewer lines), before any is left out;
    what is left out of the last line keeps the cells told apart.
    """
    ops, shapes = zip(*(c.split("\n", 1) for c in cells), strict=True)
    names = _op_names(list(ops), width)
    inner = max(width - 2, 1)
    wrapped = []
    for text in (s.strip() for s in shapes):
        lines = _wrap_parts(text, inner)
        compact = _wrap_parts(_compact_shapes(text), inner)  # `a · a` as `a ×2`: as exact
        wrapped.append(compact if len(compact) < len(lines) else lines)
    # The last line of each cell holds the rest; where the rest does not fit it, whole shapes
    # give way there, as on a one-line cell.
    heads = [
        lines[: _SHAPE_LINES - 1] if len(lines) > _SHAPE_LINES else lines[:-1] for lines in wrapped
    ]
    rests = [_PART.join(lines[len(h) :]) for lines, h in zip(wrapped, heads, strict=True)]
    tails = _shapes(rests, inner)
    return [
        "\n".join([a, *(f"  {x}" for x in (*h, t))])
        for a, h, t in zip(names, heads, tails, strict=True)
    ]


_UNATTRIBUTED = {
    "no launch call": "with no launch call in the trace",
    "launch outside any op": "launched outside any op",
    "launched before the trace": "launched before the trace",
}


def attribution_lines(m: ModelAnalysis) -> list[str]:
    """How much GPU time the op rows hold, and what has no FLOP model; [] without GPU time."""
    share = m.attributed_share
    if share is None:
        return []
    line = f"GPU time attributed to ops: {format_share(share)}"
    if m.unattributed_ns > 0:
        why = ", ".join(
            f"{_ms(ns)} ms {_UNATTRIBUTED.get(reason, reason)}"
            for reason, ns in sorted(m.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            if ns > 0
        )
        line += f" (unattributed: {why})" if why else ""
    lines = [line]
    unmodelled = {k: v for k, v in m.unmodelled.items() if v > 0}
    if unmodelled:
        why = ", ".join(f"{reason}: {_ms(ns)} ms" for reason, ns in unmodelled.items())
        lines.append(f"no FLOP model for {_ms(sum(unmodelled.values()))} ms of op time ({why})")
    return lines + above_roof_lines(m)


_ABOVE_ROOF_WHY = {
    "fast-algorithm": ", which do less math than the direct convolution the FLOP model counts",
    "cache": ": part of that can stay in the L2 cache, which is faster than the DRAM roof",
    "model": (
        ": the op's formula counts more work than its kernels did, or they ran a faster "
        "path than the recorded dtype says"
    ),
}
_ABOVE_ROOF_WHAT = {"fast-algorithm": "convolution", "cache": "memory-bound op", "model": "op"}


def above_roof_lines(m: ModelAnalysis) -> list[str]:
    """Why some ops measure above 100 % of their roof, one line per reason (`above_roof`)."""
    return [
        f"{plural(a.ops, _ABOVE_ROOF_WHAT[a.reason])} above 100 % of roof (up to "
        f"{format_share(a.max_share)}, {_ms(a.kernel_ns)} ms): {a.evidence}"
        f"{_ABOVE_ROOF_WHY[a.reason]}"
        for a in above_roof(m.ops)
    ]


def mfu_line(d: DeviceAnalysis, m: ModelAnalysis) -> str:
    """`MFU 23.4 % of 989 TFLOP/s bf16 peak (model covers 87 % of kernel time)`, or why not."""
    e = m.efficiency
    cover = (
        f" (model covers {100 * e.modelled_kernel_share:.0f} % of kernel time)"
        if e.modelled_kernel_share is not None
        else ""
    )
    if e.mfu is not None and e.peak_tflops is not None:
        peak = f"{e.peak_tflops:,.1f}".removesuffix(".0")
        return f"MFU {100 * e.mfu:.1f} % of {peak} TFLOP/s {e.precision} peak{cover}"
    gpu = d.gpu or "this GPU"
    if not m.has_shapes:
        why = "the trace records no input shapes (profile with record_shapes=True)"
    elif m.gpu_spec is None:
        why = f"{gpu} is not in badput's hardware table, so there is no peak"
    elif e.precision is None:
        why = "no op with a FLOP model ran in the window"
    elif e.peak_tflops is None:
        why = f"the hardware table has no {e.precision} peak for {gpu}"
    else:
        why = "the window has zero length"
    return f"MFU {NOT_AVAILABLE}: {why}{cover}"


def _waterfall(m: ModelAnalysis, width: int) -> Table | None:
    e = m.efficiency
    if not e.waterfall or e.peak_tflops is None:
        return None

    def bar(share: float) -> str:
        return "█" * round(_WATERFALL_BAR * min(max(share, 0.0), 1.0))

    rows = [[f"peak ({e.precision})", f"{e.peak_tflops:,.1f}", "100.0 %", bar(1.0)]]
    rows += [
        [
            f"{'= ' if st.stage == 'achieved' else '− '}{st.stage}",
            _tflops(st.tflops),
            format_share(st.share_of_peak),
            bar(st.share_of_peak),
        ]
        for st in e.waterfall
    ]
    cols = [
        _Col("where the peak goes", elastic=True, floor=12),
        _Col("TFLOP/s", right=True),
        _Col("of peak", right=True),
        _Col("", style="cyan"),
    ]
    return _fitted(cols, rows, width)


_INSTANCE = re.compile(r"_\d+$")


def _class_path(path: str) -> str:
    """A module path with each instance number dropped: `Model_0/Layer_3` -> `Model/Layer`."""
    if path == NO_MODULE:
        return path
    return "/".join(_INSTANCE.sub("", part) or part for part in path.split("/"))


def module_tree(
    modules: Sequence[ModuleRow], limit: int, max_depth: int = _MODULE_DEPTH
) -> tuple[list[tuple[str, int, int, int]], int]:
    """Module rows to list: instances of a class merged, the largest, under their parents.

    Paths that differ only in instance numbers (`Layer_0` ... `Layer_23`, the profiler's
    `ClassName_N` names) become one row (`Layer`, 24 instances) whose time is their sum.
    The `limit` largest rows at most `max_depth` deep are kept (all with `limit` <= 0) with
    their ancestors, in tree order, children by time.

    Returns:
        (class path, depth, kernel ns, instances) per row, and the number of merged rows
        left out.
    """
    merged: dict[str, list[int]] = {}
    for row in modules:
        acc = merged.setdefault(_class_path(row.path), [0, 0, row.depth])
        acc[0] += row.kernel_ns
        acc[1] += 1
    eligible = sorted(
        (p for p, (_, _, depth) in merged.items() if depth <= max_depth),
        key=lambda p: (-merged[p][0], p),
    )
    chosen = set(eligible[:limit] if limit > 0 else eligible)
    for path in list(chosen):
        if path == NO_MODULE:
            continue
        parts = path.split("/")
        chosen.update("/".join(parts[:k]) for k in range(1, len(parts)))
    chosen &= merged.keys()
    children: dict[str, list[str]] = {}
    for path in chosen:
        parent = path.rsplit("/", 1)[0] if "/" in path and path != NO_MODULE else ""
        children.setdefault(parent, []).append(path)
    out: list[tuple[str, int, int, int]] = []

    def visit(parent: str) -> None:
        for path in sorted(children.get(parent, []), key=lambda p: (-merged[p][0], p)):
            ns, instances, depth = merged[path]
            out.append((path, depth, ns, instances))
            visit(path)

    visit("")
    return out, len(merged) - len(out)


def _indented(cells: list[str], width: int) -> list[str]:
    """Indented labels within `width`: the indent kept, the label middle-elided."""
    out = []
    for cell in cells:
        label = cell.lstrip(" ")
        indent = min(len(cell) - len(label), max(width - 6, 0))
        out.append(" " * indent + elide_middle(label, width - indent))
    return out


def _module_table(m: ModelAnalysis, top: int, width: int) -> tuple[Table, int] | None:
    rows, left_out = module_tree(m.modules, top)
    if not rows:
        return None
    total = m.attributed_ns + m.unattributed_ns
    cells = [
        [
            "  " * (depth - 1) + path.rsplit("/", 1)[-1] if path != NO_MODULE else path,
            f"{instances:,}",
            _ms(ns),
            _ms(ns / instances),
            _pct(ns, total).strip(),
        ]
        for path, depth, ns, instances in rows
    ]
    cols = [
        _Col("GPU time by module", elastic=True, floor=12, shrink=_indented),
        _Col("×", right=True),
        _Col("GPU ms", right=True),
        _Col("ms each", right=True),
        _Col("of GPU time", right=True),
    ]
    return _fitted(cols, cells, width), left_out


def _model_section(d: DeviceAnalysis, m: ModelAnalysis, top: int, width: int) -> list[Text | Table]:
    """Top ops, attribution, modules, MFU and its waterfall (`badput.analysis.ops`)."""
    parts: list[Text | Table] = []
    if m.ops:
        parts += [Text(""), _op_table(m, top, width)]
        notes = []
        shown = len(m.ops) if top <= 0 else min(top, len(m.ops))
        if shown < len(m.ops):
            notes.append(f"{plural(len(m.ops) - shown, 'more op')} in --format json")
        if not m.has_shapes:
            notes.append("no input shapes in this trace: record_shapes=True gives FLOPs")
        elif m.gpu_spec is not None:
            notes.append("of roof: of the GPU's roofline at the op's FLOP/byte and precision")
        parts += [_para(n, width, "dim") for n in notes]
    parts += [_para(line, width, "dim", "  ") for line in attribution_lines(m)]
    modules = _module_table(m, top, width)
    if modules is not None:
        table, left_out = modules
        parts += [Text(""), table]
        more = f"; {plural(left_out, 'more row')} in --format json" if left_out else ""
        parts.append(
            _para(f"×: instances merged (Layer_0, Layer_1, … → Layer){more}", width, "dim")
        )
    if m.attributed_share is not None:
        parts += [Text(""), _para(mfu_line(d, m), width, "bold", "  ")]
        waterfall = _waterfall(m, width)
        if waterfall is not None:
            parts.append(waterfall)
        parts += [_para(f"note: {n}", width, "yellow", "  ") for n in m.efficiency.notes]
    return parts


def _device(d: DeviceAnalysis, top: int, findings: list[Finding], width: int = 120) -> Group:
    head = Text()
    gpu = f"GPU {d.device}" + (f" ({d.gpu})" if d.gpu else "")
    rank = f" · rank {d.rank}/{d.world_size}" if d.rank is not None else ""
    title = wrap_text(f"{os.path.basename(d.trace)} · {gpu}{rank}", width, "  ")
    name = os.path.basename(d.trace)
    head.append(title[: len(name)], style="bold")
    head.append(title[len(name) :] + "\n")
    steps = f"{plural(len(d.steps), 'step')}, " if d.steps else ""
    window = f"window {_ms(d.window_ns)} ms ({steps}{_WINDOW_SOURCE[d.window_source]})"
    if d.goodput is None:
        reason = f"Goodput {NOT_AVAILABLE}: {d.goodput_undefined_reason}."
        head.append(wrap_text(reason, width, "  ") + "\n", style="yellow")
        if d.device >= 0:
            head.append(wrap_text(window, width, "  ") + "\n", style="dim")
        for w in d.warnings:
            head.append(wrap_text(f"note: {w}", width, "  ") + "\n", style="yellow")
        return Group(head)
    head.append(wrap_text(window, width, "  ") + "\n", style="dim")
    head.append("\nGoodput ", style="bold")
    head.append(format_share(d.goodput), style="bold green")
    head.append("   ")
    head.append_text(_bar(d))
    head.append("\n")

    b, c, win = d.breakdown, d.idle_causes, d.window_ns
    rows: list[list[str]] = [
        ["compute", _ms(b.compute_ns), _pct(b.compute_ns, win)],
        ["communication (exposed)", _ms(b.communication_ns), _pct(b.communication_ns, win)],
        ["memory (memcpy/memset)", _ms(b.memory_ns), _pct(b.memory_ns, win)],
        ["idle", _ms(b.idle_ns), _pct(b.idle_ns, win)],
    ]
    causes = sorted(_CAUSES, key=lambda kv: -getattr(c, f"{kv[0]}_ns"))
    for key, label, _ in causes:
        ns = getattr(c, f"{key}_ns")
        rows.append([f"  └ {label.replace('CUDA', d.runtime_api)}", _ms(ns), _pct(ns, win)])
    cols = [
        _Col("where the GPU time goes", elastic=True, floor=24, shrink=_indented),
        _Col("ms", right=True),
        _Col("of window", right=True),
    ]
    styles = [_COLORS[k] for k in ("compute", "communication", "memory", "idle")]
    table = _fitted(cols, rows, width, [*styles, *["dim"] * (len(rows) - 4)])
    comm_note: Text | None = None
    if d.comm.total_ns:
        hidden = _pct(d.comm.overlapped_ns, d.comm.total_ns).strip()
        comm_note = _para(
            f"communication in all: {_ms(d.comm.total_ns)} ms, {hidden} of it hidden under compute",
            width,
            "dim",
        )

    parts: list[Text | Table] = [head, table]
    if comm_note is not None:
        parts.append(comm_note)
    parts += _findings(findings, "what to fix first", width=width)
    if d.kernels and top != 0:
        parts.append(Text(""))
        parts.append(_kernel_table(d, top, width))
        parts.append(_para(kernel_window_note(d), width, "dim"))
        if d.short_kernel_share is not None:
            parts.append(
                _para(
                    f"{100 * d.short_kernel_share:.1f} % of kernel time is in kernels shorter "
                    "than 10 us",
                    width,
                    "dim",
                )
            )
    if d.model is not None and top != 0:
        parts += _model_section(d, d.model, top, width)
    if d.critical_path is not None and d.critical_path.length_ns > 0:
        parts.append(Text(""))
        head_line, *rest = critical_path_lines(d)
        parts.append(_para(head_line, width, "bold", "  "))
        parts += [_para(line, width, "dim", "  ") for line in rest]
    if d.launch is not None and d.launch.delay is not None:
        parts.append(Text(""))
        parts.append(_para(launch_line(d), width, "dim", "  "))
    stats = d.step_time_stats_ns()
    if stats is not None:
        mean, median, longest = stats
        parts.append(Text(""))
        parts.append(
            _para(
                f"steps: mean {_ms(mean)} ms · median {_ms(median)} ms · max {_ms(longest)} ms",
                width,
                "bold",
            )
        )
        shown = d.steps
        if len(d.steps) > _MAX_STEP_ROWS:
            slowest = sorted(range(len(d.steps)), key=lambda i: -d.steps[i].dur_ns)
            shown = [d.steps[i] for i in sorted(slowest[:_SLOWEST_STEPS])]
            parts.append(
                _para(
                    f"the {_SLOWEST_STEPS} slowest of {len(d.steps)} steps, in time order "
                    "(--format json lists all)",
                    width,
                    "dim",
                )
            )
        rows = []
        for s in shown:
            sb, sc = s.breakdown, s.idle_causes
            _, _, label = max(_CAUSES, key=lambda kv: getattr(sc, f"{kv[0]}_ns"))
            rows.append(
                [
                    s.name,
                    _ms(s.dur_ns),
                    _pct(sb.compute_ns, s.dur_ns),
                    _pct(sb.communication_ns, s.dur_ns),
                    _pct(sb.memory_ns, s.dur_ns),
                    _pct(sb.idle_ns, s.dur_ns),
                    label if sb.idle_ns else "–",
                ]
            )
        cols = [
            _Col("step", elastic=True, floor=12),
            *(_Col(h, right=True) for h in ("ms", "compute", "comm", "memory", "idle")),
            _Col("main idle cause", drop=1),
        ]
        parts += _fitted_parts(cols, rows, width)
    for warning in d.warnings:
        parts.append(_para(f"note: {warning}", width, "yellow", "  "))
    return Group(*parts)


def _fitted_parts(cols: list[_Col], rows: list[list[str]], width: int) -> list[Text | Table]:
    """A fitted table, and under it the note naming any column left out to fit."""
    fit = fitted(cols, rows, width)
    note = fit.note()
    return [fit.table] if note is None else [fit.table, _para(note, width, "dim")]


def memory_summary(job: Job | JobResult, d: DeviceAnalysis) -> str | None:
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
    """Print the report of a run: per job, its findings across ranks, GPUs and rank table.

    Traces of several jobs get one section each, headed by what the job is and why its traces
    stand apart (`JobResult.jobs`). Within a job a named straggler's finding comes first: the
    other ranks wait for it. Above `_MAX_DEVICE_SECTIONS` GPUs (over all jobs) the per-GPU
    sections give way to the findings ranked over every GPU of the job, so the report stays a
    few screens long at any number of ranks.
    """
    analysed = job.analysed
    many = sum(len(o.devices) for o in analysed) > _MAX_DEVICE_SECTIONS
    noted = 0
    for o in analysed:
        for warning in o.warnings:
            noted += 1
            if not many or noted <= _MAX_NOTES:
                console.print(_para(f"note: {o.path}: {warning}", console.width, "yellow", "  "))
    if many and noted > _MAX_NOTES:
        console.print(_para(f"note: {noted - _MAX_NOTES} more in --format json", 1_000, "yellow"))
    parts = job.jobs or [Job(job.outcomes, job.cross)]
    first = True
    if len(parts) > 1:
        console.print(
            Text(
                f"{len(parts)} jobs among {len(analysed)} traces: each is reported on its own",
                style="bold",
            )
        )
    for i, part in enumerate(parts):
        if len(parts) > 1:
            console.rule(style="dim")
            console.print(job_header(part, i, len(parts)))
            first = True
        first = _render_part(job, part, console, top, many, first)
    if job.failed:
        lines = [Text("")] if not first else []
        failed = plural(len(job.failed), "trace")
        lines.append(Text(f"{failed} could not be analysed:", style="yellow"))
        for o in job.failed[:_MAX_NOTES]:
            lines.append(Text(f"  {o.path}: {o.error}", style="yellow"))
        if len(job.failed) > _MAX_NOTES:
            lines.append(Text(f"  {len(job.failed) - _MAX_NOTES} more in --format json"))
        console.print(Group(*lines))


def job_title(part: Job, index: int, count: int) -> str:
    """'Job 2 of 4: ranks 0-7, world size 8 (8 traces)': what one job of several is."""
    ranks = part.ranks
    if not ranks:
        what = f"{part.outcomes[0].path} (no rank)" if part.outcomes else "no traces"
    elif ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        what = f"ranks {ranks[0]}-{ranks[-1]}"
    else:
        what = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
    world = f", world size {part.world_size}" if part.world_size is not None else ""
    return f"Job {index + 1} of {count}: {what}{world} ({plural(len(part.analysed), 'trace')})"


def job_header(part: Job, index: int, count: int) -> Group:
    """The job's title and the notes that say why its traces stand apart."""
    lines = [Text(job_title(part, index, count), style="bold")]
    for note in part.notes[:_MAX_NOTES]:
        lines.append(Text(f"note: {note}", style="yellow"))
    if len(part.notes) > _MAX_NOTES:
        lines.append(Text(f"note: {len(part.notes) - _MAX_NOTES} more in --format json"))
    lines.append(Text(""))
    return Group(*lines)


def _render_part(
    job: JobResult, part: Job, console: Console, top: int, many: bool, first: bool
) -> bool:
    """One job's section; returns whether nothing was printed yet (for the rules between)."""
    diagnosis = job.diagnosis
    found = job.findings_of(part)
    job_level = [f for f in found if f.job_level]
    if job_level:  # first: a straggler's, as the other ranks' waiting is its doing
        if not first:
            console.rule(style="dim")
        first = False
        console.print(
            Group(*_findings(job_level, "across ranks", with_where=True, width=console.width))
        )
    devices = [d for o in part.analysed for d in o.devices]
    if not many:
        for d in devices:
            if not first:
                console.rule(style="dim")
            first = False
            console.print(_device(d, top, diagnosis.for_device(d), console.width))
            memory = memory_summary(part, d)
            if memory is not None:
                console.print(Text(memory, style="bold"))
    if part.cross is not None:
        if not first:
            console.rule(style="dim")
        first = False
        console.print(_rank_section(part, part.cross, not many, console.width))
    if many:
        per_gpu = [f for f in found if not f.job_level]
        console.print(Group(*_findings_by_rule(per_gpu, len(devices), console.width)))
    return first


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


def _rank_section(job: Job, cross: CrossRank, per_gpu_shown: bool, width: int = 120) -> Group:
    summaries = [s for o in job.analysed for s in o.summaries if s.rank is not None]
    worlds = sorted({s.world_size for s in summaries if s.world_size is not None})
    head = Text()
    head.append(f"Across {plural(len({s.rank for s in summaries}), 'rank')}", style="bold")
    if worlds:
        head.append(f" (world size {', '.join(str(w) for w in worlds)})")
    if job.failed:
        head.append(f", {len(job.failed)} failed", style="yellow")
    parts: list[Text | Table] = [head]
    if not per_gpu_shown:
        parts.append(
            _para(
                f"per-GPU sections left out above {_MAX_DEVICE_SECTIONS} GPUs; "
                "--format json has them all",
                width,
                "dim",
            )
        )

    rows = [
        [
            _EXTREME_LABELS.get(e.category, f"{e.category} ms"),
            _value(e.category, e.min),
            str(e.min_rank),
            _value(e.category, e.median),
            _value(e.category, e.max),
            str(e.max_rank),
        ]
        for e in cross.extremes
    ]
    cols = [
        _Col("", elastic=True, floor=16, shrink=_indented),
        *(_Col(h, right=True) for h in ("min", "rank", "median", "max", "rank")),
    ]
    parts += [Text(""), *_fitted_parts(cols, rows, width)]

    if cross.stragglers:
        text = "stragglers: " + ", ".join(
            f"rank {st.rank} (score {st.score:.2f}, others wait {_ms(st.wait_caused_ns)} ms)"
            for st in cross.stragglers[:_MAX_NOTES]
        )
        if len(cross.stragglers) > _MAX_NOTES:
            text += f", {len(cross.stragglers) - _MAX_NOTES} more in --format json"
        line = _para(text, width, None, "  ")
        line.stylize("bold", 0, len("stragglers:"))
        parts += [Text(""), line]

    shown = _outliers(summaries, {st.rank for st in cross.stragglers})
    if shown:
        title = (
            "every rank"
            if len(shown) == len(summaries)
            else f"the {len(shown)} ranks furthest from the median (of {len(summaries)})"
        )
        parts += [Text(""), Text(title, style="bold")]
        cols = [_Col(h, right=True, drop=_RANK_DROP.get(h)) for h in RANK_COLUMNS]
        parts += _fitted_parts(cols, [rank_cells(s, cross) for s in shown], width)
        parts.append(
            _para(
                "comm, memory, idle: exposed shares of the window · step: median step · "
                "comm ms: all collective time · waited: for the last rank to arrive · "
                "score: compute per step over the median rank's",
                width,
                "dim",
            )
        )

    by_type = _collectives_by_type(summaries)
    if by_type:
        parts += [Text(""), Text("collectives by type, over all ranks", style="bold")]
        cols = [
            _Col(COLLECTIVE_COLUMNS[0], elastic=True, floor=10),
            *(
                _Col(_TWO_LINES.get(h, h), right=True, drop=_COLLECTIVE_DROP.get(h))
                for h in COLLECTIVE_COLUMNS[1:]
            ),
        ]
        rows = [collective_cells(kind, row) for kind, row in by_type.items()]
        parts += _fitted_parts(cols, rows, width)
    for warning in cross.warnings[:_MAX_NOTES]:
        parts.append(_para(f"note: {warning}", width, "yellow", "  "))
    return Group(*parts)


# Columns of the rank tables that may go on a narrow terminal, the highest first.
_RANK_DROP = {"memory": 3, "score": 2, "comm ms": 1}
_COLLECTIVE_DROP = {"ranks": 2, "hidden": 1}
# Long headers of the collectives table, on two lines in the terminal.
_TWO_LINES = {"busbw GB/s (median)": "busbw GB/s\n(median)", "of link peak": "of link\npeak"}


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
