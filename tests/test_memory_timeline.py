"""The memory timeline from Kineto's `[memory]` events: analysis, `analyze` text/JSON, HTML plot.

The real traces (`tracelens-h100`, PyTorch 2.x on an H100) carry `Total Allocated` and
`Total Reserved` in each `[memory]` event's args; the peaks are checked against a plain JSON
scan of the same files.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.analysis.memory import memory_timelines
from badput.trace import load_trace
from synth import TraceBuilder, analyze_json, run_cli

TRACELENS = (
    "gaunernst_bert-small-uncased__1016001.json.gz",
    "Falconsai_nsfw_image_detection__1016002.json.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
)
_CUDA = 1  # args["Device Type"] of a GPU memory event (0 is the CPU)


def _scan(path: Path) -> dict[int, dict[str, Any]]:
    """Per CUDA device: event count, max Total Allocated/Reserved and when first reached (us)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    out: dict[int, dict[str, Any]] = {}
    for e in events:
        a = e.get("args", {})
        if e.get("name") != "[memory]" or a.get("Device Type") != _CUDA:
            continue
        if "Total Allocated" not in a or "Total Reserved" not in a:
            continue
        d = out.setdefault(
            a["Device Id"], {"events": 0, "alloc": -1, "alloc_ts": None, "res": -1, "res_ts": None}
        )
        d["events"] += 1
        if a["Total Allocated"] > d["alloc"] or (
            a["Total Allocated"] == d["alloc"] and e["ts"] < d["alloc_ts"]
        ):
            d["alloc"], d["alloc_ts"] = a["Total Allocated"], e["ts"]
        if a["Total Reserved"] > d["res"] or (
            a["Total Reserved"] == d["res"] and e["ts"] < d["res_ts"]
        ):
            d["res"], d["res_ts"] = a["Total Reserved"], e["ts"]
    return out


@pytest.mark.parametrize("name", TRACELENS)
def test_real_trace_peaks_match_the_events(shared_traces: Path, name: str) -> None:
    path = shared_traces / "tracelens-h100" / name
    expected = _scan(path)
    timelines = memory_timelines(load_trace(str(path)))
    assert {m.device for m in timelines} == set(expected) == {0}
    for m in timelines:
        e = expected[m.device]
        assert m.events == e["events"]
        assert m.peak_allocated_bytes == e["alloc"]
        assert m.peak_reserved_bytes == e["res"]
        # Kineto writes microseconds with three decimals: the ns are exact to rounding.
        assert m.peak_allocated_ts_ns == pytest.approx(e["alloc_ts"] * 1000, abs=1)
        assert m.peak_reserved_ts_ns == pytest.approx(e["res_ts"] * 1000, abs=1)
        assert int(m.allocated_bytes.max()) == e["alloc"]  # the drawn points keep the peaks
        assert int(m.reserved_bytes.max()) == e["res"]


def test_qwen_numbers(shared_traces: Path) -> None:
    """The largest of the three, pinned: 2,250 GPU events, peaks 2,088,508,416 / 2,629,828,608."""
    path = shared_traces / "tracelens-h100" / TRACELENS[2]
    (m,) = memory_timelines(load_trace(str(path)))
    assert (m.events, m.peak_allocated_bytes, m.peak_reserved_bytes) == (
        2250,
        2_088_508_416,
        2_629_828_608,
    )
    assert len(m.ts_ns) <= 1000  # decimated for drawing
    assert np.all(np.diff(m.ts_ns) >= 0)


