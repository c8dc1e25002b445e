"""GitHub-flavoured Markdown for CI step summaries and PR comments.

Three documents, each the same results as the terminal report, as plain GFM (tables, bold,
lists; no HTML, which GitHub strips from some places and not others):

* `analysis_markdown`: `badput analyze --format markdown`: the goodput headline, the
  breakdown, the top findings with their savings and first fix, the top GPU operations, and the
  cross-rank tables when there are ranks; with the `--min-goodput`/`--max-step-time-ms` gates.
* `ab_markdown`: the verdict of `badput bench ab` with a PASS/FAIL headline.
* `check_markdown`: the verdict of `badput bench check` with a PASS/FAIL headline.

Every table is capped (`_MAX_ROWS` and the text report's own caps) and says how many rows it
left out; the whole document is then cut at `MAX_BYTES` on a line boundary, because GitHub
refuses a step summary over 1 MiB (docs.github.com, "Adding a job summary": "the maximum size
of a job summary is 1MiB per step").
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

from badput.analysis.ops import ModelAnalysis
from badput.analysis.ranks import CrossRank
from badput.analysis.results import DeviceAnalysis
from badput.bench.ab import ABResult, exit_code
from badput.bench.deterministic import CheckResult
from badput.diagnose import Finding, Job, JobResult
from badput.diagnose.gates import GateCheck
from badput.report.evidence import evidence_line
from badput.report.names import distinct_names
from badput.report.text import (
    _CAUSES,
    _EXTREME_LABELS,
    _FINDINGS_SHOWN,
    _MAX_DEVICE_SECTIONS,
    _MAX_NOTES,
    _WINDOW_SOURCE,
    COLLECTIVE_COLUMNS,
    OP_COLUMNS,
    RANK_COLUMNS,
    _collectives_by_type,
    _outliers,
    attribution_lines,
    collective_cells,
    critical_path_lines,
    graph_savings_text,
    job_title,
    kernel_window_note,
    launch_line,
    memory_summary,
    mfu_line,
    op_cells,
    rank_cells,
)
from badput.report.units import NOT_AVAILABLE, format_share, plural
from badput.report.units import format_ms as _ms

__all__ = [
    "MAX_BYTES",
    "ab_markdown",
    "analysis_markdown",
    "check_markdown",
    "md_escape",
]

#: Size cap of one document: half of GitHub's 1 MiB per step, so that two reports fit in one
#: step's summary.
MAX_BYTES = 512 * 1024
# Rows of any one table (kernels with --top 0, bench verdicts) before "N more".
_MAX_ROWS = 50
# Widest a kernel name, an op name or an op's shapes gets in a table cell. A page has room:
# a kernel name keeps every salient template argument (`badput.report.names`), a copy's name
# its memory kinds.
_NAME_WIDTH = 120
_OP_WIDTH = 48
# Characters that mean something in GFM inline text or tables; escaped with a backslash, which
# CommonMark allows before any ASCII punctuation.
_SPECIAL = set("\\`*_[]<>|~#")


def md_escape(text: str) -> str:
    """`text` as literal GFM inline text: specials backslash-escaped, newlines as spaces."""
    out = []
    for ch in text.replace("\r", " ").replace("\n", " "):
        out.append("\\" + ch if ch in _SPECIAL else ch)
    return "".join(out)


def _pct(part: int | float, whole: int | float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "–"


def _bounded(lines: list[str], max_bytes: int = MAX_BYTES) -> str:
    """The lines joined, cut on a line boundary to at most `max_bytes` bytes of UTF-8."""
    text = "\n".join(lines) + "\n"
    if len(text.encode()) <= max_bytes:
        return text
    note = f"\n_Report cut at {max_bytes:,} bytes; `--format json` has everything._\n"
    budget = max_bytes - len(note.encode())
    kept: list[str] = []
    used = 0
    for line in lines:
        size = len(line.encode()) + 1
        if used + size > budget:
            break
        kept.append(line)
        used += size
    return "\n".join(kept) + "\n" + note


def _table(header: Sequence[str], align: str, rows: Sequence[Sequence[str]]) -> list[str]:
    """A GFM table; `align` holds one of l/r per column."""
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
    ]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _device_label(d: DeviceAnalysis) -> str:
    gpu = f"GPU {d.device}" + (f" ({d.gpu})" if d.gpu else "")
    rank = f" · rank {d.rank}/{d.world_size}" if d.rank is not None else ""
    return f"{md_escape(os.path.basename(d.trace))} · {md_escape(gpu)}{rank}"


def _finding_lines(findings: list[Finding], with_where: bool = False) -> list[str]:
    lines = []
    for i, f in enumerate(findings[:_FINDINGS_SHOWN], 1):
        where = f" (rank {f.rank})" if with_where and f.rank is not None else ""
        fix = md_escape(f.fix[0]) if f.fix else "–"
        lines.append(
            f"{i}. **{f.id}** [{f.severity}]{where}: {md_escape(f.title)}. "
            f"Save ~{f.savings_ns / 1e6:,.2f} ms/step ({100 * f.savings_share:.1f} %)"
            f"{graph_savings_text(f)}. "
            f"Fix: {fix}"
        )
        evidence = evidence_line(f)
        if evidence is not None:  # the item's second paragraph: blank line, indented under it
            text = md_escape(evidence[0].upper() + evidence[1:])
            lines += ["", "   " + text.replace("--format json", "`--format json`")]
    more = len(findings) - _FINDINGS_SHOWN
    if more > 0:
        lines.append(f"\n{more} more in `--format json`.")
    return lines


def _device_section(d: DeviceAnalysis, top: int, findings: list[Finding]) -> list[str]:
    lines = [f"### {_device_label(d)}", ""]
    if d.goodput is None:
        lines.append(f"**Goodput {NOT_AVAILABLE}**: {md_escape(d.goodput_undefined_reason or '')}.")
        lines += [f"- note: {md_escape(w)}" for w in d.warnings[:_MAX_NOTES]]
        return [*lines, ""]
    steps = f"{plural(len(d.steps), 'step')}, " if d.steps else ""
    lines.append(
        f"**Goodput {format_share(d.goodput)}** · window {_ms(d.window_ns)} ms "
        f"({steps}{_WINDOW_SOURCE[d.window_source]})"
    )
    lines.append("")
    b, c, win = d.breakdown, d.idle_causes, d.window_ns
    comm = "communication (exposed)"
    if d.comm.total_ns:
        comm += (
            f", {_pct(d.comm.overlapped_ns, d.comm.total_ns)} of {_ms(d.comm.total_ns)} ms hidden"
        )
    rows = [
        ["compute", _ms(b.compute_ns), _pct(b.compute_ns, win)],
        [comm, _ms(b.communication_ns), _pct(b.communication_ns, win)],
        ["memory (memcpy/memset)", _ms(b.memory_ns), _pct(b.memory_ns, win)],
        ["idle", _ms(b.idle_ns), _pct(b.idle_ns, win)],
    ]
    for key, label, _ in sorted(_CAUSES, key=lambda kv: -getattr(c, f"{kv[0]}_ns")):
        ns = getattr(c, f"{key}_ns")
        rows.append([f"└ {label.replace('CUDA', d.runtime_api)}", _ms(ns), _pct(ns, win)])
    lines += _table(("where the GPU time goes", "ms", "of window"), "lrr", rows)
    stats = d.step_time_stats_ns()
    if stats is not None:
        mean, median, longest = stats
        lines += [
            "",
            f"Steps: mean {_ms(mean)} ms · median {_ms(median)} ms · max {_ms(longest)} ms",
        ]
    if findings:
        lines += ["", "**What to fix first**", ""]
        lines += _finding_lines(findings)
    if d.kernels:  # --top 0 lists all, as its help says, capped like every table here
        shown = d.kernels[: min(top, _MAX_ROWS) if top > 0 else _MAX_ROWS]
        names = distinct_names([k.name for k in shown], _NAME_WIDTH)
        rows = [
            [
                md_escape(name),
                k.category,
                f"{k.count:,}",
                _ms(k.total_ns),
                f"{k.mean_ns / 1000:,.1f}",
            ]
            for name, k in zip(names, shown, strict=True)
        ]
        lines += [""]
        lines += _table(
            ("top GPU operations", "category", "count", "total ms", "mean us"), "llrrr", rows
        )
        note = md_escape(kernel_window_note(d))
        lines.append(f"\n{note[0].upper()}{note[1:]}.")
        wanted = len(d.kernels) if top <= 0 else min(top, len(d.kernels))
        if wanted > len(shown):
            more = plural(wanted - len(shown), "more operation")
            lines.append(f"\n{more} in `--format json`.")
    if d.model is not None:
        lines += _model_lines(d, d.model, top)
    if d.critical_path is not None and d.critical_path.length_ns > 0:
        head_line, *rest = critical_path_lines(d)
        lines.append(f"\n**{md_escape(head_line)}**")
        lines += [f"\n{md_escape(line)}" for line in rest]
    if d.launch is not None and d.launch.delay is not None:
        lines.append(f"\n{md_escape(launch_line(d))}")
    for w in d.warnings[:_MAX_NOTES]:
        lines.append(f"\n- note: {md_escape(w)}")
    return [*lines, ""]


def _model_lines(d: DeviceAnalysis, m: ModelAnalysis, top: int) -> list[str]:
    """The MFU line, the top ops (capped like every table here) and their attribution."""
    lines: list[str] = []
    if m.attributed_share is not None:
        lines += ["", f"**{md_escape(mfu_line(d, m))}**"]
    if m.ops:
        shown = m.ops[: min(top, _MAX_ROWS) if top > 0 else _MAX_ROWS]
        cells = [op_cells(r) for r in shown]
        ops = distinct_names([c[0] for c in cells], _OP_WIDTH)
        shapes = distinct_names([c[1] for c in cells], _OP_WIDTH)
        rows = [
            [md_escape(op), md_escape(dims), *(md_escape(x) for x in c[2:])]
            for op, dims, c in zip(ops, shapes, cells, strict=True)
        ]
        lines += [""]
        lines += _table(("top ops", *OP_COLUMNS[1:]), "lllrrrrl", rows)
        if len(m.ops) > len(shown):
            lines.append(f"\n{plural(len(m.ops) - len(shown), 'more op')} in `--format json`.")
    notes = attribution_lines(m)
    if notes:
        lines += ["", " · ".join(md_escape(n) for n in notes)]
    return lines


def _value(category: str, v: float | None) -> str:
    if category == "goodput":
        return format_share(v)
    return "–" if v is None else _ms(v)


def _rank_section(job: Job, cross: CrossRank) -> list[str]:
    summaries = [s for o in job.analysed for s in o.summaries if s.rank is not None]
    worlds = sorted({s.world_size for s in summaries if s.world_size is not None})
    head = f"### Across {plural(len({s.rank for s in summaries}), 'rank')}"
    if worlds:
        head += f" (world size {', '.join(str(w) for w in worlds)})"
    lines = [head, ""]
    rows = [
        [
            md_escape(_EXTREME_LABELS.get(e.category, f"{e.category} ms").strip()),
            _value(e.category, e.min),
            str(e.min_rank),
            _value(e.category, e.median),
            _value(e.category, e.max),
            str(e.max_rank),
        ]
        for e in cross.extremes
    ]
    lines += _table(("", "min", "rank", "median", "max", "rank"), "lrrrrr", rows)
    if cross.stragglers:
        shown = ", ".join(
            f"rank {st.rank} (score {st.score:.2f}, others wait {_ms(st.wait_caused_ns)} ms)"
            for st in cross.stragglers[:_MAX_NOTES]
        )
        more = len(cross.stragglers) - _MAX_NOTES
        lines += ["", f"**Stragglers:** {shown}" + (f", {more} more" if more > 0 else "")]
    ranks = _outliers(summaries, {st.rank for st in cross.stragglers})
    if ranks:
        title = (
            "Every rank"
            if len(ranks) == len(summaries)
            else f"The {len(ranks)} ranks furthest from the median (of {len(summaries)})"
        )
        rows = [[c.strip() for c in rank_cells(s, cross)] for s in ranks]
        lines += ["", f"**{title}**", ""]
        lines += _table(RANK_COLUMNS, "r" * len(RANK_COLUMNS), rows)
    by_type = _collectives_by_type(summaries)
    if by_type:
        rows = [
            [md_escape(kind), *collective_cells(kind, row)[1:]] for kind, row in by_type.items()
        ]
        lines += ["", "**Collectives by type, over all ranks**", ""]
        lines += _table(COLLECTIVE_COLUMNS, "l" + "r" * (len(COLLECTIVE_COLUMNS) - 1), rows)
    return [*lines, ""]


def _headline(devices: list[DeviceAnalysis]) -> str:
    """One line: the goodput of the one GPU, or the median and range over several."""
    known = [d for d in devices if d.goodput is not None]
    if not known:
        why = devices[0].goodput_undefined_reason if len(devices) == 1 else None
        why = why or "no GPU with a defined goodput in the analysed traces"
        return f"**Goodput {NOT_AVAILABLE}**: {md_escape(why)}."
    if len(devices) == 1:
        d = known[0]
        stats = d.step_time_stats_ns()
        step = f" · median step {_ms(stats[1])} ms" if stats is not None else ""
        gpu = f" ({md_escape(d.gpu)})" if d.gpu else ""
        return f"**Goodput {100 * (d.goodput or 0):.1f} %** on 1 GPU{gpu}{step}"  # one: singular
    values = sorted((d.goodput or 0.0, i) for i, d in enumerate(known))
    lo, hi = known[values[0][1]], known[values[-1][1]]

    def where(d: DeviceAnalysis) -> str:
        return f"rank {d.rank}" if d.rank is not None else f"GPU {d.device}"

    median = statistics.median(v for v, _ in values)
    return (
        f"**Goodput {100 * median:.1f} %** (median of {plural(len(known), 'GPU')}; "
        f"min {100 * (lo.goodput or 0):.1f} % on {where(lo)}, "
        f"max {100 * (hi.goodput or 0):.1f} % on {where(hi)})"
    )


def _gate_lines(gates: Sequence[GateCheck]) -> list[str]:
    failed = [g for g in gates if not g.passed]
    verdict = f"**FAIL**: {len(failed)} of {len(gates)} gate checks" if failed else "**PASS**"
    lines = [f"### Gates: {verdict}", ""]
    shown = sorted(gates, key=lambda g: g.passed)[:_MAX_ROWS]
    rows = [
        [g.gate, md_escape(g.where), g.limit, g.measured, "pass" if g.passed else "**FAIL**"]
        for g in shown
    ]
    lines += _table(("gate", "GPU", "limit", "measured", "result"), "lllrl", rows)
    hidden = len(gates) - len(shown)
    if hidden > 0:
        hidden_failed = len(failed) - sum(1 for g in shown if not g.passed)
        lines.append(f"\n{plural(hidden, 'more gate check')}, {hidden_failed} of them failed.")
    return [*lines, ""]


def analysis_markdown(
    job: JobResult, top: int = 10, gates: Sequence[GateCheck] = (), max_bytes: int = MAX_BYTES
) -> str:
    """The `badput analyze` report as GitHub-flavoured Markdown.

    Args:
        job: The analysed traces with their findings and cross-rank view.
        top: GPU operations listed per GPU (0: all, capped at 50 rows).
        gates: Evaluated threshold gates, shown first when given.
        max_bytes: Size cap of the document in bytes of UTF-8.

    Returns:
        The document, newline-terminated.

    Example:
        >>> text = analysis_markdown(job, top=5)  # doctest: +SKIP
    """
    devices = [d for o in job.analysed for d in o.devices]
    lines = ["## badput analyze", "", _headline(devices), ""]
    if gates:
        lines += _gate_lines(gates)
    notes = [(o.path, w) for o in job.analysed for w in o.warnings]
    for path, w in notes[:_MAX_NOTES]:
        lines.append(f"- note: {md_escape(path)}: {md_escape(w)}")
    if len(notes) > _MAX_NOTES:
        lines.append(f"- {plural(len(notes) - _MAX_NOTES, 'more note')} in `--format json`")
    if notes:
        lines.append("")
    many = len(devices) > _MAX_DEVICE_SECTIONS
    parts = job.jobs or [Job(job.outcomes, job.cross)]
    if len(parts) > 1:
        lines += [
            f"**{len(parts)} jobs among {len(job.analysed)} traces**: each is reported on its own.",
            "",
        ]
    for i, part in enumerate(parts):
        if len(parts) > 1:
            lines += [f"## {md_escape(job_title(part, i, len(parts)))}", ""]
            lines += [f"- note: {md_escape(n)}" for n in part.notes[:_MAX_NOTES]]
            if len(part.notes) > _MAX_NOTES:
                more = plural(len(part.notes) - _MAX_NOTES, "more note")
                lines.append(f"- {more} in `--format json`")
            if part.notes:
                lines.append("")
        lines += _job_lines(job, part, top, many)
    if job.failed:
        failed = plural(len(job.failed), "trace")
        lines.append(f"**{failed} could not be analysed:**")
        lines.append("")
        for o in job.failed[:_MAX_NOTES]:
            lines.append(f"- {md_escape(o.path)}: {md_escape(o.error or '')}")
        if len(job.failed) > _MAX_NOTES:
            lines.append(f"- {len(job.failed) - _MAX_NOTES} more in `--format json`")
        lines.append("")
    lines.append("`badput explain ID` explains a finding.")
    return _bounded(lines, max_bytes)


def _job_lines(job: JobResult, part: Job, top: int, many: bool) -> list[str]:
    """One job's findings across ranks (a straggler first), GPU sections and rank tables."""
    found = job.findings_of(part)
    lines: list[str] = []
    job_level = [f for f in found if f.job_level]
    if job_level:  # first: a straggler's, as the other ranks' waiting is its doing
        lines += ["**Across ranks**", "", *_finding_lines(job_level, with_where=True), ""]
    devices = [d for o in part.analysed for d in o.devices]
    if not many:
        for d in devices:
            lines += _device_section(d, top, job.diagnosis.for_device(d))
            memory = memory_summary(part, d)
            if memory is not None:
                lines += [memory[0].upper() + memory[1:], ""]
    if part.cross is not None:
        lines += _rank_section(part, part.cross)
    if many:
        per_gpu = [f for f in found if not f.job_level]
        lines += [
            f"Per-GPU sections are left out above {_MAX_DEVICE_SECTIONS} GPUs; "
            "`--format json` has them all.",
            "",
        ]
        if per_gpu:
            lines += ["**What to fix first, over all GPUs**", ""]
            lines += [*_finding_lines(per_gpu, with_where=True), ""]
    return lines


