"""Modules imported on a helper thread while the caller's thread does work that frees the GIL.

A command's analysis modules take 0.15-0.2 s to import (numpy's masked arrays, which
`np.unique` pulls in, 0.05 s of it): imported beside the scan of a trace's pieces (C code
that releases the GIL), on a machine with a second core, that time leaves the path from the
command's start to its report.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

__all__ = ["import_beside"]


def import_beside(names: Sequence[str]) -> threading.Thread:
    """Import `names`, in order, on a daemon thread started now; returns the thread.

    Nothing waits for it: a module the caller imports meanwhile is handed over complete
    (Python's import lock per module), and one that failed to import here is imported, and
    fails, where the caller imports it (the error is not swallowed, only deferred).
    """

    def run() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # the caller's own import raises it, where it is needed
                return

    thread = threading.Thread(target=run, name="badput-imports", daemon=True)
    thread.start()
    return thread
