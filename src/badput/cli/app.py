"""The `badput` command: a typer app and `main()`, which maps errors to exit codes.

Exit codes: 0 ok, 1 a gate of `analyze` failed, 2 bad input or usage. Errors are one line on
stderr, never a traceback.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from badput import __version__
from badput.cli.common import (
    OutOption,
    ReportFormat,
    json_out,
    new_console,
    stderr_line,
    text_out,
)
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

if TYPE_CHECKING:
    from typer.core import TyperCommand, TyperGroup

    from badput.analysis.results import DeviceAnalysis
    from badput.analysis.telemetry import TelemetryAlignment
    from badput.diagnose import JobResult

__all__ = ["app", "command", "main"]

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
# Failing gate checks named on stderr before "N more" (one per GPU and gate: thousands on a
# large job).
_GATE_LINES = 10

app = typer.Typer(
    name="badput",
    help="Where the GPU time of PyTorch training and inference goes, from measured data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _badput(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print badput's version (as `badput version`) and exit.",
        ),
    ] = False,
) -> None:
    """Where the GPU time of PyTorch training and inference goes, from measured data."""


@app.command()
def analyze(
    paths: PathsArgument,
    output_format: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", help="Report format (markdown: for CI step summaries)."),
    ] = ReportFormat.TEXT,
    out: OutOption = None,
    append: Annotated[
        bool,
        typer.Option(
            "--append",
            help="Add to the end of --out instead of replacing it (text, markdown; always for "
            "the $GITHUB_STEP_SUMMARY file).",
        ),
    ] = False,
    min_goodput: Annotated[
        float | None,
        typer.Option(
            "--min-goodput",
            help="Exit 1 unless every GPU's goodput is at least this fraction (0.8 = 80 %).",
        ),
    ] = None,
    max_step_time_ms: Annotated[
        float | None,
        typer.Option(
            "--max-step-time-ms",
            help="Exit 1 unless every GPU's median step time is at most this many ms.",
        ),
    ] = None,
    top: TopOption = 10,
    window: WindowOption = None,
    step_range: StepRangeOption = None,
    classify: ClassifyOption = None,
    executor: ExecutorOption = Executor.LOCAL,
    jobs: JobsOption = None,
    address: AddressOption = None,
    strict: StrictOption = False,
    telemetry: Annotated[
        str | None,
        typer.Option(
            "--telemetry",
            help="A `badput telemetry record` file (.jsonl/.parquet) to show beside each GPU.",
        ),
    ] = None,
) -> None:
    """Goodput and badput of each GPU in PyTorch profiler traces, and across ranks.

    Inputs: PyTorch profiler JSON traces (.json, .json.gz), Nsight Systems SQLite exports
    (.sqlite; one process of one: FILE.sqlite#pid=N), and directories of them (one trace per
    rank; other files there are left out with a note).

    Traces are analysed one per task, on a local process pool or on Ray; each task returns
    only a compact summary. A trace that cannot be read is reported as failed and the others
    are still analysed.

    Exit codes: 0 ok, 1 a --min-goodput/--max-step-time-ms gate failed (the report is
    written first; one line per failing GPU on stderr), 2 bad input.

    Examples:
        badput analyze traces/ --format json --out result.json --jobs 8
        badput analyze traces/ --format markdown --out "$GITHUB_STEP_SUMMARY" --min-goodput 0.8
    """
    if top < 0:
        raise typer.BadParameter("--top must be >= 0", param_hint="--top")
    _check_gate_options(output_format, out, append, min_goodput, max_step_time_ms)
    samples = None
    if telemetry is not None:
        from badput.telemetry import read_telemetry

        samples = read_telemetry(telemetry)  # a bad file is a usage error before any work
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

    aligned = _align_telemetry(job, samples.columns) if samples is not None else None
    gates = None
    if min_goodput is not None or max_step_time_ms is not None:
        from badput.diagnose.gates import evaluate_gates

        gates = evaluate_gates(job, min_goodput, max_step_time_ms)
    if output_format is ReportFormat.MARKDOWN:
        from badput.cli.common import write_report
        from badput.report.markdown import analysis_markdown

        text = analysis_markdown(job, top=top, gates=gates or ())
        if out:
            write_report(out, text, append)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    elif output_format is ReportFormat.JSON:
        from badput.report.json_report import encode_document, job_document

        document = job_document(job, top=top)
        if aligned is not None:
            from badput.report.telemetry_report import telemetry_document

            document["telemetry"] = telemetry_document(*aligned)
        if gates is not None:
            document["gates"] = [dataclasses.asdict(g) for g in gates]
        json_out(out, encode_document(document))
    else:
        from badput.report.text import render_job  # the terminal report's (rich) code, 30 ms

        with text_out(out, append) as console:
            render_job(job, console, top=top)
            if aligned is not None:
                from badput.report.telemetry_report import render_device_telemetry

                console.rule("telemetry in each GPU's window")
                render_device_telemetry(*aligned, console)
    if job.failed and strict:
        raise typer.Exit(EXIT_BAD_INPUT)
    failed_gates = [g for g in gates or () if not g.passed]
    for g in failed_gates[:_GATE_LINES]:
        stderr_line("gate failed", g.message)
    if len(failed_gates) > _GATE_LINES:
        stderr_line("gate failed", f"{len(failed_gates) - _GATE_LINES} more checks")
    if failed_gates:
        raise typer.Exit(EXIT_GATE_FAILED)


def _check_gate_options(
    output_format: ReportFormat,
    out: str | None,
    append: bool,
    min_goodput: float | None,
    max_step_time_ms: float | None,
) -> None:
    """Refuse, before any work, the gate and output options that cannot mean anything."""
    if min_goodput is not None and not 0 <= min_goodput <= 1:
        raise typer.BadParameter(
            "--min-goodput is a fraction in [0, 1] (0.8 = 80 %)", param_hint="--min-goodput"
        )
    if max_step_time_ms is not None and not max_step_time_ms > 0:
        raise typer.BadParameter("--max-step-time-ms must be > 0", param_hint="--max-step-time-ms")
    if append and out is None:
        raise typer.BadParameter("--append needs --out", param_hint="--append")
    if append and output_format is ReportFormat.JSON:
        raise typer.BadParameter(
            "--append cannot add a second JSON document to a file", param_hint="--append"
        )


def _align_telemetry(
    job: JobResult, columns: Mapping[str, Sequence[float | int | None]]
) -> tuple[list[DeviceAnalysis], list[TelemetryAlignment]]:
    """Each analysed GPU with the sampler's statistics inside its window."""
    from badput.analysis.telemetry import align_devices

    devices: list[DeviceAnalysis] = []
    alignments: list[TelemetryAlignment] = []
    for o in job.analysed:
        devices += o.devices
        alignments += align_devices(columns, o.devices, base_time_ns=o.base_time_ns)
    return devices, alignments


