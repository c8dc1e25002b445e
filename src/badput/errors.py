"""The exception tree of badput: one root, one subclass per kind of failure.

The CLI maps each to one clear line and an exit code; nothing here prints.
"""

from __future__ import annotations

__all__ = ["BadputError", "TraceFormatError", "UsageError"]


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
