"""`badput roofline NCU.csv`: each kernel of an Nsight Compute export against its GPU's roofline."""

from __future__ import annotations

from typing import Annotated

import typer

from badput.cli.common import Format, OutOption, json_out, text_out, write_html

__all__ = ["roofline"]


def roofline(
    path: Annotated[str, typer.Argument(help="An `ncu --csv` export (details or raw page).")],
    output_format: Annotated[
        Format | None, typer.Option("--format", "-f", help="Report format (default: text).")
    ] = None,
    out: OutOption = None,
    html_out: Annotated[
        str | None, typer.Option("--html", help="Also write the roofline as an HTML page.")
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="The GPU, by a name the hardware table knows (e.g. T4)."),
    ] = None,
    peak_tflops: Annotated[
        float | None,
        typer.Option("--peak-tflops", help="Compute peak in TFLOP/s (replaces the table's)."),
    ] = None,
    peak_gbps: Annotated[
        float | None,
        typer.Option("--peak-gbps", help="DRAM bandwidth peak in GB/s (replaces the table's)."),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="ncu findings to list (0: all).")] = 10,
) -> None:
    """Each kernel against its GPU's roofline: memory- or compute-bound, and how far from the roof.

    Reads `ncu --csv` output (progress lines and program output around it are skipped). Peaks
    come from badput's hardware table, found by ncu's device name or compute capability; pass
    --gpu, or --peak-tflops and --peak-gbps, when it cannot tell. ncu's own rule results with
    an estimated speedup are ranked by speedup × kernel time. With --html alone the page is
    written and one line names it; add --format or --out for the report as well.

    Example:
        ncu --csv --set full ./app > report.csv; badput roofline report.csv --html roof.html
    """
    from badput.analysis.roofline import analyze_roofline
    from badput.report.roofline_report import (
        encode_roofline,
        render_roofline,
        render_roofline_html,
    )
    from badput.trace.ncu import read_ncu_csv

    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    analysis = analyze_roofline(
        read_ncu_csv(path), gpu=gpu, peak_tflops=peak_tflops, peak_gbps=peak_gbps
    )
    if html_out is not None:
        from badput.errors import printable

        page = render_roofline_html(analysis, top=top)
        write_html(html_out, page)
        if output_format is None and out is None:  # --html alone: the page, and one line
            typer.echo(f"wrote {printable(html_out)} ({len(page.encode()) / 1024:,.0f} KiB)")
            return
    if output_format is Format.JSON:
        json_out(out, encode_roofline(analysis, top=top).encode())
        return
    with text_out(out) as console:
        render_roofline(analysis, console, top=top)
