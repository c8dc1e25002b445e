"""badput's numbers against the numbers other tools published for real GPU traces."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from badput.analysis import DeviceAnalysis, analyze_trace
from badput.trace import load_trace
from badput.trace.model import EventKind

RESNET = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
TRACELENS = [
    "Falconsai_nsfw_image_detection__1016002",
    "Qwen_Qwen1.5-0.5B-Chat__1016005",
    "gaunernst_bert-small-uncased__1016001",
]


def _one(path: Path) -> DeviceAnalysis:
    [device] = analyze_trace(load_trace(str(path)))
    return device


# ---- TraceLens (AMD-AGI/TraceLens) gpu_timeline.csv on three H100 inference traces ----------


def _tracelens_us(shared: Path, name: str) -> dict[str, float]:
    path = shared / "tracelens-h100" / f"{name}_perf_report_csvs" / "gpu_timeline.csv"
    with path.open() as f:
        return {row["type"]: float(row["time ms"]) * 1000 for row in csv.DictReader(f)}


@pytest.mark.parametrize("name", TRACELENS)
def test_tracelens_window_busy_idle(shared_traces: Path, name: str) -> None:
    d = _one(shared_traces / "tracelens-h100" / f"{name}.json.gz")
    ref = _tracelens_us(shared_traces, name)
    window_us = d.window_ns / 1000
    tol = 0.001 * window_us  # 0.1 % of the window
    assert d.window_source == "gpu_steps"
    assert window_us == pytest.approx(ref["total_time"], abs=tol)
    assert d.breakdown.busy_ns / 1000 == pytest.approx(ref["busy_time"], abs=tol)
    assert d.breakdown.idle_ns / 1000 == pytest.approx(ref["idle_time"], abs=tol)


@pytest.mark.parametrize("name", TRACELENS)
def test_tracelens_compute(shared_traces: Path, name: str) -> None:
    d = _one(shared_traces / "tracelens-h100" / f"{name}.json.gz")
    ref = _tracelens_us(shared_traces, name)
    compute_us = d.breakdown.compute_ns / 1000
    assert compute_us == pytest.approx(ref["computation_time"], rel=0.01)


@pytest.mark.parametrize("name", TRACELENS)
def test_tracelens_counts_memset_as_computation(shared_traces: Path, name: str) -> None:
    """The documented difference: TraceLens's computation includes memset; badput's memory
    holds memcpy and memset. Moving badput's exposed memset time into compute gives TraceLens's
    computation, and badput's memory minus it gives TraceLens's exposed memcpy."""
    d = _one(shared_traces / "tracelens-h100" / f"{name}.json.gz")
    ref = _tracelens_us(shared_traces, name)
    tol = 0.001 * d.window_ns / 1000
    memset_us = d.breakdown.memory_ns / 1000 - ref["exposed_memcpy_time"]
    assert memset_us >= -tol
    assert d.breakdown.compute_ns / 1000 + memset_us == pytest.approx(
        ref["computation_time"], abs=tol
    )


def test_tracelens_memset_makes_the_difference(shared_traces: Path) -> None:
    # Falconsai has two memsets and no memcpy: all of badput's memory time is memset there.
    name = TRACELENS[0]
    trace = load_trace(str(shared_traces / "tracelens-h100" / f"{name}.json.gz"))
    assert int((trace.kind == EventKind.MEMSET).sum()) == 2
    assert int((trace.kind == EventKind.MEMCPY).sum()) == 0
    [d] = analyze_trace(trace)
    assert d.breakdown.memory_ns > 0
    assert d.breakdown.compute_ns < _tracelens_us(shared_traces, name)["computation_time"] * 1000


# ---- TensorBoard profiler plugin, ResNet50 on V100, first window (ProfilerStep#5-#10) --------


def _plugin_reference(shared: Path) -> tuple[dict[str, float], list[list[object]]]:
    path = shared / "kineto-resnet50" / "tb_plugin_reference_workers0.jsonl"
    first = json.loads(path.read_text().splitlines()[0])
    overview = {c["name"]: c["value"] for c in first["performance"][0]["children"]}
    overview["Average Step Time"] = first["performance"][0]["value"]
    rows = [[x for x in r if not (isinstance(x, str) and x.startswith("<"))]
            for r in first["steps"]["rows"]]  # fmt: skip
    return overview, rows


@pytest.fixture(scope="module")
def resnet(shared_traces: Path) -> DeviceAnalysis:
    return _one(shared_traces / RESNET)


def test_resnet_steps_match_plugin(shared_traces: Path, resnet: DeviceAnalysis) -> None:
    _, rows = _plugin_reference(shared_traces)
    assert [s.name for s in resnet.steps] == [f"ProfilerStep#{r[0]}" for r in rows]
    for step, (_, kernel, memcpy, memset, runtime, loader, cpu, other) in zip(
        resnet.steps, rows, strict=True
    ):
        b, c = step.breakdown, step.idle_causes
        total = kernel + memcpy + memset + runtime + loader + cpu + other  # type: ignore[operator]
        got = {
            "total": step.dur_ns,
            "kernel": b.compute_ns,
            "memory": b.memory_ns,
            "runtime": c.runtime_ns,
            "dataloader": c.dataloader_ns,
            "cpu": c.cpu_ns,
            "other": c.other_ns,
        }
        want = {
            "total": total,
            "kernel": kernel,
            "memory": memcpy + memset,  # type: ignore[operator]
            "runtime": runtime,
            "dataloader": loader,
            "cpu": cpu,
            "other": other,
        }
        for key, value in want.items():
            assert got[key] / 1000 == pytest.approx(value, abs=1.0), (step.name, key)


def test_resnet_overview_matches_plugin(shared_traces: Path, resnet: DeviceAnalysis) -> None:
    overview, _ = _plugin_reference(shared_traces)
    n = len(resnet.steps)
    stats = resnet.step_time_stats_ns()
    assert stats is not None
    mean_step_us = stats[0] / 1000
    assert mean_step_us == pytest.approx(overview["Average Step Time"], rel=0.001)
    assert resnet.goodput is not None
    assert 100 * resnet.goodput == pytest.approx(55.51, abs=0.1)
    c = resnet.idle_causes
    for key, ns in (
        ("Runtime", c.runtime_ns),
        ("DataLoader", c.dataloader_ns),
        ("CPU Exec", c.cpu_ns),
        ("Other", c.other_ns),
    ):
        assert ns / n / 1000 == pytest.approx(overview[key], rel=0.001), key
    assert resnet.breakdown.memory_ns / n / 1000 == pytest.approx(
        overview["Memcpy"] + overview["Memset"], abs=1.0
    )
    assert resnet.breakdown.communication_ns == 0


def test_resnet_second_window(shared_traces: Path) -> None:
    d = _one(shared_traces / "kineto-resnet50/worker0.1623143566756.pt.trace.json.gz")
    assert [s.name for s in d.steps] == [f"ProfilerStep#{k}" for k in range(16, 22)]
    assert d.breakdown.total_ns == d.window_ns
    assert d.goodput is not None and 0.5 < d.goodput < 0.7


# ---- Kineto's out-of-order bug traces and the oldest schema -----------------------------------


def test_kineto_edge_before_and_after_fix_agree(shared_traces: Path) -> None:
    before = _one(shared_traces / "kineto-edge/before_fix_trace.json")
    after = _one(shared_traces / "kineto-edge/after_fix_trace.json")
    assert before.breakdown.compute_ns > 0
    assert before.breakdown.compute_ns == pytest.approx(after.breakdown.compute_ns, rel=0.01)
    # The cuda_sync records (stream -1) are not GPU activity: only the one kernel is busy.
    assert before.breakdown.busy_ns == 20  # the kernel's 0.02 us


def test_oldest_schema_reads(shared_traces: Path) -> None:
    trace = load_trace(str(shared_traces / "kineto-edge/gpu_metrics_input.json"))
    assert trace.gpu_names[0] == "Tesla V100-DGXS-32GB"
    [d] = analyze_trace(trace)
    assert d.gpu == "Tesla V100-DGXS-32GB"
    assert int((trace.kind == EventKind.KERNEL).sum()) == 30
    assert d.breakdown.compute_ns > 0


# ---- PARAM DLRM, 8 ranks, NCCL ----------------------------------------------------------------


def test_dlrm_ranks_and_nccl(shared_traces: Path) -> None:
    paths = sorted((shared_traces / "param-dlrm-8rank").glob("*.json.gz"))
    assert len(paths) == 8
    comm_ms = {}
    for path in paths:
        d = _one(path)
        assert d.world_size == 8
        assert d.rank is not None and d.device == d.rank
        assert d.gpu == "Tesla V100-SXM2-32GB"
        assert d.comm.total_ns > 0
        assert d.breakdown.communication_ns <= d.comm.total_ns
        comm_ms[d.rank] = d.comm.total_ns / 1e6
    assert sorted(comm_ms) == list(range(8))
    # MANIFEST.md: NCCL time differs by rank, about 1.7 to 11.3 ms.
    assert min(comm_ms.values()) == pytest.approx(1.7, abs=0.1)
    assert max(comm_ms.values()) == pytest.approx(11.3, abs=0.1)
