"""Statistical behaviour of `badput bench ab` on this machine: false positives and power.

Runs many A/B trials of a CPU-bound command (each run prints its own work time as JSON):
- A/A: the same command on both sides, half of the trials with a CPU burner in the
  background: the share of trials that report a regression (or improvement) is the false
  positive rate;
- 10 % and 5 % slowdowns: the head does 10 % (5 %) more work; the share of trials that
  report a regression is the power.
Each trial is a full gate run with the default policy (10 rounds, up to 30 when
inconclusive); the verdict at the first look (after 10 rounds) is reported too.
Writes benchmarks/results/gate_stats.md (`--workload gemm`, the default) or
benchmarks/results/gate_stats_pyloop.md (`--workload pyloop`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import machine
from badput.bench.ab import Policy, Side, run_ab
from badput.bench.stats import Decision, compare, decide

HERE = Path(__file__).resolve().parent
# The benchmarks, with the round protocol of the design note (section 5.1): in each fresh
# process one warm-up and then k timed iterations of a fixed piece of work (a round of 50-200
# ms), the round's value being their median, printed as JSON (so interpreter start-up does not
# dilute the effect and a few preempted iterations do not decide the round). `n` sets the
# amount of work; the head's n is the base's times 1.10 (or 1.05).
#
# - gemm: n single-threaded 256 x 256 float64 matrix products per iteration (20 for the base),
#   compiled code like the GEMMs of a training step. One process is as fast as the next here
#   (about 1 % apart), so a round's noise is the machine's.
# - pyloop: a pure-Python loop of n iterations (200,000 for the base), allocation-heavy
#   interpreter code. Each process has a speed of its own on this VM, about 5-8 % apart (memory
#   layout, measured in the note's table): the hard case, where 10 rounds hold too little
#   information for a 10 % change.
WORKLOADS = {
    "gemm": (
        "import numpy as np\n"
        "a=np.random.default_rng(0).random((256,256));b=a.T.copy()\n"
        "def f():\n for _ in range(n): a@b\n",
        20,
        10,
    ),
    "pyloop": ("def f():\n s=0\n for i in range(n): s+=i*i\n", 200_000, 15),
}
HARNESS = (
    "import sys,time,json,statistics;n=int(sys.argv[1]);k=int(sys.argv[2])\n{body}"
    "f();ts=[]\n"
    "for _ in range(k):\n t=time.perf_counter();f();ts.append(time.perf_counter()-t)\n"
    "print(json.dumps({{'work_s': statistics.median(ts)}}))"
)
#: BLAS and OpenMP on one thread: the other core is the CPU burner's (A/A trials).
ENV = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1"
WORKLOAD = "gemm"


def command(n: int) -> str:
    body, _, per_round = WORKLOADS[WORKLOAD]
    return f'{ENV} {sys.executable} -c "{HARNESS.format(body=body)}" {n} {per_round}'


def burner() -> subprocess.Popen[bytes]:
    """A background process that keeps one core busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


RAW: list[dict[str, list[float]]] = []


def trial(base_n: int, head_n: int, policy: Policy) -> tuple[Decision, int, Decision]:
    """One gate run: its final verdict, the rounds it took, and its verdict at the first look.

    The first-look verdict is what the gate said after its first `policy.rounds` rounds, at
    that look's level, recomputed from the recorded rounds exactly as `run_ab` judges them
    (one metric, so Holm changes nothing).
    """
    result = run_ab(
        [("loop", Side(command(base_n)), Side(command(head_n)))], policy, metrics=["work_s"]
    )
    (r,) = result.results
    RAW.append({"n": [base_n, head_n], "base": r.base, "head": r.head})
    k = policy.rounds
    alpha = policy.look_alphas()[0]
    c = compare(r.base[:k], r.head[:k], alpha=alpha, seed=policy.seed)
    first = decide(c, c.p_regression, c.p_improvement, alpha, policy.min_effect)
    return r.decision, r.rounds, first


def rate(decisions: list[Decision], what: set[Decision]) -> float:
    return sum(d in what for d in decisions) / len(decisions)


