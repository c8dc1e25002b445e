"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`).

Each table becomes rows of the columnar Trace, the way the Kineto reader maps the same CUPTI
records:

- `CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY`, `_MEMSET`: GPU rows with device, stream, correlation
  and bytes. Kernels are named by their templated (demangled) name, memcpys and memsets as
  Kineto names them (`Memcpy HtoD (Pageable -> Device)`, `Memset (Device)`), so the analyses
  and rules treat both sources alike.
- `CUPTI_ACTIVITY_KIND_RUNTIME`: CUDA runtime (and, in newer exports, driver) calls with their
  correlation id; nsys's API version suffix is dropped (`cudaLaunchKernel_v7000` ->
  `cudaLaunchKernel`).
- `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`: SYNC rows (`Stream Sync`, `Event Sync`, ...).
- `NVTX_EVENTS`: push/pop and start/end ranges as host ANNOTATION rows (marks are skipped).
- `OSRT_API`: OS runtime calls as OTHER host rows.

Times stay as nsys writes them: integer nanoseconds from the session start; `base_time_ns` is
the session's UTC start (`TARGET_INFO_SESSION_START_TIME.utcEpochNs`). Process and thread ids
come from nsys's serialized global ids: pid = (id >> 24) & 0xFFFFFF, tid = id & 0xFFFFFF.
GPU rows carry the owning process as pid and the stream as tid.

Columns are read with one SELECT per table, in chunks, straight into numpy; strings are read
once from `StringIds` and interned per distinct id, never per row. Which physical tables and
columns an export has is resolved by `_nsys_schema`, so older exports read the same way.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from badput._text import is_ascii_digits
from badput.errors import TraceFormatError
from badput.trace import _nsys_schema as schema
from badput.trace._files import is_regular_file, require_regular_file
from badput.trace._nsys_schema import MissingColumnError, ResolvedTable
from badput.trace.model import NO_ID, EventKind, FlowPhase, SparseColumn, Trace

__all__ = [
    "NSYS_REPORT_SUFFIXES",
    "PROCESS_MARK",
    "SQLITE_MAGIC",
    "gpu_processes",
    "is_sqlite",
    "process_path",
    "read_nsys",
    "split_process_path",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Nsight Systems report files, which must be exported to SQLite first.
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")

#: Marks one process of a multi-process export in a path: `report.sqlite#pid=4242`.
PROCESS_MARK = "#pid="

_CHUNK_ROWS = 1 << 18
# NVTX event types (ENUM_NSYS_EVENT_TYPE) that are ranges; used when the enum table is absent.
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
# nsys appends the version of the CUDA API that introduced a runtime call: `_v3020`, `_v11030`.
# Driver entry points such as `cuMemAlloc_v2` are real names and keep their suffix.
_API_VERSION = re.compile(r"_v\d{4,}$")
# ENUM_NSYS_EVENT_CLASS: 1 is TRACE_PROCESS_EVENT_CUDA_DRIVER (0 is the runtime).
_DRIVER_CLASS = 1
# Rows that carry a CUPTI correlation id (launching call or the GPU work it launched).
_CORRELATED = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.SYNC,
               EventKind.RUNTIME, EventKind.DRIVER)  # fmt: skip
_NO_STREAM = 0xFFFFFFFF  # streamId of a context-wide synchronization
# Environment variables that tell a process's rank and world size (torchrun, MPI, Slurm).
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
# Digits of a number read from text (a `#pid=` mark, an environment value): 18 fit an int64,
# which is what SQLite compares with, and int() never meets its 4300-digit limit.
_MAX_DIGITS = 18
# Errors a value of the wrong SQLite type raises when it is converted to an integer.
_CONVERSION_ERRORS = (ValueError, TypeError, OverflowError)


def _decimal(text: str) -> int | None:
    """The integer a text of ASCII digits spells, else None.

    (`is_ascii_digits`: `str.isdigit` alone also takes `²` or `٣`.)
    """
    if is_ascii_digits(text) and len(text) <= _MAX_DIGITS:
        return int(text)
    return None


