"""A copy of a trace with badput's tracks added, for Perfetto UI and chrome://tracing.

Per GPU, one added process ("badput GPU N") holds a thread per track: the idle intervals by
cause, exposed communication, exposed memcpy/memset, the findings as instant events at the
window start, and the critical path (`badput.analysis.critical_path`): one slice per edge of
the path that carries weight, named by its breakdown part and the event it leads to, with
flow arrows drawn between the original events for the path's hops between host threads and
streams (launches, launch delays, syncs, event waits). Interval times are written on the
trace's own clock (relative to `baseTimeNanoseconds` when the trace has one), as exact
decimal microseconds, so each track's durations add up to the analysis numbers to the
nanosecond (the critical-path slices to the path's length).

Every original event is kept as its own JSON text: the document is streamed in pieces and
split into raw values (`msgspec.Raw`), never decoded into Python objects and re-encoded, and
never held whole (`write_annotated`). Secrets do not reach the copy: the top-level metadata
(`metadata`, `envs`, `traceName`, `distributedInfo`, ...) is redacted under its keys and the
events lose the credential formats in them (`badput.trace.redact`).
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
import numpy.typing as npt

from badput.analysis.critical_path import BREAKDOWN_KEYS, EDGE_TYPES
from badput.errors import BadputError, TraceFormatError
from badput.report.json_report import us
from badput.trace._limits import check_held, held_bytes_limit, nesting_error
from badput.trace._mapped import EVENTS_KEY
from badput.trace._squeeze import StringState
from badput.trace.kineto import _SQUEEZE_AFTER, CHUNK_BYTES, _json_problem, _not_json, _Source
from badput.trace.kineto import _open as _open_trace
from badput.trace.redact import redact_events, redact_json, redact_text

if TYPE_CHECKING:
    from badput.analysis.critical_path import CriticalPath
    from badput.analysis.intervals import IntervalSet
    from badput.analysis.results import DeviceAnalysis, Timeline
    from badput.diagnose.findings import Finding
    from badput.trace.model import Trace

__all__ = [
    "CRITICAL_PATH_TID",
    "CRITICAL_PATH_TRACK",
    "MAX_PATH_FLOWS",
    "MAX_PATH_SLICES",
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
#: Thread of the critical-path track (after the interval tracks).
CRITICAL_PATH_TID = 7
CRITICAL_PATH_TRACK = "critical path"
#: Most path edges drawn as slices per GPU (the heaviest are kept), and most flow arrows.
MAX_PATH_SLICES = 200_000
MAX_PATH_FLOWS = 100_000
_FLOW_CAT = "badput-critical-path"
_FLOW_NAME = "critical path"
# Path edges drawn as arrows between the original events: the hops between chains.
_FLOW_TYPES = tuple(EDGE_TYPES.index(t) for t in ("launch", "launch_delay", "sync", "event_wait"))

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


I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def _path_slices(
    trace: Trace, d: DeviceAnalysis, cp: CriticalPath, pid: int
) -> list[dict[str, Any]]:
    """One slice per weighted path edge, from its source node's time for its weight.

    At most the `MAX_PATH_SLICES` heaviest, in path order; a note instant says how many
    were left out.
    """
    e = cp.edges
    keep = np.flatnonzero(e.weight_ns > 0)
    left_out = max(keep.shape[0] - MAX_PATH_SLICES, 0)
    if left_out:
        heaviest = np.argsort(-e.weight_ns[keep], kind="stable")[:MAX_PATH_SLICES]
        keep = np.sort(keep[heaviest])
    dst, etype, weight = e.dst_row[keep], e.edge_type[keep], e.weight_ns[keep]
    start = e.src_ns[keep]
    # The host time before a thread's first node is an edge from that node to itself: it
    # ends at the node.
    lead = (e.src_row[keep] == dst) & (e.src_start[keep] == e.dst_start[keep])
    start = np.where(lead, start - weight, start)
    types = [EDGE_TYPES[t] for t in etype.tolist()]
    parts = [BREAKDOWN_KEYS[k] for k in e.part[keep].tolist()]
    out: list[dict[str, Any]] = []
    for t0, w, row, kind, part in zip(
        start.tolist(), weight.tolist(), dst.tolist(), types, parts, strict=True
    ):
        name = trace.names[int(trace.name_id[row])]
        out.append(
            {
                "ph": "X",
                "cat": "badput",
                "name": f"{part}: {name}",
                "pid": pid,
                "tid": CRITICAL_PATH_TID,
                "ts": us(t0),
                "dur": us(w),
                "args": {"edge": kind, "weight_us": us(w), "event": name},
            }
        )
    if left_out:
        out.append(_path_note(d, pid, f"{left_out:,} lighter path edges are not drawn", left_out))
    return out


def _path_note(d: DeviceAnalysis, pid: int, text: str, left_out: int) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "t",
        "cat": "badput",
        "name": f"critical path: {text}",
        "pid": pid,
        "tid": CRITICAL_PATH_TID,
        "ts": us(d.window_start_ns),
        "args": {"left_out": left_out, "note": text},
    }


def _original_id(trace: Trace, value: int) -> int | str:
    """A pid/tid as the trace wrote it: a number, or the label behind a negative id."""
    if value <= -2 and -(value + 2) < len(trace.labels):
        return trace.labels[-(value + 2)]
    return value


def _inside_times(trace: Trace, rows: I64, starts: Bools) -> I64:
    """Times that bind to the events' slices.

    An event's start, or 1 ns before its end (never before its start).
    """
    ts = trace.ts_ns[rows]
    return np.where(starts, ts, np.maximum(ts + trace.dur_ns[rows] - 1, ts))


def _path_flows(
    trace: Trace, d: DeviceAnalysis, cp: CriticalPath, pid: int, first_id: int
) -> list[dict[str, Any]]:
    """Flow arrows between the original events for the path's hops between chains.

    The launch, launch delay, sync and event wait edges: at most `MAX_PATH_FLOWS` (the
    first in path order; a note instant says how many were left out), ids from `first_id`.
    """
    e = cp.edges
    hops = np.flatnonzero(np.isin(e.edge_type, np.asarray(_FLOW_TYPES, dtype=np.int8)))
    left_out = max(hops.shape[0] - MAX_PATH_FLOWS, 0)
    hops = hops[:MAX_PATH_FLOWS]
    out: list[dict[str, Any]] = []
    ends = []
    for rows, starts, ph in ((e.src_row, e.src_start, "s"), (e.dst_row, e.dst_start, "f")):
        r = rows[hops]
        ends.append((r.tolist(), _inside_times(trace, r, starts[hops]).tolist(), ph))
    for k in range(hops.shape[0]):
        for rows_l, times, ph in ends:
            row = rows_l[k]
            out.append(
                {
                    "ph": ph,
                    "bp": "e",
                    "cat": _FLOW_CAT,
                    "name": _FLOW_NAME,
                    "id": first_id + k,
                    "pid": _original_id(trace, int(trace.pid[row])),
                    "tid": _original_id(trace, int(trace.tid[row])),
                    "ts": us(times[k]),
                }
            )
    if left_out:
        out.append(_path_note(d, pid, f"{left_out:,} later hops have no arrow", left_out))
    return out


def annotation_events(
    analyses: Sequence[DeviceAnalysis],
    findings: Sequence[Sequence[Finding]],
    used_pids: Sequence[int] | np.ndarray = (),
    *,
    trace: Trace | None = None,
) -> list[dict[str, Any]]:
    """The events to add to a trace: one process per GPU, one thread per track.

    Times (`ts`, `dur`) are exact microsecond texts (`msgspec.Raw`) on the trace's own clock.
    With the `trace`, a GPU whose analysis has a critical path with edges also gets the
    "critical path" track (thread `CRITICAL_PATH_TID`): a slice per weighted edge, named
    `"{breakdown part}: {event it leads to}"`, lasting the edge's weight (so the slices add
    up to the path's length), and flow arrows (`cat` "badput-critical-path") for its hops
    between threads and streams, drawn on the original events' pid/tid.

    Args:
        analyses: per-GPU analyses of the trace, with their timelines.
        findings: each analysis's findings, in the same order.
        used_pids: pids the trace already uses (the added ones avoid them).
        trace: the trace analysed (names, pids and tids of the path's events); no
            critical-path track without it.

    Returns:
        Chrome trace events; none for a GPU without activity or without a timeline.
    """
    events: list[dict[str, Any]] = []
    # Arrow ids above every flow id of the trace (in case a viewer keys flows by id alone).
    next_flow = 1
    if trace is not None and len(trace):
        next_flow = max(int(trace.correlation.max()), 0) + 1
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
        cp = d.critical_path if trace is not None else None
        path = cp is not None and len(cp.edges) > 0
        tracks = [(FINDINGS_TID, FINDINGS_TRACK)] + [(t, n) for t, n, _ in TRACKS]
        if path:
            tracks.append((CRITICAL_PATH_TID, CRITICAL_PATH_TRACK))
        for tid, track in tracks:
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
        if path:
            assert trace is not None and cp is not None
            events += _path_slices(trace, d, cp, pid)
            flows = _path_flows(trace, d, cp, pid, next_flow)
            next_flow += sum(1 for e in flows if e["ph"] == "s")
            events += flows
    return events


def write_annotated(source: str, out: str, added: Sequence[dict[str, Any]]) -> int:
    """Copy the trace `source` to `out` with `added` appended to its `traceEvents`, streaming.

    The input is read in pieces (`CHUNK_BYTES` of inflated text; plain or gzipped) and the
    copy written piece by piece: memory holds about two pieces, never the whole text, so a
    gzip stream that inflates a thousandfold costs what its pieces do. The original events
    keep their JSON text, except that credential formats in them (tokens, keys, URL
    passwords: `badput.trace.redact.redact_events`) are replaced. Every other top-level field
    (`deviceProperties`, `distributedInfo`, `traceName`, `metadata`, `envs`, anything) goes
    through `badput.trace.redact.redact_json` under its key: secrets go, the rest (what
    Perfetto reads) keeps its text. `out` is gzipped when its name ends in `.gz`; on failure
    no partial copy is left behind.

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
    added_text = [msgspec.json.encode(e) for e in added]
    with _open_trace(source) as stream:
        try:
            f = _open_out(out)
        except OSError as e:
            raise BadputError(f"{out}: cannot be written ({e.strerror or e})") from None
        try:
            with f:
                copied = _Copy(source, _Source(source, stream), f).run(added_text)
        except OSError as e:
            _discard(out)
            raise BadputError(f"{out}: cannot be written ({e.strerror or e})") from None
        except BaseException:
            _discard(out)
            raise
    return copied


def _open_out(out: str) -> gzip.GzipFile | io.BufferedWriter:
    if out.endswith(".gz"):
        return gzip.open(out, "wb", compresslevel=6)
    return open(out, "wb")


def _discard(out: str) -> None:
    """Remove a partial copy; only a regular file (`--out /dev/stdout` stays)."""
    try:
        if os.path.isfile(out):
            os.remove(out)
    except OSError:
        pass


# Places tried per read to cut the events array (each try decodes the piece once).
_CUT_TRIES = 3
_WS = b" \t\r\n"


class _Copy:
    """One streaming copy: finds the events array, copies it in pieces, redacts the rest.

    The top level is `{...,"traceEvents":[...],...}` or a bare array. The fields before the
    array are decoded once the array's start is found (they are small); the array is cut into
    pieces at `}` `,` `{` (whitespace allowed), a guess that is checked by decoding the piece:
    a cut inside a string or a nested value leaves unbalanced text, which does not decode,
    and an earlier place is tried. The fields after the array come with its last piece.
    """

    def __init__(self, path: str, source: _Source, f: gzip.GzipFile | io.BufferedWriter) -> None:
        self.path = path
        self.source = source
        self.f = f
        self.limit = held_bytes_limit()
        self.read_bytes = 0
        self.copied = 0

    def _read(self) -> bytes:
        chunk = self.source.read(CHUNK_BYTES)
        self.read_bytes += len(chunk)
        return chunk

    def _decode_error(self, e: msgspec.DecodeError | RecursionError) -> TraceFormatError:
        """The error the reader gives for the same text (`badput.trace.kineto`)."""
        if isinstance(e, RecursionError):
            return nesting_error(self.path)
        return TraceFormatError(self.path, _json_problem(e))

    def run(self, added: Sequence[bytes]) -> int:
        """Copy the whole trace; return the number of original events."""
        head, start, fields = self._find_events()
        f = self.f
        if fields is None:
            f.write(b"[")
        else:
            members = [_member(k, v) for k, v in fields.items() if k != "traceEvents"]
            f.write(b"{" + b"".join(m + b"," for m in members) + b'"traceEvents":[')
        buf = bytearray(head[start:])  # starts with the "[" of the array
        del head
        # As the reader does (`badput.trace.kineto`): text held without a cut for this long
        # has its whitespace between tokens squeezed (a semantic no-op in the copy), so a
        # whitespace bomb is neither held nor searched again and again.
        squeeze_after = min(_SQUEEZE_AFTER, self.limit // 2)
        squeezer: StringState | None = None
        searched = 1  # buf[:searched] holds no place to cut (searched already)
        while True:
            chunk = self._read()
            if not chunk:
                break
            buf += squeezer.squeeze(chunk) if squeezer is not None else chunk
            if squeezer is None and len(buf) > squeeze_after:
                squeezer = StringState()  # buf[0] is the "[", between tokens
                buf[:] = squeezer.squeeze(buf)
                searched = 1
            check_held(self.path, len(buf), self.read_bytes, self.limit, squeezer)
            if len(buf) >= CHUNK_BYTES:
                if self._cut(buf, searched):
                    squeezer, searched = None, 1  # what is held starts at an event again
                else:
                    searched = max(1, len(buf) - 1)
        tail = bytes(buf)
        del buf
        rest: dict[str, msgspec.Raw] = {}
        try:
            if fields is None:
                events = tail.rstrip(_WS)
                if not events.endswith(b"]"):
                    raise msgspec.DecodeError("truncated: the array does not end")
            else:
                rest = msgspec.json.decode(b'{"traceEvents":' + tail, type=dict[str, msgspec.Raw])
                events = bytes(rest.pop("traceEvents"))
                if events[:1] != b"[":
                    raise TraceFormatError(self.path, "traceEvents is not an array")
            body, n = redact_events(events)
            self._write_events(events[1:-1] if body is None else body, n)
        except (msgspec.DecodeError, RecursionError) as e:
            raise self._decode_error(e) from None
        del tail
        self._write_events(b",".join(added), len(added))
        if fields is None:
            f.write(b"]\n")
        else:
            f.write(b"]" + b"".join(b"," + _member(k, v) for k, v in rest.items()) + b"}\n")
        return self.copied - len(added)

    def _find_events(self) -> tuple[bytearray, int, dict[str, msgspec.Raw] | None]:
        """Read up to the start of the events array.

        Returns:
            The text read, the index of the array's "[" in it, and the top-level fields
            before it (None for a bare array).
        """
        head = bytearray()
        searched = 0
        first = b""  # the first byte that is not whitespace
        squeezer: StringState | None = None
        while True:
            chunk = self._read()
            if squeezer is not None:
                chunk = squeezer.squeeze(chunk)
            if not first:
                first = chunk.translate(None, _WS)[:1]  # (translate: see trace._squeeze)
                if not first:
                    if not chunk:
                        raise TraceFormatError(self.path, "empty file")
                    continue  # leading whitespace: nothing to keep
            head += chunk
            if squeezer is None and len(head) > min(_SQUEEZE_AFTER, self.limit // 2):
                squeezer = StringState()  # head[0] lies between tokens: the file's start
                head[:] = squeezer.squeeze(head)
                searched = 0
            check_held(self.path, len(head), self.read_bytes, self.limit, squeezer)
            if first == b"[":
                return head, head.index(b"["), None
            if first not in (b"", b"{"):
                raise TraceFormatError(self.path, _not_json(head))
            # Only the last '"traceEvents"' begun before this read can complete in it.
            begun = head.rfind(b'"traceEvents"', 0, searched)
            pos = begun if begun >= 0 else max(0, searched - 16)
            while match := EVENTS_KEY.search(head, pos):
                try:
                    fields = msgspec.json.decode(
                        bytes(head[: match.end()]) + b"]}", type=dict[str, msgspec.Raw]
                    )
                except (msgspec.DecodeError, RecursionError):
                    pos = match.end()  # inside a string or a nested value: not the array
                    continue
                return head, match.end() - 1, fields
            searched = len(head)
            if not chunk:
                raise TraceFormatError(self.path, "no traceEvents: not a profiler trace")

    def _cut(self, buf: bytearray, lo: int) -> bool:
        """Write the events of `buf` up to a place to cut it, and drop them from `buf`.

        The piece is decoded where it lies: the comma of the cut is overwritten with "]" (and
        put back when the guess was wrong), so nothing is copied unless something is redacted.
        Places are looked for in `buf[lo:]` only.

        Returns:
            Whether a piece was written.
        """
        hi = len(buf)
        for _ in range(_CUT_TRIES):
            comma = _event_boundary(buf, hi, lo)
            if comma < 0:
                return False
            buf[comma] = 0x5D  # "]"
            try:
                body, n = redact_events(buf, comma + 1)
            except (msgspec.DecodeError, RecursionError):
                buf[comma] = 0x2C  # not between two events: try an earlier place
                hi = comma
                continue
            if body is None:
                with memoryview(buf) as view:
                    self._write_events(view[1:comma], n)
            else:
                self._write_events(body, n)
            del buf[1 : comma + 1]
            return True
        return False

    def _write_events(self, body: bytes | memoryview, n: int) -> None:
        if n:
            if self.copied:
                self.f.write(b",")
            self.f.write(body)
            self.copied += n


def _event_boundary(buf: bytearray, hi: int, lo: int = 1) -> int:
    """The comma of the last `}` `,` `{` in `buf[lo:hi]` (whitespace allowed); -1 if none."""
    pos = hi
    while True:
        pos = buf.rfind(b"{", max(lo, 1), pos)
        if pos < 0:
            return -1
        k = pos - 1
        while k > 0 and buf[k] in _WS:
            k -= 1
        if buf[k] == 0x2C:  # ","
            comma = k
            k -= 1
            while k > 0 and buf[k] in _WS:
                k -= 1
            if buf[k] == 0x7D:  # "}"
                return comma


def _member(key: str, value: msgspec.Raw) -> bytes:
    """One top-level field, `"key":value`, redacted."""
    return msgspec.json.encode(redact_text(key)) + b":" + redact_json(bytes(value), key)


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
    try:
        analyses = analyze_trace(trace, spec)
    except UsageError as e:  # a --window the trace lacks: name the trace
        raise UsageError(f"{trace.path}: {e}") from None
    findings = [diagnose_device(trace, d) for d in analyses]
    added = annotation_events(analyses, findings, trace.pid, trace=trace)
    del trace
    copied = write_annotated(source, out, added)
    return AnnotateResult(
        out=out,
        original_events=copied,
        added_events=len(added),
        devices=sum(1 for d in analyses if d.device >= 0 and d.timeline is not None),
        findings=sum(len(f) for d, f in zip(analyses, findings, strict=True) if d.device >= 0),
    )
