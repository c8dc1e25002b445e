"""`badput report`: the analysis of traces as one self-contained HTML file."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from badput.errors import BadputError

__all__ = ["report"]


def report(
    paths: Annotated[
        list[str], typer.Argument(help="Trace files (.json, .json.gz) or directories of them.")
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="The HTML file to write.")],
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Analyse only steps:A-B (ProfilerStep numbers) or ns:T0-T1 / us:T0-T1.",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Kernels to list per GPU (0: all).")] = 10,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Local worker processes (default: 1 for one trace, else min(CPUs, traces)).",
        ),
    ] = None,
) -> None:
    """Write the analysis of traces as one self-contained HTML file.

    It holds summary cards, per-step and per-rank breakdowns, a step timeline, top kernels,
    communication, findings with their fixes and the environment.

    The file works offline: inline SVG and CSS, no script, no network. It holds summaries
    only, never the raw trace, and never the trace's environment variables.

    Example:
        badput report traces/ --out report.html
    """
    from badput.analysis import WindowSpec
    from badput.cli.app import _warn
    from badput.diagnose import diagnose_job
    from badput.report.html_report import render_html
    from badput.scale import LocalExecutor, analyze_path
    from badput.trace import find_traces

    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    if jobs is not None and jobs < 1:
        raise typer.BadParameter("--jobs must be >= 1", param_hint="--jobs")
    if window is not None:
        WindowSpec.parse(window)
    files = [f for p in paths for f in find_traces(p)]
    default = 1 if len(files) == 1 else min(os.cpu_count() or 1, len(files))
    runner = LocalExecutor(jobs if jobs is not None else default)
    outcomes = list(runner.map(analyze_path, [(path, window, top) for path in files]))
    job = diagnose_job(outcomes)
    failed = job.failed
    if len(failed) == len(outcomes):
        if len(failed) == 1:
            raise BadputError(f"{failed[0].path}: {failed[0].error}")
        for o in failed:
            _warn(f"{o.path}: {o.error}")
        raise BadputError(f"none of the {len(failed)} traces could be analysed")
    for o in failed:
        _warn(f"{o.path}: {o.error} (left out; {len(job.analysed)} of {len(outcomes)} analysed)")
    document = render_html(job, top=top)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(document)
    except OSError as e:
        raise BadputError(f"{out}: cannot write the report: {e.strerror or e}") from e
    typer.echo(f"wrote {out} ({len(document.encode()) / 1024:,.0f} KiB)")