Row = tuple[str, int, float, float, float, str, bool | None]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=60)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="gemm")
    args = p.parse_args()
    global WORKLOAD
    WORKLOAD = args.workload
    n = WORKLOADS[WORKLOAD][1]
    default = Policy()
    start = time.perf_counter()
    load_before = os.getloadavg()
    rows: list[Row] = []
    changed = {Decision.REGRESSION, Decision.IMPROVEMENT}

    aa: list[Decision] = []
    aa_first: list[Decision] = []
    aa_rounds: list[int] = []
    for i in range(args.trials):
        hog = burner() if i % 2 else None
        try:
            d, r, f = trial(n, n, default)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        aa.append(d)
        aa_first.append(f)
        aa_rounds.append(r)
    fp = rate(aa, changed)
    rows.append(
        (
            "A/A, same command (half with a CPU burner), final verdict",
            args.trials,
            fp,
            rate(aa, {Decision.INCONCLUSIVE}),
            sum(aa_rounds) / len(aa_rounds),
            "false positives <= 2 %",
            fp <= 0.02,
        )
    )
    fp_first = rate(aa_first, changed)
    rows.append(
        (
            "A/A, verdict at the first look (10 rounds)",
            args.trials,
            fp_first,
            rate(aa_first, {Decision.INCONCLUSIVE}),
            float(default.rounds),
            "false positives <= 2 %",
            fp_first <= 0.02,
        )
    )

    for pct, target in ((10, 0.90), (5, None)):
        got: list[Decision] = []
        first: list[Decision] = []
        used: list[int] = []
        for _ in range(args.trials):
            d, r, f = trial(n, round(n * (1 + pct / 100)), default)
            got.append(d)
            first.append(f)
            used.append(r)
        power = rate(got, {Decision.REGRESSION})
        rows.append(
            (
                f"{pct} % slower, final verdict (10 rounds, up to 30)",
                args.trials,
                power,
                rate(got, {Decision.INCONCLUSIVE}),
                sum(used) / len(used),
                "reported",
                None,
            )
        )
        power_first = rate(first, {Decision.REGRESSION})
        rows.append(
            (
                f"{pct} % slower, verdict at the first look (10 rounds)",
                args.trials,
                power_first,
                rate(first, {Decision.INCONCLUSIVE}),
                float(default.rounds),
                f"detected >= {100 * target:.0f} %" if target else "reported",
                power_first >= target if target else None,
            )
        )

    lines = [
        "# `badput bench ab`: false positives and power on this machine",
        "",
        f"Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}. Made by "
        f"`.venv/bin/python benchmarks/gate_stats.py --trials {args.trials} --workload "
        f"{WORKLOAD}` in {time.perf_counter() - start:,.0f} s.",
        "",
        f"Each trial is one gate run: base and head are `python -c <{WORKLOAD} work>` (see the "
        "script), a fresh process each round, interleaved A B / B A. Each run does one warm-up "
        f"and {WORKLOADS[WORKLOAD][2]} timed iterations of the work (n = {n:,} for the base; "
        f"median round value: {1e3 * statistics.median(v for t in RAW for v in t['base']):.1f} "
        "ms) and prints their median as `work_s`, the metric judged. Default policy: alpha "
        "0.01 (Holm) spent over 3 looks as "
        f"{', '.join(f'{a:g}' for a in default.look_alphas())}, minimum effect 5 %, 10 "
        "rounds, up to 30 when inconclusive. 'At the first look' is the verdict the same gate "
        "run had after its first 10 rounds (recomputed from its recorded rounds).",
        "",
        "| trials | n | regression (or any change, for A/A) | inconclusive | mean rounds | "
        "target | result |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for label, trials, share, inconclusive, rounds, target, ok in rows:
        verdict = "–" if ok is None else ("PASS" if ok else "FAIL")
        lines.append(
            f"| {label} | {trials} | {100 * share:.1f} % | {100 * inconclusive:.1f} % | "
            f"{rounds:.1f} | {target} | {verdict} |"
        )
    lines += [
        "",
        f"Machine: {machine.cpu_model()}, {os.cpu_count()} cores, "
        f"{machine.mem_gib():.0f} GiB, Python {platform.python_version()}, "
        f"{platform.platform()}. Load average (1, 5, 15 min) before: "
        f"{', '.join(f'{x:.2f}' for x in load_before)}; after: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    suffix = "" if WORKLOAD == "gemm" else f"_{WORKLOAD}"
    out = HERE / "results" / f"gate_stats{suffix}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = (
        HERE / "work" / f"gate_stats{suffix}_raw.json"
    )  # every trial's round values, for a re-analysis
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(RAW))
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
