"""The model view of a trace: GPU time per op and module, ops on their roofline, MFU waterfall.

Built on the launch tree (`badput.analysis.tree`: each GPU activity linked to the host call that
launched it, and the ops and module around that call) and the per-op performance model
(`badput.analysis.opmodel`: FLOPs and bytes of one call from its `Input Dims` and `Input type`).

**Which op a GPU activity belongs to.** The op of an activity is the outermost op around its
launch call that badput has a model for, where composite ops (`aten::linear`, `aten::matmul`,
`aten::conv2d`, `aten::layer_norm`, `aten::_to_copy`, ... in `COMPOSITE_OPS`: they only dispatch
to other ops) count only when no modelled op lies inside them; without a modelled op around the
call it is the innermost op (the one that launched it). So `aten::linear -> aten::addmm` is one
`aten::addmm` call, `aten::scaled_dot_product_attention -> _scaled_dot_product_flash_attention
-> _flash_attention_forward` one `_scaled_dot_product_flash_attention` call, and every kernel,
memcpy and memset the op's subtree launched counts in its kernel time, as TraceLens counts it. Work
launched outside every op but inside a `record_function` range (`user_annotation`: the wrapper
ranges of `torch.compile`, user code) belongs to that range, named as the range.

**Op rows.** One row per (op, `Input Dims`, `Input type`), as TraceLens groups them: `count`
calls that launched GPU work in the window, their summed GPU time, FLOPs and bytes of one call
(of its first call), achieved TFLOP/s and TB/s over that time, arithmetic intensity, and the
bound and share of the roof at the op's precision on the trace's GPU (`badput.estimate.hardware`).

**The waterfall.** The window's peak (window x peak TFLOP/s at the precision that holds most
modelled FLOPs) split into what was lost and what was achieved; the stages add up to the peak.
See `docs/ops.md` for every formula and limit.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import distinct, take, walk_up
from badput.analysis.opmodel import OpModel, is_modelled_op, model_op, tracelens_category
from badput.analysis.patterns import is_communication_kernel
from badput.analysis.results import Breakdown, ratio
from badput.analysis.tree import (
    ATTRIBUTED,
    LAUNCH_OUTSIDE_OP,
    REASONS,
    LaunchTree,
    node_kinds_names,
)
from badput.estimate.hardware import GpuSpec
from badput.trace.model import NO_ID, EventKind, OpArgs, Trace

__all__ = [
    "COMPOSITE_OPS",
    "FLOP_CATEGORIES",
    "NO_MODULE",
    "STAGES",
    "AboveRoof",
    "Efficiency",
    "ModelAnalysis",
    "ModuleRow",
    "OpRow",
    "Stage",
    "above_roof",
    "analyze_ops",
]

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: Ops that only dispatch to other ops: an activity is theirs only when no modelled op lies
#: inside them (their own model then describes the call; e.g. a fused kernel behind `linear`).
COMPOSITE_OPS = frozenset(
    {
        "aten::linear",
        "aten::matmul",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::layer_norm",
        "aten::batch_norm",
        "aten::group_norm",
        "aten::rms_norm",
        "aten::_to_copy",
        "aten::clone",
        "aten::contiguous",
        "aten::softmax",
        "aten::log_softmax",
    }
)

#: Categories whose FLOPs run on the matrix units: the ops that can reach the compute roof.
FLOP_CATEGORIES = frozenset({"GEMM", "CONV_fwd", "CONV_bwd", "SDPA_fwd", "SDPA_bwd"})

#: Module path of attributed GPU time launched outside every module frame.
NO_MODULE = "(no module)"

#: Waterfall stages, in order; their TFLOP/s add up to the peak.
STAGES = (
    "idle",
    "exposed communication",
    "exposed memory copies",
    "unmodelled kernels",
    "memory-bound ops",
    "matmul and attention below roof",
    "achieved",
)


@dataclass(frozen=True)
class OpRow:
    """One (op, input dims, input types) group of op calls that launched GPU work.

    Attributes:
        op: the op name (`"aten::addmm"`).
        category: op family (`badput.analysis.opmodel.CATEGORIES`), None for an unknown op.
        input_dims: `Input Dims` as recorded (one shape per argument), None without them.
        input_types: `Input type` as recorded, empty without them.
        count: calls in the group.
        kernel_ns: summed duration of every GPU activity the calls' subtrees launched.
        flops: FLOPs of one call, None without a model.
        bytes: bytes moved by one call, None without a model.
        precision: the roof the math runs against (`hardware.PRECISIONS`), None if unknown.
        tflops_per_s: flops x count / kernel time, TFLOP/s.
        tb_per_s: bytes x count / kernel time, TB/s (1e12 B/s).
        intensity: flops / bytes, FLOP per byte.
        bound: `"compute"` or `"memory"` at the ridge of the GPU and precision; None without
            a model or a known GPU.
        roof_share: achieved over attainable (`min(peak, intensity x bandwidth)`); for an op
            with no FLOPs its bandwidth over peak bandwidth.
        module: the module path of most of the group's GPU time, None without one.
        kernels: names of the GPU activities launched, most time first.
        reason: why the group has no model (`"unknown op"`, `"missing Input Dims"`, ...).
    """

    op: str
    category: str | None
    input_dims: object
    input_types: list[str]
    count: int
    kernel_ns: int
    flops: float | None
    bytes: float | None
    precision: str | None
    tflops_per_s: float | None
    tb_per_s: float | None
    intensity: float | None
    bound: str | None
    roof_share: float | None
    module: str | None
    kernels: list[str]
    reason: str | None = None

    @property
    def modelled(self) -> bool:
        """Whether the group has FLOPs and bytes."""
        return self.flops is not None and self.bytes is not None


@dataclass(frozen=True)
class ModuleRow:
    """GPU time of one module path, rolled up (a module's time includes its children's).

    Attributes:
        path: module path, outermost first, joined by "/"; `NO_MODULE` for attributed time
            launched outside every module frame.
        depth: number of path components (1 for a root).
        kernel_ns: summed duration of the GPU activities launched inside it.
        count: number of those activities.
    """

    path: str
    depth: int
    kernel_ns: int
    count: int


@dataclass(frozen=True)
class Stage:
    """One step of the waterfall: TFLOP/s of the window's peak it stands for."""

    stage: str
    tflops: float
    share_of_peak: float


