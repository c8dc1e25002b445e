"""The critical path's solver graph (`critical_path._Solver`): its kept nodes only, same answers.

The C pass runs on the nodes a longest path needs: a node whose distance is its chain
predecessor's plus its chain weight, that no cross edge touches and no path begins at, adds its
weight into the next kept node of its chain. Random graphs with many zero weights (ties,
paths that end inside a contracted run), restarts (no chain edge), leads and event waits: the
path, its length and every what-if's length equal those of the whole graph's C pass
(`_distances`, `backtrack`), which the numpy pass is checked against elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from badput.analysis import critical_path as cp
from badput.analysis._graph import (
    BLOCKING,
    DEPENDENCY,
    EVENT_WAIT,
    GPU,
    HOST,
    KERNEL_GAP,
    LAUNCH,
    LAUNCH_DELAY,
    NO_EDGE,
    SYNC,
    DependencyGraph,
)
from badput.analysis._nesting import c_paths
from badput.analysis.device import analyze_trace
from badput.trace import load_trace

pytestmark = pytest.mark.skipif(c_paths() is None, reason="the C helpers are not built")


def random_graph(rng: np.random.Generator) -> DependencyGraph:
    """A graph in topological node order: chains, cross edges by destination, leads."""
    n = int(rng.integers(1, 260))
    chains = int(rng.integers(1, 7))
    chain = rng.integers(0, chains, n)
    pred = np.full(n, -1, dtype=np.int32)
    last = np.full(chains, -1)
    for v in range(n):
        pred[v] = last[chain[v]]
        last[chain[v]] = v
    has = pred >= 0
    ctype = np.full(n, NO_EDGE, dtype=np.int8)
    types = np.array([HOST, HOST, GPU, KERNEL_GAP, DEPENDENCY, BLOCKING], dtype=np.int8)
    ctype[has] = rng.choice(types, int(has.sum()))
    ctype[has & (rng.random(n) < 0.08)] = NO_EDGE  # the path may begin anew there
    weight = np.where(rng.random(n) < 0.55, 0, rng.integers(1, 40, n)).astype(np.int64)
    weight[ctype == NO_EDGE] = 0
    m = int(rng.integers(0, n + 1)) if n > 1 else 0
    dst = rng.integers(1, max(n, 2), m)
    src = (rng.random(m) * dst).astype(np.int64)
    by_dst = np.argsort(dst, kind="stable")
    src, dst = src[by_dst].astype(np.int64), dst[by_dst].astype(np.int64)
    etypes = np.array([LAUNCH, LAUNCH_DELAY, SYNC, EVENT_WAIT], dtype=np.int8)
    etype = rng.choice(etypes, m).astype(np.int8)
    ew = np.where(rng.random(m) < 0.5, 0, rng.integers(1, 60, m)).astype(np.int64)
    firsts = np.flatnonzero(~has)
    lead_nodes = np.sort(firsts[rng.random(firsts.shape[0]) < 0.4]).astype(np.int64)
    lead_ns = rng.integers(1, 30, lead_nodes.shape[0]).astype(np.int64)
    node = np.arange(n, dtype=np.int32)
    return DependencyGraph(
        node_event=node,
        node_start=np.zeros(n, dtype=np.bool_),
        node_ns=np.arange(n, dtype=np.int64) * 100,
        chain_pred=pred,
        chain_type=ctype,
        chain_weight_ns=weight,
        span_nodes=np.zeros(0, np.int32),
        span_rows=np.zeros(0, np.int32),
        lead_nodes=lead_nodes,
        lead_ns=lead_ns,
        lead_span_row=np.full(lead_nodes.shape[0], -1, dtype=np.int64),
        start_ns=0,
        edge_src=src,
        edge_dst=dst,
        edge_type=etype,
        edge_weight_ns=ew,
        event_row=node,
        event_chain=chain.astype(np.int32),
        event_parent=np.full(n, -1, dtype=np.int32),
        n_host=n,
    )


def whole_graph_path(
    g: DependencyGraph, chain_ok: np.ndarray, edge_ok: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """The path as the C pass over every node finds it (the first node of the longest
    distance, back along the best in-edges)."""
    dist, best = cp._distances(g, chain_ok, edge_ok)
    assert best is not None
    end = int(np.argmax(dist))
    out = np.empty(len(g), dtype=np.int64)
    count = c_paths().backtrack(best, g.chain_pred, g.edge_src, end, out)
    nodes = out[:count][::-1].copy()
    return int(dist[end]), nodes, best[nodes]


@pytest.mark.parametrize("seed", range(40))
def test_solver_path_is_the_whole_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        g = random_graph(rng)
        edge_ok = rng.random(g.edge_src.shape[0]) < 0.9
        # The path's own chain edges, and a what-if's (the stream order kept at a restart).
        for chain_ok in (
            g.chain_type != NO_EDGE,
            (g.chain_type != NO_EDGE) | (rng.random(len(g)) < 0.3),
        ):
            chain_ok &= g.chain_pred >= 0
            want = whole_graph_path(g, chain_ok, edge_ok)
            got = cp._path(g, chain_ok, edge_ok, {})
            assert got[0] == want[0]
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[2], want[2])


@pytest.mark.parametrize("seed", range(20))
def test_solver_what_if_lengths_are_the_whole_graphs(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(25):
        g = random_graph(rng)
        solver = cp._Solver.of(g)
        chain_ok = (g.chain_type != NO_EDGE) & (g.chain_pred >= 0)
        edge_ok = rng.random(g.edge_src.shape[0]) < 0.8
        lead = rng.integers(0, 20, g.lead_nodes.shape[0]).astype(np.int64)
        edge_w = rng.integers(0, 30, g.edge_src.shape[0]).astype(np.int64)
        nodes = np.flatnonzero(rng.random(len(g)) < 0.3).astype(np.int32)
        new = np.round(g.chain_weight_ns[nodes] * rng.choice([0.0, 0.5, 2.0])).astype(np.int64)
        chain_w = g.chain_weight_ns.copy()
        chain_w[nodes] = new
        want = int(cp._distances(g, chain_ok, edge_ok, chain_w, edge_w, lead, False)[0].max())
        ok_kept = chain_ok[solver.kept]
        dense = solver.weights(chain_w)
        sparse = solver.changed(g, [(nodes, new)])
        assert dense is not None and sparse is not None
        np.testing.assert_array_equal(dense, sparse)
        assert solver.length(ok_kept, edge_ok, dense, edge_w, lead) == want


def small_graph(
    pred: list[int],
    ctype: list[int],
    weight: list[int],
    chain: list[int],
    edges: tuple[tuple[int, int, int, int], ...] = (),
    leads: tuple[tuple[int, int], ...] = (),
) -> DependencyGraph:
    """A graph given node by node; edges as (src, dst, type, weight) by dst; leads (node, ns)."""
    n = len(pred)
    node = np.arange(n, dtype=np.int32)
    e = np.array(edges, dtype=np.int64).reshape(-1, 4)
    lead = np.array(leads, dtype=np.int64).reshape(-1, 2)
    return DependencyGraph(
        node_event=node,
        node_start=np.zeros(n, dtype=np.bool_),
        node_ns=np.arange(n, dtype=np.int64),
        chain_pred=np.array(pred, dtype=np.int32),
        chain_type=np.array(ctype, dtype=np.int8),
        chain_weight_ns=np.array(weight, dtype=np.int64),
        span_nodes=np.zeros(0, np.int32),
        span_rows=np.zeros(0, np.int32),
        lead_nodes=lead[:, 0].copy(),
        lead_ns=lead[:, 1].copy(),
        lead_span_row=np.full(lead.shape[0], -1, dtype=np.int64),
        start_ns=0,
        edge_src=e[:, 0].copy(),
        edge_dst=e[:, 1].copy(),
        edge_type=e[:, 2].astype(np.int8),
        edge_weight_ns=e[:, 3].copy(),
        event_row=node,
        event_chain=np.array(chain, dtype=np.int32),
        event_parent=np.full(n, -1, dtype=np.int32),
        n_host=n,
    )


def test_the_path_ends_at_the_first_node_of_its_length_inside_another_chains_run() -> None:
    # Thread X: node 0, then 1 (10 us of host work, contracted), then 3 (0 us, its last).
    # Thread Y: node 2, with 10 us of lead. The longest distance, 10, is first reached at
    # node 1, inside the run into node 3: before node 2, the first kept node that has it.
    g = small_graph(
        pred=[-1, 0, -1, 1],
        ctype=[NO_EDGE, HOST, NO_EDGE, HOST],
        weight=[0, 10, 0, 0],
        chain=[0, 0, 1, 0],
        leads=((2, 10),),
    )
    solver = cp._Solver.of(g)
    np.testing.assert_array_equal(solver.kept, [0, 2, 3])
    chain_ok = g.chain_type != NO_EDGE
    edge_ok = np.ones(0, dtype=np.bool_)
    length, nodes, how = cp._path(g, chain_ok, edge_ok, {})
    want = whole_graph_path(g, chain_ok, edge_ok)
    assert (length, nodes.tolist(), how.tolist()) == (10, [0, 1], [-1, -2])
    assert (want[0], want[1].tolist(), want[2].tolist()) == (10, [0, 1], [-1, -2])


def test_a_negative_weight_on_a_contracted_node_is_refused() -> None:
    # A chain of four host nodes, one cross edge into the last: nodes 1 and 2 are contracted.
    # A negative weight there would be clamped at 0 by the whole graph's pass, not summed.
    g = small_graph(
        pred=[-1, 0, 1, 2],
        ctype=[NO_EDGE, HOST, HOST, HOST],
        weight=[0, 5, 7, 3],
        chain=[0, 0, 0, 0],
        edges=((0, 3, SYNC, 1),),
    )
    solver = cp._Solver.of(g)
    np.testing.assert_array_equal(solver.kept, [0, 3])
    np.testing.assert_array_equal(solver.weight, [0, 15])
    np.testing.assert_array_equal(solver.run, [0, 2])
    assert solver.weights(np.array([0, -9, 7, 3], dtype=np.int64)) is None
    assert solver.changed(g, [(np.array([1]), np.array([-9], dtype=np.int64))]) is None
    # On a kept node a negative weight is as the whole graph's pass takes it.
    w = solver.changed(g, [(np.array([3]), np.array([-1], dtype=np.int64))])
    assert w is not None and w.tolist() == [0, 11]


def test_a_path_without_its_edges_reports_the_same(shared_traces: Path) -> None:
    # What `badput analyze` asks for (its outcome is compact): no rows and edges kept, the
    # same length, parts, ops, modules, steps and what-ifs; on one and two threads.
    path = next(iter(sorted(shared_traces.glob("param-dlrm-8rank/*worker0*.json.gz"))))
    trace = load_trace(str(path))
    for jobs in (1, 2):
        full = analyze_trace(trace, jobs=jobs)[0].critical_path
        lean = analyze_trace(trace, jobs=jobs, path_edges=False)[0].critical_path
        assert full is not None and lean is not None
        assert len(full.edges) > 500 and full.rows.shape[0] > 500
        assert len(lean.edges) == 0 and lean.rows.shape[0] == 0 and lean.graph is not None
        assert (lean.length_ns, lean.breakdown_ns, lean.top_ops, lean.top_modules, lean.steps) == (
            full.length_ns,
            full.breakdown_ns,
            full.top_ops,
            full.top_modules,
            full.steps,
        )
        change = cp.GraphChange(all_host=True, host_scale=0.5)
        assert cp.what_if(trace, lean, change) == cp.what_if(trace, full, change)
