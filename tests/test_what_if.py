"""The graph what-if (issue 19): a fix as shrunk edges, and the critical path's new length.

Synthetic traces in whole microseconds (`tests/synth.py`); each case works out the path
before and after the change by hand. The C and numpy longest-path passes must agree on every
path (`BADPUT_NO_C_PATHS=1` forces numpy).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from badput.analysis import _nesting
from badput.analysis.critical_path import GraphChange, critical_path, what_if
from badput.analysis.device import analyze_trace
from badput.diagnose import diagnose_device
from badput.trace import load_trace
from badput.trace.model import EventKind, Trace
from synth import TraceBuilder

US = 1000
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
A100 = "NVIDIA A100-SXM4-80GB"


def new_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.device_properties([0], name=A100)
    return b


def rows_named(trace: Trace, name: str) -> np.ndarray:
    return np.flatnonzero([trace.name_of(i) == name for i in range(len(trace))]).astype(np.int64)


def loader_step() -> TraceBuilder:
    """ProfilerStep#1 [0, 300) with a DataLoader span [0, 100) holding aten::cat [10, 90),
    then aten::mm [100, 110) launching a 150 us GEMM [112, 262) at [101, 106)."""
    b = new_trace()
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100)
    b.cpu_op("aten::cat", 10, 90)
    b.cpu_op("aten::mm", 100, 110)
    b.launch(GEMM, cpu=(101, 106), gpu=(112, 262))
    return b


@pytest.fixture(params=["c", "numpy"])
def longest_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each case with the C pass (where built) and with numpy."""
    if request.param == "numpy":
        monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
    elif _nesting._paths is None:
        pytest.skip("the C longest-path pass is not built")
    return str(request.param)


def test_data_loading_leaves_the_path(tmp_path: Path, longest_pass: str) -> None:
    # ProfilerStep#1 [0, 300): the DataLoader's __next__ (a user annotation) [0, 100) with a
    # collate op inside [10, 90), then aten::mm [100, 110) launching at [101, 106) a 150 us
    # kernel [112, 262) onto an empty queue. Annotations are no events of the graph, but the
    # host time they cover between ops (and before the first op) is host work: the path is
    # the DataLoader's 10 us before the collate op, the op's 80, the DataLoader's 10 after it,
    # 1 us of aten::mm, launch delay 11, kernel 150: 262 us. Without the DataLoader's host
    # time (all within its span): 1 + 11 + 150 = 162 us. In HTA's graph (between_ops=False)
    # the gaps are idle: 80 + 1 + 11 + 150 = 242 us.
    b = loader_step()
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    cp = d.critical_path
    assert cp is not None and cp.length_ns == 262 * US
    assert critical_path(trace, d, between_ops=False).length_ns == 242 * US
    # aten::mm: its 1 us, and the launch delay and kernel of the work it launched.
    loader_name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert cp.top_ops == [("aten::mm", 162 * US), ("aten::cat", 80 * US), (loader_name, 20 * US)]
    loader = np.flatnonzero(trace.kind == EventKind.ANNOTATION)
    loader = loader[[("DataLoader" in trace.name_of(int(r))) for r in loader]].astype(np.int64)
    assert what_if(trace, cp, GraphChange(host_rows=loader)) == 162 * US
    # The finding carries the same saving, per step (one step), on one thread and on two.
    # The diagnosis leaves the path without the caches its what-ifs made (node-sized arrays
    # that the reports do not need); a later what-if makes them again, same answer.
    assert cp._what_if_base and cp._spans  # made by the what-if above
    for jobs in (1, 2):
        found = {f.id: f for f in diagnose_device(trace, d, jobs)}
        assert found["data-loading"].graph_savings_ns == pytest.approx(100 * US)
        assert not cp._what_if_base and not cp._spans
    assert what_if(trace, cp, GraphChange(host_rows=loader)) == 162 * US
    # A compact path (as reports ship it) has no graph to ask.
    assert what_if(trace, cp.compact(), GraphChange(host_rows=loader)) is None


def test_stream_order_holds_in_a_what_if(tmp_path: Path, longest_pass: str) -> None:
    # Kernel A [10, 110) launched at [0, 5); a host op [5, 200); kernel B [210, 260) launched
    # at [200, 205) onto an empty queue (A ended at 110): the measured graph joins B to its
    # launch (delay 10), not to A. Path: 5 + 195 + delay... = host 200 + delay 10 + B 50 =
    # 260 us. With no host time and no launch delays, B still runs after A on their stream:
    # A's delay 10 is gone too, so 100 + 50 = 150 us (not max(100, 50)).
    b = new_trace()
    b.launch(GEMM, cpu=(0, 5), gpu=(10, 110))
    b.cpu_op("aten::foo", 5, 200)
    b.launch(GEMM, cpu=(200, 205), gpu=(210, 260))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    cp = d.critical_path
    assert cp is not None and cp.length_ns == 260 * US
    change = GraphChange(all_host=True, no_launch_delay=True)
    assert what_if(trace, cp, change) == 150 * US