@dataclass(frozen=True)
class Efficiency:
    """Model FLOPs utilisation of the window and where the rest of the peak went.

    Attributes:
        modelled_flops: FLOPs of every modelled op call in the window.
        modelled_kernel_share: share of compute kernel time (communication kernels excluded)
            in ops with a model; None without compute kernels.
        precision: the precision holding most modelled FLOPs; None without any.
        peak_tflops: dense peak of the GPU at that precision; None for an unknown GPU.
        mfu: modelled FLOPs / (window x peak); None without a peak or a window.
        waterfall: the stages (`STAGES`), adding up to `peak_tflops`; empty without a peak.
        notes: what the reader of the numbers should know (a stage below zero, ...).
    """

    modelled_flops: float
    modelled_kernel_share: float | None
    precision: str | None
    peak_tflops: float | None
    mfu: float | None
    waterfall: list[Stage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ModelAnalysis:
    """Ops, modules, efficiency and attribution of one GPU's window.

    Attributes:
        ops: op rows, largest kernel time first.
        modules: module rows, largest kernel time first (roots and `NO_MODULE` add up to
            `attributed_ns`); empty for a trace without module frames.
        efficiency: the MFU and its waterfall.
        attributed_ns: GPU time of the window's activities launched inside an op.
        unattributed_ns: the rest.
        reasons: reason -> unattributed time (`badput.analysis.tree.REASONS`).
        unmodelled: reason -> kernel time of op rows without a model.
        gpu_spec: the hardware-table entry the roofs came from, None for an unknown GPU.
        has_shapes: whether the trace records `Input Dims` (`record_shapes=True`).
        launcher_categories: attributed GPU time by the category of the op that launched
            each activity (its innermost op; `"other"` for ops without a model), TraceLens's
            `ops_summary_by_category` convention: category -> (kernel ns, activities).
    """

    ops: list[OpRow]
    modules: list[ModuleRow]
    efficiency: Efficiency
    attributed_ns: int
    unattributed_ns: int
    reasons: dict[str, int]
    unmodelled: dict[str, int]
    gpu_spec: GpuSpec | None
    has_shapes: bool
    launcher_categories: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def attributed_share(self) -> float | None:
        """Attributed share of the window's GPU time; None without GPU time."""
        return ratio(self.attributed_ns, self.attributed_ns + self.unattributed_ns)


@dataclass(frozen=True)
class AboveRoof:
    """Op rows measured above 100 % of their roof, grouped by the likeliest reason.

    Attributes:
        reason: `"fast-algorithm"` (a convolution whose kernels are Winograd or FFT ones:
            they do less math than the direct convolution the model counts),
            `"cache"` (a memory-bound op: the roof is DRAM bandwidth, and traffic that stays
            in the L2 cache runs faster) or `"model"` (the kernels did less work than the
            op's formula counts, or ran on a faster path than the recorded dtype says).
        ops: how many op rows.
        kernel_ns: their GPU time.
        max_share: the highest share of the roof among them.
        evidence: what decided the reason, in words (kernel names seen, the bound, ...).
    """

    reason: str
    ops: int
    kernel_ns: int
    max_share: float
    evidence: str


_FAST_CONV_KERNEL = re.compile(r"winograd|fft", re.IGNORECASE)


def above_roof(ops: list[OpRow]) -> list[AboveRoof]:
    """The op rows above their roof, by reason, most GPU time first (see `AboveRoof`).

    A share of the roof above 100 % is reported as measured, never capped; this says why it
    can be so, from what the trace shows of each row: the kernels it launched and its bound.
    """
    groups: dict[str, list[OpRow]] = {}
    for r in ops:
        if r.roof_share is None or r.roof_share <= 1.0:
            continue
        fast = [k for k in r.kernels if _FAST_CONV_KERNEL.search(k)]
        if (r.category or "").startswith("CONV") and fast:
            reason = "fast-algorithm"
        elif r.bound == "memory":
            reason = "cache"
        else:
            reason = "model"
        groups.setdefault(reason, []).append(r)
    out = []
    for reason, rows in groups.items():
        if reason == "fast-algorithm":
            evidence = "their kernels include Winograd or FFT ones"
        elif reason == "cache":
            top_bytes = max(r.bytes or 0.0 for r in rows)
            evidence = f"at most {top_bytes / 1e6:,.1f} MB moved per call"
        else:
            evidence = "neither memory-bound nor Winograd or FFT convolutions"
        out.append(
            AboveRoof(
                reason=reason,
                ops=len(rows),
                kernel_ns=sum(r.kernel_ns for r in rows),
                max_share=max(r.roof_share or 0.0 for r in rows),
                evidence=evidence,
            )
        )
    out.sort(key=lambda a: (-a.kernel_ns, a.reason))
    return out


# ---- which op each activity belongs to ------------------------------------------------------


def perf_ops(trace: Trace, tree: LaunchTree, entries: npt.NDArray[np.intp]) -> I64:
    """Per tree entry of `entries`, the Trace row of the op its GPU time belongs to, or `NO_ID`.

    The outermost modelled op around the launch call, composite ops only when nothing
    modelled lies inside them, else the innermost op (see the module docstring). Found once
    per tree for all its entries (the op table and the precision findings both ask).
    """
    found = _PERF_OPS.get(tree)
    if found is None or found[0]() is not trace:
        found = (weakref.ref(trace), _perf_ops_of_all(trace, tree))
        _PERF_OPS[tree] = found
    return found[1][entries]


# Per launch tree, (its trace, `perf_ops` of every entry); dropped with the tree.
_PERF_OPS: weakref.WeakKeyDictionary[LaunchTree, tuple[weakref.ref[Trace], I64]] = (
    weakref.WeakKeyDictionary()
)


def _perf_ops_of_all(trace: Trace, tree: LaunchTree) -> I64:
    """`perf_ops` of every entry of the tree."""
    host_row, parent = tree.host_row, tree.host_parent
    # Per name: 1 a modelled op, 2 a modelled composite, 0 neither (one gather per node).
    modelled = trace.name_mask(is_modelled_op)
    of_name = modelled.astype(np.int8)
    of_name[modelled & trace.name_mask(lambda n: n in COMPOSITE_OPS)] = 2
    kind, name = node_kinds_names(trace, tree)
    code = of_name[name]
    code[kind != EventKind.CPU_OP] = 0
    direct, wrapper = code == 1, code == 2
    calls, which = distinct(tree.launch_node, host_row.shape[0])
    start = take(parent, calls)
    _, last = walk_up(parent, start, [direct, wrapper], nearest=False)
    node = np.where(last[0] >= 0, last[0], last[1])[which]
    row = take(host_row, node)
    return np.where(row >= 0, row, tree.inner_op)


# ---- the analysis -----------------------------------------------------------------------------


class _Canon:
    """Canonical id of each interned args text: equal decoded values get equal ids."""

    def __init__(self, args: OpArgs | None) -> None:
        self.args = args
        self.by_text: dict[bytes, int] = {}
        self.values: list[object] = []
        self.ids: dict[int, int] = {NO_ID: NO_ID}

    def of(self, index: int) -> int:
        got = self.ids.get(index)
        if got is not None:
            return got
        value = self.args.value(index) if self.args is not None else None
        text = msgspec.json.encode(value)
        cid = self.by_text.get(text)
        if cid is None:
            cid = self.by_text[text] = len(self.values)
            self.values.append(value)
        self.ids[index] = cid
        return cid

    def many(self, indexes: I64) -> I64:
        bound = len(self.args.values) if self.args is not None else 0
        uniq, inv = distinct(indexes, bound)
        mapped = np.array([self.of(int(i)) for i in uniq.tolist()], dtype=np.int64)
        return mapped[inv] if uniq.size else np.zeros(0, dtype=np.int64)

    def value(self, cid: int) -> object:
        return self.values[cid] if cid >= 0 else None


def _pair_key(a: I64, b: I64) -> tuple[I64, I64]:
    """Dense ids of (a, b) pairs of non-negative ints, with the distinct pairs' keys."""
    width = int(b.max()) + 1 if b.size else 1
    return distinct(
        a.astype(np.int64, copy=False) * width + b, (int(a.max()) + 1) * width if a.size else 1
    )


def _weighted_top(
    group: I64, item: I64, weight: I64, n_groups: int, labels: Sequence[str]
) -> list[list[tuple[int, int]]]:
    """Per group, its items with their summed weights, largest first (items >= 0 only).

    Equal weights go by the items' labels (`labels[item]`, the text: interned ids follow the
    file's order).
    """
    ok = item >= 0
    out: list[list[tuple[int, int]]] = [[] for _ in range(n_groups)]
    if not ok.any():
        return out
    g, it, w = group[ok], item[ok], weight[ok]
    width = int(it.max()) + 1
    pairs, inv = _pair_key(g, it)
    sums = np.bincount(inv, weights=w, minlength=pairs.shape[0])
    for key, s in zip(pairs.tolist(), sums.tolist(), strict=True):
        out[key // width].append((key % width, int(s)))
    for lst in out:
        lst.sort(key=lambda p: (-p[1], labels[p[0]]))
    return out


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, str) else str(v) for v in value]


