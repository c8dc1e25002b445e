"""The columnar Trace model: one row per event, typed numpy columns, integer nanoseconds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from badput.trace._limits import NAME_MATCH_CHARS

__all__ = [
    "NO_ID",
    "CommMeta",
    "EventKind",
    "FlowPhase",
    "OpArgs",
    "SparseColumn",
    "SyncWaits",
    "Trace",
    "name_head",
]

I64 = npt.NDArray[np.int64]
#: An id column (pid, tid, device, stream, correlation, external_id): int32 where every
#: value fits (the Kineto reader's choice), else int64. Widen before arithmetic that may pass
#: int32 (keys built from ids and times).
Ids = npt.NDArray[np.signedinteger[Any]]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

#: Value of an integer column where the event has no such field.
NO_ID = -1


class EventKind(IntEnum):
    """What an event is; the Kineto categories behind each are in `trace/kineto.py`."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    CPU_OP = 3
    RUNTIME = 4
    DRIVER = 5
    ANNOTATION = 6
    GPU_ANNOTATION = 7
    PYTHON = 8
    SYNC = 9
    FLOW = 10
    OTHER = 11
    MEMORY = 12  # a caching-allocator event (Kineto's "[memory]" instant events)


def name_head(name: str) -> str:
    """The part of a name that name matching looks at: its first `NAME_MATCH_CHARS` characters.

    Names are kept whole in traces and reports; only what the classifiers (the regexes over
    kernel, range and API names) read is bounded, so that a hostile 50 MB name costs what a
    4 KB one does. Every name predicate goes through this (`Trace.name_mask` applies it).
    """
    # A slice that covers the whole string returns the string itself: no copy for real names.
    return name[:NAME_MATCH_CHARS]


#: Kinds that occupy a GPU engine.
GPU_ACTIVITY_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)


class FlowPhase(IntEnum):
    """Chrome-trace phase of a row: a complete event or one end of a flow arrow."""

    COMPLETE = 0
    FLOW_START = 1
    FLOW_END = 2
    FLOW_STEP = 3
    INSTANT = 4


@dataclass(frozen=True, eq=False)
class CommMeta:
    """NCCL metadata of the rows that carry it: a sparse side table of a `Trace`.

    Newer Kineto traces (PyTorch 2.x, `saveNcclMeta` in `profiler_kineto.cpp`) put the
    collective's parameters into the `args` of NCCL kernels and of the CPU ops that launch them:
    `"Collective name"`, `"In msg nelems"`, `"Out msg nelems"`, `"Group size"`, `"dtype"`,
    `"Process Group Name"`. Only rows with a `"Collective name"` are listed, in row order.

    Attributes:
        row: the Trace row of each entry, ascending.
        collective: index into `strings` of `"Collective name"` (`"allreduce"`, `"send"`, ...).
        in_nelems: `"In msg nelems"`, input elements; `NO_ID` when absent.
        out_nelems: `"Out msg nelems"`, output elements; `NO_ID` when absent.
        group_size: `"Group size"`, ranks in the process group; `NO_ID` when absent.
        dtype: index into `strings` of `"dtype"` (a c10 ScalarType name, `"Float"`,
            `"BFloat16"`, ...); `NO_ID` when absent.
        process_group: index into `strings` of `"Process Group Name"`; `NO_ID` when absent.
        strings: the interned string values.
    """

    row: I64
    collective: I32
    in_nelems: I64
    out_nelems: I64
    group_size: I64
    dtype: I32
    process_group: I32
    strings: list[str]

    def __len__(self) -> int:
        """Number of rows with metadata."""
        return int(self.row.shape[0])

    @staticmethod
    def empty() -> CommMeta:
        """A table without rows."""
        i64, i32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
        return CommMeta(i64, i32, i64, i64, i64, i32, i32, [])

    def string(self, index: int) -> str | None:
        """The string of an index into `strings`; None for `NO_ID`."""
        return self.strings[index] if index >= 0 else None


@dataclass(frozen=True, eq=False)
class SyncWaits:
    """Which `cudaEventRecord` each event wait waited on: a sparse side table of a `Trace`.

    Kineto writes, in the args of its `Event Sync` and `Stream Wait Event` cuda_sync rows,
    `"wait_on_cuda_event_record_corr_id"` (the correlation id of the record call) and
    `"wait_on_stream"` (the stream the event was recorded on). Only cuda_sync rows with at
    least one of them are listed, in row order.

    Attributes:
        row: the Trace row of each entry, ascending.
        record_correlation: the record call's correlation id, `NO_ID` where absent.
        record_stream: the stream the event was recorded on, `NO_ID` where absent.
    """

    row: I64
    record_correlation: I64
    record_stream: I64

    def __len__(self) -> int:
        """Number of rows."""
        return int(self.row.shape[0])