def _seconds(x: float) -> str:
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {name}"
    return f"{x / 1e-9:.4g} ns"


def _number(metric: str, x: float) -> str:
    """A value of `metric`: seconds scaled for metrics named `*_s`, else 6 digits."""
    if metric.endswith("_s") and not metric.endswith("per_s"):
        return _seconds(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.6g}"


_AB_HEADLINE = {0: "PASS", 1: "FAIL", 3: "ERROR", 4: "FAIL"}
_AB_MARK = {"regression": "**regression**", "improvement": "improvement"}


def ab_markdown(result: ABResult, max_bytes: int = MAX_BYTES) -> str:
    """The `badput bench ab` verdict: a PASS/FAIL headline and one row per benchmark metric.

    Rows are sorted with regressions first, then by effect (worst first). Base and head are the
    medians of the rounds; change is the gate's effect (median paired ratio minus 1, signed so
    that positive means slower for lower-is-better metrics) with its confidence interval.
    """
    code = exit_code(result)
    counts = {k: 0 for k in ("regression", "improvement", "no_change", "inconclusive")}
    for r in result.results:
        counts[str(r.decision)] += 1
    lines = [
        f"## badput bench ab: **{_AB_HEADLINE.get(code, 'FAIL')}**",
        "",
        f"{plural(counts['regression'], 'regression')}, "
        f"{plural(counts['improvement'], 'improvement')}, "
        f"{counts['no_change']} no change, {counts['inconclusive']} inconclusive "
        f"(exit code {code}).",
        "",
    ]
    order = sorted(result.results, key=lambda r: (str(r.decision) != "regression", -abs(r.effect)))
    shown = order[:_MAX_ROWS]
    rows = [
        [
            md_escape(r.benchmark),
            md_escape(r.metric),
            _number(r.metric, statistics.median(r.base)) if r.base else "–",
            _number(r.metric, statistics.median(r.head)) if r.head else "–",
            f"{100 * r.effect:+.1f} %",
            f"[{100 * r.ci[0]:+.1f} %, {100 * r.ci[1]:+.1f} %]",
            f"{r.p_adjusted:.3g}",
            str(r.rounds),
            _AB_MARK.get(str(r.decision), str(r.decision).replace("_", " ")),
        ]
        for r in shown
    ]
    header = ("benchmark", "metric", "base", "head", "change", "CI", "p (Holm)", "rounds")
    lines += _table((*header, "verdict"), "llrrrrrrl", rows)
    if len(order) > len(shown):
        lines.append(f"\n{len(order) - len(shown)} more rows in `--json`.")
    p = result.policy
    lines += [
        "",
        f"Alpha {p.alpha:g} (Holm), minimum effect {100 * p.min_effect:g} %, "
        f"{plural(result.looks, 'look')}, {result.elapsed_s:,.1f} s.",
    ]
    return _bounded(lines, max_bytes)


