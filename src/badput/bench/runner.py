"""Running a benchmark file: every case in rounds, each round in a fresh process.

`run_file` loads a file's benchmarks (`badput.bench.api`), then runs round 1 of every case,
round 2 of every case, and so on, each round in a new interpreter (`api.child_main`), and
returns every case's round values with the statistics the results document carries.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from badput.bench.api import _CHILD_CODE, _SRC_ROOT, Case, load_benchmarks

__all__ = [
    "CaseResult",
    "RunResult",
    "Runner",
    "result_entry",
    "round_stats",
    "run_document",
    "run_file",
]


@dataclass
class CaseResult:
    """The rounds of one case, or why it stopped."""

    case: Case
    values: list[float] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)  # each round's start, from the run's
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every round ran."""
        return self.error is None and bool(self.values)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: one entry of the run document's `results`."""
        b = self.case.benchmark
        return result_entry(
            self.case.id,
            {"name": b.name, "params": self.case.params},
            {"name": b.metric, "unit": b.unit, "higher_is_better": b.better_higher()},
            self.values,
            self.error,
            {
                "warmup_iters": b.warmup,
                "iters_per_round": b.iterations,
                "round_stat": "median",
                "process_per_round": True,
            },
            self.times_s,
        )


@dataclass
class RunResult:
    """Every case of a file, run in rounds."""

    file: str
    rounds: int
    results: list[CaseResult]
    elapsed_s: float
    python: str

    @property
    def exit_code(self) -> int:
        """0 every case ran; 3 nothing ran or a case failed (never 1: that means regression)."""
        if not self.results or not all(r.ok for r in self.results):
            return 3
        return 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON run document (`badput.bench.run/1`)."""
        results = [r.as_dict() for r in self.results]
        return run_document(self.file, self.python, self.rounds, self.elapsed_s, results)


def result_entry(
    id_: str,
    benchmark: dict[str, Any],
    metric: dict[str, Any],
    values: Sequence[float],
    error: str | None,
    protocol: dict[str, Any],
    times_s: Sequence[float | None] | None = None,
) -> dict[str, Any]:
    """One entry of a run document's `results`: a case's rounds and their statistics.

    Args:
        id_: the case id (the benchmark id in the store).
        benchmark: `name`, `params` (and any other descriptive keys).
        metric: `name`, `unit`, `higher_is_better`.
        values: the round values; empty when the case failed before a round finished.
        error: why the case stopped; None when every round ran.
        protocol: how the rounds were taken.
        times_s: each round's start in seconds from the run's start; None when unknown.
    """
    ok = error is None and bool(values)
    stats = round_stats(values) if ok else None
    times = list(times_s) if times_s is not None else [None] * len(values)
    return {
        "id": id_,
        "benchmark": benchmark,
        "metric": metric,
        "status": "ok" if ok else "error",
        "error": error,
        "estimate": stats["median"] if stats else None,
        "stats": stats,
        "protocol": protocol,
        "rounds": [
            {"i": i, "value": v, "t": t} for i, (v, t) in enumerate(zip(values, times, strict=True))
        ],
    }


def run_document(
    file: str, python: str, rounds: int, elapsed_s: float, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The JSON run document (`badput.bench.run/1`) of `result_entry` results.

    Its `exit_code` is 0 when every case ran, 3 when nothing ran or a case failed.
    """
    ok = bool(results) and all(r["status"] == "ok" for r in results)
    return {
        "schema": "badput.bench.run/1",
        "file": file,
        "python": python,
        "rounds": rounds,
        "elapsed_s": elapsed_s,
        "exit_code": 0 if ok else 3,
        "results": results,
    }


