"""Steps and the analysis window of one GPU."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis.results import WindowSource

__all__ = ["Launches", "Steps", "cpu_steps", "gpu_steps"]

I64 = npt.NDArray[np.int64]

# A step that launched fewer GPU activities than this share of the step before it is taken as
# incompletely captured (the profiler stopped mid-step), as the TensorBoard plugin does.
INCOMPLETE_STEP_SHARE = 0.8


@dataclass(frozen=True)
class Steps:
    """Step spans in time order, and what was left out."""

    names: list[str]
    starts_ns: I64
    ends_ns: I64
    source: WindowSource
    dropped: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        """Number of steps."""
        return len(self.names)


@dataclass(frozen=True)
class Launches:
    """Host calls that can launch GPU work, sorted by correlation id.

    These are the runtime and driver calls that carry a correlation id.
    """

    correlation: I64
    start_ns: I64
    end_ns: I64

    def find(self, correlation: I64) -> I64:
        """Index of the launching call of each correlation id, -1 where there is none."""
        if self.correlation.shape[0] == 0:
            return np.full(correlation.shape, -1, dtype=np.int64)
        idx = np.searchsorted(self.correlation, correlation)
        safe = np.minimum(idx, self.correlation.shape[0] - 1)
        found = (self.correlation[safe] == correlation) & (correlation >= 0)
        return np.where(found, safe, -1)


def gpu_steps(names: list[str], starts_ns: I64, ends_ns: I64) -> Steps:
    """Steps recorded on the GPU (`gpu_user_annotation` ProfilerStep#N), used as they are."""
    order = np.argsort(starts_ns, kind="stable")
    return Steps(
        [names[i] for i in order.tolist()], starts_ns[order], ends_ns[order], WindowSource.GPU_STEPS
    )


def cpu_steps(
    names: list[str],
    cpu_starts_ns: I64,
    cpu_ends_ns: I64,
    launches: Launches,
    gpu_correlation: I64,
    gpu_starts_ns: I64,
    gpu_ends_ns: I64,
) -> Steps:
    """Host ProfilerStep spans stretched to cover the GPU work each launched.

    Follows the PyTorch TensorBoard plugin (`StepParser._find_device_steps` and
    `_update_steps_duration` in pytorch/kineto's tb_plugin): a step launched a GPU activity
    when the runtime call with its correlation id lies wholly inside the step's CPU span.

    Args:
        names: step names, parallel to the CPU spans.
        cpu_starts_ns: CPU start of each step.
        cpu_ends_ns: CPU end of each step.
        launches: the trace's launching host calls.
        gpu_correlation: correlation id of each GPU activity of this device.
        gpu_starts_ns: start of each GPU activity.
        gpu_ends_ns: end of each GPU activity.

    Returns:
        The stretched steps, trailing uncaptured steps dropped.
    """
    order = np.argsort(cpu_starts_ns, kind="stable")
    names = [names[i] for i in order.tolist()]
    s0 = cpu_starts_ns[order]
    s1 = cpu_ends_ns[order]
    n = len(names)

    call = launches.find(gpu_correlation)
    has_call = call >= 0
    if not has_call.any():
        # No GPU activity has a recorded launch: the CPU spans stand as they are.
        return Steps(names, s0.copy(), s1.copy(), WindowSource.CPU_STEPS)
    safe = np.maximum(call, 0)
    call_start = launches.start_ns[safe]
    call_end = launches.end_ns[safe]
    step = np.searchsorted(s0, call_start, side="right") - 1
    step_safe = np.maximum(step, 0)
    launched = has_call & (step >= 0) & (call_end <= s1[step_safe])

    count = np.bincount(step_safe[launched], minlength=n)
    device_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(device_end, step_safe[launched], gpu_ends_ns[launched])
    device_start = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(device_start, step_safe[launched], gpu_starts_ns[launched])

    if not launched.any():
        # No step launched GPU work here: the CPU spans stand as they are.
        return Steps(names, s0.copy(), s1.copy(), WindowSource.CPU_STEPS)

    # GPU work launched before the first step that ends before the first step's own GPU work
    # belongs to earlier iterations: the first step starts after it.
    prev_end = int(s0[0])
    if count[0] > 0:
        before = ~launched & (gpu_ends_ns < device_start[0])
        if before.any():
            prev_end = max(prev_end, int(gpu_ends_ns[before].max()))

    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    for i in range(n):
        start = max(prev_end, int(s0[i]))
        end = int(s1[i]) if count[i] == 0 else max(int(s1[i]), int(device_end[i]))
        end = max(end, start)
        starts[i], ends[i] = start, end
        prev_end = end

    keep = n
    if n > 1:
        last = n - 1
        while last >= 0 and count[last] == 0:
            last -= 1
        if last >= 0:
            keep = last + 1
            if last > 0 and count[last - 1] * INCOMPLETE_STEP_SHARE > count[last]:
                keep = last
    return Steps(names[:keep], starts[:keep], ends[:keep], WindowSource.CPU_STEPS, names[keep:])
