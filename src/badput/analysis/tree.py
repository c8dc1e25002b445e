"""The launch tree: every GPU activity linked to the host call that launched it, and above it.

Host events of each thread (`python_function` frames, `nn.Module: X` frames, `cpu_op`,
`user_annotation`, runtime and driver calls) nest by time; each GPU activity (kernel, memcpy,
memset) is linked to its launch call by correlation id, or by the `ac2g` flow when the ids
are missing, and gets the innermost and outermost op, the module path and the annotation
around that call. Backward work on the autograd thread takes the module of its forward op
through the `fwdbwd` flows. The rules are stated in `docs/tree.md`.

Everything is columnar: the nesting comes from one sorted sweep of open and close events (a
node's parent is the last node opened one level up), and lookups are `searchsorted` over
(key, time) keys. Only distinct module paths cost a Python step each (to build their strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import (
    dense_pairs,
    distinct,
    find_by_key_time,
    is_kind,
    kind_then_id,
    nest,
    pair_keys,
    settle_ties,
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


_RANK_OF_KIND = np.full(256, -1, dtype=np.int8)
for _k, _r in _HOST_RANK.items():
    _RANK_OF_KIND[int(_k)] = _r


class _Threads:
    """Each row's (pid, tid) as one int64 key: equal within a thread, in the pairs' order."""

    def __init__(self, trace: Trace) -> None:
        self._pid, self._tid = trace.pid, trace.tid
        self._dense: I64 | None = None
        self._pid_lo = self._tid_lo = self._width = 0
        if len(trace) == 0:
            return
        self._pid_lo, self._tid_lo = int(trace.pid.min()), int(trace.tid.min())
        self._width = int(trace.tid.max()) - self._tid_lo + 1
        if (int(trace.pid.max()) - self._pid_lo + 1) * self._width >= 1 << 62:
            self._dense = dense_pairs(trace.pid, trace.tid)

    def __call__(self, rows: npt.NDArray[np.integer]) -> I64:
        if self._dense is not None:
            dense: I64 = self._dense[rows]
            return dense
        key: I64 = self._pid[rows].astype(np.int64)  # the id columns may be int32
        key -= self._pid_lo
        key *= self._width
        key += self._tid[rows]
        key -= self._tid_lo
        return key


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
        host_row: the host events of the tree (its nodes), as Trace rows, in open order.
        host_parent: index into `host_row` of each node's parent, `NO_ID` at a root.
        launch_node: index into `host_row` of each activity's launch call, `NO_ID` without
            one; with `host_parent` an analysis walks up any activity's host ancestry.
        host_kind, host_name: each node's `EventKind` and name id (the Trace's, kept with
            the nodes: analyses of millions of nodes need not gather them again).
        host_thread_start: where each thread's nodes begin in `host_row` (threads in the
            lexicographic order of their (pid, tid)), then the node count; see
            `host_threads`.
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
    host_row: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    host_parent: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    launch_node: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    host_kind: I8 = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    host_name: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    host_thread_start: I64 = field(default_factory=lambda: np.zeros(1, dtype=np.int64))

    def __len__(self) -> int:
        """Number of GPU activities."""
        return int(self.row.shape[0])

    def module_of(self, index: int) -> str | None:
        """Module path of entry `index`; None without one."""
        m = int(self.module[index])
        return self.module_paths[m] if m >= 0 else None

    def host_threads(self, keep: Bools) -> I64 | None:
        """Dense thread id of each node `keep` selects, in order, without gathering them.

        As `dense_pairs` of their (pid, tid) gives it; None where the tree does not hold its
        threads (`host_thread_start`).
        """
        bounds = self.host_thread_start
        if keep.shape[0] != self.host_row.shape[0] or int(bounds[-1]) != keep.shape[0]:
            return None
        if keep.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        per_thread = np.add.reduceat(keep, bounds[:-1], dtype=np.int64)  # no thread is empty
        present = per_thread > 0
        dense: I64 = np.repeat(np.arange(int(present.sum()), dtype=np.int64), per_thread[present])
        return dense

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
        totals = self.module_totals(rolled_up=rolled_up)
        return {path: ns for path, (ns, _) in totals.items()}

    def module_totals(
        self, keep: Bools | None = None, *, rolled_up: bool = True
    ) -> dict[str, tuple[int, int]]:
        """(GPU time, activities) per module path of the entries `keep` selects, largest first.

        Args:
            keep: a mask over the entries; all of them by default.
            rolled_up: as in `module_time_ns`.
        """
        has = self.module >= 0
        if keep is not None:
            has &= keep
        n = len(self.module_paths)
        ns = np.bincount(self.module[has], weights=self.dur_ns[has], minlength=n)
        counts = np.bincount(self.module[has], minlength=n)
        totals: dict[str, list[int]] = {}
        for path, t, c in zip(self.module_paths, ns.tolist(), counts.tolist(), strict=True):
            if not c:
                continue
            parts = path.split("/")
            for depth in range(1 if rolled_up else len(parts), len(parts) + 1):
                acc = totals.setdefault("/".join(parts[:depth]), [0, 0])
                acc[0] += int(t)
                acc[1] += int(c)
        ordered = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))
        return {path: (t, c) for path, (t, c) in ordered}


def node_kinds_names(trace: Trace, tree: LaunchTree) -> tuple[I8, I32]:
    """Each host node's `EventKind` and name id: the tree's own, else gathered from `trace`."""
    rows = tree.host_row
    if tree.host_kind.shape[0] == rows.shape[0] and tree.host_name.shape[0] == rows.shape[0]:
        return tree.host_kind, tree.host_name
    kind: I8 = trace.kind[rows]
    name: I32 = trace.name_id[rows]
    return kind, name


def launch_tree(trace: Trace) -> LaunchTree:
    """Link every GPU activity of `trace` to its launch call, ops, module and annotation.

    Args:
        trace: any Trace; one without host events gives a tree of unattributed activities.

    Returns:
        The launch tree, one entry per GPU activity row.
    """
    gpu = np.flatnonzero(
        is_kind(trace.kind, GPU_ACTIVITY_KINDS) & (trace.phase == FlowPhase.COMPLETE)
    )
    thread = _Threads(trace)
    nodes = _Nodes.build(trace, thread)
    notes: list[str] = []

    launch_node, linked_by = _link_by_correlation(trace, gpu, nodes)
    if (launch_node < 0).any():
        via_flow = _link_by_flow(trace, gpu, launch_node < 0, nodes, thread)
        found = np.flatnonzero(via_flow >= 0)
        launch_node[found] = via_flow[found]
        linked_by[found] = LINK_FLOW

    is_module_name = trace.name_mask(lambda n: n.startswith(MODULE_PREFIX))
    is_step_name = trace.name_mask(lambda n: n.startswith("ProfilerStep#"))
    kind, name_id = nodes.kind, trace.name_id[nodes.row]
    is_op = (kind == EventKind.CPU_OP) & ~is_step_name[name_id]
    is_module = (kind == EventKind.PYTHON) & is_module_name[name_id]
    forward_of = _forward_ops(trace, nodes, thread, notes, bool(is_module.any()))
    is_annotation = (kind == EventKind.ANNOTATION) & ~is_step_name[name_id]

    # Walk each distinct launch call's ancestors once: a graph launch serves many kernels.
    calls, which = distinct(launch_node, nodes.row.shape[0])
    start = take(nodes.parent, calls)
    (inner_op,), (outer_op,) = walk_up(nodes.parent, start, [is_op])
    nearest, _ = walk_up(
        nodes.parent, start, [is_module, is_annotation, forward_of >= 0], farthest=False
    )
    inner_op, outer_op = inner_op[which], outer_op[which]
    module_node, annotation, bwd_node = (f[which] for f in nearest)

    # Backward: no module frame on the autograd thread; take the forward op's module.
    forward_node = take(forward_of, bwd_node)
    need = (module_node < 0) & (forward_node >= 0)
    fwd_module = walk_up(nodes.parent, forward_node[need], [is_module], farthest=False)[0][0]
    backward = np.zeros(gpu.shape[0], dtype=np.bool_)
    backward[np.flatnonzero(need)[fwd_module >= 0]] = True
    module_node[need] = fwd_module
    if is_module.any() and FWDBWD_FLOW not in trace.names:
        # Work launched from ops on threads without module frames (the autograd thread).
        # The module frames' threads, ascending as the nodes are (open order: by thread first).
        threads = nodes.thread[is_module]
        changes = np.ones(threads.shape[0], dtype=np.bool_)
        np.not_equal(threads[1:], threads[:-1], out=changes[1:])
        module_threads = threads[changes]
        launched = launch_node >= 0
        thread_of = take(nodes.thread, launch_node)
        orphan = launched & (inner_op >= 0) & (module_node < 0)
        orphan &= ~np.isin(thread_of, module_threads)
        if orphan.any():
            notes.append(
                f"{int(orphan.sum())} activities launched by ops on threads without module "
                "frames (backward?) have no module: the trace has no fwdbwd flows, nor "
                "autograd sequence numbers that link them to forward ops"
            )
    module, module_paths = _module_paths(trace, nodes, is_module, module_node)

    row_of = np.append(nodes.row, NO_ID)  # row_of[NO_ID] is NO_ID

    def rows(node: I64) -> I64:
        found: I64 = row_of[node]
        return found

    launch_row = rows(launch_node)
    is_graph = trace.name_mask(lambda n: "GraphLaunch" in n)  # cuda/cu/hip GraphLaunch
    graph = (launch_row >= 0) & is_graph[trace.name_id[np.maximum(launch_row, 0)]]
    reason = np.full(gpu.shape[0], ATTRIBUTED, dtype=np.int8)
    reason[inner_op < 0] = LAUNCH_OUTSIDE_OP
    reason[launch_row < 0] = NO_LAUNCH_CALL
    # Correlation ids grow within a process: an id below every recorded call's was issued
    # before the host side of the trace began (work still queued when the profiler started).
    corr = trace.correlation[gpu]
    unfound = (launch_row < 0) & (corr != NO_ID)
    if unfound.any():
        is_call = is_kind(trace.kind, _LAUNCH_KINDS) & (trace.correlation != NO_ID)
        if is_call.any():
            early = unfound & (corr < trace.correlation[is_call].min())
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
        host_row=nodes.row.astype(np.int64, copy=False),
        host_parent=nodes.parent,
        launch_node=launch_node,
        host_kind=kind,
        host_name=name_id,
        host_thread_start=nodes.thread_start(),
    )


@dataclass(frozen=True, eq=False)
class _Nodes:
    """Host events of the tree in open order (thread, start, longest first, rank, row).

    `thread` is the (pid, tid) key of `_Threads`; `parent[i]` is the node index of node i's
    parent, `NO_ID` at a root.
    """

    row: I64
    kind: I8
    thread: I64
    start_ns: I64
    end_ns: I64
    parent: I64

    def thread_start(self) -> I64:
        """Where each thread's nodes begin (they come by thread), then the node count."""
        n = self.thread.shape[0]
        heads = np.flatnonzero(self.thread[1:] != self.thread[:-1]) + 1
        return np.concatenate([[0] if n else [], heads, [n]]).astype(np.int64)

    @staticmethod
    def build(trace: Trace, thread: _Threads) -> _Nodes:
        host = is_kind(trace.kind, tuple(_HOST_RANK))
        rows = np.flatnonzero(host & (trace.phase == FlowPhase.COMPLETE))
        start = trace.ts_ns[rows]
        end = trace.dur_ns[rows].astype(np.int64, copy=False)
        np.maximum(end, 0, out=end)  # in place: millions of rows, each array fresh memory
        end += start
        kind = trace.kind[rows]
        rank = kind_then_id(_RANK_OF_KIND, kind, trace.external_id[rows])
        order, parent, g, start, end = nest(thread(rows), start, end, rank)
        return _Nodes(rows[order].astype(np.int64, copy=False), kind[order], g, start, end, parent)


