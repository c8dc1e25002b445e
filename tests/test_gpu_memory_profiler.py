"""The memory snapshot reader and the profiler hook on a real CUDA device.

Marked `gpu`: `make test` deselects these tests, `make gpu-check` runs them (the `torch`
fixture in conftest skips without an NVIDIA GPU and fails with one but no CUDA torch). They
check what the CPU tests can only build by hand: a snapshot that PyTorch itself recorded and
pickled, and a Kineto trace with real kernels, `[memory]` events and CUDA runtime calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from badput.analysis.memory import analyze_snapshot
from badput.cli.app import main
from badput.profiler import on_trace_ready
from badput.trace.snapshot import load_snapshot

pytestmark = pytest.mark.gpu

MiB = 1 << 20


def test_real_snapshot_peak_matches_the_allocator(torch: Any, tmp_path: Path) -> None:
    """The replayed peak equals torch.cuda.max_memory_allocated over the recorded history."""
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
        ).cuda()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(3):
            x = torch.randn(512, 1024, device="cuda")
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        reserved_peak = torch.cuda.max_memory_reserved()
        path = tmp_path / "snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    analysis = analyze_snapshot(load_snapshot(str(path)))
    d = analysis.main
    assert d is not None and d.entries > 0
    # The allocator counts rounded block sizes, the history requested bytes: within one
    # 512-byte rounding step per live allocation, plus the 2 MiB small-pool granularity.
    assert d.peak_allocated_bytes <= peak
    assert d.peak_allocated_bytes >= peak - 2 * MiB
    assert d.peak_reserved_bytes == reserved_peak
    assert any("test_gpu_memory_profiler.py" in s.frame for s in d.top_sites)
    assert main(["memory", str(path), "--format", "json", "--out", str(tmp_path / "m.json")]) == 0
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["peak_reserved_bytes"] == reserved_peak


def test_profiler_hook_on_a_cuda_run(torch: Any, tmp_path: Path) -> None:
    """A real CUDA profile: the trace is analysed, goodput defined, memory events read."""
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.Linear(2048, 2048).cuda()
    handler = on_trace_ready(tmp_path, worker_name="gpu", background=False)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=handler,
        profile_memory=True,
    ) as prof:
        for _ in range(6):
            x = torch.randn(1024, 2048, device="cuda")
            model(x).sum().backward()
            prof.step()
    (result,) = handler.results
    assert result.error is None and result.json_path is not None
    doc = json.loads(Path(result.json_path).read_text())
    (device,) = doc["devices"]
    assert 0 < device["goodput"] <= 1
    assert 2 <= len(device["steps"]) <= 3  # a step cut by the capture's edge is dropped
    assert device["memory"]["peak_allocated_bytes"] > 2048 * 2048 * 4  # the weight at least
    assert result.goodput and result.goodput[0] == pytest.approx(device["goodput"])
