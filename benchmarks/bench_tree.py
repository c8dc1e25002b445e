"""Time `launch_tree` (badput.analysis.tree) on a trace, optionally tiled to a big one.

    .venv/bin/python benchmarks/bench_tree.py TRACE [--tile N] [--repeat R] [--profile]

TRACE is any trace `load_trace` reads (the benchmark trace `benchmarks/work/big_trace.json`,
or a real one such as a TraceLens `with_stack` trace). `--tile N` repeats its rows N times at
the Trace level, each copy shifted in time by the trace's span (plus 1 us) and its
correlation, flow and external ids shifted past the previous copy's, so the copies link only
within themselves: a quick stand-in for a big trace of a kind that no stored file has
(deep Python stacks, `nn.Module` frames). Prints the best and median wall and CPU time per
call, and with `--profile` the CPU time of each phase (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from badput.analysis.tree import launch_tree
from badput.trace import load_trace
from badput.trace.model import NO_ID, Trace

PHASES = (
    "launch_tree",
    "build",
    "nest",
    "dense_pairs",
    "_link_by_correlation",
    "_link_by_flow",
    "_forward_ops",
    "walk_up",
    "_module_paths",
    "find_by_key_time",
    "name_mask",
)


def tile(trace: Trace, copies: int) -> Trace:
    """`trace`'s rows `copies` times, each copy later in time and with fresh ids."""
    if copies <= 1:
        return trace
    end = trace.ts_ns + np.maximum(trace.dur_ns, 0)
    period = int(end.max() - trace.ts_ns.min()) + 1000
    k = np.repeat(np.arange(copies, dtype=np.int64), len(trace))

    def shifted(col: np.ndarray) -> np.ndarray:
        valid = col[col != NO_ID]
        if valid.size == 0:
            return np.tile(col, copies)
        step = int(valid.max() - min(int(valid.min()), 0)) + 1
        out = np.tile(col, copies)
        has = out != NO_ID
        out[has] += k[has] * step
        return out

    fields = {f.name: getattr(trace, f.name) for f in dataclasses.fields(trace)}
    for name, value in fields.items():
        if isinstance(value, np.ndarray) and value.shape == (len(trace),):
            fields[name] = np.tile(value, copies)
    fields["ts_ns"] = np.tile(trace.ts_ns, copies) + k * period
    fields["correlation"] = shifted(trace.correlation)
    fields["external_id"] = shifted(trace.external_id)
    fields["comm_meta"] = None
    fields["op_args"] = None
    return Trace(**fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--tile", type=int, default=1, help="repeat the rows N times")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls")
    ap.add_argument("--profile", action="store_true", help="CPU time per phase")
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = tile(load_trace(args.trace), args.tile)
    tree = launch_tree(trace)  # warm-up
    print(
        f"{len(trace)} rows, {len(tree)} GPU activities, {len(tree.module_paths)} module paths "
        f"(load + first call {time.perf_counter() - t0:.1f} s)"
    )
    wall, cpu = [], []
    for _ in range(args.repeat):
        w, c = time.perf_counter(), time.process_time()
        launch_tree(trace)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    w_best, w_med = min(wall) * 1e3, statistics.median(wall) * 1e3
    c_best, c_med = min(cpu) * 1e3, statistics.median(cpu) * 1e3
    print(
        f"launch_tree: wall best {w_best:.1f} ms, median {w_med:.1f} ms; "
        f"cpu best {c_best:.1f} ms, median {c_med:.1f} ms"
    )
    if args.profile:
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            prof = cProfile.Profile(time.process_time)
            prof.runcall(launch_tree, trace)
            seen: dict[str, float] = {}
            for (path, _, func), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
                if func in PHASES and ("badput" in path or func == "name_mask"):
                    seen[func] = seen.get(func, 0.0) + row[3]
            for func, s in seen.items():
                best[func] = min(best.get(func, s), s)
        for func in PHASES:
            if func in best:
                print(f"  {func:22s} {best[func] * 1e3:8.1f} ms cpu")


if __name__ == "__main__":
    main()
