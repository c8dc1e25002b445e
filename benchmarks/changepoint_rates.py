"""Detection and false-alarm rates of the history monitor's change-point detector.

Synthetic histories of 60 run-level values (lower is better), one per seed:
- noise: multiplicative Gaussian, value = level * exp(N(0, cv)), at several CVs;
- outliers: one-sided "noisy neighbour" slowdowns, each point slowed by U(lo, hi) with a
  small probability (the shared-runner pattern of docs/regression-gate.md, 3.1);
- step series: a 5 % step up starting at a random index in [5, 55], so at least 5 points lie
  on each side; flat series: no step; temporary regression: 5 % up at a random index in
  [10, 40] for 10 points, then back.

For each configuration and seed, `detect` runs with its defaults (p <= 0.01, 199
permutations, 3 % floor, 2 confirming points, outlier pre-pass on; the last configuration
turns the pre-pass off) and the detector seed = the series seed. Reported:
- detection: the share of step series with a confirmed change within 3 points of the true
  index (and counting unconfirmed ones too), the median distance when found, and the
  confirmed changes elsewhere per step series;
- false alarms: confirmed changes per flat series, the share of flat series with any, and the
  share with any change at all (confirmed or not);
- temporary regression: its start found (confirmed, within 3 points), and both edges found.
Writes benchmarks/results/changepoint.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from badput.bench.changepoint import detect

HERE = Path(__file__).resolve().parent
LENGTH = 60
STEP = 0.05
STEP_RANGE = (5, 55)  # first index of the new level, inclusive
WITHIN = 3
BLIP_LENGTH = 10  # temporary regression: STEP up for this many points, then back
BLIP_RANGE = (10, 40)


@dataclass(frozen=True)
class Config:
    label: str
    cv: float
    outlier_p: float
    outlier_lo: float = 0.05
    outlier_hi: float = 0.30
    prepass: bool = True


CONFIGS = [
    Config("1 % CV, 5 % outliers (+5-30 %)", 0.01, 0.05),
    Config("2 % CV, 5 % outliers (+5-30 %)", 0.02, 0.05),
    Config("3 % CV, 5 % outliers (+5-30 %)", 0.03, 0.05),
    Config("2 % CV, no outliers", 0.02, 0.0),
    Config("2 % CV, 10 % outliers (+5-35 %), design 3.1 model", 0.02, 0.10, 0.05, 0.35),
    Config("2 % CV, 5 % outliers, outlier pre-pass off", 0.02, 0.05, prepass=False),
]


def series(cfg: Config, seed: int, level: np.ndarray) -> list[float]:
    rng = np.random.default_rng((seed, round(cfg.cv * 1e4), round(cfg.outlier_p * 1e4)))
    noise = np.exp(rng.normal(0.0, cfg.cv, LENGTH))
    slow = 1 + (rng.random(LENGTH) < cfg.outlier_p) * rng.uniform(
        cfg.outlier_lo, cfg.outlier_hi, LENGTH
    )
    return [float(v) for v in level * noise * slow]


@dataclass(frozen=True)
class Trial:
    interior: bool  # the step lies at least 10 points from either end
    found: bool  # a confirmed change within WITHIN points of the step
    found_any: bool  # the same, confirmed or not
    distance: int | None  # |index - step| of the nearest confirmed change within WITHIN
    elsewhere: int  # confirmed changes farther than WITHIN from the step
    flat_confirmed: int  # confirmed changes on the flat series
    flat_any: int  # all changes on the flat series
    blip_start: bool  # temporary regression: confirmed change within WITHIN of its start
    blip_both: bool  # ... and a change within WITHIN of its end


def trial(args: tuple[Config, int, int]) -> Trial:
    cfg, seed, permutations = args
    options: dict[str, Any] = {"permutations": permutations, "seed": seed}
    if not cfg.prepass:
        options["outlier_k"] = None
    place = np.random.default_rng((seed, 7))
    step_at = int(place.integers(STEP_RANGE[0], STEP_RANGE[1] + 1))
    level = np.ones(LENGTH)
    level[step_at:] *= 1 + STEP
    cps = detect(series(cfg, seed, level), **options)
    near = [abs(c.index - step_at) for c in cps if abs(c.index - step_at) <= WITHIN]
    near_confirmed = [
        abs(c.index - step_at) for c in cps if c.confirmed and abs(c.index - step_at) <= WITHIN
    ]
    elsewhere = sum(c.confirmed and abs(c.index - step_at) > WITHIN for c in cps)
    flat = detect(series(cfg, seed, np.ones(LENGTH)), **options)
    blip_at = int(place.integers(BLIP_RANGE[0], BLIP_RANGE[1] + 1))
    level = np.ones(LENGTH)
    level[blip_at : blip_at + BLIP_LENGTH] *= 1 + STEP
    blip = detect(series(cfg, seed, level), **options)
    start = any(c.confirmed and abs(c.index - blip_at) <= WITHIN for c in blip)
    end = any(abs(c.index - blip_at - BLIP_LENGTH) <= WITHIN for c in blip)
    return Trial(
        interior=10 <= step_at <= LENGTH - 10,
        found=bool(near_confirmed),
        found_any=bool(near),
        distance=min(near_confirmed) if near_confirmed else None,
        elsewhere=elsewhere,
        flat_confirmed=sum(c.confirmed for c in flat),
        flat_any=len(flat),
        blip_start=start,
        blip_both=start and end,
    )


@dataclass(frozen=True)
class Row:
    label: str
    seeds: int
    found: float
    found_any: float
    found_interior: float
    distance: float
    elsewhere: float
    flat_per_series: float
    flat_share: float
    flat_any_share: float
    blip_start: float
    blip_both: float


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--permutations", type=int, default=199)
    p.add_argument(
        "--quick", action="store_true", help="40 seeds, for a smoke run (results not written)"
    )
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    seeds = 40 if args.quick else args.seeds
    start = time.perf_counter()
    rows: list[Row] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for cfg in CONFIGS:
            trials = list(
                pool.map(trial, [(cfg, s, args.permutations) for s in range(seeds)], chunksize=8)
            )
            n = len(trials)
            distances = [t.distance for t in trials if t.distance is not None]
            inner = [t for t in trials if t.interior]
            rows.append(
                Row(
                    label=cfg.label,
                    seeds=n,
                    found=sum(t.found for t in trials) / n,
                    found_any=sum(t.found_any for t in trials) / n,
                    found_interior=sum(t.found for t in inner) / max(1, len(inner)),
                    distance=statistics.median(distances) if distances else float("nan"),
                    elsewhere=sum(t.elsewhere for t in trials) / n,
                    flat_per_series=sum(t.flat_confirmed for t in trials) / n,
                    flat_share=sum(t.flat_confirmed > 0 for t in trials) / n,
                    flat_any_share=sum(t.flat_any > 0 for t in trials) / n,
                    blip_start=sum(t.blip_start for t in trials) / n,
                    blip_both=sum(t.blip_both for t in trials) / n,
                )
            )
    elapsed = time.perf_counter() - start
    # Acceptance (the issue): "found within 3 points in most seeds" (target: more than half of
    # the seeds at each of 1, 2 and 3 % CV with occasional outliers) and "few spurious points"
    # (target: at most 5 % of flat series with a confirmed change).
    acceptance = rows[:3]
    ok = all(r.found > 0.5 and r.flat_share <= 0.05 for r in acceptance)
    cmd = f".venv/bin/python benchmarks/changepoint_rates.py --seeds {seeds}"
    if args.permutations != 199:
        cmd += f" --permutations {args.permutations}"
    lines = [
        "# History monitor: change-point detection rates on synthetic series",
        "",
        f"Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}. Made by `{cmd}` in "
        f"{elapsed:,.0f} s ({args.jobs} processes).",
        "",
        f"Each seed gives two series of {LENGTH} values: one with a {100 * STEP:.0f} % step up "
        f"at a random index in [{STEP_RANGE[0]}, {STEP_RANGE[1]}] and one flat. Noise is "
        "multiplicative Gaussian (value = level x exp(N(0, CV))); outliers are one-sided "
        "slowdowns hitting each point with the stated probability. Detector: "
        "`badput.bench.changepoint.detect` with its defaults (E-Divisive means, "
        f"p <= 0.01 with {args.permutations} permutations, 3 % magnitude floor, 2 confirming "
        "points, MAD outlier pre-pass with k = 4), seeded with the series seed.",
        "",
        f"*Found* = a confirmed change within {WITHIN} points of the true index. *Elsewhere* = "
        "confirmed changes farther away on the step series. *Flat* columns count changes on "
        "the flat series.",
        "",
        "| noise | seeds | found (confirmed) | found (any) | found, step 10+ from the ends | "
        "median distance | "
        "elsewhere / series | flat: confirmed / series | flat: series with any confirmed | "
        "flat: series with any change |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.label} | {r.seeds} | {pct(r.found)} | {pct(r.found_any)} | "
            f"{pct(r.found_interior)} | {r.distance:.0f} | {r.elsewhere:.3f} | "
            f"{r.flat_per_series:.3f} | {pct(r.flat_share)} | {pct(r.flat_any_share)} |"
        )
    lines += [
        "",
        f"Temporary regression: a {100 * STEP:.0f} % step up at a random index in "
        f"[{BLIP_RANGE[0]}, {BLIP_RANGE[1]}], back down {BLIP_LENGTH} points later (same "
        "noise, same seeds).",
        "",
        "| noise | seeds | start found (confirmed, within 3) | start and end found |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.label} | {r.seeds} | {pct(r.blip_start)} | {pct(r.blip_both)} |")
    lines += [
        "",
        "Acceptance (first three rows): a confirmed change found within 3 points in most (more "
        "than half of the) seeds, and at most 5 % of flat series with a confirmed change: "
        f"**{'PASS' if ok else 'FAIL'}**.",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}, {platform.platform()}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        out = HERE / "results" / "changepoint.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    else:
        print("(--quick: results not written)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