def is_sqlite(path: str) -> bool:
    """Whether a file starts with the SQLite 3 header (False when it cannot be read).

    Only a regular file is opened: reading a FIFO or a device could block forever.
    """
    if not is_regular_file(path):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


@contextmanager
def _connect(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection (the export is never written, not even a journal)."""
    require_regular_file(path)
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise TraceFormatError(path, f"cannot be opened as SQLite ({e})") from None
    try:
        yield conn
    except sqlite3.DatabaseError as e:
        raise TraceFormatError(path, f"not a readable SQLite database ({e})") from None
    except (sqlite3.Error, UnicodeDecodeError, OverflowError) as e:
        # A damaged page can hold text that is not UTF-8 or numbers of the wrong type.
        raise TraceFormatError(
            path, f"damaged export: {type(e).__name__} while reading its tables"
        ) from None
    finally:
        conn.close()


class _Names(dict[str, int]):
    """Name -> dense id, assigning the next id on first sight."""

    def __missing__(self, key: str) -> int:
        value = len(self)
        self[key] = value
        return value

    def ids_of(self, keys: I64, text: Callable[[int], str]) -> I32:
        """Name id of each key, calling `text` once per distinct key."""
        if keys.shape[0] == 0:
            return np.zeros(0, dtype=np.int32)
        uniq, inverse = np.unique(keys, return_inverse=True)
        table = np.array([self[text(k)] for k in uniq.tolist()], dtype=np.int32)
        return table[inverse.reshape(-1)]


class _Reader:
    """Reads the tables of one open export into column parts."""

    def __init__(
        self, path: str, conn: sqlite3.Connection, tables: set[str], pid: int | None = None
    ) -> None:
        self.path = path
        self.conn = conn
        self.tables = tables
        self.pid = pid  # read only this process's rows (None: every process)
        self.names = _Names()
        self.parts: list[dict[str, npt.NDArray[Any]]] = []
        self.warnings: list[str] = []
        self.strings = self._strings()

    # ---- lookups -------------------------------------------------------------------------

    def _strings(self) -> dict[int, str]:
        for table, id_col, value_col in schema.STRING_TABLES:
            if table in self.tables:
                rows = self.conn.execute(
                    f'SELECT "{id_col}", "{value_col}" FROM "{table}" WHERE "{id_col}" IS NOT NULL'
                )
                try:
                    return {int(i): str(v) for i, v in rows}
                except _CONVERSION_ERRORS:
                    raise _not_integers(self.conn, self.path, table, [id_col]) from None
        return {}

    def string(self, key: int) -> str:
        """The string of a StringIds id."""
        if key < 0:
            return ""
        return self.strings.get(key, f"<string {key}>")

    def enum(self, table: str, column: str, default: dict[int, str]) -> dict[int, str]:
        """An ENUM_* table as id -> `column` (name or label); `default` without one."""
        if table not in self.tables or column not in schema.table_columns(self.conn, table):
            return dict(default)
        rows = self.conn.execute(f'SELECT id, "{column}" FROM "{table}" WHERE id IS NOT NULL')
        try:
            return {int(i): str(v) for i, v in rows if v is not None}
        except _CONVERSION_ERRORS:
            raise _not_integers(self.conn, self.path, table, ["id"]) from None

    def resolve(self, spec: schema.TableSpec) -> ResolvedTable | None:
        try:
            return schema.resolve_table(self.conn, self.tables, spec)
        except MissingColumnError as e:
            raise TraceFormatError(
                self.path, f"unknown Nsight Systems export schema: {e}"
            ) from None

    def mine(self, table: ResolvedTable, packed: str, plain: str, where: str = "") -> str:
        """`where`, narrowed to the rows of the process being read (if one is).

        `packed` is the serialized global id column (pid in bits 24-47), `plain` the
        process id column of older exports.
        """
        if self.pid is None:
            return where
        if packed in table.present:
            own = f"(({table.sql[packed]} >> 24) & 16777215) = {int(self.pid)}"
        elif plain in table.present:
            own = f"{table.sql[plain]} = {int(self.pid)}"
        else:
            return where
        return f"{own} AND ({where})" if where else own

    def fetch(
        self, table: ResolvedTable, keys: tuple[str, ...], where: str = "", text: str = ""
    ) -> tuple[dict[str, I64], list[Any]]:
        """The integer columns `keys` of a table as int64 arrays, and the text column `text`.

        Only the columns the file has are selected; a missing one is filled with its default.
        """
        have = tuple(k for k in keys if k in table.present)
        select = have + ((text,) if text and text in table.present else ())
        width = len(have)  # at least start and end: they are required
        cursor = self.conn.execute(table.select(select, where))
        parts: list[I64] = []
        texts: list[Any] = []
        while rows := cursor.fetchmany(_CHUNK_ROWS):
            if len(select) > width:
                columns = list(zip(*rows, strict=True))
                texts.extend(columns[width])
                rows = list(zip(*columns[:width], strict=True))
            try:
                flat = np.fromiter(
                    itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * width
                )
            except _CONVERSION_ERRORS:
                # TEXT, BLOB or REAL where an integer belongs: only now are the columns'
                # types looked at, so a sound export pays nothing for the check.
                names = [table.physical[k] for k in have]
                raise _not_integers(self.conn, self.path, table.table, names, where) from None
            parts.append(flat.reshape(len(rows), width))
        ints = np.concatenate(parts) if parts else np.zeros((0, width), dtype=np.int64)
        n = ints.shape[0]
        by_column = np.ascontiguousarray(ints.T)  # one copy; each row below is a view
        out = {k: by_column[i] for i, k in enumerate(have)}
        for k in keys:
            if k not in out:
                out[k] = np.full(n, int(table.sql[k]), dtype=np.int64)
        if text and text not in table.present:
            texts = [None] * n
        return out, texts

    # ---- tables --------------------------------------------------------------------------

    def add(
        self,
        kind: EventKind | I64,
        start: I64,
        end: I64,
        name_id: I32,
        *,
        pid: I64,
        tid: I64,
        device: I64 | None = None,
        stream: I64 | None = None,
        correlation: I64 | None = None,
        nbytes: I64 | None = None,
    ) -> None:
        n = start.shape[0]
        none = np.full(n, NO_ID, dtype=np.int64)
        kinds = np.full(n, int(kind), dtype=np.int8) if isinstance(kind, EventKind) else kind
        self.parts.append(
            {
                "kind": kinds.astype(np.int8),
                "ts_ns": start,
                "dur_ns": end - start,
                "name_id": name_id,
                "pid": pid,
                "tid": tid,
                "device": none if device is None else device,
                "stream": none if stream is None else stream,
                "correlation": none if correlation is None else correlation,
                "bytes": none if nbytes is None else nbytes,
            }
        )

    def gpu_table(self, key: str) -> bool:
        """Read one GPU activity table; False when the export has none."""
        table = self.resolve(schema.GPU_TABLES[key])
        if table is None:
            return False
        base = ("start", "end", "device", "stream", "correlation", "global_pid", "process")
        extra = {
            "kernel": ("demangled", "short"),
            "memcpy": ("bytes", "copy_kind", "src_kind", "dst_kind"),
            "memset": ("bytes", "mem_kind"),
            "sync": ("sync_type",),
        }[key]
        c, _ = self.fetch(table, base + extra, self.mine(table, "global_pid", "process"))
        pid = _pid(c["global_pid"]) if "global_pid" in table.present else c["process"]
        stream = c["stream"]
        if key == "kernel":
            kind = EventKind.KERNEL
            name_key = np.where(c["demangled"] >= 0, c["demangled"], c["short"])
            name_id = self.names.ids_of(name_key, self.string)
            nbytes = None
        elif key == "memcpy":
            kind = EventKind.MEMCPY
            name_id = self._memcpy_names(c["copy_kind"], c["src_kind"], c["dst_kind"])
            nbytes = c["bytes"]
        elif key == "memset":
            kind = EventKind.MEMSET
            mem_kinds = self.enum("ENUM_CUDA_MEM_KIND", "label", schema.DEFAULT_MEM_KIND)
            name_id = self.names.ids_of(
                c["mem_kind"], lambda k: f"Memset ({mem_kinds.get(k, 'Device')})"
            )
            nbytes = c["bytes"]
        else:
            kind = EventKind.SYNC
            sync = self.enum("ENUM_CUPTI_SYNC_TYPE", "name", {})
            name_id = self.names.ids_of(c["sync_type"], lambda k: _sync_name(sync.get(k), k))
            nbytes = None
            stream = np.where((stream == _NO_STREAM) | (stream < 0), NO_ID, stream)
        self.add(
            kind,
            c["start"],
            c["end"],
            name_id,
            pid=pid,
            tid=stream,
            device=c["device"],
            stream=stream,
            correlation=c["correlation"],
            nbytes=nbytes,
        )
        return True

    def _memcpy_names(self, copy_kind: I64, src: I64, dst: I64) -> I32:
        opers = self.enum("ENUM_CUDA_MEMCPY_OPER", "name", {})
        mem_kinds = self.enum("ENUM_CUDA_MEM_KIND", "label", schema.DEFAULT_MEM_KIND)

        def name(key: int) -> str:
            k, s, d = key // 1_000_000, key // 1000 % 1000 - 1, key % 1000 - 1
            short = _copy_kind_short(opers.get(k), k)
            if s < 0 and d < 0:
                return f"Memcpy {short}"
            return (
                f"Memcpy {short} ({mem_kinds.get(s, 'Unknown')} -> {mem_kinds.get(d, 'Unknown')})"
            )

        # One key per (copy kind, source kind, destination kind); -1 (absent) becomes 0.
        key = copy_kind * 1_000_000 + (src + 1) * 1000 + (dst + 1)
        return self.names.ids_of(key, name)

    def runtime_table(self, key: str) -> None:
        table = self.resolve(schema.HOST_TABLES[key])
        if table is None:
            return
        cols_keys: tuple[str, ...] = (
            "start", "end", "global_tid", "process", "thread", "correlation", "name"
        )  # fmt: skip
        if key == "runtime":
            cols_keys += ("event_class",)
        c, _ = self.fetch(table, cols_keys, self.mine(table, "global_tid", "process"))
        pid, tid = self._host_ids(table, c)
        name_id = self.names.ids_of(c["name"], lambda k: _API_VERSION.sub("", self.string(k)))
        if key == "driver":
            kind: EventKind | I64 = EventKind.DRIVER
        elif "event_class" in table.present:
            kind = np.where(c["event_class"] == _DRIVER_CLASS, EventKind.DRIVER, EventKind.RUNTIME)
        else:
            names = list(self.names)  # dense ids in insertion order
            driver = np.array(
                [n.startswith("cu") and not n.startswith("cuda") for n in names], dtype=np.bool_
            )
            kind = np.where(driver[name_id], EventKind.DRIVER, EventKind.RUNTIME)
        self.add(
            kind,
            c["start"],
            c["end"],
            name_id,
            pid=pid,
            tid=tid,
            correlation=c["correlation"],
        )

    def nvtx_table(self) -> None:
        table = self.resolve(schema.HOST_TABLES["nvtx"])
        if table is None:
            return
        types = self.enum("ENUM_NSYS_EVENT_TYPE", "name", {})
        by_name = {v: k for k, v in types.items()}
        ranges = sorted({by_name.get(n, default) for n, default in _NVTX_RANGE_TYPES.items()})
        in_list = ", ".join(str(t) for t in ranges)
        range_rows = f"{table.sql['event_type']} IN ({in_list})"
        (unterminated,) = self.conn.execute(
            f'SELECT COUNT(*) FROM "{table.table}" WHERE {range_rows} AND "end" IS NULL'
            if "end" in table.present
            else f'SELECT COUNT(*) FROM "{table.table}" WHERE {range_rows}'
        ).fetchone()
        if unterminated:
            self.warnings.append(f"skipped {unterminated} NVTX range(s) without an end")
        if "end" not in table.present:
            return
        keys = ("start", "end", "global_tid", "text_id")
        mine = self.mine(table, "global_tid", "process", range_rows + ' AND "end" IS NOT NULL')
        c, texts = self.fetch(table, keys, mine, text="text")
        names = self.names
        inline = np.array(
            [-1 if t is None else names[str(t)] for t in texts], dtype=np.int32
        ).reshape(-1)
        registered = names.ids_of(c["text_id"], self.string)
        name_id = np.where(inline >= 0, inline, registered).astype(np.int32)
        pid, tid = _pid(c["global_tid"]), _tid(c["global_tid"])
        self.add(EventKind.ANNOTATION, c["start"], c["end"], name_id, pid=pid, tid=tid)

    def osrt_table(self) -> None:
        table = self.resolve(schema.HOST_TABLES["osrt"])
        if table is None:
            return
        keys = ("start", "end", "global_tid", "name")
        c, _ = self.fetch(table, keys, self.mine(table, "global_tid", "process"))
        name_id = self.names.ids_of(c["name"], self.string)
        pid, tid = _pid(c["global_tid"]), _tid(c["global_tid"])
        self.add(EventKind.OTHER, c["start"], c["end"], name_id, pid=pid, tid=tid)

    def _host_ids(self, table: ResolvedTable, c: dict[str, I64]) -> tuple[I64, I64]:
        if "global_tid" in table.present:
            return _pid(c["global_tid"]), _tid(c["global_tid"])
        return c["process"], c["thread"]

    # ---- header --------------------------------------------------------------------------

    def gpu_names(self) -> dict[int, str]:
        for table, id_col, name_col in schema.GPU_INFO_TABLES:
            if table in self.tables and {id_col, name_col} <= schema.table_columns(
                self.conn, table
            ):
                rows = self.conn.execute(f'SELECT "{id_col}", "{name_col}" FROM "{table}"')
                try:
                    return {int(i): str(n) for i, n in rows if i is not None and n}
                except _CONVERSION_ERRORS:
                    raise _not_integers(self.conn, self.path, table, [id_col]) from None
        return {}

    def base_time_ns(self) -> int | None:
        table = "TARGET_INFO_SESSION_START_TIME"
        if table not in self.tables or "utcEpochNs" not in schema.table_columns(self.conn, table):
            return None
        row = self.conn.execute(f'SELECT "utcEpochNs" FROM "{table}"').fetchone()
        if not row or row[0] is None:
            return None
        try:
            start = int(row[0])
        except _CONVERSION_ERRORS:
            raise _not_integers(self.conn, self.path, table, ["utcEpochNs"]) from None
        return start if start > 0 else None

    def meta(self, table: str, names: Sequence[str]) -> dict[str, str]:
        """The name -> value rows of a (name, value) table, for the given names only."""
        if table not in self.tables:
            return {}
        marks = ", ".join("?" for _ in names)
        rows = self.conn.execute(
            f'SELECT name, value FROM "{table}" WHERE name IN ({marks})', tuple(names)
        )
        return {str(n): str(v) for n, v in rows if v is not None}

    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        env = self.meta("TARGET_INFO_SYSTEM_ENV", ["CudaDriverVersion"])
        driver = _decimal(env.get("CudaDriverVersion", ""))
        if driver is not None and driver > 0:  # CUDA's encoding: 12040 -> 12.4
            out["cuda_driver"] = f"{driver // 1000}.{driver % 1000 // 10}"
        export = self.meta("META_DATA_EXPORT", ["EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION"])
        if "EXPORT_PRODUCT_VERSION" in export:
            out["nsys"] = export["EXPORT_PRODUCT_VERSION"]
        if "EXPORT_SCHEMA_VERSION" in export:
            out["nsys_export_schema"] = export["EXPORT_SCHEMA_VERSION"]
        return out

    def rank(self) -> tuple[int | None, int | None]:
        """Rank and world size from the launch environment of a single profiled process.

        Only the variables named in `_RANK_VARS`/`_WORLD_VARS` are read; nothing else of the
        recorded environment is looked at.
        """
        table = "META_DATA_CAPTURE"
        if table not in self.tables:
            return None, None
        processes = {
            str(n).split(":", 1)[0]
            for (n,) in self.conn.execute(
                f"SELECT name FROM \"{table}\" WHERE name LIKE 'PROCESS\\_%:COMMAND' ESCAPE '\\'"
            )
        }
        if len(processes) != 1:
            return None, None
        values: dict[str, int] = {}
        for var in _RANK_VARS + _WORLD_VARS:
            row = self.conn.execute(
                f"SELECT value FROM \"{table}\" WHERE name LIKE '%:ENVIRONMENT_VARIABLE' "
                "AND value LIKE ? LIMIT 1",
                (f"{var}=%",),
            ).fetchone()
            if row and isinstance(row[0], str):
                number = _decimal(row[0].split("=", 1)[1].strip().strip('"'))
                if number is not None:
                    values[var] = number
        rank = next((values[v] for v in _RANK_VARS if v in values), None)
        world = next((values[v] for v in _WORLD_VARS if v in values), None)
        if rank is None or world is None or not 0 <= rank < world:
            return None, None
        return rank, world


def _not_integers(
    conn: sqlite3.Connection, path: str, table: str, columns: Sequence[str], where: str = ""
) -> TraceFormatError:
    """The error for a table whose integer columns failed to convert: it names the column.

    Called only after a conversion failed. The first of `columns` (in the rows `where`
    selects) that holds a value of another SQLite type is named, with that type.
    """
    for column in columns:
        condition = f"typeof(\"{column}\") NOT IN ('integer', 'null')"
        if where:
            condition += f" AND ({where})"
        row = conn.execute(
            f'SELECT typeof("{column}") FROM "{table}" WHERE {condition} LIMIT 1'
        ).fetchone()
        if row is not None:
            return TraceFormatError(
                path,
                f"damaged export: table {table}, column {column} holds {str(row[0]).upper()} "
                "values where integers belong",
            )
    return TraceFormatError(
        path,
        f"damaged export: table {table} holds values that are not integers in column(s) "
        f"{', '.join(columns)}",
    )


def _pid(global_id: I64) -> I64:
    return np.where(global_id >= 0, (global_id >> 24) & 0xFFFFFF, NO_ID)


def _tid(global_id: I64) -> I64:
    return np.where(global_id >= 0, global_id & 0xFFFFFF, NO_ID)


def _copy_kind_short(enum_name: str | None, kind: int) -> str:
    """Kineto's spelling of a memcpy kind (`HtoD`), from `CUDA_MEMCPY_KIND_HTOD` or the value."""
    if enum_name and enum_name.startswith("CUDA_MEMCPY_KIND_"):
        word = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
        uvm = word.startswith("UVM_")
        word = word.removeprefix("UVM_")
        if len(word) == 4 and word[1:3] == "TO":
            short = f"{word[0]}to{word[3]}"
            return f"UVM {short}" if uvm else short
        return word.title()
    return schema.DEFAULT_COPY_KIND.get(kind, "Unknown")


def _sync_name(enum_name: str | None, kind: int) -> str:
    """Kineto's name of a synchronization (`Stream Sync`), from the enum name or the value."""
    by_suffix = {
        "EVENT_SYNCHRONIZE": 1,
        "STREAM_WAIT_EVENT": 2,
        "STREAM_SYNCHRONIZE": 3,
        "CONTEXT_SYNCHRONIZE": 4,
    }
    if enum_name:
        for suffix, value in by_suffix.items():
            if enum_name.endswith(suffix):
                return schema.DEFAULT_SYNC_KIND[value]
    return schema.DEFAULT_SYNC_KIND.get(kind, "Unknown Sync")


def _check_export(path: str, tables: set[str]) -> None:
    """Raise unless the database is an nsys export with CUDA GPU activity tables."""
    known = (
        {"META_DATA_EXPORT", "NVTX_EVENTS", "OSRT_API"}
        | {t for t, _, _ in schema.STRING_TABLES}
        | {n for spec in schema.GPU_TABLES.values() for n in spec.names}
        | {n for spec in schema.HOST_TABLES.values() for n in spec.names}
    )
    if not tables & known:
        shown = ", ".join(sorted(tables)[:5]) or "none"
        raise TraceFormatError(
            path,
            "an SQLite database, but not an Nsight Systems export (no StringIds, NVTX_EVENTS "
            f"or CUPTI_ACTIVITY_KIND_* tables; its tables: {shown})",
        )
    gpu = {n for key in ("kernel", "memcpy", "memset") for n in schema.GPU_TABLES[key].names}
    if not tables & gpu:
        raise TraceFormatError(
            path,
            "an Nsight Systems export without CUDA GPU activity (no CUPTI_ACTIVITY_KIND_KERNEL, "
            "_MEMCPY or _MEMSET table): profile with `nsys profile --trace=cuda,nvtx,osrt`",
        )


def process_path(path: str, pid: int) -> str:
    """The path that names one process of an export: `report.sqlite#pid=4242`."""
    return f"{path}{PROCESS_MARK}{pid}"


def split_process_path(path: str) -> tuple[str, int | None]:
    """(file, pid) of a `process_path`; (path, None) for a plain path.

    A path is a `process_path` when it ends in `#pid=N` and no file has that whole name;
    every open or stat of such a path must use the file part.

    Raises:
        TraceFormatError: the path ends in `#pid=` and text that is not a process id (ASCII
            digits only), while the file before the mark exists.
    """
    file, mark, pid = path.rpartition(PROCESS_MARK)
    if not mark or os.path.lexists(path) or not os.path.lexists(file):
        return path, None  # a plain path (of a file or of nothing) that contains the mark
    number = _decimal(pid)
    if number is None:
        raise TraceFormatError(
            path,
            f"not a process id after {PROCESS_MARK} (it takes the decimal process id, as in "
            f"report.sqlite{PROCESS_MARK}4242)",
        )
    return file, number


def gpu_processes(path: str) -> list[int]:
    """The processes with GPU activity (kernels, memcpys, memsets) in an export, by GPU order.

    Sorted by the lowest CUDA device each process used, then pid: for a job launched one
    process per GPU (torchrun, mpirun) that is the order of local ranks.

    Raises:
        TraceFormatError: the file is not an nsys export with CUDA tables.
    """
    require_regular_file(path)
    if not is_sqlite(path):
        raise TraceFormatError(path, "not an SQLite database (no SQLite header)")
    first_device: dict[int, int] = {}
    with _connect(path) as conn:
        tables = {
            str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        _check_export(path, tables)
        for key in ("kernel", "memcpy", "memset"):
            try:
                table = schema.resolve_table(conn, tables, schema.GPU_TABLES[key])
            except MissingColumnError as e:
                raise TraceFormatError(path, f"unknown Nsight Systems export schema: {e}") from None
            if table is None:
                continue
            packed = "global_pid" in table.present
            key = "global_pid" if packed else "process"
            column = table.sql[key]
            rows = conn.execute(
                f'SELECT {column}, MIN({table.sql["device"]}) FROM "{table.table}" '
                f"GROUP BY {column}"
            )
            try:
                for raw, device in rows:
                    if raw is None:
                        continue
                    pid = (int(raw) >> 24) & 0xFFFFFF if packed else int(raw)
                    if pid >= 0:
                        low = int(device) if device is not None else 1 << 30
                        first_device[pid] = min(first_device.get(pid, low), low)
            except _CONVERSION_ERRORS:
                names = [table.physical[k] for k in (key, "device") if k in table.physical]
                raise _not_integers(conn, path, table.table, names) from None
    return sorted(first_device, key=lambda p: (first_device[p], p))


def read_nsys(path: str, progress: Callable[[int], None] | None = None) -> Trace:
    """Read one Nsight Systems SQLite export into a columnar Trace.

    An export of several processes with GPU activity (one `nsys profile` around a
    `torchrun` job, say) holds one rank per process: `badput.trace.find_traces` lists each as
    `process_path(file, pid)`, and such a path reads only that process's rows, as rank i of
    the n processes in `gpu_processes` order (a warning says the rank was inferred).

    Args:
        path: the `.sqlite` file written by `nsys export --type sqlite`, or a `process_path`.
        progress: called with the file size once it has been read.

    Returns:
        The trace, rows in time order.

    Raises:
        TraceFormatError: the file is missing, not SQLite, not an nsys export, or one without
            CUDA tables.

    Example:
        >>> trace = read_nsys("report.sqlite")  # doctest: +SKIP
        >>> trace.devices()  # doctest: +SKIP
        [0]
    """
    label = path
    path, pid = split_process_path(path)
    require_regular_file(path)
    if not is_sqlite(path):
        raise TraceFormatError(path, "not an SQLite database (no SQLite header)")
    processes = gpu_processes(path) if pid is not None else []
    if pid is not None and pid not in processes:
        held = ", ".join(str(p) for p in sorted(processes)) or "none"
        raise TraceFormatError(
            label,
            f"the export has no GPU activity of process {pid} (processes with GPU activity: "
            f"{held})",
        )
    with _connect(path) as conn:
        tables = {
            str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        _check_export(path, tables)
        reader = _Reader(path, conn, tables, pid)
        for key in ("kernel", "memcpy", "memset", "sync"):
            reader.gpu_table(key)
        reader.runtime_table("runtime")
        reader.runtime_table("driver")
        reader.nvtx_table()
        reader.osrt_table()
        gpu_names = reader.gpu_names()
        base_time_ns = reader.base_time_ns()
        versions = reader.versions()
        rank, world_size = reader.rank()
    if pid is not None:
        rank, world_size = processes.index(pid), len(processes)
        reader.warnings.append(
            f"process {pid} of {world_size} with GPU activity in the export, analysed as rank "
            f"{rank} (ranks follow the processes' lowest CUDA device)"
        )
    if progress is not None:
        progress(os.path.getsize(path))
    return _build(label, reader, gpu_names, base_time_ns, versions, rank, world_size, pid)


def _build(
    path: str,
    reader: _Reader,
    gpu_names: dict[int, str],
    base_time_ns: int | None,
    versions: dict[str, str],
    rank: int | None,
    world_size: int | None,
    pid: int | None = None,
) -> Trace:
    keys = ("kind", "ts_ns", "dur_ns", "name_id", "pid", "tid", "device", "stream",
            "correlation", "bytes")  # fmt: skip
    dtypes = {"kind": np.int8, "name_id": np.int32}
    cols: dict[str, npt.NDArray[Any]] = {}
    for key in keys:
        parts = [p[key] for p in reader.parts]
        dtype = dtypes.get(key, np.int64)
        cols[key] = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
    if pid is not None:  # one process of a multi-process export: its rows only
        mine = cols["pid"] == pid
        cols = {k: v[mine] for k, v in cols.items()}
    warnings = reader.warnings
    negative = cols["dur_ns"] < 0
    if negative.any():
        warnings.append(f"skipped {int(negative.sum())} event(s) that end before they start")
        cols = {k: v[~negative] for k, v in cols.items()}
    # CUPTI correlation ids are unique within a process only: with several processes, the
    # process id goes into the high bits so that launches link to their own GPU work.
    kind = cols["kind"]
    correlated = np.isin(kind, [int(k) for k in _CORRELATED])
    gpu = np.isin(kind, [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])
    if np.unique(cols["pid"][gpu]).shape[0] > 1:
        corr, pids = cols["correlation"], cols["pid"]
        cols["correlation"] = np.where(
            correlated & (corr >= 0) & (pids >= 0), (pids << 32) | corr, corr
        )
    order = np.argsort(cols["ts_ns"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    n = order.shape[0]
    none = np.full(n, NO_ID, dtype=np.int64)
    return Trace(
        path=path,
        kind=cols["kind"],
        phase=np.full(n, int(FlowPhase.COMPLETE), dtype=np.int8),
        ts_ns=cols["ts_ns"],
        dur_ns=cols["dur_ns"],
        name_id=cols["name_id"],
        pid=cols["pid"],
        tid=cols["tid"],
        device=cols["device"],
        stream=cols["stream"],
        correlation=cols["correlation"],
        external_id=none,
        byte_counts=SparseColumn.of(cols["bytes"]),
        allocated_totals=SparseColumn.of(none),
        reserved_totals=SparseColumn.of(none),
        names=list(reader.names),
        gpu_names=gpu_names,
        warnings=warnings,
        base_time_ns=base_time_ns,
        versions=versions,
        rank=rank,
        world_size=world_size,
    )
