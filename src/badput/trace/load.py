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
from badput.trace._step_ranges import mark_step_ranges
from badput.trace.kineto import read_kineto
from badput.trace.model import Trace
from badput.trace.nsys import NSYS_REPORT_SUFFIXES, is_sqlite, read_nsys

__all__ = ["REPORT_SUFFIX", "TRACE_SUFFIXES", "find_traces", "load_trace"]

#: File names taken as traces when a directory is given.
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
#: badput's own JSON reports (`badput.profiler.on_trace_ready` writes them beside the traces):
#: never taken as traces when a directory is given.
REPORT_SUFFIX = ".badput.json"
# Names that promise an SQLite export: read as one even without the header, to say what is off.
_SQLITE_SUFFIXES = (".sqlite", ".sqlite3")


def find_traces(path: str) -> list[str]:
    """The trace files a path names: the file itself, or every trace file in a directory.

    In a directory, badput's own reports (`*.badput.json`) are not traces.

    Raises:
        TraceFormatError: the path does not exist, or a directory holds no trace file.
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
        return found
    if not os.path.exists(path):
        raise TraceFormatError(path, "no such file or directory")
    return [path]


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
        path: the file.
        progress: called with bytes read so far.
        step_range: name of the host ranges (NVTX ranges, `record_function` annotations) that
            delimit steps; they are analysed as `ProfilerStep#N`. Without it, an Nsight Systems
            export uses `ProfilerStep#N` ranges if it has them, else ranges named like
            `train_step`/`step`/`iteration` (see `AUTO_STEP_NAMES`).

    Raises:
        TraceFormatError: the file cannot be read as a trace.
    """
    if path.endswith(NSYS_REPORT_SUFFIXES) and not is_sqlite(path):
        raise TraceFormatError(path, _export_hint("an Nsight Systems report file"))
    if is_sqlite(path) or path.endswith(_SQLITE_SUFFIXES):
        trace = read_nsys(path, progress=progress)
        return mark_step_ranges(trace, step_range, auto=True, what="NVTX ranges")
    trace = read_kineto(path, progress=progress)
    if step_range is None:
        return trace
    return mark_step_ranges(trace, step_range, auto=False, what="annotations")
