"""The fast path of the Kineto reader: the events array in pieces, scanned in parallel.

The events array is cut into pieces of about `PIECE_BYTES` at places that look like the start
of an event: a `{` after a `,` (and whitespace), `_CUT`. Such a place may lie inside a string
or a nested value, so a cut is only a guess until the piece before it has been scanned: the C
scanner (`_fastscan.scan_run`) starts each piece at a real event boundary, follows strings
exactly, and says where it stopped. A piece whose events end exactly at its cut proves the
cut; one that stops short (its last event runs past the cut) is kept up to its last whole
event, the guesses after it are dropped, and scanning goes on from there with a cut further
on. So the pieces of one text are scanned concurrently (`jobs` threads: the scanner releases
the GIL), merged in order, and the result is the same whatever the cuts and the number of
threads.

Plain files are memory-mapped: pieces are views of the mapping, never copied, and the pages of
a merged piece are handed back (`MADV_DONTNEED`), so the text is never held whole. Gzipped
files are inflated in chunks as the pieces are needed (with python-isal's inflater when
installed; on a thread of its own, ahead of the reader, with two jobs or more), holding only
the chunks of the pieces in flight; a piece inside one chunk is a view of it.

Anything the fast path does not take (an event the scanner refuses is decoded on its own; a
malformed or truncated text, a head without `traceEvents` in its first `HEAD_BYTES`, a run
of `MAX_PIECE_BYTES` without a place to cut) raises `NotFast`, and the caller reads the file
the complete way (`kineto._read_document`), which has the exact rules and error messages.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol

import msgspec

from badput.trace import _early, _fastscan, _limits
from badput.trace._fastscan import RunStatus
from badput.trace._kineto_columns import _Columns
from badput.trace._kineto_json import _EMPTY, _decode_document, _Document
from badput.trace._mapped import (
    _CUT,
    _WS,
    MAX_PIECE_BYTES,
    PIECE_BYTES,
    Ahead,
    MappedText,
    NotFast,
    Piece,
    _cut_in,
    events_array,
)

__all__ = [
    "PIECE_BYTES",
    "Malformed",
    "NotFast",
    "open_text",
    "read_events",
    "usable",
]

#: A gzipped file is inflated in chunks of this many pieces (a piece inside one is not copied).
CHUNKS_PER_PIECE = 4
#: Chunks a thread inflates ahead of the reader (two jobs or more).
AHEAD_CHUNKS = 2
#: Pieces scheduled beyond one per scanning thread (two jobs or more): the scans run ahead
#: of the thread that merges their columns in order, so that a slow merge (a piece whose
#: columns grow the trace's) leaves the scanners work. One spare piece made the 1 GB DLRM
#: shape's read on two cores 58 ms slower (median of 12, 0.779 against 0.721 s with three).
SPARE_PIECES = 3
#: Bytes on each side of where two chunks meet searched for a cut across them.
_SEAM = 64

_SPACE = re.compile(rb"[ \t\r\n]*")


class Malformed(Exception):
    """The text is not valid JSON: `problem` says what and at which byte of the whole text."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


_BYTE = re.compile(r"\(byte (\d+)\)")


def _malformed(piece: Piece, at: int, gzipped: bool) -> Malformed | None:
    """Malformed, with msgspec's reason and the offset in the whole text; or None.

    None when the piece's text from `at` is valid JSON as far as it goes (an array element
    that is no object, say: the complete path reads it).
    """
    try:
        msgspec.json.decode(b"[" + bytes(piece.data[at:]))
    except msgspec.DecodeError as e:
        text = str(e)
        m = _BYTE.search(text)
        if "truncated" in text or "trailing characters" in text or m is None:
            return None  # valid as far as the piece goes, or up to the array's end
        where = piece.base + at + int(m.group(1)) - 1  # the "[" put in front
        of = " of the uncompressed text" if gzipped else ""
        return Malformed(f"not valid JSON ({text[: m.start()].rstrip()} at byte {where:,}{of})")
    return None


def usable() -> bool:
    """Whether the fast path can run: the C scanner is built with `scan_events` and is on."""
    return _fastscan.scan_run(b"]", 0, True) is not None


class Text(Protocol):
    """The uncompressed text of a trace, read front to back (see `MappedText`, `StreamText`)."""

    def head(self, n: int) -> bytes:
        """The first `n` bytes (all of a shorter text)."""
        ...

    def piece(self, pos: int, min_end: int) -> Piece:
        """The text from `pos` to the first cut at or after `max(pos + piece bytes, min_end)`."""
        ...

    def release(self, end: int) -> None:
        """The text before `end` is merged: it will not be asked for again."""
        ...

    def rest(self, pos: int) -> bytes:
        """The text from `pos` to the end."""
        ...

    def size_hint(self) -> int:
        """The length of the whole text: exact when mapped, estimated when inflated."""
        ...


class _Reader(Protocol):
    def read(self, n: int) -> bytes: ...


class StreamText:
    """A gzipped file, inflated in chunks as far as the pieces asked for need.

    The inflater's chunks (`CHUNKS_PER_PIECE` pieces each) are held as it gives them: a piece
    inside one chunk is a view of it, never copied; one across two chunks is joined (one
    copy). With `ahead`, a thread inflates up to `AHEAD_CHUNKS` chunks ahead of the reader
    while the pieces are scanned and merged (python-isal and zlib release the GIL while they
    inflate); without it the reading thread inflates what it needs. Only the chunks from the
    first unmerged offset on are held.
    """

    def __init__(
        self,
        stream: _Reader,
        piece_bytes: int = PIECE_BYTES,
        raw: IO[bytes] | None = None,
        ahead: bool = False,
        chunk_bytes: int | None = None,
    ) -> None:
        self._piece_bytes = piece_bytes
        # At least a seam's width: a cut across chunks then lies across two at most.
        chunk = chunk_bytes if chunk_bytes is not None else CHUNKS_PER_PIECE * piece_bytes
        self._chunk_bytes = max(chunk, _SEAM)
        self._stream = stream
        self._raw = raw  # the compressed file, for `size_hint`
        self._chunks: deque[bytes] = deque()
        self._base = 0  # offset of the first chunk in the text
        self._top = 0  # offset of the end of the last chunk
        self._used = 0  # compressed bytes the chunks held so far came from
        self._eof = False
        self._ahead = _Inflating(stream, raw, self._chunk_bytes) if ahead else None

    def _more(self) -> bool:
        """Inflate one more chunk; False at the end of the text."""
        if self._eof:
            return False
        if self._ahead is not None:
            chunk, self._used = self._ahead.next()
        else:
            try:
                chunk = self._stream.read(self._chunk_bytes)
            except Exception as e:  # corrupt or truncated gzip: the complete path says so
                raise NotFast(str(e)) from None
            self._used = _tell(self._raw)
        if not chunk:
            self._eof = True
            return False
        self._chunks.append(chunk)
        self._top += len(chunk)
        return True

    def _fill(self, end: int) -> None:
        while self._top < end and self._more():
            pass

    def _span(self, lo: int, hi: int) -> memoryview | bytes:
        """The text from offset `lo` to `hi`: a view of one chunk, or the chunks' parts joined."""
        parts: list[memoryview] = []
        off = self._base
        for chunk in self._chunks:
            end = off + len(chunk)
            if end > lo and off < hi:
                parts.append(memoryview(chunk)[max(lo - off, 0) : min(hi, end) - off])
            if end >= hi:
                break
            off = end
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def _cut(self, lo: int, hi: int) -> int:
        """The offset of the `{` of the first cut in the text's `[lo, hi)`, or -1.

        Each chunk is searched where it is; where two chunks meet, the bytes around the seam
        (`_SEAM` of each; a chunk holds at least that many) are searched for a cut that
        begins before it. A cut with more whitespace than that across a seam is not seen (a
        later one is taken: cuts are guesses, the result is the same for any).
        """
        off = self._base
        prev: bytes | None = None
        for chunk in self._chunks:
            end = off + len(chunk)
            if prev is not None and off > lo and off - _SEAM < hi:
                seam = prev[-_SEAM:] + chunk[:_SEAM]
                start = off - min(_SEAM, len(prev))
                m = _CUT.search(seam, max(lo - start, 0), min(hi - start, len(seam)))
                if m is not None and start + m.start() < off:
                    return start + int(m.end()) - 1
            if end > lo and off < hi:
                found = _cut_in(chunk, max(lo - off, 0), min(hi, end) - off)
                if found >= 0:
                    return off + found
            if end >= hi:
                break
            prev, off = chunk, end
        return -1

    def head(self, n: int) -> bytes:
        self._fill(n)
        return bytes(self._span(self._base, min(n, self._top)))

    def piece(self, pos: int, min_end: int) -> Piece:
        target = max(pos + self._piece_bytes, min_end)
        self._fill(target + (1 << 16))
        searched = target
        while True:
            top = self._top
            if target >= top and self._eof:
                return Piece(pos, self._span(pos, top), True)
            cut = self._cut(searched, top)
            if cut >= 0:
                return Piece(pos, self._span(pos, cut), False)
            if top - target > MAX_PIECE_BYTES:
                raise NotFast("no place to cut")
            searched = max(target, top - 64)  # a cut may straddle what was there and what comes
            if not self._more():
                return Piece(pos, self._span(pos, self._top), True)

    def release(self, end: int) -> None:
        while self._chunks and self._base + len(self._chunks[0]) <= end:
            self._base += len(self._chunks.popleft())

    def rest(self, pos: int) -> bytes:
        while self._more():
            pass
        return bytes(self._span(pos, self._top))

    def size_hint(self) -> int:
        """The text inflated so far, scaled by the share of the compressed file it took."""
        held = self._top
        if self._eof or self._raw is None:
            return held
        try:
            total = os.fstat(self._raw.fileno()).st_size
        except (OSError, ValueError, AttributeError):
            return held
        used = self._used
        return held if used <= 0 else max(held, held * total // used)

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
        self._chunks.clear()


def _tell(raw: IO[bytes] | None) -> int:
    """How far the compressed file has been read (0 where it cannot say)."""
    if raw is None:
        return 0
    try:
        return raw.tell()
    except (OSError, ValueError, AttributeError):
        return 0


class _Inflating:
    """A gzip stream inflated on a thread of its own, up to `AHEAD_CHUNKS` chunks ahead."""

    def __init__(self, stream: _Reader, raw: IO[bytes] | None, chunk_bytes: int) -> None:
        self._stream, self._raw, self._chunk_bytes = stream, raw, chunk_bytes
        self._queue: queue.Queue[tuple[bytes, int, BaseException | None]] = queue.Queue(
            AHEAD_CHUNKS
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="badput-inflate", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                chunk = self._stream.read(self._chunk_bytes)
                if not self._put((chunk, _tell(self._raw), None)) or not chunk:
                    return
        except Exception as e:  # corrupt or truncated gzip: handed to the reader
            self._put((b"", 0, e))

    def _put(self, item: tuple[bytes, int, BaseException | None]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> tuple[bytes, int]:
        """The next chunk (empty at the end) and the compressed bytes read up to it."""
        while True:
            try:
                chunk, used, error = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise NotFast("the inflating thread stopped") from None
        if error is not None:
            raise NotFast(str(error))
        return chunk, used

    def close(self) -> None:
        """Stop the thread (a chunk being inflated is finished first) and drop what it held."""
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        self._thread.join()


@contextmanager
def open_text(
    stream: IO[bytes],
    gzipped: bool,
    piece_bytes: int = PIECE_BYTES,
    jobs: int = 1,
    path: str | None = None,
) -> Iterator[Text]:
    """The text of an open trace file: mapped when plain, inflated as read when gzipped.

    Pieces are of `piece_bytes` (and up to the next place to cut). With `jobs` of 2 or more a
    gzipped text is inflated ahead on a thread of its own. `path` names a mapped file should
    it shrink while it is read (`MappedText`).
    """
    text: MappedText | StreamText
    if gzipped:
        text = StreamText(_inflater(stream), piece_bytes, stream, ahead=jobs > 1)
    else:  # mapped already, its first pieces being scanned, where the command began so
        fileno = stream.fileno()
        text = _early.take(fileno, piece_bytes) or MappedText(fileno, piece_bytes, path)
    try:
        yield text
    finally:
        text.close()


def _inflater(raw: IO[bytes]) -> _Reader:
    """A reader of the gzip stream in `raw`: python-isal's when installed (2-3x zlib's speed)."""
    raw.seek(0)
    try:  # optional (the `fast` extra); imported by name, typed or not
        igzip: Any = importlib.import_module("isal.igzip")
    except ImportError:
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    reader: _Reader = igzip.IGzipFile(fileobj=raw, mode="rb")
    return reader


# ---- the events array ------------------------------------------------------------------------


@dataclass
class _Slot:
    piece: Piece
    first: bool
    result: Future[_fastscan.Run | None] | Ahead | _fastscan.Run | None

    def run(self) -> _fastscan.Run | None:
        """The piece's scan (waiting for it where it runs on another thread)."""
        result = self.result
        if isinstance(result, Future):
            return result.result()
        if isinstance(result, Ahead):  # scanned before this reader came (`_early`)
            return _fastscan.run_of(result.raw(), result.piece.data)
        return result


#: What stands for the events array when the document around it is decoded: a value no
#: trace writes, so that a second `traceEvents` after the array (even an empty one, which the
#: complete path would keep) sends the reader the complete way.
_HOLE = b'"\\u0000badput"'


def read_events(
    text: Text,
    columns: _Columns,
    jobs: int,
    slow: Callable[[_Columns, bytes], None],
    progress: Callable[[int], None] | None = None,
) -> _Document | None:
    """Scan the events array of `text` into `columns`; return the rest of the document.

    Args:
        text: the trace's text.
        columns: where the events go.
        jobs: pieces scanned at once (threads); 1 scans in this thread.
        slow: decodes one event the scanner refused (a JSON array of it) into `columns`.
        progress: called with the bytes of text read so far, after each piece.

    Returns:
        The document's other fields (`traceEvents` emptied), None for a bare array.

    Raises:
        NotFast: read the file the complete way.
        Malformed: the events array is not valid JSON (where, in the whole text).
    """
    array, prefix = events_array(text)
    end = _scan_array(text, array + 1, columns, jobs, slow, progress)
    rest = text.rest(end)
    if progress is not None:
        progress(end + len(rest))
    if prefix is None:
        if rest.strip(_WS):
            raise NotFast("text after the array")
        return None
    try:
        document = _decode_document(prefix + _HOLE + rest)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise NotFast("the document around the array") from None
    if bytes(document.traceEvents) != _HOLE:  # the last of two keys is the one a decoder keeps
        raise NotFast("a second traceEvents")
    document.traceEvents = _EMPTY
    for name in document.__struct_fields__:
        setattr(document, name, msgspec.Raw(bytes(getattr(document, name))))
    return document


def _scan(piece: Piece, first: bool) -> _fastscan.Run | None:
    return _fastscan.scan_run(piece.data, 0, first)


def _scan_array(
    text: Text,
    start: int,
    columns: _Columns,
    jobs: int,
    slow: Callable[[_Columns, bytes], None],
    progress: Callable[[int], None] | None,
) -> int:
    """Scan the events from `start` (just past the array's `[`); the offset past its `]`."""
    pool = ThreadPoolExecutor(jobs, thread_name_prefix="badput-scan") if jobs > 1 else None
    pending: deque[_Slot] = deque()
    pos, first, min_end = start, True, 0  # where the next piece to schedule begins
    scheduled_last = False
    # Pieces scanned before this reader came (`_early`): taken as if scheduled here.
    for ahead in text.take_ahead(start) if isinstance(text, MappedText) else ():
        pending.append(_Slot(ahead.piece, ahead.first, ahead))
        pos, first, min_end = ahead.piece.end, False, 0
        scheduled_last = ahead.piece.last
    # Pieces scheduled and not yet merged, at most. Beyond the early ones (done already): the
    # pool scans on while this thread merges their columns, not only once they are merged.
    window = jobs + SPARE_PIECES + len(pending) if pool is not None else 1
    try:
        while True:
            while not scheduled_last and len(pending) < window:
                piece = text.piece(pos, min_end)
                result = pool.submit(_scan, piece, first) if pool else _scan(piece, first)
                pending.append(_Slot(piece, first, result))
                pos, first, min_end = piece.end, False, 0
                scheduled_last = piece.last
            if not pending:
                raise NotFast("the text ends inside the array")
            slot = pending.popleft()
            piece = slot.piece
            walked = _walk(piece, slot.run(), columns, slow, isinstance(text, StreamText))
            _reserve(columns, text, piece.end - start)
            status, at = walked.status, piece.base + walked.at
            if status is RunStatus.DONE:
                return at
            if status is RunStatus.MORE:  # the cut is proven: the next piece starts right
                text.release(piece.end)
                if progress is not None:
                    progress(piece.end)
                continue
            # TRUNCATED: its last event runs past the cut; merged up to that event.
            text.release(at)
            # The pieces scheduled after this one started at a guess that did not hold.
            _drop(pending)
            window = min(window, jobs + SPARE_PIECES)  # the early ones are gone: no more lost
            scheduled_last = False
            first = slot.first and not walked.consumed
            pos, min_end = at, piece.end + 1
    finally:
        _drop(pending)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


#: Events of a piece that the scanner refuses and that are decoded the complete way a few at
#: a time, in order between the runs of events scanned around them; past this many, the rest
#: of the piece is decoded in one array (a small decode costs about a millisecond, a large
#: one some microseconds an event: a trace whose every event is refused, a float pid on each
#: say, read 150 times slower than the complete way when each was decoded alone).
REFUSED_ALONE = 8


@dataclass
class _Walk:
    """How a piece's events ended (`_walk`): a status and an offset, as a run's."""

    status: RunStatus
    at: int
    consumed: bool  # events were merged (the array's first piece is no longer "first")


def _walk(
    piece: Piece,
    run: _fastscan.Run | None,
    columns: _Columns,
    slow: Callable[[_Columns, bytes], None],
    gzipped: bool,
) -> _Walk:
    """The events of `piece` into `columns`, in order, from its scan's `run` on.

    After an event the scanner refuses, the scan goes on from the token after it, in this
    thread and in this piece (the pieces scheduled after it hold, where its own end does).
    Refused events go the complete way (`slow`), those in a row in one array; past
    `REFUSED_ALONE` of them in a piece that is not the last, the rest of the piece goes in
    one array (its decode proves the piece's end, as a run's `MORE` does).

    Raises:
        NotFast: read the file the complete way.
        Malformed: the events array is not valid JSON (where, in the whole text).
    """
    data = piece.data
    spans: list[tuple[int, int]] = []  # refused events in a row, not merged yet
    refused = 0
    consumed = whole_tried = False

    def flush() -> None:
        if spans:
            slow(columns, b"[" + b",".join(bytes(data[a:b]) for a, b in spans) + b"]")
            spans.clear()

    while True:
        if run is None or run.scanned is None:
            raise NotFast("the scanner is off, or a name is not UTF-8")
        if run.status is RunStatus.MALFORMED:
            bad = _malformed(piece, run.at, gzipped)
            raise bad if bad is not None else NotFast("not an event object")
        if run.status in (RunStatus.MORE, RunStatus.TRUNCATED) and piece.last:
            raise NotFast("the text ends inside the array")
        if len(data) > _limits.MAX_STRING_BYTES and _too_long(run.scanned):
            raise NotFast("a string past the limit")  # refused with its size the other way
        if run.scanned.seen or not spans:
            flush()
            columns.add_scanned(run.scanned)
            consumed = consumed or run.scanned.seen > 0
        if run.status is not RunStatus.REFUSED:
            flush()
            return _Walk(run.status, run.at, consumed)
        consumed = True
        refused += 1
        if refused > REFUSED_ALONE and not piece.last and not whole_tried:
            whole_tried = True
            rest = bytes(data[run.at :]).rstrip(b" \t\r\n")
            if rest.endswith(b","):
                flush()
                try:  # the decode adds nothing where the text is not a whole array
                    slow(columns, b"[" + rest[:-1] + b"]")
                    return _Walk(RunStatus.MORE, len(data), True)
                except msgspec.DecodeError:
                    pass  # the piece's end is no place between events: on, one by one
        spans.append((run.at, run.value_end))
        token = _SPACE.match(data, run.value_end).end()  # type: ignore[union-attr]
        after = bytes(data[token : token + 1])
        if after == b"]":
            flush()
            return _Walk(RunStatus.DONE, token + 1, True)
        if after != b",":
            raise NotFast("after a refused event")
        run = _fastscan.scan_run(data, token + 1, False)


def _reserve(columns: _Columns, text: Text, scanned_bytes: int) -> None:
    """Reserve the rows the whole text will hold, projected from the rows so far (15 % over).

    Projected again after each piece; the columns grow only when a projection passes what
    they hold, so a trace denser at its end than at its start costs a copy or two, not one
    per piece. The memory of nine tenths of the projected rows is made resident as the
    columns grow (`_Columns.expect`): a projection a tenth too high still writes it all.
    """
    if scanned_bytes <= 0 or columns.rows == 0:
        return
    projected = columns.rows * text.size_hint() // scanned_bytes
    if projected > columns.capacity():
        columns.expect(projected * 115 // 100 + 4096, filled=projected * 9 // 10)


def _too_long(scanned: _fastscan.Scanned) -> bool:
    """Whether a string of the piece is longer than `_limits.MAX_STRING_BYTES`."""
    limit = _limits.MAX_STRING_BYTES
    texts = (*scanned.strings, *scanned.labels)
    return any(len(t) > limit for t in texts) or any(len(v) > limit for v in scanned.op_values)


def _drop(pending: deque[_Slot]) -> None:
    """Forget scheduled pieces (a running scan finishes; its result is not used)."""
    for slot in pending:
        if isinstance(slot.result, Future | Ahead):
            slot.result.cancel()
    pending.clear()
