"""Running the per-trace work of `analyze` and `report`: executor choice, progress, failures.

Both commands analyse each trace in its own task (a local process pool or Ray, see
`badput.scale`), then diagnose the job on the driver; this module holds that shared part.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from badput.cli.common import stderr_line
from badput.errors import BadputError, UsageError

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

# Traces at least this large (uncompressed bytes) get a progress bar on a terminal.
_PROGRESS_MIN_BYTES = 64 << 20


class Executor(StrEnum):
    """Where per-rank work runs."""

    LOCAL = "local"
    RAY = "ray"


# The options `analyze` and `report` share, declared once.
PathsArgument = Annotated[
    list[str], typer.Argument(help="Trace files (.json, .json.gz) or directories of them.")
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
        help="Local worker processes (default: 1 for one trace, else min(CPUs, traces)).",
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
    from badput.analysis import WindowSpec
    from badput.analysis.classify import load_class_rules
    from badput.diagnose import diagnose_job
    from badput.scale import LocalExecutor, RayExecutor, analyze_path
    from badput.trace import find_traces

    if top < 0:
        raise UsageError("--top must be >= 0")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    if step_range is not None and not step_range.strip():
        raise UsageError("--step-range needs a range name")
    if window is not None:
        WindowSpec.parse(window)  # a bad --window is a usage error, not N failed ranks
    rules = load_class_rules(classify) if classify is not None else None
    if executor is Executor.LOCAL and address is not None:
        raise UsageError("--address needs --executor ray")
    if executor is Executor.RAY and jobs is not None:
        raise UsageError("--jobs is for --executor local; Ray uses the cluster's CPUs")
    files = [f for p in paths for f in find_traces(p)]
    err = Console(stderr=True)
    if executor is Executor.RAY:
        runner: LocalExecutor | RayExecutor = RayExecutor(address=address)
    else:
        default = 1 if len(files) == 1 else min(os.cpu_count() or 1, len(files))
        runner = LocalExecutor(jobs if jobs is not None else default)
    if len(files) == 1 and isinstance(runner, LocalExecutor):
        # One trace, in this process: a progress bar over its bytes when it is big.
        with _byte_progress(err, files[0]) as read:
            item = (files[0], window, top, read, step_range, rules)
            outcomes = list(runner.map(analyze_path, [item]))
    else:
        items = [(path, window, top, None, step_range, rules) for path in files]
        with _rank_progress(err, len(files)) as progress:
            outcomes = list(runner.map(analyze_path, items, progress))
    job = diagnose_job(outcomes)
    failed = job.failed
    if len(failed) == len(outcomes):
        if len(failed) == 1:
            raise BadputError(f"{failed[0].path}: {failed[0].error}")
        for o in failed:
            warn(f"{o.path}: {o.error}")
        raise BadputError(f"none of the {len(failed)} traces could be analysed")
    for o in failed:
        warn(f"{o.path}: {o.error} (left out; {len(job.analysed)} of {len(outcomes)} analysed)")
    if len(job.jobs) > 1:
        warn(
            f"the {len(job.analysed)} traces are {len(job.jobs)} jobs; each is reported on its "
            "own (the report's notes say why)"
        )
    return job


@contextlib.contextmanager
def _rank_progress(console: Console, total: int) -> Iterator[Callable[[int], None] | None]:
    """A progress bar over ranks on an interactive terminal (stderr); None elsewhere."""
    if not console.is_terminal or total < 2:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("analysing ranks"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("ranks", total=total)
        yield lambda done: progress.update(task, completed=done)


@contextlib.contextmanager
def _byte_progress(console: Console, path: str) -> Iterator[Callable[[int], None] | None]:
    """A progress bar over a big trace's bytes on an interactive terminal; None elsewhere.

    `path` may name one process of an nsys export (`report.sqlite#pid=4242`): the size is that
    of the file part. A size that cannot be read means no bar; reading the trace says why.
    """
    from badput.trace.nsys import split_process_path

    file, _ = split_process_path(path)
    try:
        size = os.path.getsize(file)
    except OSError:
        yield None
        return
    gz = file.endswith(".gz")
    if not console.is_terminal or (size < _PROGRESS_MIN_BYTES and not (gz and size > 8 << 20)):
        yield None
        return
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
        task = progress.add_task(os.path.basename(file), total=None if gz else size)
        yield lambda n: progress.update(task, completed=n)


def warn(message: str) -> None:
    """One warning line on stderr (`badput.cli.common.stderr_line`)."""
    stderr_line("warning", message)
