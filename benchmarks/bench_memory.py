"""Benchmark ``badput memory`` against PyTorch's own snapshot tools on one large snapshot.

The anchor is what a user runs today on a snapshot without a browser: PyTorch's
``torch.cuda._memory_viz`` text commands, ``stats`` (``segsum``: how full each segment is)
and ``trace`` (the allocator history, one line per entry), after a plain ``pickle.load``.
badput's side is ``badput memory``'s work: the restricted unpickler (it refuses every global,
so it cannot run code, unlike ``pickle.load``), then the full analysis: the history replayed
for the peaks, the allocations alive at the peak grouped by site, fragmentation, churn and
short-lived allocations.

The snapshot is generated (seeded): segments in PyTorch's three sizes (2 MiB small-pool, 20 MiB
and larger) split into active and free blocks, and a history of alloc / free_requested /
free_completed entries inside the free blocks, each with a traceback drawn from a pool of
shared stacks (PyTorch's pickler memoizes repeated frames the same way).

Besides time, the two sides are checked against each other on the dump state: badput's
reserved bytes, active (rounded) bytes and fragmentation must equal segsum's total_reserved,
total_allocated + internal free and external free (segsum's byte formatter is swapped for an
exact one for that check only).

Results go to benchmarks/results/memory.md. Run: ``.venv/bin/python benchmarks/bench_memory.py``
(``--entries`` to change the history length). Exit status 0 when the cross-check holds and
badput is no slower than the anchor, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import pickle
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import badput
import machine
from badput.analysis.memory import analyze_snapshot
from badput.diagnose.memory import diagnose_memory
from badput.trace.snapshot import load_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from synth_snapshot import block, entry, segment, segsum_totals

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results/memory.md"
MiB = 1 << 20


def make_snapshot(entries: int, seed: int = 0) -> dict[str, Any]:
    """A snapshot with about `entries` history entries and a few hundred segments."""
    rng = random.Random(seed)
    files = [f"/work/model/layer{i}.py" for i in range(40)]
    stacks = []
    for i in range(300):
        torch_frames = [
            {"filename": "??", "line": 0, "name": f"c10::cuda::alloc{i % 7}"},
            {
                "filename": "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py",
                "line": 1700 + i % 50,
                "name": "_call_impl",
            },
        ]
        user = [
            {"filename": rng.choice(files), "line": rng.randint(1, 400), "name": f"forward{j}"}
            for j in range(rng.randint(4, 16))
        ]
        stacks.append(torch_frames + user)
    segments = []
    free_blocks: list[tuple[int, int]] = []
    addr = 0x7F00_0000_0000
    for kind, size, count in (
        ("small", 2 * MiB, 150),
        ("large", 20 * MiB, 150),
        ("large", 256 * MiB, 40),
    ):
        for _ in range(count):
            blocks = []
            offset = 0
            while offset < size:
                unit = 512 if kind == "small" else 2 * MiB if size > 20 * MiB else 512 * 1024
                n = min(size - offset, unit * rng.randint(1, max(1, size // unit // 4)))
                active = rng.random() < 0.6
                req = max(1, n - rng.randint(0, 511)) if active else 0
                state = "active_allocated" if active else "inactive"
                frames = rng.choice(stacks) if active else []
                blocks.append(block(addr + offset, n, state, frames, requested=req))
                if not active:
                    free_blocks.append((addr + offset, n))
                offset += n
            segments.append(segment(addr, size, kind, blocks))
            addr += size + 64 * MiB
    trace = []
    t = 1_000
    # alloc ... free_requested, free_completed inside free blocks: the dump state is unchanged.
    while len(trace) < entries:
        base, n = rng.choice(free_blocks)
        size = min(n, 512 * rng.randint(1, max(1, n // 512)))
        frames = rng.choice(stacks)
        trace.append(entry("alloc", base, size, t, frames))
        t += rng.randint(1, 40)
        trace.append(entry("free_requested", base, size, t, frames))
        trace.append(entry("free_completed", base, size, t + 1, frames))
        t += rng.randint(1, 40)
    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": {"expandable_segments": False},
    }


def anchor(path: str) -> tuple[str, str]:
    """PyTorch's text commands, as `python -m torch.cuda._memory_viz stats|trace` run them."""
    from torch.cuda import _memory_viz

    with open(path, "rb") as f:
        data = pickle.load(f)
    return _memory_viz.segsum(data), _memory_viz.trace(data)


