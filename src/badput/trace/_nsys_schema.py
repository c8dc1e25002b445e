"""Which tables and columns of an Nsight Systems SQLite export hold what: one map per schema.

Private to `badput.trace.nsys`. Exports differ between Nsight Systems versions: tables appear
lazily (only for the data a run recorded), columns are added and renamed (NVTX text inline in
`text` before registered strings moved to `textId`; `syncType` beside `deprecatedSyncType`;
the GPU table `TARGET_INFO_CUDA_GPU` keyed by `deviceId` before 2021.2, `TARGET_INFO_GPU` keyed
by `id` after), and enumerations are exported as `ENUM_*` tables only since 2021. Each logical
column below lists the physical names it has had, newest first; `resolve_table` picks the first
one a file has, so one reader serves every export schema.

Sources: the schema comments of real exports (schema 3.13.2, nsys 2024.5; schema 3.20.2,
nsys 2025.3; in `tests/data/traces/nsys`), the "SQLite Export Schema Reference" of the Nsight
Systems documentation (2020.x to 2025.x), and the report scripts shipped with nsys 2021.1,
which spell out the memory-kind and memcpy-kind values of exports without `ENUM_*` tables.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_COPY_KIND",
    "DEFAULT_MEM_KIND",
    "DEFAULT_SYNC_KIND",
    "GPU_INFO_TABLES",
    "GPU_TABLES",
    "HOST_TABLES",
    "STRING_TABLES",
    "Column",
    "MissingColumnError",
    "ResolvedTable",
    "TableSpec",
    "resolve_table",
    "table_columns",
]


@dataclass(frozen=True)
class Column:
    """One logical column: the physical names it has had (newest first) and its default.

    `required` columns must exist for the table to be read; a missing optional column reads as
    `default` (an integer, or None for text).
    """

    names: tuple[str, ...]
    required: bool = False
    default: int | None = -1


@dataclass(frozen=True)
class TableSpec:
    """A logical table: its physical names (newest first) and its logical columns."""

    names: tuple[str, ...]
    columns: dict[str, Column]


@dataclass(frozen=True)
class ResolvedTable:
    """A logical table as one file has it: the physical table and each column's SQL."""

    table: str
    sql: dict[str, str]  # logical column -> SQL expression (a quoted column, or a default)
    present: frozenset[str]  # logical columns the file has
    # Logical column -> the file's column name, for the columns it has: what errors name.
    physical: dict[str, str] = field(default_factory=dict)

    def select(self, keys: tuple[str, ...], where: str = "") -> str:
        """`SELECT` of the logical columns `keys`, in order."""
        cols = ", ".join(self.sql[k] for k in keys)
        return f'SELECT {cols} FROM "{self.table}"' + (f" WHERE {where}" if where else "")


def _col(*names: str, required: bool = False, default: int | None = -1) -> Column:
    return Column(names, required, default)


_START = _col("start", required=True)
_END = _col("end", required=True)
_DEVICE = _col("deviceId", required=True)
_STREAM = _col("streamId")
_CORRELATION = _col("correlationId")
# nsys serializes the owning process as `globalPid` (GPU rows) and the thread as `globalTid`
# (host rows); nvprof-era layouts had plain `processId`/`threadId`.
_GLOBAL_PID = _col("globalPid")
_GLOBAL_TID = _col("globalTid")
_PROCESS = _col("processId")
_THREAD = _col("threadId")

# Columns every GPU activity table has: its time span, where it ran and who launched it.
_GPU_ROW = {
    "start": _START,
    "end": _END,
    "device": _DEVICE,
    "stream": _STREAM,
    "correlation": _CORRELATION,
    "global_pid": _GLOBAL_PID,
    "process": _PROCESS,
}
# Columns of a CUDA runtime or driver API call.
_API_CALL = {
    "start": _START,
    "end": _END,
    "global_tid": _GLOBAL_TID,
    "process": _PROCESS,
    "thread": _THREAD,
    "correlation": _CORRELATION,
    "name": _col("nameId", "name", required=True),
}