_CHECK_HEADLINE = {0: "PASS", 1: "FAIL", 3: "ERROR"}


def check_markdown(result: CheckResult, max_bytes: int = MAX_BYTES) -> str:
    """The `badput bench check` verdict: a PASS/FAIL headline and one row per metric.

    Rows that fail come first. Change is measured minus expected (and relative to expected);
    allowed is the larger of the two tolerances.
    """
    code = result.exit_code
    verdicts: dict[str, int] = {}
    for c in result.checks:
        verdicts[str(c.verdict)] = verdicts.get(str(c.verdict), 0) + 1
    summary = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in sorted(verdicts.items()))
    lines = [
        f"## badput bench check: **{_CHECK_HEADLINE.get(code, 'FAIL')}**",
        "",
        f"{summary or 'nothing compared'} (exit code {code}).",
        "",
    ]
    order = sorted(result.checks, key=lambda c: (not c.fails, c.benchmark, c.metric))
    shown = order[:_MAX_ROWS]
    rows = []
    for c in shown:
        change = "–"
        if c.delta is not None:
            change = _number(c.metric, c.delta)
            if not change.startswith("-"):
                change = "+" + change
            if c.delta_rel is not None:
                change += f" ({100 * c.delta_rel:+.2f} %)"
        verdict = str(c.verdict).replace("_", " ")
        rows.append(
            [
                md_escape(c.benchmark),
                md_escape(c.metric),
                "–" if c.expected is None else _number(c.metric, c.expected),
                "–" if c.measured is None else _number(c.metric, c.measured),
                change,
                _number(c.metric, c.allowed),
                f"**{verdict}**" if c.fails else verdict,
            ]
        )
    header = ("benchmark", "metric", "expected", "measured", "change", "allowed", "verdict")
    lines += _table(header, "llrrrrl", rows)
    if len(order) > len(shown):
        lines.append(f"\n{len(order) - len(shown)} more rows in `--json`.")
    return _bounded(lines, max_bytes)
