"""Whitespace outside JSON strings, squeezed out of text that offers no place to cut it.

The Kineto reader cuts the events array at line starts and decodes piece by piece; a text
without such places (a one-line trace, or a hostile one: gigabytes of whitespace inside the
array, before it or after it) would otherwise be held whole. Whitespace between tokens carries
no data, so each run of it becomes one byte (a newline when the run held one, so the reader's
cuts still find line starts), while whitespace inside strings is data and is kept. To tell the
two apart, the state "inside a string, after a backslash" is carried from a point known to lie
between tokens (the start of the file, or the `[` of the events array).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["StringState"]

_WS = b" \t\r\n"
_QUOTE = 0x22
_BACKSLASH = 0x5C
_NEWLINE = 0x0A
# Below this share of whitespace a piece is only followed (its quotes counted), not squeezed:
# squeezing a compact text would cost time and give back nothing.
_SQUEEZE_SHARE = 0.25

# Bytes squeezed at a time: the temporaries are a few bytes per byte of a block.
_BLOCK = 8 << 20
_WS_TABLE = np.zeros(256, dtype=bool)
_WS_TABLE[np.frombuffer(_WS, dtype=np.uint8)] = True

U8 = npt.NDArray[np.uint8]


class StringState:
    """Whether the text read so far ends inside a JSON string, and after a backslash there.

    Start it at a point between tokens; feed it every following piece in order, through
    `squeeze` (which also removes whitespace between tokens) or `follow`.
    """

    def __init__(self) -> None:
        self.in_string = False
        self.escaped = False  # the last byte was a backslash that escapes the next one
        #: Bytes of the string the text ends in, so far (0 outside strings).
        self.string_bytes = 0

    def _advance(self, size: int, count: int, last: int) -> None:
        """Step over a piece of `size` bytes holding `count` real quotes, the last at `last`."""
        if count == 0:
            if self.in_string:
                self.string_bytes += size
            return
        self.in_string ^= count % 2 == 1
        self.string_bytes = size - last - 1 if self.in_string else 0

    def follow(self, piece: bytes | bytearray | memoryview) -> None:
        """Advance over `piece` without changing it."""
        if not piece:
            return
        data = bytes(piece)
        if not self.escaped and _BACKSLASH not in data:
            # Every quote is a real one: only their number's parity and the last one matter.
            self._advance(len(data), data.count(b'"'), data.rfind(b'"'))
            return
        arr = np.frombuffer(data, dtype=np.uint8)
        quotes = self._real_quotes(arr)
        self._advance(arr.size, quotes.size, int(quotes[-1]) if quotes.size else -1)
        self.escaped = self._ends_escaped(data)

    def squeeze(self, piece: bytes | bytearray | memoryview) -> bytes:
        """`piece` with each run of whitespace between tokens cut to one byte; advances."""
        size = len(piece)
        if size <= _BLOCK:
            return self._squeeze_block(bytes(piece))
        # Blocks bound the temporaries (a few bytes per input byte) whatever the piece size.
        with memoryview(piece) as view:
            return b"".join(
                self._squeeze_block(bytes(view[i : i + _BLOCK])) for i in range(0, size, _BLOCK)
            )

    def _squeeze_block(self, data: bytes) -> bytes:
        if not data:
            return data
        # bytes.translate deletes through a table (fast); bytes.strip(chars) tests each byte
        # against the set and is ten times slower.
        kept = len(data.translate(None, _WS))
        if not kept:  # all whitespace: the bulk of a whitespace bomb
            self.escaped = False  # a backslash before it escaped its first byte
            if self.in_string:
                self.string_bytes += len(data)
                return data
            return b"\n" if b"\n" in data else b" "
        if len(data) - kept < _SQUEEZE_SHARE * len(data):
            self.follow(data)
            return data
        arr = np.frombuffer(data, dtype=np.uint8)
        quotes = self._real_quotes(arr)
        # Inside a string: an odd number of real quotes before the byte (a running xor; the
        # quotes themselves count as inside, they are kept either way).
        marks = np.zeros(arr.size, dtype=np.uint8)
        marks[quotes] = 1
        inside = np.bitwise_xor.accumulate(marks)
        inside ^= marks ^ np.uint8(self.in_string)
        inside |= marks
        ws = _WS_TABLE[arr]
        ws &= inside == 0
        # Runs of whitespace between tokens: keep each run's first byte, a newline if any
        # byte of the run is one.
        starts = ws.copy()
        starts[1:] &= ~ws[:-1]
        first = np.flatnonzero(starts)
        out = arr.copy()
        if first.size:
            # A run holds a newline if any byte from its start to the next run's does (the
            # bytes between runs are masked out: they are not whitespace between tokens).
            has_newline = np.logical_or.reduceat(ws & (arr == _NEWLINE), first)
            out[first[has_newline]] = _NEWLINE
        ws &= ~starts
        self._advance(arr.size, quotes.size, int(quotes[-1]) if quotes.size else -1)
        self.escaped = self._ends_escaped(data)
        return out[~ws].tobytes()

    def _real_quotes(self, arr: U8) -> npt.NDArray[np.intp]:
        """Positions of the quotes that open or close a string (not escaped by a backslash)."""
        quotes = np.flatnonzero(arr == _QUOTE)
        if quotes.size == 0:
            return quotes
        slashes = np.flatnonzero(arr == _BACKSLASH)
        if slashes.size == 0:
            return quotes[quotes != 0] if self.escaped else quotes
        # Runs of consecutive backslashes as first and last positions: arrays as long as the
        # backslashes, never as the text.
        breaks = np.flatnonzero(np.diff(slashes) != 1) + 1
        run_first = slashes[np.concatenate(([0], breaks))]
        run_last = slashes[np.concatenate((breaks - 1, [slashes.size - 1]))]
        # The run that ends right before each quote, if any.
        k = np.minimum(np.searchsorted(run_last, quotes - 1), run_last.size - 1)
        has_run = run_last[k] == quotes - 1
        length = np.where(has_run, run_last[k] - run_first[k] + 1, 0)
        # A run reaching back to the block's start continues the previous block's escape.
        reaches_start = np.where(has_run, run_first[k] == 0, quotes == 0)
        length += reaches_start * int(self.escaped)
        return quotes[length % 2 == 0]  # type: ignore[no-any-return]

    def _ends_escaped(self, data: bytes) -> bool:
        """Whether the block ends in a backslash that escapes the next block's first byte."""
        trailing = len(data) - len(data.rstrip(b"\\"))  # stops at the last other byte
        if trailing == len(data):
            return (trailing + int(self.escaped)) % 2 == 1
        # Outside a string a backslash is invalid JSON anyway; the decoder will say so.
        return trailing % 2 == 1