def _register_subcommands() -> None:
    from badput.cli.bench import bench_app
    from badput.cli.estimate import estimate_app

    app.add_typer(estimate_app, name="estimate")
    app.add_typer(bench_app, name="bench")

    from badput.cli.doctor import doctor
    from badput.cli.telemetry import telemetry_app

    app.command(name="doctor")(doctor)
    app.add_typer(telemetry_app, name="telemetry")

    from badput.cli.diff import diff

    app.command(name="diff")(diff)

    from badput.cli.report_cmd import report

    app.command(name="report")(report)

    from badput.cli.annotate import annotate

    app.command(name="annotate")(annotate)

    from badput.cli.memory import memory

    app.command(name="memory")(memory)

    from badput.cli.roofline import roofline

    app.command(name="roofline")(roofline)


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
    rule_id: Annotated[
        str | None,
        typer.Argument(
            help="A finding id (e.g. data-loading) or a table topic (e.g. classify, ops); "
            "without one, every id and topic is listed.",
            metavar="ID",
        ),
    ] = None,
) -> None:
    """Explain a diagnosis rule (what it looks for, savings, fixes) or a table of the report.

    Without an id, list every rule id and table topic with its one-line title.

    Example:
        badput explain data-loading
    """
    from rich.text import Text

    from badput.diagnose import RULES
    from badput.errors import UsageError
    from badput.report.text import render_rule
    from badput.report.topics import TOPICS

    console = new_console()
    if rule_id is None:
        from badput.report.topics import render_index

        render_index(
            [(r.id, "finding", r.title) for r in RULES.values()]
            + [(t.name, "table", t.title) for t in TOPICS.values()],
            console,
        )
        return
    topic = TOPICS.get(rule_id)
    if topic is not None:
        console.print(Text(f"{topic.name}: {topic.title}", style="bold"))
        console.print(Text(topic.text))
        console.print(Text("\nLimits", style="bold"))
        console.print(Text(topic.limits))
        console.print(Text(f"\nIn full: {topic.doc}", style="dim"))
        return
    rule = RULES.get(rule_id)
    if rule is None:
        raise UsageError(
            f"no rule or table {rule_id!r}; rules: {', '.join(sorted(RULES))}; "
            f"tables: {', '.join(TOPICS)} (`badput explain` lists them)"
        )
    render_rule(rule, console)


