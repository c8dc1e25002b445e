"""GPU timing without synchronization: device events recorded on the stream, read later.

The meter records a start and an end event around each step and asks, a few steps later,
whether the end event has completed (`query()`, non-blocking). Only then does it read the
elapsed time. Nothing here ever waits for the GPU.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

__all__ = ["CudaEvents", "DeviceEvent", "EventBackend", "PendingSteps"]


class DeviceEvent(Protocol):
    """What the meter needs of a device event (torch.cuda.Event has this shape)."""

    def query(self) -> bool:
        """Whether the work before the event has completed (never blocks)."""
        ...

    def elapsed_time(self, end_event: Any) -> float:
        """Milliseconds from this event to `end_event` (both completed)."""
        ...


class EventBackend(Protocol):
    """Makes and records device events on the current stream."""

    def record(self) -> DeviceEvent:
        """A new event, recorded now on the current stream."""
        ...


class CudaEvents:
    """torch.cuda events with timing, recorded on the current stream."""

    def __init__(self) -> None:
        import torch

        self._event: Any = torch.cuda.Event

    def record(self) -> DeviceEvent:
        """A timing event recorded on the current stream."""
        event: Any = self._event(enable_timing=True)
        event.record()
        return event  # type: ignore[no-any-return]


class PendingSteps:
    """A bounded queue of (start, end) event pairs, drained as they complete.

    `capacity` bounds memory: if the GPU falls that many steps behind (or an event never
    completes), the oldest pair is dropped and counted.
    """

    def __init__(self, capacity: int = 64) -> None:
        self._pending: deque[tuple[DeviceEvent, DeviceEvent]] = deque()
        self.capacity = capacity
        self.dropped = 0
        self.gpu_ns = 0
        self.count = 0
        self.max_ns = 0

    def __len__(self) -> int:
        """Pairs not read yet."""
        return len(self._pending)

    def push(self, start: DeviceEvent, end: DeviceEvent) -> None:
        """Queue one step's events."""
        if len(self._pending) >= self.capacity:
            self._pending.popleft()
            self.dropped += 1
        self._pending.append((start, end))

    def drain(self, limit: int = 4) -> None:
        """Read up to `limit` completed pairs, oldest first; stop at the first incomplete."""
        for _ in range(limit):
            if not self._pending:
                return
            start, end = self._pending[0]
            if not end.query():
                return
            self._pending.popleft()
            ns = int(start.elapsed_time(end) * 1e6)
            self.gpu_ns += ns
            self.count += 1
            self.max_ns = max(self.max_ns, ns)
