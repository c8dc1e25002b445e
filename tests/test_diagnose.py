"""The diagnosis layer: findings of `badput analyze`, `badput explain`, and the text report.

Each rule gets a synthetic trace built for it (`tests/synth.py`; times in whole microseconds
relative to the trace base; intervals are half-open `[start, end)`), on which it must fire,
and one on which it must not. Steps are `ProfilerStep#N` annotated on the host and on the GPU
(the GPU-side annotations are used as recorded), `STEP` us long unless said otherwise. The
"true" bottleneck each scenario injects is worked out by hand in a comment, and the savings
estimate must be within 10 % of it (the what-if arithmetic is exact, so most are checked to
the nanosecond as well).

The real traces under `tests/data/traces` check the ranking on known cases: ResNet50 with
num_workers=0 (data loading), three batch-1 inference steps on an H100 (host overhead) and an
8-rank DLRM step (a straggling rank).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from synth import (
    DATALOADER_NEXT_MP,
    H100,
    NCCL_ALLREDUCE,
    TraceBuilder,
    analyze_json,
    run_cli,
)

TOL = 0.001  # us
STEP = 1000  # us

A100 = "NVIDIA A100-SXM4-80GB"
V100 = "Tesla V100-SXM2-32GB"
P100 = "Tesla P100-PCIE-16GB"  # no tensor cores; not in badput's hardware table

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"  # tensor cores (bf16)
H884 = "volta_h884gemm_64x64_ldg8_nn"  # tensor cores (Volta fp16 HMMA)
SGEMM = "volta_sgemm_128x64_nn"  # FP32 on CUDA cores
CONV_FP32 = (
    "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>"
    "(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long "
    "long, int, float, float, int, float const*, float const*, bool, int, int)"
)
ADD = "void at::native::elementwise_kernel<128, 2, AddFunctor<float> >(int, AddFunctor<float>)"
PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
PINNED = "Memcpy HtoD (Pinned -> Device)"
DTOH = "Memcpy DtoH (Device -> Pinned)"

ALL_RULES = {
    "data-loading",
    "synchronization",
    "host-overhead",
    "pageable-memcpy",
    "exposed-communication",
    "low-precision-math",
    "step-jitter",
    "memory-churn",
    "straggler",
}


# ---- building blocks ----------------------------------------------------------------------


def new_trace(gpu: str | None = H100, **kw: Any) -> TraceBuilder:
    """A builder for GPU 0 (`gpu`: its deviceProperties name; None: no deviceProperties)."""
    b = TraceBuilder(**kw)
    if gpu is not None:
        b.device_properties([b.device], name=gpu)
    return b


def steps(b: TraceBuilder, n: int, dur: int = STEP) -> list[int]:
    """`n` back-to-back steps of `dur` from 0, host and GPU side; returns their starts."""
    starts = [k * dur for k in range(n)]
    for k, s in enumerate(starts):
        b.profiler_step(k + 1, s, s + dur)
        b.profiler_step(k + 1, s, s + dur, gpu=True)
    return starts


def kernel(
    b: TraceBuilder,
    name: str,
    gpu: tuple[int, int],
    cpu: tuple[int, int] | None = None,
    *,
    op: str | None = None,
    **kw: Any,
) -> None:
    """A kernel at `gpu`, launched at `cpu` (default: a 1 us call 3 us before it starts),
    optionally from inside a cpu_op `op` from 2 us before the launch to 1 us after it."""
    cpu = cpu or (gpu[0] - 3, gpu[0] - 2)
    if op is not None:
        b.cpu_op(op, cpu[0] - 2, cpu[1] + 1)
    b.launch(name, cpu=cpu, gpu=gpu, **kw)


def busy(b: TraceBuilder, start: int, end: int, name: str = GEMM, piece: int = 200) -> None:
    """Kernels back to back over [start, end), each at most `piece` us, launched just ahead."""
    t = start
    while t < end:
        kernel(b, name, (t, min(t + piece, end)))
        t += piece


def memory_event(b: TraceBuilder, at: int, reserved: int, allocated: int, nbytes: int) -> None:
    """A `[memory]` instant event of the caching allocator for GPU 0, as Kineto writes it."""
    b.raw_event(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": b.pid,
            "tid": b.tid,
            "ts": b.t(at),
            "args": {
                "Device Type": 1,
                "Device Id": b.device,
                "Addr": 140_000_000_000 + at,
                "Bytes": nbytes,
                "Total Allocated": allocated,
                "Total Reserved": reserved,
            },
        }
    )


def healthy(b: TraceBuilder, n: int = 5) -> list[int]:
    """`n` steps where the GPU runs back to back: five 199 us kernels per step, each followed
    by a 1 us launch gap: idle 5 us per 1000 us step (0.5 %), below every threshold."""
    starts = steps(b, n)
    for s in starts:
        for i in range(5):
            kernel(b, GEMM, (s + 200 * i, s + 200 * i + 199))
    return starts


def analyze(b: TraceBuilder, tmp_path: Path, capsys: Any, name: str = "t.json") -> dict[str, Any]:
    return analyze_json(capsys, b.write(tmp_path / name))


def analyze_many(capsys: Any, *paths: Path) -> dict[str, Any]:
    """`badput analyze A B C ... --format json`: several traces analyzed together."""
    code, out, err = run_cli(capsys, "analyze", *paths, "--format", "json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The top-level findings by id (each rule fires at most once per device here)."""
    found: dict[str, dict[str, Any]] = {}
    for f in report["findings"]:
        assert f["id"] not in found, f"{f['id']} twice"
        found[f["id"]] = f
    return found


def only(report: dict[str, Any], rule: str) -> dict[str, Any]:
    """The one finding of `rule` in a report of several traces."""
    found = [f for f in report["findings"] if f["id"] == rule]
    assert len(found) == 1, ids(report)
    return found[0]