def _link_by_correlation(trace: Trace, gpu: npt.NDArray[np.intp], nodes: _Nodes) -> tuple[I64, I8]:
    """Launch node of each activity by correlation id; any runtime or driver call counts.

    Not filtered by API name: only launch and copy calls share their id with GPU activity, so
    `cudaLaunchKernelExC`, `cuLaunchKernel`, `hipExtModuleLaunchKernel`, `cudaGraphLaunch`
    and calls no list names yet all match.
    """
    corr = trace.correlation[nodes.row]
    calls = np.flatnonzero(is_kind(nodes.kind, _LAUNCH_KINDS) & (corr != NO_ID))
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
    starts, ends = _flow_ends(trace, flows)
    start = _flow_starts(trace, starts, ends)
    ok = start >= 0
    return start[ok], ends[ok].astype(np.int64)


def _flow_ends(trace: Trace, flows: npt.NDArray[np.intp]) -> tuple[I64, I64]:
    """The arrows' starts and their ends (and steps) among `flows`."""
    phase = trace.phase[flows]
    starts = flows[phase == FlowPhase.FLOW_START].astype(np.int64)
    ends = flows[(phase == FlowPhase.FLOW_END) | (phase == FlowPhase.FLOW_STEP)]
    return starts, ends.astype(np.int64)