@app.command()
def version() -> None:
    """Print badput's version."""
    typer.echo(__version__)


def _error(message: str) -> int:
    # The last net for secrets: a message names paths and may quote input (the trace layer
    # redacts what it read already; see badput.trace.redact).
    stderr_line("error", message)
    return EXIT_BAD_INPUT


def command(args: Sequence[str] | None = None) -> TyperGroup:
    """The click command of `app`, its help showing flags as flags and prose that rewraps.

    With `args` whose first word names one of the app's own commands (not a group), the
    group holds that command alone: the same parsing, help and errors for it, without
    building the click objects of the twenty others (a third of typer's start, which every
    run pays before its work begins). Any other `args` (none, an option, a group, a typo)
    get the whole group, whose usage errors name the commands there are.

    typer's rich help prints a type after every option, `<bool>` after a flag too, as if it
    took a value (`--strict <bool>`); click's plain help prints none. Giving each flag an
    empty metavar makes the type column blank for flags only: `--strict / --no-strict`.
    And it keeps the docstring's line breaks after the first paragraph, so that on an
    80-column terminal each source line wraps on its own (a lone word on a line); the
    paragraphs are joined into one line each (`_rewrappable`), examples left as written.
    """
    from typer.core import TyperGroup

    root = typer.main.get_command(_holding(args[0]) if args else app)
    assert isinstance(root, TyperGroup)  # an app with commands is a group
    _blank_flag_types(root)
    return root


def _holding(word: str) -> typer.Typer:
    """`app` with only its command named `word`, or `app` itself if it has none so named."""
    import copy

    from typer.main import get_command_name

    for info in app.registered_commands:
        assert info.callback is not None  # registered through app.command()
        if (info.name or get_command_name(info.callback.__name__)) == word:
            one = copy.copy(app)
            one.registered_commands = [info]
            one.registered_groups = []
            return one
    return app


def _blank_flag_types(cmd: TyperCommand | TyperGroup) -> None:
    """Empty metavars on the flags of `cmd` and its subcommands, `--help` included."""
    from typer.core import TyperCommand, TyperGroup, TyperOption

    # The help option is made on first use and cached on the command; make it now, from the
    # command's own context settings, so that it is the one later parsing and help use.
    if cmd.help:
        cmd.help = _rewrappable(cmd.help)
    ctx = typer.Context(cmd, **cmd.context_settings)
    for param in [*cmd.params, cmd.get_help_option(ctx)]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    if isinstance(cmd, TyperGroup):
        for sub in cmd.commands.values():
            if isinstance(sub, TyperCommand | TyperGroup):
                _blank_flag_types(sub)


def _rewrappable(help_text: str) -> str:
    """Each prose paragraph of a docstring on one line; indented blocks (examples) kept."""
    import inspect

    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    out = []
    for p in paragraphs:
        lines = p.split("\n")
        block = p.startswith("\b") or any(line[:1].isspace() for line in lines[1:])
        out.append(p if block else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Args:
        argv: arguments without the program name; default `sys.argv[1:]`.
    """
    args = sys.argv[1:] if argv is None else argv
    if argv is None and args[:1] != ["run"]:  # this process is the command's, not a job's
        from badput._memory import keep_freed_memory

        keep_freed_memory()
    code = _run(args)
    if argv is None and args[:1] == ["analyze"]:
        _leave(code)  # returns only where the process must end the usual way
    return code


def _run(args: list[str]) -> int:
    """Run the command `args`; return its exit code."""
    try:
        command(args)(args=args, prog_name="badput", standalone_mode=True)
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


def _leave(code: int) -> None:
    """End `badput analyze`'s own process with `code` now, its output flushed.

    The interpreter's own shutdown (every module torn down, the trace's arrays and objects
    freed one by one) adds 70-100 ms to a run on a 1 GB trace, after the report is written:
    its outputs are closed files and flushed streams, and its exit handlers (Ray's, a
    process pool's, logging's) run here first. Returns (the usual shutdown follows) where a
    thread other than daemons still runs, or the exit handlers cannot be run.
    """
    import atexit
    import os
    import threading

    me = threading.current_thread()
    if any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:
        return
    _flush()
    run_exit_handlers()
    _flush()
    os._exit(code)


def _flush() -> None:
    """Flush stdout and stderr; a closed pipe (nothing more can reach it) is no error."""
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
