"""`badput annotate`: a copy of a trace with badput's tracks, for Perfetto UI and chrome://tracing."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

__all__ = ["annotate"]


def annotate(
    trace: Annotated[
        str,
        typer.Argument(
            help="A PyTorch profiler JSON trace (.json, .json.gz); an Nsight Systems export "
            "(.sqlite) cannot be annotated (analyze or report read it).",
            metavar="TRACE",
        ),
    ],
    out: Annotated[
        str, typer.Option("--out", "-o", help="The annotated copy (.json, or .json.gz: gzipped).")
    ],
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Analyse only steps:N or steps:A-B (ProfilerStep numbers) or ns:T0-T1 / us:T0-T1.",
        ),
    ] = None,
) -> None:
    """Write a copy of a trace with extra tracks: idle by cause, exposed communication, findings.

    Every original event is kept; per GPU, a process "badput GPU N" is added whose tracks
    hold the analysis intervals (their durations add up to `badput analyze`'s numbers) and
    the findings as instant events at the window start. Secret values of the trace's
    metadata (tokens, keys, passwords) and token-shaped values in its events are written as
    <redacted>.

    Example:
        badput annotate worker0.pt.trace.json.gz --out annotated.json.gz
    """
    from badput.errors import UsageError, printable
    from badput.report.perfetto import annotate_trace
    from badput.report.units import plural
    from badput.trace._files import require_regular_file
    from badput.trace.nsys import is_sqlite

    require_regular_file(trace)  # before anything opens it: a FIFO would block the read
    if is_sqlite(trace):
        raise UsageError(
            f"{trace}: annotate writes a copy of a PyTorch profiler JSON trace; an Nsight "
            "Systems export cannot be annotated (use `badput analyze` or `badput report`)"
        )
    result = annotate_trace(trace, out, window)
    sys.stderr.write(
        f"badput: wrote {printable(result.out)}: {plural(result.original_events, 'original event')}"
        f", {result.added_events:,} added ({plural(result.devices, 'GPU')}, "
        f"{plural(result.findings, 'finding')})\n"
    )