def round_stats(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, IQR, MAD, mean, min and max of the round values.

    Quartiles interpolate linearly between order statistics (numpy's default, the
    "inclusive" method of `statistics.quantiles`); MAD is unscaled: median |x - median|.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no round values")
    med = statistics.median(values)
    q1, _, q3 = (
        statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [med] * 3
    )
    return {
        "n_rounds": len(values),
        "median": med,
        "mean": statistics.fmean(values),
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "mad": statistics.median(abs(v - med) for v in values),
        "min": min(values),
        "max": max(values),
    }


def _selected(cases: list[Case], filters: Sequence[str] | None) -> list[Case]:
    """Cases whose benchmark name or case id equals, or glob-matches, one of the filters."""
    if not filters:
        return cases
    return [
        c
        for c in cases
        if any(
            f in (c.benchmark.name, c.id)
            or fnmatchcase(c.benchmark.name, f)
            or fnmatchcase(c.id, f)
            for f in filters
        )
    ]


Runner = Callable[[Case], float]


def run_file(
    path: str | os.PathLike[str],
    *,
    rounds: int = 10,
    filters: Sequence[str] | None = None,
    python: str | None = None,
    timeout_s: float = 600.0,
    runner: Runner | None = None,
    progress: Callable[[str], None] | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run every selected case of a benchmark file in `rounds` rounds, each in a fresh process.

    A case whose round fails (an exception, a crash, a timeout) stops and keeps its error;
    the others go on.

    Args:
        path: the benchmark file.
        rounds: rounds per case.
        filters: benchmark names, case ids or glob patterns (`loop*`); default all.
        python: the interpreter of the rounds (default: this one).
        timeout_s: the limit of one round.
        runner: runs one round and returns its value (default: a fresh process).
        progress: called with a short line after each round.
        on_round: called after each round (every case's) with (rounds done, rounds): a
            caller's progress display; the library prints nothing itself.

    Raises:
        BenchmarkFileError: the file cannot be loaded.
        ValueError: rounds < 1.

    Example:
        result = run_file("examples/bench_example.py", rounds=5)
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    start = time.perf_counter_ns()
    file = Path(path)
    cases = _selected([c for b in load_benchmarks(file) for c in b.cases()], filters)
    interpreter = python or sys.executable
    results = [CaseResult(c) for c in cases]
    with tempfile.TemporaryDirectory(prefix="badput-bench-") as tmp:
        run_round = runner or _process_runner(file, interpreter, timeout_s, Path(tmp))
        for i in range(rounds):
            for r in results:
                if r.error is not None:
                    continue
                t = (time.perf_counter_ns() - start) / 1e9
                try:
                    value = run_round(r.case)
                except Exception as e:
                    r.error = f"{r.case.id}: round {i + 1}: {e}"
                    continue
                r.values.append(value)
                r.times_s.append(t)
            if progress is not None:
                progress(f"round {i + 1}/{rounds}")
            if on_round is not None:
                on_round(i + 1, rounds)
    elapsed = (time.perf_counter_ns() - start) / 1e9
    return RunResult(str(file), rounds, results, elapsed, interpreter)


def _process_runner(file: Path, python: str, timeout_s: float, tmp: Path) -> Runner:
    """A runner that measures each round in a new interpreter process."""
    env = dict(os.environ)
    if python == sys.executable:
        # Our own source root, for a source tree that is not installed; never for another
        # interpreter, whose own badput (and packages) must be the ones it runs.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC_ROOT, env.get("PYTHONPATH")) if p)
    out = tmp / "round.json"

    def run(case: Case) -> float:
        out.unlink(missing_ok=True)
        command = [
            python,
            "-c",
            _CHILD_CODE,
            str(file),
            case.benchmark.name,
            json.dumps(case.params),
            str(out),
        ]
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timed out after {timeout_s:g} s") from None
        except OSError as e:
            raise RuntimeError(f"cannot start {python}: {e.strerror}") from None
        doc: Any = None
        if out.is_file():
            try:
                doc = json.loads(out.read_text(encoding="utf-8"))
            except ValueError:
                doc = None
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            raise RuntimeError(doc["error"])
        if proc.returncode != 0 or not isinstance(doc, dict) or "value" not in doc:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the round's process exited {proc.returncode}: {tail[0][:200]}")
        return float(doc["value"])

    return run
