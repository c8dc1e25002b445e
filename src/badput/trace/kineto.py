"""Reader for PyTorch profiler (Kineto) JSON traces, plain or gzipped.

With the C scanner built, the fast path (`_pieces`) reads the file: mapped when plain,
inflated as read when gzipped, the events array cut at guessed event starts (proven by the
scan of the piece before) and scanned by `jobs` threads, whatever the layout. Anything it does
not take is read by the complete path below: the events array decoded in pieces straight into
typed msgspec structs and then into numpy columns, no per-event dict outliving a piece. Kineto
writes one event per line (or one event per indented block), so that path cuts the array at a
line that starts a new event after a comma and decodes each piece on its own: memory stays
bounded by the piece size, whatever the file size. A file laid out otherwise (all on one line,
say) is decoded whole there.

Timestamps and durations are kept as their JSON text and converted to integer nanoseconds
exactly (`numbers.us_text_to_ns`); they never pass through float64.

NCCL metadata (`"Collective name"`, `"In msg nelems"`, ... in the args of NCCL kernels and
`record_param_comms` ops of newer traces) goes to a sparse side table, `Trace.comm_meta`. Each
decode path only notes which events have a `"Collective name"` (the C scanner, and one field of
`_Args`) and keeps their args text; one function, `_comm_values`, decodes those few texts, so
both paths agree value for value and traces without metadata pay nothing more.

Shape arguments of ops recorded with `record_shapes=True` (`"Input Dims"`, `"Input type"`,
`"Input Strides"`, `"Concrete Inputs"`, `"Sequence number"`, `"Fwd thread id"`) go to another
sparse side table, `Trace.op_args`: the lists as their raw JSON text, interned (a value that is
not a list counts as absent), decoded only when an analysis asks (`OpArgs.value`).

This module reads (files, gzip, pieces, the header); `_kineto_json` holds the JSON shapes and
value conversions, `_kineto_columns` the builder of the Trace columns.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import msgspec
import numpy as np
import numpy.typing as npt

from badput.errors import TraceFormatError
from badput.trace import _fastscan, _pieces
from badput.trace._files import file_problem
from badput.trace._kineto_columns import (
    SPARSE_COLUMNS,
    _Columns,
    _comm_meta,
    _op_args,
    _sync_waits,
)
from badput.trace._kineto_json import (
    _EMPTY,
    _as_int,
    _decode_any,
    _decode_document,
    _decode_events,
    _decode_raw_events,
    _decode_raw_list,
    _Document,
    _RawEvent,
    _safe_decode,
)
from badput.trace._limits import check_held, held_bytes_limit, nesting_error
from badput.trace._mapped import EVENTS_KEY, PIECE_BYTES
from badput.trace._squeeze import StringState
from badput.trace.model import Trace

__all__ = ["CHUNK_BYTES", "read_kineto"]

I64 = npt.NDArray[np.int64]

#: Bytes read per piece of the events array (the pieces `_early` scans are cut the same).
CHUNK_BYTES = PIECE_BYTES
# Bytes held without a place to cut before whitespace between tokens is squeezed out of them.
_SQUEEZE_AFTER = 4 * CHUNK_BYTES
_WS = b" \t\r\n"
# A line that opens an object, after a line that ends in a comma: `_last_event_start`.
_CUT = re.compile(rb",[ \t\r]*\n[ \t\r]*\{")


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
def _open_raw(path: str) -> Iterator[tuple[IO[bytes], bool]]:
    """The file, checked to be a regular one, and whether it is gzipped."""
    problem = file_problem(path)
    if problem is not None:
        raise TraceFormatError(path, problem)
    try:
        # O_NONBLOCK: should the path turn into a FIFO after the check, opening it still
        # returns at once, and fstat refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceFormatError(path, "is not a regular file")
    raw = os.fdopen(fd, "rb")
    try:
        magic = raw.read(2)
        raw.seek(0)
        yield raw, magic == b"\x1f\x8b"
    finally:
        raw.close()


@contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    with _open_raw(path) as (raw, gzipped):
        if gzipped:
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw


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
    # Searched from the end in growing windows: a normal piece has a cut in its last few KB,
    # and text without one (a run of blank lines, say) costs one regex scan, not a Python
    # step per line.
    width = 1 << 16
    while True:
        start = max(lo, hi - width)
        last = None
        for last in _CUT.finditer(buf, start, hi):  # noqa: B007 (the last match is wanted)
            pass
        if last is not None:
            return last.start(), last.end() - 1
        if start == lo:
            return -1, -1
        width *= 16


_BOM = b"\xef\xbb\xbf"


def _not_json(start: bytes | bytearray) -> str:
    """Why a text that starts with `start` (its first bytes) is no trace's JSON."""
    if start.startswith(_BOM):  # an editor's mark: the text after it may be a fine trace
        return (
            "not JSON: it starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON "
            "does not allow; remove those 3 bytes (e.g. `tail -c +4 FILE > NEW`)"
        )
    return "not JSON (a trace file starts with '{' or '[')"


