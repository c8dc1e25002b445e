"""Reader for PyTorch profiler (Kineto) JSON traces, plain or gzipped.

The events array is decoded in pieces straight into typed msgspec structs and then into numpy
columns; no per-event dict outlives a piece. Kineto writes one event per line (or one event per
indented block), so the reader cuts the array at a line that starts a new event after a comma
and decodes each piece on its own: memory stays bounded by the piece size, whatever the file
size. A file laid out otherwise (all on one line, say) is decoded whole.

Timestamps and durations are kept as their JSON text and converted to integer nanoseconds
exactly (`numbers.us_text_to_ns`); they never pass through float64.

NCCL metadata (`"Collective name"`, `"In msg nelems"`, ... in the args of NCCL kernels and
`record_param_comms` ops of newer traces) goes to a sparse side table, `Trace.comm_meta`. Each
decode path only notes which events have a `"Collective name"` (the C scanner, and one field of
`_Args`) and keeps their args text; one function, `_comm_values`, decodes those few texts, so
both paths agree value for value and traces without metadata pay nothing more.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import msgspec
import numpy as np
import numpy.typing as npt

from badput.errors import TraceFormatError
from badput.trace import _fastscan
from badput.trace.model import NO_ID, CommMeta, EventKind, FlowPhase, Trace
from badput.trace.numbers import us_text_to_ns

__all__ = ["CHUNK_BYTES", "read_kineto"]

I64 = npt.NDArray[np.int64]

#: Bytes read per piece of the events array.
CHUNK_BYTES = 8 << 20

_EMPTY = msgspec.Raw(b"")
_MISSING = np.iinfo(np.int64).min  # ts of an event without one
_DROP = -1  # kind of rows the model does not keep (instant, metadata, counter events)

# Kineto category (lower-cased) -> kind. Both the modern and the 2021 spellings appear here.
_KIND_BY_CATEGORY: dict[str, EventKind] = {
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "python_function": EventKind.PYTHON,
    "python": EventKind.PYTHON,
    "cuda_sync": EventKind.SYNC,
}

# Kinds recorded on the GPU: their device and stream come from args, else pid and tid.
_GPU_SIDE = np.array(
    [
        int(k)
        for k in (
            EventKind.KERNEL,
            EventKind.MEMCPY,
            EventKind.MEMSET,
            EventKind.GPU_ANNOTATION,
            EventKind.SYNC,
        )
    ],
    dtype=np.int8,
)

_PHASE_BY_PH: dict[str, int] = {
    "X": int(FlowPhase.COMPLETE),
    "s": int(FlowPhase.FLOW_START),
    "f": int(FlowPhase.FLOW_END),
    "t": int(FlowPhase.FLOW_STEP),
    "i": int(FlowPhase.INSTANT),
    "I": int(FlowPhase.INSTANT),
}

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_STREAM_LABEL = re.compile(r"^\s*stream\s+(-?\d+)\s*$", re.IGNORECASE)


class _Args(msgspec.Struct, frozen=True, gc=False):
    device: int = NO_ID
    stream: int = NO_ID
    correlation: int = NO_ID
    external_id: int = msgspec.field(default=NO_ID, name="External id")
    external_id_lower: int = msgspec.field(default=NO_ID, name="external id")
    bytes: int = NO_ID
    alloc_bytes: int = msgspec.field(default=NO_ID, name="Bytes")
    total_allocated: int = msgspec.field(default=NO_ID, name="Total Allocated")
    total_reserved: int = msgspec.field(default=NO_ID, name="Total Reserved")
    device_id: int = msgspec.field(default=NO_ID, name="Device Id")
    device_type: int = msgspec.field(default=NO_ID, name="Device Type")
    # Only marks NCCL metadata (any JSON type); `_comm_values` reads it from the args text.
    # One field, not six: each field makes msgspec's lookup of every other key slower.
    collective_name: msgspec.Raw = msgspec.field(default=_EMPTY, name="Collective name")


_NO_ARGS = _Args()
_PRESENT = msgspec.Raw(b"true")


class _CommArgs(msgspec.Struct, frozen=True, gc=False):
    """The NCCL metadata of an args object, every value raw (judged in `_comm_values`)."""

    collective_name: msgspec.Raw = msgspec.field(default=_EMPTY, name="Collective name")
    in_nelems: msgspec.Raw = msgspec.field(default=_EMPTY, name="In msg nelems")
    out_nelems: msgspec.Raw = msgspec.field(default=_EMPTY, name="Out msg nelems")
    group_size: msgspec.Raw = msgspec.field(default=_EMPTY, name="Group size")
    dtype: msgspec.Raw = _EMPTY
    process_group: msgspec.Raw = msgspec.field(default=_EMPTY, name="Process Group Name")


class _ArgsOnly(msgspec.Struct, gc=False):
    args: msgspec.Raw = _EMPTY


#: One row's NCCL metadata: collective name, in/out elements, group size, dtype, group name.
_CommValues = tuple[str, int, int, int, str | None, str | None]


def _comm_values(args_text: bytes) -> _CommValues | None:
    """The NCCL metadata in one event's args text; None without a non-empty "Collective name"."""
    try:
        args = _decode_comm_args(args_text)
    except msgspec.MsgspecError:  # not an object
        return None
    name = _raw_str(args.collective_name)
    if not name:
        return None
    return (
        name,
        _raw_int(args.in_nelems),
        _raw_int(args.out_nelems),
        _raw_int(args.group_size),
        _raw_str(args.dtype),
        _raw_str(args.process_group),
    )


