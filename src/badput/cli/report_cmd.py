"""`badput report`: the analysis of traces as one self-contained HTML file."""

from __future__ import annotations

from typing import Annotated

import typer

from badput.cli.jobs import (
    AddressOption,
    ClassifyOption,
    Executor,
    ExecutorOption,
    JobsOption,
    PathsArgument,
    StepRangeOption,
    StrictOption,
    TopOption,
    WindowOption,
    run_job,
)
from badput.errors import BadputError

__all__ = ["report"]


def report(
    paths: PathsArgument,
    out: Annotated[str, typer.Option("--out", "-o", help="The HTML file to write.")],
    window: WindowOption = None,
    step_range: StepRangeOption = None,
    classify: ClassifyOption = None,
    top: TopOption = 10,
    jobs: JobsOption = None,
    executor: ExecutorOption = Executor.LOCAL,
    address: AddressOption = None,
    strict: StrictOption = False,
) -> None:
    """Write the analysis of traces as one self-contained HTML file.

    It holds summary cards, per-step and per-rank breakdowns, a step timeline, top kernels,
    communication, findings with their fixes and the environment.

    The file works offline: inline SVG and CSS, no script, no network. It holds summaries
    only, never the raw trace, and never the trace's environment variables.

    Example:
        badput report traces/ --out report.html
    """
    from badput.report.html_report import render_html

    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    job = run_job(
        paths,
        window=window,
        top=top,
        executor=executor,
        jobs=jobs,
        address=address,
        step_range=step_range,
        classify=classify,
    )
    document = render_html(job, top=top)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(document)
    except OSError as e:
        raise BadputError(f"{out}: cannot write the report: {e.strerror or e}") from e
    typer.echo(f"wrote {out} ({len(document.encode()) / 1024:,.0f} KiB)")
    if job.failed and strict:
        raise typer.Exit(2)