def _json_problem(err: msgspec.DecodeError) -> str:
    text = str(err)
    if "truncated" in text:
        return "truncated JSON: the file ends in the middle of the data"
    return f"not valid JSON ({text})"


def read_kineto(path: str, progress: Callable[[int], None] | None = None, jobs: int = 1) -> Trace:
    """Read one Kineto trace file (JSON or gzipped JSON) into a columnar Trace.

    Args:
        path: the file.
        progress: called with the number of uncompressed bytes read so far, after each piece.
        jobs: pieces of the events array scanned at once (threads; see `_pieces`). The
            result is the same for any number.

    Returns:
        The trace, rows in file order.

    Raises:
        TraceFormatError: the file is missing, not JSON, truncated, or not a trace.

    Example:
        >>> trace = read_kineto("worker0.pt.trace.json.gz")  # doctest: +SKIP
        >>> trace.devices()  # doctest: +SKIP
        [0]
    """
    try:
        return _read_kineto(path, progress, jobs)
    finally:
        _fastscan.drop_spare()


def _read_kineto(path: str, progress: Callable[[int], None] | None, jobs: int) -> Trace:
    try:
        if _pieces.usable():
            columns = _Columns(path)
            gzipped = False
            try:
                with (
                    _open_raw(path) as (raw, gzipped),
                    _pieces.open_text(raw, gzipped, CHUNK_BYTES, jobs, path) as text,
                ):
                    document = _pieces.read_events(text, columns, jobs, _decode_piece, progress)
                return _build(path, columns, document)
            except _pieces.Malformed as e:
                if gzipped:  # a corrupt stream inflates to garbage long before its checksum
                    del columns
                    _check_gzip(path)
                raise TraceFormatError(path, e.problem) from None
            except _pieces.NotFast:
                pass  # the complete path below reads it, with its rules and its messages
        columns = _Columns(path)
        with _open(path) as stream:
            document = _read_document(path, _Source(path, stream), columns, progress)
        return _build(path, columns, document)
    except RecursionError:
        raise nesting_error(path) from None
    except MemoryError:
        raise TraceFormatError(path, "ran out of memory while reading it") from None


def _check_gzip(path: str) -> None:
    """Inflate the whole gzipped file, the text dropped as it comes.

    Raises:
        TraceFormatError: the gzip stream is corrupt or truncated, in the complete path's
            words (a corrupt stream's text is malformed JSON before its checksum says why,
            the fast path's one job meets the text first, and two jobs may meet either).
    """
    buf = memoryview(bytearray(CHUNK_BYTES))
    with _open(path) as stream:
        source = _Source(path, stream)
        while source.readinto(buf):
            pass


def _read_document(
    path: str,
    source: _Source,
    columns: _Columns,
    progress: Callable[[int], None] | None,
) -> _Document | None:
    """Stream the events array into `columns`; return the top level (None for a bare array).

    Text is held only until a place to cut it is found; text that offers none for
    `_SQUEEZE_AFTER` bytes has its whitespace between tokens squeezed out as it is read
    (`StringState`), and what is still held is refused past `held_bytes_limit()`.
    """
    limit = held_bytes_limit()
    squeeze_after = min(_SQUEEZE_AFTER, limit // 2)  # squeezed before it could be refused
    head = bytearray()
    total = 0
    start = -1
    bare = False
    first = b""  # the first byte that is not whitespace
    squeezer: StringState | None = None
    while start < 0:
        chunk = source.read(CHUNK_BYTES)
        total += len(chunk)
        if squeezer is not None:
            chunk = squeezer.squeeze(chunk)
        searched = len(head)
        head += chunk
        if not first:
            first = chunk.translate(None, _WS)[:1]  # (translate: see _squeeze)
            if first not in (b"", b"{", b"["):
                raise TraceFormatError(path, _not_json(chunk))
            if not first and squeezer is None:
                head.clear()  # leading whitespace: nothing to keep
                searched = 0
        if first == b"[":
            bare = True
            start = head.index(b"[")
            break
        # Only the last '"traceEvents"' begun before this chunk can complete in it.
        begun = head.rfind(b'"traceEvents"', 0, searched)
        match = EVENTS_KEY.search(head, begun if begun >= 0 else max(0, searched - 16))
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
        if squeezer is None and len(head) > squeeze_after:
            squeezer = StringState()  # the file's start lies between tokens
            head = bytearray(squeezer.squeeze(head))
        check_held(path, len(head), total, limit, squeezer)
    prefix = bytes(head[:start])
    # `buf[:filled]` always starts with the "[" of the array. Each piece is decoded in place:
    # the array's head up to a comma that is overwritten with "]". The rest moves to the
    # front and the next read lands behind it, so the buffer is reused, never regrown, while
    # Kineto's layout lets the reader cut.
    filled = len(head) - start
    buf = bytearray(max(2 * CHUNK_BYTES, filled + CHUNK_BYTES))
    buf[:filled] = head[start:]
    del head
    # The state of the squeezer that found the array is not that of `buf[0]`: start afresh.
    squeezer = None
    streaming = True
    lo = 1  # buf[:lo] holds no event start (searched already)
    while True:
        if len(buf) - filled < CHUNK_BYTES:
            buf.extend(bytes(len(buf)))  # no cut found yet: make room
        with memoryview(buf) as view:
            n = source.readinto(view[filled : filled + CHUNK_BYTES])
        if not n:
            break
        total += n
        if squeezer is not None:
            with memoryview(buf) as view:
                squeezed = squeezer.squeeze(view[filled : filled + n])
            n = len(squeezed)
            buf[filled : filled + n] = squeezed
        filled += n
        if squeezer is None and filled > squeeze_after:
            # No cut for this long: a one-line text, or whitespace held in bulk. `buf[0]`
            # is the "[" of the array, between tokens.
            squeezer = StringState()
            with memoryview(buf) as view:
                squeezed = squeezer.squeeze(view[:filled])
            filled = len(squeezed)
            buf[:filled] = squeezed
            lo = 1
        check_held(path, filled, total, limit, squeezer)
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
        squeezer = None  # what is held starts at an event again
        if progress is not None:
            progress(total)
    if bare:
        try:
            with memoryview(buf) as view:
                _decode_piece(columns, view[:filled])
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _json_problem(e)) from None
        document = None
    else:
        document = _decode_rest(path, columns, prefix, buf, filled)
    if progress is not None:
        progress(total)
    return document


