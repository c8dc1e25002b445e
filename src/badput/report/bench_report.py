"""Renderings of an A/B verdict: terminal table, Markdown, JUnit XML, JSON."""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr

from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.bench.ab import ABResult, exit_code

__all__ = ["render_ab", "to_json", "to_junit"]

_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "no_change": "",
    "inconclusive": "yellow",
}


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def render_ab(result: ABResult, console: Console) -> None:
    """The verdict table, one row per benchmark metric."""
    t = Table(
        box=None, pad_edge=False, header_style="bold", title="badput bench ab", title_justify="left"
    )
    for col in ("benchmark", "metric", "decision", "effect", "CI", "p (Holm)", "rounds"):
        t.add_column(
            col, justify="right" if col in ("effect", "CI", "p (Holm)", "rounds") else "left"
        )
    for r in result.results:
        t.add_row(
            Text(r.benchmark),
            Text(r.metric),
            Text(str(r.decision), style=_STYLE[str(r.decision)]),
            _pct(r.effect),
            Text(f"[{_pct(r.ci[0])}, {_pct(r.ci[1])}]"),
            f"{r.p_adjusted:.3g}",
            str(r.rounds),
        )
    console.print(t)
    p = result.policy
    console.print(
        f"alpha {p.alpha:g} (Holm), minimum effect {100 * p.min_effect:g} %, "
        f"{result.looks} look(s), {result.elapsed_s:,.1f} s; exit code {exit_code(result)}",
        style="dim",
    )


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
