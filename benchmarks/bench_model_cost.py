"""What the model view (ops, modules, roofline, MFU waterfall) costs `badput analyze`.

Issue 17's budget: on the 1 GB benchmark trace (built by make_big_trace.py when missing),
`badput analyze --format json` may slow by at most 15 % with ops, modules and the waterfall on.
"Before" is the code of a git ref from before the model view (default BEFORE_REF: the commit
before issue 17 began), checked out with `git archive` into benchmarks/work/ and its C scanner
built there; "after" is this checkout. Both run with the same interpreter and packages
(.venv), pinned to one CPU, alternating, `--repeat` times each; the medians are compared.
Wall = spawn to exit, as a user waits.

Exit status: 0 when the slowdown is within the budget, 1 otherwise or when a run fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_analyze  # noqa: E402 (beside this script)
import make_big_trace  # noqa: E402

#: main before issue 17 (2026-12-01): reader without op args, no launch tree in analyze.
BEFORE_REF = "5227871"
BUDGET = 1.15
RESULTS = HERE / "results/model_cost.md"
VENV_PY = REPO / ".venv/bin/python"


def checkout(ref: str) -> Path:
    """`ref`'s tree in benchmarks/work/before-SHA with its C extension built in place."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dest = HERE / f"work/before-{sha}"
    stamp = dest / ".built"
    if stamp.exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "src.tar"
        subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(tar), sha], check=True)
        with tarfile.open(tar) as t:
            t.extractall(dest, filter="data")
    build = [str(VENV_PY), "-c", "from setuptools import setup; setup()", "build_ext",
             "--inplace", "-q"]  # fmt: skip
    subprocess.run(build, cwd=dest, check=True, stdout=subprocess.DEVNULL)
    stamp.touch()
    return dest


def command(src: Path, trace: Path, *, model: bool = True) -> list[str]:
    # "model off" is this checkout with analyze_trace(model=False): what the reader's new
    # fields cost without the tree and the ops, and so what the model view itself costs.
    off = (
        "import functools, badput.analysis as a; "
        "a.analyze_trace = functools.partial(a.analyze_trace, model=False); "
        if not model
        else ""
    )
    code = (
        f"import sys; sys.path.insert(0, {str(src / 'src')!r}); {off}"
        "from badput.cli.app import main; "
        f"raise SystemExit(main(['analyze', {str(trace)!r}, '--format', 'json', "
        f"'--out', {os.devnull!r}]))"
    )
    return [str(VENV_PY), "-c", code]


Runs = tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]


def alternate(commands: dict[str, list[str]], repeat: int, cpu: int) -> Runs | None:
    """Run each command `repeat` times, alternating, pinned to `cpu`.

    Returns wall and CPU seconds of each run and the peak RSS (MiB) per command; None (after
    printing why) when a run fails.
    """
    walls: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, float] = dict.fromkeys(commands, 0.0)
    for i in range(repeat):
        for key, cmd in commands.items():
            run = bench_analyze.measure(key, cmd, cpu)
            if not run.ok:
                print(f"{key} failed: {run.stderr_tail}", file=sys.stderr)
                return None
            walls[key].append(run.wall_s)
            cpus[key].append(run.cpu_s)
            rss[key] = max(rss[key], run.max_rss_mib)
            print(f"  round {i + 1} {key}: wall {run.wall_s:.2f} s", file=sys.stderr)
    return walls, cpus, rss


_PHASES = """
import json, sys, time
from badput.analysis.device import analyze_trace
from badput.trace import load_trace
t = time.perf_counter(); trace = load_trace(sys.argv[1]); load_s = time.perf_counter() - t
def best(model):
    out = []
    for _ in range(3):
        t = time.perf_counter(); analyze_trace(trace, model=model)
        out.append(time.perf_counter() - t)
    return min(out)
print(json.dumps({"load_s": load_s, "off_s": best(False), "on_s": best(True)}))
"""


def phases(trace: Path, cpu: int) -> dict[str, float]:
    """In one process, pinned: load once, then analyze_trace with the model off and on (best
    of 3 each): the model view's own cost without process start-up and run-to-run noise."""
    run = bench_analyze.measure("phases", [str(VENV_PY), "-c", _PHASES, str(trace)], cpu)
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
    before_src = checkout(args.before)
    bench_analyze.warm_page_cache(trace)
    commands = {
        "before": command(before_src, trace),
        "after, model off": command(REPO, trace, model=False),
        "after": command(REPO, trace),
    }
    runs = alternate(commands, args.repeat, cpu)
    if runs is None:
        return 1
    walls, cpus, rss = runs
    ph = phases(trace, cpu)
    cost_s = ph["on_s"] - ph["off_s"]
    med = {k: statistics.median(v) for k, v in walls.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    ratio = med["after"] / med["before"]
    own = med["after"] / med["after, model off"]
    ok = ratio <= BUDGET and own <= BUDGET
    size = trace.stat().st_size
    lines = [
        "# Cost of the model view (ops, modules, roofline, MFU waterfall) in `badput analyze`",
        "",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Trace: `{trace.name}`, {size:,} bytes of uncompressed JSON (make_big_trace.py: the "
        "V100 ResNet50 trace, recorded with shapes, replicated).",
        "",
        f"before = `{args.before}` (no op args in the reader, no launch tree), after = this "
        "checkout, after with the model off = this checkout with `analyze_trace(model=False)` "
        "(the reader keeps the op args, no tree, no ops); all `analyze --format json`, same "
        f".venv, each its own process pinned to CPU {cpu}, alternating, {args.repeat} runs "
        "each, medians shown.",
        "",
        "| code | wall (s) | CPU (s) | peak RSS (MiB) |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {med[k]:.2f} | {med_cpu[k]:.2f} | {rss[k]:,.0f} |" for k in commands),
        "",
        "| target | value | result |",
        "|---|---:|---|",
        f"| after / before wall <= {BUDGET:.2f} | {ratio:.3f} | "
        f"{'PASS' if ratio <= BUDGET else 'FAIL'} |",
        f"| after / after with the model off <= {BUDGET:.2f} | {own:.3f} | "
        f"{'PASS' if own <= BUDGET else 'FAIL'} |",
        "",
        "In one process (load once, then `analyze_trace` best of 3; no start-up, less noise): "
        f"load {ph['load_s']:.2f} s; analysis with the model off {ph['off_s']:.3f} s, on "
        f"{ph['on_s']:.3f} s: the model view (launch tree, ops, modules, waterfall) costs "
        f"{cost_s:.3f} s, {100 * cost_s / (ph['load_s'] + ph['off_s']):.1f} % of load + analysis.",
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