def _decode_rest(
    path: str, columns: _Columns, prefix: bytes, buf: bytearray, filled: int
) -> _Document:
    """Decode the document: `prefix` and `buf[:filled]`, joined in `buf` (never copied)."""
    need = len(prefix) + filled
    if len(buf) < need:
        buf.extend(bytes(need - len(buf)))
    with memoryview(buf) as view:
        view[len(prefix) : need] = view[:filled]  # memmove: the ranges overlap
        view[: len(prefix)] = prefix
        text = view[:need]
        try:
            document = _decode_document(text)
        except msgspec.DecodeError as e:
            raise TraceFormatError(path, _json_problem(e)) from None
        except msgspec.ValidationError as e:
            raise TraceFormatError(path, f"not a profiler trace ({e})") from None
        try:
            with memoryview(document.traceEvents) as events:
                _decode_piece(columns, events)
        except msgspec.DecodeError as e:  # cannot happen: the document decoded
            raise TraceFormatError(path, _json_problem(e)) from None
        # The header fields are decoded after `buf` is gone: each becomes its own bytes.
        document.traceEvents = _EMPTY
        for field in document.__struct_fields__:
            setattr(document, field, msgspec.Raw(bytes(getattr(document, field))))
        del text
    return document


def _build(path: str, columns: _Columns, document: _Document | None) -> Trace:
    if columns.seen == 0:
        raise TraceFormatError(path, "the trace has no events")
    n_kept = columns.rows
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
    rank, world_size, gpu_names, base_time_ns = _header(document, warnings)
    names = [""] * len(columns.names)
    for name, nid in columns.names.items():
        names[nid] = name
    return Trace(
        comm_meta=_comm_meta(columns),
        op_args=_op_args(columns),
        sync_waits=_sync_waits(columns),
        path=path,
        **_trace_columns(columns),
        names=names,
        labels=columns.labels,
        rank=rank,
        world_size=world_size,
        gpu_names=gpu_names,
        warnings=warnings,
        base_time_ns=base_time_ns,
        versions=_versions(document),
    )


def _trace_columns(columns: _Columns) -> dict[str, Any]:
    """The Trace's columns by field name, each taken from the store (held once)."""
    out: dict[str, Any] = {key: columns.take_column(key) for key in columns.parts}
    for key, field in SPARSE_COLUMNS.items():
        out[field] = columns.take_sparse(key)
    return out


def _versions(document: _Document | None) -> dict[str, str]:
    """CUDA runtime and driver versions (CUDA's integer encoding, 12040 -> "12.4")."""
    out: dict[str, str] = {}
    if document is None:
        return out
    for key, raw in (
        ("cuda_runtime", document.cuda_runtime_version),
        ("cuda_driver", document.cuda_driver_version),
    ):
        value = _as_int(_safe_decode(raw)) if raw else -1
        if value > 0:
            out[key] = f"{value // 1000}.{value % 1000 // 10}"
    return out


def _header(
    document: _Document | None, warnings: list[str]
) -> tuple[int | None, int | None, dict[int, str], int | None]:
    """Rank, world size, GPU names and base time from the top-level keys; tolerant of layout."""
    rank: int | None = None
    world_size: int | None = None
    gpu_names: dict[int, str] = {}
    base_time_ns: int | None = None
    if document is None:
        return rank, world_size, gpu_names, base_time_ns
    if document.baseTimeNanoseconds:
        base = _as_int(_safe_decode(document.baseTimeNanoseconds))
        base_time_ns = base if base > 0 else None
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
    return rank, world_size, gpu_names, base_time_ns
