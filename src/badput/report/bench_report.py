"""Renderings of `badput bench`: the A/B verdict (terminal, JUnit XML, JSON), run and check.

Every terminal table goes through `badput.report.table.fitted` at the console's width:
benchmark ids and metric names give way first (they wrap, for ids are what `--filter` and
`check` take, so they are never shortened), then low-value columns drop with a note under the
table; numbers are never cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from badput.bench.ab import ABResult, exit_code
from badput.report.table import Col, Fitted, fitted

if TYPE_CHECKING:
    from badput.bench.deterministic import CheckResult
    from badput.bench.runner import CaseResult, RunResult

__all__ = ["format_number", "render_ab", "render_check", "render_run", "to_json", "to_junit"]

_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "no_change": "",
    "inconclusive": "yellow",
}


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def _wrap_cell(text: str, width: int, seps: tuple[str, ...]) -> str:
    """`text` on lines of at most `width`, broken after the last separator that fits."""
    width = max(width, 1)
    lines: list[str] = []
    rest = text
    while cell_len(rest) > width:
        ends = [rest.rfind(sep, 0, width - len(sep) + 1) + len(sep) for sep in seps]
        at = max((e for e in ends if e > len(seps[0]) - 1 and e > 0), default=0) or width
        lines.append(rest[:at].rstrip())
        rest = rest[at:].lstrip()
    lines.append(rest)
    return "\n".join(lines)


#: Where a benchmark id or metric name may break: after a path, scope, list or word separator.
_ID_BREAKS = ("/", "::", "[", ",", "_", ".", "-")


def _wrap_ids(cells: list[str], width: int) -> list[str]:
    """Benchmark ids and metric names within `width`: wrapped, never shortened."""
    return [_wrap_cell(c, width, _ID_BREAKS) for c in cells]


def _wrap_numbers(cells: list[str], width: int) -> list[str]:
    """A list of numbers within `width`: wrapped between numbers, never inside one."""
    return [_wrap_cell(c, width, (" ",)) for c in cells]


def _print(console: Console, title: str, table: Fitted, styles: dict[str, list[str]]) -> None:
    """A fitted table under its title, cells styled by column header, and its note."""
    for column in table.table.columns:
        for cell, style in zip(column._cells, styles.get(str(column.header), ()), strict=False):
            if isinstance(cell, Text) and style:
                cell.stylize(style)
    console.print(Text(title, style="bold"))
    console.print(table.table)
    note = table.note()
    if note is not None:
        console.print(Text(note, style="dim"))


def render_ab(result: ABResult, console: Console) -> None:
    """The verdict table, one row per benchmark metric, fitted to the console's width."""
    cols = [
        Col("benchmark", elastic=True, floor=12, shrink=_wrap_ids),
        Col("metric", elastic=True, floor=8, shrink=_wrap_ids),
        Col("decision"),
        Col("effect", right=True),
        Col("CI", right=True),
        Col("p (Holm)", right=True),
        Col("rounds", right=True, drop=1),
    ]
    rows = [
        [
            r.benchmark,
            r.metric,
            str(r.decision),
            _pct(r.effect),
            f"[{_pct(r.ci[0])}, {_pct(r.ci[1])}]",
            f"{r.p_adjusted:.3g}",
            str(r.rounds),
        ]
        for r in result.results
    ]
    styles = {"decision": [_STYLE[str(r.decision)] for r in result.results]}
    _print(console, "badput bench ab", fitted(cols, rows, console.width), styles)
    p = result.policy
    console.print(
        f"alpha {p.alpha:g} (Holm), minimum effect {100 * p.min_effect:g} %, "
        f"{result.looks} look(s), {result.elapsed_s:,.1f} s; exit code {exit_code(result)}",
        style="dim",
    )


def _scale(unit: str | None, ref: float) -> tuple[float, str]:
    """(divisor, suffix) that shows `ref` best: s/ms/us/ns for seconds, none otherwise."""
    if unit != "s":
        return 1.0, ""
    for scale, name in ((1.0, " s"), (1e-3, " ms"), (1e-6, " us")):
        if abs(ref) >= scale:
            return scale, name
    return 1e-9, " ns"


