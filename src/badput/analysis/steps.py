"""Steps of one GPU: GPU-side annotations, host steps stretched over their GPU work, and checks.

The checks say where a step family cannot be trusted as it stands: a GPU-side step that misses
GPU work its host step launched (`gpu_step_shortfalls`), a step that runs past the end of the
capture (`clip_steps`). `analysis/window.py` decides what to do about them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis.intervals import IntervalSet
from badput.analysis.patterns import profiler_step_number
from badput.analysis.results import WindowSource

__all__ = [
    "Launches",
    "Shortfall",
    "StepWork",
    "Steps",
    "clip_steps",
    "cpu_steps",
    "gpu_step_shortfalls",
    "gpu_steps",
    "launched_work",
]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

# A step that launched fewer GPU activities than this share of the step before it is taken as
# incompletely captured (the profiler stopped mid-step), as the TensorBoard plugin does.
INCOMPLETE_STEP_SHARE = 0.8

#: How far two records of one instant may disagree, in ns: the oldest Kineto schema writes
#: whole microseconds, so a GPU-side step and the kernels it spans, or a step and the last
#: event, can differ by up to 1 us from rounding alone (Kineto's newer ns-precision traces
#: differ by 1 ns: the TraceLens H100 traces' GPU steps start 1 ns before their first kernel).
#: Differences up to this are rounding, not missing work or a step past the capture.
ROUNDING_NS = 1_000

_NO_START = np.iinfo(np.int64).max
_NO_END = np.iinfo(np.int64).min


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


@dataclass(frozen=True)
class StepWork:
    """The GPU activities of one GPU that each host step launched.

    A step launched an activity when the runtime call with the activity's correlation id lies
    wholly inside the step's CPU span (the TensorBoard plugin's rule, `cpu_steps`).

    Attributes:
        step: per activity, the index of the host step that launched it; -1 for none.
        launched: per activity, whether a step launched it (`step >= 0`).
        count: per step, the activities it launched.
        first_start_ns: per step, the start of its first activity (int64 max where none).
        last_end_ns: per step, the end of its last activity (int64 min where none).
    """

    step: I64
    launched: B
    count: I64
    first_start_ns: I64
    last_end_ns: I64


def launched_work(
    cpu_starts_ns: I64,
    cpu_ends_ns: I64,
    launches: Launches,
    gpu_correlation: I64,
    gpu_starts_ns: I64,
    gpu_ends_ns: I64,
    call: I64 | None = None,
) -> StepWork:
    """Which host step launched each GPU activity, and each step's first and last activity.

    Args:
        cpu_starts_ns: CPU start of each step, ascending.
        cpu_ends_ns: CPU end of each step.
        launches: the trace's launching host calls.
        gpu_correlation: correlation id of each GPU activity of this device.
        gpu_starts_ns: start of each GPU activity.
        gpu_ends_ns: end of each GPU activity.
        call: `launches.find(gpu_correlation)`, where the caller has it already.
    """
    n = cpu_starts_ns.shape[0]
    if call is None:
        call = launches.find(gpu_correlation)
    has_call = call >= 0
    safe = np.maximum(call, 0)
    call_start = launches.start_ns[safe] if launches.start_ns.shape[0] else np.zeros_like(call)
    call_end = launches.end_ns[safe] if launches.end_ns.shape[0] else np.zeros_like(call)
    step = np.searchsorted(cpu_starts_ns, call_start, side="right") - 1
    step_safe = np.maximum(step, 0)
    launched = has_call & (step >= 0)
    if n:
        launched &= call_end <= cpu_ends_ns[step_safe]
    else:
        launched[:] = False
    count = np.bincount(step_safe[launched], minlength=n).astype(np.int64)
    last_end = np.full(n, _NO_END, dtype=np.int64)
    np.maximum.at(last_end, step_safe[launched], gpu_ends_ns[launched])
    first_start = np.full(n, _NO_START, dtype=np.int64)
    np.minimum.at(first_start, step_safe[launched], gpu_starts_ns[launched])
    return StepWork(np.where(launched, step, -1), launched, count, first_start, last_end)


def gpu_steps(names: list[str], starts_ns: I64, ends_ns: I64) -> Steps:
    """Steps recorded on the GPU (`gpu_user_annotation` ProfilerStep#N) of one GPU.

    Kineto writes one such span per step and stream (`GpuUserEventMap`, keyed by device and
    stream, in libkineto's activity profiler): the step on the GPU is the hull of its spans.
    A GPU whose work runs on one stream has one span per step, used as it is.
    """
    first: dict[str, int] = {}
    lo: list[int] = []
    hi: list[int] = []
    for name, start, end in zip(names, starts_ns.tolist(), ends_ns.tolist(), strict=True):
        at = first.setdefault(name, len(lo))
        if at == len(lo):
            lo.append(start)
            hi.append(end)
        else:
            lo[at], hi[at] = min(lo[at], start), max(hi[at], end)
    merged = list(first)
    starts, ends = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    return Steps(
        [merged[i] for i in order.tolist()], starts[order], ends[order], WindowSource.GPU_STEPS
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
    if not (call >= 0).any():
        # No GPU activity has a recorded launch: the CPU spans stand as they are.
        return Steps(names, s0.copy(), s1.copy(), WindowSource.CPU_STEPS)
    work = launched_work(s0, s1, launches, gpu_correlation, gpu_starts_ns, gpu_ends_ns, call)
    del call
    launched, count = work.launched, work.count
    if not launched.any():
        # No step launched GPU work here: the CPU spans stand as they are.
        return Steps(names, s0.copy(), s1.copy(), WindowSource.CPU_STEPS)

    # GPU work launched before the first step that ends before the first step's own GPU work
    # belongs to earlier iterations: the first step starts after it.
    prev_end = int(s0[0])
    if count[0] > 0:
        before = ~launched & (gpu_ends_ns < work.first_start_ns[0])
        if before.any():
            prev_end = max(prev_end, int(gpu_ends_ns[before].max()))

    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    for i in range(n):
        start = max(prev_end, int(s0[i]))
        end = int(s1[i]) if count[i] == 0 else max(int(s1[i]), int(work.last_end_ns[i]))
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


@dataclass(frozen=True)
class Shortfall:
    """A GPU-side step whose host step launched GPU work that no GPU-side step holds.

    Attributes:
        name: the step (`ProfilerStep#N`).
        gpu_start_ns: start of the GPU-side step.
        gpu_end_ns: its end.
        work_start_ns: start of the first GPU activity its host step launched.
        work_end_ns: end of the last one.
        missing_ns: how much of [work_start_ns, work_end_ns) lies outside every GPU-side step.
        held: activities launched by the host step that lie wholly inside the GPU-side step.
        launched: activities the host step launched.
        kernels_held: `held`, counting kernels only.
        kernels: `launched`, counting kernels only.
    """

    name: str
    gpu_start_ns: int
    gpu_end_ns: int
    work_start_ns: int
    work_end_ns: int
    missing_ns: int
    held: int
    launched: int
    kernels_held: int
    kernels: int


def gpu_step_shortfalls(
    gpu: Steps,
    host_names: list[str],
    host_starts_ns: I64,
    host_ends_ns: I64,
    launches: Launches,
    gpu_correlation: I64,
    gpu_starts_ns: I64,
    gpu_ends_ns: I64,
    gpu_is_kernel: B,
) -> list[Shortfall]:
    """The GPU-side steps whose host step launched GPU work that no GPU-side step holds.

    A GPU-side step is paired with the host step of the same number; its work is what that
    host step launched on this GPU (`StepWork`). Kineto draws a GPU-side step over the GPU
    work linked to its annotation, but links a launch only to the innermost `record_function`
    open on the launching thread: work launched under a nested annotation (the optimizer's
    `Optimizer.step#...`, say) or from another thread (autograd's backward) is in no GPU-side
    ProfilerStep. Work that lies outside every GPU-side step by more than `ROUNDING_NS` has
    been lost from them. Work that lies in a neighbouring GPU-side step is not lost: the host
    runs ahead of the GPU, so the two families may draw a step boundary at different kernels.

    Args:
        gpu: the GPU-side steps of this GPU (`gpu_steps`).
        host_names: names of the host steps.
        host_starts_ns: their CPU starts.
        host_ends_ns: their CPU ends.
        launches: the trace's launching host calls.
        gpu_correlation: correlation id of each GPU activity of this GPU.
        gpu_starts_ns: start of each GPU activity.
        gpu_ends_ns: end of each GPU activity.
        gpu_is_kernel: whether each GPU activity is a kernel.

    Returns:
        One entry per GPU-side step that falls short, in time order; empty when all cover.
    """
    if not len(gpu) or not host_names:
        return []
    order = np.argsort(host_starts_ns, kind="stable")
    s0, s1 = host_starts_ns[order], host_ends_ns[order]
    index_of: dict[int, int] = {}
    for at, k in enumerate(order.tolist()):
        host_number = profiler_step_number(host_names[k])
        if host_number is not None:
            index_of.setdefault(host_number, at)
    work = launched_work(s0, s1, launches, gpu_correlation, gpu_starts_ns, gpu_ends_ns)
    held_by_some = IntervalSet.from_spans(gpu.starts_ns, gpu.ends_ns)
    covered = held_by_some.measure_between(gpu_starts_ns, gpu_ends_ns)
    lost = work.launched & (gpu_ends_ns - gpu_starts_ns - covered > ROUNDING_NS)
    # Per host step, counted in one pass each (a pass over every activity per step took
    # minutes on a trace of 19,000 steps): its lost activities and kernels; `work.count`
    # holds its activities (`lost` holds launched activities only: their step is >= 0).
    n_steps = s0.shape[0]
    lost_in = np.bincount(work.step[lost], minlength=n_steps)
    kernels_in = np.bincount(work.step[work.launched & gpu_is_kernel], minlength=n_steps)
    short: list[tuple[str, int, int, int]] = []  # (name, gpu start, gpu end, host step)
    for name, g0, g1 in zip(gpu.names, gpu.starts_ns.tolist(), gpu.ends_ns.tolist(),
                            strict=True):  # fmt: skip
        number = profiler_step_number(name)
        i = index_of.get(number) if number is not None else None
        if i is not None and lost_in[i]:
            short.append((name, g0, g1, i))
    if not short:
        return []
    # Each short step's activities: a slice of them ordered by step, all slices in one array
    # (`seg` says whose each row is), so that the counts are one pass each, not one per step.
    by_step = np.argsort(work.step, kind="stable")
    sorted_step = work.step[by_step]
    steps = np.array([i for *_, i in short], dtype=np.int64)
    lo = np.searchsorted(sorted_step, steps, side="left")
    lengths = np.searchsorted(sorted_step, steps, side="right") - lo
    seg = np.repeat(np.arange(len(short)), lengths)
    rows = by_step[np.arange(seg.shape[0]) - np.repeat(np.cumsum(lengths) - lengths - lo, lengths)]
    g0s = np.array([g0 for _, g0, _, _ in short], dtype=np.int64)
    g1s = np.array([g1 for _, _, g1, _ in short], dtype=np.int64)
    inside = (gpu_starts_ns[rows] >= g0s[seg] - ROUNDING_NS) & (
        gpu_ends_ns[rows] <= g1s[seg] + ROUNDING_NS
    )
    held = np.bincount(seg[inside], minlength=len(short)).tolist()
    kernels_held = np.bincount(seg[inside & gpu_is_kernel[rows]], minlength=len(short)).tolist()
    w0 = work.first_start_ns[steps]
    w1 = work.last_end_ns[steps]
    # The part of each step's work span that no GPU-side step holds (the set is canonical).
    missing = np.where(w1 > w0, w1 - w0 - held_by_some.measure_between(w0, w1), 0).tolist()
    launched = work.count[steps].tolist()
    kernels = kernels_in[steps].tolist()
    return [
        Shortfall(
            name=name,
            gpu_start_ns=g0,
            gpu_end_ns=g1,
            work_start_ns=a,
            work_end_ns=b,
            missing_ns=m,
            held=h,
            launched=n,
            kernels_held=kh,
            kernels=k,
        )
        for (name, g0, g1, _), a, b, m, h, n, kh, k in zip(
            short,
            w0.tolist(),
            w1.tolist(),
            missing,
            held,
            launched,
            kernels_held,
            kernels,
            strict=True,
        )
    ]


def clip_steps(steps: Steps, end_ns: int) -> tuple[Steps, list[tuple[str, int]]]:
    """Steps cut at `end_ns` (the end of the capture), and how far each cut one ran past it.

    A step that ends at most `ROUNDING_NS` past `end_ns` is rounding and stays as it is.

    Returns:
        The steps, and (name, ns past the end) for each step that was cut.
    """
    past = steps.ends_ns - end_ns
    cut = past > ROUNDING_NS
    if not cut.any():
        return steps, []
    ends = np.where(cut, end_ns, steps.ends_ns)
    starts = np.minimum(steps.starts_ns, ends)
    clipped = [(steps.names[i], int(past[i])) for i in np.flatnonzero(cut).tolist()]
    return Steps(steps.names, starts, ends, steps.source, steps.dropped), clipped
