"""`badput memory SNAPSHOT`: peak, fragmentation and what to change, from a memory snapshot."""

from __future__ import annotations

from typing import Annotated

import typer

from badput.cli.common import Format, OutOption, json_out, text_out, write_html

__all__ = ["memory"]


def memory(
    snapshot: Annotated[
        str,
        typer.Argument(help="A torch.cuda.memory._dump_snapshot pickle (.pickle, or gzipped)."),
    ],
    output_format: Annotated[
        Format | None, typer.Option("--format", "-f", help="Report format (default: text).")
    ] = None,
    out: OutOption = None,
    html_out: Annotated[
        str | None,
        typer.Option("--html", help="Also write the report, with the memory plot, as HTML."),
    ] = None,
    device: Annotated[
        int | None, typer.Option("--device", help="Only this CUDA device (default: all).")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", help="Data-parallel GPUs to shard optimizer state over."),
    ] = None,
    params: Annotated[
        str | None,
        typer.Option("--params", help="Model parameters: cross-check with estimate memory."),
    ] = None,
    optimizer: Annotated[
        str, typer.Option(help="adam, adam-no-master, sgd-momentum, adafactor.")
    ] = "adam",
    weight_bytes: Annotated[float, typer.Option(help="Bytes per weight.")] = 2.0,
    grad_bytes: Annotated[float, typer.Option(help="Bytes per gradient.")] = 2.0,
) -> None:
    """Peak memory, what set it, fragmentation and churn, from a CUDA memory snapshot.

    The pickle is read with an unpickler that refuses every Python global: a snapshot from
    someone else cannot run code here. With --html alone the page is written and one line
    names it; add --format or --out for the report as well.

    Example:
        badput memory snapshot.pickle --format json --params 1.3e9 --gpus 8
        badput memory snapshot.pickle --html memory.html
    """
    from badput.analysis.memory import analyze_snapshot
    from badput.cli.estimate import parse_quantity
    from badput.diagnose.memory import ModelSize, diagnose_memory
    from badput.errors import UsageError
    from badput.report.memory_report import encode_memory, memory_document, render_memory
    from badput.trace.snapshot import load_snapshot

    if gpus is not None and gpus < 1:
        raise UsageError("--gpus must be at least 1")
    model = (
        ModelSize(
            params=parse_quantity(params, "--params"),
            gpus=gpus or 1,
            optimizer=optimizer,
            weight_bytes=weight_bytes,
            grad_bytes=grad_bytes,
        )
        if params is not None
        else None
    )
    snap = load_snapshot(snapshot)
    if device is not None and device not in snap.devices():
        raise UsageError(f"--device {device}: the snapshot has devices {snap.devices()}")
    analysis = analyze_snapshot(snap, device)
    diagnosis = diagnose_memory(analysis, model, gpus)
    if html_out is not None:
        from badput.errors import printable
        from badput.report.memory_report import render_memory_html

        page = render_memory_html(analysis, diagnosis)
        write_html(html_out, page)
        if output_format is None and out is None:  # --html alone: the page, and one line
            typer.echo(f"wrote {printable(html_out)} ({len(page.encode()) / 1024:,.0f} KiB)")
            return
    if output_format is Format.JSON:
        json_out(out, encode_memory(memory_document(analysis, diagnosis)))
        return
    with text_out(out) as console:
        render_memory(analysis, diagnosis, console)
