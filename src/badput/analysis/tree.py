"""The launch tree: every GPU activity linked to the host call that launched it, and above it.

Host events of each thread (`python_function` frames, `nn.Module: X` frames, `cpu_op`,
`user_annotation`, runtime and driver calls) nest by time; each GPU activity (kernel, memcpy,
memset) is linked to its launch call by correlation id, or by the `ac2g` flow when the ids
are missing, and gets the innermost and outermost op, the module path and the annotation
around that call. Backward work on the autograd thread takes the module of its forward op
through the `fwdbwd` flows. The rules are stated in `docs/tree.md`.

Everything is columnar: the nesting comes from one sorted sweep of open and close events (a
node's parent is the last node opened one level up), and lookups are `searchsorted` over
dense (key, time) ranks. Only module frames cost a Python step each (to build their paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import (
    dense_pairs,
    find_by_key_time,
    nest_parents,
    take,
    walk_up,
)
from badput.trace.model import GPU_ACTIVITY_KINDS, NO_ID, EventKind, FlowPhase, Trace

__all__ = [
    "ATTRIBUTED",
    "LAUNCHED_BEFORE_TRACE",
    "LAUNCH_OUTSIDE_OP",
    "LINK_CORRELATION",
    "LINK_FLOW",
    "LINK_NONE",
    "NO_LAUNCH_CALL",
    "REASONS",
    "Attribution",
    "LaunchTree",
    "launch_tree",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
Bools = npt.NDArray[np.bool_]

#: `LaunchTree.reason` values; `REASONS[r]` names them.
ATTRIBUTED, NO_LAUNCH_CALL, LAUNCH_OUTSIDE_OP, LAUNCHED_BEFORE_TRACE = 0, 1, 2, 3
REASONS = ("attributed", "no launch call", "launch outside any op", "launched before the trace")
#: `LaunchTree.linked_by` values: how the launch call was found.
LINK_NONE, LINK_CORRELATION, LINK_FLOW = 0, 1, 2

MODULE_PREFIX = "nn.Module: "
FWDBWD_FLOW = "fwdbwd"

# Host kinds of the tree, ranked outermost first for intervals with the same start and end:
# Python calls record_function, which calls ops, which call the runtime, which calls the driver.
_HOST_RANK = {
    EventKind.PYTHON: 0,
    EventKind.ANNOTATION: 1,
    EventKind.CPU_OP: 2,
    EventKind.RUNTIME: 3,
    EventKind.DRIVER: 4,
}
_LAUNCH_KINDS = (EventKind.RUNTIME, EventKind.DRIVER)


@dataclass(frozen=True)
class Attribution:
    """GPU time by attribution, as the sum of activity durations (TraceLens's kernel time).

    Attributes:
        attributed_ns: time of the activities whose launch call lies inside a `cpu_op`.
        unattributed_ns: time of all the others.
        reasons: reason -> unattributed time, only reasons with activities.
        counts: reason -> number of activities, `"attributed"` included.
    """

    attributed_ns: int
    unattributed_ns: int
    reasons: dict[str, int]
    counts: dict[str, int]

    @property
    def share(self) -> float:
        """Attributed share of the GPU time; 1.0 for a trace without GPU time."""
        total = self.attributed_ns + self.unattributed_ns
        return self.attributed_ns / total if total else 1.0


@dataclass(frozen=True, eq=False)
class LaunchTree:
    """One entry per GPU activity row (kernel, memcpy, memset) of a Trace, in row order.

    Row-valued columns hold Trace rows, `NO_ID` where there is none.

    Attributes:
        row: the activity's Trace row, ascending.
        launch_row: the runtime or driver call that launched it.
        inner_op: innermost `cpu_op` around the launch call (ProfilerStep#N is no op).
        outer_op: outermost `cpu_op` around the launch call.
        annotation: innermost `user_annotation` around it, ProfilerStep#N excluded.
        module: index into `module_paths` (`NO_ID`: no module frame, on either thread).
        backward: True where the module came from the forward op through a `fwdbwd` flow.
        forward_op: for those, the forward op linked to the backward op around the launch.
        stream: the activity's stream.
        graph_launch: `launch_row` where it is a graph launch (`cudaGraphLaunch`, ...).
        linked_by: `LINK_CORRELATION`, `LINK_FLOW` or `LINK_NONE`.
        reason: `ATTRIBUTED`, `NO_LAUNCH_CALL`, `LAUNCH_OUTSIDE_OP` or
            `LAUNCHED_BEFORE_TRACE` (see `REASONS`).
        dur_ns: the activity's duration.
        module_paths: interned paths, outermost module first, joined by "/"
            (`Qwen2Model_0/Qwen2DecoderLayer_3/Qwen2MLP_3/Linear_17`).
        notes: what the trace lacked for a complete tree (no fwdbwd flows, unpaired flows).
    """

    row: I64
    launch_row: I64
    inner_op: I64
    outer_op: I64
    annotation: I64
    module: I32
    backward: Bools
    forward_op: I64
    stream: I64
    graph_launch: I64
    linked_by: I8
    reason: I8
    dur_ns: I64
    module_paths: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        """Number of GPU activities."""
        return int(self.row.shape[0])

    def module_of(self, index: int) -> str | None:
        """Module path of entry `index`; None without one."""
        m = int(self.module[index])
        return self.module_paths[m] if m >= 0 else None

    def attribution(self) -> Attribution:
        """Attributed and unattributed GPU time, the latter by reason."""
        return self._attribution(np.ones(len(self), dtype=np.bool_))

    def attribution_in(self, trace: Trace, start_ns: int, end_ns: int) -> Attribution:
        """`attribution` of the activities that start in `[start_ns, end_ns)` (a step window)."""
        ts = trace.ts_ns[self.row]
        return self._attribution((ts >= start_ns) & (ts < end_ns))

    def _attribution(self, keep: Bools) -> Attribution:
        reason, dur = self.reason[keep], self.dur_ns[keep]
        ns = np.bincount(reason, weights=dur, minlength=len(REASONS))
        counts = np.bincount(reason, minlength=len(REASONS))
        reasons = {REASONS[r]: int(ns[r]) for r in range(1, len(REASONS)) if counts[r]}
        return Attribution(
            attributed_ns=int(ns[ATTRIBUTED]),
            unattributed_ns=int(ns[1:].sum()),
            reasons=reasons,
            counts={REASONS[r]: int(counts[r]) for r in range(len(REASONS))},
        )

    def module_time_ns(self, *, rolled_up: bool = True) -> dict[str, int]:
        """GPU time per module path, largest first.

        Args:
            rolled_up: count each activity in every module enclosing it (a parent's time
                includes its children's); else only in its innermost module.
        """
        has = self.module >= 0
        ns = np.bincount(
            self.module[has], weights=self.dur_ns[has], minlength=len(self.module_paths)
        )
        times: dict[str, int] = {}
        for path, t in zip(self.module_paths, ns.tolist(), strict=True):
            if not t:
                continue
            parts = path.split("/")
            for depth in range(1 if rolled_up else len(parts), len(parts) + 1):
                prefix = "/".join(parts[:depth])
                times[prefix] = times.get(prefix, 0) + int(t)
        return dict(sorted(times.items(), key=lambda kv: (-kv[1], kv[0])))


def launch_tree(trace: Trace) -> LaunchTree:
    """Link every GPU activity of `trace` to its launch call, ops, module and annotation.

    Args:
        trace: any Trace; one without host events gives a tree of unattributed activities.

    Returns:
        The launch tree, one entry per GPU activity row.
    """
    gpu = np.flatnonzero(trace.mask(*GPU_ACTIVITY_KINDS) & (trace.phase == FlowPhase.COMPLETE))
    thread = dense_pairs(trace.pid, trace.tid)
    nodes = _Nodes.build(trace, thread)
    notes: list[str] = []

    launch_node, linked_by = _link_by_correlation(trace, gpu, nodes)
    unlinked = np.flatnonzero(launch_node < 0)
    if unlinked.size:
        via_flow = _link_by_flow(trace, gpu[unlinked], nodes, thread)
        found = via_flow >= 0
        launch_node[unlinked[found]] = via_flow[found]
        linked_by[unlinked[found]] = LINK_FLOW

    forward_of = _forward_ops(trace, nodes, thread, notes)
    is_module_name = trace.name_mask(lambda n: n.startswith(MODULE_PREFIX))
    is_step_name = trace.name_mask(lambda n: n.startswith("ProfilerStep#"))
    kind, name_id = trace.kind[nodes.row], trace.name_id[nodes.row]
    is_op = (kind == EventKind.CPU_OP) & ~is_step_name[name_id]
    is_module = (kind == EventKind.PYTHON) & is_module_name[name_id]
    is_annotation = (kind == EventKind.ANNOTATION) & ~is_step_name[name_id]

    # Walk each distinct launch call's ancestors once: a graph launch serves many kernels.
    calls, which = np.unique(launch_node, return_inverse=True)
    start = take(nodes.parent, calls)
    first, last = walk_up(nodes.parent, start, [is_op, is_module, is_annotation, forward_of >= 0])
    inner_op, module_node, annotation, bwd_node = (f[which] for f in first)
    outer_op = last[0][which]

    # Backward: no module frame on the autograd thread; take the forward op's module.
    forward_node = take(forward_of, bwd_node)
    need = (module_node < 0) & (forward_node >= 0)
    fwd_module = walk_up(nodes.parent, forward_node[need], [is_module])[0][0]
    backward = np.zeros(gpu.shape[0], dtype=np.bool_)
    backward[np.flatnonzero(need)[fwd_module >= 0]] = True
    module_node[need] = fwd_module
    if is_module.any() and FWDBWD_FLOW not in trace.names:
        # Work launched from ops on threads without module frames (the autograd thread).
        module_threads = np.unique(nodes.thread[is_module])
        launched = launch_node >= 0
        thread_of = take(nodes.thread, launch_node)
        orphan = launched & (inner_op >= 0) & (module_node < 0)
        orphan &= ~np.isin(thread_of, module_threads)
        if orphan.any():
            notes.append(
                f"{int(orphan.sum())} activities launched by ops on threads without module "
                "frames (backward?) have no module: the trace has no fwdbwd flows"
            )
    module, module_paths = _module_paths(trace, nodes, is_module, module_node)

    def rows(node: I64) -> I64:
        return take(nodes.row, node)

    launch_row = rows(launch_node)
    is_graph = trace.name_mask(lambda n: "GraphLaunch" in n)  # cuda/cu/hip GraphLaunch
    graph = (launch_row >= 0) & is_graph[trace.name_id[np.maximum(launch_row, 0)]]
    reason = np.full(gpu.shape[0], ATTRIBUTED, dtype=np.int8)
    reason[inner_op < 0] = LAUNCH_OUTSIDE_OP
    reason[launch_row < 0] = NO_LAUNCH_CALL
    # Correlation ids grow within a process: an id below every recorded call's was issued
    # before the host side of the trace began (work still queued when the profiler started).
    is_call = np.isin(trace.kind, [int(k) for k in _LAUNCH_KINDS]) & (trace.correlation != NO_ID)
    if is_call.any():
        corr = trace.correlation[gpu]
        early = (launch_row < 0) & (corr != NO_ID) & (corr < trace.correlation[is_call].min())
        reason[early] = LAUNCHED_BEFORE_TRACE
    return LaunchTree(
        row=gpu.astype(np.int64),
        launch_row=launch_row,
        inner_op=rows(inner_op),
        outer_op=rows(outer_op),
        annotation=rows(annotation),
        module=module,
        backward=backward,
        forward_op=np.where(backward, rows(forward_node), NO_ID),
        stream=trace.stream[gpu],
        graph_launch=np.where(graph, launch_row, NO_ID),
        linked_by=linked_by,
        reason=reason,
        dur_ns=trace.dur_ns[gpu],
        module_paths=module_paths,
        notes=notes,
    )


@dataclass(frozen=True, eq=False)
class _Nodes:
    """Host events of the tree in open order (thread, start, longest first, rank, row).

    `parent[i]` is the node index of node i's parent, `NO_ID` at a root.
    """

    row: I64
    thread: I64
    start_ns: I64
    end_ns: I64
    parent: I64

    @staticmethod
    def build(trace: Trace, thread: I64) -> _Nodes:
        rank_of_kind = np.full(256, -1, dtype=np.int64)
        for k, r in _HOST_RANK.items():
            rank_of_kind[int(k)] = r
        rank = rank_of_kind[trace.kind.astype(np.int64) & 0xFF]
        rows = np.flatnonzero((rank >= 0) & (trace.phase == FlowPhase.COMPLETE))
        start, end = trace.ts_ns[rows], trace.ts_ns[rows] + np.maximum(trace.dur_ns[rows], 0)
        order = np.lexsort((rows, rank[rows], -end, start, thread[rows]))
        rows, start, end, g = rows[order], start[order], end[order], thread[rows[order]]
        return _Nodes(rows.astype(np.int64), g, start, end, nest_parents(g, start, end))


def _link_by_correlation(trace: Trace, gpu: npt.NDArray[np.intp], nodes: _Nodes) -> tuple[I64, I8]:
    """Launch node of each activity by correlation id; any runtime or driver call counts.

    Not filtered by API name: only launch and copy calls share their id with GPU activity, so
    `cudaLaunchKernelExC`, `cuLaunchKernel`, `hipExtModuleLaunchKernel`, `cudaGraphLaunch`
    and calls no list names yet all match.
    """
    kind = trace.kind[nodes.row]
    corr = trace.correlation[nodes.row]
    calls = np.flatnonzero(np.isin(kind, [int(k) for k in _LAUNCH_KINDS]) & (corr != NO_ID))
    q_corr = trace.correlation[gpu]
    has = np.flatnonzero(q_corr != NO_ID)
    found = find_by_key_time(
        corr[calls], nodes.start_ns[calls], q_corr[has], trace.ts_ns[gpu[has]], exact=False
    )
    launch = np.full(gpu.shape[0], NO_ID, dtype=np.int64)
    launch[has] = take(calls, found)
    linked_by = np.where(launch >= 0, LINK_CORRELATION, LINK_NONE).astype(np.int8)
    return launch, linked_by


def _flow_pairs(trace: Trace, flows: npt.NDArray[np.intp]) -> tuple[I64, I64]:
    """(start row, end row) of the flow arrows among `flows`, paired by (name, id)."""
    phase = trace.phase[flows]
    starts = flows[phase == FlowPhase.FLOW_START]
    ends = flows[(phase == FlowPhase.FLOW_END) | (phase == FlowPhase.FLOW_STEP)]
    key = dense_pairs(trace.name_id[flows].astype(np.int64), trace.correlation[flows])
    key_of = np.full(len(trace), NO_ID, dtype=np.int64)
    key_of[flows] = key
    found = find_by_key_time(
        key_of[starts], trace.ts_ns[starts], key_of[ends], trace.ts_ns[ends], exact=False
    )
    ok = found >= 0
    return starts[found[ok]].astype(np.int64), ends[ok].astype(np.int64)


def _bind(trace: Trace, thread: I64, at: I64, nodes: _Nodes, cand: I64) -> I64:
    """The outermost node of `cand` (node indices) starting exactly where each row `at` is."""
    found = find_by_key_time(
        nodes.thread[cand], nodes.start_ns[cand], thread[at], trace.ts_ns[at], exact=True
    )
    return take(cand, found)


def _link_by_flow(trace: Trace, gpu: npt.NDArray[np.intp], nodes: _Nodes, thread: I64) -> I64:
    """Launch node of each activity through the launch flows (`ac2g`; `launch` in 2021)."""
    fwdbwd = trace.names.index(FWDBWD_FLOW) if FWDBWD_FLOW in trace.names else -2
    flows = np.flatnonzero((trace.kind == EventKind.FLOW) & (trace.name_id != fwdbwd))
    out = np.full(gpu.shape[0], NO_ID, dtype=np.int64)
    if flows.size == 0:
        return out
    s, f = _flow_pairs(trace, flows)
    kind = trace.kind[nodes.row]
    calls = np.flatnonzero(np.isin(kind, [int(k) for k in _LAUNCH_KINDS]))
    call = _bind(trace, thread, s, nodes, calls)
    # Which activity each arrow ends at: the one starting at its time on its (pid, tid).
    gpu64 = gpu.astype(np.int64)
    target = find_by_key_time(
        thread[gpu64], trace.ts_ns[gpu64], thread[f], trace.ts_ns[f], exact=True
    )
    ok = (target >= 0) & (call >= 0)
    out[target[ok]] = call[ok]
    return out


def _forward_ops(trace: Trace, nodes: _Nodes, thread: I64, notes: list[str]) -> I64:
    """Per node: the forward op node its `fwdbwd` flow comes from (backward ops), else NO_ID.

    Kineto starts the arrow at the forward op's start and ends it at the backward op's
    start, on their threads; both bind to the outermost `cpu_op` starting there.
    """
    out = np.full(nodes.row.shape[0], NO_ID, dtype=np.int64)
    if FWDBWD_FLOW not in trace.names:
        return out
    fwdbwd = trace.names.index(FWDBWD_FLOW)
    flows = np.flatnonzero((trace.kind == EventKind.FLOW) & (trace.name_id == fwdbwd))
    s, f = _flow_pairs(trace, flows)
    ops = np.flatnonzero(trace.kind[nodes.row] == EventKind.CPU_OP)
    fwd, bwd = _bind(trace, thread, s, nodes, ops), _bind(trace, thread, f, nodes, ops)
    ok = (fwd >= 0) & (bwd >= 0)
    out[bwd[ok]] = fwd[ok]
    if int(ok.sum()) < flows.size // 2:
        notes.append(f"{flows.size // 2 - int(ok.sum())} fwdbwd flows bind to no op pair")
    return out


def _module_paths(
    trace: Trace, nodes: _Nodes, is_module: Bools, module_node: I64
) -> tuple[I32, list[str]]:
    """Path id of each activity's module node, and the interned paths.

    Each module frame's path is its module parent's path plus its own name; parents come
    before children in open order, so one pass over the frames in that order builds them all.
    """
    frames = np.flatnonzero(is_module)
    if frames.size == 0:
        return np.full(module_node.shape[0], NO_ID, dtype=np.int32), []
    up = np.where(nodes.parent[frames] >= 0, nodes.parent[frames], NO_ID)
    module_parent = walk_up(nodes.parent, up, [is_module])[0][0]
    local = np.full(nodes.row.shape[0], NO_ID, dtype=np.int64)
    local[frames] = np.arange(frames.size)
    parent_local = take(local, module_parent)
    name_ids = trace.name_id[nodes.row[frames]].tolist()
    skip = len(MODULE_PREFIX)
    interned: dict[tuple[int, int], int] = {}
    paths: list[str] = []
    path_of = [0] * frames.size
    for i, (p, nid) in enumerate(zip(parent_local.tolist(), name_ids, strict=True)):
        parent_path = path_of[p] if p >= 0 else -1
        key = (parent_path, nid)
        pid = interned.get(key)
        if pid is None:
            own = trace.names[nid][skip:]
            pid = interned[key] = len(paths)
            paths.append(own if parent_path < 0 else f"{paths[parent_path]}/{own}")
        path_of[i] = pid
    path_arr = np.asarray(path_of, dtype=np.int32)
    has = module_node >= 0
    out = np.full(module_node.shape[0], NO_ID, dtype=np.int32)
    out[has] = path_arr[local[module_node[has]]]
    return out, paths
