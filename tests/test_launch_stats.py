"""Launch statistics (`analysis.launch`): synthetic traces with exact answers, real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.analysis import DeviceAnalysis, analyze_trace
from badput.analysis.launch import (
    LaunchOutlier,
    LaunchStats,
    QueueDepth,
    SlowLaunchOp,
    launch_stats,
    outlier_threshold_ns,
)
from badput.analysis.tree import launch_tree
from badput.trace import load_trace
from badput.trace.model import EventKind, Trace
from synth import US, TraceBuilder


def _stats(b: TraceBuilder, tmp_path: Path) -> tuple[Trace, DeviceAnalysis, LaunchStats]:
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    [d] = analyze_trace(trace)
    assert d.timeline is not None and d.timeline.tree is not None
    return trace, d, launch_stats(trace, d, d.timeline.tree)


def _delay_of(trace: Trace, s: LaunchStats, name: str) -> int:
    [i] = [k for k, r in enumerate(s.delay_rows.tolist()) if trace.name_of(r) == name]
    return int(s.delay_ns[i])


# ---- launch delay: distribution and outliers --------------------------------------------------


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_outlier_ops_of_equal_total_delay_go_by_name(tmp_path: Path, seed: int | None) -> None:
    # Delays 2 2 3 3 3 4 4 5 5 50 50 us: the two 50s are outliers, one under each op, equal
    # in total: listed by the op's name, whatever the file's order (aten::z_op comes first).
    delays = [2, 3, 2, 3, 4, 3, 4, 5, 5, 50, 50]
    b = TraceBuilder()
    for k, delay in enumerate(delays):
        call = (100 * k, 100 * k + 5)
        op = {9: "aten::z_op", 10: "aten::a_op"}.get(k, "aten::mm")
        b.cpu_op(op, call[0], call[1])
        b.launch(f"k{k}", cpu=call, gpu=(call[1] + delay, call[1] + delay + 5))
    trace = load_trace(str(b.write(tmp_path / "t.json", shuffle=seed)))
    [d] = analyze_trace(trace)
    assert d.timeline is not None and d.timeline.tree is not None
    s = launch_stats(trace, d, d.timeline.tree)
    assert s.outliers == [
        LaunchOutlier("aten::a_op", 1, 50 * US, 50 * US, 50 * US),
        LaunchOutlier("aten::z_op", 1, 50 * US, 50 * US, 50 * US),
    ]


def test_delay_distribution_and_outliers_by_op(tmp_path: Path) -> None:
    # Twelve launches, call k at [10k, 10k + 5), its kernel 5 us long starting `delay` after
    # the call's end. Sorted delays: 2 2 3 3 3 4 4 5 5 30 40 60 (us).
    delays = [2, 3, 2, 3, 4, 3, 4, 5, 5, 30, 40, 60]
    b = TraceBuilder()
    b.profiler_step(1, 0, 200)
    for k, delay in enumerate(delays):
        call = (10 * k, 10 * k + 5)
        gpu = (call[1] + delay, call[1] + delay + 5)
        if delay == 40:  # launched outside any op: the row is named after the call
            b.launch(f"k{k}", cpu=call, gpu=gpu)
            continue
        b.cpu_op("aten::nonzero" if delay in (30, 60) else "aten::mm", call[0], call[1])
        b.launch(f"k{k}", cpu=call, gpu=gpu)
    trace, _d, s = _stats(b, tmp_path)
    assert (s.activities, s.launched, s.graph_replays) == (12, 12, 0)
    assert sorted(s.delay_ns.tolist()) == sorted(x * US for x in delays)
    assert _delay_of(trace, s, "k11") == 60 * US
    assert s.delay is not None
    # median: mean of the 6th and 7th (4, 4); p90: rank 0.9 * 11 = 9.9, between 30 and 40.
    assert (s.delay.count, s.delay.median_ns, s.delay.max_ns) == (12, 4 * US, 60 * US)
    assert s.delay.p90_ns == pytest.approx(39 * US, abs=1e-6)
    # |x - 4|: 0 0 1 1 1 1 1 2 2 26 36 56 -> MAD 1 us; threshold 4 + 3.5 * 1 / 0.6745 us.
    assert s.outlier_threshold_ns == pytest.approx(4 * US + 3.5 * US / 0.6745)
    assert s.outlier_count == 3
    assert s.outliers == [
        LaunchOutlier("aten::nonzero", 2, 45 * US, 60 * US, 90 * US),
        LaunchOutlier("cudaLaunchKernel", 1, 40 * US, 40 * US, 40 * US),
    ]
    # Calls as long as their kernels are not slow (strictly longer only).
    assert (s.slow_calls, s.slow_call_excess_ns, s.slow_call_ops) == (0, 0, [])
    assert s.warnings == []


@pytest.mark.parametrize(
    ("delays", "expected"),
    [
        ([5], None),  # one delay: nothing to compare with
        ([7, 7, 7, 7], None),  # all equal
        # MAD 0 (three of five equal): sigma from the mean absolute deviation, (2 + 7) / 5.
        ([3, 3, 3, 5, 10], 3 + 3.5 * (9 / 5) / np.sqrt(2 / np.pi)),
        ([10, 11, 12, 13, 100], 12 + 3.5 / 0.6745),  # median 12, MAD 1
    ],
)
def test_outlier_threshold(delays: list[int], expected: float | None) -> None:
    got = outlier_threshold_ns(delays)
    assert got == (None if expected is None else pytest.approx(expected))


# ---- queue depth over several streams, empty queues while the host works -------------------


def test_queue_depth_on_two_streams_and_empty_share(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 50)
    b.launch("A", cpu=(0, 2), gpu=(10, 20))  # stream 7: queued from each call's start
    b.launch("B", cpu=(3, 5), gpu=(20, 30))
    b.launch("C", cpu=(6, 8), gpu=(30, 40))
    b.launch("D", cpu=(9, 11), gpu=(12, 25), stream=9)
    b.cpu_op("aten::item", 42, 46)  # the host works while every queue is empty ...
    b.python_frame("train.py(7): log", 44, 48)
    trace, d, s = _stats(b, tmp_path)
    assert (d.window_start_ns - trace.ts_ns.min(), d.window_ns) == (0, 50 * US)
    assert sorted(s.delay_ns.tolist()) == [1 * US, 8 * US, 15 * US, 22 * US]
    assert s.queue_depth_max == 3
    assert s.stream_depth_max == {7: 3, 9: 1}
    assert s.typical_span == (d.window_start_ns, d.window_start_ns + 50 * US)
    t0 = d.window_start_ns
    series = {q.stream: q for q in s.typical_queues}
    assert sorted(series) == [7, 9]
    q7, q9 = series[7], series[9]
    assert ((q7.times_ns - t0) // US).tolist() == [0, 3, 6, 20, 30, 40]
    assert q7.depths.tolist() == [1, 2, 3, 2, 1, 0]
    assert ((q9.times_ns - t0) // US).tolist() == [0, 9, 25]
    assert q9.depths.tolist() == [0, 1, 0]
    assert q7.exact and q9.exact
    # Queues hold work over [0, 40): empty over [40, 50), the host busy over [42, 48).
    assert s.queue_empty_ns == 10 * US
    assert s.queue_empty_host_busy_ns == 6 * US
    assert s.queue_empty_share == pytest.approx(6 / 50)


def test_queue_counts_from_the_call_start_and_ends_before_launches_at_one_instant(
    tmp_path: Path,
) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 40)
    b.launch("A", cpu=(0, 5), gpu=(5, 20))
    b.launch("B", cpu=(20, 22), gpu=(25, 30))  # queued the instant A ends: depth stays 1
    b.launch("C", cpu=(30, 34), gpu=(32, 33))  # starts before its call returns: delay -2
    trace, d, s = _stats(b, tmp_path)
    [q] = s.typical_queues
    assert ((q.times_ns - d.window_start_ns) // US).tolist() == [0, 33]
    assert q.depths.tolist() == [1, 0]  # [0, 20) A, [20, 30) B, [30, 33) C: no change
    assert s.queue_depth_max == 1
    assert _delay_of(trace, s, "C") == -2 * US
    assert s.delay is not None and s.delay.max_ns == 3 * US


def test_series_downsamples_to_the_upper_envelope() -> None:
    q = QueueDepth(
        streams=np.array([7]),
        offsets=np.array([0, 5]),
        times_ns=np.array([0, 1, 2, 10, 30]),
        depths=np.array([1, 3, 1, 2, 0]),
    )
    [exact] = q.series(0, 40, max_points=5)
    assert exact.exact and exact.depths.tolist() == [1, 3, 1, 2, 0]
    # Four bins of 10 ns: highest depth in each ([0,10): 3; [10,20): 2; [20,30): 2 held
    # since 10; [30,40): 0 from 30 on), equal neighbours merged.
    [env] = q.series(0, 40, max_points=4)
    assert not env.exact
    assert (env.times_ns.tolist(), env.depths.tolist()) == ([0, 10, 30], [3, 2, 0])
    # A span inside: the depth at its start first; a span where the queue is empty: nothing.
    [inner] = q.series(5, 35)
    assert (inner.times_ns.tolist(), inner.depths.tolist()) == ([5, 10, 30], [1, 2, 0])
    assert q.series(50, 60) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(1, 9)), min_size=2, max_size=60),
    st.integers(1, 12),
)
def test_envelope_is_never_below_the_depth(pieces: list[tuple[int, int]], bins: int) -> None:
    times = np.unique(np.array([0] + [t for t, _ in pieces], dtype=np.int64))
    rng = np.random.default_rng(len(pieces))
    depths = np.asarray(rng.integers(0, 9, size=times.shape[0]), dtype=np.int64)
    q = QueueDepth(np.array([3]), np.array([0, times.shape[0]]), times, depths)
    got = q.series(0, 201, max_points=bins)
    if not depths.any():
        assert got == []
        return
    [env] = got
    assert env.times_ns.shape[0] <= bins or env.exact
    probe = np.arange(0, 201)
    truth = depths[np.searchsorted(times, probe, side="right") - 1]
    drawn = env.depths[np.searchsorted(env.times_ns, probe, side="right") - 1]
    assert (drawn >= truth).all()
    assert drawn.max() == truth.max()


# ---- CUDA-graph replays ----------------------------------------------------------------------


def test_graph_replay_counts_once_and_queues_all_its_kernels(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 250)
    b.cpu_op("CUDAGraph::replay", 0, 50)
    corr = b.runtime("cudaGraphLaunch", 10, 40)
    for k in range(5):
        b.kernel(f"graph_kernel_{k}", 100 + 10 * k, 105 + 10 * k, correlation=corr)
    b.cpu_op("aten::add", 60, 70)
    b.launch("add_kernel", cpu=(62, 68), gpu=(200, 210))
    trace, _d, s = _stats(b, tmp_path)
    assert (s.activities, s.launched, s.graph_replays, s.graph_activities) == (6, 6, 1, 5)
    # One delay per replay (its first kernel: 100 - 40), one for add_kernel (200 - 68).
    assert sorted(s.delay_ns.tolist()) == [60 * US, 132 * US]
    assert _delay_of(trace, s, "graph_kernel_0") == 60 * US
    assert s.delay is not None
    assert (s.delay.median_ns, s.delay.max_ns) == (96 * US, 132 * US)
    assert s.delay.p90_ns == pytest.approx(60 * US + 0.9 * 72 * US)
    # All five queued at the graph launch's start, add_kernel from 62: depth 6.
    assert s.queue_depth_max == 6
    # The graph launch (30 us) outlasts the 25 us its five kernels ran; add's call does not.
    assert (s.slow_calls, s.slow_call_excess_ns) == (1, 5 * US)
    assert s.slow_call_ops == [SlowLaunchOp("CUDAGraph::replay", 1, 5 * US, 5 * US)]


# ---- runtime calls longer than their kernels -------------------------------------------------


def test_slow_launch_calls_by_op(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 200)
    b.cpu_op("aten::add", 0, 10)
    b.launch("add_1", cpu=(0, 10), gpu=(10, 14))  # 10 us call, 4 us kernel: 6 us over
    b.cpu_op("aten::add", 20, 28)
    b.launch("add_2", cpu=(20, 28), gpu=(30, 35))  # 3 us over
    b.cpu_op("aten::mul", 40, 45)
    b.launch("mul", cpu=(40, 45), gpu=(46, 47))  # 4 us over
    b.cpu_op("aten::mm", 50, 52)
    b.launch("gemm", cpu=(50, 52), gpu=(52, 72))  # kernel longer: not slow
    b.cpu_op("aten::copy_", 80, 100)
    b.launch("Memcpy DtoH", kind="memcpy", cpu=(80, 100), gpu=(98, 100))  # copies: not counted
    _, _, s = _stats(b, tmp_path)
    assert (s.slow_calls, s.slow_call_excess_ns) == (3, 13 * US)
    assert s.slow_call_ops == [
        SlowLaunchOp("aten::add", 2, 9 * US, 6 * US),
        SlowLaunchOp("aten::mul", 1, 4 * US, 4 * US),
    ]


# ---- bad input: warnings, never a crash ------------------------------------------------------


def test_trace_without_correlation_ids(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 60)
    b.cpu_op("aten::mm", 0, 10)
    b.launch("gemm", cpu=(2, 6), gpu=(20, 30), flows=False)
    b.launch("relu", cpu=(7, 9), gpu=(30, 35), flows=False)
    for e in b.events:
        e.get("args", {}).pop("correlation", None)
    _trace, d, s = _stats(b, tmp_path)
    assert (s.activities, s.launched, s.delay, s.outliers) == (2, 0, None, [])
    assert s.delay_ns.shape == (0,)
    assert len(s.warnings) == 1 and "2 of 2 GPU activities" in s.warnings[0]
    # Without their calls, each counts from its own start: depth 1 over [20, 35).
    assert s.queue_depth_max == 1
    assert s.queue_empty_ns == d.window_ns - 15 * US
    assert s.queue_empty_share is not None


def test_trace_without_host_events(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.kernel("k0", 0, 10)
    b.kernel("k1", 15, 20)
    b.kernel("k2", 0, 30, stream=9)
    _trace, _d, s = _stats(b, tmp_path)
    assert (s.activities, s.launched, s.delay) == (3, 0, None)
    assert s.queue_depth_max == 1
    assert s.stream_depth_max == {7: 1, 9: 1}
    assert s.queue_empty_ns == 0  # stream 9 is busy over the whole window
    assert (s.queue_empty_host_busy_ns, s.queue_empty_share) == (None, None)
    assert any("no host events" in w for w in s.warnings)


def test_cpu_only_trace_gives_empty_stats(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.cpu_op("aten::add", 0, 10)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    [d] = analyze_trace(trace)
    s = launch_stats(trace, d, launch_tree(trace))
    assert (s.device, s.activities, s.delay, s.queue_depth_max, s.typical_queues) == (
        -1,
        0,
        None,
        0,
        [],
    )


# ---- real traces -----------------------------------------------------------------------------


def _real(path: Path) -> list[tuple[Trace, DeviceAnalysis, LaunchStats]]:
    trace = load_trace(str(path))
    out = []
    for d in analyze_trace(trace):
        assert d.timeline is not None and d.timeline.tree is not None
        s = launch_stats(trace, d, d.timeline.tree)
        # Empty queues are GPU idle time (every activity is queued before it starts).
        assert s.queue_empty_ns <= d.breakdown.idle_ns
        out.append((trace, d, s))
    return out


def test_hta_simple_add_launch_delay(shared_traces: Path) -> None:
    [(trace, _d, s)] = _real(shared_traces / "hta-critical-path/simple_add_trace.json.gz")
    # HTA's test asserts a 27 us "kernel launch delay" edge into fft2d_r2c_32x32<..., 0u,
    # false> (correlation 5597, in the measured alex_net forward): HTA's critical path weighs
    # that edge from the call's start. Its call lasts 15 us, so the delay after the call
    # returned (HTA's `cuda_kernel_launch_stats` definition, ours) is 12 us.
    fft = trace.correlation == 5597
    [row] = np.flatnonzero(fft & (trace.kind == EventKind.KERNEL)).tolist()
    [call_row] = np.flatnonzero(fft & (trace.kind == EventKind.RUNTIME)).tolist()
    assert trace.name_of(row).startswith("void fft2d_r2c_32x32<float, false, 0u, false>")
    [i] = np.flatnonzero(s.delay_rows == row).tolist()
    assert int(s.delay_ns[i]) == 12 * US
    assert int(trace.ts_ns[row] - trace.ts_ns[call_row]) == 27 * US
    assert s.delay is not None
    assert (s.activities, s.launched, s.delay.count) == (98, 98, 98)
    assert (s.delay.median_ns, s.delay.max_ns) == (3.5 * US, 874 * US)
    assert s.delay.p90_ns == pytest.approx(389 * US)
    assert (s.outlier_count, s.queue_depth_max, s.stream_depth_max) == (30, 6, {7: 6, 20: 2})
    assert s.outliers[0] == LaunchOutlier("aten::clamp_min_", 8, 370 * US, 724 * US, 3487 * US)
    # The first cudnn convolution's cudaLaunchKernel lasts 4.2 s (lazy module loading).
    assert (s.slow_calls, s.slow_call_excess_ns) == (18, 4_219_416 * US)
    assert s.slow_call_ops[0].op == "aten::cudnn_convolution"
    assert s.queue_empty_host_busy_ns == s.queue_empty_ns == 11_754_111 * US
    assert s.warnings == []


def test_kineto_resnet50_host_runs_far_ahead(shared_traces: Path) -> None:
    path = shared_traces / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    [(_trace, _d, s)] = _real(path)
    assert s.delay is not None
    assert (s.activities, s.launched, s.delay.count) == (9096, 9096, 9096)
    # Kernels start ms after their launch: the host queues hundreds ahead of the GPU.
    assert (s.delay.median_ns, s.delay.p90_ns, s.delay.max_ns) == (
        9_488 * US,
        26_073 * US,
        31_976 * US,
    )
    assert (s.outlier_count, s.queue_depth_max) == (0, 570)
    assert s.queue_empty_ns == 431_969 * US
    assert s.queue_empty_host_busy_ns == 425_923 * US
    assert s.queue_empty_share == pytest.approx(425_923 / 1_065_553)
    assert (s.slow_calls, s.slow_call_excess_ns) == (5429, 41_458 * US)
    [q] = s.typical_queues
    assert not q.exact and q.times_ns.shape[0] <= 500


@pytest.mark.parametrize(
    ("name", "count", "median_ns", "p90_ns", "max_ns", "outliers", "depth", "empty_ns"),
    [
        ("Falconsai_nsfw_image_detection__1016002", 156, 1708, 2054, 107079, 7, 5, 5354787),
        ("Qwen_Qwen1.5-0.5B-Chat__1016005", 1198, 1203795.5, 2773733.2, 3121709, 0, 112, 1042436),
        ("gaunernst_bert-small-uncased__1016001", 61, 1668, 1905, 2128, 0, 1, 3179855),
    ],
)
def test_tracelens_h100(
    shared_traces: Path,
    name: str,
    count: int,
    median_ns: float,
    p90_ns: float,
    max_ns: int,
    outliers: int,
    depth: int,
    empty_ns: int,
) -> None:
    [(_trace, _d, s)] = _real(shared_traces / f"tracelens-h100/{name}.json.gz")
    assert s.delay is not None
    assert (s.activities, s.delay.count, s.delay.max_ns) == (count, count, max_ns)
    assert s.delay.median_ns == pytest.approx(median_ns)
    assert s.delay.p90_ns == pytest.approx(p90_ns)
    assert (s.outlier_count, s.queue_depth_max, s.queue_empty_host_busy_ns) == (
        outliers,
        depth,
        empty_ns,
    )
    assert s.warnings == []


def test_zero_length_activities_have_no_queue(tmp_path: Path) -> None:
    """Every GPU activity at one instant (a degenerate trace): depth 0, never a crash."""
    b = TraceBuilder()
    b.device_properties([0])
    b.launch("ampere_sgemm_128x64_nn", cpu=(0, 5), gpu=(10, 10))
    b.launch("ampere_sgemm_128x64_nn", cpu=(6, 8), gpu=(10, 10))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    [d] = analyze_trace(trace)
    assert d.launch is not None
    assert d.launch.queue_depth_max == 0
    assert d.launch.typical_queues == []
