"""The `badput` command: a typer app and `main()`, which maps errors to exit codes.

Exit codes: 0 ok, 2 bad input or usage. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from badput import __version__
from badput.cli.common import Format
from badput.errors import BadputError

if TYPE_CHECKING:
    from badput.trace.model import Trace

__all__ = ["app", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="badput",
    help="Where the GPU time of PyTorch training and inference goes, from measured data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# Traces at least this large (uncompressed bytes) get a progress bar on a terminal.
_PROGRESS_MIN_BYTES = 64 << 20


@app.command()
def analyze(
    paths: Annotated[
        list[str], typer.Argument(help="Trace files (.json, .json.gz) or directories of them.")
    ],
    output_format: Annotated[
        Format, typer.Option("--format", "-f", help="Report format.")
    ] = Format.TEXT,
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write the report to this file.")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Kernels to list per GPU (0: all).")] = 10,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Analyse only steps:A-B (ProfilerStep numbers) or ns:T0-T1 / us:T0-T1.",
        ),
    ] = None,
) -> None:
    """Goodput and badput of each GPU in PyTorch profiler traces.

    Example:
        badput analyze worker0.pt.trace.json.gz --format json --out result.json
    """
    from badput.analysis import WindowSpec, analyze_trace
    from badput.diagnose import diagnose
    from badput.report.json_report import analysis_document, encode_document
    from badput.report.text import render_text
    from badput.trace import find_traces

    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    spec = WindowSpec.parse(window) if window is not None else None
    files = [f for p in paths for f in find_traces(p)]
    err = Console(stderr=True)
    results = []
    for path in files:
        trace = _load_with_progress(path, err)
        results.append((trace, analyze_trace(trace, spec)))

    diagnosis = diagnose(results)
    if output_format is Format.JSON:
        data = encode_document(analysis_document(results, diagnosis, top=top))
        if out:
            with open(out, "wb") as f:
                f.write(data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return
    if out:
        with open(out, "w", encoding="utf-8") as text_file:
            console = Console(file=text_file, width=120, no_color=True)
            render_text(results, console, diagnosis=diagnosis, top=top)
    else:
        render_text(results, Console(), diagnosis=diagnosis, top=top)


def _load_with_progress(path: str, console: Console) -> Trace:
    """Load a trace, with a progress bar on an interactive terminal for big files."""
    from badput.trace import load_trace as load

    size = os.path.getsize(path)
    gz = path.endswith(".gz")
    if not console.is_terminal or (size < _PROGRESS_MIN_BYTES and not (gz and size > 8 << 20)):
        return load(path)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    with Progress(
        TextColumn("reading {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(os.path.basename(path), total=None if gz else size)
        return load(path, progress=lambda n: progress.update(task, completed=n))


def _register_subcommands() -> None:
    from badput.cli.bench import bench_app
    from badput.cli.estimate import estimate_app

    app.add_typer(estimate_app, name="estimate")
    app.add_typer(bench_app, name="bench")


_register_subcommands()


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def run(
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write the summary as JSON to this file.")
    ] = None,
) -> None:
    """Run a training script with the goodput meter attached (no code changes).

    Example:
        badput run --out goodput.json -- python train.py --epochs 1
    """
    from badput.cli.run import run_metered

    code = run_metered(command, out)
    if code:
        raise typer.Exit(code)


@app.command()
def explain(
    rule_id: Annotated[str, typer.Argument(help="A finding id, e.g. data-loading.")],
) -> None:
    """Explain a diagnosis rule: what it looks for, how savings are estimated, the fixes."""
    from badput.diagnose import RULES
    from badput.errors import UsageError
    from badput.report.text import render_rule

    rule = RULES.get(rule_id)
    if rule is None:
        raise UsageError(f"no rule {rule_id!r}; rules: {', '.join(sorted(RULES))}")
    render_rule(rule, Console())


@app.command()
def version() -> None:
    """Print badput's version."""
    typer.echo(__version__)


def _error(message: str) -> int:
    sys.stderr.write(f"badput: error: {message}\n")
    sys.stderr.flush()
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Args:
        argv: arguments without the program name; default `sys.argv[1:]`.
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args, prog_name="badput", standalone_mode=True)
    except SystemExit as e:  # typer ends every run, usage errors (code 2) included, this way
        code = e.code
        if code is None:
            return EXIT_OK
        return code if isinstance(code, int) else EXIT_BAD_INPUT
    except BadputError as e:
        return _error(str(e))
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK
