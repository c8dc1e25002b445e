"""A plain trace file mapped into memory and cut into pieces: the reader's light part.

Everything here imports the standard library alone, so that `_early` can map a trace and
cut its pieces before the command line's heavier modules (numpy, the reader) are imported;
`_pieces` reads with the same classes.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: Bytes of text per piece (the scanner's unit of work and of parallelism).
PIECE_BYTES = 8 << 20
#: A piece grows up to this while no place to cut is found; past it, the complete path reads.
MAX_PIECE_BYTES = 8 * PIECE_BYTES
#: The `"traceEvents": [` key must begin within this many bytes of the start.
HEAD_BYTES = 64 << 20
#: The most threads `default_read_jobs` gives: past it the merging thread is the bottleneck.
MAX_DEFAULT_JOBS = 8

EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb",[ \t\r\n]*\{")
_WS = b" \t\r\n"
_PAGE = mmap.PAGESIZE


class NotFast(Exception):
    """The fast path cannot read this text; read it the complete way."""


def default_read_jobs() -> int:
    """Threads for one trace: the CPUs this process may run on, at most `MAX_DEFAULT_JOBS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_JOBS))


@dataclass
class Piece:
    """`data` is the text from offset `base` (of the whole text) to `end`."""

    base: int
    data: memoryview | bytes
    last: bool  # `end` is the end of the text

    @property
    def end(self) -> int:
        return self.base + len(self.data)


def _cut_in(buf: bytes | bytearray | memoryview | mmap.mmap, lo: int, hi: int) -> int:
    """The offset of the `{` of the first cut in `buf[lo:hi]`, or -1."""
    m = _CUT.search(buf, lo, hi)
    return -1 if m is None else int(m.end()) - 1


class _Head(Protocol):
    def head(self, n: int) -> bytes: ...


def events_array(text: _Head) -> tuple[int, bytes | None]:
    """Where the events array's `[` is, and the text before it (None for a bare array).

    Raises:
        NotFast: no events array where the fast path looks for one (the complete path
            reads the file, with its rules and messages).
    """
    for n in (1 << 20, HEAD_BYTES):  # the key is near the start; look further only if not
        head = text.head(n)
        body = head.lstrip(_WS)
        if not body:
            raise NotFast("empty, or only whitespace in its first bytes")
        if body[:1] == b"[":
            return len(head) - len(body), None
        if body[:1] != b"{":
            raise NotFast("not JSON")
        match = EVENTS_KEY.search(head)
        if match is not None:
            array = match.end() - 1
            return array, head[:array]
        if len(head) < n:
            raise NotFast("no traceEvents array")
    raise NotFast("no traceEvents array in the head")


class Ahead:
    """A piece scanned before the reader came for it (`_early`), on a thread of its own."""

    def __init__(self, piece: Piece, first: bool) -> None:
        self.piece, self.first = piece, first
        self._done = threading.Event()
        self._raw: tuple[Any, ...] | None = None
        self._error: BaseException | None = None

    def scan(self, scan_events: Callable[..., tuple[Any, ...]]) -> None:
        """Scan the piece with the C scanner's `scan_events` (its result, or its error, kept)."""
        try:
            self._raw = scan_events(self.piece.data, 0, self.first)
        except BaseException as e:  # handed to the reader by raw()
            self._error = e
        finally:
            self._done.set()

    def raw(self) -> tuple[Any, ...]:
        """The scanner's result (waiting for it), or the error it raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._raw is not None
        return self._raw

    def cancel(self) -> None:
        """Nothing to cancel: a piece is scheduled here only as a thread takes it."""


#: What a read of a mapped trace says after "PATH: ", should the file shrink under it (the
#: access past its new end faults: `_scan.guard`).
SHRANK = (
    "the file shrank while it was read (truncated, or written again by another process); "
    "read it once it is whole"
)


def shrank_line(path: str) -> bytes:
    """The line a guarded read of `path` ends with.

    Written as the CLI writes its errors (`cli.common.stderr_line`): redacted, control
    characters escaped.
    """
    from badput.errors import printable
    from badput.trace.redact import redact_text

    line = f"badput: error: {printable(redact_text(f'{path}: {SHRANK}'))}\n"
    return line.encode("utf-8", "backslashreplace")


#: The line of a guard that names no file (`MappedText.guard`): made without an import.
_UNNAMED_LINE = f"badput: error: {SHRANK}\n".encode()


def _guard(mapping: mmap.mmap, line: bytes) -> int:
    """`_scan.guard` of `mapping` with `line` (its slot), -1 where there is no guard."""
    try:
        from badput.trace import _scan  # type: ignore[attr-defined]
    except ImportError:
        return -1
    guard = getattr(_scan, "guard", None)  # a stale build may lack it
    if guard is None:
        return -1
    return int(guard(mapping, line))


def _unguard(slot: int) -> None:
    if slot >= 0:
        from badput.trace import _scan  # type: ignore[attr-defined]

        _scan.unguard(slot)


class MappedText:
    """A plain file, memory-mapped read-only; pieces are views of the mapping.

    Pieces scanned ahead of the reader (`_early`) are held in order (`ahead`), and handed
    to the reader once (`take_ahead`). With `path`, should the file shrink while it is read,
    the process ends with exit status 2 and a line that names it (`SHRANK`), not by SIGBUS.
    """

    def __init__(
        self, fileno: int, piece_bytes: int = PIECE_BYTES, path: str | None = None
    ) -> None:
        self._piece_bytes = piece_bytes
        try:
            self._map = mmap.mmap(fileno, 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError) as e:  # an empty file, or one that cannot be mapped
            raise NotFast(str(e)) from None
        self._guard = -1
        if path is not None:
            self.guard(path)
        self._view = memoryview(self._map)
        self._size = len(self._map)
        self._released = 0
        self.ahead: list[Ahead] = []

    @property
    def piece_bytes(self) -> int:
        return self._piece_bytes

    def head(self, n: int) -> bytes:
        return bytes(self._view[:n])

    def piece(self, pos: int, min_end: int) -> Piece:
        target = max(pos + self._piece_bytes, min_end)
        if target >= self._size:
            return Piece(pos, self._view[pos:], True)
        hi = min(self._size, target + MAX_PIECE_BYTES)
        cut = _cut_in(self._map, target, hi)
        if cut < 0:
            if hi < self._size:
                raise NotFast("no place to cut")
            return Piece(pos, self._view[pos:], True)
        return Piece(pos, self._view[pos:cut], False)

    def take_ahead(self, start: int) -> list[Ahead]:
        """The pieces scanned ahead from `start` on, in order, once; none from elsewhere."""
        ahead, self.ahead = self.ahead, []
        return ahead if ahead and ahead[0].piece.base == start and ahead[0].first else []

    def release(self, end: int) -> None:
        lo = self._released // _PAGE * _PAGE
        hi = end // _PAGE * _PAGE
        if hi > lo and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            self._released = hi

    def rest(self, pos: int) -> bytes:
        return bytes(self._view[pos:])

    def size_hint(self) -> int:
        return self._size

    def guard(self, path: str | None) -> None:
        """Guard the mapping (`SHRANK`), in place of its guard so far, if any.

        The line names `path`; with None it names no file, and costs no import (the redaction
        the line goes through imports its rules: 30-40 ms, which `_early` spends once its
        threads scan).
        """
        old = self._guard
        self._guard = _guard(self._map, _UNNAMED_LINE if path is None else shrank_line(path))
        _unguard(old)  # after: some guard holds throughout

    def close(self) -> None:
        self.ahead = []
        _unguard(self._guard)
        self._guard = -1
        self._view.release()
        with contextlib.suppress(BufferError):  # a view still held (by a traceback, say)
            self._map.close()  # otherwise closed when it is freed