#: Longest raw args value `OpArgs.value` decodes; a longer one is no shape list of a real op.
MAX_OP_ARG_BYTES = 1 << 20
_decode_value = msgspec.json.Decoder().decode


@dataclass(frozen=True, eq=False)
class OpArgs:
    """The shape arguments of the rows that carry them: a sparse side table of a `Trace`.

    PyTorch profiles recorded with `record_shapes=True` put, in the args of each `cpu_op`,
    `"Input Dims"` (one shape per argument), `"Input type"` (one dtype string per argument),
    `"Input Strides"` and `"Concrete Inputs"` (the values of non-tensor arguments); ops that
    autograd records also carry `"Sequence number"` and `"Fwd thread id"`. The reader keeps
    the raw JSON text of the four lists, interned (a training loop repeats a few thousand
    distinct texts millions of times), and decodes a text only when an analysis asks for it
    (`value`), once.

    Only rows whose args hold at least one of these keys are listed, in row order. The reader
    holds the integer columns small: int32 where every value fits, and a column that is
    `NO_ID` on every row as that one value broadcast (read-only).

    Attributes:
        row: the Trace row of each entry, ascending.
        dims: index into `values` of `"Input Dims"`; `NO_ID` when absent.
        types: index into `values` of `"Input type"`; `NO_ID` when absent.
        strides: index into `values` of `"Input Strides"`; `NO_ID` when absent.
        concrete: index into `values` of `"Concrete Inputs"`; `NO_ID` when absent.
        sequence: `"Sequence number"`; `NO_ID` when absent.
        fwd_tid: `"Fwd thread id"`; `NO_ID` when absent.
        values: the interned raw JSON texts, as they appear in the file.
    """

    row: Ids
    dims: I32
    types: I32
    strides: I32
    concrete: I32
    sequence: Ids
    fwd_tid: Ids
    values: list[bytes]
    # init=False: a copy (`dataclasses.replace`, as redaction makes) starts with an empty
    # cache, never the decoded values of the texts it replaced.
    _decoded: dict[int, object] = field(default_factory=dict, init=False, repr=False)

    def __len__(self) -> int:
        """Number of rows with shape arguments."""
        return int(self.row.shape[0])

    @staticmethod
    def empty() -> OpArgs:
        """A table without rows."""
        i64, i32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
        return OpArgs(i64, i32, i32, i32, i32, i64, i64, [])

    def value(self, index: int) -> object:
        """The decoded JSON value of `values[index]`, cached; None for `NO_ID`.

        A text that is not JSON, or longer than `MAX_OP_ARG_BYTES`, decodes to None: a
        hostile trace gets no model for that op, never an error.
        """
        if index < 0 or index >= len(self.values):
            return None
        cache = self._decoded
        if index in cache:
            return cache[index]
        raw = self.values[index]
        value: object = None
        if len(raw) <= MAX_OP_ARG_BYTES:
            try:
                value = _decode_value(raw)
            except (msgspec.DecodeError, RecursionError, MemoryError):
                value = None
        cache[index] = value
        return value

    def entries_of(self, rows: Ids) -> npt.NDArray[np.intp]:
        """Index into this table of each of `rows` (Trace rows), -1 where a row has none."""
        return _index_of(self.row, rows)


def _index_of(sorted_rows: Ids, rows: Ids) -> npt.NDArray[np.intp]:
    """Index in `sorted_rows` (ascending, unique) of each of `rows`, -1 where it is not."""
    if sorted_rows.shape[0] == 0:
        return np.full(rows.shape, -1, dtype=np.intp)
    keys = rows
    if sorted_rows.dtype.itemsize < rows.dtype.itemsize:
        # Searched in the table's own type (numpy would copy the whole table to the wider
        # one): a row past its range is clipped to the nearest, then fails the compare below.
        info = np.iinfo(sorted_rows.dtype)
        keys = np.clip(rows, info.min, info.max).astype(sorted_rows.dtype)
    at = np.minimum(np.searchsorted(sorted_rows, keys), sorted_rows.shape[0] - 1)
    return np.where(sorted_rows[at] == rows, at, -1).astype(np.intp)


