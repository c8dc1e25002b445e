"""Compare two analyses of the same workload: what changed between BEFORE and AFTER.

Pure: takes `analyze_trace` results (with the FULL kernel list, never a report's top-N cut)
and returns a typed `TraceDiff`; nothing here prints.

Time quantities are compared PER STEP (window total / analysed steps), because two captures
of one job rarely hold the same number of steps; a device with no steps is compared per
window instead, and `per` says which.

Ops (issue 17) are compared where both GPUs carry the model view (`DeviceAnalysis.model`):
op rows are matched by (op, `Input Dims`, `Input type`), the dims in a canonical form (their
compact JSON), so an op whose shapes changed is one row gone and one new, as it should be: the
two calls do different work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from badput.analysis.ops import ModelAnalysis, OpRow
from badput.analysis.results import DeviceAnalysis, KernelStat, ratio

__all__ = [
    "GONE",
    "MATCHED",
    "MIN_DELTA_NS",
    "MIN_REL_CHANGE",
    "NEW",
    "Change",
    "DeviceDiff",
    "KernelChange",
    "ModuleChange",
    "OpChange",
    "OpDiff",
    "TraceDiff",
    "canonical_dims",
    "diff_device",
    "diff_ops",
    "diff_traces",
    "op_key",
]

# A kernel counts as slower or faster only when its time per step moved by BOTH at least 5 %
# (the minimum effect `badput bench ab` uses: below it, run-to-run variation of GPU clocks and
# launch timing dominates; see docs/regression-gate.md) AND at least 1 us per step
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


class _PerStepChange:
    """The change of a time per step; mixed into the change rows of kernels, ops, modules."""

    per_step_before_ns: float
    per_step_after_ns: float

    @property
    def delta_per_step_ns(self) -> float:
        """Change of GPU time per step."""
        return self.per_step_after_ns - self.per_step_before_ns

    @property
    def rel_change(self) -> float | None:
        """Relative change of time per step; None where it took no time before.

        That is something that did not run before, or ran in zero time (undefined ratio).
        """
        return ratio(self.delta_per_step_ns, self.per_step_before_ns)


@dataclass(frozen=True)
class KernelChange(_PerStepChange):
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


#: `OpChange.status` of an op key in both traces, only in AFTER, only in BEFORE.
MATCHED, NEW, GONE = "matched", "new", "gone"


def canonical_dims(input_dims: object) -> str:
    """`Input Dims` as compact JSON: equal shapes give equal text, whatever their container."""
    return msgspec.json.encode(input_dims, enc_hook=str).decode()


def op_key(row: OpRow) -> tuple[str, str, tuple[str, ...]]:
    """What an op row is matched by: (op, canonical input dims, input types)."""
    return row.op, canonical_dims(row.input_dims), tuple(row.input_types)


@dataclass(frozen=True)
class OpChange(_PerStepChange):
    """One (op, input dims, input types) group before and after.

    Times are per step (or per window, as the device's `per`); calls and rates are not.

    Attributes:
        op: the op name.
        category: op family, None for an op without a model (AFTER's where both have one).
        input_dims: `Input Dims` as recorded, None without them.
        dims_key: `input_dims` in the canonical form the match uses (compact JSON).
        input_types: `Input type` as recorded.
        status: "matched" (in both), "new" (only in AFTER) or "gone" (only in BEFORE).
        count_before: calls in the BEFORE window (0 for a new op).
        count_after: calls in the AFTER window (0 for a gone op).
        per_step_before_ns: GPU time of the group's calls per step before.
        per_step_after_ns: the same after.
        tflops_before: achieved TFLOP/s before; None without a model or absent.
        tflops_after: the same after.
        roof_share_before: achieved share of the roof before; None without a roof or absent.
        roof_share_after: the same after.
        module: the module path of most of the group's GPU time (AFTER's, else BEFORE's).
    """

    op: str
    category: str | None
    input_dims: object
    dims_key: str
    input_types: list[str]
    status: str
    count_before: int
    count_after: int
    per_step_before_ns: float
    per_step_after_ns: float
    tflops_before: float | None
    tflops_after: float | None
    roof_share_before: float | None
    roof_share_after: float | None
    module: str | None


@dataclass(frozen=True)
class ModuleChange(_PerStepChange):
    """One module path (rolled up) in both traces, GPU time per step before and after."""

    path: str
    depth: int
    per_step_before_ns: float
    per_step_after_ns: float


@dataclass(frozen=True)
class OpDiff:
    """The model views of one GPU pair compared.

    Attributes:
        ops: every op key of either side, by |change of GPU time per step| descending (then
            op name, dims, types).
        modules: module paths present in both, by |change per step| descending (then path).
        mfu_before: model FLOPs utilisation before; None without a peak or a window.
        mfu_after: the same after.
        precision_before: the precision the MFU is against before.
        precision_after: the same after.
        has_shapes_before: whether BEFORE records `Input Dims`.
        has_shapes_after: the same for AFTER.
    """

    ops: list[OpChange]
    modules: list[ModuleChange]
    mfu_before: float | None
    mfu_after: float | None
    precision_before: str | None
    precision_after: str | None
    has_shapes_before: bool
    has_shapes_after: bool

    @property
    def mfu_delta(self) -> float | None:
        """After minus before; None when either side has no MFU."""
        if self.mfu_before is None or self.mfu_after is None:
            return None
        return self.mfu_after - self.mfu_before

    def count(self, status: str) -> int:
        """Op keys with that status ("matched", "new", "gone")."""
        return sum(1 for c in self.ops if c.status == status)


@dataclass(frozen=True)
class _Group:
    """The op rows of one side sharing a key (normally one)."""

    row: OpRow  # the one with most GPU time: category, dims, module
    count: int
    kernel_ns: int
    tflops: float | None
    roof_share: float | None


def _weighted(values: list[float | None], weights: list[int]) -> float | None:
    """Kernel-time weighted mean; None if any is None (or no time)."""
    if any(v is None for v in values):
        return None
    total = sum(weights)
    if total <= 0:
        return values[0]
    return sum(v * w for v, w in zip(values, weights, strict=True) if v is not None) / total


def _groups(m: ModelAnalysis) -> dict[tuple[str, str, tuple[str, ...]], _Group]:
    """Op rows by key.

    Rows the analysis kept apart can share a key (types it read as different text): they
    merge, TFLOP/s and roof share weighted by kernel time (exact for TFLOP/s: each is FLOPs
    over time).
    """
    by_key: dict[tuple[str, str, tuple[str, ...]], list[OpRow]] = {}
    for r in m.ops:
        by_key.setdefault(op_key(r), []).append(r)
    out = {}
    for key, rows in by_key.items():
        if len(rows) == 1:
            (r,) = rows
            out[key] = _Group(r, r.count, r.kernel_ns, r.tflops_per_s, r.roof_share)
            continue
        ns = [r.kernel_ns for r in rows]
        out[key] = _Group(
            row=max(rows, key=lambda r: r.kernel_ns),
            count=sum(r.count for r in rows),
            kernel_ns=sum(ns),
            tflops=_weighted([r.tflops_per_s for r in rows], ns),
            roof_share=_weighted([r.roof_share for r in rows], ns),
        )
    return out


def _op_change(
    key: tuple[str, str, tuple[str, ...]],
    before: _Group | None,
    after: _Group | None,
    nb: int,
    na: int,
) -> OpChange:
    some = after if after is not None else before
    assert some is not None
    status = MATCHED if before is not None and after is not None else NEW if after else GONE
    module = after.row.module if after is not None else None
    if module is None and before is not None:
        module = before.row.module
    category = after.row.category if after is not None else None
    if category is None and before is not None:
        category = before.row.category
    return OpChange(
        op=key[0],
        category=category,
        input_dims=some.row.input_dims,
        dims_key=key[1],
        input_types=list(key[2]),
        status=status,
        count_before=before.count if before else 0,
        count_after=after.count if after else 0,
        per_step_before_ns=before.kernel_ns / nb if before else 0.0,
        per_step_after_ns=after.kernel_ns / na if after else 0.0,
        tflops_before=before.tflops if before else None,
        tflops_after=after.tflops if after else None,
        roof_share_before=before.roof_share if before else None,
        roof_share_after=after.roof_share if after else None,
        module=module,
    )


def diff_ops(before: ModelAnalysis, after: ModelAnalysis, nb: int = 1, na: int = 1) -> OpDiff:
    """Compare two model views: op rows by (op, dims, types), modules by path, the MFU.

    Args:
        before: the BEFORE GPU's `DeviceAnalysis.model`.
        after: the AFTER GPU's.
        nb: steps (or 1 for per window) that BEFORE's times are divided by.
        na: the same for AFTER.

    Returns:
        Every op key of either side by |change of time per step|, modules in both likewise.
    """
    gb, ga = _groups(before), _groups(after)
    ops = [_op_change(k, gb.get(k), ga.get(k), nb, na) for k in gb.keys() | ga.keys()]
    ops.sort(key=lambda c: (-abs(c.delta_per_step_ns), c.op, c.dims_key, c.input_types))
    mb = {r.path: r for r in before.modules}
    ma = {r.path: r for r in after.modules}
    modules = [
        ModuleChange(p, ma[p].depth, mb[p].kernel_ns / nb, ma[p].kernel_ns / na)
        for p in mb.keys() & ma.keys()
    ]
    modules.sort(key=lambda c: (-abs(c.delta_per_step_ns), c.path))
    eb, ea = before.efficiency, after.efficiency
    return OpDiff(
        ops=ops,
        modules=modules,
        mfu_before=eb.mfu,
        mfu_after=ea.mfu,
        precision_before=eb.precision,
        precision_after=ea.precision,
        has_shapes_before=before.has_shapes,
        has_shapes_after=after.has_shapes,
    )


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
        ops: the op, module and MFU comparison; None unless both GPUs carry the model view
            (`DeviceAnalysis.model`).
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
    ops: OpDiff | None = None

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
        The comparison; kernels are matched by (name, category), ops by (op, input dims,
        input types) where both sides carry the model view.
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
    ops = None
    if before.model is not None and after.model is not None:
        ops = diff_ops(before.model, after.model, nb, na)
        if ops.has_shapes_before != ops.has_shapes_after:
            side = "before" if ops.has_shapes_before else "after"
            warnings.append(
                f"only {side} records Input Dims: ops are matched by their shapes too, so an "
                "op with shapes on one side shows as gone and new"
            )
    elif before.model is not None or after.model is not None:
        side = "before" if before.model is None else "after"
        warnings.append(f"ops not compared: {side} has no model view")
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
        ops=ops,
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