def ours(path: str) -> Any:
    """What `badput memory` computes before it prints."""
    snapshot = load_snapshot(path)
    analysis = analyze_snapshot(snapshot)
    diagnose_memory(analysis)
    return analysis


def cross_check(path: str, analysis: Any) -> list[tuple[str, int, int]]:
    """(quantity, segsum, badput) on the dump state; equal when both read it alike."""
    with open(path, "rb") as f:
        data = pickle.load(f)
    totals, internal_pct = segsum_totals(data)
    reserved, allocated = totals["total_reserved"], totals["total_allocated"]
    free = totals["total_free"]
    # segsum prints only the internal share, rounded; recompute internal exactly from blocks
    internal = sum(
        b["size"] - b["requested_size"]
        for s in data["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    )
    assert internal_pct is None or abs(100 * internal / free - internal_pct) < 0.1
    (d,) = analysis.devices
    return [
        ("reserved bytes", reserved, d.end.reserved_bytes),
        ("active bytes (rounded)", allocated + internal, d.end.allocated_bytes),
        ("fragmentation (external free)", free - internal, d.end.fragmentation_bytes),
    ]


def timed(fn: Any, path: str, rounds: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=150_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args()

    data = make_snapshot(args.entries)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snapshot.pickle")
        with open(path, "wb") as f:
            pickle.dump(data, f, protocol=4)
        size = os.path.getsize(path)
        del data
        # interleave the sides round by round so machine noise hits both alike
        t_anchor, t_ours = [], []
        analysis = None
        for _ in range(args.rounds):
            s, _ = timed(anchor, path, 1)
            t_anchor.append(s)
            s, analysis = timed(ours, path, 1)
            t_ours.append(s)
        checks = cross_check(path, analysis)
    (d,) = analysis.devices
    a, o = statistics.median(t_anchor), statistics.median(t_ours)
    ok_checks = all(x == y for _, x, y in checks)
    lines = [
        "# `badput memory` against PyTorch's `_memory_viz` text commands",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by `benchmarks/bench_memory.py`, "
        f"badput {badput.__version__}, Python {platform.python_version()}, "
        f"{machine.cpu_model()}, {os.cpu_count()} CPUs, {machine.mem_gib():.0f} GiB.",
        "",
        f"Snapshot: {d.end.segments} segments, "
        f"{d.entries:,} history entries, {size / MiB:.1f} MiB pickled (seeded generator).",
        f"Median of {args.rounds} interleaved rounds.",
        "",
        "| side | what it does | median s |",
        "|---|---|---:|",
        f"| PyTorch `_memory_viz` | `pickle.load` (runs any code in the file) + `segsum` + "
        f"`trace` | {a:.3f} |",
        f"| badput | restricted unpickler + replay, peaks, sites, fragmentation, churn, "
        f"findings | {o:.3f} |",
        "",
        f"**Ratio: badput takes {o / a:.2f}x the anchor's time ({a / o:.2f}x as fast).**",
        "",
        "Cross-check on the dump state (segsum with an exact byte formatter):",
        "",
        "| quantity | segsum | badput |",
        "|---|---:|---:|",
        *[f"| {q} | {x:,} | {y:,} |" for q, x, y in checks],
        "",
        f"Cross-check {'holds' if ok_checks else 'FAILS'}. badput also finds the peak: "
        f"{d.peak_allocated_bytes:,} B allocated at entry {d.peak_allocated_entry:,}, "
        f"{d.peak_reserved_bytes:,} B reserved; segsum and trace have no peak.",
        "",
        f"Load average at the end: {os.getloadavg()[0]:.2f}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.results.write_text(text)
    return 0 if ok_checks and o <= a else 1


if __name__ == "__main__":
    sys.exit(main())
