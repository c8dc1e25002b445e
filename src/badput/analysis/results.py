"""Typed results of the analyses: plain data, no rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from badput.analysis.classify import KernelClasses
    from badput.analysis.critical_path import CriticalPath
    from badput.analysis.intervals import IntervalSet
    from badput.analysis.launch import LaunchStats
    from badput.analysis.ops import ModelAnalysis
    from badput.analysis.tree import LaunchTree

__all__ = [
    "Breakdown",
    "CommSummary",
    "DeviceAnalysis",
    "IdleCauses",
    "KernelStat",
    "StepResult",
    "Timeline",
    "WindowSource",
    "ratio",
]


def ratio(part: float, whole: float) -> float | None:
    """`part / whole`, or None where the ratio is undefined (`whole` zero or negative).

    Shares of a window, a step or a total divide by a length the trace chose: a trace whose
    events all have zero duration, or that happen at one instant, makes it zero. None says
    "not defined" where 0.0 would claim a measurement, and it stays valid JSON (`null`)
    where NaN would not.

    Example:
        >>> ratio(1, 4), ratio(3, 0)
        (0.25, None)
    """
    return part / whole if whole > 0 else None


@dataclass(frozen=True)
class Breakdown:
    """A partition of a time span by what the GPU did, in nanoseconds."""

    compute_ns: int
    communication_ns: int
    memory_ns: int
    idle_ns: int

    @property
    def total_ns(self) -> int:
        """The span the parts add up to."""
        return self.compute_ns + self.communication_ns + self.memory_ns + self.idle_ns

    @property
    def busy_ns(self) -> int:
        """Time with any GPU activity."""
        return self.compute_ns + self.communication_ns + self.memory_ns


@dataclass(frozen=True)
class IdleCauses:
    """A partition of GPU idle time by what the host was doing, in nanoseconds."""

    runtime_ns: int
    dataloader_ns: int
    cpu_ns: int
    other_ns: int

    @property
    def total_ns(self) -> int:
        """All idle time."""
        return self.runtime_ns + self.dataloader_ns + self.cpu_ns + self.other_ns


@dataclass(frozen=True)
class StepResult:
    """One step: its span, breakdown and idle causes."""

    name: str
    start_ns: int
    dur_ns: int
    breakdown: Breakdown
    idle_causes: IdleCauses


@dataclass(frozen=True)
class KernelStat:
    """Totals of one GPU operation name (and class) inside the window.

    `evidence` says what decided the category (`analysis.classify`), e.g.
    `launching op: c10d::allreduce_` or `name: NCCL`; empty for memory operations.
    """

    name: str
    category: str
    count: int
    total_ns: int
    evidence: str = ""

    @property
    def mean_ns(self) -> float:
        """Mean duration."""
        return self.total_ns / self.count if self.count > 0 else 0.0


@dataclass(frozen=True)
class CommSummary:
    """Collective communication inside the window, in nanoseconds."""

    total_ns: int
    overlapped_ns: int

    @property
    def exposed_ns(self) -> int:
        """Communication not hidden under compute."""
        return self.total_ns - self.overlapped_ns


@dataclass(frozen=True, eq=False)
class Timeline:
    """The interval sets behind a device's numbers, for rules that ask what-if questions.

    GPU sets are clipped to the window; host sets are the trace's, unclipped. `classes` and
    `tree` are the trace's (shared by its GPUs): the kernel classes with their evidence and the
    launch tree (None where it was not built, `model=False`).
    """

    compute: IntervalSet
    communication: IntervalSet  # all collective kernels, hidden or not
    exposed_communication: IntervalSet
    exposed_memory: IntervalSet
    idle: IntervalSet
    idle_runtime: IntervalSet
    idle_dataloader: IntervalSet
    idle_cpu: IntervalSet
    idle_other: IntervalSet
    host_runtime: IntervalSet
    host_dataloader: IntervalSet
    host_cpu: IntervalSet
    classes: KernelClasses | None = None
    tree: LaunchTree | None = None


class WindowSource(StrEnum):
    """Where the analysis window came from."""

    GPU_STEPS = "gpu_steps"
    CPU_STEPS = "cpu_steps"
    GPU_ACTIVITY = "gpu_activity"
    USER = "user"
    NONE = "none"


@dataclass(frozen=True)
class DeviceAnalysis:
    """Everything `badput analyze` computes for one GPU of one trace.

    Attributes:
        trace: the trace file.
        rank: distributed rank, None if the trace has none.
        world_size: distributed world size, None if the trace has none.
        device: GPU index, -1 for a trace with no GPU activity.
        gpu: GPU model name, None if the trace does not say.
        window_start_ns: start of the analysed window.
        window_ns: length of the window.
        window_source: how the window was chosen.
        goodput: compute / window; None without GPU activity or where the window has zero
            length (`goodput_undefined_reason` says which).
        breakdown: partition of the window.
        idle_causes: partition of the idle part.
        comm: communication totals.
        steps: per step results, in time order.
        kernels: per name totals, by total time descending.
        kernel_ns: total duration of kernels in the window (summed, not unioned).
        short_kernel_ns: part of `kernel_ns` in kernels shorter than 10 us.
        kernels_outside_window_ns: time the kernel table's operations (those that start in
            the window, counted whole) run past the window's end.
        dropped_steps: steps left out as incompletely captured or launching nothing.
        warnings: what a reader of the numbers should know.
        model: the model view of the window (`badput.analysis.ops`): GPU time per op and
            module, each op on its roofline, the MFU waterfall, attribution; None where it
            was not computed (a trace without GPU activity, or `model=False`).
        runtime_api: the GPU runtime the host calls go to: "HIP" on AMD GPUs (by the GPU's
            name, else by the host calls, hip* against cuda*), else "CUDA".
        launch: launch delays, queue depth, starved queues and slow launch calls of the
            window (`badput.analysis.launch`); None where the launch tree was not built.
        critical_path: the longest path through the window's dependency graph, its
            breakdown, top ops and per-step lengths (`badput.analysis.critical_path`); None
            where the launch tree was not built or the GPU had no activity.
    """

    trace: str
    rank: int | None
    world_size: int | None
    device: int
    gpu: str | None
    window_start_ns: int
    window_ns: int
    window_source: WindowSource
    goodput: float | None
    breakdown: Breakdown
    idle_causes: IdleCauses
    comm: CommSummary
    steps: list[StepResult] = field(default_factory=list)
    kernels: list[KernelStat] = field(default_factory=list)
    kernel_ns: int = 0
    short_kernel_ns: int = 0
    kernels_outside_window_ns: int = 0
    dropped_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    model: ModelAnalysis | None = field(default=None, repr=False, compare=False)
    runtime_api: str = "CUDA"
    launch: LaunchStats | None = field(default=None, repr=False, compare=False)
    critical_path: CriticalPath | None = field(default=None, repr=False, compare=False)

    @property
    def short_kernel_share(self) -> float | None:
        """Share of kernel time spent in kernels shorter than 10 us."""
        return ratio(self.short_kernel_ns, self.kernel_ns)

    @property
    def goodput_undefined_reason(self) -> str | None:
        """Why `goodput` is None, in words for a report; None where it is defined."""
        if self.goodput is not None:
            return None
        if self.device < 0:
            return "no GPU activity in this trace"
        if self.window_source is WindowSource.NONE:
            return "no step in the requested --window range"
        return "the analysis window has zero length"

    def step_time_stats_ns(self) -> tuple[float, float, int] | None:
        """Mean, median and max step duration; None without steps."""
        if not self.steps:
            return None
        durs = sorted(s.dur_ns for s in self.steps)
        n = len(durs)
        median = durs[n // 2] if n % 2 else (durs[n // 2 - 1] + durs[n // 2]) / 2
        return sum(durs) / n, float(median), durs[-1]
