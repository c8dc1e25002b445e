"""Wrapper of the optional C scanner `_scan` (see `_scan.c`); None when it is not built.

Set `BADPUT_NO_C_SCAN=1` to read with msgspec alone (tests compare both paths).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = [
    "AVAILABLE", "DERIVE_AVAILABLE", "RUN_AVAILABLE", "Derived", "Run", "RunStatus", "Scanned",
    "derive", "scan", "scan_run",
]  # fmt: skip

try:
    from badput.trace import _scan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the msgspec path reads everything
    _scan = None

AVAILABLE = _scan is not None
#: Whether the build has `scan_events` (pieces cut anywhere: `scan_run`).
RUN_AVAILABLE = AVAILABLE and hasattr(_scan, "scan_events")

# Order of the columns in the C scanner's result tuple (enum in _scan.c).
_COLUMNS = (
    "phase", "cat", "name", "pid", "pid_label", "tid", "tid_label", "ts", "has_ts", "dur",
    "has_dur", "id", "id_label", "device", "stream", "correlation", "ext", "ext_lower",
    "bytes", "alloc_bytes", "total_allocated", "total_reserved", "device_id", "device_type",
    "meta_row", "meta_off", "meta_len", "op_row", "op_dims", "op_types", "op_strides",
    "op_concrete", "op_seq", "op_fwd",
)  # fmt: skip
# The meta_* columns are sparse: one entry per kept row whose args hold "Collective name";
# so are the op_* columns: one per kept row with shape arguments (record_shapes=True), the
# four lists as ids into `Scanned.op_values` (int32, -1: absent), the two integers int64.


@dataclass(frozen=True)
class Scanned:
    """Columns of one scanned piece, with the piece's own string and label tables.

    `meta_args` holds the JSON text of the args of the rows in the `meta_row` column (those
    with NCCL metadata), for the caller to decode. `op_values` holds the raw JSON texts that
    the `op_dims`, `op_types`, `op_strides` and `op_concrete` columns index, each once.
    """

    raw: dict[str, Any]  # Column objects of the C scanner (read-only buffers)
    strings: list[str]
    labels: list[str]
    seen: int
    meta_args: list[bytes]
    op_values: list[bytes]

    def column(self, key: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        """A read-only view of one column."""
        return np.frombuffer(self.raw[key], dtype=dtype)


def drop_spare() -> None:
    """Give the system back the scanner's spare column buffers.

    The scanner keeps the buffers of the columns Python is done with for the next piece's
    columns (their pages are resident: no page faults); a read ends with this.
    """
    if _scan is not None and hasattr(_scan, "drop_spare"):
        _scan.drop_spare()


def _text(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw.decode("utf-8")
    return str(msgspec.json.decode(b'"' + raw + b'"'))


def scan(array_text: bytes | memoryview) -> Scanned | None:
    """Scan a JSON array of events; None when the C scanner is absent or refuses the text."""
    if _scan is None or os.environ.get("BADPUT_NO_C_SCAN"):
        return None
    result = _scan.scan(array_text)
    if result is None:
        return None
    if len(result) != len(_COLUMNS) + 4:
        return None  # a stale build of _scan.c: the complete decoder reads it right
    return _scanned(result, array_text)


class RunStatus(enum.IntEnum):
    """How a run of events ended (`RUN_*` in `_scan.c`)."""

    MORE = 0  # the piece ended after a "," between events: more follow
    DONE = 1  # the "]" closing the array; `Run.at` is just past it
    TRUNCATED = 2  # the event at `Run.at` does not end inside the piece
    REFUSED = 3  # the event at `Run.at` is whole but not for the fast path (to `value_end`)
    MALFORMED = 4  # not JSON to go on from: the complete decoder says why


@dataclass(frozen=True)
class Run:
    """The events of one piece the scanner took, and where and how it stopped.

    Offsets count from the start of the buffer given to `scan_run`.
    """

    scanned: Scanned | None  # None: the texts of its names did not decode (see `_text`)
    at: int
    status: RunStatus
    value_end: int


def scan_run(buffer: bytes | memoryview, start: int, first: bool) -> Run | None:
    """Scan the events of `buffer` from `start` on, up to its end or the array's "]".

    `first`: `start` is just past the array's "[" (an empty array may close at once);
    otherwise it is where an event begins after a ",". None when the C scanner is absent
    or turned off (`BADPUT_NO_C_SCAN`). Releases the GIL while it scans.
    """
    if not RUN_AVAILABLE or os.environ.get("BADPUT_NO_C_SCAN"):
        return None
    return run_of(_scan.scan_events(buffer, start, first), buffer)


def run_of(result: tuple[Any, ...], buffer: bytes | memoryview) -> Run:
    """The `Run` of what the C scanner's `scan_events` returned for `buffer`."""
    n = len(_COLUMNS) + 4
    return Run(_scanned(result[:n], buffer), result[n], RunStatus(result[n + 1]), result[n + 2])


