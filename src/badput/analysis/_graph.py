"""The dependency graph of one GPU's window: numpy arrays of nodes and edges.

Private to `analysis.critical_path`, which states the rules (and docs/critical_path.md). Each
event of the graph (a host op or runtime call, a GPU activity) gives two nodes, its start and
its end. Every node lies on one *chain*: the host events of one thread in depth-first order
(starts and ends by time), or the GPU activities of one stream in stream order. Chain edges
join consecutive nodes of a chain; *cross* edges join chains (launches, synchronization,
event waits). Nodes are numbered in a topological order: by time, and at equal times GPU
ends, host ends (inner first), host starts (outer first), GPU starts, so that every edge of a
well-formed trace goes from a lower to a higher node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import (
    c_paths,
    dense_pairs,
    depths,
    flags,
    kind_then_id,
    nest,
    packed,
    settle_ties,
    sub_nesting,
    unique_inverse,
)
from badput.analysis.tree import LaunchTree
from badput.trace.model import NO_ID, EventKind, FlowPhase, SyncWaits, Trace

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
#: Integer arrays of any width (node indices are int32, times int64).
Ints = npt.NDArray[np.signedinteger[Any]]
Bools = npt.NDArray[np.bool_]

#: Edge types (`DependencyGraph.edge_type`); `EDGE_TYPES[k]` names type k.
(
    HOST,
    DEPENDENCY,
    BLOCKING,
    GPU,
    KERNEL_GAP,
    LAUNCH_DELAY,
    LAUNCH,
    SYNC,
    EVENT_WAIT,
) = range(9)
EDGE_TYPES = (
    "host",
    "dependency",
    "blocking",
    "gpu",
    "kernel_gap",
    "launch_delay",
    "launch",
    "sync",
    "event_wait",
)
#: Marks "no chain edge into this node" in `DependencyGraph.chain_type`.
NO_EDGE = -1

# The cuda_sync event names Kineto writes (libkineto CuptiActivity.cpp, `syncTypeString`).
STREAM_SYNC, CONTEXT_SYNC, EVENT_SYNC, STREAM_WAIT = (
    "Stream Sync",
    "Context Sync",
    "Event Sync",
    "Stream Wait Event",
)
_HOST_KINDS = (EventKind.CPU_OP, EventKind.RUNTIME, EventKind.DRIVER)
_RANK = np.full(256, 3, dtype=np.int8)
for _r, _k in enumerate(_HOST_KINDS):
    _RANK[int(_k)] = _r
_PYTHON_FIRST = np.ones(256, dtype=np.int8)  # host spans: a Python frame holds the rest
_PYTHON_FIRST[int(EventKind.PYTHON)] = 0
# Order of node classes at equal times (see the module docstring).
_GPU_END, _HOST_END, _HOST_START, _GPU_START = 0, 1, 2, 3


#: Which `cudaEventRecord` each event wait waited on: the reader's `Trace.sync_waits` (Kineto's
#: `wait_on_cuda_event_record_corr_id` / `wait_on_stream` args). Without them the graph pairs
#: each wait with the last `cudaEventRecord` on its thread and the stream of the last launch
#: before it, and says so.
EventWaits = SyncWaits


@dataclass(frozen=True, eq=False)
class DependencyGraph:
    """Nodes (event starts and ends) and edges of one window, in topological node order.

    Attributes:
        node_event: index into the events (`event_row`) of each node's event.
        node_start: True for an event's start node, False for its end node.
        node_ns: the node's time (GPU ends clipped where activities overlap on a stream).
        chain_pred: the previous node on the node's chain, `NO_ID` at a chain's first node.
        chain_type: type of the chain edge from `chain_pred`, `NO_EDGE` where there is none.
        chain_weight_ns: its weight (0 without one).
        span_nodes, span_rows: the `dependency` edges that annotations or Python frames on
            their thread cover (host work between ops): their nodes (ascending) and the Trace
            row of the innermost span at each one's end (else at its start). Those edges
            weigh the covered time; other dependency edges weigh 0 (`span_rows_of`).
        lead_nodes: host threads' first nodes (ascending) that annotations and Python
            frames cover time before, from the window's start (the host's work before its
            first event, such as the DataLoader call that opens the step).
        lead_ns: that time, per lead node: a path may begin there with it.
        lead_span_row: the innermost span at each lead node.
        start_ns: the window's start (host side).
        edge_src, edge_dst, edge_type, edge_weight_ns: the cross edges, by destination.
        event_row: the Trace row of each event (host events in open order, then GPU).
        event_chain: the chain of each event (host threads first, then streams).
        event_parent: index into the events of each host event's parent, `NO_ID` at a root
            (and for GPU activities).
        n_host: number of host events (the first `n_host` events).
        warnings: what the trace lacked for a complete graph.

    Millions of nodes: what a node's event tells (its row, its chain) is looked up through
    `node_event` (`rows_of`, `chains_of`), not held per node.
    """

    node_event: I32
    node_start: Bools
    node_ns: I64
    chain_pred: I32
    chain_type: I8
    chain_weight_ns: I64
    span_nodes: I32
    span_rows: I32
    lead_nodes: I64
    lead_ns: I64
    lead_span_row: I64
    start_ns: int
    edge_src: I64
    edge_dst: I64
    edge_type: I8
    edge_weight_ns: I64
    event_row: I32
    event_chain: I32
    event_parent: I32
    n_host: int
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        """Number of nodes."""
        return int(self.node_event.shape[0])

    def rows_of(self, nodes: Ints) -> I32:
        """The Trace row of each node's event."""
        rows: I32 = self.event_row[self.node_event[nodes]]
        return rows

    def chains_of(self, nodes: Ints) -> I32:
        """The chain of each node (host threads first, then streams)."""
        chains: I32 = self.event_chain[self.node_event[nodes]]
        return chains

    def span_rows_of(self, nodes: Ints) -> I32:
        """Per node, the span row of its chain edge (see `span_nodes`), `NO_ID` where none."""
        out = np.full(np.shape(nodes), NO_ID, dtype=np.int32)
        if self.span_nodes.shape[0] == 0:
            return out
        at = np.minimum(np.searchsorted(self.span_nodes, nodes), self.span_nodes.shape[0] - 1)
        hit = self.span_nodes[at] == nodes
        out[hit] = self.span_rows[at[hit]]
        return out

    @property
    def node_row(self) -> I32:
        """The Trace row of every node's event (made on each call: node-sized)."""
        return self.rows_of(slice(None))  # type: ignore[arg-type]

    @property
    def node_chain(self) -> I32:
        """The chain of every node (made on each call: node-sized)."""
        return self.chains_of(slice(None))  # type: ignore[arg-type]

    def all_edges(self) -> tuple[I64, I64, I8, I64]:
        """(src node, dst node, type, weight_ns) of every edge, chain edges first."""
        has = np.flatnonzero(self.chain_type != NO_EDGE)
        return (
            np.concatenate([self.chain_pred[has], self.edge_src]),
            np.concatenate([has.astype(np.int64), self.edge_dst]),
            np.concatenate([self.chain_type[has], self.edge_type]).astype(np.int8),
            np.concatenate([self.chain_weight_ns[has], self.edge_weight_ns]),
        )