def _roof(
    m: OpModel, count: int, kernel_ns: int, spec: GpuSpec | None
) -> tuple[float | None, float | None, float | None, str | None, float | None]:
    """(TFLOP/s, TB/s, intensity, bound, roof share) of a group."""
    if m.flops is None or m.bytes is None or kernel_ns <= 0:
        return None, None, None, None, None
    tflops = m.flops * count / kernel_ns / 1e3  # FLOP/ns = GFLOP/s
    tbps = m.bytes * count / kernel_ns / 1e3
    intensity = m.flops / m.bytes if m.bytes > 0 else None
    if spec is None:
        return tflops, tbps, intensity, None, None
    bw_tbps = spec.memory_bw_gbs / 1e3
    if m.flops == 0:
        return tflops, tbps, intensity, "memory", ratio(tbps, bw_tbps)
    peak = spec.peak(m.precision) if m.precision is not None else None
    if peak is None or intensity is None:
        return tflops, tbps, intensity, None, None
    ridge = peak / bw_tbps
    bound = "compute" if intensity >= ridge else "memory"
    attainable = min(peak, intensity * bw_tbps)
    return tflops, tbps, intensity, bound, ratio(tflops, attainable)


def _modules(
    tree: LaunchTree, sel: npt.NDArray[np.intp], attributed: Bools, dur: I64
) -> list[ModuleRow]:
    """Rolled-up module rows of the selected entries; [] when the trace has no modules."""
    if not tree.module_paths:
        return []
    keep = np.zeros(len(tree), dtype=np.bool_)
    keep[sel[attributed]] = True
    totals = dict(tree.module_totals(keep))
    rest = attributed & (tree.module[sel] < 0)
    if rest.any():
        totals[NO_MODULE] = (int(dur[rest].sum()), int(rest.sum()))
    rows = [ModuleRow(p, p.count("/") + 1, t, c) for p, (t, c) in totals.items()]
    rows.sort(key=lambda r: (-r.kernel_ns, r.path))
    return rows


