"""Entry point for reading traces: file or directory in, Trace out.

The format is told by content: a file that starts with the SQLite header (or is named
`.sqlite`) is an Nsight Systems export (`badput.trace.nsys`), anything else a PyTorch profiler
JSON trace (`badput.trace.kineto`). Nsight Systems report files (`.nsys-rep`, `.qdrep`) are
binary and must be exported first; the error says how.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from badput.errors import TraceFormatError
from badput.trace._files import require_regular_file
from badput.trace._step_ranges import mark_step_ranges
from badput.trace.kineto import read_kineto
from badput.trace.model import Trace
from badput.trace.nsys import (
    NSYS_REPORT_SUFFIXES,
    gpu_processes,
    is_sqlite,
    process_path,
    read_nsys,
    split_process_path,
)
from badput.trace.redact import redact_error, redact_trace

__all__ = ["REPORT_SUFFIX", "TRACE_SUFFIXES", "find_traces", "load_trace"]

#: File names taken as traces when a directory is given.
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
#: badput's own JSON reports (`badput.profiler.on_trace_ready` writes them beside the traces):
#: never taken as traces when a directory is given.
REPORT_SUFFIX = ".badput.json"
# Names that promise an SQLite export: read as one even without the header, to say what is off.
_SQLITE_SUFFIXES = (".sqlite", ".sqlite3")


def find_traces(path: str) -> list[str]:
    """The traces a path names: the file itself, or every trace file in a directory.

    In a directory, badput's own reports (`*.badput.json`) are not traces. An Nsight Systems
    export of several processes with GPU activity is one trace per process
    (`report.sqlite#pid=4242`, see `badput.trace.nsys.read_nsys`).

    Raises:
        TraceFormatError: the path does not exist, is not a regular file or a directory (a
            FIFO, a device: reading one could block forever), names a process with text that
            is not a process id, or a directory holds no trace file.
    """
    if os.path.isdir(path):
        found = sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if name.endswith(TRACE_SUFFIXES)
            and not name.endswith(REPORT_SUFFIX)
            and os.path.isfile(os.path.join(path, name))
        )
        if not found:
            if any(name.endswith(NSYS_REPORT_SUFFIXES) for name in os.listdir(path)):
                raise TraceFormatError(path, _export_hint("the directory's .nsys-rep files"))
            raise TraceFormatError(
                path, "directory holds no trace files (*.json, *.json.gz, *.sqlite)"
            )
        return [p for f in found for p in _processes(f)]
    if not os.path.exists(path):
        file, pid = split_process_path(path)
        if pid is not None:
            require_regular_file(file)  # the file part is what gets opened
            return [path]
        raise TraceFormatError(path, "no such file or directory")
    require_regular_file(path)
    return _processes(path)


def _processes(path: str) -> list[str]:
    """An nsys export with several GPU processes as one path per process; else the path.

    A file that cannot be listed is left whole: reading it says what is wrong.
    """
    if not is_sqlite(path):
        return [path]
    try:
        pids = gpu_processes(path)
    except TraceFormatError:
        return [path]
    return [process_path(path, p) for p in pids] if len(pids) > 1 else [path]


def _export_hint(what: str) -> str:
    return (
        f"{what}: an Nsight Systems report is read through its SQLite export; run "
        "`nsys export --type sqlite --output report.sqlite report.nsys-rep` and pass "
        "report.sqlite"
    )


def load_trace(
    path: str,
    progress: Callable[[int], None] | None = None,
    *,
    step_range: str | None = None,
) -> Trace:
    """Read one trace file: PyTorch profiler JSON (plain or gzipped) or an nsys SQLite export.

    Args:
        path: the file, or one process of an nsys export (`report.sqlite#pid=4242`).
        progress: called with bytes read so far.
        step_range: name of the host ranges (NVTX ranges, `record_function` annotations) that
            delimit steps; they are analysed as `ProfilerStep#N`. Without it, an Nsight Systems
            export uses `ProfilerStep#N` ranges if it has them, else ranges named like
            `train_step`/`step`/`iteration` (see `AUTO_STEP_NAMES`).

    Every string the trace carries (names, labels, GPU names, warnings) and the problem of
    every TraceFormatError is redacted (`badput.trace.redact`): whatever a report shows of a
    trace comes from here, so no secret of the trace's metadata or events reaches an output.

    Raises:
        TraceFormatError: the file cannot be read as a trace, or is not a regular file.
    """
    try:
        trace = _read_trace(path, progress, step_range)
    except TraceFormatError as e:
        clean = redact_error(e)
        if clean is e:
            raise
        raise clean from None
    return redact_trace(trace)


def _read_trace(path: str, progress: Callable[[int], None] | None, step_range: str | None) -> Trace:
    """`load_trace` before redaction."""
    file, pid = split_process_path(path)
    # Before any reader opens it: a FIFO or a device would block the open or the read.
    require_regular_file(file)
    if file.endswith(NSYS_REPORT_SUFFIXES) and not is_sqlite(file):
        raise TraceFormatError(path, _export_hint("an Nsight Systems report file"))
    if pid is not None or is_sqlite(file) or file.endswith(_SQLITE_SUFFIXES):
        trace = read_nsys(path, progress=progress)
        return mark_step_ranges(trace, step_range, auto=True, what="NVTX ranges")
    trace = read_kineto(path, progress=progress)
    if step_range is None:
        return trace
    return mark_step_ranges(trace, step_range, auto=False, what="annotations")