def _last_at_or_before(key_a: I64, t_a: I64, key_q: I64, t_q: I64, *, after: bool = False) -> I64:
    """Per query, the index of the `a` with its key and the latest time <= the query's.

    With `after`, the `a` with the earliest time >= the query's instead. `NO_ID` where none.
    """
    out = np.full(key_q.shape[0], NO_ID, dtype=np.int64)
    if key_a.shape[0] == 0 or key_q.shape[0] == 0:
        return out
    fast = c_paths()  # where the `a` are sorted by (key, time): no sort
    if fast is not None and fast.last_at_or_before(*packed(key_a, t_a, key_q, t_q), after, out):
        return out
    times = np.concatenate([t_a, t_q])
    keys = np.concatenate([key_a, key_q]).astype(np.int64, copy=False)
    t_lo, k_lo = int(times.min()), int(keys.min())
    width = int(times.max()) - t_lo + 1
    if (int(keys.max()) - k_lo + 1) * width >= 1 << 62:  # dense ranks where the span is wide
        times = unique_inverse(times)[1]
        keys = unique_inverse(keys)[1]
        t_lo = k_lo = 0
        width = int(times.max()) + 1
    comb = (keys - k_lo) * width + (times - t_lo)
    ca, cq = comb[: key_a.shape[0]], comb[key_a.shape[0] :]
    order = np.argsort(ca, kind="stable")
    cs = ca[order]
    if after:
        i = np.searchsorted(cs, cq, side="left")
        ok = i < cs.shape[0]
    else:
        i = np.searchsorted(cs, cq, side="right") - 1
        ok = i >= 0
    hit = order[np.clip(i, 0, cs.shape[0] - 1)]
    ok &= ca[hit] // width == cq // width
    out[ok] = hit[ok]
    return out


def _order_key(t: I64, cls: Ints, sub: Ints, chain: Ints) -> I64 | None:
    """The node order's key: (time, class, depth key, chain) packed into one int64.

    None where the ranges do not fit 62 bits (they do for any window under ~18 hours of
    nanoseconds with a thousand chains): the order is then a four-key lexsort. A stable sort
    of the key (then input order) is the topological order, in a fraction of the lexsort.
    """
    if t.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    t0, s0 = int(t.min()), int(sub.min())
    t_bits = (int(t.max()) - t0).bit_length()
    s_bits = (int(sub.max()) - s0).bit_length()
    c_bits = int(chain.max()).bit_length()
    if t_bits + 2 + s_bits + c_bits > 62 or int(cls.max()) > 3 or int(chain.min()) < 0:
        return None
    key = t - t0
    key <<= 2
    key |= cls
    key <<= s_bits
    key |= sub - s0
    key <<= c_bits
    key |= chain
    return key


def _node_keys(
    fast: Any, t: I64, chain: npt.NDArray[np.int32], depth: npt.NDArray[np.int32]
) -> I64 | None:
    """`_order_key` of a graph's nodes in one C pass (`_paths.node_keys`), from their depths.

    Node ids as `build_graph` numbers them (host starts, GPU starts, host ends, GPU ends);
    `depth` per host event. None where the parts do not fit 62 bits (as `_order_key`).
    """
    if t.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    d_max = int(depth.max()) if depth.shape[0] else 0
    t0 = int(t.min())
    t_bits = (int(t.max()) - t0).bit_length()
    s_bits = (2 * d_max).bit_length()  # depth keys from -d_max to d_max
    c_bits = int(chain.max()).bit_length()
    if t_bits + 2 + s_bits + c_bits > 62 or int(chain.min()) < 0 or int(depth.min(initial=0)) < 0:
        return None
    key = np.empty(t.shape[0], dtype=np.int64)
    fast.node_keys(t, chain, depth, t0, s_bits, c_bits, key)
    return key


