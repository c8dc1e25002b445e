"""Entry point for reading traces: file or directory in, Trace out."""

from __future__ import annotations

import os
from collections.abc import Callable

from badput.errors import TraceFormatError
from badput.trace.kineto import read_kineto
from badput.trace.model import Trace

__all__ = ["TRACE_SUFFIXES", "find_traces", "load_trace"]

#: File names taken as traces when a directory is given.
TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(path: str) -> list[str]:
    """The trace files a path names: the file itself, or every trace file in a directory.

    Raises:
        TraceFormatError: the path does not exist, or a directory holds no trace file.
    """
    if os.path.isdir(path):
        found = sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if name.endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(path, name))
        )
        if not found:
            raise TraceFormatError(path, "directory holds no trace files (*.json, *.json.gz)")
        return found
    if not os.path.exists(path):
        raise TraceFormatError(path, "no such file or directory")
    return [path]


def load_trace(path: str, progress: Callable[[int], None] | None = None) -> Trace:
    """Read one trace file (PyTorch profiler JSON, plain or gzipped).

    Args:
        path: the file.
        progress: called with uncompressed bytes read so far.

    Raises:
        TraceFormatError: the file cannot be read as a trace.
    """
    return read_kineto(path, progress=progress)
