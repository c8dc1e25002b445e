"""The limits badput enforces on what it reads: memory for held text, nesting, name lengths.

A trace is untrusted input. The readers stream, so a well-formed trace of any size needs little
memory; what a hostile file can still make a reader hold (a JSON text that offers no place to
cut it, a gzip stream that inflates a thousandfold, a pickle that unpickles into one huge
object) is checked against the memory this process may still use, and refused with the size
reached before the machine runs out (see docs/security.md).
"""

from __future__ import annotations

import io
import os
import resource
import sys
from typing import TYPE_CHECKING, Protocol

from badput._text import is_ascii_digits
from badput.errors import TraceFormatError

if TYPE_CHECKING:
    from badput.trace._squeeze import StringState

__all__ = [
    "MAX_HELD_ENV",
    "MAX_STRING_BYTES",
    "NAME_MATCH_CHARS",
    "BoundedReader",
    "available_memory_bytes",
    "check_held",
    "held_bytes_limit",
    "nesting_error",
]

#: Environment variable that sets the held-text limit in bytes (tests, or a user who knows
#: better than the estimate from available memory).
MAX_HELD_ENV = "BADPUT_MAX_HELD_BYTES"
#: Bytes one JSON string of a trace may hold: names of 10 MB are read (and matched on their
#: first `NAME_MATCH_CHARS`), a string of gigabytes is an attack, refused before it is held.
MAX_STRING_BYTES = 256 << 20
#: Characters of a name that the classifiers look at: a name is kept whole, but no regex runs
#: over more than this, so a 10 MB kernel name costs what a 4 KB one does.
NAME_MATCH_CHARS = 4096
# Share of the available memory one reader may hold as text: the decoders need about as much
# again for what they build from it, and the rest of the process needs room too.
_HELD_SHARE = 3
# Bytes a BoundedReader asks its stream for at a time.
_PIECE_BYTES = 8 << 20
# Without any way to tell available memory (not Linux, no sysconf): a conservative 2 GiB.
_UNKNOWN_AVAILABLE = 2 << 30


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) is not a number


def _cgroup_available() -> int | None:
    """What the memory cgroup (v2, else v1) of this process still allows; None without one."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        limit = _read_int(limit_file)
        if limit is None or limit >= 1 << 60:  # v1 writes "no limit" as a huge number
            continue
        usage = _read_int(usage_file) or 0
        return max(0, limit - usage)
    return None


def _rlimit_available() -> int | None:
    """What `ulimit -v` (RLIMIT_AS) still allows this process to map; None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", "rb") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        mapped = 0
    return max(0, soft - mapped)


def available_memory_bytes() -> int:
    """Bytes of memory this process may still use: the least of the machine, cgroup and ulimit."""
    found = [
        v for v in (_meminfo_available(), _cgroup_available(), _rlimit_available()) if v is not None
    ]
    return min(found) if found else _UNKNOWN_AVAILABLE


def held_bytes_limit(share: int = 1) -> int:
    """Bytes of text one reader may hold at once: a share of available memory, or the env value.

    Args:
        share: divides the limit, for readers whose objects take several times their text.

    Raises:
        TraceFormatError: `$BADPUT_MAX_HELD_BYTES` is set but not a positive integer.
    """
    raw = os.environ.get(MAX_HELD_ENV)
    if raw is not None:
        text = raw.strip()
        if not (is_ascii_digits(text) and int(text) > 0):
            raise TraceFormatError(f"${MAX_HELD_ENV}", "must be a positive number of bytes")
        return int(text) // share
    return available_memory_bytes() // _HELD_SHARE // share


def nesting_error(path: str) -> TraceFormatError:
    """The error for JSON nested deeper than the decoder follows (its recursion limit)."""
    return TraceFormatError(
        path,
        f"JSON nested too deeply: badput reads at most about {sys.getrecursionlimit():,} "
        "levels of nested arrays and objects",
    )


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class BoundedReader(io.RawIOBase):
    """A read-only stream that refuses to give more than `limit` bytes in all.

    For readers that must take a stream whole (an unpickler): a gzip stream that inflates to
    more than the memory left is refused at the limit, before the bytes are handed on, instead
    of running the machine out of memory.

    Args:
        stream: the stream to read, plain or inflating.
        path: the file, for the error.
        limit: bytes at most; `held_bytes_limit()` when None.
    """

    def __init__(self, stream: _Readable, path: str, limit: int | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._path = path
        self._limit = held_bytes_limit() if limit is None else limit
        self.total = 0

    def readable(self) -> bool:
        """Always: the stream is for reading."""
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        """Read into `buffer`, refusing to pass the limit.

        Raises:
            TraceFormatError: more than the limit would have been read.
        """
        # One byte past the limit at most (a read that large is refused only if the data
        # really goes on), and a bounded piece per call: the stream's read makes a copy.
        want = min(len(buffer), _PIECE_BYTES, max(self._limit - self.total + 1, 0))
        data = self._stream.read(want)
        n = len(data)
        with memoryview(buffer) as view:
            view[:n] = data
        self.total += n
        if self.total > self._limit:
            raise TraceFormatError(
                self._path,
                f"refused: it inflates past {self._limit:,} bytes, more than badput may hold "
                f"at once (a share of the memory available; ${MAX_HELD_ENV} sets it)",
            )
        return n


def check_held(path: str, held: int, total: int, limit: int, squeezer: StringState | None) -> None:
    """Refuse text held past `limit`, or one string longer than any trace holds.

    Args:
        path: the file, for the error.
        held: bytes of text held now.
        total: bytes read so far.
        limit: `held_bytes_limit()`.
        squeezer: the string state of the text held, when it is followed.

    Raises:
        TraceFormatError: either limit is passed.
    """
    if squeezer is not None and squeezer.string_bytes > MAX_STRING_BYTES:
        raise TraceFormatError(
            path,
            f"refused: a JSON string of over {squeezer.string_bytes:,} bytes (at byte "
            f"{total - squeezer.string_bytes:,} of the text), past the {MAX_STRING_BYTES:,} "
            "a trace's names and values may hold",
        )
    if held > limit:
        raise TraceFormatError(
            path,
            f"refused: {held:,} bytes of JSON text (of {total:,} read) give no place to cut "
            f"them into pieces, past the {limit:,} bytes badput may hold at once (a share of "
            f"the memory available; ${MAX_HELD_ENV} sets it)",
        )
