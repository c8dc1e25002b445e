"""Trace readers and the columnar Trace model."""

from badput.trace.load import find_traces, load_trace
from badput.trace.model import NO_ID, EventKind, FlowPhase, Trace

__all__ = ["NO_ID", "EventKind", "FlowPhase", "Trace", "find_traces", "load_trace"]
