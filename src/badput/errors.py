"""The exception tree of badput: one root, one subclass per kind of failure.

The CLI maps each to one clear line and an exit code; nothing here prints.
"""

from __future__ import annotations

import re

__all__ = ["BadputError", "TraceFormatError", "UsageError", "printable"]

# What must not reach a terminal raw from a path or a name: C0 controls (a newline would let a
# crafted file name print a second "badput: error:" line; ESC starts terminal escapes), DEL,
# C1 controls, the Unicode line and paragraph separators, and the bidirectional overrides that
# make text read in another order than it is stored.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    r"""`text` with control and bidi characters escaped (`\n`, `\x1b`, `\u202e`): one line."""
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class BadputError(Exception):
    """Root of every error badput raises on purpose."""


class TraceFormatError(BadputError, ValueError):
    """A trace file cannot be read: missing, not JSON, truncated, or not a profiler trace.

    Args:
        path: the file that failed.
        problem: what is wrong, in words a user can act on (never file contents).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class UsageError(BadputError, ValueError):
    """The user asked for something that cannot be done (a bad option value, say)."""
