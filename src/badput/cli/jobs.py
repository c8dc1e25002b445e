"""Running the per-trace work of `analyze` and `report`: executor choice, progress, failures.

Both commands analyse each trace in its own task (a local process pool or Ray, see
`badput.scale`), then diagnose the job on the driver; this module holds that shared part.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from badput.cli.common import TRACE_INPUTS, stderr_line
from badput.cli.progress import progress
from badput.errors import BadputError, UsageError
from badput.report.units import plural

if TYPE_CHECKING:
    from badput.diagnose import JobResult

__all__ = [
    "AddressOption",
    "ClassifyOption",
    "Executor",
    "ExecutorOption",
    "JobsOption",
    "PathsArgument",
    "StepRangeOption",
    "StrictOption",
    "TopOption",
    "WindowOption",
    "run_job",
    "warn",
]


class Executor(StrEnum):
    """Where per-rank work runs."""

    LOCAL = "local"
    RAY = "ray"


# The options `analyze` and `report` share, declared once.
PathsArgument = Annotated[
    list[str],
    typer.Argument(
        help=f"Traces: {TRACE_INPUTS}; or directories of them (one trace per rank: other "
        "files there are left out, with a note naming them).",
        metavar="TRACE",
    ),
]
WindowOption = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="Analyse only steps:N or steps:A-B (ProfilerStep numbers) or ns:T0-T1 / us:T0-T1.",
    ),
]
StepRangeOption = Annotated[
    str | None,
    typer.Option(
        "--step-range",
        help="Steps are the NVTX ranges (or annotations) named NAME, or NAME and a number "
        "('train_step 7'); default: ProfilerStep#N.",
        metavar="NAME",
    ),
]
TopOption = Annotated[int, typer.Option("--top", help="Kernels to list per GPU (0: all).")]
ClassifyOption = Annotated[
    str | None,
    typer.Option(
        "--classify",
        help='TOML file of kernel-class overrides: \'"regex" = "category"\' or '
        '\'"regex" = "kind"\' lines (see `badput explain classify`).',
        metavar="FILE",
    ),
]
ExecutorOption = Annotated[
    Executor, typer.Option("--executor", help="Run per-rank work on local processes or on Ray.")
]
JobsOption = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        help="Traces analysed at once: local worker processes (default: min(CPUs, traces)), "
        "or Ray tasks in flight (default: all, queued by Ray). With one trace: threads that "
        "read and analyse it (default: the CPUs, at most 8); the result is the same for any "
        "number.",
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster address (default: start a local Ray)."),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="Exit 2 when any trace cannot be analysed.")
]


def run_job(
    paths: Sequence[str],
    *,
    window: str | None,
    top: int,
    executor: Executor = Executor.LOCAL,
    jobs: int | None = None,
    address: str | None = None,
    step_range: str | None = None,
    classify: str | None = None,
) -> JobResult:
    """Analyse every trace under `paths` and diagnose the jobs; failed traces become warnings.

    Traces of several jobs (`badput.diagnose.jobs`) give one warning line saying so.

    Raises:
        UsageError: bad options (checked before any work).
        BadputError: no trace could be analysed.
    """
    # The analyses are imported where needed: for one trace read on two threads or more,
    # `analyze_path` imports them beside the scan of its pieces.
    from badput.scale import LocalExecutor, RayExecutor, analyze_path

    if top < 0:
        raise UsageError("--top must be >= 0")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    if step_range is not None and not step_range.strip():
        raise UsageError("--step-range needs a range name")
    if window is not None:
        from badput.analysis import WindowSpec

        WindowSpec.parse(window)  # a bad --window is a usage error, not N failed ranks
    rules = None
    if classify is not None:
        from badput.analysis.classify import load_class_rules

        rules = load_class_rules(classify)
    if executor is Executor.LOCAL and address is not None:
        raise UsageError("--address needs --executor ray")
    files = _find(paths)
    if executor is Executor.RAY:
        runner: LocalExecutor | RayExecutor = RayExecutor(address=address, max_in_flight=jobs)
        where = " on Ray"
    else:
        default = 1 if len(files) == 1 else min(os.cpu_count() or 1, len(files))
        runner = LocalExecutor(jobs if jobs is not None else default)
        where = ""
    if len(files) == 1 and isinstance(runner, LocalExecutor):
        # One trace, in this process: a spinner naming it and its size while it is read.
        with progress(_reading(files[0])) as advance:
            # Its pieces are scanned by --jobs threads (default: the CPUs): same result.
            item = (files[0], window, top, _counter(advance), step_range, rules, jobs)
            outcomes = list(runner.map(analyze_path, [item]))
    else:
        # One thread per trace: the traces run side by side, each task on one CPU.
        items = [(path, window, top, None, step_range, rules, 1) for path in files]
        what = f"analysing {plural(len(files), 'trace')}{where}"
        with progress(what, total=len(files)) as advance:
            outcomes = list(runner.map(analyze_path, items, _counter(advance)))
    from badput.diagnose import diagnose_job

    job = diagnose_job(outcomes)
    failed = job.failed
    if len(failed) == len(outcomes):
        if len(failed) == 1:
            raise BadputError(f"{failed[0].path}: {failed[0].error}")
        for o in failed:
            warn(f"{o.path}: {o.error}")
        raise BadputError(f"none of the {plural(len(failed), 'trace')} could be analysed")
    for o in failed:
        warn(f"{o.path}: {o.error} (left out; {len(job.analysed)} of {len(outcomes)} analysed)")
    if len(job.jobs) > 1:
        warn(
            f"the {plural(len(job.analysed), 'trace')} are {len(job.jobs)} jobs; each is "
            "reported on its own (the report's notes say why)"
        )
    return job


def _find(paths: Sequence[str]) -> list[str]:
    """The traces under `paths`; one note per directory naming the files left out there."""
    from badput.trace.load import find_trace_files, skipped_text

    files: list[str] = []
    for p in paths:
        found = find_trace_files(p)
        files += found.traces
        if found.skipped:
            n = len(found.skipped)
            that = "that is not a trace" if n == 1 else "that are not traces"
            stderr_line(
                "note",
                f"{p}: left out {plural(n, 'file')} {that}: {skipped_text(found.skipped)}",
            )
    return files


def _reading(path: str) -> str:
    """`reading and analysing NAME (SIZE)`: what the spinner of a one-trace run says.

    `path` may name one process of an nsys export (`report.sqlite#pid=4242`): the size is
    that of the file. A size that cannot be read is left out; reading the trace says why.
    """
    from badput.report.units import format_bytes
    from badput.trace.nsys import split_process_path

    file, _ = split_process_path(path)
    try:
        size = f" ({format_bytes(os.path.getsize(file))})"
    except OSError:
        size = ""
    return f"reading and analysing {os.path.basename(path)}{size}"


def _counter(advance: Callable[[int], None]) -> Callable[[int], None]:
    """A callback given a running total (bytes read, tasks done) that advances by the change."""
    last = 0

    def update(total: int) -> None:
        nonlocal last
        if total > last:
            advance(total - last)
            last = total

    return update


def warn(message: str) -> None:
    """One warning line on stderr (`badput.cli.common.stderr_line`)."""
    stderr_line("warning", message)