def _efficiency(
    groups: Iterable[tuple[OpRow, int]],
    unmodelled_compute_ns: int,
    breakdown: Breakdown,
    window_ns: int,
    spec: GpuSpec | None,
) -> Efficiency:
    """The MFU and its waterfall (formulas in docs/ops.md).

    Args:
        groups: each op row with its compute kernel time (communication kernels, memcpy and
            memset excluded).
        unmodelled_compute_ns: compute kernel time of activities in no modelled op row
            (unattributed ones included).
        breakdown: the window's partition (compute, exposed communication and memory, idle).
        window_ns: window length.
        spec: the GPU's hardware-table entry.
    """
    flop_by_precision: dict[str, float] = {}
    flops_f = flops_m = 0.0
    kt_f = kt_m = 0
    for row, compute_ns in groups:
        if not row.modelled or row.flops is None:
            continue
        total = row.flops * row.count
        if row.category in FLOP_CATEGORIES:
            flops_f += total
            kt_f += compute_ns
        else:
            flops_m += total
            kt_m += compute_ns
        if row.precision is not None and total > 0:
            flop_by_precision[row.precision] = flop_by_precision.get(row.precision, 0.0) + total
    modelled = flops_f + flops_m
    kt_all = kt_f + kt_m + unmodelled_compute_ns
    share = ratio(kt_f + kt_m, kt_all)
    precision = (
        max(flop_by_precision.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if flop_by_precision
        else None
    )
    peak = spec.peak(precision) if spec is not None and precision is not None else None
    if peak is None or window_ns <= 0:
        return Efficiency(modelled, share, precision, peak, None)
    w = float(window_ns)
    # Union compute time apportioned by summed kernel time: concurrent kernels share it.
    compute = float(breakdown.compute_ns)
    t_f = compute * kt_f / kt_all if kt_all else 0.0
    t_m = compute * kt_m / kt_all if kt_all else 0.0
    t_u = compute - t_f - t_m
    achieved = modelled / w / 1e3  # FLOP/ns -> TFLOP/s
    values = [
        breakdown.idle_ns / w * peak,
        breakdown.communication_ns / w * peak,
        breakdown.memory_ns / w * peak,
        t_u / w * peak,
        t_m / w * peak - flops_m / w / 1e3,
        t_f / w * peak - flops_f / w / 1e3,
        achieved,
    ]
    stages = [Stage(s, v, v / peak) for s, v in zip(STAGES, values, strict=True)]
    notes = []
    if values[5] < 0 or values[4] < 0:
        notes.append(
            "modelled FLOPs exceed what the peak allows in the time their ops ran: the GPU's "
            "peak, the precision or the shapes do not describe this trace"
        )
    return Efficiency(modelled, share, precision, peak, achieved / peak, stages, notes)


def analyze_ops(
    trace: Trace,
    tree: LaunchTree,
    device: int,
    start_ns: int,
    end_ns: int,
    breakdown: Breakdown,
    spec: GpuSpec | None,
    comm_row: npt.NDArray[np.bool_] | None = None,
) -> ModelAnalysis:
    """Ops, modules, MFU waterfall and attribution of one GPU's window.

    Args:
        trace: the trace the tree was built from.
        tree: `launch_tree(trace)`.
        device: the GPU.
        start_ns: window start; activities starting in `[start_ns, end_ns)` count.
        end_ns: window end.
        breakdown: the window's partition, from the device analysis.
        spec: the GPU's hardware-table entry, None when unknown (no roofs, no MFU).
        comm_row: mask over the Trace's rows of its communication kernels
            (`KernelClasses.comm_mask`); by kernel name when None.
    """
    ts = trace.ts_ns[tree.row]
    sel = np.flatnonzero((trace.device[tree.row] == device) & (ts >= start_ns) & (ts < end_ns))
    rows = tree.row[sel]
    dur = tree.dur_ns[sel]
    reason = tree.reason[sel].copy()
    # Launched outside every op but inside a record_function range (torch.compile's wrapper
    # ranges, user code): the range is the named host call that launched it.
    by_range = (reason == LAUNCH_OUTSIDE_OP) & (tree.annotation[sel] >= 0)
    reason[by_range] = ATTRIBUTED
    attributed = reason == ATTRIBUTED
    kind = trace.kind[rows]
    if comm_row is None:
        comm_row = trace.name_mask(is_communication_kernel)[trace.name_id]
    compute = (kind == EventKind.KERNEL) & ~comm_row[rows]

    ns_by_reason = np.bincount(reason, weights=dur, minlength=len(REASONS))
    reasons = {
        REASONS[r]: int(ns_by_reason[r]) for r in range(1, len(REASONS)) if (reason == r).any()
    }
    op_row = np.where(attributed, perf_ops(trace, tree, sel), NO_ID)
    op_row[by_range] = tree.annotation[sel][by_range]

    args = trace.op_args
    canon = _Canon(args)
    a_idx = op_row[attributed]
    # One instance per op call: group entries by their op row.
    inst, inst_of = distinct(a_idx, len(trace))
    entry = (
        args.entries_of(inst.astype(np.int64))
        if args is not None
        else np.full(inst.shape, -1, dtype=np.intp)
    )

    def field_of(col: npt.NDArray[np.int32] | None) -> I64:
        if col is None or args is None:
            return np.full(inst.shape, NO_ID, dtype=np.int64)
        return np.where(entry >= 0, col[np.maximum(entry, 0)], NO_ID).astype(np.int64)

    dims_t = field_of(args.dims if args else None)
    types_t = field_of(args.types if args else None)
    conc_t = field_of(args.concrete if args else None)
    dims_c, types_c = canon.many(dims_t), canon.many(types_t)
    name_of_inst = trace.name_id[inst].astype(np.int64)
    # Group key (name, dims, types): two dense pairings, no overflow whatever the counts.
    nd = int(dims_c.max()) + 2 if dims_c.size else 1
    nt = int(types_c.max()) + 2 if types_c.size else 1
    first_key, first_of_inst = _pair_key(name_of_inst, dims_c + 1)
    second_key, group_of_inst = _pair_key(first_of_inst, types_c + 1)
    pair = first_key[second_key // nt]
    keys = np.stack([pair // nd, pair % nd - 1, second_key % nt - 1])
    n_groups = keys.shape[1]
    group = np.full(sel.shape[0], NO_ID, dtype=np.int64)
    group[attributed] = group_of_inst[inst_of]
    a_dur = dur[attributed]
    a_group = group[attributed]
    kernel_ns = np.bincount(a_group, weights=a_dur, minlength=n_groups).astype(np.int64)
    calls = np.bincount(group_of_inst, minlength=n_groups)
    compute_ns = np.bincount(
        a_group, weights=np.where(compute[attributed], a_dur, 0), minlength=n_groups
    ).astype(np.int64)
    first_inst = np.full(n_groups, -1, dtype=np.int64)
    first_inst[group_of_inst[::-1]] = np.arange(inst.size)[::-1]
    kernels = _weighted_top(a_group, trace.name_id[rows[attributed]].astype(np.int64), a_dur,
                            n_groups, trace.names)  # fmt: skip
    modules = _weighted_top(a_group, tree.module[sel][attributed].astype(np.int64), a_dur,
                            n_groups, tree.module_paths)  # fmt: skip

    ops: list[tuple[OpRow, int]] = []
    unmodelled: dict[str, int] = {}
    unmodelled_compute = int(dur[compute & ~attributed].sum())
    for g in range(n_groups):
        name = trace.names[int(keys[0, g])]
        dims = canon.value(int(keys[1, g]))
        types = canon.value(int(keys[2, g]))
        first = int(first_inst[g])
        concrete = args.value(int(conc_t[first])) if args is not None else None
        m = model_op(name, dims, types, concrete)
        kns, cnt = int(kernel_ns[g]), int(calls[g])
        tflops, tbps, intensity, bound, share = _roof(m, cnt, kns, spec)
        mod = modules[g][0][0] if modules[g] else NO_ID
        row = OpRow(
            op=name,
            category=m.category,
            input_dims=dims,
            input_types=_str_list(types),
            count=cnt,
            kernel_ns=kns,
            flops=m.flops,
            bytes=m.bytes,
            precision=m.precision,
            tflops_per_s=tflops,
            tb_per_s=tbps,
            intensity=intensity,
            bound=bound,
            roof_share=share,
            module=tree.module_paths[mod] if mod >= 0 else None,
            kernels=[trace.names[k] for k, _ in kernels[g]],
            reason=m.reason,
        )
        if not row.modelled:
            key = m.reason or "no model"
            unmodelled[key] = unmodelled.get(key, 0) + kns
            unmodelled_compute += int(compute_ns[g])
        ops.append((row, int(compute_ns[g])))
    ops.sort(key=lambda p: (-p[0].kernel_ns, p[0].op))
    launcher = np.where(by_range[attributed], NO_ID, tree.inner_op[sel][attributed])
    efficiency = _efficiency(ops, unmodelled_compute, breakdown, end_ns - start_ns, spec)
    return ModelAnalysis(
        ops=[r for r, _ in ops],
        modules=_modules(tree, sel, attributed, dur),
        efficiency=efficiency,
        attributed_ns=int(ns_by_reason[ATTRIBUTED]),
        unattributed_ns=int(ns_by_reason[1:].sum()),
        reasons=reasons,
        unmodelled=dict(sorted(unmodelled.items(), key=lambda kv: (-kv[1], kv[0]))),
        gpu_spec=spec,
        has_shapes=args is not None and bool((args.dims >= 0).any()),
        launcher_categories=_launcher_categories(trace, launcher, a_dur),
    )


def _launcher_categories(trace: Trace, launcher: I64, dur: I64) -> dict[str, tuple[int, int]]:
    """(kernel ns, activities) per category of each activity's launching op, largest first."""
    if launcher.size == 0:
        return {}
    names = np.where(launcher >= 0, trace.name_id[np.maximum(launcher, 0)], -1)
    uniq, inv = distinct(names, len(trace.names))
    cats = [
        tracelens_category(model_op(trace.names[n], None, None).category) if n >= 0 else "other"
        for n in uniq.tolist()
    ]
    out: dict[str, list[int]] = {}
    ns = np.bincount(inv, weights=dur, minlength=uniq.size)
    cnt = np.bincount(inv, minlength=uniq.size)
    for c, t, k in zip(cats, ns.tolist(), cnt.tolist(), strict=True):
        acc = out.setdefault(c, [0, 0])
        acc[0] += int(t)
        acc[1] += int(k)
    return {c: (t, k) for c, (t, k) in sorted(out.items(), key=lambda kv: (-kv[1][0], kv[0]))}
