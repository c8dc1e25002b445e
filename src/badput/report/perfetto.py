"""A copy of a trace with badput's tracks added, for Perfetto UI and chrome://tracing.

Per GPU, one added process ("badput GPU N") holds a thread per track: the idle intervals by
cause, exposed communication, exposed memcpy/memset, and the findings as instant events at
the window start. Interval times are written on the trace's own clock (relative to
`baseTimeNanoseconds` when the trace has one), as exact decimal microseconds, so each track's
durations add up to the analysis numbers to the nanosecond.

Every original event is kept as its own JSON text: the document is split into raw values
(`msgspec.Raw`), never decoded into Python objects and re-encoded.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from badput.errors import BadputError, TraceFormatError
from badput.report.json_report import us

if TYPE_CHECKING:
    from badput.analysis.intervals import IntervalSet
    from badput.analysis.results import DeviceAnalysis, Timeline
    from badput.diagnose.findings import Finding

__all__ = [
    "TRACKS",
    "AnnotateResult",
    "annotate_trace",
    "annotation_events",
    "badput_pid",
    "write_annotated",
]

# (thread id, track name, Timeline attribute). Thread 0 holds the findings.
TRACKS: tuple[tuple[int, str, str], ...] = (
    (1, "idle: runtime", "idle_runtime"),
    (2, "idle: dataloader", "idle_dataloader"),
    (3, "idle: cpu", "idle_cpu"),
    (4, "idle: other", "idle_other"),
    (5, "exposed communication", "exposed_communication"),
    (6, "exposed memcpy/memset", "exposed_memory"),
)
FINDINGS_TID = 0
FINDINGS_TRACK = "findings"

# Added processes get pids far above Linux's pid_max (2**22), below 2**31 so that readers
# holding pids as int32 keep them.
_PID_BASE = 2**31 - 2**16
_CHUNK_EVENTS = 8192  # raw events joined per write


@dataclass(frozen=True)
class AnnotateResult:
    """What `annotate_trace` wrote.

    Attributes:
        out: the file written.
        original_events: events copied from the input.
        added_events: events added (metadata, intervals, findings).
        devices: GPUs that got tracks.
        findings: findings written as instant events.
    """

    out: str
    original_events: int
    added_events: int
    devices: int
    findings: int


def badput_pid(device: int, used_pids: Sequence[int] | np.ndarray = ()) -> int:
    """The pid of a GPU's added process: clear of every pid in `used_pids`.

    Args:
        device: GPU index (>= 0).
        used_pids: pids the trace already uses.
    """
    base = _PID_BASE
    used = set(np.asarray(used_pids, dtype=np.int64).tolist())
    while any(base + d in used for d in range(0, max(device, 0) + 64)):
        base -= 2**16
    return base + device


def _interval_events(pid: int, tid: int, name: str, s: IntervalSet) -> Iterator[dict[str, Any]]:
    for start, end in zip(s.starts.tolist(), s.ends.tolist(), strict=True):
        yield {
            "ph": "X",
            "cat": "badput",
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": us(start),
            "dur": us(end - start),
        }


def annotation_events(
    analyses: Sequence[DeviceAnalysis],
    findings: Sequence[Sequence[Finding]],
    used_pids: Sequence[int] | np.ndarray = (),
) -> list[dict[str, Any]]:
    """The events to add to a trace: one process per GPU, one thread per track.

    Times (`ts`, `dur`) are exact microsecond texts (`msgspec.Raw`) on the trace's own clock.

    Args:
        analyses: per-GPU analyses of the trace, with their timelines.
        findings: each analysis's findings, in the same order.
        used_pids: pids the trace already uses (the added ones avoid them).

    Returns:
        Chrome trace events; none for a GPU without activity or without a timeline.
    """
    events: list[dict[str, Any]] = []
    for d, found in zip(analyses, findings, strict=True):
        timeline: Timeline | None = d.timeline
        if d.device < 0 or timeline is None:
            continue
        pid = badput_pid(d.device, used_pids)
        label = f"badput GPU {d.device}" + (f" (rank {d.rank})" if d.rank is not None else "")
        meta: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
             "args": {"sort_index": pid}},
        ]  # fmt: skip
        for tid, track in [(FINDINGS_TID, FINDINGS_TRACK)] + [(t, n) for t, n, _ in TRACKS]:
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                         "args": {"name": track}})  # fmt: skip
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})  # fmt: skip
        events += meta
        for tid, track, attr in TRACKS:
            events += _interval_events(pid, tid, track, getattr(timeline, attr))
        for f in found:
            events.append(
                {
                    "ph": "i",
                    "s": "p",
                    "cat": "badput",
                    "name": f"{f.id}: {f.title}",
                    "pid": pid,
                    "tid": FINDINGS_TID,
                    "ts": us(d.window_start_ns),
                    "args": {
                        "id": f.id,
                        "severity": f.severity,
                        "savings_us": us(round(f.savings_ns)),
                        "title": f.title,
                    },
                }
            )
    return events


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise TraceFormatError(path, f"not a valid gzip file ({e})") from None
    return data


def write_annotated(source: str, out: str, added: Sequence[dict[str, Any]]) -> int:
    """Copy the trace `source` to `out` with `added` appended to its `traceEvents`.

    The original events and every other top-level field keep their JSON text. `out` is
    gzipped when its name ends in `.gz`.

    Args:
        source: the trace file (JSON, plain or gzipped).
        out: the file to write.
        added: events to append.

    Returns:
        The number of original events copied.

    Raises:
        TraceFormatError: `source` is not a JSON trace.
        BadputError: `out` cannot be written.
    """
    data = _read_bytes(source)
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
        if isinstance(top, dict):
            raw_events = top.get("traceEvents")
            if raw_events is None:
                raise TraceFormatError(source, "no traceEvents: not a profiler trace")
            events = msgspec.json.decode(raw_events, type=list[msgspec.Raw])
        else:
            events = top
    except msgspec.DecodeError as e:
        raise TraceFormatError(source, f"not a JSON trace ({e})") from None
    added_text = [msgspec.json.encode(e) for e in added]
    try:
        with _open_out(out) as f:
            if isinstance(top, dict):
                f.write(b"{")
                for i, (key, value) in enumerate(top.items()):
                    f.write((b"," if i else b"") + msgspec.json.encode(key) + b":")
                    if key == "traceEvents":
                        _write_events(f, events, added_text)
                    else:
                        f.write(value)
                f.write(b"}\n")
            else:
                _write_events(f, events, added_text)
                f.write(b"\n")
    except OSError as e:
        raise BadputError(f"{out}: cannot be written ({e.strerror or e})") from None
    return len(events)


def _open_out(out: str) -> gzip.GzipFile | io.BufferedWriter:
    if out.endswith(".gz"):
        return gzip.open(out, "wb", compresslevel=6)
    return open(out, "wb")


def _write_events(
    f: gzip.GzipFile | io.BufferedWriter,
    events: Sequence[msgspec.Raw],
    added: Sequence[bytes],
) -> None:
    f.write(b"[")
    first = True
    for lo in range(0, len(events), _CHUNK_EVENTS):
        chunk = events[lo : lo + _CHUNK_EVENTS]
        f.write((b"" if first else b",") + b",".join(chunk))
        first = False
    for lo in range(0, len(added), _CHUNK_EVENTS):
        f.write((b"" if first else b",") + b",".join(added[lo : lo + _CHUNK_EVENTS]))
        first = False
    f.write(b"]")


def annotate_trace(source: str, out: str, window: str | None = None) -> AnnotateResult:
    """Analyse and diagnose a trace, then write a copy of it with badput's tracks added.

    Args:
        source: the trace file.
        out: the annotated copy (`.gz` name: gzipped).
        window: `--window` text (`steps:A-B`, `ns:T0-T1`, `us:T0-T1`); default the steps' hull.

    Raises:
        TraceFormatError: `source` cannot be read as a trace.
        UsageError: a bad `window`, or `out` is the source itself.
        BadputError: `out` cannot be written.

    Example:
        >>> annotate_trace("worker0.pt.trace.json.gz", "annotated.json.gz")  # doctest: +SKIP
        AnnotateResult(out='annotated.json.gz', original_events=75718, ...)
    """
    from badput.analysis import WindowSpec, analyze_trace
    from badput.diagnose import diagnose_device
    from badput.errors import UsageError
    from badput.trace import load_trace

    spec = WindowSpec.parse(window) if window is not None else None
    if os.path.exists(out) and os.path.exists(source) and os.path.samefile(source, out):
        raise UsageError(f"{out}: --out is the input trace; write the copy to another file")
    trace = load_trace(source)
    analyses = analyze_trace(trace, spec)
    findings = [diagnose_device(trace, d) for d in analyses]
    added = annotation_events(analyses, findings, trace.pid)
    del trace
    copied = write_annotated(source, out, added)
    return AnnotateResult(
        out=out,
        original_events=copied,
        added_events=len(added),
        devices=sum(1 for d in analyses if d.device >= 0 and d.timeline is not None),
        findings=sum(len(f) for d, f in zip(analyses, findings, strict=True) if d.device >= 0),
    )
