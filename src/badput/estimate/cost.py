"""Badput in GPU-hours and dollars: what each category of lost time costs a cluster per day."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from badput.errors import UsageError

__all__ = ["BadputCost", "CostLine", "badput_cost"]

HOURS_PER_DAY = 24.0

# Categories of an analysis (`badput.analysis/1`), each a path into a device entry.
_CATEGORIES = (
    ("compute (goodput)", ("breakdown_us", "compute")),
    ("exposed communication", ("breakdown_us", "communication")),
    ("memcpy/memset", ("breakdown_us", "memory")),
    ("idle: waiting on the DataLoader", ("idle_causes_us", "dataloader")),
    ("idle: host busy in CPU ops", ("idle_causes_us", "cpu")),
    ("idle: CUDA runtime/driver calls", ("idle_causes_us", "runtime")),
    ("idle: host outside any op", ("idle_causes_us", "other")),
)


@dataclass(frozen=True)
class CostLine:
    """One category: its share of GPU time, GPU-hours and dollars per day."""

    category: str
    share: float
    gpu_hours_per_day: float
    usd_per_day: float | None


@dataclass(frozen=True)
class BadputCost:
    """Cost of each category for a cluster, from measured shares."""

    gpus: int
    price_per_gpu_hour: float | None
    devices: int
    lines: list[CostLine]

    @property
    def badput_gpu_hours_per_day(self) -> float:
        """GPU-hours per day not spent in compute."""
        return sum(x.gpu_hours_per_day for x in self.lines if not x.category.startswith("compute"))


def badput_cost(analysis: Mapping[str, Any], gpus: int, price: float | None) -> BadputCost:
    """Scale the measured shares of an analysis to a cluster of `gpus` running all day.

    Shares are time-weighted over every device of the analysis (sum of each category over the
    sum of windows), so the traced GPUs stand for the whole cluster.

    Args:
        analysis: a `badput analyze --format json` document.
        gpus: GPUs in the cluster.
        price: dollars per GPU-hour, if known.

    Raises:
        UsageError: not an analysis document, no GPU windows, or bad sizes.
    """
    if gpus < 1:
        raise UsageError("--gpus must be at least 1")
    if price is not None and price <= 0:
        raise UsageError("--price must be positive")
    if not isinstance(analysis, Mapping) or not str(analysis.get("schema", "")).startswith(
        "badput.analysis/"
    ):
        raise UsageError("not a badput analysis (expected the JSON of badput analyze)")
    devices = [d for d in analysis.get("devices", []) if d.get("goodput") is not None]
    window = sum(float(d["window_us"]) for d in devices)
    if not devices or window <= 0:
        raise UsageError("the analysis has no GPU activity to scale")
    lines = []
    for label, (group, key) in _CATEGORIES:
        total = sum(float(d[group][key]) for d in devices)
        share = total / window
        hours = share * gpus * HOURS_PER_DAY
        lines.append(CostLine(label, share, hours, hours * price if price is not None else None))
    return BadputCost(gpus, price, len(devices), lines)