def test_unblocked_sync(tmp_path: Path, longest_pass: str) -> None:
    # A 1 us launch [0, 1) of a 500 us kernel [5, 505), cudaDeviceSynchronize [2, 505), then
    # a 100 us op [505, 605). Measured: delay 5 + kernel 500 + sync + op 100 = 605 us. If the
    # call did not wait: the host needs 1 + 0 + 100 = 101 us, the GPU 505 us: 505 us.
    b = new_trace()
    b.profiler_step(1, 0, 605)
    b.launch(GEMM, cpu=(0, 1), gpu=(5, 505))
    sync = b.runtime("cudaDeviceSynchronize", 2, 505)
    event = b.cuda_sync("Context Sync", 498, 505)
    event["args"]["correlation"] = sync
    b.cpu_op("aten::mul", 505, 605)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    cp = d.critical_path
    assert cp is not None and cp.length_ns == 605 * US
    call = rows_named(trace, "cudaDeviceSynchronize")
    assert what_if(trace, cp, GraphChange(unblock_rows=call)) == 505 * US


def test_hidden_communication_and_faster_kernels(tmp_path: Path, longest_pass: str) -> None:
    # One stream: GEMM [10, 110), an all-reduce [110, 210), GEMM [210, 260), launched at 0,
    # 1, 2 (the queue is never empty after the first): 10 + 100 + 100 + 50 = 260 us.
    # Communication hidden: 160 us. The GEMMs twice as fast: 10 + 50 + 100 + 25 = 185 us.
    b = new_trace()
    b.launch(GEMM, cpu=(0, 1), gpu=(10, 110))
    b.launch(NCCL, cpu=(1, 2), gpu=(110, 210))
    b.launch(GEMM, cpu=(2, 3), gpu=(210, 260))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    cp = d.critical_path
    assert cp is not None and cp.length_ns == 260 * US
    assert cp.breakdown_ns["gpu_communication"] == 100 * US
    nccl, gemm = rows_named(trace, NCCL), rows_named(trace, GEMM)
    gemm = gemm[trace.kind[gemm] == EventKind.KERNEL]
    nccl = nccl[trace.kind[nccl] == EventKind.KERNEL]
    assert what_if(trace, cp, GraphChange(gpu_rows=nccl)) == 160 * US
    assert what_if(trace, cp, GraphChange(gpu_rows=gemm, gpu_scale=0.5)) == 185 * US
    # Per-row factors: the first GEMM gone, the second unchanged: 10 + 0 + 100 + 50.
    per_row = GraphChange(gpu_rows=gemm, gpu_scale=np.array([0.0, 1.0]))
    assert what_if(trace, cp, per_row) == 160 * US
    # No change: the measured length.
    assert what_if(trace, cp, GraphChange()) == cp.length_ns