def _raw_str(raw: msgspec.Raw) -> str | None:
    if not raw:
        return None
    value = _safe_decode(raw)
    return value if isinstance(value, str) else None


def _raw_int(raw: msgspec.Raw) -> int:
    return _as_int(_safe_decode(raw)) if raw else NO_ID


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = NO_ID
    tid: int | str = NO_ID
    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY
    id: int | str = NO_ID
    args: _Args = _NO_ARGS


class _RawEvent(msgspec.Struct, gc=False):
    """Every field kept as raw JSON: the lenient path for events the typed path rejects."""

    ph: msgspec.Raw = _EMPTY
    cat: msgspec.Raw = _EMPTY
    name: msgspec.Raw = _EMPTY
    pid: msgspec.Raw = _EMPTY
    tid: msgspec.Raw = _EMPTY
    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY
    id: msgspec.Raw = _EMPTY
    args: msgspec.Raw = _EMPTY


class _Document(msgspec.Struct):
    """The top level of a trace file, events left undecoded."""

    traceEvents: msgspec.Raw = _EMPTY
    deviceProperties: msgspec.Raw = _EMPTY
    computeProperties: msgspec.Raw = _EMPTY
    distributedInfo: msgspec.Raw = _EMPTY


_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_comm_args = msgspec.json.Decoder(_CommArgs).decode
_decode_args_only = msgspec.json.Decoder(list[_ArgsOnly]).decode
_decode_raw_events = msgspec.json.Decoder(list[_RawEvent]).decode
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_document = msgspec.json.Decoder(_Document).decode
_decode_any = msgspec.json.Decoder().decode


class _Interner(dict[str, int]):
    """Name -> dense id, assigning the next id on first sight."""

    def __missing__(self, key: str) -> int:
        value = len(self)
        self[key] = value
        return value


class _IdMap(dict[object, int]):
    """pid/tid/flow-id value -> int.

    Numbers stay as they are, `"stream 7"` becomes 7, other labels become -(k + 2).
    """

    def __init__(self, labels: list[str]) -> None:
        super().__init__()
        self.labels = labels

    def __missing__(self, key: object) -> int:
        value = self._convert(key)
        self[key] = value
        return value

    def _convert(self, key: object) -> int:
        if not isinstance(key, str) or key.strip().lstrip("-").isdigit():
            return _as_int(key)
        match = _STREAM_LABEL.match(key)
        if match:
            return int(match.group(1))
        self.labels.append(key)  # each key is converted once: the dict caches it
        return -(len(self.labels) + 1)


