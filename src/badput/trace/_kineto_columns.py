"""Event structs into numpy columns: the builder behind `badput.trace.kineto`.

Private to the reader. `_Columns` takes decoded pieces (typed structs, C-scanner columns, or
lenient raw events), interns names and labels, maps categories and phases, and finishes into
the columns of the `Trace` model; `_comm_meta` turns the args texts of events with NCCL
metadata into the sparse `CommMeta` table, and `_op_args` gathers the shape arguments of the
ops (record_shapes=True) into the sparse `OpArgs` table.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from badput._memory import make_resident, memory_kept
from badput._text import is_ascii_digits
from badput.trace import _fastscan
from badput.trace._kineto_json import (
    _DROP,
    _GPU_SIDE,
    _KIND_BY_CATEGORY,
    _MISSING,
    _PHASE_BY_PH,
    _STREAM_LABEL,
    _Args,
    _as_args,
    _as_id,
    _as_int,
    _as_number_text,
    _as_str,
    _comm_values,
    _CommValues,
    _decode_args_only,
    _Event,
    _int64,
    _RawEvent,
    _wait_values,
)
from badput.trace._limits import available_memory_bytes
from badput.trace.model import (
    NO_ID,
    CommMeta,
    EventKind,
    FlowPhase,
    OpArgs,
    SparseColumn,
    SyncWaits,
)
from badput.trace.numbers import us_text_to_ns

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


def _used_ids(count: int, *local: npt.NDArray[np.int32]) -> list[int]:
    """The distinct values of the `local` columns, ascending, -1 first.

    The values are ids below `count`, or -1 for none. As
    `np.unique(np.concatenate(local)).tolist()`, by marking a table of `count` + 1 slots (-1
    marks the last) instead of joining, sorting or hashing the columns.
    """
    seen = np.zeros(count + 1, dtype=np.bool_)
    for column in local:
        if not _fastscan.mark(column, seen):  # in C: no index array of intp per column
            seen[column] = True
    found: list[int] = np.flatnonzero(seen[:-1]).tolist()
    return [-1, *found] if seen[-1] else found


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
        if not isinstance(key, str) or is_ascii_digits(key.strip().lstrip("-")):
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

#: Identifier columns, held as int32 while every value fits (half the memory of int64); a
#: value beyond it widens the column to int64 from then on. Times, lengths and byte counts
#: stay int64 (they are summed and subtracted).
NARROW_COLUMNS = frozenset(("pid", "tid", "device", "stream", "correlation", "external_id"))

#: Columns that few rows have (copies' and memory events' byte counts, the allocator's
#: totals): kept as `SparseColumn`s, by the name of their Trace field.
SPARSE_COLUMNS: dict[str, str] = {
    "bytes": "byte_counts",
    "total_allocated": "allocated_totals",
    "total_reserved": "reserved_totals",
}

# Kineto names its caching-allocator instant events so; other instant events are dropped.
MEMORY_EVENT_NAME = "[memory]"
_CUDA_DEVICE_TYPE = 1  # args["Device Type"] of a memory event on a GPU (0 is the CPU)


class _PieceOps(NamedTuple):
    """The shape arguments of one piece's rows that have them, before ids are made global."""

    row: I64  # row in the piece, ascending
    # dims, types, strides, concrete (one column each) as indexes into `values`; NO_ID absent
    ids: tuple[I32, ...]
    seq: I64
    fwd: I64
    values: list[bytes]  # the piece's own interned raw texts

    def take(self, keep: npt.NDArray[np.bool_]) -> _PieceOps:
        ids = tuple(column[keep] for column in self.ids)
        return _PieceOps(self.row[keep], ids, self.seq[keep], self.fwd[keep], self.values)


_OP_ID_COLUMNS = ("op_dims", "op_types", "op_strides", "op_concrete")
#: Columns of `OpArgs`, with their dtypes.
_OP_COLUMNS: dict[str, type[np.generic]] = {
    "row": np.int64,
    "dims": np.int32,
    "types": np.int32,
    "strides": np.int32,
    "concrete": np.int32,
    "sequence": np.int64,
    "fwd_tid": np.int64,
}