def _flow_starts(trace: Trace, starts: I64, ends: I64) -> I64:
    """The start row of the arrow each end row belongs to (same name and id), else `NO_ID`.

    The latest start at or before the end (an id may be reused along the trace), else the
    earliest after it (clock skew).
    """
    both = np.concatenate([starts, ends])
    key = pair_keys(trace.name_id[both].astype(np.int64), trace.correlation[both])
    n = starts.shape[0]
    found = find_by_key_time(key[:n], trace.ts_ns[starts], key[n:], trace.ts_ns[ends], exact=False)
    return take(starts, found)


def _bind(trace: Trace, thread: _Threads, at: I64, nodes: _Nodes, cand: I64) -> I64:
    """The outermost node of `cand` (node indices) starting exactly where each row `at` is."""
    found = find_by_key_time(
        nodes.thread[cand], nodes.start_ns[cand], thread(at), trace.ts_ns[at], exact=True
    )
    return take(cand, found)


def _flow_targets(trace: Trace, gpu: I64, open_: Bools, ends: I64, thread: _Threads) -> I64:
    """The activity (index into `gpu`) each arrow end lands on, else `NO_ID`.

    The one starting at the arrow's time on its (pid, tid) whose correlation id is the
    arrow's id (Kineto numbers both alike): where that one is linked already (not `open_`)
    the arrow is spent. An open activity without a correlation id takes an arrow by time
    and place alone; those that start together on a stream are taken in an order of their
    content (`settle_ties`), not the file's.
    """
    ts, corr = trace.ts_ns, trace.correlation[gpu]
    has_id = corr != NO_ID
    target = _landing(trace, thread, np.flatnonzero(open_ & has_id), gpu, ends)
    without_id = np.flatnonzero(open_ & ~has_id)
    if without_id.size == 0:
        return target
    # Arrows left, that end where an open activity without an id starts.
    b = gpu[without_id]
    b_thread = thread(b)
    order = np.lexsort((ts[b], b_thread))
    if (settled := settle_ties(trace, b[order], b_thread[order], ts[b][order])) is not None:
        order = order[settled]
    b, without_id = b[order], without_id[order]
    left = np.flatnonzero(target < 0)
    q = ends[left]
    found = find_by_key_time(thread(b), ts[b], thread(q), ts[q], exact=True)
    near = found >= 0
    left, found, q = left[near], found[near], q[near]
    if left.size == 0:
        return target
    # Spent: the arrow's id is that of a linked activity starting there.
    times = np.unique(ts[q])
    g_ts = ts[gpu]
    at_time = times[np.minimum(np.searchsorted(times, g_ts), times.shape[0] - 1)] == g_ts
    spent = _landing(trace, thread, np.flatnonzero(at_time & has_id & ~open_), gpu, q) >= 0
    target[left[~spent]] = without_id[found[~spent]]
    return target