def _chain_pred(chain: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Per node, the node before it on its chain (`NO_ID` at a chain's first): chain edges."""
    pred = np.full(chain.shape[0], NO_ID, dtype=np.int32)
    if chain.shape[0] and (fast := c_paths()) is not None:
        fast.chain_pred(np.ascontiguousarray(chain, dtype=np.int32), pred)
        return pred
    by_chain = _stable_order(chain)
    if by_chain.shape[0] > 1:
        # Each node but a chain's first follows the one before it in chain order.
        same = chain[by_chain[1:]] == chain[by_chain[:-1]]
        pred[by_chain[1:]] = np.where(same, by_chain[:-1], NO_ID)
    return pred


def _chain_types(
    pred: npt.NDArray[np.int32],
    node_event: npt.NDArray[np.int32],
    node_start: npt.NDArray[np.bool_],
    node_ns: I64,
    root: npt.NDArray[np.bool_],
    blocking: npt.NDArray[np.bool_],
    empty_queue: npt.NDArray[np.bool_],
    n_host: int,
) -> tuple[I8, I64]:
    """Each node's chain edge type and weight (numpy; `_paths.chain_types` in C).

    A host node's edge is a dependency (a root event's start after a root event's end),
    blocking (a blocking call's end) or host work; a GPU node's is its activity (its end) or
    the gap before it (its start), none where the launch found the stream's queue empty. The
    weight is the time from the previous node, 0 where no edge is or the edge is blocking.
    """
    has = pred >= 0
    u = np.maximum(pred, 0)
    ev_v, ev_u = node_event, node_event[u]
    is_host_node = ev_v < n_host
    ctype = np.full(pred.shape[0], NO_EDGE, dtype=np.int8)
    weight = node_ns[u]  # then the time from the chain's previous node, in place
    np.subtract(node_ns, weight, out=weight)
    host_v = has & is_host_node
    dep = host_v & ~node_start[u] & root[ev_u] & node_start & root[ev_v]
    del ev_u
    blk = host_v & ~node_start & blocking[ev_v]
    ctype[host_v] = HOST
    ctype[dep] = DEPENDENCY
    ctype[blk] = BLOCKING
    del host_v, dep, blk
    gpu_v = has & ~is_host_node
    ctype[gpu_v & ~node_start] = GPU
    gap = gpu_v & node_start
    del gpu_v
    gap_cut = np.zeros(pred.shape[0], dtype=np.bool_)
    gap_nodes = np.flatnonzero(gap)  # GPU start nodes: their events are activities
    if gap_nodes.shape[0]:
        gap_cut[gap_nodes] = empty_queue[ev_v[gap_nodes] - n_host]
    ctype[gap & ~gap_cut] = KERNEL_GAP
    del gap, gap_cut
    weight[(ctype == BLOCKING) | (ctype == NO_EDGE)] = 0
    return ctype, weight


def _stable_order(small: Ints) -> I64:
    """Stable argsort of small non-negative ints (chain ids): radix sort on int16 where they fit."""
    if small.shape[0] and int(small.min()) >= 0 and int(small.max()) < 1 << 15:
        order: I64 = np.argsort(small.astype(np.int16), kind="stable").astype(np.int64, copy=False)
        return order
    fallback: I64 = np.argsort(small, kind="stable").astype(np.int64, copy=False)
    return fallback


@dataclass(frozen=True, eq=False)
class _HostSpans:
    """The host's annotations and Python frames with a length, nested once per graph.

    A graph asks about them per gap, twice (its dependency edges, then its lead time), and
    each ask looks up the innermost span twice: nesting the spans (millions of Python frames
    in a Python-heavy trace) once serves all four. Threads are dense keys of (pid, tid) in
    lexicographic order, over the spans' threads only: a gap on a thread without spans gets
    the key `n_threads`, which no span has.

    Attributes:
        rows: Trace rows of the spans, in open order (by thread, then start: `nest`).
        key: thread key of each span, in open order.
        start_ns, end_ns: each span's times, in open order.
        parent: the enclosing span of each (index into these arrays), `NO_ID` at a root.
        merged: the union of the spans per thread (`_merged`).
        thread_pid, thread_tid: (pid, tid) of each thread key.
    """

    rows: I64
    key: I64
    start_ns: I64
    end_ns: I64
    parent: I64
    merged: tuple[tuple[I64, I64], I64]
    thread_pid: I64
    thread_tid: I64

    @staticmethod
    def of(trace: Trace, tree: LaunchTree) -> _HostSpans | None:
        """The trace's spans; None where it has none.

        Nested as the launch tree nests them where they nest properly in it (`sub_nesting`),
        else anew with the tree's order at equal start and end (a Python frame before an
        annotation, then by row).
        """
        kind = trace.kind
        is_span = (
            ((kind == EventKind.ANNOTATION) | (kind == EventKind.PYTHON))
            & (trace.phase == FlowPhase.COMPLETE)
            & (trace.dur_ns > 0)
        )
        spans: I64 = np.flatnonzero(is_span).astype(np.int64, copy=False)
        if spans.shape[0] == 0:
            return None
        nested: tuple[I64, I64, I64, I64, I64] | None = None
        if tree.host_row.shape[0]:
            keep = is_span[tree.host_row]
            if int(keep.sum()) == spans.shape[0]:  # the tree holds every one of them
                rows = tree.host_row[keep]
                key = _threads_of(trace, tree, keep, rows)
                start, end = trace.spans_of(rows)
                found = sub_nesting(tree.host_parent, keep, key, start, end)
                if found is not None:
                    nested = rows, key, start, end, found[1]
        if nested is None:
            key = dense_pairs(trace.pid[spans], trace.tid[spans])
            start, end = trace.ts_ns[spans], trace.ts_ns[spans] + trace.dur_ns[spans]
            rank = kind_then_id(_PYTHON_FIRST, kind[spans], trace.external_id[spans])
            order, parent, key, start, end = nest(key, start, end, rank)
            nested = spans[order], key, start, end, parent
        rows, key, start, end, parent = nested
        merged = _merged(key, start, end)
        n_threads = int(key.max()) + 1
        thread_pid = np.zeros(n_threads, dtype=np.int64)
        thread_tid = np.zeros(n_threads, dtype=np.int64)
        thread_pid[key], thread_tid[key] = trace.pid[rows], trace.tid[rows]
        return _HostSpans(rows, key, start, end, parent, merged, thread_pid, thread_tid)

    def keys_of(self, trace: Trace, rows: I64) -> I64:
        """Thread key of each row's thread; `n_threads` where no span is on it."""
        n_threads = self.thread_pid.shape[0]
        both = dense_pairs(
            np.concatenate([self.thread_pid, trace.pid[rows]]),
            np.concatenate([self.thread_tid, trace.tid[rows]]),
        )
        key_of = np.full(int(both.max()) + 1, n_threads, dtype=np.int64)
        key_of[both[:n_threads]] = np.arange(n_threads)
        found: I64 = key_of[both[n_threads:]]
        return found


def _span_cover(
    spans: _HostSpans | None, trace: Trace, rows: I64, t_from: I64, t_to: I64
) -> tuple[I64, I64]:
    """Per gap `[t_from, t_to]` on the thread of `rows`: the time spans cover of it.

    Spans: annotations and Python frames (`_HostSpans`). Also the innermost span at the
    gap's end (else at its start), `NO_ID` where none is.
    """
    if spans is None or rows.shape[0] == 0:
        zero = np.zeros(rows.shape[0], dtype=np.int64)
        return zero, np.full(rows.shape[0], NO_ID, dtype=np.int64)
    q_key = spans.keys_of(trace, rows)
    starts, ends = spans.merged
    covered = _coverage(starts, ends, q_key, t_to) - _coverage(starts, ends, q_key, t_from)
    at_end = np.maximum(t_to - 1, t_from)
    named = _enclosing_span(spans, q_key, at_end, at_end)
    missing = named < 0
    named[missing] = _enclosing_span(spans, q_key[missing], t_from[missing], t_from[missing])
    return np.maximum(covered, 0), named


def _enclosing_span(spans: _HostSpans, q_key: I64, t_from: I64, t_to: I64) -> I64:
    """Per gap `[t_from, t_to]` on thread `q_key`, the innermost span (row) containing it.

    `NO_ID` where none contains the gap.
    """
    out = np.full(q_key.shape[0], NO_ID, dtype=np.int64)
    if q_key.shape[0] == 0:
        return out
    parent, s_end = spans.parent, spans.end_ns
    # The last span opened at or before the gap, then up its parents until one contains it.
    cand = _last_at_or_before(spans.key, spans.start_ns, q_key, t_from)
    todo = np.flatnonzero(cand >= 0)
    while todo.size:
        c = cand[todo]
        hit = s_end[c] >= t_to[todo]
        out[todo[hit]] = spans.rows[c[hit]]
        todo = todo[~hit]
        cand[todo] = parent[cand[todo]]
        todo = todo[cand[todo] >= 0]
    return out


def _merged(key: I64, start: I64, end: I64) -> tuple[tuple[I64, I64], I64]:
    """The union of the spans per key: ((key, start) of each merged span, its end)."""
    order = np.lexsort((start, key))
    key, start, end = key[order], start[order], end[order]
    lo = int(min(start.min(), end.min()))
    width = int(max(start.max(), end.max())) - lo + 1
    # Running maximum of the ends within each key (keys apart by more than any time).
    wide = key.astype(np.int64, copy=False) * width
    reach = np.maximum.accumulate((end - lo) + wide) - wide + lo
    new = np.ones(key.shape[0], dtype=np.bool_)
    new[1:] = (key[1:] != key[:-1]) | (start[1:] > reach[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], key.shape[0]) - 1
    return (key[first], start[first]), reach[last]


def _coverage(starts: tuple[I64, I64], ends: I64, key: Ints, t: I64) -> I64:
    """Per (key, t): the time of that key's merged spans before t."""
    s_key, s_start = starts
    lengths = ends - s_start
    # Cumulative length of the key's earlier spans: a running sum restarted at each key.
    cum = np.cumsum(lengths) - lengths
    key_first = np.ones(s_key.shape[0], dtype=np.bool_)
    key_first[1:] = s_key[1:] != s_key[:-1]
    base = cum[np.maximum.accumulate(np.where(key_first, np.arange(s_key.shape[0]), 0))]
    before = cum - base
    if s_key.shape[0] and s_key[0] == s_key[-1]:  # one thread's spans (the usual case)
        last = np.searchsorted(s_start, t, side="right") - 1
        if key.shape[0] and not (int(key.min()) == int(key.max()) == int(s_key[0])):
            last = np.where(key == s_key[0], last, NO_ID)
    else:
        last = _last_at_or_before(s_key, s_start, key, t)
    found = last >= 0
    at = np.maximum(last, 0)
    inside = np.clip(t - s_start[at], 0, lengths[at])
    result: I64 = np.where(found, before[at] + inside, 0)
    return result


def _by_correlation(trace: Trace, rows: I64, wanted: I64) -> I64:
    """Per wanted correlation id, the row of `rows` with it, `NO_ID` where none."""
    out = np.full(wanted.shape[0], NO_ID, dtype=np.int64)
    if rows.shape[0] == 0:
        return out
    corr = trace.correlation[rows]
    order = np.argsort(corr, kind="stable")
    sc = corr[order]
    i = np.minimum(np.searchsorted(sc, wanted), sc.shape[0] - 1)
    ok = (sc[i] == wanted) & (wanted != NO_ID)
    out[ok] = rows[order[i[ok]]]
    return out


def _threads_of(trace: Trace, tree: LaunchTree, keep: Bools, rows: I64) -> I64:
    """Dense thread ids of the tree's nodes `keep` selects (Trace rows `rows`), in order."""
    found = tree.host_threads(keep)
    return found if found is not None else dense_pairs(trace.pid[rows], trace.tid[rows])


def _host_nesting(
    trace: Trace, tree: LaunchTree, is_host: npt.NDArray[np.bool_], host: I64
) -> tuple[I64, I64, I64, I64, I64, I64]:
    """The graph's host events (`is_host`, rows `host`) in open order, nested per thread.

    Returns their rows in open order, each one's parent (`NO_ID` at a root), dense thread,
    start, end and depth. The launch tree nested every host event of the trace already; the
    graph's are a subset of them (no Python frames or annotations, a length, in the window),
    read off that forest by `sub_nesting` where they nest properly, and nested anew where
    not (the tree holds other events, or some overlap without nesting: `nest` repairs those
    by its own rule).
    """
    ts, dur = trace.ts_ns, trace.dur_ns
    if host.shape[0] and tree.host_row.shape[0]:
        nodes = tree.host_row
        keep = is_host[nodes]
        if int(keep.sum()) == host.shape[0]:  # the tree holds every one of them
            rows = nodes[keep]
            g = _threads_of(trace, tree, keep, rows)
            start, end = trace.spans_of(rows)
            found = sub_nesting(tree.host_parent, keep, g, start, end)
            if found is not None:
                _, parent, depth = found
                return rows, parent, g, start, end, depth
    thread_key = dense_pairs(trace.pid[host], trace.tid[host]) if host.shape[0] else host
    rank = kind_then_id(_RANK, trace.kind[host], trace.external_id[host])
    order, parent, g, start, end = nest(thread_key, ts[host], ts[host] + dur[host], rank)
    return host[order], parent, g, start, end, depths(parent)


def build_graph(
    trace: Trace,
    tree: LaunchTree,
    device: int,
    start_ns: int,
    end_ns: int,
    blocking_rows: I64 | Callable[[], I64],
    waits: EventWaits | None,
    between_ops: bool = True,
    spans_of: Callable[[], _HostSpans | None] | None = None,
) -> DependencyGraph:
    """The dependency graph of `device` over host events starting in `[start_ns, end_ns]`.

    Args:
        trace: the trace.
        tree: its launch tree.
        device: the GPU.
        start_ns: window start; host events that start in the window are in the graph (as
            HTA clips), and the GPU activities they launched (activities without a launch
            call: those that start in the window).
        end_ns: window end (inclusive).
        blocking_rows: host calls that waited for this GPU (`analysis.blocking`), or a call
            that gives them when asked (found on a helper thread while the nodes are built).
        waits: the record each wait waited on; the trace's own (`Trace.sync_waits`) if None.
        between_ops: host time between top-level events inside an annotation or Python frame
            weighs its gap (the training loop's own work); False: every dependency edge
            weighs 0, as HTA's graph has it.
        spans_of: gives the trace's annotations and Python frames (`_HostSpans.of`) when
            asked, as `blocking_rows` may; None finds them here.
    """
    warnings: list[str] = []
    if waits is None:
        waits = trace.sync_waits
    ts, dur, kind = trace.ts_ns, trace.dur_ns, trace.kind
    in_window = (ts >= start_ns) & (ts <= end_ns)
    is_host = np.zeros(len(trace), dtype=np.bool_)
    for k in _HOST_KINDS:
        is_host |= kind == int(k)
    is_host &= (trace.phase == FlowPhase.COMPLETE) & (dur > 0) & in_window
    host = np.flatnonzero(is_host).astype(np.int64, copy=False)

    # GPU activities: launched by a host event of the graph, else starting in the window.
    g_row, g_launch = tree.row, tree.launch_row
    launched = np.zeros(g_row.shape[0], dtype=np.bool_)
    launched[g_launch >= 0] = is_host[g_launch[g_launch >= 0]]
    keep = (trace.device[g_row] == device) & (dur[g_row] > 0)
    keep &= launched | ((g_launch < 0) & in_window[g_row])
    g_row, g_launch = g_row[keep], np.where(launched[keep], g_launch[keep], NO_ID)
    if host.shape[0] == 0:
        warnings.append("no host events in the window: the path is the GPU's alone")
    unlinked = int((g_launch < 0).sum())
    if unlinked and host.shape[0]:
        warnings.append(
            f"{unlinked} GPU activities have no launch call in the window (no correlation "
            "id or launch flow): no launch edges into them"
        )

    # Streams: order by (stream, start); an activity overlapping the next on its stream (a
    # trace fault) ends where the next begins, and one left without length is dropped.
    stream = trace.stream[g_row]
    order = np.lexsort((ts[g_row] + dur[g_row], ts[g_row], stream))
    g_row, g_launch, stream = g_row[order], g_launch[order], stream[order]
    g_start, g_end = ts[g_row], ts[g_row] + dur[g_row]
    # Activities tied on (stream, start, end): in an order of their content, not the file's.
    if (settled := settle_ties(trace, g_row, stream, g_start, g_end)) is not None:
        g_row, g_launch, stream = g_row[settled], g_launch[settled], stream[settled]
        g_start, g_end = g_start[settled], g_end[settled]
    same_next = np.zeros(g_row.shape[0], dtype=np.bool_)
    same_next[:-1] = stream[1:] == stream[:-1]
    nxt = np.append(g_start[1:], 0)
    clipped = same_next & (g_end > nxt)
    g_end = np.where(clipped, nxt, g_end)
    ok = g_end > g_start
    if int(clipped.sum()):
        warnings.append(
            f"{int(clipped.sum())} GPU activities overlap the next on their stream: each ends "
            "where the next begins"
        )
    g_row, g_launch, stream, g_start, g_end = (
        a[ok] for a in (g_row, g_launch, stream, g_start, g_end)
    )
    s_ids, s_dense = unique_inverse(stream)

    # Host nesting per thread: the launch tree's, where the graph's events nest properly in it.
    host, h_parent, h_thread, h_start, h_end, depth = _host_nesting(trace, tree, is_host, host)
    n_host, n_gpu = host.shape[0], g_row.shape[0]
    n_threads = int(h_thread.max()) + 1 if n_host else 0

    # Nodes: event e has start node e and end node E + e before sorting.
    n_ev = n_host + n_gpu
    ev_row = np.concatenate([host, g_row])
    host = ev_row[:n_host]  # the same rows: one array of millions held, not two
    ev_chain = np.concatenate([h_thread, n_threads + s_dense])
    del h_thread
    # Millions of nodes: node-sized arrays are int32 where they index (nodes, events, rows,
    # chains) and temporaries go as soon as they are used (issue 19's memory budget).
    t = np.concatenate([h_start, g_start, h_end, g_end])
    del h_start, h_end
    depth32 = depth.astype(np.int32)
    event_chain = ev_chain.astype(np.int32)
    chain = np.concatenate([event_chain, event_chain])
    del depth, ev_chain
    fast = c_paths() if n_ev else None
    # The order: by time, class, depth key, chain, then input order (one packed key, its
    # parts freed before the sort: millions of nodes).
    key = _node_keys(fast, t, chain, depth32) if fast is not None else None
    topo: I64 | None = None
    if key is None:  # numpy: the class and depth-key columns, then the same key
        cls = np.concatenate(
            [
                np.full(n_host, _HOST_START, dtype=np.int8),
                np.full(n_gpu, _GPU_START, dtype=np.int8),
                np.full(n_host, _HOST_END, dtype=np.int8),
                np.full(n_gpu, _GPU_END, dtype=np.int8),
            ]
        )
        zeros32 = np.zeros(n_gpu, np.int32)
        sub = np.concatenate([depth32, zeros32, -depth32, zeros32])
        del zeros32
        if (key := _order_key(t, cls, sub, chain)) is None:
            topo = np.lexsort((chain, sub, cls, t)).astype(np.int64, copy=False)
        del cls, sub
    del depth32
    if topo is None:
        assert key is not None
        topo = np.argsort(key, kind="stable").astype(np.int64, copy=False)
    del key
    pos = np.empty(2 * n_ev, dtype=np.int32)
    if fast is not None:  # one pass: the node arrays and the chain edges' sources
        node_event, pred = np.empty_like(pos), np.empty_like(pos)
        node_start = np.empty(2 * n_ev, dtype=np.bool_)
        node_ns = np.empty(2 * n_ev, dtype=np.int64)
        fast.graph_nodes(topo, t, chain, pos, node_event, flags(node_start), node_ns, pred)
        del t, chain, topo
    else:
        pos[topo] = np.arange(2 * n_ev, dtype=np.int32)
        node_event = (topo % n_ev if n_ev else topo).astype(np.int32)
        node_start = topo < n_ev
        node_ns, node_chain = t[topo], chain[topo]
        del t, chain, topo
        # Chain edges: consecutive nodes of a chain.
        pred = _chain_pred(node_chain)
        del node_chain
    start_node, end_node = pos[:n_ev], pos[n_ev:]
    parent_ev = np.full(n_ev, NO_ID, dtype=np.int32)
    parent_ev[:n_host] = h_parent
    del h_parent
    root = parent_ev < 0
    blocking = np.zeros(n_ev, dtype=np.bool_)

    # Launch edges, and stream order (a kernel gap, or a launch delay where the queue of the
    # stream was empty when the launch call began: HTA's rule).
    g_ev = n_host + np.arange(n_gpu)
    launch_ev = np.full(n_gpu, NO_ID, dtype=np.int64)
    ev_of_row = np.full(len(trace), NO_ID, dtype=np.int32)  # a row's event, or NO_ID
    ev_of_row[ev_row] = np.arange(n_ev, dtype=np.int32)
    has_launch = g_launch >= 0
    launch_ev[has_launch] = ev_of_row[g_launch[has_launch]]  # host rows of the graph
    prev_same = np.zeros(n_gpu, dtype=np.bool_)
    prev_same[1:] = s_dense[1:] == s_dense[:-1]
    prev_end = np.append(np.int64(0), g_end[:-1])
    launch_ts = np.where(has_launch, ts[np.maximum(g_launch, 0)], 0)
    empty_queue = has_launch & (~prev_same | (prev_end < launch_ts))
    src: list[I64] = []
    dst: list[I64] = []
    etype: list[I8] = []
    ew: list[I64] = []
    if has_launch.any():
        lk = np.flatnonzero(has_launch)
        src.append(start_node[launch_ev[lk]])
        dst.append(start_node[g_ev[lk]])
        etype.append(np.where(empty_queue[lk], LAUNCH_DELAY, LAUNCH).astype(np.int8))
        ew.append(np.where(empty_queue[lk], np.maximum(g_start[lk] - launch_ts[lk], 0), 0))

    # Synchronization: cuda_sync rows name the call and what it waited for.
    sync_rows = np.flatnonzero((kind == EventKind.SYNC) & (trace.device == device))
    host_kind = kind[host]
    is_call = (host_kind == EventKind.RUNTIME) | (host_kind == EventKind.DRIVER)
    call_events = np.flatnonzero(is_call)
    del host_kind, is_call
    calls = host[call_events]  # the runtime and driver calls (their events: `call_events`)
    g_key = np.where(has_launch, launch_ts, g_start)  # when each activity was queued
    g_thread = np.full(n_gpu, NO_ID, dtype=np.int64)
    g_thread[has_launch] = event_chain[launch_ev[has_launch]]  # a host event's chain: its thread

    def last_queued(streams: I64, at_ns: I64) -> I64:
        """GPU event of the last activity on each stream queued at or before `at_ns`."""
        found = _last_at_or_before(s_dense, g_key, streams, at_ns)
        return np.where(found >= 0, n_host + found, NO_ID)

    def add(s: I64, d: I64, kind_: int, w: I64 | None = None) -> None:
        okd = (s >= 0) & (d >= 0)
        if okd.any():
            src.append(s[okd])
            dst.append(d[okd])
            etype.append(np.full(int(okd.sum()), kind_, dtype=np.int8))
            ew.append(np.zeros(int(okd.sum()), np.int64) if w is None else w[okd])

    def stream_of(values: I64) -> I64:
        i = np.minimum(np.searchsorted(s_ids, values), max(s_ids.shape[0] - 1, 0))
        if s_ids.shape[0] == 0:
            return np.full(values.shape[0], NO_ID, dtype=np.int64)
        return np.where(s_ids[i] == values, i, NO_ID).astype(np.int64)

    names = trace.names
    sync_name = trace.name_id[sync_rows]
    covered = np.zeros(n_ev, dtype=np.bool_)

    def named(name: str) -> I64:
        nid = names.index(name) if name in names else -2
        picked: I64 = sync_rows[sync_name == nid].astype(np.int64)
        return picked

    def node_of(ev: I64, nodes: I64) -> I64:
        if nodes.shape[0] == 0:
            return np.full(ev.shape[0], NO_ID, dtype=np.int64)
        found: I64 = np.where(ev >= 0, nodes[np.maximum(ev, 0)], NO_ID)
        return found

    for name in (STREAM_SYNC, CONTEXT_SYNC):
        rows = named(name)
        call_row = _by_correlation(trace, calls, trace.correlation[rows])
        call_ev = np.where(call_row >= 0, ev_of_row[np.maximum(call_row, 0)], NO_ID)
        call_ts = ts[np.maximum(call_row, 0)]
        if name == STREAM_SYNC:
            per = [stream_of(trace.stream[rows])]
        else:
            per = [np.full(rows.shape[0], s, dtype=np.int64) for s in range(s_ids.shape[0])]
        for streams in per:
            gpu_ev = np.where(streams >= 0, last_queued(streams, call_ts), NO_ID)
            add(node_of(gpu_ev, end_node), node_of(call_ev, end_node), SYNC)
            # A call is covered once a sync row gave it an edge; one without (its stream
            # queued nothing yet) is left to the blocking-call timing below.
            covered[call_ev[(call_ev >= 0) & (gpu_ev >= 0)]] = True

    # Event waits: the last activity queued on the recorded stream before the record.
    records = host[trace.name_mask(lambda n: "EventRecord" in n)[trace.name_id[host]]]
    used_fallback = 0
    for name in (EVENT_SYNC, STREAM_WAIT):
        rows = named(name)
        if rows.shape[0] == 0:
            continue
        call_row = _by_correlation(trace, calls, trace.correlation[rows])
        call_ev = np.where(call_row >= 0, ev_of_row[np.maximum(call_row, 0)], NO_ID)
        rec_corr = np.full(rows.shape[0], NO_ID, dtype=np.int64)
        rec_stream = np.full(rows.shape[0], NO_ID, dtype=np.int64)
        if waits is not None:
            wi = np.searchsorted(waits.row, rows)
            wi_c = np.minimum(wi, max(waits.row.shape[0] - 1, 0))
            hit = (
                (wi < waits.row.shape[0]) & (waits.row[wi_c] == rows)
                if waits.row.shape[0]
                else wi < 0
            )
            rec_corr[hit] = waits.record_correlation[wi_c[hit]]
            rec_stream[hit] = waits.record_stream[wi_c[hit]]
        rec_row = _by_correlation(trace, records, rec_corr)
        # Without the args: the last record on the call's thread before it, on the stream
        # of the last activity that thread queued before the record.
        guess = (rec_row < 0) & (call_ev >= 0)
        if guess.any() and records.shape[0]:
            rec_thread = dense_pairs(
                np.concatenate([trace.pid[records], trace.pid[call_row[guess]]]),
                np.concatenate([trace.tid[records], trace.tid[call_row[guess]]]),
            )
            r_key, q_key = rec_thread[: records.shape[0]], rec_thread[records.shape[0] :]
            found = _last_at_or_before(r_key, ts[records], q_key, ts[call_row[guess]] - 1)
            rec_row[np.flatnonzero(guess)] = np.where(
                found >= 0, records[np.maximum(found, 0)], NO_ID
            )
            used_fallback += int((found >= 0).sum())
        need_stream = (rec_stream < 0) & (rec_row >= 0)
        if need_stream.any() and n_gpu:
            rr = rec_row[need_stream]
            rt = ev_of_row[rr]
            rthread = np.where(rt >= 0, event_chain[np.maximum(rt, 0)].astype(np.int64), NO_ID)
            last = _last_at_or_before(g_thread, g_key, rthread, ts[rr])
            rec_stream[need_stream] = np.where(
                last >= 0, s_ids[s_dense[np.maximum(last, 0)]], NO_ID
            )
        src_ev = last_queued(
            stream_of(rec_stream), np.where(rec_row >= 0, ts[np.maximum(rec_row, 0)], 0)
        )
        src_ev = np.where(rec_row >= 0, src_ev, NO_ID)
        src_node = node_of(src_ev, end_node)
        if name == EVENT_SYNC:
            add(src_node, node_of(call_ev, end_node), SYNC)
            # An Event Sync whose record is unknown (nsys names a device synchronize so)
            # is left to the blocking-call timing below.
            covered[call_ev[(call_ev >= 0) & (src_node >= 0)]] = True
        else:
            # The next activity the waiting thread queues on the waiting stream.
            wstream = stream_of(trace.stream[rows])
            cthread = np.where(
                call_ev >= 0, event_chain[np.maximum(call_ev, 0)].astype(np.int64), NO_ID
            )
            key_a = dense_pairs(
                np.concatenate([g_thread, cthread]), np.concatenate([s_dense, wstream])
            )
            nxt_i = _last_at_or_before(
                key_a[:n_gpu], g_key, key_a[n_gpu:], ts[np.maximum(call_row, 0)], after=True
            )
            ok_d = (nxt_i >= 0) & (call_ev >= 0) & (wstream >= 0) & has_launch[np.maximum(nxt_i, 0)]
            dst_node = node_of(np.where(ok_d, n_host + nxt_i, NO_ID), start_node)
            add(src_node, dst_node, EVENT_WAIT)
    if used_fallback:
        warnings.append(
            f"{used_fallback} event waits paired with the last cudaEventRecord on their thread "
            "(the trace keeps no wait_on_cuda_event_record_corr_id)"
        )

    # Blocking calls no cuda_sync row names: they waited for the last activity queued on
    # each stream before them (a blocking copy: its own copy among them).
    if callable(blocking_rows):
        blocking_rows = blocking_rows()
    b_ev = ev_of_row[blocking_rows[(blocking_rows >= 0) & (blocking_rows < len(trace))]]
    b_ev = b_ev[b_ev >= 0]
    blocking[b_ev] = True
    b_ev = b_ev[~covered[b_ev]]
    for s in range(s_ids.shape[0]):
        gpu_ev = last_queued(np.full(b_ev.shape[0], s, dtype=np.int64), ts[ev_row[b_ev]])
        add(node_of(gpu_ev, end_node), end_node[b_ev], SYNC)
    blocking |= covered
    del covered, ev_of_row, pos, start_node, end_node, is_host, in_window
    # A synchronize call waits for the GPU even where the work it waited for lies before the
    # window (the sync that opens a step): its wait is no host work either.
    # (The host events that are no op are the calls: only their names are looked at.)
    waits_by_name = trace.name_mask(lambda n: "Synchronize" in n)[trace.name_id[calls]]
    blocking[call_events[waits_by_name]] = True
    del waits_by_name, call_events

    # Chain edge types, and their weights: the time from the chain's previous node (0 where
    # no edge is, or a blocking one; a dependency's is set below).
    if fast is not None:
        ctype = np.empty(2 * n_ev, dtype=np.int8)
        weight = np.empty(2 * n_ev, dtype=np.int64)
        types = (NO_EDGE, HOST, DEPENDENCY, BLOCKING, GPU, KERNEL_GAP)
        fast.chain_types(
            pred, node_event, flags(node_start), node_ns, flags(root), flags(blocking),
            flags(empty_queue), n_host, types, ctype, weight,
        )  # fmt: skip
    else:
        ctype, weight = _chain_types(
            pred, node_event, node_start, node_ns, root, blocking, empty_queue, n_host
        )
    # Between top-level events the thread is idle, unless it is inside an annotation or a
    # Python frame (the training loop's own code, a DataLoader's __next__): that gap is host
    # work, and the span it lies in names it.
    span_nodes, span_rows = np.zeros(0, np.int32), np.zeros(0, np.int32)
    dep_nodes = np.flatnonzero(ctype == DEPENDENCY)
    firsts = np.flatnonzero((pred < 0) & (node_event < n_host)).astype(np.int64, copy=False)
    spans = (
        (spans_of() if spans_of is not None else _HostSpans.of(trace, tree))
        if between_ops and (dep_nodes.shape[0] or firsts.shape[0])
        else None
    )
    if dep_nodes.shape[0] and between_ops:
        covered, span_of = _span_cover(
            spans,
            trace,
            ev_row[node_event[dep_nodes]],
            node_ns[pred[dep_nodes]],  # a dependency has a previous node
            node_ns[dep_nodes],
        )
        weight[dep_nodes] = covered
        with_span = (covered > 0) & (span_of >= 0)
        span_nodes = dep_nodes[with_span].astype(np.int32)
        span_rows = span_of[with_span].astype(np.int32)
        del with_span
    else:
        weight[dep_nodes] = 0
    del dep_nodes
    # The host's work before its first event in the window (a DataLoader's __next__ that
    # opened the step, the loop's code) lies in no edge: it leads into the thread's first
    # node, as the time annotations and Python frames cover from the window's start.
    lead = np.zeros(firsts.shape[0], dtype=np.int64)
    lead_span = np.full(firsts.shape[0], NO_ID, dtype=np.int64)
    if firsts.shape[0] and between_ops:
        t_first = node_ns[firsts]
        covered, span_of = _span_cover(
            spans,
            trace,
            ev_row[node_event[firsts]],
            np.minimum(np.full(firsts.shape[0], start_ns, dtype=np.int64), t_first),
            t_first,
        )
        lead = covered
        lead_span = np.where(covered > 0, span_of, NO_ID)
    with_lead = lead > 0
    firsts, lead, lead_span = firsts[with_lead], lead[with_lead], lead_span[with_lead]

    e_src = np.concatenate(src) if src else np.zeros(0, np.int64)
    e_dst = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    e_type = np.concatenate(etype) if etype else np.zeros(0, np.int8)
    e_w = np.concatenate(ew) if ew else np.zeros(0, np.int64)
    back = e_src >= e_dst
    if back.any():
        warnings.append(
            f"{int(back.sum())} edges run backwards in time (clock skew between host and "
            "GPU): left out"
        )
    fwd = ~back
    e_src, e_dst, e_type, e_w = e_src[fwd], e_dst[fwd], e_type[fwd], e_w[fwd]
    by_dst = np.argsort(e_dst, kind="stable")
    return DependencyGraph(
        node_event=node_event,
        node_start=node_start,
        node_ns=node_ns,
        chain_pred=pred,
        chain_type=ctype,
        chain_weight_ns=np.maximum(weight, 0, out=weight),
        span_nodes=span_nodes,
        span_rows=span_rows,
        lead_nodes=firsts,
        lead_ns=lead,
        lead_span_row=lead_span,
        start_ns=start_ns,
        edge_src=e_src[by_dst].astype(np.int64),
        edge_dst=e_dst[by_dst].astype(np.int64),
        edge_type=e_type[by_dst].astype(np.int8),
        edge_weight_ns=np.maximum(e_w[by_dst], 0),
        event_row=ev_row.astype(np.int32),
        event_chain=event_chain,
        event_parent=parent_ev,
        n_host=n_host,
        warnings=warnings,
    )
