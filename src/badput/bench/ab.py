"""The A/B gate: base and head commands run in interleaved rounds, then judged together.

Each round runs each side once, in a fresh process, alternating the order (A B, B A, A B...)
so that every pair shares the machine's state. A round's value is the command's wall time, or
the numbers it prints as a JSON object on its last stdout line. One warm-up run of each side
comes first and is discarded. If any metric is inconclusive after the first block of rounds,
more rounds are run (up to `max_rounds`), looking again after each block.

Alpha over the looks: each look tests at its own level and the levels add up to alpha
(Bonferroni over looks), so the chance of any false verdict stays at most alpha whatever the
number of looks taken. The first look gets most of it (`Policy.first_look_share`, 70 %): most
runs stop there, and its test is the most starved. With 10 rounds the exact Wilcoxon test has
only 2^10 sign patterns, so its smallest p-values are 1/1024, 2/1024, 3/1024, 5/1024, 7/1024,
10/1024...: an even three-way split (0.0033) would need 9 of the 10 rounds to agree and the
10th to be among the two smallest differences, while 0.007 tolerates one disagreeing round up
to the 4th smallest. Later looks have 20 or 30 rounds, where small levels cost little power.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from badput.bench.stats import Comparison, Decision, compare, decide, holm
from badput.errors import BadputError

__all__ = [
    "ABResult",
    "BenchmarkInfraError",
    "MetricResult",
    "Policy",
    "Side",
    "exit_code",
    "run_ab",
]

WALL = "wall_s"
# Metrics where more is better, by name: throughput-like.
_HIGHER_IS_BETTER_HINTS = ("per_s", "per_sec", "throughput", "goodput", "tflops", "mfu", "speed")


class BenchmarkInfraError(BadputError):
    """A benchmark could not run (the command failed, printed no metrics, ...): exit code 3."""


@dataclass(frozen=True)
class Policy:
    """How the gate decides."""

    alpha: float = 0.01
    min_effect: float = 0.05
    rounds: int = 10
    max_rounds: int = 30
    fail_on_inconclusive: bool = False
    higher_is_better: frozenset[str] = frozenset()
    seed: int = 0
    first_look_share: float = 0.7

    def look_alphas(self) -> list[float]:
        """The level of each planned look; they add up to `alpha`.

        The first look (after `rounds` rounds) gets `first_look_share` of alpha, the later
        looks (every `rounds` more, up to `max_rounds`) share the rest evenly.
        """
        looks = len(range(self.rounds, self.max_rounds + 1, self.rounds))
        if looks == 1:
            return [self.alpha]
        rest = self.alpha * (1 - self.first_look_share) / (looks - 1)
        return [self.alpha * self.first_look_share] + [rest] * (looks - 1)

    def better_higher(self, metric: str) -> bool:
        """Whether a larger value of `metric` is better.

        Named in `higher_is_better`, or its last word (after the last space, `/` or `:`) looks
        like a throughput: `resnet/samples_per_s` is, `tests/t.py::test_speed wall_s` is not.
        """
        last = re.split(r"[\s/:]", metric)[-1].lower()
        return metric in self.higher_is_better or any(h in last for h in _HIGHER_IS_BETTER_HINTS)


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a command line, run through the shell.

    `cwd` and `env` (the whole environment, not additions) default to this process's.
    """

    command: str
    timeout_s: float = 600.0
    cwd: str | None = None
    env: Mapping[str, str] | None = None


