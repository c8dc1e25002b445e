"""Cross-rank summaries: one small all-gather every `report_every` steps, nothing between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from badput.meter.core import Meter

__all__ = ["RankGroup", "gather"]

_FIELDS = ("rank", "median_step_s", "data_wait_per_step_s", "steps")


@dataclass(frozen=True)
class RankGroup:
    """The place of this process in torch.distributed, and a CPU (gloo) group to gather on.

    With the NCCL backend the summary would have to go through the GPU (and synchronize it);
    a gloo group created once at start-up keeps the gather on the host.
    """

    rank: int
    world_size: int
    group: Any

    @staticmethod
    def current() -> RankGroup | None:
        """The group, or None when torch.distributed is not initialized (or one rank)."""
        try:
            import torch.distributed as dist
        except ImportError:
            return None
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return RankGroup(dist.get_rank(), dist.get_world_size(), group)


def gather(meter: Meter) -> list[dict[str, Any]] | None:
    """All-gather each rank's median step and data wait; rank 0 gets the per-rank table.

    Straggler score of a rank = the fastest rank's median step / this rank's median step
    (1.0 for the fastest; 0.71 for a rank 40 % slower).
    """
    import torch
    import torch.distributed as dist

    group = meter._dist
    assert group is not None
    steps = meter._recent_steps_ns()
    median = float(np.median(steps)) / 1e9 if steps else 0.0
    per_step = meter._data_ns / max(1, meter.steps) / 1e9
    mine = torch.tensor(
        [float(group.rank), median, per_step, float(meter.steps)], dtype=torch.float64
    )
    table = [torch.zeros_like(mine) for _ in range(group.world_size)]
    dist.all_gather(table, mine, group=group.group)
    if group.rank != 0:
        return None
    rows = [dict(zip(_FIELDS, t.tolist(), strict=True)) for t in table]
    fastest = min((r["median_step_s"] for r in rows if r["median_step_s"] > 0), default=0.0)
    for r in rows:
        r["rank"] = int(r["rank"])
        r["steps"] = int(r["steps"])
        r["straggler_score"] = fastest / r["median_step_s"] if r["median_step_s"] > 0 else 1.0
    return rows
