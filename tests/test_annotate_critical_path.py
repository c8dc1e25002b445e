"""`badput annotate`: the critical-path track and its flow arrows (issue 19, views).

Synthetic traces (`tests/synth.py`) whose paths `tests/test_critical_path.py` works out by
hand: the slices of the "critical path" track add up to the path's length, and the flow
arrows bind to the original host thread and GPU stream events.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from badput.analysis import analyze_trace
from badput.report.perfetto import (
    CRITICAL_PATH_TID,
    CRITICAL_PATH_TRACK,
    annotate_trace,
    annotation_events,
    badput_pid,
)
from badput.trace import load_trace
from synth import TraceBuilder

US = 1000
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
HOST = (4242, 4242)  # the builder's host pid/tid
STREAM = (0, 7)  # GPU 0, stream 7


def _launch_bound(b: TraceBuilder) -> int:
    # Path (test_critical_path): launch delay 30, kernel 2, gap 8, kernel 2: 42 us.
    b.launch(GEMM, cpu=(0, 10), gpu=(30, 32))
    b.launch(GEMM, cpu=(12, 22), gpu=(40, 42))
    return 42 * US


def _sync_bound(b: TraceBuilder) -> int:
    # Path: launch delay 5, kernel 500, sync (kernel end -> the sync call's end), op 10: 515 us.
    b.profiler_step(1, 0, 520)
    b.launch(GEMM, cpu=(0, 1), gpu=(5, 505))
    corr = b.runtime("cudaDeviceSynchronize", 2, 510)
    row = b.cuda_sync("Context Sync", 503, 510)
    row["args"]["correlation"] = corr
    row["args"]["External id"] = corr
    b.cpu_op("aten::mul", 510, 520)
    return 515 * US


def _annotated(tmp_path: Path, build: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    b = TraceBuilder()
    b.device_properties([0])
    length = build(b)
    src = b.write(tmp_path / "t.json")
    out = tmp_path / "annotated.json"
    annotate_trace(str(src), str(out))
    original = json.loads(src.read_text(), parse_float=Decimal)
    annotated = json.loads(out.read_text(), parse_float=Decimal)
    return original, annotated, length


def _ns(value: Decimal | int) -> int:
    ns = Decimal(value) * 1000
    assert ns == ns.to_integral_value(), value
    return int(ns)


def _enclosing(events: list[dict[str, Any]], pid: Any, tid: Any, at: int) -> list[str]:
    """Names of the original slices on (pid, tid) that hold the time `at` (ns)."""
    return [
        e["name"]
        for e in events
        if e.get("ph") == "X"
        and (e["pid"], e["tid"]) == (pid, tid)
        and _ns(e["ts"]) <= at < _ns(e["ts"]) + _ns(e["dur"])
    ]


@pytest.mark.parametrize("build", [_launch_bound, _sync_bound])
def test_track_adds_up_to_the_path(tmp_path: Path, build: Any) -> None:
    original, annotated, length = _annotated(tmp_path, build)
    pid = badput_pid(0, [4242, 0])
    added = annotated["traceEvents"][len(original["traceEvents"]) :]
    names = {
        (e["tid"], e["args"]["name"])
        for e in added
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }
    assert (CRITICAL_PATH_TID, CRITICAL_PATH_TRACK) in names
    sort = [e for e in added if e["name"] == "thread_sort_index" and e["tid"] == CRITICAL_PATH_TID]
    assert [e["args"]["sort_index"] for e in sort] == [CRITICAL_PATH_TID]

    slices = [e for e in added if e["ph"] == "X" and e["tid"] == CRITICAL_PATH_TID]
    assert slices and all(e["pid"] == pid for e in slices)
    total = sum(Decimal(e["dur"]) for e in slices)
    assert abs(total - Decimal(length) / 1000) <= Decimal("0.001") * len(slices)
    assert sum(_ns(e["dur"]) for e in slices) == length  # exact here: whole ns
    for e in slices:
        part, _, event = e["name"].partition(": ")
        assert event == e["args"]["event"]
        assert part in {"host", "launch_delay", "gpu_compute", "kernel_gap"}
        assert _ns(e["args"]["weight_us"]) == _ns(e["dur"]) > 0
    # Slices follow each other in time (the path's order).
    starts = [_ns(e["ts"]) for e in slices]
    assert starts == sorted(starts)


def test_launch_bound_slices(tmp_path: Path) -> None:
    original, annotated, _ = _annotated(tmp_path, _launch_bound)
    slices = [
        e
        for e in annotated["traceEvents"][len(original["traceEvents"]) :]
        if e["ph"] == "X" and e["tid"] == CRITICAL_PATH_TID
    ]
    assert [(e["name"], e["args"]["edge"], _ns(e["dur"]) // US) for e in slices] == [
        (f"launch_delay: {GEMM}", "launch_delay", 30),
        (f"gpu_compute: {GEMM}", "gpu", 2),
        (f"kernel_gap: {GEMM}", "kernel_gap", 8),
        (f"gpu_compute: {GEMM}", "gpu", 2),
    ]
    # Back to back: each slice starts where the previous ended.
    for a, b in pairwise(slices):
        assert _ns(a["ts"]) + _ns(a["dur"]) == _ns(b["ts"])


@pytest.mark.parametrize("build", [_launch_bound, _sync_bound])
def test_flows_bind_to_the_original_events(tmp_path: Path, build: Any) -> None:
    original, annotated, _ = _annotated(tmp_path, build)
    events = original["traceEvents"]
    added = annotated["traceEvents"][len(events) :]
    flows = [e for e in added if e.get("cat") == "badput-critical-path"]
    assert flows
    assert all(e["name"] == "critical path" and e["bp"] == "e" for e in flows)
    by_id: dict[int, dict[str, dict[str, Any]]] = {}
    for e in flows:
        assert e["ph"] in ("s", "f")
        assert e["ph"] not in by_id.setdefault(e["id"], {})
        by_id[e["id"]][e["ph"]] = e
    assert all(set(pair) == {"s", "f"} for pair in by_id.values())
    # Ids above the trace's own flow ids (its correlation ids).
    own = {e["id"] for e in events if e.get("ph") in ("s", "f")}
    assert min(by_id) > max(own)
    # The launch delay: from the launch call on the host thread to the kernel on the stream.
    first = by_id[min(by_id)]
    assert (first["s"]["pid"], first["s"]["tid"]) == HOST
    assert (first["f"]["pid"], first["f"]["tid"]) == STREAM
    assert "cudaLaunchKernel" in _enclosing(events, *HOST, _ns(first["s"]["ts"]))
    assert GEMM in _enclosing(events, *STREAM, _ns(first["f"]["ts"]))
    for pair in by_id.values():  # every end lies inside an original slice of its thread
        for e in pair.values():
            assert _enclosing(events, e["pid"], e["tid"], _ns(e["ts"]))


def test_sync_flow_binds_inside_the_events_it_joins(tmp_path: Path) -> None:
    original, annotated, _ = _annotated(tmp_path, _sync_bound)
    events = original["traceEvents"]
    flows = [
        e for e in annotated["traceEvents"][len(events) :] if e.get("cat") == "badput-critical-path"
    ]
    # The sync edge leaves the kernel's end and enters the sync call's end: both are end
    # nodes, drawn 1 ns inside the event so that the viewer binds them to its slice.
    s = next(e for e in flows if e["ph"] == "s" and (e["pid"], e["tid"]) == STREAM)
    f = next(e for e in flows if e["ph"] == "f" and e["id"] == s["id"])
    assert (f["pid"], f["tid"]) == HOST
    base = _ns(next(e["ts"] for e in events if e.get("name") == GEMM and e["ph"] == "X"))
    assert _ns(s["ts"]) == base + 500 * US - 1  # kernel [5, 505): its end, less 1 ns
    assert _enclosing(events, *STREAM, _ns(s["ts"])) == [GEMM]
    assert "cudaDeviceSynchronize" in _enclosing(events, *HOST, _ns(f["ts"]))
    call = next(e for e in events if e.get("name") == "cudaDeviceSynchronize")
    assert _ns(f["ts"]) == _ns(call["ts"]) + _ns(call["dur"]) - 1


def test_no_track_without_the_trace_or_a_path(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.device_properties([0])
    _launch_bound(b)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    analyses = analyze_trace(trace)
    found: list[list[Any]] = [[] for _ in analyses]

    def path_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            e
            for e in events
            if e.get("tid") == CRITICAL_PATH_TID or e.get("cat") == "badput-critical-path"
        ]

    assert path_events(annotation_events(analyses, found, trace.pid, trace=trace))
    assert path_events(annotation_events(analyses, found, trace.pid)) == []
    bare = [dataclasses.replace(d, critical_path=None) for d in analyses]
    assert path_events(annotation_events(bare, found, trace.pid, trace=trace)) == []


def test_heaviest_edges_kept_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import badput.report.perfetto as perfetto

    b = TraceBuilder()
    b.device_properties([0])
    _launch_bound(b)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    analyses = analyze_trace(trace)
    monkeypatch.setattr(perfetto, "MAX_PATH_SLICES", 2)
    events = annotation_events(analyses, [[] for _ in analyses], trace.pid, trace=trace)
    mine = [e for e in events if e.get("tid") == CRITICAL_PATH_TID and e["ph"] in ("X", "i")]
    slices = [e for e in mine if e["ph"] == "X"]
    # The two heaviest of 30, 2, 8, 2 us, in path order.
    assert [e["args"]["edge"] for e in slices] == ["launch_delay", "kernel_gap"]
    (note,) = [e for e in mine if e["ph"] == "i"]
    assert note["args"]["left_out"] == 2