@dataclass(frozen=True, eq=False)
class SparseColumn:
    """An integer column that few rows have: those rows and their values, `NO_ID` elsewhere.

    The allocator's totals are on memory events alone (none in most traces, a tenth of the
    rows in a `profile_memory=True` one): a full column of them was 8 bytes per row of the
    trace, held for the trace's life.

    Attributes:
        n: rows of the whole column (the trace's rows).
        rows: the rows with a value, ascending.
        values: their values.
    """

    n: int
    rows: I64
    values: I64

    def __len__(self) -> int:
        """Rows of the whole column."""
        return self.n

    def at(self, rows: npt.ArrayLike) -> I64:
        """The values of `rows` (any order), `NO_ID` where a row has none."""
        i = _index_of(self.rows, np.asarray(rows, dtype=np.int64))
        if self.rows.shape[0] == 0:
            return np.full(i.shape, NO_ID, dtype=np.int64)
        return np.where(i >= 0, self.values[i], NO_ID).astype(np.int64)

    def dense(self) -> I64:
        """The whole column: a new array of `n` rows."""
        out = np.full(self.n, NO_ID, dtype=np.int64)
        out[self.rows] = self.values
        return out

    @staticmethod
    def of(column: npt.ArrayLike) -> SparseColumn:
        """The sparse form of a whole column (`NO_ID` where a row has no value)."""
        column = np.asarray(column, dtype=np.int64)
        rows = np.flatnonzero(column != NO_ID).astype(np.int64, copy=False)
        return SparseColumn(int(column.shape[0]), rows, column[rows])