def test_analyze_json_and_text(shared_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_traces / "tracelens-h100" / TRACELENS[2]
    expected = _scan(path)[0]
    doc = analyze_json(capsys, path)
    (dev,) = doc["devices"]
    mem = dev["memory"]
    assert mem["peak_allocated_bytes"] == expected["alloc"]
    assert mem["peak_reserved_bytes"] == expected["res"]
    assert mem["events"] == expected["events"]
    assert mem["peak_allocated_at_us"] == pytest.approx(expected["alloc_ts"], abs=1e-3)
    assert mem["start_us"] <= mem["peak_allocated_at_us"] <= mem["end_us"]
    code, out, _ = run_cli(capsys, "analyze", path)
    assert code == 0
    line = (
        f"peak allocated {expected['alloc'] / 2**30:.2f} GiB, peak reserved "
        f"{expected['res'] / 2**30:.2f} GiB ({expected['events']:,} allocator events)"
    )
    assert line == "peak allocated 1.95 GiB, peak reserved 2.45 GiB (2,250 allocator events)"
    assert f"memory: {line}" in re.sub(r"\s+", " ", out)
    code, out, _ = run_cli(capsys, "analyze", path, "--format", "markdown")
    assert code == 0
    assert f"\nMemory: {line}\n" in out


def test_html_plot(shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_traces / "tracelens-h100" / TRACELENS[2]
    out = tmp_path / "r.html"
    code, _, err = run_cli(capsys, "report", path, "--out", out)
    assert code == 0, err
    html = out.read_text()
    (svg,) = re.findall(r'<svg class="plot memory-plot".*?</svg>', html)
    polylines = re.findall(r'<polyline class="memory-(\w+)"[^>]*points="([^"]*)"', svg)
    assert [name for name, _ in polylines] == ["reserved", "allocated"]
    for _, points in polylines:
        xy = [tuple(map(float, p.split(","))) for p in points.split()]
        assert len(xy) <= 2 * 1000  # a step curve: two points per kept event at most
        assert all(70 <= x <= 1060.01 and 8 - 0.01 <= y <= 144.01 for x, y in xy)
    # The highest point of the reserved curve is the top of the plot (its peak is the axis max).
    reserved = [float(p.split(",")[1]) for p in polylines[0][1].split()]
    assert min(reserved) == pytest.approx(8.0)
    assert "reserved (peak 2.45 GiB)" in svg or "reserved (peak 2.45 GiB)" in html


def test_legacy_trace_has_no_memory(
    shared_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 2021 ResNet-50 trace's `[memory]` events carry only `Bytes`: no timeline."""
    path = shared_traces / "kineto-resnet50" / "worker0.1623143089861.pt.trace.json.gz"
    assert memory_timelines(load_trace(str(path))) == []
    doc = analyze_json(capsys, path)
    assert all(d["memory"] is None for d in doc["devices"])


def _synthetic(tmp_path: Path, n: int) -> tuple[Path, list[int], list[int]]:
    """A trace with one kernel and `n` GPU memory events (plus CPU ones, which must not count)."""
    rng = np.random.default_rng(7)
    alloc = rng.integers(1 << 20, 1 << 30, n).tolist()
    res = [a + int(x) for a, x in zip(alloc, rng.integers(0, 1 << 28, n).tolist(), strict=True)]
    b = TraceBuilder()
    b.device_properties([0])
    b.kernel("k", 0, 10 * n)
    for i in range(n):
        e = b.instant("[memory]", 10 * i)
        e["args"] = {
            "Total Allocated": alloc[i],
            "Total Reserved": res[i],
            "Bytes": 512,
            "Device Id": 0,
            "Device Type": _CUDA,
            "Addr": 1,
        }
    for i in range(5):  # host memory: larger totals, on the CPU
        e = b.instant("[memory]", 10 * i + 5)
        e["args"] = {
            "Total Allocated": 1 << 40,
            "Total Reserved": 1 << 40,
            "Bytes": 4,
            "Device Id": -1,
            "Device Type": 0,
        }
    return b.write(tmp_path / "t.json"), alloc, res


@pytest.mark.parametrize("n", [1, 7, 5000])
def test_synthetic_peaks_and_decimation(tmp_path: Path, n: int) -> None:
    path, alloc, res = _synthetic(tmp_path, n)
    (m,) = memory_timelines(load_trace(str(path)), max_points=200)
    assert m.events == n
    assert m.peak_allocated_bytes == max(alloc) and m.peak_reserved_bytes == max(res)
    assert len(m.ts_ns) == n if n <= 200 else len(m.ts_ns) <= 200
    assert int(m.allocated_bytes.max()) == max(alloc) and int(m.reserved_bytes.max()) == max(res)
    if n <= 200:
        assert m.allocated_bytes.tolist() == alloc  # nothing dropped below the limit


def _decimate_by_sort(
    ts: np.ndarray, alloc: np.ndarray, res: np.ndarray, max_points: int
) -> list[int]:
    """The decimation's rule by a sort: per bucket, the first point with each curve's most."""
    buckets = max(1, (max_points - 2) // 2)
    span = max(int(ts[-1] - ts[0]), 1)
    b = np.minimum((ts - ts[0]) * buckets // span, buckets - 1)
    keep = {0, len(ts) - 1}
    for values in (alloc, res):
        order = np.lexsort((-values, b))
        first = np.ones(len(order), dtype=bool)
        first[1:] = b[order][1:] != b[order][:-1]
        keep.update(order[first].tolist())
    return sorted(keep)


@pytest.mark.parametrize("seed", range(8))
def test_decimation_keeps_each_buckets_first_highest_point(seed: int) -> None:
    # Times in runs of equal values and few distinct totals: ties everywhere.
    from badput.analysis.memory import _decimate

    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 4000))
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    alloc = rng.integers(0, 6, n).astype(np.int64)
    res = rng.integers(0, 3, n).astype(np.int64) + alloc
    points = int(rng.integers(4, 300))
    got = _decimate(ts, alloc, res, points).tolist()
    assert got == _decimate_by_sort(ts, alloc, res, points)
    assert len(got) <= points


def test_totals_on_different_rows_and_devices(tmp_path: Path) -> None:
    # Events with one total only are left out; two GPUs, each in time order whatever the
    # file's order.
    b = TraceBuilder()
    b.device_properties([0, 1])
    b.kernel("k", 0, 100)
    rows = [(40, 0, None, 3), (30, 0, 5, 9), (10, 0, 7, 8), (20, 1, 4, 6), (50, 1, 2, None)]
    for ts, dev, alloc, res in rows:
        e = b.instant("[memory]", ts)
        e["args"] = {"Bytes": 1, "Device Id": dev, "Device Type": _CUDA}
        if alloc is not None:
            e["args"]["Total Allocated"] = alloc
        if res is not None:
            e["args"]["Total Reserved"] = res
    m0, m1 = memory_timelines(load_trace(str(b.write(tmp_path / "t.json"))))
    assert (m0.device, m0.allocated_bytes.tolist(), m0.reserved_bytes.tolist()) == (
        0,
        [7, 5],
        [8, 9],
    )
    assert (m0.ts_ns - m0.start_ns).tolist() == [0, 20_000]  # (the builder's clock starts late)
    assert m0.peak_reserved_ts_ns - m0.start_ns == 20_000
    assert (m1.device, m1.events, m1.allocated_bytes.tolist(), m1.reserved_bytes.tolist()) == (
        1,
        1,
        [4],
        [6],
    )
