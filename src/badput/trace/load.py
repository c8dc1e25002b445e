"""Entry point for reading traces: file or directory in, Trace out.

The format is told by content: a file that starts with the SQLite header (or is named
`.sqlite`) is an Nsight Systems export (`badput.trace.nsys`), anything else a PyTorch profiler
JSON trace (`badput.trace.kineto`). Nsight Systems report files (`.nsys-rep`, `.qdrep`) are
binary and must be exported first; the error says how.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from badput._memory import give_back_free_memory
from badput.errors import TraceFormatError
from badput.trace._files import is_regular_file, require_regular_file
from badput.trace._mapped import default_read_jobs
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

__all__ = [
    "REPORT_SUFFIX",
    "TRACE_SUFFIXES",
    "FoundTraces",
    "find_trace_files",
    "find_traces",
    "load_trace",
    "skipped_text",
]

#: File names taken as traces when a directory is given.
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
#: badput's own JSON reports (`badput.profiler.on_trace_ready` writes them beside the traces):
#: never taken as traces when a directory is given.
REPORT_SUFFIX = ".badput.json"
# Names that promise an SQLite export: read as one even without the header, to say what is off.
_SQLITE_SUFFIXES = (".sqlite", ".sqlite3")


@dataclass(frozen=True)
class FoundTraces:
    """The traces a path names, and the files of a directory left out as no trace.

    Attributes:
        traces: trace paths, sorted (one per process of a multi-process nsys export).
        skipped: (file name, why) of each file of the directory that is not read as a trace:
            another extension, badput's own report, or JSON without `traceEvents`.
    """

    traces: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)


def find_traces(path: str) -> list[str]:
    """The traces a path names: the file itself, or every trace file in a directory.

    In a directory, badput's own reports (`*.badput.json`), files of other extensions and
    JSON files that are no profiler trace (no `traceEvents`: a config, a results file) are
    not traces (`find_trace_files` says which were left out). An Nsight Systems export of
    several processes with GPU activity is one trace per process (`report.sqlite#pid=4242`,
    see `badput.trace.nsys.read_nsys`).

    Raises:
        TraceFormatError: the path does not exist, is not a regular file or a directory (a
            FIFO, a device: reading one could block forever), names a process with text that
            is not a process id, or a directory holds no trace file.
    """
    return find_trace_files(path).traces


def find_trace_files(path: str) -> FoundTraces:
    """`find_traces`, with the files of a directory that were left out and why.

    Telling a JSON file that is no trace costs a bounded read of its start (`_not_a_trace`),
    never the whole file. A file that cannot be told (unreadable, corrupt, truncated) is
    kept as a trace, so that reading it reports the problem as a failed trace.

    Raises:
        TraceFormatError: as `find_traces`.
    """
    if os.path.isdir(path):
        found: list[str] = []
        skipped: list[tuple[str, str]] = []
        names = sorted(os.listdir(path))
        for name in names:
            full = os.path.join(path, name)
            if not os.path.isfile(full):
                continue  # subdirectories are not searched; a FIFO is never opened
            why = _left_out(full, name)
            if why is None:
                found.append(full)
            else:
                skipped.append((name, why))
        if not found:
            if any(name.endswith(NSYS_REPORT_SUFFIXES) for name in names):
                raise TraceFormatError(path, _export_hint("the directory's .nsys-rep files"))
            problem = "directory holds no trace files (*.json, *.json.gz, *.sqlite)"
            if skipped:
                problem += "; left out: " + skipped_text(skipped)
            raise TraceFormatError(path, problem)
        return FoundTraces([p for f in found for p in _processes(f)], skipped)
    if not os.path.exists(path):
        file, pid = split_process_path(path)
        if pid is not None:
            require_regular_file(file)  # the file part is what gets opened
            return FoundTraces([path])
        raise TraceFormatError(path, "no such file or directory")
    require_regular_file(path)
    return FoundTraces(_processes(path))


#: Files named in a "left out" message before "and N more".
_SKIPPED_NAMED = 10


def skipped_text(skipped: list[tuple[str, str]]) -> str:
    """The files `find_trace_files` left out, in words: at most ten named, then a count.

    Example: `a.yaml (not a trace file name), b.json (JSON without traceEvents), and 3 more`.
    """
    text = ", ".join(f"{name} ({why})" for name, why in skipped[:_SKIPPED_NAMED])
    if len(skipped) > _SKIPPED_NAMED:
        text += f", and {len(skipped) - _SKIPPED_NAMED} more"
    return text


def _left_out(path: str, name: str) -> str | None:
    """Why a file of a directory is not taken as a trace; None when it is one."""
    if name.endswith(REPORT_SUFFIX):
        return "a badput report"
    if name.endswith(NSYS_REPORT_SUFFIXES):
        return "an Nsight Systems report: pass its `nsys export --type sqlite` export"
    if not name.endswith(TRACE_SUFFIXES):
        return "not a trace file name"
    if name.endswith(".sqlite"):
        return None
    return _not_a_trace(path)


#: Bytes of a JSON file's (decompressed) start read to tell whether it is a trace, at most.
#: Kineto writes `traceEvents` after a few kilobytes of metadata; a file whose start has no
#: `traceEvents` and that ends within this many bytes is decoded whole to be sure.
_PEEK_BYTES = 1 << 20
_PEEK_CHUNK = 64 << 10


def _not_a_trace(path: str) -> str | None:
    """Why a JSON file is surely no profiler trace; None when it is, or may be, one.

    Only a well-formed JSON document that ends within `_PEEK_BYTES` and holds no
    `traceEvents` key (a config, a results file) is surely no trace. A bare array (the Chrome
    trace format's other form), a file whose start holds `"traceEvents"`, a big file, and one
    that cannot be read or decoded (corrupt, truncated) may be a trace: reading it decides,
    and a corrupt one is reported as a failed trace.
    """
    if not is_regular_file(path):
        return None
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
            head = bytearray()
            while len(head) <= _PEEK_BYTES:
                chunk = stream.read(_PEEK_CHUNK)
                if not chunk:
                    break
                head += chunk
                if head.lstrip()[:1] == b"[" or b'"traceEvents"' in head:
                    return None
            else:
                return None  # big and no traceEvents near its start: let the reader say
    except (OSError, EOFError, zlib.error):
        return None
    try:
        document = msgspec.json.decode(bytes(head))
    except msgspec.DecodeError:
        return None  # not well-formed: a corrupt trace, reported as failed
    if isinstance(document, dict):
        return "JSON without traceEvents"
    return "JSON that is no trace"


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
    jobs: int | None = None,
) -> Trace:
    """Read one trace file: PyTorch profiler JSON (plain or gzipped) or an nsys SQLite export.

    Args:
        path: the file, or one process of an nsys export (`report.sqlite#pid=4242`).
        progress: called with bytes read so far.
        step_range: name of the host ranges (NVTX ranges, `record_function` annotations) that
            delimit steps; they are analysed as `ProfilerStep#N`. Without it, an Nsight Systems
            export uses `ProfilerStep#N` ranges if it has them, else ranges named like
            `train_step`/`step`/`iteration` (see `AUTO_STEP_NAMES`).
        jobs: threads that scan pieces of a PyTorch profiler trace at once (default: the
            CPUs this process may use, at most 8); the trace is the same for any number.

    Every string the trace carries (names, labels, GPU names, warnings) and the problem of
    every TraceFormatError is redacted (`badput.trace.redact`): whatever a report shows of a
    trace comes from here, so no secret of the trace's metadata or events reaches an output.

    Raises:
        TraceFormatError: the file cannot be read as a trace, or is not a regular file.
    """
    try:
        trace = _read_trace(path, progress, step_range, jobs)
    except TraceFormatError as e:
        clean = redact_error(e)
        if clean is e:
            raise
        raise clean from None
    finally:
        give_back_free_memory()  # the pieces' memory, freed while reading
    return redact_trace(trace)


def _read_trace(
    path: str,
    progress: Callable[[int], None] | None,
    step_range: str | None,
    jobs: int | None = None,
) -> Trace:
    """`load_trace` before redaction."""
    file, pid = split_process_path(path)
    # Before any reader opens it: a FIFO or a device would block the open or the read.
    require_regular_file(file)
    if file.endswith(NSYS_REPORT_SUFFIXES) and not is_sqlite(file):
        raise TraceFormatError(path, _export_hint("an Nsight Systems report file"))
    if pid is not None or is_sqlite(file) or file.endswith(_SQLITE_SUFFIXES):
        trace = read_nsys(path, progress=progress)
        return mark_step_ranges(trace, step_range, auto=True, what="NVTX ranges")
    trace = read_kineto(path, progress=progress, jobs=default_read_jobs() if jobs is None else jobs)
    if step_range is None:
        return trace
    return mark_step_ranges(trace, step_range, auto=False, what="annotations")
