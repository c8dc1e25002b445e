"""badput.Meter across ranks: 4 CPU processes on gloo, one of them 40 % slower.

Each rank runs a sleep-based loop (robust on a loaded 2-core machine: sleeping ranks need no
CPU) under `Meter(report_every=K)`, with every torch.distributed collective wrapped to count
calls and note the step at which each happened. Rank 0 must name the slow rank as the only
straggler, and the meter must make exactly steps / K all-gathers, each at a reporting point.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORLD = 4
SLOW_RANK = 2
STEPS = 30
REPORT_EVERY = 10
BASE_MS = 50.0  # long enough that sleep overshoot under load (a few ms) stays small

WORKER = r"""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
slow, steps, every, base_ms = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), float(
    sys.argv[8]
)
torch.set_num_threads(1)
dist.init_process_group(
    "gloo",
    init_method=f"tcp://127.0.0.1:{port}",
    rank=rank,
    world_size=world,
    timeout=timedelta(seconds=60),
)

from badput import Meter  # noqa: E402

COLLECTIVES = (
    "all_gather", "all_gather_object", "all_gather_into_tensor", "all_gather_coalesced",
    "all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "new_group", "new_subgroups",
)
calls = []
state = {"meter": None}
originals = []


def counting(name, fn):
    def wrapper(*args, **kwargs):
        meter = state["meter"]
        calls.append([name, meter.steps if meter is not None else -1])
        return fn(*args, **kwargs)

    return wrapper


# Wrap each collective where the meter could reach it: torch.distributed and the c10d module
# (internal calls between c10d functions go through the latter and are counted too).
for module in (dist, c10d):
    for name in COLLECTIVES:
        fn = getattr(module, name, None)
        if fn is not None:
            originals.append((module, name, fn))
            setattr(module, name, counting(name, fn))

meter = Meter(report_every=every, gpu_timing=False)
state["meter"] = meter
step_s = base_ms / 1000 * (1.4 if rank == slow else 1.0)
for _ in range(steps):
    with meter.step(samples=1):
        time.sleep(step_s)
meter.close()
summary = meter.summary()

for module, name, fn in originals:
    setattr(module, name, fn)
with open(out, "w") as f:
    json.dump({"rank": rank, "calls": calls, "summary": summary}, f)
dist.barrier()  # not counted: lets rank 0 (the store) outlive the others' last use of it
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_four_gloo_ranks_name_the_slow_rank_with_one_gather_per_report(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only, whatever the hostname is
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(rank),
                str(WORLD),
                str(port),
                str(tmp_path / f"rank{rank}.json"),
                str(SLOW_RANK),
                str(STEPS),
                str(REPORT_EVERY),
                str(BASE_MS),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, out) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"rank {rank} failed:\n{out}"

    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]

    # Collectives: exactly steps / K all-gathers on every rank, each at a reporting point,
    # nothing else (no barrier, broadcast or all-reduce; nothing between reports or at close).
    expected_calls = [["all_gather", k] for k in range(REPORT_EVERY, STEPS + 1, REPORT_EVERY)]
    assert len(expected_calls) == STEPS // REPORT_EVERY
    for r in results:
        assert r["calls"] == expected_calls, f"rank {r['rank']}"
        assert r["summary"]["steps"] == STEPS
        assert r["summary"]["rank"] == r["rank"]
        assert r["summary"]["lost"] == []

    s0 = results[0]["summary"]
    assert s0["stragglers"] == [SLOW_RANK]
    table = s0["ranks"]
    assert [row["rank"] for row in table] == list(range(WORLD))
    assert all(row["steps"] == STEPS for row in table)
    scores = {row["rank"]: row["straggler_score"] for row in table}
    # fastest median step / this rank's median step: 50 / 70 = 0.714 for a step 1.4x longer
    # (sleep overshoot on every rank nudges it up a little: 0.74 with 7 ms of it).
    assert scores[SLOW_RANK] == pytest.approx(1 / 1.4, abs=0.04)
    for rank, score in scores.items():
        if rank != SLOW_RANK:
            assert score > 0.9
    medians = {row["rank"]: row["median_step_s"] for row in table}
    assert medians[SLOW_RANK] == pytest.approx(1.4 * BASE_MS / 1000, rel=0.1)
    for r in results[1:]:  # only rank 0 holds the table
        assert r["summary"]["ranks"] is None
        assert r["summary"]["stragglers"] == []