def test_c_and_numpy_passes_agree_on_the_shared_traces(
    shared_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if _nesting._paths is None:
        pytest.skip("the C longest-path pass is not built")
    paths = sorted(shared_traces.glob("hta-critical-path/*.json.gz"))
    paths += sorted(shared_traces.glob("param-dlrm-8rank/*worker0*.json.gz"))
    assert len(paths) >= 5
    for path in paths:
        trace = load_trace(str(path))
        d = analyze_trace(trace)[0]
        c = critical_path(trace, d)
        monkeypatch.setenv("BADPUT_NO_C_PATHS", "1")
        n = critical_path(trace, d)
        monkeypatch.delenv("BADPUT_NO_C_PATHS")
        assert (c.length_ns, c.breakdown_ns, c.steps, c.top_ops) == (
            n.length_ns,
            n.breakdown_ns,
            n.steps,
            n.top_ops,
        ), path.name
        assert np.array_equal(c.rows, n.rows), path.name
        for key in ("src_row", "dst_row", "src_start", "dst_start", "edge_type", "weight_ns"):
            assert np.array_equal(getattr(c.edges, key), getattr(n.edges, key)), (path.name, key)
        # The graph itself: its host nesting and chain edges also run in C.
        assert c.graph is not None and n.graph is not None
        for f in dataclasses.fields(c.graph):
            a, b = getattr(c.graph, f.name), getattr(n.graph, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and np.array_equal(a, b), (path.name, f.name)
            else:
                assert a == b, (path.name, f.name)


def test_data_loading_span_that_an_edge_runs_into(tmp_path: Path, longest_pass: str) -> None:
    # ProfilerStep#1 [0, 300) (an annotation: host work between ops in it counts); op A
    # [0, 20); the DataLoader's __next__ [30, 100) with a collate op [60, 90); aten::mm
    # [100, 110) launching at [101, 106) a kernel [112, 262) onto an empty queue. The host
    # edge from A's end (20) to the collate op's start (60) runs into the DataLoader span:
    # 30 of its 40 us are data loading. Path: 20 + 40 + 30 + 10 + 1 = 101 on the host, delay
    # 11, kernel 150: 262 us. Without the DataLoader's 70 us: 192 us.
    b = new_trace()
    b.profiler_step(1, 0, 300)
    b.cpu_op("aten::zero_", 0, 20)
    b.dataloader(30, 100)
    b.cpu_op("aten::stack", 60, 90)
    b.cpu_op("aten::mm", 100, 110)
    b.launch(GEMM, cpu=(101, 106), gpu=(112, 262))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    cp = d.critical_path
    assert cp is not None and cp.length_ns == 262 * US
    found = {f.id: f for f in diagnose_device(trace, d)}
    assert found["data-loading"].graph_savings_ns == pytest.approx(70 * US)
    # The host-overhead what-if keeps exactly the DataLoader's 70 us of host time.
    assert found["host-overhead"].graph_savings_ns == pytest.approx((101 - 70 + 11) * US)


def test_c_pass_is_built_in_ci() -> None:
    if os.environ.get("CI"):
        assert _nesting._paths is not None, "CI must build the C longest-path pass"


@pytest.mark.skipif(_nesting._paths is None, reason="the C helpers are not built")
def test_c_host_weights_equal_numpys() -> None:
    # `_paths.shrink` (in place, one pass) against `_shrunk` (numpy), on weights and inside
    # parts that put the scaled part at halves (numpy rounds them to even), with negative and
    # oversized inside parts, each scale, host rows or all the host.
    from badput.analysis import critical_path as cp

    rng = np.random.default_rng(19)
    for trial in range(400):
        n, m = int(rng.integers(1, 60)), 80
        w = rng.integers(0, 40, m).astype(np.int64)
        edges = rng.choice(m, n, replace=False).astype(np.int32)
        inside = rng.integers(-5, 45, n).astype(np.int64)
        scale = float(rng.choice([0.0, 0.5, 0.25, 1 / 3, 0.75, 1.5]))
        change = GraphChange(host_scale=scale, all_host=bool(trial % 2))
        want = w.copy()
        want[edges] = cp._shrunk(change, inside, want[edges])
        got = w.copy()
        _nesting._paths.shrink(edges, inside, got, scale, change.all_host)
        np.testing.assert_array_equal(got, want)
    halves = np.array([1, 3, 5, 7], dtype=np.int64)  # x 0.5: 0.5, 1.5, 2.5, 3.5
    got = halves.copy()
    _nesting._paths.shrink(np.arange(4, dtype=np.int32), halves, got, 0.5, False)
    np.testing.assert_array_equal(got, [0, 2, 2, 4])  # round half to even, as numpy


def test_span_cache_forms_give_the_same_what_ifs_in_any_order(
    tmp_path: Path, longest_pass: str
) -> None:
    # A what-if that scales the time inside some spans keeps only the host edges with time
    # inside them; one that scales the rest (all_host) needs every host edge. Asked in either
    # order on one path (one cache), each equals its answer on a fresh path. The trace of
    # test_data_loading_leaves_the_path, and host work after the kernel up to 300 us (the
    # host's chain is the path: 300 us, 100 of them in the DataLoader).
    b = loader_step()
    b.cpu_op("aten::add", 200, 300)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    d = analyze_trace(trace)[0]
    assert d.critical_path is not None and d.critical_path.length_ns == 300 * US
    loader = np.flatnonzero(trace.kind == EventKind.ANNOTATION)
    loader = loader[[("DataLoader" in trace.name_of(int(r))) for r in loader]].astype(np.int64)
    inside = GraphChange(host_rows=loader, host_scale=0.5)
    rest = GraphChange(all_host=True, keep_host_rows=loader, host_scale=0.5)
    fresh = {
        name: what_if(trace, critical_path(trace, d), change)
        for name, change in (("inside", inside), ("rest", rest))
    }
    # Inside: the DataLoader's 100 us halve (250); the rest: the 200 us after it halve, and
    # the GPU's side bounds the path: 262 us less half of aten::mm's 1 us before its launch.
    assert fresh == {"inside": 250 * US, "rest": 262 * US - US // 2}
    for order in (("inside", "rest", "inside"), ("rest", "inside", "rest")):
        cp = critical_path(trace, d)
        for name in order:
            change = inside if name == "inside" else rest
            assert what_if(trace, cp, change) == fresh[name], (order, name)