def _landing(trace: Trace, thread: _Threads, cand: I64, gpu: I64, ends: I64) -> I64:
    """Per arrow end: the activity of `cand` (indices into `gpu`) with its id there, or NO_ID."""
    if cand.size == 0:
        return np.full(ends.shape[0], NO_ID, dtype=np.int64)
    a = gpu[cand]
    keys = pair_keys(
        np.concatenate([thread(a), thread(ends)]),
        np.concatenate([trace.correlation[a], trace.correlation[ends]]),
    )
    n = a.shape[0]
    ts = trace.ts_ns
    return take(cand, find_by_key_time(keys[:n], ts[a], keys[n:], ts[ends], exact=True))


def _link_by_flow(
    trace: Trace, gpu: npt.NDArray[np.intp], open_: Bools, nodes: _Nodes, thread: _Threads
) -> I64:
    """Launch node of each `open_` activity through the launch flows, `NO_ID` for the others.

    The flows are `ac2g` arrows (`launch` in Kineto 2021).
    """
    fwdbwd = trace.names.index(FWDBWD_FLOW) if FWDBWD_FLOW in trace.names else -2
    flows = np.flatnonzero((trace.kind == EventKind.FLOW) & (trace.name_id != fwdbwd))
    out = np.full(gpu.shape[0], NO_ID, dtype=np.int64)
    if flows.size == 0:
        return out
    starts, ends = _flow_ends(trace, flows)
    # First: only the arrows that end at one of these activities are paired and bound.
    target = _flow_targets(trace, gpu.astype(np.int64), open_, ends, thread)
    hit = target >= 0
    if not hit.any():
        return out
    ends, target = ends[hit], target[hit]
    s = _flow_starts(trace, starts, ends)
    calls = np.flatnonzero(is_kind(nodes.kind, _LAUNCH_KINDS))
    call = np.full(s.shape[0], NO_ID, dtype=np.int64)
    paired = np.flatnonzero(s >= 0)
    call[paired] = _bind(trace, thread, s[paired], nodes, calls)
    ok = call >= 0
    out[target[ok]] = call[ok]
    return out