class _KindMap(dict[str, int]):
    def __missing__(self, key: str) -> int:
        value = int(_KIND_BY_CATEGORY.get(key.lower(), EventKind.OTHER))
        self[key] = value
        return value


class _PhaseMap(dict[str, int]):
    def __missing__(self, key: str) -> int:
        value = _PHASE_BY_PH.get(key, _DROP)
        self[key] = value
        return value


#: Columns of the Trace model, with their dtypes, in the order `_Columns` fills them.
_COLUMN_TYPES: dict[str, type[np.generic]] = {
    "kind": np.int8,
    "phase": np.int8,
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "name_id": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "device": np.int64,
    "stream": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "bytes": np.int64,
    "total_allocated": np.int64,
    "total_reserved": np.int64,
}

# Kineto names its caching-allocator instant events so; other instant events are dropped.
MEMORY_EVENT_NAME = "[memory]"
_CUDA_DEVICE_TYPE = 1  # args["Device Type"] of a memory event on a GPU (0 is the CPU)


class _Columns:
    """Accumulates typed columns piece by piece."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names = _Interner()
        self.labels: list[str] = []
        self.ids = _IdMap(self.labels)
        self.kinds = _KindMap()
        self.phases = _PhaseMap()
        self.parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in _COLUMN_TYPES}
        self.seen = 0  # events of any phase
        self.negative: list[tuple[str, int]] = []
        self.bad_time = 0
        self.skipped_non_objects = 0
        self.rows = 0  # rows kept so far
        self.meta_rows: list[int] = []  # rows with NCCL metadata, and their values
        self.meta_values: list[_CommValues] = []

    def add(
        self,
        events: list[_Event],
        array_text: bytes | memoryview = b"",
        raw_args: list[msgspec.Raw] | None = None,
    ) -> None:
        """Convert one piece of typed events to columns.

        The args text of events with NCCL metadata comes from `raw_args` (one per event) when
        given, else from decoding `array_text` (the piece the events came from) once more.
        """
        self.seen += len(events)
        marked = [i for i, e in enumerate(events) if e.args.collective_name]
        meta: list[tuple[int, bytes]] = []
        if marked:
            if raw_args is None:
                raw_args = [a.args for a in _decode_args_only(array_text)]
            meta = [(i, bytes(raw_args[i])) for i in marked]
        phases = self.phases
        phase = np.array([phases[e.ph] for e in events], dtype=np.int8)
        keep = phase != _DROP
        instant = np.flatnonzero(phase == FlowPhase.INSTANT)
        if instant.size:
            keep[instant] = [events[i].name == MEMORY_EVENT_NAME for i in instant.tolist()]
        if not keep.all():
            events = [e for e, k in zip(events, keep.tolist(), strict=True) if k]
            phase = phase[keep]
            if meta:
                new_row = (np.cumsum(keep) - 1).tolist()
                meta = [(new_row[i], text) for i, text in meta if keep[i]]
        if not events:
            return
        kinds, names, ids = self.kinds, self.names, self.ids
        ts_ns, bad_ts = us_text_to_ns([e.ts for e in events], default=_MISSING)
        dur_ns, bad_dur = us_text_to_ns([e.dur for e in events], default=0)
        args = [e.args for e in events]

        def arg(key: str) -> I64:
            return np.array([getattr(a, key) for a in args], dtype=np.int64)

        cols: dict[str, npt.NDArray[Any]] = {
            "kind": np.array([kinds[e.cat] for e in events], dtype=np.int8),
            "phase": phase,
            "ts_ns": ts_ns,
            "dur_ns": dur_ns,
            "name_id": np.array([names[e.name] for e in events], dtype=np.int32),
            "pid": np.array([ids[e.pid] for e in events], dtype=np.int64),
            "tid": np.array([ids[e.tid] for e in events], dtype=np.int64),
        }
        for key in ("device", "stream", "correlation", "external_id", "external_id_lower",
                    "bytes", "alloc_bytes", "total_allocated", "total_reserved", "device_id",
                    "device_type"):  # fmt: skip
            cols[key] = arg(key)
        flow = np.flatnonzero(phase != FlowPhase.COMPLETE)
        flow = flow[phase[flow] != FlowPhase.INSTANT]
        if flow.size:
            cols["correlation"][flow] = [ids[events[i].id] for i in flow.tolist()]
        cols["bad"] = bad_ts | bad_dur | (ts_ns == _MISSING)
        self._finish(cols, meta)

    def add_scanned(self, scanned: _fastscan.Scanned) -> None:
        """Take the columns of the C scanner (`_scan.c`), mapping its local ids to ours."""
        self.seen += scanned.seen
        phase = scanned.column("phase", np.int8)
        if phase.shape[0] == 0:
            return
        texts = scanned.strings
        cat_kind = np.array([self.kinds[t] for t in texts] + [self.kinds[""]], dtype=np.int8)
        local_name = scanned.column("name", np.int32)
        name_map = np.full(len(texts) + 1, -1, dtype=np.int32)
        for local in np.unique(local_name).tolist():
            name_map[local] = self.names[texts[local] if local >= 0 else ""]
        flow = (phase != FlowPhase.COMPLETE) & (phase != FlowPhase.INSTANT)
        # Map only the labels kept rows use, so that both decode paths know the same labels.
        used = [scanned.column("pid_label", np.int32), scanned.column("tid_label", np.int32)]
        if flow.any():
            used.append(scanned.column("id_label", np.int32)[flow])
        label_ids = np.full(len(scanned.labels) + 1, NO_ID, dtype=np.int64)
        for local in np.unique(np.concatenate(used)).tolist():
            if local >= 0:
                label_ids[local] = self.ids[scanned.labels[local]]

        def ident(key: str) -> I64:
            label = scanned.column(f"{key}_label", np.int32)
            return np.where(label >= 0, label_ids[label], scanned.column(key, np.int64))

        correlation = scanned.column("correlation", np.int64)
        if flow.any():
            correlation = np.where(flow, ident("id"), correlation)
        cols: dict[str, npt.NDArray[Any]] = {
            "kind": cat_kind[scanned.column("cat", np.int32)],
            "phase": phase,
            "ts_ns": scanned.column("ts", np.int64),
            "dur_ns": scanned.column("dur", np.int64).copy(),
            "name_id": name_map[local_name],
            "pid": ident("pid"),
            "tid": ident("tid"),
            "correlation": correlation,
            "external_id": scanned.column("ext", np.int64),
            "external_id_lower": scanned.column("ext_lower", np.int64),
            "bad": scanned.column("has_ts", np.int8) == 0,
        }
        for key in ("device", "stream", "bytes", "alloc_bytes", "total_allocated",
                    "total_reserved", "device_id", "device_type"):  # fmt: skip
            cols[key] = scanned.column(key, np.int64)
        meta_rows = scanned.column("meta_row", np.int64).tolist()
        self._finish(cols, list(zip(meta_rows, scanned.meta_args, strict=True)))

    def add_lenient(self, raw_events: list[_RawEvent]) -> None:
        """Convert events whose fields have unexpected types, one at a time."""
        typed: list[_Event] = []
        for raw in raw_events:
            typed.append(
                _Event(
                    ph=_as_str(raw.ph),
                    cat=_as_str(raw.cat),
                    name=_as_str(raw.name),
                    pid=_as_id(raw.pid),
                    tid=_as_id(raw.tid),
                    ts=_as_number_text(raw.ts),
                    dur=_as_number_text(raw.dur),
                    id=_as_id(raw.id),
                    args=_as_args(raw.args),
                )
            )
        self.add(typed, raw_args=[raw.args for raw in raw_events])

    def _finish(self, c: dict[str, npt.NDArray[Any]], meta: list[tuple[int, bytes]]) -> None:
        """Shared last step of both decode paths: derive, validate and store one piece.

        `meta` lists (row in the piece, args text) of the rows whose args have a
        `"Collective name"` key.
        """
        phase = c["phase"]
        bad = c.pop("bad") & (phase == FlowPhase.COMPLETE)  # a flow arrow needs no time
        if bad.any():
            self.bad_time += int(bad.sum())
            keep = ~bad
            c = {k: v[keep] for k, v in c.items()}
            phase = c["phase"]
            if meta:
                new_row = (np.cumsum(keep) - 1).tolist()
                meta = [(new_row[r], a) for r, a in meta if keep[r]]
        for r, text in meta:
            values = _comm_values(text)
            if values is not None:
                self.meta_rows.append(self.rows + r)
                self.meta_values.append(values)
        kind, dur_ns, name_id, ts_ns = c["kind"], c["dur_ns"], c["name_id"], c["ts_ns"]
        kind[(phase != FlowPhase.COMPLETE) & (phase != FlowPhase.INSTANT)] = EventKind.FLOW
        memory = phase == FlowPhase.INSTANT
        kind[memory] = EventKind.MEMORY
        negative = np.flatnonzero(dur_ns < 0)
        if negative.size:
            first = int(negative[0])
            self.negative.append((self._name(int(name_id[first])), int(ts_ns[first])))
            self.negative.extend([("", 0)] * (negative.size - 1))
        dur_ns[phase != FlowPhase.COMPLETE] = 0
        gpu_side = np.isin(kind, _GPU_SIDE)
        device, stream = c["device"], c["stream"]
        device = np.where(gpu_side, np.where(device != NO_ID, device, c["pid"]), NO_ID)
        cuda_memory = memory & (c["device_type"] == _CUDA_DEVICE_TYPE)
        c["device"] = np.where(cuda_memory, c["device_id"], device)
        c["stream"] = np.where(gpu_side, np.where(stream != NO_ID, stream, c["tid"]), NO_ID)
        ext = c["external_id"]
        c["external_id"] = np.where(ext != NO_ID, ext, c["external_id_lower"])
        c["bytes"] = np.where(memory, c["alloc_bytes"], c["bytes"])
        for key in _COLUMN_TYPES:
            self.parts[key].append(c[key])
        self.rows += int(phase.shape[0])

    def _name(self, name_id: int) -> str:
        for name, nid in self.names.items():
            if nid == name_id:
                return name
        return ""

    def column(self, key: str) -> npt.NDArray[Any]:
        """One whole column, every piece concatenated."""
        parts = self.parts[key]
        dtype = _COLUMN_TYPES[key]
        if not parts:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(parts).astype(dtype, copy=False)


def _as_str(raw: msgspec.Raw) -> str:
    if not raw:
        return ""
    value = _decode_any(raw)
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _as_id(raw: msgspec.Raw) -> int | str:
    if not raw:
        return NO_ID
    value = _decode_any(raw)
    return value if isinstance(value, str) else _as_int(value)


def _as_number_text(raw: msgspec.Raw) -> msgspec.Raw:
    """The JSON text of a time field; a quoted number is unquoted; anything else is invalid."""
    if not raw:
        return _EMPTY
    text = bytes(raw).strip()
    if text.startswith(b'"') and text.endswith(b'"') and len(text) >= 2:
        text = text[1:-1].strip()
    if text in (b"null", b"true", b"false") or text[:1] in (b"{", b"["):
        return msgspec.Raw(b"?")  # parsed as invalid
    return msgspec.Raw(text)


def _as_int(value: object) -> int:
    """An integer field of any JSON type as int64; NO_ID where it holds no integer."""
    if isinstance(value, bool) or value is None:
        return NO_ID
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else NO_ID
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return _as_int(int(value.strip()))
    return NO_ID


def _as_args(raw: msgspec.Raw) -> _Args:
    if not raw:
        return _NO_ARGS
    value = _decode_any(raw)
    if not isinstance(value, dict):
        return _NO_ARGS
    return _Args(
        device=_as_int(value.get("device")),
        stream=_as_int(value.get("stream")),
        correlation=_as_int(value.get("correlation")),
        external_id=_as_int(value.get("External id")),
        external_id_lower=_as_int(value.get("external id")),
        bytes=_as_int(value.get("bytes")),
        alloc_bytes=_as_int(value.get("Bytes")),
        total_allocated=_as_int(value.get("Total Allocated")),
        total_reserved=_as_int(value.get("Total Reserved")),
        device_id=_as_int(value.get("Device Id")),
        device_type=_as_int(value.get("Device Type")),
        collective_name=_PRESENT if "Collective name" in value else _EMPTY,
    )


def _decode_piece(columns: _Columns, array_text: bytes | memoryview) -> None:
    """Decode a JSON array of events: typed first, leniently where the types are off.

    Raises:
        msgspec.DecodeError: the text is not a JSON array (the caller decides what that means).
    """
    scanned = _fastscan.scan(array_text)
    if scanned is not None:
        columns.add_scanned(scanned)
        return
    try:
        columns.add(_decode_events(array_text), array_text)
        return
    except msgspec.ValidationError:
        pass
    try:
        columns.add_lenient(_decode_raw_events(array_text))
        return
    except msgspec.ValidationError:
        pass
    raws = _decode_raw_list(array_text)
    objects: list[_RawEvent] = []
    for raw in raws:
        try:
            objects.append(msgspec.json.decode(raw, type=_RawEvent))
        except msgspec.ValidationError:
            columns.skipped_non_objects += 1
    columns.add_lenient(objects)


@contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not a trace file") from None
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror})") from None
    try:
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw
    finally:
        raw.close()


class _Source:
    """Reads of a (possibly gzipped) stream.

    Decompression failures become TraceFormatError.
    """

    def __init__(self, path: str, stream: IO[bytes]) -> None:
        self.path = path
        self.stream = stream

    def _translate(self, e: Exception) -> TraceFormatError:
        if isinstance(e, EOFError):
            return TraceFormatError(self.path, "truncated gzip: the compressed stream ends early")
        return TraceFormatError(self.path, f"corrupt gzip data ({e})")

    def read(self, n: int) -> bytes:
        """Up to n bytes; b"" at the end."""
        try:
            return self.stream.read(n)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise self._translate(e) from None

    def readinto(self, view: memoryview) -> int:
        """Fill `view` as far as the data goes; 0 at the end."""
        try:
            return self.stream.readinto(view)  # type: ignore[attr-defined, no-any-return]
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise self._translate(e) from None


def _last_event_start(buf: bytearray, lo: int, hi: int) -> tuple[int, int]:
    """`(comma, brace)`: the last `{` that opens a line after a line ending in `,`; or (-1, -1).

    JSON strings cannot hold a raw newline, so a newline is always between tokens; a `{`
    opening a line whose previous token is `,` starts a new element of an array. In Kineto's
    layout that array is `traceEvents`. A wrong guess makes the piece fail to decode and the
    reader falls back to decoding the rest whole. Only `buf[lo:hi]` is searched.
    """
    pos = hi
    while True:
        pos = buf.rfind(b"\n", lo, pos)
        if pos < 0:
            return -1, -1
        j = pos + 1
        while j < hi and buf[j] in b" \t\r":
            j += 1
        if j < hi and buf[j] == 0x7B:  # "{"
            k = pos - 1
            while k >= lo and buf[k] in b" \t\r":
                k -= 1
            if k >= lo and buf[k] == 0x2C:  # ","
                return k, j


def _json_problem(err: msgspec.DecodeError) -> str:
    text = str(err)
    if "truncated" in text:
        return "truncated JSON: the file ends in the middle of the data"
    return f"not valid JSON ({text})"


def read_kineto(path: str, progress: Callable[[int], None] | None = None) -> Trace:
    """Read one Kineto trace file (JSON or gzipped JSON) into a columnar Trace.

    Args:
        path: the file.
        progress: called with the number of uncompressed bytes read so far, after each piece.

    Returns:
        The trace, rows in file order.

    Raises:
        TraceFormatError: the file is missing, not JSON, truncated, or not a trace.

    Example:
        >>> trace = read_kineto("worker0.pt.trace.json.gz")  # doctest: +SKIP
        >>> trace.devices()  # doctest: +SKIP
        [0]
    """
    columns = _Columns(path)
    with _open(path) as stream:
        document = _read_document(path, _Source(path, stream), columns, progress)
    return _build(path, columns, document)


def _read_document(
    path: str,
    source: _Source,
    columns: _Columns,
    progress: Callable[[int], None] | None,
) -> _Document | None:
    """Stream the events array into `columns`; return the top level (None for a bare array)."""
    head = bytearray()
    total = 0
    start = -1
    bare = False
    while start < 0:
        chunk = source.read(CHUNK_BYTES)
        total += len(chunk)
        head += chunk
        first = bytes(head[:64]).lstrip()
        if first[:1] not in (b"", b"{", b"["):
            raise TraceFormatError(path, "not JSON (a trace file starts with '{' or '[')")
        if first[:1] == b"[":
            bare = True
            start = head.index(b"[")
            break
        match = _EVENTS_KEY.search(head)
        if match:
            start = match.end() - 1
            break
        if not chunk:
            if not first:
                raise TraceFormatError(path, "empty file")
            try:
                _decode_any(bytes(head))
            except msgspec.DecodeError as e:
                raise TraceFormatError(path, _json_problem(e)) from None
            raise TraceFormatError(
                path, "JSON without a traceEvents array: not a PyTorch profiler trace"
            )
    prefix = bytes(head[:start])
    # `buf[:filled]` always starts with the "[" of the array. Each piece is decoded in place:
    # the array's head up to a comma that is overwritten with "]". The rest moves to the
    # front and the next read lands behind it, so the buffer is reused, never regrown, while
    # Kineto's layout lets the reader cut.
    filled = len(head) - start
    buf = bytearray(max(2 * CHUNK_BYTES, filled + CHUNK_BYTES))
    buf[:filled] = head[start:]
    del head
    streaming = True
    lo = 1  # buf[:lo] holds no event start (searched already)
    while True:
        if len(buf) - filled < CHUNK_BYTES:
            buf.extend(bytes(len(buf)))  # no cut found yet: make room
        with memoryview(buf) as view:
            n = source.readinto(view[filled : filled + CHUNK_BYTES])
        if not n:
            break
        filled += n
        total += n
        if not streaming or filled < CHUNK_BYTES:
            continue
        comma, brace = _last_event_start(buf, lo, filled)
        if comma < 0:
            lo = max(1, filled - 1)
            continue
        buf[comma] = 0x5D  # "]"
        try:
            with memoryview(buf) as view:
                _decode_piece(columns, view[: comma + 1])
        except msgspec.DecodeError:
            buf[comma] = 0x2C  # the layout fooled the cut: decode the rest whole
            streaming = False
            continue
        left = filled - brace
        buf[1 : 1 + left] = buf[brace:filled]
        filled = 1 + left
        lo = 1
        if progress is not None:
            progress(total)
    rest = bytes(buf[:filled])
    del buf
    if bare:
        try:
            _decode_piece(columns, rest)
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _json_problem(e)) from None
        document = None
    else:
        try:
            document = _decode_document(prefix + rest)
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _json_problem(e)) from None
        except msgspec.ValidationError as e:
            raise TraceFormatError(path, f"not a profiler trace ({e})") from None
        del rest
        try:
            _decode_piece(columns, bytes(document.traceEvents))
        except msgspec.DecodeError as e:  # cannot happen: the document decoded
            raise TraceFormatError(path, _json_problem(e)) from None
    if progress is not None:
        progress(total)
    return document


def _build(path: str, columns: _Columns, document: _Document | None) -> Trace:
    if columns.seen == 0:
        raise TraceFormatError(path, "the trace has no events")
    n_kept = sum(p.shape[0] for p in columns.parts["kind"])
    if n_kept == 0 and columns.skipped_non_objects:
        raise TraceFormatError(path, "traceEvents holds no event objects: not a profiler trace")
    if columns.negative:
        name, ts = columns.negative[0]
        count = len(columns.negative)
        raise TraceFormatError(
            path,
            f"{count} event(s) with a negative duration (first: {name!r} at ts {ts} ns)",
        )
    warnings: list[str] = []
    if columns.bad_time:
        warnings.append(f"skipped {columns.bad_time} event(s) without a valid ts or dur")
    if columns.skipped_non_objects:
        warnings.append(f"skipped {columns.skipped_non_objects} entries that are not objects")
    rank, world_size, gpu_names = _header(document, warnings)
    names = [""] * len(columns.names)
    for name, nid in columns.names.items():
        names[nid] = name
    return Trace(
        comm_meta=_comm_meta(columns),
        path=path,
        **{key: columns.column(key) for key in _COLUMN_TYPES},
        names=names,
        labels=columns.labels,
        rank=rank,
        world_size=world_size,
        gpu_names=gpu_names,
        warnings=warnings,
    )


def _header(
    document: _Document | None, warnings: list[str]
) -> tuple[int | None, int | None, dict[int, str]]:
    """Rank, world size and GPU names from the top-level keys; tolerant of their layout."""
    rank: int | None = None
    world_size: int | None = None
    gpu_names: dict[int, str] = {}
    if document is None:
        return rank, world_size, gpu_names
    if document.distributedInfo:
        info = _safe_decode(document.distributedInfo)
        if isinstance(info, dict):
            r = _as_int(info.get("rank"))
            w = _as_int(info.get("world_size", info.get("worldSize")))
            rank = r if r >= 0 else None
            world_size = w if w > 0 else None
        else:
            warnings.append("distributedInfo is not an object; rank unknown")
    for raw in (document.deviceProperties, document.computeProperties):
        if not raw:
            continue
        props = _safe_decode(raw)
        if not isinstance(props, list):
            continue
        for entry in props:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                index = _as_int(entry.get("id"))
                if index >= 0:
                    gpu_names.setdefault(index, entry["name"])
    return rank, world_size, gpu_names


def _safe_decode(raw: msgspec.Raw) -> object:
    try:
        return _decode_any(raw)
    except msgspec.DecodeError:
        return None


def _comm_meta(columns: _Columns) -> CommMeta | None:
    """The sparse NCCL metadata table; None when no row has metadata."""
    if not columns.meta_rows:
        return None
    strings = _Interner()

    def ids(values: list[str | None]) -> npt.NDArray[np.int32]:
        return np.array([NO_ID if v is None else strings[v] for v in values], dtype=np.int32)

    name, in_n, out_n, group, dtype, pg = zip(*columns.meta_values, strict=True)
    collective = ids(list(name))
    dtypes = ids(list(dtype))
    groups = ids(list(pg))
    return CommMeta(
        row=np.array(columns.meta_rows, dtype=np.int64),
        collective=collective,
        in_nelems=np.array(in_n, dtype=np.int64),
        out_nelems=np.array(out_n, dtype=np.int64),
        group_size=np.array(group, dtype=np.int64),
        dtype=dtypes,
        process_group=groups,
        strings=list(strings),
    )
