"""`badput.Meter` on a real CUDA device: lazy CUDA-event timing that never waits for the GPU.

Marked `gpu`: `make test` deselects these tests, `make gpu-check` runs them. Without an NVIDIA
GPU they skip; with one but without a CUDA build of torch they fail, so that a GPU machine
cannot pass the check by skipping. torch is imported only inside the fixture: this module
imports (and pytest collects it) on a CPU machine.

Two checks, because `torch.cuda.set_sync_debug_mode("error")` catches only the synchronizing
calls torch routes through its sync check (`.item()`, blocking copies, stream synchronize),
not `torch.cuda.Event.synchronize()`: the second test shows directly that the metered loop
runs ahead of the GPU.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import badput
from badput.estimate.hardware import lookup_gpu

pytestmark = pytest.mark.gpu

BATCH = 256
WIDTH = 1024
HIDDEN = 4096
# Model FLOPs of one step: 2 per multiply-add forward, 4 backward, over the two linear layers.
FLOPS_PER_STEP = 6.0 * BATCH * (WIDTH * HIDDEN + HIDDEN * WIDTH)


@contextmanager
def no_sync_allowed(torch: Any) -> Iterator[None]:
    """Any synchronizing CUDA call raises; a meter failure (which would fail open) raises too."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("error", badput.MeterWarning)
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)


def test_metered_cuda_training_loop_never_synchronizes(torch: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, HIDDEN), torch.nn.GELU(), torch.nn.Linear(HIDDEN, WIDTH)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    # Batches made on the GPU beforehand: a copy from pageable host memory would synchronize.
    pool = [
        (torch.randn(BATCH, WIDTH, device=device), torch.randn(BATCH, WIDTH, device=device))
        for _ in range(4)
    ]

    def train_step(x: Any, y: Any) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        torch.nn.functional.mse_loss(out.float(), y).backward()
        opt.step()

    # Warm-up outside the checked region: cuBLAS handles, the allocator, momentum buffers.
    for x, y in pool:
        train_step(x, y)
    torch.cuda.synchronize()

    out = tmp_path / "goodput.jsonl"
    meter = badput.Meter(
        out=out, flops_per_step=FLOPS_PER_STEP, precision="bf16", report_every=50
    )  # gpu_timing="auto": CUDA events
    steps = 300
    batches = [pool[i % len(pool)] for i in range(steps)]
    with no_sync_allowed(torch):
        for x, y in meter.data(batches):
            with meter.step(samples=BATCH):
                train_step(x, y)

    # Read before any synchronize: what the meter drained itself, with query(), during the loop.
    live = meter.summary()
    gpu = live["gpu_step_time_s"]
    assert gpu is not None, "CUDA events were not used"
    assert live["lost"] == []
    assert live["steps"] == steps
    assert gpu["measured_steps"] > 0
    assert gpu["measured_steps"] + gpu["pending_steps"] + gpu["dropped_steps"] == steps
    assert live["gpu"] == torch.cuda.get_device_name()

    spec = lookup_gpu(live["gpu"], warn=False)
    peak = spec.peak("bf16") if spec is not None else None
    if peak is None:  # not in badput's hardware table: no MFU is claimed
        assert live["mfu"] is None
    else:
        assert live["mfu_denominator_tflops"] == peak
        assert live["mfu"] is not None
        assert 0.0 < live["mfu"] < 1.0

    # Once the GPU is done, close() reads every pending pair without waiting.
    torch.cuda.synchronize()
    meter.close()
    final = meter.summary()
    gpu = final["gpu_step_time_s"]
    assert gpu["pending_steps"] == 0
    assert gpu["measured_steps"] + gpu["dropped_steps"] == steps
    assert gpu["mean"] is not None and 0.0 < gpu["mean"] <= gpu["max"]
    assert final["lost"] == []

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["type"] for r in records] == ["report"] * (steps // 50) + ["final"]
    assert records[-1]["gpu"] == live["gpu"]


def test_metered_loop_runs_ahead_of_the_gpu(torch: Any) -> None:
    # A step whose GPU work is a spin of CYCLES clock cycles: at most 3 GHz, so >= 16.7 ms.
    cycles = 50_000_000
    min_gpu_step_s = cycles / 3e9
    torch.cuda._sleep(1_000)  # load the kernel
    torch.cuda.synchronize()

    meter = badput.Meter(distributed=False)
    steps = 10
    with no_sync_allowed(torch):
        t0 = time.perf_counter()
        for _ in meter.data(range(steps)):
            with meter.step():
                torch.cuda._sleep(cycles)
        host_s = time.perf_counter() - t0
        live = meter.summary()["gpu_step_time_s"]

    # The host finished long before the GPU could have: nothing in the meter waited for it.
    assert host_s < 0.25 * steps * min_gpu_step_s
    assert live is not None
    assert live["measured_steps"] < steps
    assert live["pending_steps"] > 0

    torch.cuda.synchronize()
    meter.close()
    gpu = meter.summary()["gpu_step_time_s"]
    assert gpu["measured_steps"] == steps
    assert gpu["mean"] >= 0.9 * min_gpu_step_s
    assert host_s < 0.25 * gpu["mean"] * steps
    assert meter.lost == []