def _forward_ops(
    trace: Trace, nodes: _Nodes, thread: _Threads, notes: list[str], modules: bool
) -> I64:
    """Per node: the forward op node its `fwdbwd` flow comes from (backward ops), else NO_ID.

    Kineto starts the arrow at the forward op's start and ends it at the backward op's
    start, on their threads; both bind to the outermost `cpu_op` starting there. Without
    flows, autograd's sequence numbers link them, where the trace has module frames (the
    link serves only to give backward work its module).
    """
    out = np.full(nodes.row.shape[0], NO_ID, dtype=np.int64)
    if FWDBWD_FLOW not in trace.names:
        if modules:
            _forward_by_sequence(trace, nodes, out)
        return out
    fwdbwd = trace.names.index(FWDBWD_FLOW)
    flows = np.flatnonzero((trace.kind == EventKind.FLOW) & (trace.name_id == fwdbwd))
    s, f = _flow_pairs(trace, flows)
    ops = np.flatnonzero(nodes.kind == EventKind.CPU_OP)
    fwd, bwd = _bind(trace, thread, s, nodes, ops), _bind(trace, thread, f, nodes, ops)
    ok = (fwd >= 0) & (bwd >= 0)
    out[bwd[ok]] = fwd[ok]
    if int(ok.sum()) < flows.size // 2:
        notes.append(f"{flows.size // 2 - int(ok.sum())} fwdbwd flows bind to no op pair")
    return out


