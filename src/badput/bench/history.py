"""History of a stored metric: its series per hardware fingerprint, and their change points.

Runs of one commit are aggregated (median) into one point before detection, as the design note
asks (section 6.4). At each change point, the software attributes that differ between the last
point before it and the first point after it are listed: a torch or CUDA bump is the most
likely explanation of a step and is shown next to it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from badput.bench.changepoint import ChangePoint, detect
from badput.bench.store import SERIES_PURPOSES, Point, Store

__all__ = ["HistoryPoint", "Series", "Shift", "history"]


@dataclass(frozen=True)
class HistoryPoint:
    """One point of a series: the runs of one commit (or one run, when it has no commit).

    Attributes:
        commit: Commit sha ("" when unknown).
        value: Median of the runs' values.
        runs: The runs' uuids.
        software: Software attributes of the last of the runs.
    """

    commit: str
    value: float
    runs: list[str]
    software: dict[str, Any]


@dataclass(frozen=True)
class Shift:
    """A change point with the software attributes that changed across it.

    Attributes:
        change: The detected change (its `index` is into the series' points).
        first_bad: Commit of the first point after the change.
        last_good: Commit of the last point before it.
        software_diff: Attribute -> [before, after] (None where the attribute is absent).
    """

    change: ChangePoint
    first_bad: str
    last_good: str
    software_diff: dict[str, list[Any]]


@dataclass
class Series:
    """The history of one metric on one hardware fingerprint.

    Attributes:
        environment_id: The fingerprint.
        label: Its human label.
        unit: Unit of the values.
        higher_is_better: Direction of the metric.
        points: The points, oldest first.
        shifts: The change points.
        note: Why no detection ran, when it did not.
    """

    environment_id: str
    label: str
    unit: str
    higher_is_better: bool
    points: list[HistoryPoint] = field(default_factory=list)
    shifts: list[Shift] = field(default_factory=list)
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "environment_id": self.environment_id,
            "label": self.label,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "points": [
                {"commit": p.commit, "value": p.value, "runs": p.runs, "software": p.software}
                for p in self.points
            ],
            "change_points": [
                {
                    "index": s.change.index,
                    "first_bad": s.first_bad,
                    "last_good": s.last_good,
                    "before": s.change.before,
                    "after": s.change.after,
                    "change": s.change.change,
                    "p_value": s.change.p_value,
                    "confirmed": s.change.confirmed,
                    "regression": (s.change.change < 0) == self.higher_is_better,
                    "software_diff": s.software_diff,
                }
                for s in self.shifts
            ],
            "note": self.note,
        }


def _aggregate(points: list[Point]) -> list[HistoryPoint]:
    """One point per commit (first appearance order); runs without a commit stay alone."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.commit or f"\0{p.run_id}", []).append(p)
    return [
        HistoryPoint(
            commit=g[0].commit,
            value=statistics.median(p.value for p in g),
            runs=[p.run_id for p in g],
            software=g[-1].software,
        )
        for g in groups.values()
    ]


def software_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """Attribute -> [before, after] for the attributes that differ."""
    return {
        k: [before.get(k), after.get(k)]
        for k in sorted(before.keys() | after.keys())
        if before.get(k) != after.get(k)
    }


def history(
    store: Store,
    benchmark: str,
    metric: str,
    *,
    purposes: tuple[str, ...] = SERIES_PURPOSES,
    **detect_kw: Any,
) -> list[Series]:
    """Each hardware fingerprint's series of a metric, with its change points.

    Args:
        store: The results store.
        benchmark: Benchmark id.
        metric: Metric name.
        purposes: Run purposes that form the series (default: history and A/B base sides).
        **detect_kw: Passed to `changepoint.detect` (p_threshold, min_change, seed...).

    Returns:
        One `Series` per environment with points, in the order environments were first seen.
    """
    labels = store.environments()
    out: list[Series] = []
    for env, label in labels.items():
        points = store.series(benchmark, metric, env, purposes=purposes)
        if not points:
            continue
        s = Series(env, label, points[-1].unit, points[-1].higher_is_better, _aggregate(points))
        values = [p.value for p in s.points]
        if any(not v > 0 for v in values):
            s.note = "values that are not positive: no change-point detection"
        else:
            for c in detect(values, **detect_kw):
                before, after = s.points[c.index - 1], s.points[c.index]
                s.shifts.append(
                    Shift(
                        c,
                        after.commit,
                        before.commit,
                        software_diff(before.software, after.software),
                    )
                )
        out.append(s)
    return out