def _scanned(result: tuple[Any, ...], text: bytes | memoryview) -> Scanned | None:
    n = len(_COLUMNS)
    try:
        # Most come as text (`interned_list` in C): only escaped or odd ones are decoded here.
        strings = [t if t.__class__ is str else _text(t) for t in result[n]]
        labels = [t if t.__class__ is str else _text(t) for t in result[n + 1]]
    except (UnicodeDecodeError, msgspec.DecodeError):
        return None  # the complete decoder reports it
    raw = dict(zip(_COLUMNS, result[:n], strict=True))
    meta_args: list[bytes] = []
    if raw["meta_off"]:
        offsets = np.frombuffer(raw["meta_off"], dtype=np.int64).tolist()
        lengths = np.frombuffer(raw["meta_len"], dtype=np.int64).tolist()
        with memoryview(text) as view:  # released here: the caller's buffer may regrow
            meta_args = [bytes(view[o : o + k]) for o, k in zip(offsets, lengths, strict=True)]
    return Scanned(raw, strings, labels, result[n + 2], meta_args, result[n + 3])


#: Whether the build marks the ids a column uses in C (`mark`).
MARK_AVAILABLE = AVAILABLE and hasattr(_scan, "mark")


def mark(ids: npt.NDArray[np.int32], seen: npt.NDArray[np.bool_]) -> bool:
    """`seen[ids] = True` in one pass in C (an id of -1 marks the last slot).

    False where the scanner is not built or an id is outside [-1, len(seen) - 1), for the
    caller to mark. `seen` must be contiguous (the C pass writes its bytes).
    """
    if not MARK_AVAILABLE:
        return False
    return bool(_scan.mark(np.ascontiguousarray(ids, dtype=np.int32), seen))


#: Whether the build derives a piece's rows in C (`derive`); else numpy does, as on the
#: msgspec path.
DERIVE_AVAILABLE = AVAILABLE and hasattr(_scan, "derive")


@dataclass(frozen=True)
class Derived:
    """What `derive` found in a piece besides the columns it rewrote."""

    kind: npt.NDArray[np.int8]
    bad: int  # complete events without a start or with an end past int64 nanoseconds
    negative: int  # rows of good time with a negative length ...
    first_negative: int  # ... and the first of them (-1: none)
    fits_int32: dict[str, bool]  # per id column (`DERIVED_ID_COLUMNS`): every value in int32


#: The id columns whose range `derive` reports, as the columns store names them.
DERIVED_ID_COLUMNS = ("device", "stream", "external_id", "pid", "tid", "correlation")


def derive(
    scanned: Scanned,
    kind_of_cat: npt.NDArray[np.int8],
    name_id_of: npt.NDArray[np.int32],
    id_of_label: npt.NDArray[np.int64],
    gpu_side: npt.NDArray[np.bool_],
    constants: tuple[int, int, int, int, int],
) -> Derived:
    """A piece's derived columns, in one pass in C, written over the scanned ones.

    Per row: a pid or tid given as a label (a string) becomes `id_of_label[label]`; the kind
    is `kind_of_cat[cat]` (an id of -1 indexes the last slot), or `constants[3]` (memory) for
    an instant event and `constants[2]` (flow) for any other event not complete
    (`constants[0]`, instant: `constants[1]`), whose length becomes 0 and, for a flow arrow,
    whose correlation becomes its id (a label's too); the `name` column becomes
    `name_id_of[name]`; a GPU-side kind (`gpu_side`) keeps its device and stream or takes the
    pid's and tid's, other kinds have neither (NO_ID); a memory event on a GPU (device type
    `constants[4]`) takes its device id, and its allocation's size as its byte count; `ext`
    falls back to `ext_lower`. Rows with bad times are counted, not dropped; whether int32
    holds every value of each of `DERIVED_ID_COLUMNS` is noted. Raises ValueError for a string
    or label id beyond its table.
    """
    raw = scanned.raw
    kind = np.empty(len(raw["phase"]), dtype=np.int8)
    bufs = (
        raw["phase"], raw["has_ts"], raw["ts"], raw["ext_lower"], raw["alloc_bytes"],
        raw["device_type"], raw["device_id"], raw["id"], raw["pid_label"], raw["tid_label"],
        raw["id_label"], np.ascontiguousarray(kind_of_cat, np.int8),
        np.ascontiguousarray(name_id_of, np.int32), np.ascontiguousarray(id_of_label, np.int64),
        np.ascontiguousarray(gpu_side, np.bool_), kind,
    )  # fmt: skip
    names = ("cat", "name", "dur", "device", "stream", "ext", "bytes", "pid", "tid", "correlation")
    bad, negative, first, fits = _scan.derive(bufs, tuple(raw[k] for k in names), constants)
    return Derived(kind, bad, negative, first, dict(zip(DERIVED_ID_COLUMNS, fits, strict=True)))
