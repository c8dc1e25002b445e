"""Compare two analyses of the same workload: what changed between BEFORE and AFTER.

Pure: takes `analyze_trace` results (with the FULL kernel list, never a report's top-N cut)
and returns a typed `TraceDiff`; nothing here prints.

Time quantities are compared PER STEP (window total / analysed steps), because two captures
of one job rarely hold the same number of steps; a device with no steps is compared per
window instead, and `per` says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from badput.analysis.results import DeviceAnalysis, KernelStat, ratio

__all__ = [
    "MIN_DELTA_NS",
    "MIN_REL_CHANGE",
    "Change",
    "DeviceDiff",
    "KernelChange",
    "TraceDiff",
    "diff_device",
    "diff_traces",
]

# A kernel counts as slower or faster only when its time per step moved by BOTH at least 5 %
# (the minimum effect `badput bench ab` uses: below it, run-to-run variation of GPU clocks and
# launch timing dominates; see ../shared/design/regression-gate.md) AND at least 1 us per step
# (Kineto writes kernel timestamps in whole microseconds, so smaller moves are below the
# trace's resolution).
MIN_REL_CHANGE = 0.05
MIN_DELTA_NS = 1000


@dataclass(frozen=True)
class Change:
    """One quantity before and after, per step (or per window), in nanoseconds."""

    name: str
    before_ns: float
    after_ns: float

    @property
    def delta_ns(self) -> float:
        """After minus before."""
        return self.after_ns - self.before_ns


@dataclass(frozen=True)
class KernelChange:
    """One GPU operation, matched by (name, category), before and after.

    Attributes:
        name: operation name.
        category: gemm, attention, elementwise, reduction, communication, memory or other.
        count_before: launches in the BEFORE window (0 if it did not run).
        count_after: launches in the AFTER window.
        per_step_before_ns: total duration per step before.
        per_step_after_ns: total duration per step after.
        mean_before_ns: mean duration of one launch before (0 if it did not run).
        mean_after_ns: mean duration of one launch after.
    """

    name: str
    category: str
    count_before: int
    count_after: int
    per_step_before_ns: float
    per_step_after_ns: float
    mean_before_ns: float
    mean_after_ns: float

    @property
    def delta_per_step_ns(self) -> float:
        """Change of total time per step."""
        return self.per_step_after_ns - self.per_step_before_ns

    @property
    def rel_change(self) -> float | None:
        """Relative change of time per step; None where it took no time before.

        That is an operation that did not run before, or ran in zero time (undefined ratio).
        """
        return ratio(self.delta_per_step_ns, self.per_step_before_ns)


@dataclass(frozen=True)
class DeviceDiff:
    """BEFORE against AFTER for one pair of GPUs.

    Attributes:
        trace_before: the BEFORE trace file.
        trace_after: the AFTER trace file.
        device_before: GPU index in BEFORE.
        device_after: GPU index in AFTER.
        per: "step" when times are per analysed step, "window" for a device without steps.
        steps_before: analysed steps in BEFORE.
        steps_after: analysed steps in AFTER.
        goodput_before: compute / window before; None without GPU activity or where the
            window has zero length.
        goodput_after: the same after.
        breakdown: compute, communication, memory, idle per step.
        idle_causes: runtime, dataloader, cpu, other per step.
        step_mean: mean step time; None when either side has no steps.
        step_median: median step time; None when either side has no steps.
        launches_before: GPU operations (kernels, memcpy, memset) per step before.
        launches_after: the same after.
        slower: operations over the noise threshold slower, largest increase first.
        faster: operations over the noise threshold faster, largest decrease first.
        appeared: operations only in AFTER, by time per step descending.
        disappeared: operations only in BEFORE, by time per step descending.
        unchanged: operations in both whose change is under the threshold.
        warnings: what a reader of the comparison should know.
    """

    trace_before: str
    trace_after: str
    device_before: int
    device_after: int
    per: str
    steps_before: int
    steps_after: int
    goodput_before: float | None
    goodput_after: float | None
    breakdown: list[Change]
    idle_causes: list[Change]
    step_mean: Change | None
    step_median: Change | None
    launches_before: float
    launches_after: float
    slower: list[KernelChange] = field(default_factory=list)
    faster: list[KernelChange] = field(default_factory=list)
    appeared: list[KernelChange] = field(default_factory=list)
    disappeared: list[KernelChange] = field(default_factory=list)
    unchanged: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def goodput_delta(self) -> float | None:
        """After minus before; None when either side has no goodput."""
        if self.goodput_before is None or self.goodput_after is None:
            return None
        return self.goodput_after - self.goodput_before


@dataclass(frozen=True)
class TraceDiff:
    """Every GPU pair of two traces, and warnings about the pairing."""

    devices: list[DeviceDiff]
    warnings: list[str] = field(default_factory=list)


def _per(d: DeviceAnalysis) -> int:
    return len(d.steps) if d.steps else 1


def _kernel_change(
    before: KernelStat | None, after: KernelStat | None, n_before: int, n_after: int
) -> KernelChange:
    some = before if before is not None else after
    assert some is not None
    return KernelChange(
        name=some.name,
        category=some.category,
        count_before=before.count if before else 0,
        count_after=after.count if after else 0,
        per_step_before_ns=before.total_ns / n_before if before else 0.0,
        per_step_after_ns=after.total_ns / n_after if after else 0.0,
        mean_before_ns=before.mean_ns if before else 0.0,
        mean_after_ns=after.mean_ns if after else 0.0,
    )


def _moved(c: KernelChange, min_rel_change: float, min_delta_ns: float) -> bool:
    """Whether a kernel in both traces moved past both thresholds.

    A kernel can run before in zero time (a trace whose durations are all zero): its relative
    change is then undefined, and infinite for any move, so only the absolute threshold
    decides.
    """
    if c.delta_per_step_ns == 0 or abs(c.delta_per_step_ns) < min_delta_ns:
        return False  # (an unmoved kernel is unchanged even with a threshold of 0)
    rel = c.rel_change
    return rel is None or abs(rel) >= min_rel_change


def diff_device(
    before: DeviceAnalysis,
    after: DeviceAnalysis,
    *,
    min_rel_change: float = MIN_REL_CHANGE,
    min_delta_ns: float = MIN_DELTA_NS,
) -> DeviceDiff:
    """Compare one GPU's analysis before and after.

    Args:
        before: the BEFORE analysis, with its full kernel list.
        after: the AFTER analysis, with its full kernel list.
        min_rel_change: a kernel is slower/faster only past this relative change per step...
        min_delta_ns: ...and past this absolute change per step.

    Returns:
        The comparison; kernels are matched by (name, category).
    """
    nb, na = _per(before), _per(after)
    warnings: list[str] = []
    per = "step"
    if not before.steps or not after.steps:
        per = "window"
        nb = na = 1
        warnings.append("a side has no steps: times are compared per window, not per step")
    elif len(before.steps) != len(after.steps):
        warnings.append(
            f"{len(before.steps)} steps before, {len(after.steps)} after: compared per step"
        )
    bb, ba = before.breakdown, after.breakdown
    breakdown = [
        Change(name, getattr(bb, f"{name}_ns") / nb, getattr(ba, f"{name}_ns") / na)
        for name in ("compute", "communication", "memory", "idle")
    ]
    cb, ca = before.idle_causes, after.idle_causes
    idle_causes = [
        Change(name, getattr(cb, f"{name}_ns") / nb, getattr(ca, f"{name}_ns") / na)
        for name in ("runtime", "dataloader", "cpu", "other")
    ]
    sb, sa = before.step_time_stats_ns(), after.step_time_stats_ns()
    step_mean = step_median = None
    if sb is not None and sa is not None:
        step_mean = Change("step_mean", sb[0], sa[0])
        step_median = Change("step_median", sb[1], sa[1])

    kb = {(k.name, k.category): k for k in before.kernels}
    ka = {(k.name, k.category): k for k in after.kernels}
    slower: list[KernelChange] = []
    faster: list[KernelChange] = []
    unchanged = 0
    for key in kb.keys() & ka.keys():
        c = _kernel_change(kb[key], ka[key], nb, na)
        if _moved(c, min_rel_change, min_delta_ns):
            (slower if c.delta_per_step_ns > 0 else faster).append(c)
        else:
            unchanged += 1
    appeared = [_kernel_change(None, ka[k], nb, na) for k in ka.keys() - kb.keys()]
    disappeared = [_kernel_change(kb[k], None, nb, na) for k in kb.keys() - ka.keys()]
    slower.sort(key=lambda c: (-c.delta_per_step_ns, c.name))
    faster.sort(key=lambda c: (c.delta_per_step_ns, c.name))
    appeared.sort(key=lambda c: (-c.per_step_after_ns, c.name))
    disappeared.sort(key=lambda c: (-c.per_step_before_ns, c.name))
    return DeviceDiff(
        trace_before=before.trace,
        trace_after=after.trace,
        device_before=before.device,
        device_after=after.device,
        per=per,
        steps_before=len(before.steps),
        steps_after=len(after.steps),
        goodput_before=before.goodput,
        goodput_after=after.goodput,
        breakdown=breakdown,
        idle_causes=idle_causes,
        step_mean=step_mean,
        step_median=step_median,
        launches_before=sum(k.count for k in before.kernels) / nb,
        launches_after=sum(k.count for k in after.kernels) / na,
        slower=slower,
        faster=faster,
        appeared=appeared,
        disappeared=disappeared,
        unchanged=unchanged,
        warnings=warnings,
    )


def diff_traces(
    before: list[DeviceAnalysis],
    after: list[DeviceAnalysis],
    *,
    min_rel_change: float = MIN_REL_CHANGE,
    min_delta_ns: float = MIN_DELTA_NS,
) -> TraceDiff:
    """Compare every GPU of two traces.

    GPUs are paired by device index. When the two traces hold different GPU sets they are
    paired in index order instead, with a warning; GPUs left without a partner are named in a
    warning and not compared.

    Args:
        before: `analyze_trace` of the BEFORE trace (full kernel lists).
        after: `analyze_trace` of the AFTER trace.
        min_rel_change: see `diff_device`.
        min_delta_ns: see `diff_device`.

    Returns:
        One `DeviceDiff` per pair, in BEFORE's device order.

    Example:
        >>> from badput.analysis import analyze_trace  # doctest: +SKIP
        >>> from badput.trace import load_trace  # doctest: +SKIP
        >>> a, b = load_trace("a.json"), load_trace("b.json")  # doctest: +SKIP
        >>> d = diff_traces(analyze_trace(a), analyze_trace(b))  # doctest: +SKIP
        >>> [k.name for k in d.devices[0].slower]  # doctest: +SKIP
        ['volta_sgemm_64x64_nt']
    """
    b_sorted = sorted(before, key=lambda d: d.device)
    a_sorted = sorted(after, key=lambda d: d.device)
    warnings: list[str] = []
    b_ids = [d.device for d in b_sorted]
    a_ids = [d.device for d in a_sorted]
    if b_ids == a_ids:
        pairs = list(zip(b_sorted, a_sorted, strict=True))
    else:
        warnings.append(
            f"the traces hold different GPUs (before {b_ids}, after {a_ids}): paired in order"
        )
        pairs = list(zip(b_sorted, a_sorted, strict=False))
        n = len(pairs)
        if len(b_sorted) > n:
            warnings.append(f"not compared, only in before: GPUs {b_ids[n:]}")
        if len(a_sorted) > n:
            warnings.append(f"not compared, only in after: GPUs {a_ids[n:]}")
    devices = [
        diff_device(b, a, min_rel_change=min_rel_change, min_delta_ns=min_delta_ns)
        for b, a in pairs
    ]
    return TraceDiff(devices=devices, warnings=warnings)
