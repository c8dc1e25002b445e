"""The critical path of a GPU's window: the longest path through its dependency graph.

The graph (`_graph.build_graph`, defined as HTA's critical-path analysis defines it: its
`CPGraph`, facebookresearch/HolisticTraceAnalysis `hta/analyzers/critical_path_analysis.py`)
has a start and an end node per host op or runtime call and per GPU activity, and edges:

- host: along each thread in depth-first order (an op's start to its first child's start, a
  child's end to the next child's start or its parent's end), weighted by the time between;
  consecutive top-level events of a thread join by a `dependency` edge that weighs the time
  annotations or Python frames cover of the gap (the training loop's own code; HTA weighs
  it 0, `between_ops=False`), the host's covered time before its first event in the window
  leads into that event (`DependencyGraph.lead_ns`), and the edge into the end of a blocking
  call (one that waited for the GPU, any synchronize call) weighs nothing: the wait is the
  GPU's work, reached through a `sync` edge;
- gpu: an activity's start to its end (its duration); `kernel_gap`: the previous activity's
  end on the stream to its start (the gap), or, where the stream's queue was empty when the
  launch call began, `launch_delay`: the launch call's start to the activity's start (the
  delay); a zero-weight `launch` edge otherwise (a kernel never starts before its launch);
- sync: the end of the GPU work a blocking call waited for to the call's end (zero weight):
  cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize from Kineto's
  cuda_sync rows, and every call `analysis.blocking` finds blocking (blocking copies too),
  from the last activity queued before it on each stream;
- event_wait: `cudaEventRecord` -> `cudaStreamWaitEvent`: the end of the last activity
  queued on the recorded stream before the record to the start of the next activity the
  waiting thread queues on the waiting stream (zero weight).

The path is the longest through this DAG (any start, any end). Its length splits exactly into
`BREAKDOWN_KEYS` by the types of its edges. The longest path is one pass over the nodes in
order in C (`_paths.c`), over those a path needs (`_Solver`: a node that only adds its chain
weight to its predecessor's distance adds it into the next kept node's weight instead), read
back onto the whole graph; without the extension, a dynamic program along the chains (threads
and streams): within a block of nodes, a segmented running maximum per chain, repeated until
the cross edges settle (as many rounds as the path hops between chains in the block, plus
one), so numpy does the work and no Python runs per event. `what_if` recomputes the length
after a finding's fix given as shrunk edges (`GraphChange`).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.analysis._beside import Beside
from badput.analysis._graph import (
    BLOCKING,
    DEPENDENCY,
    EDGE_TYPES,
    EVENT_WAIT,
    GPU,
    HOST,
    KERNEL_GAP,
    LAUNCH,
    LAUNCH_DELAY,
    NO_EDGE,
    SYNC,
    DependencyGraph,
    EventWaits,
    Ints,
    _coverage,
    _HostSpans,
    _merged,
    build_graph,
)
from badput.analysis._nesting import c_paths, dense_pairs, flags, is_kind
from badput.analysis.blocking import BlockingCalls, blocking_calls
from badput.analysis.classify import KernelClasses
from badput.analysis.patterns import CATEGORIES, profiler_step_number
from badput.analysis.results import DeviceAnalysis
from badput.analysis.tree import LaunchTree, launch_tree
from badput.trace.model import NO_ID, EventKind, Trace

__all__ = [
    "BREAKDOWN_KEYS",
    "EDGE_TYPES",
    "STEP_OP",
    "CriticalPath",
    "DependencyGraph",
    "EventWaits",
    "GraphChange",
    "PathBeside",
    "PathEdges",
    "critical_path",
    "dependency_graph",
    "what_if",
]

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
Bools = npt.NDArray[np.bool_]

#: The parts of a path's length, in report order.
BREAKDOWN_KEYS = (
    "host",
    "launch_delay",
    "gpu_compute",
    "gpu_communication",
    "gpu_memory",
    "kernel_gap",
    "sync_wait",
)
_HOST_B, _LAUNCH_B, _COMPUTE_B, _COMM_B, _MEMORY_B, _GAP_B, _SYNC_B = range(7)
# Breakdown part of each edge type; GPU edges go by the activity's class instead.
_PART = np.array(
    [
        _HOST_B
        if t in (HOST, DEPENDENCY, BLOCKING)
        else _LAUNCH_B
        if t in (LAUNCH_DELAY, LAUNCH)
        else _GAP_B
        if t == KERNEL_GAP
        else _SYNC_B
        if t in (SYNC, EVENT_WAIT)
        else _COMPUTE_B
        for t in range(len(EDGE_TYPES))
    ],
    dtype=np.int64,
)
_COMM_CATEGORY = CATEGORIES.index("communication")
#: Most nodes in one block of the dynamic program, and most hop edges (sync, event waits)
#: that end in one: a block takes about twice as many rounds as it holds hops.
_BLOCK_NODES = 1 << 17
_BLOCK_HOPS = 8
_MAX_ROUNDS = 4 * _BLOCK_HOPS + 8
#: Nodes per block of a what-if's span time (`_span_time`): bounds its temporaries.
_SPAN_BLOCK_NODES = 1 << 20
#: Host edges whose what-if weights are made at once (`what_if`).
_SHRINK_BLOCK = 1 << 18


#: What-ifs over one set of spans share the time those spans cover along each host edge: by
#: the spans' rows, (host edge nodes, time inside the spans, each lead's time inside them),
#: of the host edges with time inside them alone (a DataLoader's spans cover about a tenth of
#: DLRM's 4.8 million): the others lie outside them.
SpanCache = dict[bytes, tuple[npt.NDArray[np.int32], I64, I64]]
#: What every what-if of a path starts from (`_what_if_in`), and its graph's `_Solver`.
WhatIfBase = dict[str, Any]


@dataclass(frozen=True, eq=False)
class PathEdges:
    """The edges of a critical path, in path order (time order).

    Attributes:
        src_row, dst_row: Trace rows of the events the edge joins.
        src_start, dst_start: whether the edge leaves (enters) the event's start (else end).
        edge_type: index into `EDGE_TYPES`.
        weight_ns: the edge's weight.
        part: index into `BREAKDOWN_KEYS` of the part of the length the edge's weight is in.
        src_ns: the time of the edge's source node (the graph's, where GPU ends are clipped
            to the next activity on their stream).
    """

    src_row: Ints
    dst_row: Ints
    src_start: Bools
    dst_start: Bools
    edge_type: I8
    weight_ns: I64
    part: I8 = field(default_factory=lambda: np.zeros(0, np.int8))
    src_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        """Number of edges."""
        return int(self.src_row.shape[0])


@dataclass(frozen=True, eq=False)
class CriticalPath:
    """The longest path through one GPU's window, and what it is made of.

    Attributes:
        length_ns: the path's length: the sum of its edge weights.
        breakdown_ns: `BREAKDOWN_KEYS` -> time; the parts add up to `length_ns`.
        top_ops: (op, time on the path), largest first: host time goes to the op around it
            (or the call itself outside any op), GPU time, kernel gaps and launch delays to the
            innermost op that launched the activity (or the activity's own name).
        steps: (step name, length of the step's own critical path), in time order; a step's
            graph holds its host events and the GPU work they launched.
        top_modules: (nn.Module path, time on the path) of the GPU side of the path (an
            activity's time, the gap before it, its launch delay) by the activity's
            innermost module (`LaunchTree.module`), largest first; empty without module
            frames (with_stack=False).
        rows: Trace rows of the events on the path, ascending.
        edges: the path's edges.
        graph: the dependency graph it was found in; None in a `compact` copy.
        warnings: what the trace lacked (missing edges, named), never fatal.
    """

    length_ns: int
    breakdown_ns: dict[str, int]
    top_ops: list[tuple[str, int]]
    steps: list[tuple[str, int]]
    rows: I64
    edges: PathEdges
    graph: DependencyGraph | None = field(repr=False)
    warnings: list[str] = field(default_factory=list)
    top_modules: list[tuple[str, int]] = field(default_factory=list)
    #: The blocking calls the graph's sync edges came from (diagnosis reuses them).
    blocking: BlockingCalls | None = field(default=None, repr=False, compare=False)
    # What-ifs over the same spans share their coverage (`_span_time`), by the spans' rows.
    # Given where what-ifs ran in the graph before the path was found (`PathBeside`).
    _spans: SpanCache = field(default_factory=dict, repr=False, compare=False)
    _what_if_base: WhatIfBase = field(default_factory=dict, repr=False, compare=False)

    def drop_what_if_caches(self) -> None:
        """Forget what the what-ifs keep between calls; a later what-if makes them again.

        Node-sized arrays: tens of MB on a trace of millions of events.
        """
        self._spans.clear()
        self._what_if_base.clear()

    def compact(self) -> CriticalPath:
        """The path without its graph, rows and edges.

        What a report needs, small enough to ship from a worker to the driver.
        """
        empty = np.zeros(0, np.int64)
        return dataclasses.replace(
            self,
            rows=empty,
            edges=_no_edges(),
            graph=None,
            blocking=None,
            _spans={},
            _what_if_base={},
        )


def dependency_graph(
    trace: Trace,
    analysis: DeviceAnalysis,
    tree: LaunchTree | None = None,
    *,
    window: tuple[int, int] | None = None,
    waits: EventWaits | None = None,
    between_ops: bool = True,
    blocking: BlockingCalls | Callable[[], BlockingCalls | None] | None = None,
    jobs: int = 1,
) -> DependencyGraph:
    """The dependency graph of one GPU's window (see the module docstring for its edges).

    Args:
        trace: the trace the analysis came from.
        analysis: one GPU's analysis; its window unless `window` is given.
        tree: the trace's launch tree (the analysis's, else built here).
        window: (start_ns, end_ns): host events starting in it, and what they launched.
        waits: the record each event wait waited on; the trace's own (`Trace.sync_waits`)
            if None.
        between_ops: see `critical_path`.
        blocking: the analysis's blocking calls (`blocking_calls`) if already found, or a
            call that gives them when asked (being found on a helper thread).
        jobs: with 2 or more, the blocking calls (when not given) and the host's spans are
            found on helper threads while the graph's nodes are built (the same graph).
    """
    if tree is None:
        tree = analysis.timeline.tree if analysis.timeline is not None else None
    if tree is None:
        tree = launch_tree(trace)
    if window is None:
        w0, w1 = analysis.window_start_ns, analysis.window_start_ns + analysis.window_ns
        window = graph_window(
            trace, tree, analysis.device, w0, w1, [s.name for s in analysis.steps]
        )
    if blocking is None:
        blocking = Beside(jobs, blocking_of, trace, analysis).result
    return _graph_in(trace, tree, analysis.device, window, waits, between_ops, blocking, jobs)


def graph_window(
    trace: Trace, tree: LaunchTree, device: int, w0: int, w1: int, step_names: list[str]
) -> tuple[int, int]:
    """The host side of a GPU's window [w0, w1] whose steps are `step_names`: the graph's.

    It begins with the launch of the window's first GPU work (a window of GPU-side steps or
    GPU activity starts after the host queued it), and where each step has a host span, runs
    over those spans (a host that runs ahead ends its steps before the GPU does).
    """
    on = (trace.device[tree.row] == device) & (tree.launch_row >= 0)
    gts = trace.ts_ns[tree.row]
    on &= (gts >= w0) & (gts < w1)
    if on.any():
        w0 = min(w0, int(trace.ts_ns[tree.launch_row[on]].min()))
    spans = _host_step_spans(trace, step_names)
    if spans is not None:  # the host side of steps: their host spans
        w0, w1 = min(w0, int(spans[0].min())), min(w1, int(spans[1].max()))
    return w0, w1


def early_graph(
    trace: Trace,
    tree: LaunchTree,
    device: int,
    window: tuple[int, int],
    step_names: list[str],
    blocking: Callable[[], BlockingCalls | None],
    jobs: int = 1,
) -> DependencyGraph:
    """`dependency_graph` of a GPU from its window alone, before the rest of its analysis.

    The same graph as `dependency_graph(trace, analysis, tree)` of the analysis whose window
    (start, end) and step names these are; `blocking` gives the analysis's blocking calls
    when the graph first needs them (late in the build: the analysis may finish meanwhile).
    """
    w0, w1 = graph_window(trace, tree, device, window[0], window[1], step_names)
    return _graph_in(trace, tree, device, (w0, w1), None, True, blocking, jobs)


def _graph_in(
    trace: Trace,
    tree: LaunchTree,
    device: int,
    window: tuple[int, int],
    waits: EventWaits | None,
    between_ops: bool,
    blocking: BlockingCalls | Callable[[], BlockingCalls | None] | None,
    jobs: int,
) -> DependencyGraph:
    """The graph of `device` over the host window `window` (see `dependency_graph`)."""
    w0, w1 = window
    rows: I64 | Callable[[], I64]
    if callable(blocking):
        found = blocking

        def blocking_rows() -> I64:
            return _rows_of_calls(found())

        # One thread: found before the nodes are built (and their memory held).
        rows = blocking_rows if jobs > 1 else blocking_rows()
    else:
        rows = _rows_of_calls(blocking)
    host_spans = Beside(jobs, _HostSpans.of, trace, tree) if jobs > 1 and between_ops else None
    return build_graph(
        trace,
        tree,
        device,
        w0,
        w1,
        rows,
        waits,
        between_ops,
        host_spans.result if host_spans is not None else None,
    )


def _rows_of_calls(blocking: BlockingCalls | None) -> I64:
    """The Trace rows of the blocking calls (none without them)."""
    return blocking.rows.astype(np.int64) if blocking is not None else np.zeros(0, np.int64)


def blocking_of(trace: Trace, analysis: DeviceAnalysis) -> BlockingCalls | None:
    """The analysis's blocking calls; None without a timeline or a window to find them in."""
    if analysis.timeline is None or analysis.window_ns <= 0:
        return None
    return blocking_calls(trace, analysis)


def _cpu_spans(trace: Trace, analysis: DeviceAnalysis) -> tuple[I64, I64] | None:
    """(start, end) of the host's `ProfilerStep` span of each of the analysis's steps."""
    return _host_step_spans(trace, [s.name for s in analysis.steps])


def _host_step_spans(trace: Trace, step_names: list[str]) -> tuple[I64, I64] | None:
    """(start, end) of the host's `ProfilerStep` span of each of the steps named.

    A step of the analysis is the GPU's (its work, stretched); the host's own span of it
    begins earlier (its DataLoader wait, its launches) and ends earlier (a host that runs ahead
    is already in the next step when the GPU finishes). None without a host span per step.
    """
    if not step_names:
        return None
    # Asked twice per path (its graph's window, its steps' lengths), each a pass over the
    # trace's millions of rows: found once per trace and step names.
    found = _STEP_SPANS.setdefault(trace, {})
    key = tuple(step_names)
    if key not in found:
        found[key] = _find_host_step_spans(trace, step_names)
    return found[key]


# Per trace (held no longer than it), the host spans of each list of step names asked for.
_STEP_SPANS: weakref.WeakKeyDictionary[Trace, dict[tuple[str, ...], tuple[I64, I64] | None]] = (
    weakref.WeakKeyDictionary()
)


def _find_host_step_spans(trace: Trace, step_names: list[str]) -> tuple[I64, I64] | None:
    """`_host_step_spans`, found from the trace's rows."""
    names = set(step_names)
    # The rows with those names first (a few among millions), then their kind and device.
    rows = np.flatnonzero(trace.name_mask(lambda n: n in names)[trace.name_id])
    kind = trace.kind[rows]
    host = (kind == EventKind.CPU_OP) | (kind == EventKind.ANNOTATION)
    rows = rows[host & (trace.device[rows] < 0)]
    first: dict[str, int] = {}
    for r in rows.tolist():
        first.setdefault(trace.name_of(r), r)
    if len(first) != len(names):
        return None
    picked = np.asarray([first[name] for name in step_names], dtype=np.int64)
    start, end = trace.spans_of(picked)
    start.flags.writeable = end.flags.writeable = False  # shared by every caller
    return start, end


def critical_path(
    trace: Trace,
    analysis: DeviceAnalysis,
    tree: LaunchTree | None = None,
    *,
    window: tuple[int, int] | None = None,
    waits: EventWaits | None = None,
    between_ops: bool = True,
    jobs: int = 1,
    graph: Callable[[], DependencyGraph] | None = None,
    blocking: Callable[[], BlockingCalls | None] | None = None,
    what_if_caches: tuple[SpanCache, WhatIfBase] | None = None,
    path_edges: bool = True,
) -> CriticalPath:
    """The critical path of one GPU's window, its breakdown, its top ops and per-step lengths.

    Args:
        trace: the trace the analysis came from.
        analysis: one GPU's analysis (`analyze_trace`).
        tree: the trace's launch tree; the analysis's by default.
        window: (start_ns, end_ns) instead of the analysis window (HTA's annotation region).
        waits: see `dependency_graph`.
        between_ops: host time between top-level ops inside an annotation or Python frame
            (the training loop's own code) is host work on the path; False gives HTA's graph,
            where every gap between top-level events is idle.
        jobs: with 2 or more, the steps' own paths are found on a second thread beside the
            window's path, and the blocking calls and the host's spans beside the graph's
            nodes (the same result).
        graph: gives the analysis's dependency graph (`early_graph`, started before the
            analysis was done); None builds it here. Only with the default `window`, `waits`
            and `between_ops`.
        blocking: with `graph`, gives the analysis's blocking calls (those the graph used).
        what_if_caches: the caches of what-ifs already run in the graph (`PathBeside`), for
            the path to hold; new ones by default.
        path_edges: False keeps neither the path's rows nor its edges (millions of each on a
            1 GB trace), as `compact` would not, but its graph for the what-ifs: what a
            report of the path's length, parts, ops and steps needs.

    Returns:
        The path; a trace without host events gives the GPU's own path, one without GPU
        activity an empty path, each with warnings that say what was missing.

    Example:
        >>> from badput.analysis.device import analyze_trace  # doctest: +SKIP
        >>> d = analyze_trace(trace)[0]  # doctest: +SKIP
        >>> critical_path(trace, d).breakdown_ns["launch_delay"]  # doctest: +SKIP
        27000
    """
    if tree is None and analysis.timeline is not None:
        tree = analysis.timeline.tree
    if tree is None:
        tree = launch_tree(trace)
    if graph is not None:
        assert blocking is not None and window is None and waits is None and between_ops
        g = graph()
        found_calls = blocking()
    else:
        found = Beside(jobs, blocking_of, trace, analysis)  # beside the graph's first part
        g = dependency_graph(
            trace,
            analysis,
            tree,
            window=window,
            waits=waits,
            between_ops=between_ops,
            blocking=found.result,
            jobs=jobs,
        )
        found_calls = found.result()
    warnings = list(g.warnings)
    if not (trace.kind == EventKind.SYNC).any():
        # Syncs come from the blocking-call timing as well; only event waits need the rows.
        calls = np.flatnonzero(is_kind(trace.kind, (EventKind.RUNTIME, EventKind.DRIVER)))
        # The calls' names alone, not every row's.
        n_waiting = trace.rows_named(calls, lambda n: "StreamWaitEvent" in n).shape[0]
        del calls
        if n_waiting:
            warnings.append(
                f"{n_waiting} stream-wait-event calls but no cuda_sync events in the "
                "trace: no event waits join streams"
            )
    classes = analysis.timeline.classes if analysis.timeline is not None else None
    if classes is None:
        warnings.append("no kernel classes: every kernel counts as compute")
    n = len(g)
    if n == 0:
        empty = _no_edges()
        zero = dict.fromkeys(BREAKDOWN_KEYS, 0)
        steps = [(s.name, 0) for s in analysis.steps]
        return CriticalPath(0, zero, [], steps, np.zeros(0, np.int64), empty, g, warnings)

    spans, base = what_if_caches if what_if_caches is not None else ({}, {})
    step_paths = Beside(jobs, _step_lengths, trace, tree, g, analysis)
    has_chain = g.chain_type != NO_EDGE
    length, nodes, how = _path(g, has_chain, np.ones(g.edge_src.shape[0], np.bool_), base)
    del has_chain
    rows = (
        _rows_of(len(trace), g.event_row[g.node_event[nodes]])
        if path_edges
        else np.zeros(0, np.int64)
    )
    made, totals = _path_edges(trace, tree, g, nodes, how, classes, keep=path_edges)
    del nodes, how
    edges = made if made is not None else _no_edges()
    breakdown_ns = {k: int(v) for k, v in zip(BREAKDOWN_KEYS, totals.part_ns.tolist(), strict=True)}
    assert sum(breakdown_ns.values()) == length, (breakdown_ns, length)
    top_ops = _top_ops(trace, totals.op_ns)
    top_modules = _top_modules(tree, totals.module_ns)
    del totals
    return CriticalPath(
        length_ns=length,
        breakdown_ns=breakdown_ns,
        top_ops=top_ops,
        top_modules=top_modules,
        steps=step_paths.result(),
        rows=rows,
        edges=edges,
        graph=g,
        warnings=warnings,
        blocking=found_calls,
        _spans=spans,
        _what_if_base=base,
    )


class PathBeside:
    """A GPU's critical path found on a helper thread from its graph, what-ifs before it is.

    The graph is being built (`early_graph`). `result()` waits for the path. `what_if` waits
    for the graph alone (built first), so that the findings' what-ifs run while the path is
    still being found; the path, once found, holds the same what-if caches
    (`CriticalPath._spans`, `_what_if_base`). One thread runs the what-ifs
    (`DeviceContext`), as with a found path.
    """

    def __init__(
        self,
        jobs: int,
        trace: Trace,
        analysis: DeviceAnalysis,
        tree: LaunchTree,
        graph: Callable[[], DependencyGraph],
        blocking: Callable[[], BlockingCalls | None],
        path_edges: bool = True,
    ) -> None:
        self._graph = graph
        self._blocking = blocking
        self._spans: SpanCache = {}
        self._base: WhatIfBase = {}
        caches = (self._spans, self._base)
        self._path: Beside[CriticalPath] = Beside(
            jobs, lambda: critical_path(
                trace, analysis, tree, jobs=jobs, graph=graph, blocking=blocking,
                what_if_caches=caches, path_edges=path_edges,
            )
        )  # fmt: skip

    def result(self) -> CriticalPath:
        """The path (waits for it; raises what finding it raised)."""
        return self._path.result()

    def blocking(self) -> BlockingCalls | None:
        """The analysis's blocking calls, the path's own: found once, by whoever asks first."""
        return self._blocking()

    def what_if(self, trace: Trace, change: GraphChange) -> int:
        """`what_if` of the path-to-be: its length after `change` (waits for the graph)."""
        return _what_if_in(trace, self._graph(), self._spans, self._base, change)

    def drop_what_if_caches(self) -> None:
        """`CriticalPath.drop_what_if_caches` of the path-to-be (the same caches), now."""
        self._spans.clear()
        self._base.clear()


def _rows_of(n_rows: int, rows: Ints) -> I64:
    """The distinct rows, ascending (a mask, not a sort: paths have millions of nodes)."""
    seen = np.zeros(n_rows, dtype=np.bool_)
    seen[rows] = True
    return np.flatnonzero(seen).astype(np.int64, copy=False)


def _no_edges() -> PathEdges:
    i64, b = np.zeros(0, np.int64), np.zeros(0, np.bool_)
    return PathEdges(i64, i64, b, b, np.zeros(0, np.int8), i64, np.zeros(0, np.int8), i64)


def _edge_parts(
    trace: Trace, g: DependencyGraph, classes: KernelClasses | None, nodes: Ints
) -> npt.NDArray[np.int8]:
    """Breakdown part of each of `nodes`' events as a GPU activity (by its class and kind)."""
    rows = g.rows_of(nodes)
    part = np.full(rows.shape[0], _COMPUTE_B, dtype=np.int8)
    kind = trace.kind[rows]
    part[(kind == EventKind.MEMCPY) | (kind == EventKind.MEMSET)] = _MEMORY_B
    if classes is not None and len(classes):
        kern = np.flatnonzero(kind == EventKind.KERNEL)
        at = np.minimum(np.searchsorted(classes.row, rows[kern]), len(classes) - 1)
        found = classes.row[at] == rows[kern]
        comm = found & (classes.category[at] == _COMM_CATEGORY)
        part[kern[comm]] = _COMM_B
    return part


def _use_c() -> bool:
    """Whether the C pass runs (`BADPUT_NO_C_PATHS=1` picks the numpy one, as tests do)."""
    return c_paths() is not None


def _distances(
    g: DependencyGraph,
    chain_ok: Bools,
    edge_ok: Bools,
    chain_w: I64 | None = None,
    edge_w: I64 | None = None,
    lead: I64 | None = None,
    with_best: bool = True,
    scratch: bool = False,
) -> tuple[I64, I64 | None]:
    """Longest-path distance to each node and its best in-edge (see `_longest`), by C.

    `chain_w` / `edge_w` / `lead` replace the graph's weights (a what-if). Without
    `with_best` the distances alone (None for the in-edges: an array of nodes not made).
    With `scratch`, `chain_w` is the caller's to overwrite: the distances are written over
    it (the pass reads a node's weight before it writes the node's distance), not into a
    second node-sized array.
    """
    n = len(g)
    if scratch and chain_w is not None and _own_int64(chain_w):
        dist = chain_w
    else:
        dist = np.zeros(n, dtype=np.int64)
    best = np.zeros(n, dtype=np.int64) if with_best else None
    wait = g.edge_type == EVENT_WAIT
    c_paths().longest(
        np.ascontiguousarray(g.chain_pred, dtype=np.int32),
        np.ascontiguousarray(g.chain_weight_ns if chain_w is None else chain_w, dtype=np.int64),
        flags(chain_ok),
        np.ascontiguousarray(g.lead_nodes, dtype=np.int64),
        np.ascontiguousarray(g.lead_ns if lead is None else lead, dtype=np.int64),
        np.ascontiguousarray(g.edge_src, dtype=np.int64),
        np.ascontiguousarray(g.edge_dst, dtype=np.int64),
        np.ascontiguousarray(g.edge_weight_ns if edge_w is None else edge_w, dtype=np.int64),
        flags(edge_ok),
        flags(wait),
        dist,
        best,
    )
    return dist, best


def _own_int64(a: I64) -> bool:
    """Whether the C pass can write into `a` as it is (contiguous, writable int64)."""
    return a.dtype == np.int64 and bool(a.flags.c_contiguous) and bool(a.flags.writeable)


def _lengths(
    g: DependencyGraph,
    chain_ok: Bools,
    edge_ok: Bools,
    chain_w: I64 | None = None,
    edge_w: I64 | None = None,
    lead: I64 | None = None,
    scratch: bool = False,
) -> I64:
    """Longest-path distance to each node (C where built, else numpy).

    `scratch`: `chain_w` may be overwritten (see `_distances`).
    """
    if _use_c():
        return _distances(g, chain_ok, edge_ok, chain_w, edge_w, lead, False, scratch)[0]
    return _longest(g, chain_ok, edge_ok, chain_w, edge_w, lead)[0]


def _path(
    g: DependencyGraph, chain_ok: Bools, edge_ok: Bools, base: WhatIfBase | None = None
) -> tuple[int, I64, I64]:
    """The longest path's length, its nodes and how the path enters each.

    The nodes ascend (the graph's topological order); how: `-1` (the path starts there),
    `-2` (its chain edge) or the index of the cross edge (into the graph's edge arrays).
    In C on the graph's `_Solver` (kept in `base`, which the what-ifs share), then read back
    onto the whole graph: the same path as the whole graph's pass finds.
    """
    if not _use_c():
        dist, origin, best = _longest(g, chain_ok, edge_ok)
        nodes, chain_in, cross = _backtrack(g, dist, origin, best)
        how = np.full(nodes.shape[0], -1, dtype=np.int64)
        how[np.searchsorted(nodes, chain_in)] = -2
        how[np.searchsorted(nodes, g.edge_dst[cross])] = cross
        return int(dist.max()), nodes, how
    return _solver_of(g, {} if base is None else base).path(g, chain_ok, edge_ok)


#: One thread builds a graph's `_Solver`; another that asks meanwhile waits for it.
_SOLVER_LOCK = threading.Lock()


def _solver_of(g: DependencyGraph, base: WhatIfBase) -> _Solver:
    """`g`'s `_Solver`, made once and kept in `base` (a path's what-if base)."""
    with _SOLVER_LOCK:
        found = base.get("solver")
        if found is None:
            found = base["solver"] = _Solver.of(g)
    assert isinstance(found, _Solver)
    return found


@dataclass(frozen=True, eq=False)
class _Solver:
    """A graph's longest-path problem on the nodes it needs, for the C pass (`_paths.c`).

    A node whose distance is its chain predecessor's plus its own chain weight, that no cross
    edge leaves or enters, that no path begins at, and after which its chain goes on, is
    contracted: its weight adds into the next kept node's on its chain. Distances grow along
    contracted nodes (their weights are not negative), so the longest path's length is a kept
    node's, and the path through a contracted node is its chain's. Host ops with no launch
    or sync of their own are most of a graph's nodes: the kept ones are 15-21 % of the nodes
    of the benchmark's 1 GB shapes, and each pass (the path, every what-if) reads that many.

    Attributes:
        keep: 1 where a node is kept (uint8, per node).
        seg: per node, the index among the kept nodes of itself where kept, else of the next
            kept node on its chain (whose weight its own adds to).
        kept: the kept nodes, ascending.
        pred: per kept node, the kept node before it on its chain (its index), `NO_ID` at a
            chain's first.
        lead_nodes: the graph's lead nodes as kept indices (the same order).
        src, dst: the cross edges' ends as kept indices (the same edges, the same order).
        wait: 1 where a cross edge is an event wait (uint8).
        weight: the graph's chain weights, summed per kept node.
        run: per kept node, how many contracted nodes come before it on its chain since the
            kept node before it (their weights are in its own).
    """

    keep: npt.NDArray[np.uint8]
    seg: I32
    kept: I64
    pred: I32
    lead_nodes: I64
    src: I64
    dst: I64
    wait: npt.NDArray[np.uint8]
    weight: I64
    run: I32

    @staticmethod
    def of(g: DependencyGraph) -> _Solver:
        """The solver of `g` (with the C helpers)."""
        fast = c_paths()
        pred = np.ascontiguousarray(g.chain_pred, dtype=np.int32)
        keep = np.empty(len(g), dtype=np.uint8)
        n_kept = fast.solver_keep(
            pred,
            np.ascontiguousarray(g.chain_type, dtype=np.int8),
            NO_EDGE,
            np.ascontiguousarray(g.lead_nodes, dtype=np.int64),
            np.ascontiguousarray(g.edge_src, dtype=np.int64),
            np.ascontiguousarray(g.edge_dst, dtype=np.int64),
            keep,
        )
        seg = np.empty(len(g), dtype=np.int32)
        kept_pred = np.empty(n_kept, dtype=np.int32)
        kept = np.empty(n_kept, dtype=np.int64)
        weight = np.empty(n_kept, dtype=np.int64)
        run = np.empty(n_kept, dtype=np.int32)
        chain_w = np.ascontiguousarray(g.chain_weight_ns, dtype=np.int64)
        fast.solver_chains(pred, keep, chain_w, seg, kept_pred, kept, weight, run)
        return _Solver(
            keep=keep,
            seg=seg,
            kept=kept,
            pred=kept_pred,
            lead_nodes=seg[g.lead_nodes].astype(np.int64),
            src=seg[g.edge_src].astype(np.int64),
            dst=seg[g.edge_dst].astype(np.int64),
            wait=np.ascontiguousarray(g.edge_type == EVENT_WAIT).view(np.uint8),
            weight=weight,
            run=run,
        )

    def weights(self, chain_w: I64) -> I64 | None:
        """A what-if's chain weights (per node) summed per kept node.

        None where a contracted node's is negative (its distance would not be its
        predecessor's plus it).
        """
        out = np.empty(self.kept.shape[0], dtype=np.int64)
        ok = c_paths().solver_weights(
            self.seg, self.keep, np.ascontiguousarray(chain_w, dtype=np.int64), out
        )
        return out if ok else None

    def changed(self, g: DependencyGraph, changes: list[tuple[Ints, I64]]) -> I64 | None:
        """The solver's weights with some nodes' chain weights changed.

        `changes`: (nodes, their new weights) each, apart. Each change's difference goes into
        its kept node's weight: no pass over every node. None where a contracted node's new
        weight is negative.
        """
        out = self.weight.copy()
        for nodes, new in changes:
            if nodes.shape[0] == 0:
                continue
            if int(new.min()) < 0 and bool((new[self.keep[nodes] == 0] < 0).any()):
                return None
            np.add.at(out, self.seg[nodes], new - g.chain_weight_ns[nodes])
        return out

    def distances(
        self,
        chain_ok: Bools,
        edge_ok: Bools,
        chain_w: I64,
        edge_w: I64,
        lead: I64,
        with_best: bool,
    ) -> tuple[I64, I64 | None]:
        """`_distances` over the kept nodes: `chain_ok` and `chain_w` per kept node."""
        n = self.kept.shape[0]
        dist = np.empty(n, dtype=np.int64)
        best = np.empty(n, dtype=np.int64) if with_best else None
        c_paths().longest(
            self.pred,
            np.ascontiguousarray(chain_w, dtype=np.int64),
            flags(chain_ok),
            self.lead_nodes,
            np.ascontiguousarray(lead, dtype=np.int64),
            self.src,
            self.dst,
            np.ascontiguousarray(edge_w, dtype=np.int64),
            flags(edge_ok),
            self.wait,
            dist,
            best,
        )
        return dist, best

    def path(self, g: DependencyGraph, chain_ok: Bools, edge_ok: Bools) -> tuple[int, I64, I64]:
        """`_path` of `g` (its own weights; `chain_ok` per node of `g`).

        `chain_ok` holds wherever `g` has a chain edge (its type is not `NO_EDGE`), as the
        path's own and every what-if's do: a contracted node always has one. The path ends
        where the whole graph's pass ends it: at the first node with the largest distance,
        which may be a contracted node where the weights after it to its kept node are 0.
        """
        fast = c_paths()
        dist, best = self.distances(
            chain_ok[self.kept], edge_ok, self.weight, g.edge_weight_ns, g.lead_ns, True
        )
        assert best is not None  # asked for
        length = int(dist.max())
        tied = np.flatnonzero(dist == length)
        del dist
        first = int(tied[0])
        # Only a kept node entered by its chain from before the first tied one can hold an
        # earlier node of that distance in its run (the first tied one too, so entered).
        tied = tied[(self.pred[tied] < first) & (self.pred[tied] >= 0) & (best[tied] == -2)]
        chain_pred = np.ascontiguousarray(g.chain_pred, dtype=np.int32)
        chain_w = np.ascontiguousarray(g.chain_weight_ns, dtype=np.int64)
        end, end_kept = int(self.kept[first]), first
        for c in tied.tolist():
            at = fast.zero_run(chain_pred, self.keep, chain_w, int(self.kept[c]))
            if at < end:
                end, end_kept = at, c
        cut, cut_node = -1, -1
        last = end_kept
        if end != int(self.kept[end_kept]):  # inside the run into end_kept: from its pred on
            cut, cut_node, last = end_kept, end, int(self.pred[end_kept])
        out = np.empty(self.kept.shape[0], dtype=np.int64)
        count = fast.backtrack(best, self.pred, self.src, last, out)
        on = out[:count]
        del out
        flag = np.zeros(self.kept.shape[0], dtype=np.int8)
        flag[on] = 1
        by_chain = on[best[on] == -2]
        flag[by_chain] = 2  # entered by its chain: its run is on the path too
        # At most this many nodes: the kept ones, their runs, and the run the path ends in.
        most = on.shape[0] + int(self.run[by_chain].sum()) + (int(self.run[cut]) if cut >= 0 else 0)
        del on, by_chain
        nodes = np.empty(most, dtype=np.int64)
        how = np.empty(most, dtype=np.int64)
        count = fast.solver_path(self.seg, self.keep, flag, best, cut, cut_node, nodes, how)
        return length, nodes[:count], how[:count]

    def length(self, chain_ok: Bools, edge_ok: Bools, chain_w: I64, edge_w: I64, lead: I64) -> int:
        """The longest path's length with a what-if's weights (per kept node)."""
        return int(self.distances(chain_ok, edge_ok, chain_w, edge_w, lead, False)[0].max())


def _longest(
    g: DependencyGraph,
    chain_ok: Bools,
    edge_ok: Bools,
    chain_w: I64 | None = None,
    edge_w: I64 | None = None,
    lead: I64 | None = None,
) -> tuple[I64, I64, I64]:
    """Longest-path distance to each node, the start of its chain run, and its best in-edge.

    Returns `dist` (ns), `origin` (the node where the path to each node joined its chain),
    and `best` per node: `-1` (the path starts there, after its `lead` of host time), `-2`
    (its chain edge), or the index of the cross edge (into the graph's edge arrays) that the
    path to it arrives by.
    """
    n = len(g)
    dense = np.zeros(n, dtype=np.int64)  # the numpy pass wants a lead per node
    dense[g.lead_nodes] = g.lead_ns if lead is None else lead
    lead = dense
    pred = g.chain_pred
    w_chain = np.where(chain_ok, g.chain_weight_ns if chain_w is None else chain_w, 0)
    e_idx = np.flatnonzero(edge_ok)
    src, dst = g.edge_src[e_idx], g.edge_dst[e_idx]
    w = (g.edge_weight_ns if edge_w is None else edge_w)[e_idx]
    dist = np.zeros(n, dtype=np.int64)
    origin = np.arange(n, dtype=np.int64)
    span = int(g.node_ns.max() - g.node_ns.min()) + int(lead.max()) if n else 0
    big = 2 * span + 2
    block = max(1, min(_BLOCK_NODES, (1 << 62) // big))
    hop = (g.edge_type[e_idx] == SYNC) | (g.edge_type[e_idx] == EVENT_WAIT)
    cuts = np.union1d(np.arange(0, n, block), dst[hop][::_BLOCK_HOPS])
    # An event wait wins a tie with the stream's own order (HTA adds it first; and the
    # path then shows the work waited for, such as exposed communication).
    prefer = np.zeros(n, dtype=np.bool_)
    prefer[dst[g.edge_type[e_idx] == EVENT_WAIT]] = True
    bounds = np.append(cuts, n)
    dst_lo = np.searchsorted(dst, bounds)
    node_chain = g.node_chain
    for a, b, lo, hi in zip(
        bounds[:-1].tolist(),
        bounds[1:].tolist(),
        dst_lo[:-1].tolist(),
        dst_lo[1:].tolist(),
        strict=True,
    ):
        _solve_block(
            a,
            b,
            node_chain,
            pred,
            chain_ok,
            w_chain,
            src[lo:hi],
            dst[lo:hi],
            w[lo:hi],
            dist,
            origin,
            big,
            prefer,
            lead,
        )
    # The best in-edge of each node: its chain edge on ties (HTA adds chain edges first).
    best = np.full(n, -1, dtype=np.int64)
    value = np.where(lead > 0, lead, -1)
    has = chain_ok & (pred >= 0)
    value[has] = dist[pred[has]] + w_chain[has]
    best[has] = -2
    cand = dist[src] + w
    # per destination, the first cross edge with the largest value
    order = np.lexsort((np.arange(cand.shape[0]), -cand, dst))
    first = np.ones(order.shape[0], dtype=np.bool_)
    first[1:] = dst[order][1:] != dst[order][:-1]
    top = order[first]
    wait = g.edge_type[e_idx[top]] == EVENT_WAIT
    better = (cand[top] > value[dst[top]]) | (wait & (cand[top] == value[dst[top]]))
    best[dst[top][better]] = e_idx[top][better]
    return dist, origin, best


def _solve_block(
    a: int,
    b: int,
    chain: Ints,
    pred: Ints,
    chain_ok: Bools,
    w_chain: I64,
    src: I64,
    dst: I64,
    w: I64,
    dist: I64,
    origin: I64,
    big: int,
    prefer: Bools,
    lead: I64,
) -> None:
    """Distances of nodes `[a, b)`, all earlier nodes being final; fills `dist`, `origin`."""
    m = b - a
    perm = a + np.argsort(chain[a:b], kind="stable")  # chain order, topological within
    p = pred[perm]
    inside = chain_ok[perm] & (p >= a)
    seg_start = ~inside
    outside = chain_ok[perm] & (p >= 0) & (p < a)
    base = lead[a:b].copy()  # contributions from final nodes (and leads), in block order
    base[perm[outside] - a] = dist[p[outside]] + w_chain[perm[outside]]
    ext = src < a
    np.maximum.at(base, dst[ext] - a, dist[src[ext]] + w[ext])
    i_src, i_dst, i_w = src[~ext], dst[~ext] - a, w[~ext]
    ww = np.where(seg_start, 0, w_chain[perm])
    cs = np.cumsum(ww)
    seg = np.cumsum(seg_start) - 1
    first = np.flatnonzero(seg_start)
    wcum = cs - cs[first][seg]
    offset = seg.astype(np.int64) * big
    shift = offset - wcum
    current = dist[a:b].copy()
    for _ in range(_MAX_ROUNDS):
        c = base.copy()
        if i_src.shape[0]:
            np.maximum.at(c, i_dst, current[i_src - a] + i_w)
        v = c[perm - a] + shift
        run = np.maximum.accumulate(v)
        new = np.empty(m, dtype=np.int64)
        new[perm - a] = run - shift
        if np.array_equal(new, current):
            break
        current = new
    else:
        raise AssertionError("critical path: a block did not settle")
    dist[a:b] = current
    record = np.ones(m, dtype=np.bool_)
    record[1:] = v[1:] > run[:-1]
    record[1:] |= prefer[perm[1:]] & (v[1:] == run[:-1])
    at = np.maximum.accumulate(np.where(record, np.arange(m), 0))
    origin[perm] = perm[at]


def _backtrack(g: DependencyGraph, dist: I64, origin: I64, best: I64) -> tuple[I64, I64, I64]:
    """Nodes of the longest path, the nodes its chain edges enter, and its cross edges."""
    by_chain = np.lexsort((np.arange(len(g)), g.node_chain))
    chain_pos = np.empty(len(g), dtype=np.int64)
    chain_pos[by_chain] = np.arange(len(g))
    v = int(np.argmax(dist))
    runs: list[I64] = []
    chain_in: list[I64] = []
    cross: list[int] = []
    while True:  # one step per hop between chains: not per event
        j = int(origin[v])
        run = by_chain[chain_pos[j] : chain_pos[v] + 1]
        runs.append(run)
        chain_in.append(run[1:])
        e = int(best[j])
        if e == -1:
            break
        if e == -2:
            chain_in.append(np.array([j], dtype=np.int64))
            v = int(g.chain_pred[j])
        else:
            cross.append(e)
            v = int(g.edge_src[e])
    nodes = np.concatenate(runs[::-1])
    return nodes, np.concatenate(chain_in), np.asarray(cross[::-1], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class _PathTotals:
    """What a path's edges add up to (`_path_edges`), exact int64 sums of their weights.

    Attributes:
        part_ns: per `BREAKDOWN_KEYS` part.
        op_ns: per name id (`Trace.names`) of the op each edge's time goes to.
        module_ns: per module (`LaunchTree.module_paths`) of the GPU edges' activities.
    """

    part_ns: I64
    op_ns: I64
    module_ns: I64

    @staticmethod
    def of(
        trace: Trace, tree: LaunchTree, parts: Ints, op_row: I64, module: Ints, weight: I64
    ) -> _PathTotals:
        """The totals of edges with these parts, op rows (`NO_ID`: none), modules and weights.

        The ops and modules of edges of weight 0 (or less) count nothing.
        """
        has = weight > 0
        op = (op_row >= 0) & has
        mod = (module >= 0) & has
        return _PathTotals(
            _sums(parts, weight, len(BREAKDOWN_KEYS)),
            _sums(trace.name_id[op_row[op]], weight[op], len(trace.names)),
            _sums(module[mod], weight[mod], len(tree.module_paths)),
        )


def _sums(keys: Ints, weights: I64, n: int) -> I64:
    """Exact int64 sums of `weights` per key in `range(n)`."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, keys, weights)
    return out


def _path_edges(
    trace: Trace,
    tree: LaunchTree,
    g: DependencyGraph,
    nodes: I64,
    how: I64,
    classes: KernelClasses | None,
    keep: bool = True,
) -> tuple[PathEdges | None, _PathTotals]:
    """The path's edges in time order (None without `keep`), and what they add up to.

    `nodes` and `how` are `_path`'s: each node but the first is entered by one edge, and the
    nodes ascend, so the edges come in order of their destination without a sort.

    Each edge's time goes to a breakdown part and an op (`_PathTotals`); a GPU edge's (the
    activity's time, its gap, its launch delay) also to the launch tree's innermost module
    path of the activity.

    A path that begins with host time before its first node (`DependencyGraph.lead_ns`)
    begins with a `dependency` edge from that node to itself, of that weight.
    """
    k = np.flatnonzero(g.lead_nodes == nodes[0])  # the lead of the path's first node, if any
    lead = k.shape[0] > 0
    if not lead:
        nodes, how = nodes[1:], how[1:]
    if (fast := c_paths()) is not None and (
        found := _path_edges_c(
            fast, trace, tree, g, nodes, how, classes, k[0] if lead else None, keep
        )
    ) is not None:
        return found
    # Node-sized arrays (millions of entries) are made once each and freed when used.
    dst = nodes.astype(np.int32)
    src, etype, weight = g.chain_pred[dst], g.chain_type[dst], g.chain_weight_ns[dst]
    cross = np.flatnonzero(how >= 0)
    if cross.shape[0]:
        e = how[cross]
        src[cross], etype[cross], weight[cross] = g.edge_src[e], g.edge_type[e], g.edge_weight_ns[e]
        del e
    begin = np.flatnonzero(how == -1)  # where the path starts: the lead's edge, if any
    del how, cross
    src[begin], etype[begin] = dst[begin], DEPENDENCY
    if lead:
        weight[0] = g.lead_ns[k[0]]
    parts = _PART[etype].astype(np.int8)
    is_gpu = np.flatnonzero(etype == GPU)
    parts[is_gpu] = _edge_parts(trace, g, classes, dst[is_gpu])
    del is_gpu
    start_src, start_dst = g.node_start[src], g.node_start[dst]

    # Which op each edge's time belongs to: a host edge's, that of the event it is inside.
    h = np.flatnonzero((etype == HOST) | (etype == DEPENDENCY) | (etype == BLOCKING))
    ev_src = g.node_event[src[h]]
    parent_src = g.event_parent[ev_src]
    attributed = np.where(
        start_src[h],
        ev_src,
        np.where(
            ~start_dst[h], g.node_event[dst[h]], np.where(parent_src >= 0, parent_src, ev_src)
        ),
    )
    del ev_src, parent_src
    op_row = np.full(src.shape[0], NO_ID, dtype=np.int64)
    op_row[h] = g.event_row[_enclosing_op(trace, g, attributed)]
    del attributed, h
    # Host work between ops (or before the first): the annotation or Python frame it ran in.
    dep = np.flatnonzero(etype == DEPENDENCY)
    span = g.span_rows_of(dst[dep])
    if lead:
        span[0] = g.lead_span_row[k[0]]  # the lead's edge: the first, a dependency edge
    op_row[dep[span >= 0]] = span[span >= 0]
    del dep, span
    k = np.flatnonzero((etype == GPU) | (etype == KERNEL_GAP) | (etype == LAUNCH_DELAY))
    krow = g.rows_of(dst[k])
    at = np.minimum(np.searchsorted(tree.row, krow), max(len(tree) - 1, 0))
    inner = tree.inner_op[at] if len(tree) else np.full(k.shape[0], NO_ID, dtype=np.int64)
    op_row[k] = np.where((tree.row[at] == krow) & (inner >= 0), inner, krow) if len(tree) else krow
    module = np.full(src.shape[0], NO_ID, dtype=np.int32)
    if len(tree):
        module[k] = np.where(tree.row[at] == krow, tree.module[at], NO_ID)
    del k, krow, at, inner
    totals = _PathTotals.of(trace, tree, parts, op_row, module, weight)
    del op_row, module
    if not keep:
        return None, totals
    edges = PathEdges(
        src_row=g.rows_of(src),
        dst_row=g.rows_of(dst),
        src_start=start_src,
        dst_start=start_dst,
        edge_type=etype,
        weight_ns=weight,
        part=parts,
        src_ns=g.node_ns[src],
    )
    return edges, totals


def _path_edges_c(
    fast: Any,
    trace: Trace,
    tree: LaunchTree,
    g: DependencyGraph,
    nodes: I64,
    how: I64,
    classes: KernelClasses | None,
    lead: int | None,
    keep: bool,
) -> tuple[PathEdges | None, _PathTotals] | None:
    """`_path_edges` in one C pass (`_paths.path_edges`) over the path's nodes.

    `nodes` and `how` lack the path's first node where it has no lead (`lead`: the index of
    its lead among the graph's, else None), as in `_path_edges`. Without `keep`, the totals
    alone (no array per edge made). None where the pass declines (an index outside its
    array): the numpy version decides.
    """
    n = nodes.shape[0] if keep else 0
    out = (
        np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.bool_),
        np.empty(n, np.bool_), np.empty(n, np.int8), np.empty(n, np.int64),
        np.empty(n, np.int8), np.empty(n, np.int64), np.empty(n, np.int64),
        np.empty(n, np.int32),
    )  # fmt: skip
    src_row, dst_row, src_start, dst_start, etype, weight, part, src_ns, _, _ = out
    if classes is not None and len(classes):
        class_row = np.ascontiguousarray(classes.row, dtype=np.int64)
        class_comm = flags(classes.category == _COMM_CATEGORY)
    else:
        class_row, class_comm = np.zeros(0, np.int64), np.zeros(0, np.uint8)
    ins = (
        np.ascontiguousarray(nodes, dtype=np.int64), np.ascontiguousarray(how, dtype=np.int64),
        np.ascontiguousarray(g.chain_pred, dtype=np.int32),
        np.ascontiguousarray(g.chain_type, dtype=np.int8),
        np.ascontiguousarray(g.chain_weight_ns, dtype=np.int64),
        np.ascontiguousarray(g.edge_src, dtype=np.int64),
        np.ascontiguousarray(g.edge_type, dtype=np.int8),
        np.ascontiguousarray(g.edge_weight_ns, dtype=np.int64), flags(g.node_start),
        np.ascontiguousarray(g.node_event, dtype=np.int32),
        np.ascontiguousarray(g.node_ns, dtype=np.int64),
        np.ascontiguousarray(g.event_row, dtype=np.int32),
        np.ascontiguousarray(g.event_parent, dtype=np.int32),
        np.ascontiguousarray(trace.kind, dtype=np.int8), _PART.astype(np.int8),
        class_row, class_comm,
        np.ascontiguousarray(g.span_nodes, dtype=np.int32),
        np.ascontiguousarray(g.span_rows, dtype=np.int32),
        np.ascontiguousarray(tree.row, dtype=np.int64),
        np.ascontiguousarray(tree.inner_op, dtype=np.int64),
        np.ascontiguousarray(tree.module, dtype=np.int32),
        np.ascontiguousarray(trace.name_id, dtype=np.int32),
    )  # fmt: skip
    consts = (
        int(lead is not None),
        int(g.lead_ns[lead]) if lead is not None else 0,
        int(g.lead_span_row[lead]) if lead is not None else NO_ID,
        g.n_host,
        int(EventKind.CPU_OP), int(EventKind.KERNEL), int(EventKind.MEMCPY),
        int(EventKind.MEMSET),
        HOST, DEPENDENCY, BLOCKING, GPU, KERNEL_GAP, LAUNCH_DELAY,
        _COMPUTE_B, _MEMORY_B, _COMM_B,
    )  # fmt: skip
    outs = tuple(a.view(np.uint8) if a.dtype == np.bool_ else a for a in out)
    totals = _PathTotals(
        np.zeros(len(BREAKDOWN_KEYS), np.int64),
        np.zeros(len(trace.names), np.int64),
        np.zeros(len(tree.module_paths), np.int64),
    )
    sums = (totals.part_ns, totals.op_ns, totals.module_ns)
    if not fast.path_edges(ins, outs, consts, sums):
        return None
    if not keep:
        return None, totals
    edges = PathEdges(
        src_row=src_row,
        dst_row=dst_row,
        src_start=src_start,
        dst_start=dst_start,
        edge_type=etype,
        weight_ns=weight,
        part=part,
        src_ns=src_ns,
    )
    return edges, totals


def _enclosing_op(trace: Trace, g: DependencyGraph, events: I64) -> I64:
    """Each host event itself where it is an op, else its nearest op ancestor, else itself."""
    kind = trace.kind[g.event_row[: g.n_host]]
    is_op = kind == EventKind.CPU_OP
    out = events.copy()
    cur = events.copy()
    todo = np.flatnonzero(~is_op[cur])
    while todo.size:
        up = g.event_parent[cur[todo]]
        todo = todo[up >= 0]
        cur[todo] = up[up >= 0]
        hit = is_op[cur[todo]]
        out[todo[hit]] = cur[todo[hit]]
        todo = todo[~hit]
    return out


#: The name under which every `ProfilerStep#N` op's own time on the path is listed.
STEP_OP = "ProfilerStep#* (host time in the step outside any op)"


def _top_ops(trace: Trace, ns: I64) -> list[tuple[str, int]]:
    """(op name, time) of the path's ops, largest first, ties by name.

    `ns`: per name id (`_PathTotals.op_ns`). The steps' own annotations (`ProfilerStep#N`)
    count as one entry, `STEP_OP`: their time is the host's outside any op (Python, the
    training loop), one figure for the whole path.
    """
    ids = np.flatnonzero(ns > 0)
    totals: dict[str, int] = {}
    for i in ids.tolist():
        name = trace.names[i]
        key = STEP_OP if profiler_step_number(name) is not None else name
        totals[key] = totals.get(key, 0) + int(ns[i])
    return sorted(totals.items(), key=lambda p: (-p[1], p[0]))


def _top_modules(tree: LaunchTree, ns: I64) -> list[tuple[str, int]]:
    """(module path, GPU-side time on the path), largest first (`_PathTotals.module_ns`)."""
    pairs = [(tree.module_paths[i], int(ns[i])) for i in np.flatnonzero(ns > 0).tolist()]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


def _owner_lengths(g: DependencyGraph, owner: npt.NDArray[np.int32], length: I64) -> None:
    """`length[o]`: the longest path of owner o's own graph (`_paths.c` owner_lengths).

    Its nodes are those whose event `owner` gives to o; its edges those between two of them.
    """
    node_owner = owner[g.node_event]
    chain_ok = node_owner[np.maximum(g.chain_pred, 0)] == node_owner
    chain_ok &= (g.chain_type != NO_EDGE) & (node_owner >= 0)
    edge_ok = (node_owner[g.edge_src] == node_owner[g.edge_dst]) & (node_owner[g.edge_dst] >= 0)
    dist = _lengths(g, chain_ok, edge_ok)
    # Max per owner: nodes come in time order, so owners come in runs; one max per run.
    cut = np.flatnonzero(np.diff(node_owner)) + 1
    first = np.concatenate([np.zeros(1, dtype=np.int64), cut])
    run_max = np.maximum.reduceat(dist, first)
    run_owner = node_owner[first]
    has = run_owner >= 0
    np.maximum.at(length, run_owner[has], run_max[has])


def _step_lengths(
    trace: Trace, tree: LaunchTree, g: DependencyGraph, analysis: DeviceAnalysis
) -> list[tuple[str, int]]:
    """Length of each step's own critical path: its host events and the GPU work they launched."""
    steps = analysis.steps
    if not steps or len(g) == 0:
        return [(s.name, 0) for s in steps]
    spans = _cpu_spans(trace, analysis)
    if spans is not None:  # a host event belongs to the host span it starts in
        start, end = spans
    else:
        start = np.asarray([s.start_ns for s in steps], dtype=np.int64)
        end = start + np.asarray([s.dur_ns for s in steps], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    # A host event belongs to the step it starts in; a GPU activity to its launch call's.
    owner = np.empty(g.event_row.shape[0], dtype=np.int32)
    if not _use_c() or not c_paths().step_owner(
        np.ascontiguousarray(g.event_row, dtype=np.int32),
        np.ascontiguousarray(trace.ts_ns, dtype=np.int64),
        g.n_host,
        np.ascontiguousarray(tree.row, dtype=np.int64),
        np.ascontiguousarray(tree.launch_row, dtype=np.int64),
        np.ascontiguousarray(start, dtype=np.int64),
        np.ascontiguousarray(end, dtype=np.int64),
        owner,
    ):
        owner = _step_owner(trace, tree, g, start, end)
    length = np.zeros(len(steps), dtype=np.int64)
    if _use_c():  # each step's own graph in one pass, no node-sized masks
        c_paths().owner_lengths(
            np.ascontiguousarray(g.chain_pred, dtype=np.int32),
            np.ascontiguousarray(g.chain_weight_ns, dtype=np.int64),
            np.ascontiguousarray(g.chain_type, dtype=np.int8),
            np.ascontiguousarray(g.lead_nodes, dtype=np.int64),
            np.ascontiguousarray(g.lead_ns, dtype=np.int64),
            np.ascontiguousarray(g.edge_src, dtype=np.int64),
            np.ascontiguousarray(g.edge_dst, dtype=np.int64),
            np.ascontiguousarray(g.edge_weight_ns, dtype=np.int64),
            flags(g.edge_type == EVENT_WAIT),
            np.ascontiguousarray(g.node_event, dtype=np.int32),
            owner,
            np.empty(len(g), dtype=np.int64),
            length,
        )
    else:
        _owner_lengths(g, owner, length)
    by_input = np.empty(len(steps), dtype=np.int64)
    by_input[order] = length
    return [(s.name, int(by_input[i])) for i, s in enumerate(steps)]


def _step_owner(trace: Trace, tree: LaunchTree, g: DependencyGraph, start: I64, end: I64) -> I32:
    """The step each event of `g` belongs to (numpy; `_paths.step_owner` in C).

    A host event's is the step its start falls in, a GPU activity's its launch call's: an
    index into `start` / `end` (by start), `NO_ID` where the time falls in no step.
    """
    at_ns = trace.ts_ns[g.event_row]
    if len(tree):  # GPU activities: the events after the host's
        rows = g.event_row[g.n_host :]
        at = np.minimum(np.searchsorted(tree.row, rows), len(tree) - 1)
        launch = np.where(tree.row[at] == rows, tree.launch_row[at], NO_ID)
        gpu_ns = at_ns[g.n_host :]
        gpu_ns[launch >= 0] = trace.ts_ns[launch[launch >= 0]]
        del rows, at, launch, gpu_ns
    k = np.searchsorted(start, at_ns, side="right") - 1
    # int32: a step index per node (millions of nodes, thousands of steps).
    owner: I32 = np.where((k >= 0) & (at_ns < end[np.maximum(k, 0)]), k, NO_ID).astype(np.int32)
    return owner


@dataclass(frozen=True, eq=False)
class GraphChange:
    """What a fix would shrink, as edges of the dependency graph (a finding's what-if).

    Attributes:
        gpu_rows: GPU activities (Trace rows) whose duration scales by `gpu_scale`.
        gpu_scale: one factor, or one per row of `gpu_rows` (0: the activity takes no time,
            or leaves the path, as fully overlapped communication would).
        host_rows: host spans (ops, annotations) whose time scales by `host_scale`: every
            host edge that lies within one of them on its thread.
        host_scale: the factor for those host edges.
        all_host: every host edge, except those within `keep_host_rows`, scales by
            `host_scale` (the host never makes the GPU wait, as with a CUDA graph replay).
        keep_host_rows: host events whose time `all_host` keeps.
        unblock_rows: host calls that no longer wait for the GPU: their sync edges go.
        no_launch_delay: launch delays become zero.
    """

    gpu_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    gpu_scale: float | npt.NDArray[np.float64] = 0.0
    host_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    host_scale: float = 0.0
    all_host: bool = False
    keep_host_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    unblock_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    no_launch_delay: bool = False


def what_if(trace: Trace, cp: CriticalPath, change: GraphChange) -> int | None:
    """The critical path's length after `change`; None for a compact path (no graph).

    The saving along dependencies is `cp.length_ns - what_if(trace, cp, change)`: unlike a
    timeline what-if, time taken off one chain only counts where that chain bounds the path,
    and work that waits on other work (a kernel on its launch, the host on a sync) moves
    with it.

    Example:
        >>> gone = GraphChange(host_rows=loader_rows)  # doctest: +SKIP
        >>> cp.length_ns - what_if(trace, cp, gone)  # doctest: +SKIP
        29927000
    """
    if cp.graph is None:
        return None
    return _what_if_in(trace, cp.graph, cp._spans, cp._what_if_base, change)


def _what_if_in(
    trace: Trace,
    g: DependencyGraph,
    span_cache: SpanCache,
    base: WhatIfBase,
    change: GraphChange,
) -> int:
    """`what_if` in the graph `g`, with the caches of its what-ifs, filled on first use.

    The caches are a path's `CriticalPath._spans` and `CriticalPath._what_if_base`; one
    thread at a time uses them.
    """
    if len(g) == 0:
        return 0
    if "chain_ok" not in base:  # what every what-if of this path starts from, made once
        # A stream runs its activities in order whatever the host does: where the measured
        # graph replaced the stream's own order by a launch delay (its queue was empty), the
        # what-if keeps the order too, at no weight (HTA's graph, for measured times, need not).
        gpu_start = g.node_start & (g.node_event >= g.n_host) & (g.chain_pred >= 0)
        base["chain_ok"] = (g.chain_type != NO_EDGE) | gpu_start
        # Node indices, int32 like the graph's own: millions of them, held with the path.
        base["gpu"] = np.flatnonzero(g.chain_type == GPU).astype(np.int32)
        base["host_edges"] = np.asarray(int(np.count_nonzero(_host_edge_mask(g))))
    chain_ok = base["chain_ok"]
    n_host_edges = int(base["host_edges"])
    host_change = n_host_edges > 0 and bool(change.host_rows.shape[0] or change.all_host)
    if host_change:  # first: its node-sized arrays are gone before the weights are copied
        spans = change.keep_host_rows if change.all_host else change.host_rows
        key = np.asarray(spans, dtype=np.int64).tobytes()
        if key not in span_cache:
            span_cache.clear()  # one set of spans kept: the findings ask for one or two
            span_cache[key] = _span_weights(trace, g, spans)
    edge_ok = np.ones(g.edge_src.shape[0], dtype=np.bool_)
    # The chain weights: a copy of the graph's, changed in place (0 where no chain edge:
    # `build_graph`); with C, unless every host edge changes, the changed edges' new weights
    # alone, which go into the graph's `_Solver`'s.
    solver = _solver_of(g, base) if _use_c() else None
    changed: list[tuple[Ints, I64]] = []
    dense = solver is None or (host_change and change.all_host)
    chain_w = g.chain_weight_ns.copy() if dense else None
    edge_w = g.edge_weight_ns  # the graph's own unless launch delays go (not changed in place)
    lead = g.lead_ns.copy()
    if change.gpu_rows.shape[0]:
        rows = np.asarray(change.gpu_rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        scale = np.broadcast_to(np.asarray(change.gpu_scale, dtype=np.float64), order.shape)
        scale = scale[order]
        gpu = base["gpu"]
        gpu_row = g.rows_of(gpu)
        at = np.minimum(np.searchsorted(rows, gpu_row), rows.shape[0] - 1)
        hit = rows[at] == gpu_row
        del gpu_row
        v = gpu[hit]
        new_w = np.round(g.chain_weight_ns[v] * scale[at[hit]]).astype(np.int64)
        if chain_w is None:
            changed.append((v, new_w))
        else:
            chain_w[v] = new_w
        del new_w
    if host_change:
        # The host edges with time inside the spans (the cache's); with `all_host` the others
        # too, all of whose time is outside them.
        host_edge, edges_in, leads_in = span_cache[key]
        if chain_w is None:  # those edges' new weights alone (host and GPU edges are apart)
            new_w = g.chain_weight_ns[host_edge]
            at_edge = np.arange(host_edge.shape[0], dtype=np.int32)
            c_paths().shrink(at_edge, edges_in, new_w, change.host_scale, False)
            changed.append((host_edge, new_w))
            del new_w, at_edge
        else:
            if change.all_host:
                _scale_outside(g, host_edge, chain_w, change.host_scale)
            if _use_c():  # one pass in place, the same weights
                c_paths().shrink(host_edge, edges_in, chain_w, change.host_scale, change.all_host)
            else:
                for a in range(0, host_edge.shape[0], _SHRINK_BLOCK):  # a block at a time: no
                    edges = host_edge[a : a + _SHRINK_BLOCK]  # copies of all host edges at once
                    chain_w[edges] = _shrunk(
                        change, edges_in[a : a + _SHRINK_BLOCK], chain_w[edges]
                    )
        lead = _shrunk(change, leads_in, lead)
    if change.unblock_rows.shape[0]:
        # The sync edges into the calls' end nodes go: found from the sync edges (thousands),
        # through a mask of the trace's rows, not from a node-sized mask.
        sync = np.flatnonzero(g.edge_type == SYNC)
        dst = g.edge_dst[sync]
        ev = g.node_event[dst]
        unblocked = np.zeros(len(trace), dtype=np.bool_)
        unblocked[change.unblock_rows] = True
        call_end = ~g.node_start[dst] & (ev < g.n_host) & unblocked[g.event_row[ev]]
        edge_ok[sync[call_end]] = False
    if change.no_launch_delay:
        edge_w = np.where(g.edge_type == LAUNCH_DELAY, 0, edge_w)
    if solver is not None:  # the graph's solver (the path's, where it was found first)
        if "solver_chain_ok" not in base:
            base["solver_chain_ok"] = chain_ok[solver.kept]
        w = solver.weights(chain_w) if chain_w is not None else solver.changed(g, changed)
        if w is not None:
            return solver.length(base["solver_chain_ok"], edge_ok, w, edge_w, lead)
        if chain_w is None:  # a contracted edge's weight went negative: the whole graph
            chain_w = g.chain_weight_ns.copy()
            for nodes, new_w in changed:
                chain_w[nodes] = new_w
    assert chain_w is not None
    return int(_lengths(g, chain_ok, edge_ok, chain_w, edge_w, lead, scratch=True).max())


def _host_edge_mask(g: DependencyGraph) -> Bools:
    """Per node: whether a host chain edge (host work or a dependency) enters it."""
    host: Bools = (g.chain_type == HOST) | (g.chain_type == DEPENDENCY)
    return host


def _span_weights(
    trace: Trace, g: DependencyGraph, spans: Ints
) -> tuple[npt.NDArray[np.int32], I64, I64]:
    """What-ifs' cache entry for `spans` (`SpanCache`): host edge nodes, time inside, leads'.

    Only the host edges with time inside the spans: the others lie outside them (a what-if
    that scales the time inside keeps their weight; one that scales the rest, all of it).
    """
    at_node, at_start = _span_time(trace, g, np.asarray(spans, dtype=np.int64))
    leads_in = at_node[g.lead_nodes] - at_start[g.chains_of(g.lead_nodes)]
    del at_start
    # Each host edge's time inside: its node's value less its source's, written over its
    # node's value, the last node first: a source precedes its node, so every source is read
    # before its own value is overwritten (in C one pass, in numpy a block of nodes at a time:
    # no arrays of all edges).
    mask = _host_edge_mask(g)
    if _use_c():
        c_paths().edge_time(flags(mask), np.ascontiguousarray(g.chain_pred, np.int32), at_node)
    else:
        step = _SPAN_BLOCK_NODES
        for a in range((mask.shape[0] - 1) // step * step, -1, -step):
            v = np.flatnonzero(mask[a : a + step])
            v += a
            at_node[v] -= at_node[g.chain_pred[v]]
    mask &= at_node != 0
    inside = np.flatnonzero(mask)
    del mask
    return inside.astype(np.int32), at_node[inside], leads_in


def _scale_outside(
    g: DependencyGraph, inside: npt.NDArray[np.int32], chain_w: I64, scale: float
) -> None:
    """Scale in place the weight of every host edge but those of `inside` (all outside).

    As `_shrunk` with `all_host` scales an edge without time inside the spans: its whole
    weight, rounded half to even. In C one pass in place; in numpy a block of nodes at a time
    (no node-sized temporaries).
    """
    mask = _host_edge_mask(g)
    mask[inside] = False
    if _use_c():
        c_paths().scale_masked(flags(mask), chain_w, scale)
        return
    for a in range(0, mask.shape[0], _SPAN_BLOCK_NODES):
        at = np.flatnonzero(mask[a : a + _SPAN_BLOCK_NODES])
        at += a
        chain_w[at] = np.round(np.multiply(chain_w[at], scale)).astype(np.int64)


def _shrunk(change: GraphChange, inside: I64, w: I64) -> I64:
    """New weights of host edges of weight `w`, `inside` of them within the change's spans.

    `w` is the caller's copy: it is overwritten. The part inside scales by `host_scale`
    (with `all_host`: the part outside them).
    """
    inside = np.minimum(inside, w)  # a new array: the cached `inside` stays as it was
    np.maximum(inside, 0, out=inside)
    if change.all_host:
        moved, kept = np.subtract(w, inside, out=w), inside  # `w` is the caller's copy
    else:
        moved, kept = inside, np.subtract(w, inside, out=w)
    if change.host_scale == 0:
        return kept
    scaled = np.multiply(moved, change.host_scale)  # float64, rounded in place
    kept += np.round(scaled, out=scaled).astype(np.int64)
    return kept


def _span_time(trace: Trace, g: DependencyGraph, rows: I64) -> tuple[I64, I64]:
    """Time the spans of `rows` cover on each host node's thread before the node's time.

    Also per chain, before the window's start. By time, not by nesting in the graph: the
    spans may be annotations (a DataLoader's `__next__` is a user annotation in newer
    traces), which are no events of the graph, and a host edge may run from before a span
    into it; the time of an edge inside the spans is the difference of its nodes' values.
    """
    n_chains = int(g.event_chain.max()) + 1 if len(g) else 0
    at_node = np.zeros(len(g), dtype=np.int64)
    at_start = np.zeros(n_chains, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    if rows.shape[0] == 0 or len(g) == 0:
        return at_node, at_start
    # A host chain is a thread: one of its events stands for its (pid, tid). Each chain's
    # first node is at its first event's start (the host events come first, by thread).
    is_host = g.node_event < g.n_host
    firsts = np.flatnonzero(is_host & (g.chain_pred < 0))
    del is_host
    chain_row = np.full(n_chains, NO_ID, dtype=np.int64)
    chain_row[g.chains_of(firsts)] = g.rows_of(firsts)
    host_chains = np.flatnonzero(chain_row >= 0)
    reps = chain_row[host_chains]
    keys = dense_pairs(
        np.concatenate([trace.pid[reps], trace.pid[rows]]),
        np.concatenate([trace.tid[reps], trace.tid[rows]]),
    )
    chain_of_key = np.full(int(keys.max()) + 1, NO_ID, dtype=np.int64)
    chain_of_key[keys[: reps.shape[0]]] = host_chains
    span_chain = chain_of_key[keys[reps.shape[0] :]]
    on = span_chain >= 0  # spans on threads without events in the window cover nothing here
    if not on.any():
        return at_node, at_start
    span_start = trace.ts_ns[rows[on]]
    starts, ends = _merged(span_chain[on], span_start, span_start + trace.dur_ns[rows[on]])
    with_spans = np.zeros(n_chains, dtype=np.bool_)
    with_spans[starts[0]] = True
    if _use_c():  # one walk of each chain's spans, the nodes in time order
        c_paths().span_cover(
            g.node_event, g.node_ns, g.event_chain, g.n_host, *starts, ends, at_node
        )
    else:  # millions of host nodes: a block at a time (a what-if's memory is its graph's)
        for a in range(0, len(g), _SPAN_BLOCK_NODES):
            b = min(a + _SPAN_BLOCK_NODES, len(g))
            chain = g.event_chain[g.node_event[a:b]]
            nodes = np.flatnonzero((g.node_event[a:b] < g.n_host) & with_spans[chain])
            at_node[a + nodes] = _coverage(starts, ends, chain[nodes], g.node_ns[a + nodes])
    start = np.full(host_chains.shape[0], g.start_ns, dtype=np.int64)
    at_start[host_chains] = _coverage(starts, ends, host_chains, start)
    return at_node, at_start
