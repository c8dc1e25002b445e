"""Pure analyses over a Trace; they return typed results and never print."""

from badput.analysis.device import WindowSpec, analyze_trace
from badput.analysis.intervals import IntervalSet
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
    "Breakdown",
    "CommSummary",
    "DeviceAnalysis",
    "IdleCauses",
    "IntervalSet",
    "KernelStat",
    "StepResult",
    "Timeline",
    "WindowSource",
    "WindowSpec",
    "analyze_trace",
]
