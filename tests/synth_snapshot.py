"""Builders of CUDA caching-allocator snapshots, and PyTorch's own totals of one.

Snapshots follow the format of PyTorch's `torch/cuda/memory.py` (`_snapshot`): `segments`
with `blocks`, `device_traces` of `alloc`/`free_requested`/`free_completed`/`segment_alloc`
entries carrying `frames` and `time_us`. Used by the memory tests and by
`benchmarks/bench_memory.py`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["block", "entry", "frame", "segment", "segsum_totals"]


def frame(filename: str, line: int, name: str) -> dict[str, Any]:
    """One recorded stack frame."""
    return {"filename": filename, "line": line, "name": name}


def entry(action: str, addr: int, size: int, t: int, frames: list[Any] | None = None) -> Any:
    """One allocator history entry on stream 0 at `t` us."""
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": t,
        "frames": frames or [],
    }


def block(
    addr: int,
    size: int,
    state: str,
    frames: list[Any] | None = None,
    requested: int | None = None,
) -> Any:
    """A block of a segment; an active one's request is its size unless `requested` says."""
    if requested is None:
        requested = size if state != "inactive" else 0
    return {
        "address": addr,
        "size": size,
        "requested_size": requested,
        "state": state,
        "frames": frames or [],
    }


def segment(addr: int, total: int, kind: str, blocks: list[Any]) -> Any:
    """A segment of device 0 on stream 0 holding `blocks`."""
    used = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {
        "device": 0,
        "address": addr,
        "total_size": total,
        "allocated_size": used,
        "active_size": used,
        "requested_size": used,
        "stream": 0,
        "segment_type": kind,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }


class _ExactBytes:
    """Stands in for `_memory_viz.Bytes`, printing exact byte counts instead of rounded ones."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __add__(self, rhs: int) -> _ExactBytes:
        return _ExactBytes(self.value + rhs)

    def __repr__(self) -> str:
        return f"{self.value}B"


def segsum_totals(snapshot: dict[str, Any]) -> tuple[dict[str, int], float | None]:
    """`total_reserved`, `total_allocated` and `total_free` as PyTorch's `segsum` counts them,
    and the internal share of the free bytes it prints (percent, rounded; None without free).

    `torch.cuda._memory_viz.segsum` prints its totals through a byte formatter that rounds;
    an exact one is swapped in for the call. segsum counts requested bytes as allocated, and
    both rounding inside active blocks (internal) and free blocks (external) as free.
    """
    from torch.cuda import _memory_viz

    saved = _memory_viz.Bytes
    _memory_viz.Bytes = _ExactBytes
    try:
        text = _memory_viz.segsum(snapshot)
    finally:
        _memory_viz.Bytes = saved
    totals = {k: int(v) for k, v in re.findall(r"^(total_\w+): (\d+)B", text, re.M)}
    internal = re.search(r"^total_free: \d+B \(([\d.]+)% internal\)", text, re.M)
    return totals, float(internal.group(1)) if internal else None
