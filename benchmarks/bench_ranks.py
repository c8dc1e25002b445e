"""Benchmark `badput analyze` over many ranks: local executor with 1 and 2 jobs, and Ray.

Inputs, built in benchmarks/work/ (git-ignored): the 8 PARAM DLRM ranks of
tests/data/traces/param-dlrm-8rank as they are, and a 64-rank set replicated from them: copy c
of rank r becomes rank 8c + r of world size 64, every timestamp shifted by c x 1,234 us (a
clock offset the cross-rank view has to find).

Each configuration runs `badput analyze DIR --format json --out FILE` in a fresh process,
ROUNDS times, the executors interleaved. The process is this file in `--driver` mode: it runs
badput's `main()` and then writes its own peak RSS (`getrusage(RUSAGE_SELF).ru_maxrss`): the
driver's, not its pool workers' or Ray's processes (separate processes, reported apart where
they are the driver's children: `RUSAGE_CHILDREN`, the largest waited-for child). Reported:
median wall time, median driver peak RSS over the rounds, and the JSON size. Pool workers
are children of multiprocessing's fork server, not of the driver, so only Ray's processes
show up as the driver's children.

Checks (exit 1 if one fails):
- the three executors' JSON is byte-identical, at 8 and at 64 ranks;
- the driver's peak RSS does not grow with the ranks beyond the summaries: for each executor,
  peak(64) - peak(8) <= 4 x (bytes of the 64 ranks' pickled outcomes - the 8 ranks') + 16 MiB
  (the allowance covers the JSON document being built and the allocator's slack).

Results are printed and written with the machine description to benchmarks/results/ranks.md.
Run: ``.venv/bin/python benchmarks/bench_ranks.py`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import badput
import machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from synth_ranks import replicate_ranks

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "work" / "ranks"
RESULTS = HERE / "results/ranks.md"
# The reference traces are part of the repository; BADPUT_SHARED_TRACES points elsewhere (as in
# tests/conftest.py).
TRACES = Path(os.environ.get("BADPUT_SHARED_TRACES", REPO / "tests/data/traces"))
DLRM = TRACES / "param-dlrm-8rank"

ROUNDS = 3
SHIFT_US = 1_234
SLACK_BYTES = 16 << 20
EXECUTORS = {
    "local, --jobs 1": ["--jobs", "1"],
    "local, --jobs 2": ["--jobs", "2"],
    "ray (local instance)": ["--executor", "ray"],
}


# ---- inputs -------------------------------------------------------------------------------------


def replicate(src: Path, dst: Path, copies: int) -> Path:
    """`copies` x the ranks of `src` (`tests/synth_ranks.replicate_ranks`), made once."""
    if dst.is_dir() and len(list(dst.glob("*.json.gz"))) == copies * 8:
        return dst
    return replicate_ranks(src, dst, copies, SHIFT_US, compresslevel=6)


def outcome_bytes(directory: Path) -> int:
    """Pickled size of every rank's outcome: what the workers send the driver."""
    from badput.scale import analyze_path

    return sum(
        len(pickle.dumps(analyze_path(str(p), None, 10)))
        for p in sorted(directory.glob("*.json.gz"))
    )


# ---- one run in a fresh process ----------------------------------------------------------------