@dataclass
class MetricResult:
    """The verdict on one metric of one benchmark."""

    benchmark: str
    metric: str
    decision: Decision
    effect: float
    ci: tuple[float, float]
    p_value: float
    p_adjusted: float
    rounds: int
    higher_is_better: bool
    base: list[float]
    head: list[float]

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the pinned `results` entry)."""
        return {
            "benchmark": self.benchmark,
            "metric": self.metric,
            "decision": str(self.decision),
            "effect": self.effect,
            "ci": list(self.ci),
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "rounds": self.rounds,
            "higher_is_better": self.higher_is_better,
            "base": self.base,
            "head": self.head,
        }


@dataclass
class ABResult:
    """Every metric's verdict, and how the run went."""

    results: list[MetricResult]
    policy: Policy
    looks: int
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON verdict document."""
        p = self.policy
        return {
            "schema": "badput.bench.ab/1",
            "results": [r.as_dict() for r in self.results],
            "policy": {
                "alpha": p.alpha,
                "min_effect": p.min_effect,
                "rounds": p.rounds,
                "max_rounds": p.max_rounds,
                "fail_on_inconclusive": p.fail_on_inconclusive,
                "look_alphas": p.look_alphas(),
            },
            "looks": self.looks,
            "elapsed_s": self.elapsed_s,
            "exit_code": exit_code(self),
            "notes": self.notes,
        }


def exit_code(result: ABResult) -> int:
    """0 pass, 1 regression, 3 nothing ran, 4 inconclusive under a failing policy."""
    if not result.results:
        return 3
    decisions = {r.decision for r in result.results}
    if Decision.REGRESSION in decisions:
        return 1
    if Decision.INCONCLUSIVE in decisions and result.policy.fail_on_inconclusive:
        return 4
    return 0


def _run_once(side: Side, name: str) -> dict[str, float]:
    """One fresh-process run: its wall time and the metrics of its last JSON stdout line."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            side.command,
            shell=True,
            capture_output=True,
            text=True,
            timeout=side.timeout_s,
            check=False,
            cwd=side.cwd,
            env=dict(side.env) if side.env is not None else None,
        )
    except subprocess.TimeoutExpired:
        raise BenchmarkInfraError(f"{name}: `{side.command}` timed out") from None
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise BenchmarkInfraError(
            f"{name}: `{side.command}` exited {proc.returncode}: {tail[0][:200]}"
        )
    metrics = {WALL: wall}
    for line in reversed(proc.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                break
            if isinstance(doc, dict):
                for key, value in doc.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        metrics[str(key)] = float(value)
            break
    return metrics


Runner = Callable[[Side, str], dict[str, float]]


def run_ab(
    benchmarks: Sequence[tuple[str, Side, Side]],
    policy: Policy = Policy(),
    metrics: Sequence[str] | None = None,
    runner: Runner = _run_once,
    progress: Callable[[str], None] | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> ABResult:
    """Run every benchmark's base and head in interleaved rounds and judge each metric.

    Args:
        benchmarks: (name, base, head) triples.
        policy: alpha, minimum effect, rounds and the rest.
        metrics: metrics to judge (default: wall time, plus every metric the commands print).
        runner: runs one side once and returns its metrics (tests pass a fake).
        progress: called with a short line after each round.
        on_round: called after each round with (rounds done, most rounds): the most is
            `policy.max_rounds`; the run stops earlier once every metric is decided. A
            caller's progress display; the library prints nothing itself.

    Raises:
        BenchmarkInfraError: a command failed or a metric is missing from a run.
    """
    start = time.perf_counter()
    if policy.rounds < 2 or policy.max_rounds < policy.rounds:
        raise ValueError("need rounds >= 2 and max_rounds >= rounds")
    if not 0 < policy.first_look_share <= 1:
        raise ValueError("need 0 < first_look_share <= 1")
    values: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for name, base, head in benchmarks:
        runner(base, name)  # warm-up: file caches, imports, CPU frequency
        runner(head, name)
        values[name] = {}
    planned = list(range(policy.rounds, policy.max_rounds + 1, policy.rounds))
    alphas = policy.look_alphas()
    done = 0
    results: list[MetricResult] = []
    looks = 0
    for target, alpha in zip(planned, alphas, strict=True):
        while done < target:
            for name, base, head in benchmarks:
                order = (base, head) if done % 2 == 0 else (head, base)
                first = runner(order[0], name)
                second = runner(order[1], name)
                a, b = (first, second) if order[0] is base else (second, first)
                _record(values[name], a, b, metrics, name)
            done += 1
            if progress is not None:
                progress(f"round {done}/{target}")
            if on_round is not None:
                on_round(done, policy.max_rounds)
        looks += 1
        results = _judge(values, policy, alpha)
        if not any(r.decision is Decision.INCONCLUSIVE for r in results):
            break
    levels = ", ".join(f"{a:.3g}" for a in alphas)
    notes = [f"alpha {policy.alpha:g} spent over {len(planned)} planned look(s): {levels}"]
    return ABResult(results, policy, looks, time.perf_counter() - start, notes)


def _record(
    table: dict[str, tuple[list[float], list[float]]],
    a: dict[str, float],
    b: dict[str, float],
    metrics: Sequence[str] | None,
    name: str,
) -> None:
    wanted = list(metrics) if metrics else sorted(set(a) | set(b))
    for metric in wanted:
        if metric not in a or metric not in b:
            raise BenchmarkInfraError(f"{name}: a run printed no metric {metric!r}")
        base_values, head_values = table.setdefault(metric, ([], []))
        base_values.append(a[metric])
        head_values.append(b[metric])


def _judge(
    values: dict[str, dict[str, tuple[list[float], list[float]]]], policy: Policy, alpha: float
) -> list[MetricResult]:
    rows: list[tuple[str, str, Comparison, bool, list[float], list[float]]] = []
    for name, metrics in values.items():
        for metric, (base, head) in metrics.items():
            higher = policy.better_higher(metric)
            if min(base + head) <= 0:
                continue  # log-ratios need positive values (a zero count, say): not judged
            c = compare(base, head, higher_is_better=higher, alpha=alpha, seed=policy.seed)
            rows.append((name, metric, c, higher, list(base), list(head)))
    # Holm across all (benchmark x metric) tests of the run, each direction separately.
    p_reg = holm([r[2].p_regression for r in rows])
    p_imp = holm([r[2].p_improvement for r in rows])
    out = []
    for (name, metric, c, higher, base, head), pr, pi in zip(rows, p_reg, p_imp, strict=True):
        decision = decide(c, pr, pi, alpha, policy.min_effect)
        improving = decision is Decision.IMPROVEMENT
        effect = c.effect if not higher else math.expm1(-math.log1p(c.effect))
        ci = (
            c.ci
            if not higher
            else (math.expm1(-math.log1p(c.ci[1])), math.expm1(-math.log1p(c.ci[0])))
        )
        out.append(
            MetricResult(
                benchmark=name,
                metric=metric,
                decision=decision,
                effect=effect,
                ci=ci,
                p_value=c.p_improvement if improving else c.p_regression,
                p_adjusted=pi if improving else pr,
                rounds=c.rounds,
                higher_is_better=higher,
                base=base,
                head=head,
            )
        )
    return out