def ids(report: dict[str, Any]) -> list[str]:
    return [f["id"] for f in report["findings"]]


def ev(finding: dict[str, Any], name: str) -> Any:
    return finding["evidence"][name]["value"]


def check_shape(report: dict[str, Any]) -> None:
    """Every finding is complete, the list is ranked, and devices list their own findings."""
    top = report["findings"]
    savings = [f["savings_us"] for f in top]
    # A named straggler ranks first (the others' waiting is its doing); then by savings.
    n = sum(f["id"] == "straggler" for f in top)
    assert all(f["id"] == "straggler" for f in top[:n])
    assert savings[n:] == sorted(savings[n:], reverse=True)
    for f in top:
        assert set(f) >= {"id", "title", "severity", "trace", "rank", "device", "evidence"}
        assert set(f) >= {"savings_us", "savings_pct", "fix", "refs"}
        assert f["id"] in ALL_RULES
        assert f["severity"] in ("high", "medium", "low")
        assert f["title"] and f["fix"] and f["refs"]
        for e in f["evidence"].values():
            assert set(e) == {"value", "unit"}
    per_device = [f for d in report["devices"] for f in d["findings"]]
    assert sorted(json.dumps(f, sort_keys=True) for f in per_device) == sorted(
        json.dumps(f, sort_keys=True) for f in top if f["id"] != "straggler"
    )


def assert_top(report: dict[str, Any], rule: str, true_us: float, severity: str) -> None:
    """The top finding is `rule`, its savings within 10 % of the injected `true_us`."""
    check_shape(report)
    top = report["findings"][0]
    assert top["id"] == rule, ids(report)
    assert top["severity"] == severity
    assert top["savings_us"] == pytest.approx(true_us, rel=0.10)


# ---- healthy --------------------------------------------------------------------------------