#: The GPU activity tables, by the kind of row they give.
GPU_TABLES: dict[str, TableSpec] = {
    "kernel": TableSpec(
        ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"),
        {
            **_GPU_ROW,
            # String ids: the templated name first (what Kineto and the name patterns use),
            # the base name where an export lacks it, `name` in the oldest layouts.
            "demangled": _col("demangledName"),
            "short": _col("shortName", "name"),
        },
    ),
    "memcpy": TableSpec(
        ("CUPTI_ACTIVITY_KIND_MEMCPY",),
        {
            **_GPU_ROW,
            "bytes": _col("bytes"),
            "copy_kind": _col("copyKind", required=True),
            "src_kind": _col("srcKind"),
            "dst_kind": _col("dstKind"),
        },
    ),
    "memset": TableSpec(
        ("CUPTI_ACTIVITY_KIND_MEMSET",),
        {
            **_GPU_ROW,
            "bytes": _col("bytes"),
            "mem_kind": _col("memKind", "memoryKind"),
        },
    ),
    "sync": TableSpec(
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",),
        {
            **_GPU_ROW,
            "sync_type": _col("syncType", "deprecatedSyncType"),
        },
    ),
}

#: The host tables, by the kind of row they give.
HOST_TABLES: dict[str, TableSpec] = {
    "runtime": TableSpec(
        ("CUPTI_ACTIVITY_KIND_RUNTIME",),
        {
            **_API_CALL,
            # 0 runtime, 1 driver (ENUM_NSYS_EVENT_CLASS); absent before nsys put driver calls
            # into this table, and then the name tells (cuda* runtime, cu* driver).
            "event_class": _col("eventClass"),
        },
    ),
    "driver": TableSpec(
        ("CUPTI_ACTIVITY_KIND_DRIVER",),
        {
            **_API_CALL,
        },
    ),
    "nvtx": TableSpec(
        ("NVTX_EVENTS",),
        {
            "start": _START,
            "end": _col("end"),
            "event_type": _col("eventType", required=True),
            "global_tid": _GLOBAL_TID,
            "text_id": _col("textId"),
            "text": _col("text", default=None),
        },
    ),
    "osrt": TableSpec(
        ("OSRT_API",),
        {
            "start": _START,
            "end": _END,
            "global_tid": _GLOBAL_TID,
            "name": _col("nameId", required=True),
        },
    ),
}

#: String tables: (table, id column, value column), newest first.
STRING_TABLES = (("StringIds", "id", "value"), ("StringTable", "_id_", "value"))

#: GPU model tables: (table, device id column, name column), newest first.
GPU_INFO_TABLES = (("TARGET_INFO_GPU", "id", "name"), ("TARGET_INFO_CUDA_GPU", "deviceId", "name"))

# Enumerations of exports without `ENUM_*` tables. Memory kinds are nsys's own numbering (not
# CUPTI's, which starts at Unknown = 0); the labels are the ones Kineto writes into its memcpy
# and memset names ("Memcpy HtoD (Pageable -> Device)", "Memset (Device)").
DEFAULT_MEM_KIND: dict[int, str] = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
#: Memcpy kinds (CUpti_ActivityMemcpyKind, as ENUM_CUDA_MEMCPY_OPER numbers them), in Kineto's
#: short spelling.
DEFAULT_COPY_KIND: dict[int, str] = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "UVM HtoD",
    12: "UVM DtoH",
    13: "UVM DtoD",
}
#: Synchronization kinds (CUpti_ActivitySynchronizationType), named as Kineto names its
#: `cuda_sync` events.
DEFAULT_SYNC_KIND: dict[int, str] = {
    0: "Unknown Sync",
    1: "Event Sync",
    2: "Stream Wait Event",
    3: "Stream Sync",
    4: "Context Sync",
}


class MissingColumnError(Exception):
    """A table of the export lacks a column the reader needs."""

    def __init__(self, table: str, names: tuple[str, ...]) -> None:
        super().__init__(f"table {table} has no {' or '.join(names)} column")
        self.table = table


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Column names of a table (empty when there is no such table)."""
    return {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')}


def resolve_table(
    conn: sqlite3.Connection, tables: set[str], spec: TableSpec
) -> ResolvedTable | None:
    """The first physical table of `spec` this file has, with SQL for every logical column.

    Returns None when the file has none of the tables. Integer columns read through
    `COALESCE(col, default)`, so that NULLs arrive as the default.

    Raises:
        MissingColumnError: the table lacks a required column (a schema this map does not know).
    """
    for table in spec.names:
        if table not in tables:
            continue
        have = table_columns(conn, table)
        sql: dict[str, str] = {}
        present: set[str] = set()
        physical: dict[str, str] = {}
        for key, column in spec.columns.items():
            found = next((n for n in column.names if n in have), None)
            if found is None:
                if column.required:
                    raise MissingColumnError(table, column.names)
                sql[key] = "NULL" if column.default is None else str(column.default)
                continue
            present.add(key)
            physical[key] = found
            quoted = f'"{found}"'
            sql[key] = quoted if column.default is None else f"COALESCE({quoted}, {column.default})"
        return ResolvedTable(table, sql, frozenset(present), physical)
    return None