def _forward_by_sequence(trace: Trace, nodes: _Nodes, out: I64) -> None:
    """Without `fwdbwd` flows: link backward ops to forward ops by autograd sequence number.

    Autograd records, on each backward op, the `Sequence number` of the forward op that
    created its node and that op's thread (`Fwd thread id`); the forward op carries the same
    sequence number and no thread id. The forward op is the outermost op with that number on
    that thread (of the same process). Fills `out` in place.
    """
    args = trace.op_args
    if args is None or not (args.fwd_tid >= 0).any():
        return
    ops = np.flatnonzero(nodes.kind == EventKind.CPU_OP)
    entry = args.entries_of(nodes.row[ops].astype(np.int64, copy=False))
    has = entry >= 0
    ops, entry = ops[has], entry[has]
    seq, fwd_tid = args.sequence[entry], args.fwd_tid[entry]
    fwd = (seq >= 0) & (fwd_tid < 0)
    bwd = (seq >= 0) & (fwd_tid >= 0)
    if not fwd.any() or not bwd.any():
        return
    rows = nodes.row[ops]
    pid, tid = trace.pid[rows], np.where(bwd, fwd_tid, trace.tid[rows])
    take_ = fwd | bwd
    ops, pid, tid, seq, is_fwd = ops[take_], pid[take_], tid[take_], seq[take_], fwd[take_]
    key = dense_pairs(dense_pairs(pid, tid), seq)
    # Nodes are in open order: the first forward node of a key is the outermost, earliest.
    f_nodes, f_keys = ops[is_fwd], key[is_fwd]
    order = np.argsort(f_keys, kind="stable")
    f_sorted = f_keys[order]
    b_keys = key[~is_fwd]
    at = np.searchsorted(f_sorted, b_keys)
    at_c = np.minimum(at, f_sorted.size - 1)
    ok = f_sorted[at_c] == b_keys
    out[ops[~is_fwd][ok]] = f_nodes[order[at_c[ok]]]


def _module_paths(
    trace: Trace, nodes: _Nodes, is_module: Bools, module_node: I64
) -> tuple[I32, list[str]]:
    """Path id of each activity's module node, and the interned paths.

    Each module frame's path is its module parent's path plus its own name. Paths are
    numbered in the order the frames first show them (open order: parents before children).
    """
    frames = np.flatnonzero(is_module)
    if frames.size == 0:
        return np.full(module_node.shape[0], NO_ID, dtype=np.int32), []
    module_parent = walk_up(nodes.parent, nodes.parent[frames], [is_module], farthest=False)[0][0]
    local = np.full(nodes.row.shape[0], NO_ID, dtype=np.int64)
    local[frames] = np.arange(frames.size)
    parent_local = take(local, module_parent)
    name_ids = trace.name_id[nodes.row[frames]].astype(np.int64)
    # Frames with the same path get the same class, one module depth at a time: a class is
    # a (parent's class, name) pair. Paths are numbered in order of first appearance.
    depth = np.zeros(frames.size, dtype=np.int64)
    up_local = parent_local.copy()
    climbing = np.flatnonzero(up_local >= 0)
    while climbing.size:
        depth[climbing] += 1
        up_local[climbing] = parent_local[up_local[climbing]]
        climbing = climbing[up_local[climbing] >= 0]
    klass = np.full(frames.size, NO_ID, dtype=np.int64)
    n_classes, n_names = 0, len(trace.names)
    for level in range(int(depth.max()) + 1):
        at = np.flatnonzero(depth == level)
        parent_class = take(klass, parent_local[at])  # NO_ID at level 0
        pair, which = np.unique((parent_class + 1) * n_names + name_ids[at], return_inverse=True)
        klass[at] = n_classes + which.reshape(-1)
        n_classes += pair.shape[0]
    classes, first = np.unique(klass, return_index=True)  # first frame of each class
    by_appearance = np.argsort(first, kind="stable")
    path_of_class = np.empty(n_classes, dtype=np.int64)
    path_of_class[classes[by_appearance]] = np.arange(n_classes)
    path_arr = path_of_class[klass].astype(np.int32)
    skip = len(MODULE_PREFIX)
    paths: list[str] = []
    parent_frames = parent_local[first[by_appearance]].tolist()
    own_names = name_ids[first[by_appearance]].tolist()
    for p, nid in zip(parent_frames, own_names, strict=True):
        own = trace.names[nid][skip:]
        paths.append(own if p < 0 else f"{paths[int(path_arr[p])]}/{own}")
    has = module_node >= 0
    out = np.full(module_node.shape[0], NO_ID, dtype=np.int32)
    out[has] = path_arr[local[module_node[has]]]
    return out, paths
