"""The public surface, pinned: package exports, CLI commands and options, the JSON schema.

A change here is a change for users: update these lists on purpose, never by accident.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer

import badput
import badput.analysis
import badput.trace
from badput.cli.app import app, main
from conftest import SHARED_TRACES, reference

SHARED = SHARED_TRACES
RESNET = SHARED / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"


def test_badput_all() -> None:
    assert sorted(badput.__all__) == [
        "BadputError",
        "Meter",
        "MeterWarning",
        "TraceFormatError",
        "UsageError",
        "__version__",
        "pin_to_gpu_numa",
        "worker_init_fn",
    ]
    for name in badput.__all__:
        assert hasattr(badput, name)
    assert isinstance(badput.__version__, str) and badput.__version__


def test_trace_all() -> None:
    assert sorted(badput.trace.__all__) == [
        "EventKind",
        "FlowPhase",
        "NO_ID",
        "Trace",
        "find_traces",
        "load_trace",
    ]
    for name in badput.trace.__all__:
        assert hasattr(badput.trace, name)


def test_analysis_all() -> None:
    assert sorted(badput.analysis.__all__) == [
        "Breakdown",
        "COLLECTIVE_TYPES",
        "CollectiveStat",
        "CollectiveWait",
        "Collectives",
        "CommSummary",
        "CrossRank",
        "DeviceAnalysis",
        "Extreme",
        "IdleCauses",
        "IntervalSet",
        "KernelStat",
        "RankSummary",
        "StepResult",
        "Straggler",
        "Timeline",
        "WindowSource",
        "WindowSpec",
        "analyze_trace",
        "bus_factor",
        "collective_stats",
        "collective_type",
        "collectives",
        "cross_rank",
        "link_peak_gbps",
        "summarize_rank",
    ]
    for name in badput.analysis.__all__:
        assert hasattr(badput.analysis, name)


def test_integrations_all() -> None:
    import badput.integrations
    import badput.profiler

    assert sorted(badput.profiler.__all__) == ["TraceHandler", "TraceResult", "on_trace_ready"]
    assert sorted(badput.integrations.__all__) == ["LoopTimer", "scalar_metrics"]
    for module in (badput.profiler, badput.integrations):
        for name in module.__all__:
            assert hasattr(module, name)


def test_error_tree() -> None:
    assert issubclass(badput.TraceFormatError, badput.BadputError)
    assert issubclass(badput.UsageError, badput.BadputError)


def test_enum_values() -> None:
    from badput.analysis import WindowSource
    from badput.trace import EventKind

    assert [str(s) for s in WindowSource] == [
        "gpu_steps",
        "cpu_steps",
        "gpu_activity",
        "user",
        "none",
    ]
    assert {k.name: int(k) for k in EventKind} == {
        "KERNEL": 0,
        "MEMCPY": 1,
        "MEMSET": 2,
        "CPU_OP": 3,
        "RUNTIME": 4,
        "DRIVER": 5,
        "ANNOTATION": 6,
        "GPU_ANNOTATION": 7,
        "PYTHON": 8,
        "SYNC": 9,
        "FLOW": 10,
        "OTHER": 11,
        "MEMORY": 12,
    }


# ---- CLI ---------------------------------------------------------------------------------------


def test_cli_commands(capsys: pytest.CaptureFixture[str]) -> None:
    command = typer.main.get_command(app)
    assert sorted(command.commands) == [  # type: ignore[attr-defined]
        "analyze",
        "annotate",
        "bench",
        "diff",
        "doctor",
        "estimate",
        "explain",
        "memory",
        "report",
        "roofline",
        "run",
        "telemetry",
        "version",
    ]
    estimate = command.commands["estimate"]  # type: ignore[attr-defined]
    assert sorted(estimate.commands) == ["cost", "gpus", "infer", "memory", "train"]
    bench = command.commands["bench"]  # type: ignore[attr-defined]
    assert sorted(bench.commands) == ["ab", "check", "history", "ingest", "run"]
    telemetry = command.commands["telemetry"]  # type: ignore[attr-defined]
    assert sorted(telemetry.commands) == ["record"]
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\banalyze\b", out)
    assert re.search(r"\bversion\b", out)


def test_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == badput.__version__


def test_analyze_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    for option in (
        "--format",
        "--out",
        "--top",
        "--window",
        "--executor",
        "--jobs",
        "--strict",
        "--telemetry",
        "--classify",
    ):
        assert option in out, option
    analyze = typer.main.get_command(app).commands["analyze"]  # type: ignore[attr-defined]
    params = {p.name: p for p in analyze.params}
    assert sorted(params) == [
        "address",
        "append",
        "classify",
        "executor",
        "jobs",
        "max_step_time_ms",
        "min_goodput",
        "out",
        "output_format",
        "paths",
        "step_range",
        "strict",
        "telemetry",
        "top",
        "window",
    ]
    assert set(params["output_format"].opts) == {"--format", "-f"}
    assert set(params["out"].opts) == {"--out", "-o"}
    assert params["top"].opts == ["--top"] and params["top"].default == 10
    assert params["window"].opts == ["--window"] and params["window"].default is None
    assert params["step_range"].opts == ["--step-range"] and params["step_range"].default is None
    assert params["paths"].required
    assert params["executor"].opts == ["--executor"] and params["executor"].default == "local"
    assert set(params["jobs"].opts) == {"--jobs", "-j"} and params["jobs"].default is None
    assert params["address"].opts == ["--address"] and params["address"].default is None
    assert params["strict"].opts == ["--strict"] and params["strict"].default is False


def test_format_choices(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["analyze", str(tmp_path), "--format", "yaml"])
    assert code == 2
    assert "yaml" in capsys.readouterr().err


# ---- JSON schema ------------------------------------------------------------------------------

TOP_KEYS = {
    "schema", "badput_version", "traces", "findings", "devices", "ranks", "jobs", "collectives",
}  # fmt: skip
JOB_KEYS = {"ranks", "world_size", "traces", "notes", "cross_rank"}
RANKS_KEYS = {"count", "per_rank", "extremes", "stragglers", "matching", "failed", "warnings"}
PER_RANK_KEYS = {
    "rank",
    "world_size",
    "trace",
    "device",
    "gpu",
    "goodput",
    "window_start_us",
    "window_us",
    "breakdown_us",
    "idle_causes_us",
    "comm_total_us",
    "comm_exposed_us",
    "step_median_us",
    "step_dur_us",
    "straggler_score",
    "wait_caused_us",
    "waited_us",
    "clock_offset_us",
}
EXTREME_KEYS = {"category", "min", "min_rank", "median", "max", "max_rank"}
STRAGGLER_KEYS = {"rank", "score", "wait_caused_us", "wait_per_step_us", "last_share"}
COLLECTIVE_KEYS = {
    "type",
    "rank",
    "trace",
    "device",
    "count",
    "total_us",
    "exposed_us",
    "msg_bytes",
    "algbw_gbps",
    "busbw_gbps",
    "link_peak_gbps",
    "busbw_of_peak",
}
FINDING_KEYS = {
    "id",
    "title",
    "severity",
    "trace",
    "rank",
    "device",
    "evidence",
    "savings_us",
    "savings_pct",
    "critical_path_savings_us",
    "fix",
    "refs",
}
TRACE_KEYS = {"path", "rank", "world_size", "events", "warnings"}
DEVICE_KEYS = {
    "trace",
    "rank",
    "world_size",
    "device",
    "gpu",
    "window_start_us",
    "window_us",
    "window_source",
    "goodput",
    "breakdown_us",
    "idle_causes_us",
    "comm",
    "step_time_us",
    "steps",
    "dropped_steps",
    "kernels",
    "kernel_total_us",
    "short_kernel_share",
    "warnings",
    "findings",
    "memory",
    "ops",
    "op_categories",
    "modules",
    "efficiency",
    "attribution",
    "launch",
    "critical_path",
}
LAUNCH_KEYS = {
    "delay_us", "outliers", "queue_empty_share", "queue_depth_max", "slow_launch_calls",
    "slow_launch_excess_us", "warnings",
}  # fmt: skip
# Issue 19's contract: the breakdown's parts, which add up to the length.
CRITICAL_PATH_KEYS = {"length_us", "breakdown_us", "top_ops", "steps"}
BREAKDOWN_PARTS = {
    "host", "launch_delay", "gpu_compute", "gpu_communication", "gpu_memory", "kernel_gap",
    "sync_wait",
}  # fmt: skip
OP_KEYS = {
    "op", "category", "input_dims", "input_types", "count", "kernel_time_us", "gflops", "bytes",
    "precision", "tflops_per_s", "tb_per_s", "intensity", "bound", "roof_share", "module",
    "kernels", "no_model_reason",
}  # fmt: skip
MODULE_KEYS = {"path", "depth", "kernel_time_us", "count"}
EFFICIENCY_KEYS = {
    "modelled_flops", "modelled_kernel_share", "precision", "peak_tflops", "gpu_spec", "mfu",
    "waterfall", "notes",
}  # fmt: skip
STAGE_KEYS = {"stage", "tflops", "share_of_peak"}
ATTRIBUTION_KEYS = {
    "attributed_us", "unattributed_us", "share", "reasons", "unmodelled_us", "has_shapes",
}  # fmt: skip
BREAKDOWN_KEYS = {"compute", "communication", "memory", "idle"}
CAUSE_KEYS = {"runtime", "dataloader", "cpu", "other"}
COMM_KEYS = {"total_us", "overlapped_us"}
STEP_TIME_KEYS = {"mean", "median", "max"}
STEP_KEYS = {"name", "start_us", "dur_us", "breakdown_us", "idle_causes_us"}
KERNEL_KEYS = {"name", "category", "evidence", "count", "total_us", "mean_us"}


@pytest.fixture(scope="module")
def resnet_trace() -> Path:
    return reference(RESNET)


def _report(capsys: pytest.CaptureFixture[str], *argv: object) -> dict[str, Any]:
    code = main(["analyze", *(str(a) for a in argv), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_json_schema(resnet_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _report(capsys, resnet_trace)
    assert set(doc) == TOP_KEYS
    assert doc["schema"] == "badput.analysis/1"
    assert doc["badput_version"] == badput.__version__
    assert doc["findings"], "the demo trace has findings"
    for finding in doc["findings"]:
        assert set(finding) == FINDING_KEYS
        assert finding["severity"] in {"high", "medium", "low"}
        for evidence in finding["evidence"].values():
            assert set(evidence) == {"value", "unit"}
    savings = [f["savings_us"] for f in doc["findings"]]
    assert savings == sorted(savings, reverse=True)
    assert len(doc["traces"]) == 1
    assert set(doc["traces"][0]) == TRACE_KEYS
    assert doc["traces"][0]["path"] == str(resnet_trace)
    assert doc["devices"]
    for dev in doc["devices"]:
        assert set(dev) == DEVICE_KEYS
        assert set(dev["breakdown_us"]) == BREAKDOWN_KEYS
        assert set(dev["idle_causes_us"]) == CAUSE_KEYS
        assert set(dev["comm"]) == COMM_KEYS
        assert set(dev["step_time_us"]) == STEP_TIME_KEYS
        assert dev["steps"]
        for step in dev["steps"]:
            assert set(step) == STEP_KEYS
            assert set(step["breakdown_us"]) == BREAKDOWN_KEYS
            assert set(step["idle_causes_us"]) == CAUSE_KEYS
        assert len(dev["kernels"]) == 10  # --top defaults to 10
        for kernel in dev["kernels"]:
            assert set(kernel) == KERNEL_KEYS
        assert isinstance(dev["dropped_steps"], list)
        assert isinstance(dev["warnings"], list)
        assert dev["window_source"] == "cpu_steps"
        assert dev["ops"] and all(set(op) == OP_KEYS for op in dev["ops"])
        assert all(set(m) == MODULE_KEYS for m in dev["modules"])
        assert all(set(c) == {"category", "kernel_time_us", "count"} for c in dev["op_categories"])
        assert set(dev["efficiency"]) == EFFICIENCY_KEYS
        assert all(set(s) == STAGE_KEYS for s in dev["efficiency"]["waterfall"])
        assert set(dev["attribution"]) == ATTRIBUTION_KEYS
        assert set(dev["launch"]) == LAUNCH_KEYS
        assert set(dev["launch"]["delay_us"]) == {"median", "p90", "max"}
        cp = dev["critical_path"]
        assert set(cp) == CRITICAL_PATH_KEYS and set(cp["breakdown_us"]) == BREAKDOWN_PARTS
        # Integer microseconds of integer nanoseconds: the parts add up within their rounding.
        parts = sum(float(v) for v in cp["breakdown_us"].values())
        assert abs(parts - float(cp["length_us"])) <= 0.0005 * len(BREAKDOWN_PARTS)
        assert cp["top_ops"] and all(set(o) == {"op", "on_path_us"} for o in cp["top_ops"])
        assert [s["name"] for s in cp["steps"]] == [s["name"] for s in dev["steps"]]
        assert all(set(s) == {"name", "length_us"} for s in cp["steps"])
    assert set(doc["ranks"]) == RANKS_KEYS
    (rank,) = doc["ranks"]["per_rank"]
    assert set(rank) == PER_RANK_KEYS
    assert doc["ranks"]["failed"] == [] and doc["ranks"]["stragglers"] == []
    (job,) = doc["jobs"]
    assert set(job) == JOB_KEYS
    assert job["traces"] == [str(resnet_trace)] and job["notes"] == []
    assert job["cross_rank"] == doc["ranks"]
    for c in doc["collectives"]:
        assert set(c) == COLLECTIVE_KEYS


def test_json_ranks_schema(capsys: pytest.CaptureFixture[str]) -> None:
    dlrm = reference(SHARED / "param-dlrm-8rank")
    doc = _report(capsys, dlrm)
    assert set(doc) == TOP_KEYS
    ranks = doc["ranks"]
    assert set(ranks) == RANKS_KEYS
    assert len(ranks["per_rank"]) == 8
    for r in ranks["per_rank"]:
        assert set(r) == PER_RANK_KEYS
        assert set(r["breakdown_us"]) == BREAKDOWN_KEYS
        assert set(r["idle_causes_us"]) == CAUSE_KEYS
    assert ranks["extremes"]
    for e in ranks["extremes"]:
        assert set(e) == EXTREME_KEYS
    for s in ranks["stragglers"]:
        assert set(s) == STRAGGLER_KEYS
    (job,) = doc["jobs"]
    assert set(job) == JOB_KEYS
    assert job["ranks"] == list(range(8)) and job["world_size"] == 8 and job["notes"] == []
    assert job["cross_rank"] == ranks
    assert doc["collectives"]
    for c in doc["collectives"]:
        assert set(c) == COLLECTIVE_KEYS


def test_json_top_option(resnet_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernels = _report(capsys, resnet_trace, "--top", "3")["devices"][0]["kernels"]
    assert len(kernels) == 3
    everything = _report(capsys, resnet_trace, "--top", "0")["devices"][0]["kernels"]
    assert len(everything) > 10
    assert everything[:3] == kernels
    totals = [k["total_us"] for k in everything]
    assert totals == sorted(totals, reverse=True)


def test_json_out_file(
    resnet_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    assert main(["analyze", str(resnet_trace), "--format", "json", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    doc = json.loads(out.read_text())
    assert set(doc) == TOP_KEYS
    assert doc["schema"] == "badput.analysis/1"


def test_json_schema_without_gpu_activity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cpu_only.json"
    path.write_text(
        '{"traceEvents": [\n{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, '
        '"tid": 1, "ts": 10, "dur": 5}\n]}\n'
    )
    doc = _report(capsys, path)
    assert set(doc) == TOP_KEYS
    (dev,) = doc["devices"]
    assert set(dev) == DEVICE_KEYS
    assert dev["device"] == -1
    assert dev["goodput"] is None
    assert dev["step_time_us"] is None
    assert dev["steps"] == [] and dev["kernels"] == []
    assert dev["ops"] is dev["modules"] is dev["efficiency"] is dev["attribution"] is None
    assert dev["launch"] is None
    assert dev["op_categories"] is None