class _TextIds(dict[bytes, int]):
    """Raw text -> dense id in order of first sight; the empty text (absent) is NO_ID."""

    def __init__(self) -> None:
        super().__init__({b"": NO_ID})

    def __missing__(self, key: bytes) -> int:
        value = len(self) - 1
        self[key] = value
        return value


def _piece_ops(args: list[_Args]) -> _PieceOps | None:
    """The shape arguments of a piece's rows (their args, in row order); None if none has any.

    Per row only copies and dict lookups: which texts are lists is judged once per distinct
    text (a value that is not a list is absent, as on the other paths).
    """
    marked = [
        i
        for i, a in enumerate(args)
        if a.input_dims
        or a.input_type
        or a.input_strides
        or a.concrete_inputs
        or a.sequence != NO_ID
        or a.fwd_tid != NO_ID
    ]
    if not marked:
        return None
    chosen = [args[i] for i in marked]
    ids_of = _TextIds()
    flat = [
        ids_of[bytes(raw)]
        for a in chosen
        for raw in (a.input_dims, a.input_type, a.input_strides, a.concrete_inputs)
    ]
    values = list(ids_of)[1:]  # in id order, past the empty text
    is_list = np.array([v[:1] == b"[" for v in values] + [False], dtype=np.bool_)
    ids = np.array(flat, dtype=np.int32).reshape(-1, 4).T.copy()
    ids[~is_list[ids]] = NO_ID  # NO_ID indexes the last slot: False
    seq = _int64_array([a.sequence for a in chosen])
    fwd = _int64_array([a.fwd_tid for a in chosen])
    keep = (ids >= 0).any(axis=0) | (seq != NO_ID) | (fwd != NO_ID)
    if not keep.any():
        return None
    rows = np.array(marked, dtype=np.int64)
    ops = _PieceOps(rows, tuple(ids), seq, fwd, values)
    return ops if keep.all() else ops.take(keep)