def _run_row(r: CaseResult) -> list[str]:
    from badput.bench.runner import round_stats

    b = r.case.benchmark
    if not r.ok:
        return [r.case.id, b.metric, "", "", "", "error"]
    s = round_stats(r.values)
    # One scale for the whole row, so that the rounds read as plain numbers next to the median.
    div, suffix = _scale(b.unit, s["median"])
    digits = ".3g" if b.unit == "s" else ".6g"
    return [
        r.case.id,
        b.metric,
        f"{s['median'] / div:{digits}}{suffix}",
        f"{s['iqr'] / div:{digits}}{suffix}",
        f"{s['mad'] / div:{digits}}{suffix}",
        " ".join(f"{v / div:{digits}}" for v in r.values),
    ]


def render_run(result: RunResult, console: Console) -> None:
    """`badput bench run`: median, IQR, MAD and the rounds of each case, fitted to the width."""
    cols = [
        Col("benchmark", elastic=True, floor=12, shrink=_wrap_ids),
        Col("metric", elastic=True, floor=8, shrink=_wrap_ids),
        Col("median", right=True),
        Col("IQR", right=True),
        Col("MAD", right=True),
        Col("rounds", elastic=True, floor=8, shrink=_wrap_numbers),
    ]
    rows = [_run_row(r) for r in result.results]
    styles = {"rounds": ["" if r.ok else "bold red" for r in result.results]}
    _print(console, "badput bench run", fitted(cols, rows, console.width), styles)
    console.print(
        f"{len(result.results)} case(s) x {result.rounds} round(s), a fresh process each; "
        f"{result.elapsed_s:,.1f} s; exit code {result.exit_code}",
        style="dim",
    )


_VERDICT_STYLE = {
    "pass": "",
    "regression": "bold red",
    "improvement": "green",
    "improvement_needs_update": "bold yellow",
    "missing": "bold red",
    "new": "cyan",
}


def format_number(x: float, sign: bool = False) -> str:
    """Whole numbers in full with thousands separators (bytes, counts); others to 6 digits."""
    plus = "+" if sign else ""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):{plus},}"
    return f"{x:{plus}.6g}"


def render_check(result: CheckResult, console: Console) -> None:
    """`badput bench check`: each metric's verdict against its expected value and tolerance."""
    cols = [
        Col("benchmark", elastic=True, floor=12, shrink=_wrap_ids),
        Col("metric", elastic=True, floor=8, shrink=_wrap_ids),
        Col("verdict"),
        Col("expected", right=True),
        Col("measured", right=True),
        Col("change", right=True, drop=1),  # measured - expected: both are shown
        Col("allowed", right=True, drop=2),
    ]
    rows: list[Sequence[str]] = []
    for c in result.checks:
        rel = c.delta_rel
        change = "" if c.delta is None else format_number(c.delta, sign=True)
        if rel is not None:
            change += f" ({100 * rel:+.2f} %)"
        rows.append(
            [
                c.benchmark,
                c.metric,
                str(c.verdict),
                "" if c.expected is None else format_number(c.expected),
                "" if c.measured is None else format_number(c.measured),
                change,
                format_number(c.allowed),
            ]
        )
    styles = {"verdict": [_VERDICT_STYLE[str(c.verdict)] for c in result.checks]}
    _print(console, "badput bench check", fitted(cols, rows, console.width), styles)


def to_json(result: ABResult) -> str:
    """The JSON verdict document."""
    return json.dumps(result.as_dict(), indent=2) + "\n"


def to_junit(result: ABResult) -> str:
    """JUnit XML: one test case per benchmark metric; a regression is a failure."""
    failures = sum(1 for r in result.results if str(r.decision) == "regression")
    cases = []
    for r in result.results:
        name = quoteattr(f"{r.benchmark}:{r.metric}")
        body = ""
        if str(r.decision) == "regression":
            message = quoteattr(f"regression {_pct(r.effect)} (p={r.p_adjusted:.3g})")
            body = f"<failure message={message}>{escape(json.dumps(r.as_dict()))}</failure>"
        elif str(r.decision) == "inconclusive":
            body = "<system-out>inconclusive</system-out>"
        cases.append(f'  <testcase classname="badput.bench" name={name}>{body}</testcase>')
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<testsuite name="badput bench ab" tests="{len(result.results)}" '
        f'failures="{failures}" errors="0">\n' + "\n".join(cases) + "\n</testsuite>\n"
    )
