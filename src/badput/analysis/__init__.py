"""Pure analyses over a Trace; they return typed results and never print."""

from badput.analysis.comm import (
    COLLECTIVE_TYPES,
    Collectives,
    CollectiveStat,
    bus_factor,
    collective_stats,
    collective_type,
    collectives,
    link_peak_gbps,
)
from badput.analysis.device import WindowSpec, analyze_trace
from badput.analysis.intervals import IntervalSet
from badput.analysis.ranks import (
    CollectiveWait,
    CrossRank,
    Extreme,
    RankSummary,
    Straggler,
    cross_rank,
    summarize_rank,
)
from badput.analysis.results import (
    Breakdown,
    CommSummary,
    DeviceAnalysis,
    IdleCauses,
    KernelStat,
    StepResult,
    Timeline,
    WindowSource,
)

__all__ = [
    "COLLECTIVE_TYPES",
    "Breakdown",
    "CollectiveStat",
    "CollectiveWait",
    "Collectives",
    "CommSummary",
    "CrossRank",
    "DeviceAnalysis",
    "Extreme",
    "IdleCauses",
    "IntervalSet",
    "KernelStat",
    "RankSummary",
    "StepResult",
    "Straggler",
    "Timeline",
    "WindowSource",
    "WindowSpec",
    "analyze_trace",
    "bus_factor",
    "collective_stats",
    "collective_type",
    "collectives",
    "cross_rank",
    "link_peak_gbps",
    "summarize_rank",
]