def _int64_array(values: list[int]) -> I64:
    """Integers msgspec decoded (any size) as int64; NO_ID for one beyond it."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array([_int64(v) for v in values], dtype=np.int64)


class _Columns:
    """Accumulates typed columns piece by piece."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names = _Interner()
        self.labels: list[str] = []
        self.ids = _IdMap(self.labels)
        self.kinds = _KindMap()
        self.phases = _PhaseMap()
        self.parts: dict[str, _Growing] = {
            k: _Growing(t, narrow=k in NARROW_COLUMNS)
            for k, t in _COLUMN_TYPES.items()
            if k not in SPARSE_COLUMNS
        }
        self.sparse: dict[str, _Sparse] = {k: _Sparse() for k in SPARSE_COLUMNS}
        self.seen = 0  # events of any phase
        self.negative: list[tuple[str, int]] = []
        self.bad_time = 0
        self.skipped_non_objects = 0
        self.rows = 0  # rows kept so far
        self.meta_rows: list[int] = []  # rows with NCCL metadata, and their values
        self.meta_values: list[_CommValues] = []
        # cuda_sync rows that name the record they waited on: (row, corr id, stream)
        self.waits: list[tuple[int, int, int]] = []
        # Shape arguments: the `OpArgs` columns filled piece by piece (value ids global; rows,
        # sequence numbers and thread ids int32 while they fit), and the raw texts the ids
        # index, interned across pieces.
        self.op_parts: dict[str, _Growing] = {
            k: _Growing(t, narrow=True) for k, t in _OP_COLUMNS.items()
        }
        self.op_index: dict[bytes, int] = {}  # text -> id; its keys in id order are the texts

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
        marked = [i for i, e in enumerate(events) if e.args.collective_name or e.cat == "cuda_sync"]
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
            return _int64_array([getattr(a, key) for a in args])

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
        sync = cols["kind"] == EventKind.SYNC
        self._finish(cols, [(r, text, bool(sync[r])) for r, text in meta], _piece_ops(args))

    def add_scanned(self, scanned: _fastscan.Scanned) -> None:
        """Take the columns of the C scanner (`_scan.c`), mapping its local ids to ours."""
        self.seen += scanned.seen
        phase = scanned.column("phase", np.int8)
        if phase.shape[0] == 0:
            return
        texts = scanned.strings
        # Local string id -> ours, for the ids the piece's rows use (-1, none: the last slot);
        # a piece's table holds its names and categories alike (tens of thousands of Python
        # frames' names on a with_stack trace): one list per column, set in one assignment.
        local_cat = scanned.column("cat", np.int32)
        used = _used_ids(len(texts), local_cat)
        cat_kind = np.zeros(len(texts) + 1, dtype=np.int8)
        cat_kind[used] = [self.kinds[texts[i] if i >= 0 else ""] for i in used]
        local_name = scanned.column("name", np.int32)
        name_map = np.full(len(texts) + 1, -1, dtype=np.int32)
        used = _used_ids(len(texts), local_name)
        name_map[used] = [self.names[texts[i] if i >= 0 else ""] for i in used]
        c_derive = _fastscan.DERIVE_AVAILABLE
        # The flow arrows' rows: for their labels, and where numpy derives their ids.
        flow = (
            (phase != FlowPhase.COMPLETE) & (phase != FlowPhase.INSTANT)
            if scanned.labels or not c_derive
            else None
        )
        # Map only the labels kept rows use, so that both decode paths know the same labels.
        label_ids = np.full(len(scanned.labels) + 1, NO_ID, dtype=np.int64)
        if scanned.labels and flow is not None:
            labels = [scanned.column("pid_label", np.int32), scanned.column("tid_label", np.int32)]
            if flow.any():
                labels.append(scanned.column("id_label", np.int32)[flow])
            for local in _used_ids(len(scanned.labels), *labels):
                if local >= 0:
                    label_ids[local] = self.ids[scanned.labels[local]]
        derived = None
        if c_derive:
            # One pass in C over the piece's own columns (written over): kinds, name ids,
            # pids and tids, flow ids, devices, streams and the rest `_derive` finds in numpy.
            derived = _fastscan.derive(
                scanned, cat_kind, name_map, label_ids, _GPU_SIDE_KINDS, _DERIVE_CONSTANTS
            )

        def ident(key: str) -> I64:
            value = scanned.column(key, np.int64)
            if not scanned.labels or derived is not None:  # no labels, or resolved by C
                return value
            label = scanned.column(f"{key}_label", np.int32)
            return np.where(label >= 0, label_ids[label], value)

        correlation = scanned.column("correlation", np.int64)
        if derived is None and flow is not None and flow.any():
            correlation = np.where(flow, ident("id"), correlation)
        pid, tid = ident("pid"), ident("tid")
        meta_rows = scanned.column("meta_row", np.int64)
        sync = cat_kind[local_cat[meta_rows]] == EventKind.SYNC  # the category's kind
        meta = list(zip(meta_rows.tolist(), scanned.meta_args, sync.tolist(), strict=True))
        op_row = scanned.column("op_row", np.int64)
        ops = None
        if op_row.shape[0]:
            ids = tuple(scanned.column(k, np.int32) for k in _OP_ID_COLUMNS)
            seq, fwd = scanned.column("op_seq", np.int64), scanned.column("op_fwd", np.int64)
            ops = _PieceOps(op_row, ids, seq, fwd, scanned.op_values)
        if derived is None:
            kind, name_id = cat_kind[local_cat], name_map[local_name]
        else:
            kind, name_id = derived.kind, scanned.column("name", np.int32)
        cols: dict[str, npt.NDArray[Any]] = {
            "kind": kind,
            "phase": phase,
            "ts_ns": scanned.column("ts", np.int64),
            "dur_ns": scanned.column("dur", np.int64),
            "name_id": name_id,
            "pid": pid,
            "tid": tid,
            "correlation": correlation,
            "external_id": scanned.column("ext", np.int64),
        }
        for key in ("device", "stream", "bytes", "total_allocated", "total_reserved"):
            cols[key] = scanned.column(key, np.int64)
        if derived is None or derived.bad:
            cols["bad"] = scanned.column("has_ts", np.int8) == 0
        if derived is None:
            cols["dur_ns"] = cols["dur_ns"].copy()  # written over by `_derive`
            cols["external_id_lower"] = scanned.column("ext_lower", np.int64)
            for key in ("alloc_bytes", "device_id", "device_type"):
                cols[key] = scanned.column(key, np.int64)
        else:
            self._note_negative(derived.negative, derived.first_negative, cols)
        fits = None if derived is None else derived.fits_int32
        self._finish(cols, meta, ops, derived is not None, fits)

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

    def _finish(
        self,
        c: dict[str, npt.NDArray[Any]],
        meta: list[tuple[int, bytes, bool]],
        ops: _PieceOps | None = None,
        derived: bool = False,
        fits_int32: dict[str, bool] | None = None,
    ) -> None:
        """Shared last step of both decode paths: derive, validate and store one piece.

        `meta` lists (row in the piece, args text, whether the row's category is a sync's) of
        the rows whose args have a `"Collective name"` key or name the record a sync waited
        on; `ops` holds the shape arguments of the piece's rows. `derived`: the columns are
        derived already (`_fastscan.derive`, which noted the negative lengths), and a `"bad"`
        column is given only where the piece has bad times. `fits_int32`: whether int32 holds
        each of some id columns (`derive` found it), not to be found again.
        """
        phase = c["phase"]
        bad = c.pop("bad", None)
        if bad is not None:
            # An end past int64 nanoseconds (ts + dur beyond some 292 years) is no valid
            # time: row by row only where the largest start and length could reach it.
            ts_ns, dur_ns = c["ts_ns"], c["dur_ns"]
            if ts_ns.shape[0] and int(ts_ns.max()) + max(int(dur_ns.max()), 0) > _INT64_MAX:
                bad |= ts_ns > np.subtract(_INT64_MAX, np.maximum(dur_ns, 0))
            bad &= phase == FlowPhase.COMPLETE  # a flow arrow needs no time
        if bad is not None and bad.any():
            self.bad_time += int(bad.sum())
            keep = ~bad
            c = {k: v[keep] for k, v in c.items()}
            fits_int32 = None  # found over every row: the rows kept may fit where they did not
            phase = c["phase"]
            new_row = np.cumsum(keep) - 1
            if meta:
                new_rows = new_row.tolist()
                meta = [(new_rows[r], a, sync) for r, a, sync in meta if keep[r]]
            if ops is not None:
                ops = ops.take(keep[ops.row])
                ops = ops._replace(row=new_row[ops.row])
        for r, text, sync in meta:
            values = _comm_values(text)
            if values is not None:
                self.meta_rows.append(self.rows + r)
                self.meta_values.append(values)
            elif sync and (wait := _wait_values(text)) is not None:
                self.waits.append((self.rows + r, *wait))
        if ops is not None and ops.row.shape[0]:
            self._add_ops(ops)
        if not derived:
            c = self._derive(c)
        fits = fits_int32 or {}
        for key, part in self.parts.items():
            part.append(c[key], fits.get(key))
        for key, sparse in self.sparse.items():
            sparse.append(c[key])
        self.rows += int(phase.shape[0])

    def _derive(self, c: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """The columns of a piece from the fields as read (what `_fastscan.derive` does in C).

        Notes the piece's negative lengths; `dur_ns` is written over.
        """
        phase = c["phase"]
        kind, dur_ns = c["kind"], c["dur_ns"]
        kind[(phase != FlowPhase.COMPLETE) & (phase != FlowPhase.INSTANT)] = EventKind.FLOW
        memory = phase == FlowPhase.INSTANT
        kind[memory] = EventKind.MEMORY
        negative = np.flatnonzero(dur_ns < 0)
        self._note_negative(negative.size, int(negative[0]) if negative.size else -1, c)
        dur_ns[phase != FlowPhase.COMPLETE] = 0
        gpu_side = _GPU_SIDE_KINDS[kind.view(np.uint8)]
        device, stream = c["device"], c["stream"]
        device = np.where(gpu_side, np.where(device != NO_ID, device, c["pid"]), NO_ID)
        cuda_memory = memory & (c["device_type"] == _CUDA_DEVICE_TYPE)
        c["device"] = np.where(cuda_memory, c["device_id"], device)
        c["stream"] = np.where(gpu_side, np.where(stream != NO_ID, stream, c["tid"]), NO_ID)
        ext = c["external_id"]
        c["external_id"] = np.where(ext != NO_ID, ext, c["external_id_lower"])
        c["bytes"] = np.where(memory, c["alloc_bytes"], c["bytes"])
        return c

    def _note_negative(self, count: int, first: int, c: dict[str, npt.NDArray[Any]]) -> None:
        """Note a piece's `count` rows of negative length, the first of them at row `first`."""
        if count:
            name_id, ts_ns = c["name_id"], c["ts_ns"]
            self.negative.append((self._name(int(name_id[first])), int(ts_ns[first])))
            self.negative.extend([("", 0)] * (count - 1))

    def _add_ops(self, ops: _PieceOps) -> None:
        """Store one piece's shape arguments, its value ids made global.

        Both decode paths number a piece's texts in the order of their first use by a kept row
        (row by row, dims, types, strides, concrete), so mapping them in local-id order gives
        both the same `values`. A text only rows dropped for a bad time used is not kept.
        """
        # -1 (absent) indexes the last slot of `lut`, which stays NO_ID
        lut = np.full(len(ops.values) + 1, NO_ID, dtype=np.int32)
        used = _used_ids(len(ops.values), *ops.ids)
        if used and used[0] < 0:
            del used[0]
        # A text's id is its place in the order of first sight: new texts take the next ids.
        index, texts = self.op_index, ops.values
        lut[used] = [index.setdefault(texts[local], len(index)) for local in used]
        parts = self.op_parts
        parts["row"].append(ops.row + self.rows)
        for key, local in zip(("dims", "types", "strides", "concrete"), ops.ids, strict=True):
            parts[key].append_looked_up(lut, local)
        parts["sequence"].append(ops.seq)  # copied into the column: no view of the piece's
        parts["fwd_tid"].append(ops.fwd)

    def _name(self, name_id: int) -> str:
        for name, nid in self.names.items():
            if nid == name_id:
                return name
        return ""

    def capacity(self) -> int:
        """Rows the columns hold room for."""
        return self.parts["kind"].capacity()

    def expect(self, rows: int, filled: int = 0) -> None:
        """Make room for `rows` rows in all: each column grows once, not piece by piece.

        The memory of the first `filled` rows (those the caller expects to be written) is made
        resident at once (`make_resident`), up to half the memory the process may still use.
        The shape arguments' columns get room for their share of those rows so far.
        """
        if not memory_kept():  # a user's process: their memory, nothing made resident
            filled = 0
        elif filled:  # no more than half the memory the process may still use
            row_bytes = sum(np.dtype(p.dtype).itemsize for p in self.parts.values())
            filled = min(filled, available_memory_bytes() // 2 // row_bytes)
        for part in self.parts.values():
            part.reserve(rows, filled)
        op_rows = self.op_parts["row"].n
        if op_rows and self.rows:
            for part in self.op_parts.values():
                part.reserve(rows * op_rows // self.rows, filled * op_rows // self.rows)

    def column(self, key: str) -> npt.NDArray[Any]:
        """One whole column, every piece in order."""
        return self.parts[key].array()

    def take_column(self, key: str) -> npt.NDArray[Any]:
        """`column`, the store forgetting it: the column is held once, by the caller."""
        return self.parts[key].take()

    def take_sparse(self, key: str) -> SparseColumn:
        """A column of `SPARSE_COLUMNS`, the store forgetting it."""
        return self.sparse[key].take()


class _Sparse:
    """A column few rows have, filled piece by piece: the rows with a value and the values."""

    def __init__(self) -> None:
        self.n = 0
        self.rows: list[npt.NDArray[np.int64]] = []
        self.values: list[npt.NDArray[np.int64]] = []

    def append(self, values: npt.NDArray[Any]) -> None:
        at = np.flatnonzero(values != NO_ID)
        if at.shape[0]:
            self.rows.append(at.astype(np.int64) + self.n)
            self.values.append(values[at].astype(np.int64))
        self.n += int(values.shape[0])

    def take(self) -> SparseColumn:
        out = SparseColumn(self.n, _joined(self.rows, np.int64), _joined(self.values, np.int64))
        self.n, self.rows, self.values = 0, [], []
        return out


_INT64_MAX = np.iinfo(np.int64).max


class _Growing:
    """One column filled piece by piece into a buffer reserved ahead (`reserve`).

    Concatenating the pieces at the end held every column twice at once and wrote each into
    freshly faulted memory; pieces copied into a buffer as they come are freed (and their
    memory reused) piece by piece. Room the estimate reserved beyond the rows is never
    touched, so it is address space, not memory. Without a reservation, or past it, the
    buffer grows by half at a time.

    A `narrow` int64 column is held as int32 until the first piece with a value beyond it, and
    as int64 from then on (the rows so far copied over once).

    A column whose every row holds one value (the allocator totals of a trace recorded
    without `profile_memory`, a single process's pid) holds no buffer at all: it counts rows
    until a piece brings another value, and is given out as that value broadcast, read-only.
    """

    def __init__(self, dtype: type[np.generic], narrow: bool = False) -> None:
        self.narrow = narrow and dtype is np.int64  # held as int32 for now
        self.dtype: type[np.generic] = np.int32 if self.narrow else dtype
        self.buf: npt.NDArray[Any] = np.zeros(0, dtype=self.dtype)
        self.n = 0
        self.room = 0  # rows reserved, held in `buf` once it is in use
        self.same: Any = None  # the one value of every row so far, while `buf` is unused

    def capacity(self) -> int:
        """Rows reserved."""
        return max(self.room, int(self.buf.shape[0]))

    def reserve(self, rows: int, filled: int = 0) -> None:
        """Room for `rows` rows; a projection the system will not map is left to `append`.

        A new buffer's first `filled` rows are made resident before the rows so far are
        copied in (`make_resident`): one call, not a page fault per page as they are written.
        """
        self.room = max(self.room, rows)
        if self.same is not None or self.n == 0:
            return  # one value so far, or no piece yet to decide whether a buffer is needed
        if rows > self.buf.shape[0]:
            with contextlib.suppress(MemoryError, ValueError):  # ValueError: too big to map
                self._resize(rows, filled)

    def _resize(self, rows: int, filled: int = 0) -> None:
        buf = np.empty(rows, dtype=self.dtype)
        if filled > self.n:
            make_resident(buf.ctypes.data, min(filled, rows) * buf.itemsize)
        buf[: self.n] = self.buf[: self.n]
        self.buf = buf

    def append(self, values: npt.NDArray[Any], fits_int32: bool | None = None) -> None:
        """The piece's `values` after the rows so far (`fits_int32`: known, not looked for)."""
        end = self.n + values.shape[0]
        if values.shape[0] == 0:
            return
        if self.narrow and not (_fits_int32(values) if fits_int32 is None else fits_int32):
            self._widen()
        if self.n == 0 or self.same is not None:
            first = values[0]
            if (self.n == 0 or first == self.same) and bool((values == first).all()):
                self.same, self.n = first, end
                return
            self._spread()
        if end > self.buf.shape[0]:
            self._grow(end)
        self.buf[self.n : end] = values
        self.n = end

    def append_looked_up(self, table: npt.NDArray[Any], ids: npt.NDArray[np.int32]) -> None:
        """`append(table[ids])` (an id of -1 takes the last slot), looked up into the buffer.

        Straight into the buffer in use (np.take, some 2.5 times faster than `table[ids]`,
        which first copies the ids to intp); the first piece, or while every row holds one
        value, through `append`.
        """
        end = self.n + ids.shape[0]
        if self.n == 0 or self.same is not None or table.dtype != self.dtype:
            self.append(np.take(table, ids))
            return
        if end > self.buf.shape[0]:
            self._grow(end)
        np.take(table, ids, out=self.buf[self.n : end], mode="wrap")  # unbuffered: in range
        self.n = end

    def _grow(self, rows: int) -> None:
        """Room for at least `rows`: the reservation where it is more, else half as much again."""
        if self.room > rows:
            with contextlib.suppress(MemoryError, ValueError):  # ValueError: too big to map
                self._resize(self.room)
                return
        self._resize(max(rows, self.buf.shape[0] * 3 // 2, 1024))

    def _widen(self) -> None:
        """int64 from here on: the buffer in use (its reserved room kept) copied over."""
        self.dtype, self.narrow = np.int64, False
        if self.same is None:
            buf = np.empty(self.buf.shape[0], dtype=self.dtype)
            buf[: self.n] = self.buf[: self.n]
            self.buf = buf
        else:
            self.buf = np.zeros(0, dtype=self.dtype)

    def _spread(self) -> None:
        """Into a buffer: the rows so far, all `same`, written out."""
        same, self.same = self.same, None
        n, self.n = self.n, 0  # the buffer holds none of them yet
        if n:
            self._grow(n)
            self.buf[:n] = same
        self.n = n

    def array(self) -> npt.NDArray[Any]:
        if self.same is not None:
            return np.broadcast_to(np.asarray(self.same, dtype=self.dtype), (self.n,))
        return self.buf[: self.n]

    def take(self) -> npt.NDArray[Any]:
        out = self.array()
        self.buf, self.n, self.room, self.same = np.zeros(0, dtype=self.dtype), 0, 0, None
        return out


_INT32 = np.iinfo(np.int32)

# Whether each kind (an int8, indexed as its byte) is recorded on the GPU: a table lookup per
# row instead of np.isin's sort.
_GPU_SIDE_KINDS = np.zeros(256, dtype=np.bool_)
_GPU_SIDE_KINDS[np.asarray(_GPU_SIDE, dtype=np.int8).view(np.uint8)] = True
# The values `_fastscan.derive` needs: complete and instant phases, flow and memory kinds, the
# device type of a GPU's memory.
_DERIVE_CONSTANTS = (
    int(FlowPhase.COMPLETE), int(FlowPhase.INSTANT), int(EventKind.FLOW), int(EventKind.MEMORY),
    _CUDA_DEVICE_TYPE,
)  # fmt: skip


def _fits_int32(values: npt.NDArray[Any]) -> bool:
    """Whether int32 holds every one of the (integer) `values`."""
    if values.dtype.itemsize <= 4:
        return True
    return bool(_INT32.min <= int(values.min()) and int(values.max()) <= _INT32.max)


def _joined(parts: list[npt.NDArray[Any]], dtype: type[np.generic]) -> npt.NDArray[Any]:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def _op_args(columns: _Columns) -> OpArgs | None:
    """The sparse table of shape arguments; None when no row has any. Takes the columns."""
    parts = columns.op_parts
    if parts["row"].n == 0:
        return None
    table = {key: _op_column(part) for key, part in parts.items()}
    return OpArgs(**table, values=list(columns.op_index))


def _op_column(part: _Growing) -> npt.NDArray[Any]:
    """An id column of the shape-argument table, taken from its store, held small.

    One that is `NO_ID` on every row (strides and concrete inputs before PyTorch 2.1 recorded
    them) as that one value broadcast (read-only, no buffer); any other single value written
    out. int32 where every value fits (rows, sequence numbers and thread ids do: the store
    holds them so), else int64.
    """
    if part.same is not None and part.same != NO_ID:
        return np.full(part.n, part.same, dtype=part.dtype)
    return part.take()


def _sync_waits(columns: _Columns) -> SyncWaits | None:
    """The sparse table of the records cuda_sync rows waited on; None when none names one."""
    if not columns.waits:
        return None
    table = np.array(columns.waits, dtype=np.int64)
    return SyncWaits(
        row=table[:, 0].copy(),
        record_correlation=table[:, 1].copy(),
        record_stream=table[:, 2].copy(),
    )


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
