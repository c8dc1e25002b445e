"""`badput diff BEFORE AFTER`: what changed between two traces of the same workload."""

from __future__ import annotations

from typing import Annotated

import typer

from badput.cli.common import Format, OutOption, json_out, text_out, write_html
from badput.cli.jobs import ClassifyOption
from badput.errors import printable

__all__ = ["diff"]


def diff(
    before: Annotated[str, typer.Argument(help="The BEFORE trace (.json, .json.gz).")],
    after: Annotated[str, typer.Argument(help="The AFTER trace (.json, .json.gz).")],
    output_format: Annotated[
        Format | None,
        typer.Option(
            "--format", "-f", help="Report format (default text; none with --html alone)."
        ),
    ] = None,
    out: OutOption = None,
    top: Annotated[
        int,
        typer.Option("--top", help="Kernels, ops and modules to list per change group (0: all)."),
    ] = 10,
    html_out: Annotated[
        str | None,
        typer.Option(
            "--html",
            help="Write the diff as an HTML page; alone (no --format, --out) only the page.",
        ),
    ] = None,
    classify: ClassifyOption = None,
) -> None:
    """Goodput, badput categories, step time, kernels and ops of BEFORE against AFTER.

    Times are per step, since two captures rarely hold the same number of steps. Kernels are
    matched by name and category and reported as slower, faster (past 5 % and 1 us per step),
    appeared or disappeared. Ops are matched by (op, input dims, input types), listed by the
    size of their change of GPU time with calls, TFLOP/s and share of the roof before and
    after (an op whose shapes changed is one gone and one new), with the MFU and the module
    times. GPUs are paired by device index. With --html and neither --format nor --out, only
    the page is written, and one line names it.

    Examples:
        badput diff before.pt.trace.json.gz after.pt.trace.json.gz --format json -o diff.json
        badput diff before.pt.trace.json.gz after.pt.trace.json.gz --html diff.html
    """
    from badput.analysis import analyze_trace
    from badput.analysis.classify import load_class_rules
    from badput.analysis.diff import diff_traces
    from badput.report.diff_report import diff_document, render_diff
    from badput.report.json_report import encode_document
    from badput.trace import load_trace

    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    rules = load_class_rules(classify) if classify is not None else None
    # analyze_trace keeps every kernel: the comparison never sees a top-N cut.
    before_analyses = analyze_trace(load_trace(before), rules=rules)
    after_analyses = analyze_trace(load_trace(after), rules=rules)
    result = diff_traces(before_analyses, after_analyses)
    if html_out is not None:
        from badput.report.html_report import render_diff_html

        page = render_diff_html(result, top=top, before=before_analyses, after=after_analyses)
        write_html(html_out, page)
        if output_format is None and out is None:
            typer.echo(f"wrote {printable(html_out)} ({len(page.encode()) / 1024:,.0f} KiB)")
            return
    if output_format is Format.JSON:
        json_out(out, encode_document(diff_document(result, top=top)))
        return
    with text_out(out) as console:
        render_diff(result, console, top=top)