@dataclass(frozen=True, eq=False)
class Trace:
    """Events of one trace file as parallel columns (one row per event).

    Times are integer nanoseconds on the trace's own clock. Integer columns hold `NO_ID` where
    an event lacks the field. Names are interned: `names[name_id[i]]` is row i's name. The id
    columns (pid, tid, device, stream, correlation, external_id: `Ids`) may be int32, half the
    memory, where every value fits; times and lengths are int64. Columns few rows have (byte
    counts, allocator totals) are `SparseColumn`s.

    Attributes:
        path: the file the trace came from.
        kind: `EventKind` per row.
        phase: `FlowPhase` per row.
        ts_ns: start time.
        dur_ns: duration (0 for flow rows).
        name_id: index into `names`.
        pid: process id for host rows; for GPU rows what Kineto put there (usually the device).
        tid: thread id for host rows; for GPU rows what Kineto put there (usually the stream).
            Non-numeric labels become negative ids (see `labels`).
        device: GPU index for GPU rows (`args.device`, else pid) and CUDA memory rows
            (`args["Device Id"]`), `NO_ID` for host rows.
        stream: CUDA stream for GPU rows (`args.stream`, else tid), else `NO_ID`.
        correlation: launch correlation id (flow id for flow rows), else `NO_ID`.
        external_id: the op id linking GPU work to the CPU op that launched it, else `NO_ID`.
        byte_counts: bytes moved by a memcpy/memset (`args.bytes`); for a memory row the
            bytes allocated (> 0) or freed (< 0); `NO_ID` on other rows (`SparseColumn`: few
            rows have one); `bytes` is the whole column.
        allocated_totals: allocator's allocated bytes after each memory row (`SparseColumn`);
            `total_allocated` is the whole column.
        reserved_totals: allocator's reserved bytes after each memory row (`SparseColumn`);
            `total_reserved` is the whole column.
        names: interned event names.
        labels: non-numeric pid/tid labels; label `labels[k]` has id `-(k + 2)`.
        rank: `distributedInfo.rank`, None when the trace has none.
        world_size: `distributedInfo.world_size`, None when the trace has none.
        gpu_names: device index -> GPU model name from `deviceProperties`.
        base_time_ns: `baseTimeNanoseconds` of newer Kineto traces: their times are relative
            to it, so the Unix epoch time of a row is `base_time_ns + ts_ns`. None when the
            trace has none (older traces write epoch microseconds directly).
        versions: software versions the trace records ("cuda_runtime", "cuda_driver" as
            "12.4"), from newer Kineto traces' top-level keys; empty when it has none.
        comm_meta: NCCL metadata (`CommMeta`) of the rows whose args carry a
            `"Collective name"`; None when no row does (traces before PyTorch 2.1).
        op_args: shape arguments (`OpArgs`) of the ops recorded with `record_shapes=True`;
            None when no row has any (or the reader, nsys, has none to give).
        sync_waits: the records Kineto's event waits waited on (`SyncWaits`); None when no
            cuda_sync row names one (older traces, nsys).
        warnings: what the reader noticed but could read past (partial data, odd fields).
    """

    path: str
    kind: I8
    phase: I8
    ts_ns: I64
    dur_ns: I64
    name_id: I32
    pid: Ids
    tid: Ids
    device: Ids
    stream: Ids
    correlation: Ids
    external_id: Ids
    byte_counts: SparseColumn
    allocated_totals: SparseColumn
    reserved_totals: SparseColumn
    names: list[str]
    labels: list[str] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    gpu_names: dict[int, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    base_time_ns: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    comm_meta: CommMeta | None = None
    op_args: OpArgs | None = None
    sync_waits: SyncWaits | None = None

    def __len__(self) -> int:
        """Number of rows."""
        return int(self.kind.shape[0])

    @property
    def bytes(self) -> I64:
        """Bytes of each copy, memset or memory row, else `NO_ID`: a new array per call.

        `byte_counts` holds just the rows that have one.
        """
        return self.byte_counts.dense()

    @property
    def total_allocated(self) -> I64:
        """Allocated bytes after each memory row, else `NO_ID`: a new array per call.

        `allocated_totals` holds just the rows that have one.
        """
        return self.allocated_totals.dense()

    @property
    def total_reserved(self) -> I64:
        """Reserved bytes after each memory row, else `NO_ID`: a new array per call.

        `reserved_totals` holds just the rows that have one.
        """
        return self.reserved_totals.dense()

    @property
    def end_ns(self) -> I64:
        """End time of each row (`ts_ns + dur_ns`): a new array per call.

        Not kept: a row-sized column that a few analyses need briefly (each takes it once).
        """
        end: I64 = self.ts_ns + self.dur_ns
        return end

    def end_of(self, rows: npt.NDArray[np.integer]) -> I64:
        """End time (`ts_ns + dur_ns`) of the rows given by index: no row-sized array made."""
        end: I64 = self.ts_ns[rows]
        end += self.dur_ns[rows]
        return end

    def spans_of(self, rows: npt.NDArray[np.integer]) -> tuple[I64, I64]:
        """(start, end) of the rows given by index: `ts_ns[rows]` and `end_of(rows)`.

        The start is gathered once for both.
        """
        start: I64 = self.ts_ns[rows]
        end: I64 = start + self.dur_ns[rows]
        return start, end

    def mask(self, *kinds: EventKind) -> npt.NDArray[np.bool_]:
        """Boolean row mask of the rows whose kind is one of `kinds`."""
        out = np.zeros(len(self), dtype=np.bool_)
        for k in kinds:  # a comparison per kind: many times faster than np.isin here
            out |= self.kind == int(k)
        return out

    def rows_named(
        self, rows: npt.NDArray[np.intp], predicate: Callable[[str], bool]
    ) -> npt.NDArray[np.intp]:
        """The rows whose name satisfies `predicate`, tested once per distinct name.

        `predicate` sees each name's `name_head`, as in `name_mask`.
        """
        ids = self.name_id[rows]  # gathered once: rows may be millions
        return rows[self._used_name_mask(predicate, ids)[ids]]

    def name_mask(
        self, predicate: Callable[[str], bool], rows: npt.NDArray[np.intp] | None = None
    ) -> npt.NDArray[np.bool_]:
        """`predicate` of every interned name, indexable by `name_id`.

        The predicate sees each name's `name_head` (its first `NAME_MATCH_CHARS` characters):
        a regex search over a 50 MB name would otherwise take seconds per predicate. With
        `rows`, only the names those rows use are tested (the others are False): the kernels'
        hundred names, not the thousands of the ops and steps beside them.
        """
        if rows is None:
            return np.fromiter(
                (bool(predicate(name_head(n))) for n in self.names),
                dtype=np.bool_,
                count=len(self.names),
            )
        return self._used_name_mask(predicate, self.name_id[rows])

    def _used_name_mask(
        self, predicate: Callable[[str], bool], ids: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]:
        """`name_mask` over the names `ids` holds (name ids), tested once each."""
        mask = np.zeros(len(self.names), dtype=np.bool_)
        mask[ids] = True
        used = np.flatnonzero(mask).tolist()
        mask[used] = [bool(predicate(name_head(self.names[i]))) for i in used]
        return mask

    def name_of(self, row: int) -> str:
        """Name of one row."""
        return self.names[int(self.name_id[row])]

    def devices(self) -> list[int]:
        """GPU indices that have GPU activity (kernel, memcpy, memset), ascending."""
        device = self.device[self.mask(*GPU_ACTIVITY_KINDS)]
        if device.shape[0] == 0:
            return []
        lo, hi = int(device.min()), int(device.max())
        if hi - lo > 1 << 20:  # ids far apart: a sort
            return [int(d) for d in np.unique(device)]
        # A count per id in the range (a pass, not a sort of a million activities).
        present = np.flatnonzero(np.bincount((device - lo).astype(np.intp, copy=False)))
        return [int(d) + lo for d in present.tolist()]
