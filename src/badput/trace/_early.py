"""The first pieces of a trace scanned from a command's first moments, beside its imports.

`badput analyze TRACE` spends its first quarter second or so importing (the command line,
numpy, the reader and the analyses), on one core: the trace's scan began only after. On two
cores or more, `start` (called first thing by the command line, with its arguments) maps the
one plain trace they name, finds its events array, and scans its first pieces on the other
cores meanwhile, cut as the reader cuts them. The reader takes them (`take`) when it opens
the same file (the same device, inode, size and modification time), as if it had scheduled
them itself, so the result is the same; a file it never opens is dropped with the process.

Imports the standard library and the C scanner alone (not numpy, not the reader), and fails
open: anything unexpected, and nothing is scanned early.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from badput.trace._mapped import (
    PIECE_BYTES,
    Ahead,
    MappedText,
    NotFast,
    default_read_jobs,
    events_array,
)

__all__ = ["MAX_PIECES", "drop", "start", "take"]

#: Pieces scanned before the reader takes them, at most (their columns are held till then).
MAX_PIECES = 32

_lock = threading.Lock()
_started: _Early | None = None


class _Early:
    """A mapped trace whose pieces are scanned in order from `start` on (`run`)."""

    def __init__(self, text: MappedText, identity: tuple[int, ...], start: int) -> None:
        self.text, self.identity = text, identity
        self._next, self._first = start, True
        self._stop = False
        self._lock = threading.Lock()

    def run(self, threads: int, scan_events: Callable[..., tuple[Any, ...]]) -> None:
        """Scan with `threads` threads, each taking the next piece as it is done with one."""
        for _ in range(threads):
            threading.Thread(
                target=self._work, args=(scan_events,), name="badput-early-scan", daemon=True
            ).start()

    def _work(self, scan_events: Callable[..., tuple[Any, ...]]) -> None:
        while True:
            with self._lock:
                if self._stop or len(self.text.ahead) >= MAX_PIECES:
                    return
                try:
                    piece = self.text.piece(self._next, 0)
                except Exception:  # no place to cut (NotFast): the reader says what it is
                    self._stop = True
                    return
                ahead = Ahead(piece, self._first)
                self.text.ahead.append(ahead)
                self._next, self._first = piece.end, False
                self._stop = piece.last
            ahead.scan(scan_events)

    def stop(self) -> None:
        """No piece is begun after this (one being scanned is finished)."""
        with self._lock:
            self._stop = True


def start(argv: list[str], piece_bytes: int = PIECE_BYTES) -> None:
    """Begin scanning the one plain Kineto trace `argv` (an `analyze` command's) names.

    Only with two CPUs or more and two read jobs or more (`--jobs`, or its default), no
    `--executor` given (the local one), and exactly one argument naming a plain `.json`
    file whose head holds an events array; threads: the read jobs less one (this thread
    goes on importing).
    `piece_bytes`: as the reader will cut them (else it takes none of them).
    """
    global _started
    try:
        with _lock:
            if _started is None:
                _started = _start(argv, piece_bytes)
    except Exception:  # fail open: the reader scans everything, as ever
        _started = None


def drop() -> None:
    """Forget the trace being scanned early, if any (no more pieces begun, its text closed)."""
    global _started
    with _lock:
        early, _started = _started, None
    if early is not None:
        early.stop()
        early.text.close()


def take(fileno: int, piece_bytes: int) -> MappedText | None:
    """The text of the open file `fileno` if it is the one being scanned early, else None.

    Once: the pieces scanned so far (and those being scanned) go with the text
    (`MappedText.take_ahead`), and no more are begun.
    """
    global _started
    with _lock:
        early, _started = _started, None
    if early is None:
        return None
    early.stop()
    try:
        same = _identity(os.fstat(fileno)) == early.identity
    except OSError:
        same = False
    if same and early.text.piece_bytes == piece_bytes:
        return early.text
    early.text.close()
    return None


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _start(argv: list[str], piece_bytes: int) -> _Early | None:
    if os.environ.get("BADPUT_NO_C_SCAN"):
        return None
    jobs = _jobs(argv)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    threads = min(jobs if jobs is not None else default_read_jobs(), cpus) - 1
    if threads < 1 or any(a.startswith("--executor") for a in argv):
        return None
    files = [a for a in argv if a.endswith(".json") and not a.startswith("-")]
    found = [(f, e) for f in files if (e := _mapped_trace(f, piece_bytes)) is not None]
    if len(found) != 1:
        for _, e in found:
            e.text.close()
        return None
    path, early = found[0]
    from badput._memory import keep_freed_memory
    from badput.trace import _scan  # type: ignore[attr-defined]  # the C scanner

    scan_events = getattr(_scan, "scan_events", None)
    if scan_events is None:  # an older build: the reader decides
        early.text.close()
        return None
    keep_freed_memory(numpy_too=False)  # before the scanner's first columns: the one heap
    early.run(threads, scan_events)
    early.text.guard(path)
    return early


def _jobs(argv: list[str]) -> int | None:
    """`--jobs N` (`--jobs=N`, `-j N`, `-jN`) of `argv`; None where not given.

    0 where N is no number (the command line refuses it).
    """
    for i, a in enumerate(argv):
        value = None
        if a in ("--jobs", "-j") and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--jobs="):
            value = a.split("=", 1)[1]
        elif a.startswith("-j") and len(a) > 2:
            value = a[2:]
        if value is not None:
            return int(value) if value.isdigit() else 0
    return None


def _mapped_trace(path: str, piece_bytes: int) -> _Early | None:
    """`path` mapped, where it is a regular file whose head holds an events array."""
    try:  # not blocking where it is a FIFO (no writer yet): the reader refuses it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        text = MappedText(fd, piece_bytes)
        text.guard(None)  # its line names the file once the threads scan (`_start`)
    except (OSError, NotFast):
        return None
    finally:
        os.close(fd)
    try:
        array, _ = events_array(text)
    except NotFast:
        text.close()
        return None
    return _Early(text, _identity(st), array + 1)