def test_healthy_trace_has_no_findings(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    healthy(b)
    report = analyze(b, tmp_path, capsys)
    # idle 5 us per 1000 us step (0.5 %): nothing is worth a change, least of all "high"
    assert report["devices"][0]["breakdown_us"]["idle"] == pytest.approx(25.0, abs=TOL)
    assert not [f for f in report["findings"] if f["severity"] == "high"]
    assert report["findings"] == []
    assert report["devices"][0]["findings"] == []


# ---- data-loading ---------------------------------------------------------------------------


def test_data_loading_fires(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for s in steps(b, 5):
        # num_workers=0: the training thread loads the batch in [s, s+299), launches the first
        # kernel in [s+299, s+300), then the GPU runs back to back to the end of the step.
        b.dataloader(s, s + 299)
        kernel(b, GEMM, (s + 300, s + 500), cpu=(s + 299, s + 300))
        busy(b, s + 500, s + STEP)
    report = analyze(b, tmp_path, capsys)
    # True GPU idle per step: [s, s+300) = 300 us; 299 us of it inside the DataLoader span
    # (the last 1 us the host is in cudaLaunchKernel). 299 / 1000 = 29.9 %: high.
    assert_top(report, "data-loading", 300.0, "high")
    f = by_id(report)["data-loading"]
    assert f["savings_us"] == pytest.approx(299.0, abs=TOL)
    assert f["savings_pct"] == pytest.approx(29.9, abs=TOL)
    assert ev(f, "gpu_idle_in_dataloader_per_step") == pytest.approx(0.299)
    assert ev(f, "dataloader_time_per_step") == pytest.approx(0.299)
    assert ev(f, "single_process_loading") == "yes"
    assert "num_workers is 0" in f["fix"][0]
    # the 1 us launch gap (0.1 %) is not host overhead worth reporting
    assert ids(report) == ["data-loading"]


def test_data_loading_quiet_when_gpu_busy_during_loader(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for s in healthy(b):
        # workers prefetch: __next__ returns a ready batch in 10 us while the GPU computes
        b.dataloader(s + 100, s + 110, name=DATALOADER_NEXT_MP)
    report = analyze(b, tmp_path, capsys)
    assert "data-loading" not in ids(report)
    assert report["findings"] == []


# ---- synchronization ------------------------------------------------------------------------


def sync_trace(b: TraceBuilder) -> None:
    for s in steps(b, 5):
        # kernels queued ahead for [s, s+600)
        kernel(b, GEMM, (s, s + 200), cpu=(s - 5, s - 4))
        kernel(b, GEMM, (s + 200, s + 400), cpu=(s + 10, s + 11))
        kernel(b, GEMM, (s + 400, s + 600), cpu=(s + 20, s + 21))
        # loss.item(): a DtoH copy queued behind them, then the host blocks until it is done
        b.cpu_op("aten::item", s + 100, s + 620)
        b.cpu_op("aten::_local_scalar_dense", s + 101, s + 619)
        b.launch(DTOH, kind="memcpy", cpu=(s + 102, s + 104), gpu=(s + 600, s + 601))
        b.runtime("cudaStreamSynchronize", s + 105, s + 605)
        # the host returns, runs Python until s+790, and only then launches again
        kernel(b, GEMM, (s + 800, s + STEP), cpu=(s + 790, s + 795), op="aten::mm")


def test_synchronization_fires(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    sync_trace(b)
    report = analyze(b, tmp_path, capsys)
    # True idle per step: the queue drains at s+601 (end of the DtoH copy, while the host sits
    # in cudaStreamSynchronize [s+105, s+605)); the next kernel starts at s+800: 199 us = 19.9 %.
    assert_top(report, "synchronization", 199.0, "high")
    f = by_id(report)["synchronization"]
    assert f["savings_us"] == pytest.approx(199.0, abs=TOL)
    assert ev(f, "syncs_per_step") == 1.0
    assert ev(f, "time_in_sync_calls_per_step") == pytest.approx(0.5)
    assert ev(f, "drained_idle_per_step") == pytest.approx(0.199)
    assert ev(f, "calls") == "cudaStreamSynchronize"
    # the outermost op around the sync, not aten::_local_scalar_dense inside it
    assert "aten::item" in ev(f, "triggered_by")
    assert "_local_scalar_dense" not in ev(f, "triggered_by")
    # the drained gap is the synchronization's, not counted again as host overhead
    assert ids(report) == ["synchronization"]


def test_synchronization_quiet_when_gpu_stays_busy(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for s in healthy(b):
        # a sync that returns while the queue still holds work: no idle gap starts inside it
        b.cpu_op("aten::item", s + 100, s + 160)
        b.runtime("cudaStreamSynchronize", s + 110, s + 150)
    report = analyze(b, tmp_path, capsys)
    assert "synchronization" not in ids(report)
    assert report["findings"] == []


def test_synchronization_quiet_without_sync_calls(tmp_path: Path, capsys: Any) -> None:
    # idle gaps, but the host never blocks: that is host overhead, not synchronization
    report = analyze(host_overhead_trace(new_trace()), tmp_path, capsys)
    assert "synchronization" not in ids(report)


# ---- host-overhead --------------------------------------------------------------------------


def host_overhead_trace(b: TraceBuilder) -> TraceBuilder:
    for s in steps(b, 5):
        # 50 short kernels per step: 12 us each, every 20 us; each launched from an aten::add
        # that ends 1 us before its kernel starts, so the GPU waits 8 us for every launch
        for i in range(50):
            g0 = s + 20 * i
            kernel(b, ADD, (g0, g0 + 12), cpu=(g0 - 5, g0 - 2), op="aten::add")
    return b


def test_host_overhead_fires(tmp_path: Path, capsys: Any) -> None:
    report = analyze(host_overhead_trace(new_trace()), tmp_path, capsys)
    # True idle per step: 50 gaps of 8 us ([s+20i+12, s+20i+20)) = 400 us = 40 %.
    assert_top(report, "host-overhead", 400.0, "high")
    f = by_id(report)["host-overhead"]
    assert f["savings_us"] == pytest.approx(400.0, abs=TOL)
    assert ev(f, "kernels_per_step") == 50.0
    # the first kernel's launch, at -5 us, precedes the window: 249 launches in 5 steps
    assert ev(f, "launches_per_step") == 49.8
    assert ev(f, "median_kernel") == 12.0
    assert ev(f, "idle_gaps_per_step") == 50.0
    assert ev(f, "median_idle_gap") == 8.0
    assert ev(f, "kernel_time_in_kernels_under_10us") == 0.0  # 12 us kernels: not under 10 us
    assert ids(report) == ["host-overhead"]


def test_host_overhead_quiet_on_tiny_launch_gaps(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    healthy(b)  # 5 us of launch gaps per 1000 us step: 0.5 %
    assert "host-overhead" not in ids(analyze(b, tmp_path, capsys))


# ---- pageable-memcpy ------------------------------------------------------------------------


def memcpy_trace(b: TraceBuilder, name: str, overlapped: bool = False) -> TraceBuilder:
    for s in steps(b, 5):
        if overlapped:
            # the copy runs on its own stream under compute that fills the step
            busy(b, s, s + STEP)
            b.launch(name, kind="memcpy", cpu=(s + 90, s + 95), gpu=(s + 100, s + 350), stream=9)
        else:
            # batch.to("cuda") in the middle of the step, on the compute stream: nothing
            # else runs during the copy
            busy(b, s, s + 700)
            b.launch(name, kind="memcpy", cpu=(s + 30, s + 35), gpu=(s + 700, s + 950))
            kernel(b, GEMM, (s + 950, s + STEP), cpu=(s + 40, s + 41))
    return b


def test_pageable_memcpy_fires(tmp_path: Path, capsys: Any) -> None:
    report = analyze(memcpy_trace(new_trace(), PAGEABLE), tmp_path, capsys)
    # True exposed copy time per step: [s+700, s+950) = 250 us = 25 %.
    assert_top(report, "pageable-memcpy", 250.0, "high")
    f = by_id(report)["pageable-memcpy"]
    assert f["savings_us"] == pytest.approx(250.0, abs=TOL)
    assert ev(f, "pageable_copies_per_step") == 1.0
    assert ev(f, "exposed_copy_time_per_step") == pytest.approx(0.25)
    assert ev(f, "bytes_per_step") == pytest.approx(1.05)  # the builder's 1 MiB per copy
    assert ids(report) == ["pageable-memcpy"]


def test_pinned_memcpy_does_not_fire(tmp_path: Path, capsys: Any) -> None:
    report = analyze(memcpy_trace(new_trace(), PINNED), tmp_path, capsys)
    # the same 250 us of exposed copy, but from pinned memory: not this rule's business
    assert report["devices"][0]["breakdown_us"]["memory"] == pytest.approx(1250.0, abs=TOL)
    assert "pageable-memcpy" not in ids(report)


def test_pageable_memcpy_under_compute_does_not_fire(tmp_path: Path, capsys: Any) -> None:
    report = analyze(memcpy_trace(new_trace(), PAGEABLE, overlapped=True), tmp_path, capsys)
    assert report["devices"][0]["breakdown_us"]["memory"] == 0.0
    assert "pageable-memcpy" not in ids(report)
    assert report["findings"] == []


# ---- exposed-communication ------------------------------------------------------------------


def comm_trace(b: TraceBuilder, compute_end: int, comm: tuple[int, int]) -> TraceBuilder:
    """Per step: compute [s, s+compute_end), an all-reduce at `comm` on stream 20, and compute
    again from the later of the two ends to the end of the step."""
    for s in steps(b, 5):
        busy(b, s, s + compute_end)
        b.annotation("nccl:all_reduce", s + comm[0] - 8, s + comm[0] - 1)
        kernel(b, NCCL_ALLREDUCE, (s + comm[0], s + comm[1]), stream=20)
        resume = max(compute_end, comm[1])
        if resume < STEP:
            busy(b, s + resume, s + STEP, name=ADD)
    return b


def test_exposed_communication_fires(tmp_path: Path, capsys: Any) -> None:
    report = analyze(comm_trace(new_trace(), 600, (500, 900)), tmp_path, capsys)
    # All-reduce [s+500, s+900), compute [s, s+600) and [s+900, s+1000):
    # true exposed communication per step = [s+600, s+900) = 300 us = 30 %.
    assert_top(report, "exposed-communication", 300.0, "high")
    f = by_id(report)["exposed-communication"]
    assert f["savings_us"] == pytest.approx(300.0, abs=TOL)
    assert ev(f, "communication_per_step") == pytest.approx(0.4)
    assert ev(f, "hidden_under_compute") == 25.0  # 100 of 400 us
    assert ev(f, "collective_kernels_per_step") == 1.0
    assert ev(f, "largest_collective") == NCCL_ALLREDUCE
    assert ids(report) == ["exposed-communication"]


def test_overlapped_communication_does_not_fire(tmp_path: Path, capsys: Any) -> None:
    # the all-reduce [s+100, s+500) runs entirely under compute [s, s+1000)
    report = analyze(comm_trace(new_trace(), STEP, (100, 500)), tmp_path, capsys)
    assert report["devices"][0]["comm"]["total_us"] == pytest.approx(2000.0, abs=TOL)
    assert report["devices"][0]["comm"]["overlapped_us"] == pytest.approx(2000.0, abs=TOL)
    assert "exposed-communication" not in ids(report)
    assert report["findings"] == []


# ---- low-precision-math ---------------------------------------------------------------------


def math_trace(b: TraceBuilder, first: str, second: str) -> TraceBuilder:
    for s in steps(b, 5):
        busy(b, s, s + 600, name=first)
        busy(b, s + 600, s + STEP, name=second)
    return b


@pytest.mark.parametrize("gpu", [A100, V100])
def test_low_precision_math_fires(gpu: str, tmp_path: Path, capsys: Any) -> None:
    report = analyze(math_trace(new_trace(gpu), SGEMM, CONV_FP32), tmp_path, capsys)
    # 1000 us of FP32 GEMM/convolution per step; assumed 2x faster on tensor cores (A100:
    # 312 / 19.5, V100: 125 / 15.7, both capped at 2): saves 500 us per step = 50 %.
    assert_top(report, "low-precision-math", 500.0, "high")
    f = by_id(report)["low-precision-math"]
    assert f["savings_us"] == pytest.approx(500.0, abs=TOL)
    assert ev(f, "fp32_matmul_time_per_step") == pytest.approx(1.0)
    assert ev(f, "share_of_compute") == 100.0
    assert ev(f, "assumed_speedup") == 2.0
    assert "volta_sgemm_128x64_nn" in ev(f, "top_kernels")
    assert "implicit_convolve_sgemm" in ev(f, "top_kernels")
    fix = " ".join(f["fix"])
    if gpu == A100:  # Ampere: TF32 is one line
        assert "TF32" in fix and "set_float32_matmul_precision('high')" in fix
        assert ev(f, "fp32_peak") == 19.5
    else:  # Volta: no TF32 or bf16, so fp16 autocast with a GradScaler
        assert "TF32" not in fix.replace("no bf16 or TF32", "")
        assert "set_float32_matmul_precision" not in fix
        assert "torch.float16" in fix and "GradScaler" in fix
        assert ev(f, "fp32_peak") == 15.7
    assert ids(report) == ["low-precision-math"]


def test_low_precision_fix_differs_by_gpu(tmp_path: Path, capsys: Any) -> None:
    fixes = {}
    for gpu in (A100, V100):
        report = analyze(math_trace(new_trace(gpu), SGEMM, CONV_FP32), tmp_path, capsys)
        fixes[gpu] = by_id(report)["low-precision-math"]["fix"]
    assert fixes[A100] != fixes[V100]


@pytest.mark.parametrize(
    ("gpu", "first", "second"),
    [
        (A100, GEMM, H884),  # tensor-core kernels already
        (V100, H884, H884),
        (P100, SGEMM, CONV_FP32),  # FP32 kernels, but a GPU without tensor cores
        ("Some Future GPU 9000", SGEMM, CONV_FP32),  # unknown GPU: no peaks to compare
        (None, SGEMM, CONV_FP32),  # no deviceProperties at all
    ],
)
def test_low_precision_math_quiet(
    gpu: str | None, first: str, second: str, tmp_path: Path, capsys: Any
) -> None:
    report = analyze(math_trace(new_trace(gpu), first, second), tmp_path, capsys)
    assert "low-precision-math" not in ids(report)
    assert report["findings"] == []


# ---- step-jitter ----------------------------------------------------------------------------


def jitter_trace(b: TraceBuilder, n: int, slow: int, extra: int) -> TraceBuilder:
    """`n` steps of 1000 us, busy back to back, except step index `slow`, which first waits
    `extra` us on the DataLoader (loader span up to 1 us before its first kernel)."""
    s = 0
    for k in range(n):
        dur = STEP + (extra if k == slow else 0)
        b.profiler_step(k + 1, s, s + dur)
        b.profiler_step(k + 1, s, s + dur, gpu=True)
        lead = 0
        if k == slow and extra:
            lead = extra
            b.dataloader(s, s + extra - 1)
            kernel(b, GEMM, (s + extra, s + extra + 200), cpu=(s + extra - 1, s + extra))
            lead += 200
        busy(b, s + lead, s + dur)
        s += dur
    return b


def test_step_jitter_fires(tmp_path: Path, capsys: Any) -> None:
    report = analyze(jitter_trace(new_trace(), 6, 3, 500), tmp_path, capsys)
    check_shape(report)
    # Steps: 1000, 1000, 1000, 1500, 1000, 1000 us: median 1000, one outlier (1.5x > 1.2x).
    # Savings = (1500 - 1000) / 6 = 83.333 us per step; mean step 6500 / 6 = 1083.333 us:
    # 7.7 %, medium.
    f = by_id(report)["step-jitter"]
    assert f["severity"] == "medium"
    assert f["savings_us"] == pytest.approx(500 / 6, abs=TOL)
    assert f["savings_pct"] == pytest.approx(100 * 500 / 6500, abs=TOL)
    assert ev(f, "median_step") == 1.0
    assert ev(f, "max_step") == 1.5
    assert ev(f, "outlier_steps") == "ProfilerStep#4"
    # what grew in the worst step: 499 us of GPU idle inside the DataLoader span
    assert ev(f, "grew_most_in_worst_step").startswith("idle: dataloader +0.50 ms")
    assert "ProfilerStep#4" in f["title"] and "idle: dataloader" in f["title"]
    # the data-loading wait behind it is reported too: 499 us over 6 steps
    assert by_id(report)["data-loading"]["savings_us"] == pytest.approx(499 / 6, abs=TOL)


@pytest.mark.parametrize(
    ("n", "extra", "why"),
    [
        (6, 0, "uniform steps"),
        (6, 150, "1.15x the median: within 1.2x"),
        (4, 500, "fewer than 5 steps"),
    ],
)
def test_step_jitter_quiet(n: int, extra: int, why: str, tmp_path: Path, capsys: Any) -> None:
    report = analyze(jitter_trace(new_trace(), n, 2, extra), tmp_path, capsys)
    assert "step-jitter" not in ids(report), why


# ---- memory-churn ---------------------------------------------------------------------------


def test_memory_churn_fires_on_driver_allocations(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for s in steps(b, 5):
        kernel(b, GEMM, (s, s + 200), cpu=(s - 5, s - 4))
        for i, at in enumerate((10, 20, 30)):
            kernel(b, GEMM, (s + 200 * (i + 1), s + 200 * (i + 2)), cpu=(s + at, s + at + 1))
        # a new shape: the caching allocator has no block and calls cudaMalloc before the
        # next launch; the GPU runs dry at s+800 and waits for the kernel at s+900
        b.cpu_op("aten::empty", s + 780, s + 893)
        b.runtime("cudaMalloc", s + 785, s + 890)
        kernel(b, GEMM, (s + 900, s + STEP), cpu=(s + 895, s + 898), op="aten::mm")
    report = analyze(b, tmp_path, capsys)
    check_shape(report)
    # GPU idle per step [s+800, s+900) = 100 us, of which in cudaMalloc [s+800, s+890) = 90 us:
    # 9 %, medium. The whole 100 us gap is also host overhead (an upper bound).
    found = by_id(report)
    f = found["memory-churn"]
    assert f["severity"] == "medium"
    assert f["savings_us"] == pytest.approx(90.0, abs=TOL)
    assert ev(f, "driver_allocation_calls_per_step") == 1.0
    assert ev(f, "gpu_idle_in_them_per_step") == pytest.approx(0.09)
    assert found["host-overhead"]["savings_us"] == pytest.approx(100.0, abs=TOL)
    assert ids(report) == ["host-overhead", "memory-churn"]


def test_memory_churn_fires_on_reserved_growth(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for k, s in enumerate(healthy(b)):
        # reserved memory grows 50 MB a step: 1000 -> 1200 MB, 200 MB = 16.7 % of the peak
        memory_event(b, s + 50, 1_000_000_000 + 50_000_000 * k, 800_000_000, 4_194_304)
        memory_event(b, s + 60, 1_000_000_000 + 50_000_000 * k, 795_805_696, -4_194_304)
    report = analyze(b, tmp_path, capsys)
    check_shape(report)
    # no cudaMalloc, so nothing to save that the trace can measure: reported "low" on the
    # evidence alone
    f = by_id(report)["memory-churn"]
    assert f["severity"] == "low"
    assert f["savings_us"] == 0.0
    assert ev(f, "driver_allocation_calls_per_step") == 0.0
    assert ev(f, "reserved_growth_in_window") == 200.0
    assert ev(f, "reserved_at_end") == 1200.0
    assert ev(f, "allocator_events_per_step") == 1.0
    assert "reserved memory grew 200 MB" in f["title"]
    assert ids(report) == ["memory-churn"]


def test_memory_churn_quiet_when_reserved_is_steady(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    for s in healthy(b):
        # allocations and frees served from the cache: reserved stays at 1200 MB
        memory_event(b, s + 50, 1_200_000_000, 800_000_000, 4_194_304)
        memory_event(b, s + 60, 1_200_000_000, 795_805_696, -4_194_304)
    report = analyze(b, tmp_path, capsys)
    assert "memory-churn" not in ids(report)
    assert report["findings"] == []


# ---- straggler ------------------------------------------------------------------------------


def rank_traces(tmp_path: Path, compute: list[int]) -> list[Path]:
    """One trace per rank (GPU = rank), 5 steps each: compute [s, s+c) then an all-reduce
    [s+c, s+1000) that ends when the last rank arrives; exposed comm = 1000 - c per step."""
    paths = []
    for rank, c in enumerate(compute):
        b = TraceBuilder(device=rank, pid=1000 + rank, tid=1000 + rank)
        b.device_properties([rank], name=H100)
        b.distributed_info(rank, len(compute))
        for s in steps(b, 5):
            busy(b, s, s + c)
            kernel(b, NCCL_ALLREDUCE, (s + c, s + STEP), stream=20)
        paths.append(b.write(tmp_path / f"rank{rank}.pt.trace.json"))
    return paths


def test_straggler_fires(tmp_path: Path, capsys: Any) -> None:
    compute = [600, 650, 900, 700]
    paths = rank_traces(tmp_path, compute)
    report = analyze_many(capsys, *paths)
    check_shape(report)
    # Ranks arrive at the all-reduce at s+600, 650, 900, 700 (one clock: offsets 0). Rank 2
    # arrives last at all 5, 900 - 700 = 200 us after the second-latest: had it arrived with
    # the others, every step would be 200 us shorter: savings 200 us per 1000 us step = 20 %.
    # The wait it causes: 3 other ranks x 200 us x 5 steps = 3 ms.
    late = compute[2] - sorted(compute)[-2]
    f = only(report, "straggler")
    assert f["rank"] == 2 and f["device"] == 2
    assert f["trace"].endswith("rank2.pt.trace.json")
    assert f["severity"] == "high"
    assert f["savings_us"] == pytest.approx(late, abs=TOL)
    assert f["savings_us"] == pytest.approx(200.0, abs=TOL)
    assert ev(f, "straggler_rank") == 2
    assert ev(f, "arrives_last_at") == 5 and ev(f, "collectives_matched") == 5
    assert ev(f, "lateness_per_step") == pytest.approx(0.2)
    assert ev(f, "wait_caused") == pytest.approx(3 * 0.2 * 5)
    assert ev(f, "compute_score") == pytest.approx(round(900 / 675, 3))
    assert ev(f, "max_clock_offset") == 0
    assert ev(f, "ranks") == 4
    assert ev(f, "straggler_spends_more_on").startswith("compute +0.25 ms")
    assert "Rank 2" in f["title"]
    # the job-level finding is in the ranked list only, not in any device's list
    assert all(g["id"] != "straggler" for d in report["devices"] for g in d["findings"])

    # the same from the directory
    again = analyze_json(capsys, tmp_path)
    assert only(again, "straggler") == f


def test_straggler_text_report(tmp_path: Path, capsys: Any) -> None:
    rank_traces(tmp_path, [600, 650, 900, 700])
    out_file = tmp_path / "report.txt"
    code, _, err = run_cli(capsys, "analyze", tmp_path, "--out", out_file)
    assert code == 0, err
    text = out_file.read_text()
    tail = text.split("across ranks", 1)[1]
    assert "straggler (rank 2)" in tail


def test_straggler_quiet_on_equal_ranks(tmp_path: Path, capsys: Any) -> None:
    rank_traces(tmp_path, [700, 700, 700, 700])
    report = analyze_json(capsys, tmp_path)
    assert "straggler" not in ids(report)
    # each rank still has its own exposed communication (300 us per step)
    assert [f["id"] for f in report["findings"]] == ["exposed-communication"] * 4


def test_straggler_needs_several_ranks(tmp_path: Path, capsys: Any) -> None:
    paths = rank_traces(tmp_path, [600, 900])
    report = analyze_json(capsys, paths[1])  # rank 1 alone: nothing to compare with
    assert "straggler" not in ids(report)


def test_straggler_from_the_cross_rank_view(tmp_path: Path) -> None:
    from badput.analysis import analyze_trace, cross_rank, summarize_rank
    from badput.diagnose.job import straggler
    from badput.trace import load_trace
    from synth_ranks import write_rank_set

    # 8 ranks, clocks up to 2 s apart; rank 3 computes 300 us longer in each 2000 us step
    rs = write_rank_set(tmp_path, slow_rank=3, extra_us=300)
    traces = [load_trace(str(p)) for p in rs.paths]
    sums = [summarize_rank(t, a) for t in traces for a in analyze_trace(t)]
    f = straggler(cross_rank(sums))
    assert f is not None and f.rank == 3 and f.device == 3
    assert f.savings_ns == 300_000 and f.savings_share == pytest.approx(0.15)
    assert f.severity == "high"
    assert f.evidence["wait_caused"].value == pytest.approx(7 * 0.3 * 6)
    assert f.evidence["compute_score"].value == 1.375
    offset_ms = f.evidence["max_clock_offset"].value
    assert isinstance(offset_ms, float) and offset_ms > 1000
    # equal ranks: no finding
    (tmp_path / "equal").mkdir()
    equal = write_rank_set(tmp_path / "equal", jitter_us=10)
    traces = [load_trace(str(p)) for p in equal.paths]
    assert straggler(cross_rank([summarize_rank(t, analyze_trace(t)[0]) for t in traces])) is None


# ---- text report ----------------------------------------------------------------------------


def kitchen_sink(b: TraceBuilder) -> TraceBuilder:
    """Seven problems per 1000 us step (A100): more findings than the text report shows."""
    for s in steps(b, 5):
        b.dataloader(s, s + 99)  # GPU idle [s, s+100): 99 us in the loader
        kernel(b, SGEMM, (s + 100, s + 300), cpu=(s + 99, s + 100))  # FP32 GEMM
        b.cpu_op("aten::item", s + 150, s + 360)
        b.runtime("cudaStreamSynchronize", s + 155, s + 350)  # drains: idle [s+300, s+360)
        for i in range(10):  # short kernels, 10 us launch gaps: 100 us idle
            g0 = s + 360 + 20 * i
            kernel(b, ADD, (g0, g0 + 10), cpu=(g0 - 6, g0 - 1) if i else (s + 352, s + 354))
        b.launch(PAGEABLE, kind="memcpy", cpu=(s + 555, s + 557), gpu=(s + 560, s + 650))
        kernel(b, GEMM, (s + 650, s + 750), cpu=(s + 558, s + 559))
        kernel(b, NCCL_ALLREDUCE, (s + 700, s + 850), cpu=(s + 560, s + 561), stream=20)
        b.runtime("cudaMalloc", s + 852, s + 945)  # idle [s+850, s+950)
        kernel(b, GEMM, (s + 950, s + STEP), cpu=(s + 946, s + 949))
    return b


def test_text_report_shows_at_most_five_findings(tmp_path: Path, capsys: Any) -> None:
    path = kitchen_sink(new_trace(A100)).write(tmp_path / "t.json")
    report = analyze_json(capsys, path)
    check_shape(report)
    n = len(report["devices"][0]["findings"])
    assert n > 5, ids(report)
    assert set(ids(report)) == {
        "data-loading",
        "synchronization",
        "host-overhead",
        "pageable-memcpy",
        "exposed-communication",
        "low-precision-math",
        "memory-churn",
    }

    out_file = tmp_path / "report.txt"
    code, _, err = run_cli(capsys, "analyze", path, "--out", out_file)
    assert code == 0, err
    text = out_file.read_text()
    section = text.split("what to fix first", 1)[1]
    numbered = re.findall(r"^(\d+)\. \[(high|medium|low)\] ([a-z-]+)", section, re.MULTILINE)
    assert [int(i) for i, _, _ in numbered] == [1, 2, 3, 4, 5]
    # the five with the largest savings, in the JSON's order
    assert [rule for _, _, rule in numbered] == ids(report)[:5]
    assert f"{n - 5} more in --format json" in section
    assert "badput explain ID" in section


def test_text_report_lists_all_of_few_findings(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    sync_trace(b)
    out_file = tmp_path / "report.txt"
    code, _, err = run_cli(capsys, "analyze", b.write(tmp_path / "t.json"), "--out", out_file)
    assert code == 0, err
    section = out_file.read_text().split("what to fix first", 1)[1]
    assert re.findall(r"^\d+\. \[\w+\] ([a-z-]+)", section, re.MULTILINE) == ["synchronization"]
    assert "more in --format json" not in section


def test_text_report_without_findings(tmp_path: Path, capsys: Any) -> None:
    b = new_trace()
    healthy(b)
    out_file = tmp_path / "report.txt"
    code, _, err = run_cli(capsys, "analyze", b.write(tmp_path / "t.json"), "--out", out_file)
    assert code == 0, err
    assert "what to fix first" not in out_file.read_text()


# ---- badput explain -------------------------------------------------------------------------


def test_every_rule_is_catalogued() -> None:
    from badput.diagnose import RULES

    assert set(RULES) == ALL_RULES


@pytest.mark.parametrize("rule_id", sorted(ALL_RULES))
def test_explain(rule_id: str, capsys: Any) -> None:
    from badput.diagnose import RULES

    rule = RULES[rule_id]
    code, out, err = run_cli(capsys, "explain", rule_id)
    assert code == 0, err
    assert err == ""
    flat = " ".join(out.split())
    assert flat.startswith(f"{rule_id}: {rule.title}")
    assert " ".join(rule.explanation.split()) in flat
    assert "Savings estimate" in flat and " ".join(rule.savings.split()) in flat
    for fix in rule.fix:
        assert " ".join(fix.split()) in flat
    for ref in rule.refs:
        assert ref in out


def test_explain_unknown_rule(capsys: Any) -> None:
    code, out, err = run_cli(capsys, "explain", "no-such-rule")
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("badput: error:")
    assert "no-such-rule" in lines[0] and "data-loading" in lines[0]


# ---- real traces ----------------------------------------------------------------------------


def test_resnet50_top_finding_is_data_loading(shared_traces: Path, capsys: Any) -> None:
    folder = shared_traces / "kineto-resnet50"
    with (folder / "tb_plugin_reference_workers0.jsonl").open() as f:
        overview = json.loads(f.readline())["performance"][0]
    children = {c["name"]: c["value"] for c in overview["children"]}
    dataloader_us = children["DataLoader"]  # the plugin's DataLoader time per step
    assert dataloader_us == 59_262

    report = analyze_json(capsys, folder / "worker0.1623143089861.pt.trace.json.gz")
    check_shape(report)
    top = report["findings"][0]
    assert top["id"] == "data-loading"
    assert top["severity"] == "high"
    assert top["savings_us"] == pytest.approx(dataloader_us, rel=0.10)
    assert ev(top, "single_process_loading") == "yes"  # num_workers=0
    # V100 with FP32 convolutions: mixed precision is the other big win
    assert by_id(report)["low-precision-math"]["severity"] == "high"


TRACELENS = {
    # name: (expected ids in order, host-overhead savings_pct bounds)
    "Falconsai_nsfw_image_detection__1016002.json.gz": (["host-overhead"], (70.0, 95.0)),
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": (["host-overhead"], (3.0, 10.0)),
    "gaunernst_bert-small-uncased__1016001.json.gz": (["host-overhead"], (75.0, 95.0)),
}


@pytest.mark.parametrize("name", sorted(TRACELENS))
def test_tracelens_inference(name: str, shared_traces: Path, capsys: Any) -> None:
    """Batch-1 inference on an H100, one ProfilerStep, torch.cuda.synchronize() around it.

    - host-overhead leads everywhere: at batch 1 each kernel is a few microseconds while the
      host spends tens of microseconds in Python and launches between them. The image
      classifier (Falconsai, 154 kernels, median 8 us) and BERT-small (60 kernels, median
      5 us) leave the GPU idle 84 % and 88 % of the step: high. Qwen1.5-0.5B runs ~1000
      larger kernels (median 29 us) back to back with ~1.4 us launch gaps, so the host keeps
      up mostly: 7.8 % idle, medium.
    - no synchronization: BERT's one `if tensor:` check (aten::is_nonzero) calls
      cudaStreamSynchronize mid-step, but it waits only 7.6 us; the 154 us gap after it is host
      time (host-overhead): had the call not waited, the host would have got back 7.6 us. The
      per-step torch.cuda.synchronize() calls lie outside the step: the GPU-side ProfilerStep
      starts after the first and ends before the second, so the window holds no idle they
      cause. Qwen's one mid-step cudaStreamSynchronize returns with no gap beginning inside it.
    - no data-loading: inference, no DataLoader ran. No exposed-communication (one GPU, no
      NCCL), no pageable-memcpy, no step-jitter (one step), no memory-churn (reserved memory
      steady, no cudaMalloc in the step), no low-precision-math (bf16 models: their GEMMs are
      tensor-core kernels; Qwen's single FP32 simt sgemm is far under 1 % of the step).
    """
    expected, (lo, hi) = TRACELENS[name]
    report = analyze_json(capsys, shared_traces / "tracelens-h100" / name)
    check_shape(report)
    assert ids(report) == expected
    found = by_id(report)
    host = found["host-overhead"]
    assert lo <= host["savings_pct"] <= hi
    assert host["severity"] == ("medium" if hi <= 10 else "high")
    # the estimate is GPU idle time: never more than the step's idle
    device = report["devices"][0]
    assert host["savings_us"] <= device["breakdown_us"]["idle"] + TOL
    assert "data-loading" not in found
    if "synchronization" in found:
        sync = found["synchronization"]
        assert sync["severity"] == "medium"
        assert 50.0 <= sync["savings_us"] <= 500.0
        assert ev(sync, "calls") == "cudaStreamSynchronize"
        assert "aten::is_nonzero" in ev(sync, "triggered_by")


def test_dlrm_straggler_is_rank_7(shared_traces: Path, capsys: Any) -> None:
    report = analyze_json(capsys, shared_traces / "param-dlrm-8rank")
    check_shape(report)
    f = only(report, "straggler")
    # rank 7 has the least NCCL time (MANIFEST: 1.7 to 11.3 ms by rank): it arrives last
    assert f["rank"] == 7 and ev(f, "straggler_rank") == 7
    assert ev(f, "ranks") == 8
    assert "worker7" in f["trace"]
    # rank 7 arrives last at 5 of the 8 collectives (the four SendRecvs of the all-to-all and
    # the first all-reduce), 505, 509.5, 162.5, 124 and 9 us after the second-latest rank
    # (clocks aligned on the collectives' ends, within 1.5 us): 1.31 ms in the 16.1 ms median
    # step. Its GPU compute is ordinary (score 1.004): its host holds it back.
    assert ev(f, "arrives_last_at") == 5 and ev(f, "collectives_matched") == 8
    assert f["savings_us"] == pytest.approx(505 + 509.5 + 162.5 + 124 + 9, abs=1.0)
    assert ev(f, "wait_caused") == pytest.approx(7 * 1.31, abs=0.01)
    assert ev(f, "compute_score") == pytest.approx(1.0, abs=0.01)
    assert ev(f, "straggler_spends_more_on").startswith("idle: cpu ops")
    assert f["severity"] == "medium"
    # every other rank has more NCCL time than rank 7
    exposed = {d["rank"]: d["breakdown_us"]["communication"] for d in report["devices"]}
    assert min(exposed, key=lambda r: exposed[r]) == 7


def test_enclosing_ops_count_the_outermost_op_names_in_first_call_order(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import numpy as np

    from badput.diagnose.context import DeviceContext
    from badput.trace import load_trace
    from badput.trace.model import EventKind

    b = TraceBuilder()
    # Thread 1: "aten::item" holds two syncs (one in an inner op), "aten::to" one; thread 2:
    # "aten::to" one and "aten::item" one; a sync outside any op counts nothing.
    b.cpu_op("aten::item", 0, 100, tid=1)
    b.cpu_op("aten::_local_scalar_dense", 10, 40, tid=1)
    b.runtime("cudaStreamSynchronize", 20, 30, tid=1)
    b.runtime("cudaStreamSynchronize", 60, 70, tid=1)
    b.cpu_op("aten::to", 200, 300, tid=1)
    b.runtime("cudaStreamSynchronize", 210, 220, tid=1)
    b.runtime("cudaStreamSynchronize", 400, 410, tid=1)
    b.cpu_op("aten::to", 0, 50, tid=2)
    b.runtime("cudaStreamSynchronize", 5, 15, tid=2)
    b.cpu_op("aten::item", 60, 90, tid=2)
    b.runtime("cudaStreamSynchronize", 70, 80, tid=2)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    rows = np.flatnonzero(trace.kind == EventKind.RUNTIME)
    found = DeviceContext.enclosing_ops(SimpleNamespace(trace=trace), rows)  # type: ignore[arg-type]
    assert list(found.items()) == [("aten::item", 3), ("aten::to", 2)]
    # Equal counts keep the order of the first call given ("aten::to", interned after
    # "aten::item", first here), not the names' ids.
    found = DeviceContext.enclosing_ops(SimpleNamespace(trace=trace), rows[[2, 1, 3]])  # type: ignore[arg-type]
    assert found.most_common() == [("aten::to", 1), ("aten::item", 1)]
    found = DeviceContext.enclosing_ops(SimpleNamespace(trace=trace), rows[[1, 2, 4, 5]])  # type: ignore[arg-type]
    assert found.most_common() == [("aten::item", 2), ("aten::to", 2)]