def driver(argv: list[str], rss_file: str) -> int:
    """Run badput's CLI in this process; write this process' peak RSS (KiB) to `rss_file`."""
    from badput.cli.app import main

    code = main(argv)
    usage = {
        "self_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }
    Path(rss_file).write_text(json.dumps(usage))
    return code


def run_once(directory: Path, extra: list[str], out: Path) -> tuple[float, int, int]:
    """Wall seconds, driver peak RSS and largest child's peak RSS (bytes) of one analyze."""
    rss_file = out.with_suffix(".rss.json")
    cmd = [sys.executable, __file__, "--driver", str(rss_file), "--", "analyze", str(directory),
           "--format", "json", "--out", str(out), *extra]  # fmt: skip
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = (time.perf_counter_ns() - t0) / 1e9
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    usage = json.loads(rss_file.read_text())
    return wall, usage["self_kib"] * 1024, usage["children_kib"] * 1024


# ---- report -------------------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args()
    if not DLRM.is_dir():
        print(f"no DLRM traces at {DLRM}", file=sys.stderr)
        return 1
    t_start = time.perf_counter()
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    sets = {8: DLRM, 64: replicate(DLRM, WORK / "r64", copies=8)}
    summaries = {n: outcome_bytes(d) for n, d in sets.items()}

    walls: dict[tuple[int, str], list[float]] = {}
    rss: dict[tuple[int, str], list[int]] = {}
    child_rss: dict[tuple[int, str], list[int]] = {}
    outputs: dict[tuple[int, str], bytes] = {}
    out_dir = WORK / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in range(args.rounds):
        for n, directory in sets.items():
            names = list(EXECUTORS) if r % 2 == 0 else list(reversed(EXECUTORS))
            for name in names:
                out = out_dir / f"r{n}-{name.split()[0].strip(',')}-{len(walls)}.json"
                wall, self_rss, kid_rss = run_once(directory, EXECUTORS[name], out)
                walls.setdefault((n, name), []).append(wall)
                rss.setdefault((n, name), []).append(self_rss)
                child_rss.setdefault((n, name), []).append(kid_rss)
                data = out.read_bytes()
                prev = outputs.setdefault((n, name), data)
                assert prev == data, f"{name} at {n} ranks: output differs between rounds"
                print(f"round {r + 1} {n:>2} ranks {name:<22} {wall:6.2f} s  "
                      f"driver {mib(self_rss)} MiB", flush=True)  # fmt: skip

    identical = {n: len({outputs[(n, e)] for e in EXECUTORS}) == 1 for n in sets}
    growth_ok = {}
    lines = []
    for name in EXECUTORS:
        grow = statistics.median(rss[(64, name)]) - statistics.median(rss[(8, name)])
        allowed = 4 * (summaries[64] - summaries[8]) + SLACK_BYTES
        growth_ok[name] = grow <= allowed
        lines.append((name, grow, allowed))

    base = {n: statistics.median(walls[(n, "local, --jobs 1")]) for n in sets}
    md = [
        "# `badput analyze` over many ranks: executors",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        "Produced by `benchmarks/bench_ranks.py` (see its docstring for the method). "
        "Inputs: the 8 PARAM DLRM ranks, and 64 ranks replicated from them with shifted "
        f"clocks (copy c: rank 8c + r, +c x {SHIFT_US:,} us). Each run is "
        "`badput analyze DIR --format json` in a fresh process; "
        f"median wall time and median driver peak RSS of {args.rounds} rounds, executors "
        "interleaved. Driver peak RSS is the driver process' own `ru_maxrss`; workers are "
        "separate processes (Ray's show up as the driver's children, the pool's do not: they "
        "are children of multiprocessing's fork server). With `--jobs 1` the driver analyses "
        "each trace itself, one at a time.",
        "",
        "| ranks | executor | wall (s) | vs --jobs 1 | driver peak RSS (MiB) "
        "| largest child peak RSS (MiB) | JSON (KiB) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in sets:
        for name in EXECUTORS:
            wall = statistics.median(walls[(n, name)])
            kid = max(child_rss[(n, name)])
            md.append(
                f"| {n} | {name} | {wall:.2f} | {wall / base[n]:.2f}x | "
                f"{mib(statistics.median(rss[(n, name)]))} | {mib(kid) if kid else '–'} | "
                f"{len(outputs[(n, name)]) / 1024:,.0f} |"
            )
    md += [
        "",
        "Outcomes the workers send the driver (pickled, all ranks): "
        f"{mib(summaries[8])} MiB at 8 ranks, {mib(summaries[64])} MiB at 64 ranks.",
        "",
        "## Checks",
        "",
        "| check | value | result |",
        "|---|---|---|",
    ]
    for n in sets:
        md.append(
            f"| JSON byte-identical across the three executors, {n} ranks | "
            f"{'identical' if identical[n] else 'DIFFERENT'} | "
            f"{'PASS' if identical[n] else 'FAIL'} |"
        )
    for name, grow, allowed in lines:
        md.append(
            f"| driver peak RSS growth 8 -> 64 ranks, {name} (allowed: 4 x outcome growth "
            f"+ 16 MiB = {mib(allowed)} MiB) | {mib(grow)} MiB | "
            f"{'PASS' if growth_ok[name] else 'FAIL'} |"
        )
    import ray

    load_end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    md += [
        "",
        "Machine:",
        "",
        f"- CPU: {machine.cpu_model()}, {os.cpu_count()} cores; RAM {machine.mem_gib():.1f} GiB; "
        f"Linux {platform.release()}; load average at the start {load_start}, at the end "
        f"{load_end}",
        f"- Python {platform.python_version()}, numpy {np.__version__}, ray {ray.__version__}, "
        f"badput {badput.__version__}",
        "",
        f"Run time: {time.perf_counter() - t_start:.0f} s.",
        "",
    ]
    text = "\n".join(md)
    print(text)
    for n in sets:
        for name in list(EXECUTORS)[1:]:
            ratio = statistics.median(walls[(n, name)]) / base[n]
            print(f"{n} ranks: {name} / --jobs 1 wall = {ratio:.2f}")
        print(
            f"{n} ranks: driver peak RSS "
            + ", ".join(
                f"{name} {mib(statistics.median(rss[(n, name)]))} MiB" for name in EXECUTORS
            )
        )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text, encoding="utf-8")
    return 0 if all(identical.values()) and all(growth_ok.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--driver":
        sys.exit(driver(sys.argv[4:], sys.argv[2]))
    sys.exit(main())
