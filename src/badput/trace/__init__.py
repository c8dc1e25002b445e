"""Trace readers and the columnar Trace model.

The names below are imported on first use: `_early` (the command line's first moments)
imports a light module of this package before numpy and the readers are needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["NO_ID", "EventKind", "FlowPhase", "Trace", "find_traces", "load_trace"]

_WHERE = {
    "find_traces": "badput.trace.load",
    "load_trace": "badput.trace.load",
    "NO_ID": "badput.trace.model",
    "EventKind": "badput.trace.model",
    "FlowPhase": "badput.trace.model",
    "Trace": "badput.trace.model",
}

if TYPE_CHECKING:
    from badput.trace.load import find_traces, load_trace
    from badput.trace.model import NO_ID, EventKind, FlowPhase, Trace
else:

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'badput.trace' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*globals(), *_WHERE])
