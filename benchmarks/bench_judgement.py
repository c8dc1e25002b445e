"""What judging from evidence (issue 18) costs `badput analyze`.

Kernel classes from the launching op, NCCL metadata and the stream, blocking host calls from
timing, precision from `Input type`, trusted windows and job grouping: all of it runs on every
analysis. Budget: on the 1 GB benchmark trace (built by make_big_trace.py when missing),
`badput analyze --format json` may slow by at most 10 %.

"Before" is the code of a git ref from before issue 18 (default BEFORE_REF), checked out with
`git archive` into benchmarks/work/ and its C scanner built there (bench_model_cost.checkout);
"after" is this checkout. Both run with the same interpreter and packages (.venv), pinned to
one CPU, alternating, `--repeat` times each; the medians are compared. In one process, the new
parts are also timed on their own: `classify_kernels`, `DeviceContext.blocking` and the
precisions of the low-precision rule.

Exit status: 0 when the slowdown is within the budget, 1 otherwise or when a run fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_analyze  # noqa: E402 (beside this script)
import bench_model_cost  # noqa: E402
import make_big_trace  # noqa: E402

#: main before issue 18 (2026-12-02): kernel classes by name only.
BEFORE_REF = "776620f"
BUDGET = 1.10
RESULTS = HERE / "results/judgement_cost.md"

_PHASES = """
import json, sys, time
from badput.analysis.classify import classify_kernels
from badput.analysis.device import analyze_trace
from badput.analysis.precision import matmul_precisions
from badput.diagnose import outcome_of
from badput.diagnose.context import DeviceContext
from badput.trace import load_trace
from badput.trace.model import EventKind
t = time.perf_counter(); trace = load_trace(sys.argv[1]); load_s = time.perf_counter() - t
def best(fn):
    out = []
    for _ in range(3):
        t = time.perf_counter(); value = fn(); out.append(time.perf_counter() - t)
    return min(out), value
analyze_s, devices = best(lambda: analyze_trace(trace))
tree = devices[0].timeline.tree
classify_s, _ = best(lambda: classify_kernels(trace, tree))
blocking_s, _ = best(lambda: [DeviceContext(trace, d).blocking for d in devices])
precision_s, _ = best(lambda: matmul_precisions(trace, tree))
diagnose_s, _ = best(lambda: outcome_of(trace, devices))
print(json.dumps({"load_s": load_s, "analyze_s": analyze_s, "classify_s": classify_s,
                  "blocking_s": blocking_s, "precision_s": precision_s,
                  "diagnose_s": diagnose_s,
                  "kernels": int((trace.kind == EventKind.KERNEL).sum())}))
"""


def phases(trace: Path, cpu: int) -> dict[str, float]:
    """In one process, pinned: load once, then each phase best of 3."""
    run = bench_analyze.measure("phases", [str(bench_model_cost.VENV_PY), "-c", _PHASES,
                                           str(trace)], cpu)  # fmt: skip
    if not run.ok:
        raise SystemExit(f"phases failed: {run.stderr_tail}")
    return {k: float(v) for k, v in run.info.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--trace", type=Path, default=make_big_trace.DEFAULT_OUT)
    p.add_argument("--min-bytes", type=float, default=make_big_trace.DEFAULT_MIN_BYTES)
    p.add_argument("--before", default=BEFORE_REF, help="git ref of the code before")
    p.add_argument("--repeat", type=int, default=5, help="runs of each, alternating")
    p.add_argument("--cpu", type=int, default=None)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    trace = args.trace.resolve()
    bench_analyze.ensure_trace(trace, int(args.min_bytes), False)
    before_src = bench_model_cost.checkout(args.before)
    bench_analyze.warm_page_cache(trace)
    commands = {
        "before": bench_model_cost.command(before_src, trace),
        "after": bench_model_cost.command(REPO, trace),
    }
    runs = bench_model_cost.alternate(commands, args.repeat, cpu)
    if runs is None:
        return 1
    walls, cpus, rss = runs
    ph = phases(trace, cpu)
    med = {k: statistics.median(v) for k, v in walls.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    ratio = med["after"] / med["before"]
    ok = ratio <= BUDGET
    size = trace.stat().st_size
    whole = ph["load_s"] + ph["analyze_s"] + ph["diagnose_s"]
    lines = [
        "# Cost of judging from evidence (issue 18) in `badput analyze`",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Trace: `{trace.name}`, {size:,} bytes of uncompressed JSON (make_big_trace.py: the "
        f"V100 ResNet50 trace, recorded with shapes, replicated; {int(ph['kernels']):,} "
        "kernels).",
        "",
        f"before = `{args.before}` (kernel classes by name, syncs by name), after = this "
        "checkout; both `analyze --format json`, same .venv, each its own process pinned to "
        f"CPU {cpu}, alternating, {args.repeat} runs each, medians shown.",
        "",
        "| code | wall (s) | CPU (s) | peak RSS (MiB) |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {med[k]:.2f} | {med_cpu[k]:.2f} | {rss[k]:,.0f} |" for k in commands),
        "",
        "| target | value | result |",
        "|---|---:|---|",
        f"| after / before wall <= {BUDGET:.2f} | {ratio:.3f} | {'PASS' if ok else 'FAIL'} |",
        "",
        "In one process (load once, then each phase best of 3): "
        f"load {ph['load_s']:.2f} s, analyze_trace {ph['analyze_s']:.3f} s, diagnosis "
        f"{ph['diagnose_s']:.3f} s. Of these, the new parts: kernel classes "
        f"{ph['classify_s']:.3f} s, blocking calls {ph['blocking_s']:.3f} s, matmul precisions "
        f"{ph['precision_s']:.3f} s; together "
        f"{100 * (ph['classify_s'] + ph['blocking_s'] + ph['precision_s']) / whole:.1f} % of "
        "load + analysis + diagnosis.",
        "",
        *(
            f"- {k}: wall of each run (s): {', '.join(f'{w:.2f}' for w in v)}"
            for k, v in walls.items()
        ),
        "",
        "Machine:",
        "",
        *bench_analyze.machine_description()[:2],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text)
    print(f"wrote {args.results}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
