"""The A/B gate: statistics against known values, the round schedule, verdicts, exit codes."""

from __future__ import annotations

import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from badput.bench.ab import BenchmarkInfraError, Policy, Side, exit_code, run_ab
from badput.bench.stats import (
    Comparison,
    Decision,
    bootstrap_ci,
    compare,
    decide,
    holm,
    log_ratios,
    wilcoxon_greater,
)
from badput.cli.app import main

# ---- statistics -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "p"),
    [
        ([1.0] * 10, 1 / 1024),  # every sign positive: the most extreme of 2^10 patterns
        ([1.0, 2, 3, 4, 5], 1 / 32),
        ([-1.0, 2, 3, 4, 5], 2 / 32),  # W+ = 14: {all +} and {only rank 1 -} reach it
        ([-1.0, -2, -3, -4, -5], 1.0),
        ([0.0, 0.0, 1.0, 2.0], 1 / 4),  # zeros dropped: n = 2
        ([0.0, 0.0], 1.0),
    ],
)
def test_wilcoxon_exact_values(d: list[float], p: float) -> None:
    assert wilcoxon_greater(d) == pytest.approx(p)


@pytest.mark.parametrize("seed", range(5))
def test_wilcoxon_exact_equals_brute_force(seed: int) -> None:
    # Every one of the 2^n sign patterns of the observed ranks, counted directly.
    rng = np.random.default_rng(seed)
    d = rng.normal(0.02, 0.05, 10)
    ranks = np.argsort(np.argsort(np.abs(d))) + 1
    w = int(ranks[d > 0].sum())
    hits = sum(
        1 for mask in range(1024) if sum(int(r) for i, r in enumerate(ranks) if mask >> i & 1) >= w
    )
    assert wilcoxon_greater(d) == pytest.approx(hits / 1024)


def test_wilcoxon_normal_approximation_is_close_to_exact_at_25() -> None:
    rng = np.random.default_rng(7)
    d = rng.normal(0.01, 0.05, 25)
    exact = wilcoxon_greater(d)
    n = 25
    ranks = np.argsort(np.argsort(np.abs(d))) + 1
    w = float(ranks[d > 0].sum())
    z = (w - n * (n + 1) / 4 - 0.5) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    approx = 0.5 * math.erfc(z / math.sqrt(2))
    assert exact == pytest.approx(approx, abs=0.01)


def test_holm() -> None:
    # Holm's step-down: sorted p 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []
    assert holm([0.9, 0.9]) == [1.0, 1.0]


def test_log_ratios_direction_and_errors() -> None:
    assert log_ratios([1, 2], [2, 2]) == pytest.approx([math.log(2), 0])
    assert log_ratios([1, 2], [2, 2], higher_is_better=True) == pytest.approx([-math.log(2), 0])
    with pytest.raises(ValueError, match="same number"):
        log_ratios([1, 2], [1])
    with pytest.raises(ValueError, match="positive"):
        log_ratios([0, 1], [1, 1])


def test_bootstrap_ci_is_seeded_and_brackets_the_effect() -> None:
    d = np.log(np.array([1.10, 1.12, 1.08, 1.11, 1.09, 1.10, 1.13, 1.07, 1.10, 1.11]))
    a = bootstrap_ci(d, 0.98, seed=3)
    assert a == bootstrap_ci(d, 0.98, seed=3)
    assert a[0] <= 0.10 <= a[1]
    assert a[0] > 0.06 and a[1] < 0.14


def _c(effect: float, ci: tuple[float, float], p_reg: float, p_imp: float) -> Comparison:
    return Comparison(10, effect, ci, p_reg, p_imp)


@pytest.mark.parametrize(
    ("c", "decision"),
    [
        (_c(0.10, (0.07, 0.13), 0.001, 1.0), Decision.REGRESSION),
        (_c(-0.10, (-0.13, -0.07), 1.0, 0.001), Decision.IMPROVEMENT),
        (_c(0.01, (-0.02, 0.03), 0.3, 0.7), Decision.NO_CHANGE),
        # significant but below the minimum effect, CI inside it: no change, not a failure
        (_c(0.02, (0.01, 0.03), 0.001, 1.0), Decision.NO_CHANGE),
        # CI straddles the minimum effect: cannot tell
        (_c(0.04, (0.01, 0.08), 0.001, 1.0), Decision.INCONCLUSIVE),
        # too wide to tell either way
        (_c(0.0, (-0.09, 0.09), 0.5, 0.5), Decision.INCONCLUSIVE),
        # large effect but not significant
        (_c(0.10, (0.06, 0.13), 0.2, 1.0), Decision.INCONCLUSIVE),
    ],
)
def test_decide(c: Comparison, decision: Decision) -> None:
    assert decide(c, c.p_regression, c.p_improvement, alpha=0.01, min_effect=0.05) is decision


def test_compare_on_a_clear_regression() -> None:
    rng = np.random.default_rng(0)
    base = 1.0 + rng.normal(0, 0.01, 10)
    head = base * 1.10 * (1 + rng.normal(0, 0.01, 10))
    c = compare(base, head)
    assert c.effect == pytest.approx(0.10, abs=0.02)
    assert c.p_regression == pytest.approx(1 / 1024)
    assert c.ci[0] > 0.05
    assert decide(c, c.p_regression, c.p_improvement, 0.01, 0.05) is Decision.REGRESSION


# ---- the round schedule, with a fake runner ---------------------------------------------------


class FakeRunner:
    """Returns a metric per side; records the order of calls."""

    def __init__(self, base: list[float], head: list[float]) -> None:
        self.values = {"base": iter(base), "head": iter(head)}
        self.calls: list[str] = []

    def __call__(self, side: Side, name: str) -> dict[str, float]:
        self.calls.append(side.command)
        return {"t": next(self.values[side.command])}


def test_rounds_interleave_after_a_warm_up() -> None:
    runner = FakeRunner([99.0] + [1.0] * 10, [99.0] + [1.2] * 10)
    result = run_ab(
        [("b", Side("base"), Side("head"))], Policy(max_rounds=10), metrics=["t"], runner=runner
    )
    # one warm-up each (the 99s, discarded), then A B, B A, A B ...
    assert runner.calls[:2] == ["base", "head"]
    pairs = [tuple(runner.calls[i : i + 2]) for i in range(2, len(runner.calls), 2)]
    assert pairs == [("base", "head"), ("head", "base")] * 5
    (r,) = result.results
    assert r.base == [1.0] * 10 and r.head == [1.2] * 10
    assert r.decision is Decision.REGRESSION
    assert r.effect == pytest.approx(0.2)
    assert r.p_value == pytest.approx(1 / 1024)
    assert exit_code(result) == 1


def test_alpha_is_spent_over_the_looks() -> None:
    assert Policy().look_alphas() == pytest.approx([0.007, 0.0015, 0.0015])
    assert sum(Policy(alpha=0.05, rounds=5, max_rounds=25).look_alphas()) == pytest.approx(0.05)
    assert Policy(max_rounds=10).look_alphas() == [0.01]
    assert Policy(first_look_share=0.5, max_rounds=20).look_alphas() == pytest.approx(
        [0.005, 0.005]
    )


def test_first_look_tolerates_one_small_disagreeing_round() -> None:
    # 10 rounds, 10 % slower, except one round where head was faster by the 4th-smallest
    # margin: W+ = 55 - 4 = 51, exact p = 7/1024 = 0.0068 < 0.007 (the first look's level).
    # An even split over three looks (0.0033) would have called this inconclusive.
    d = [0.01, 0.02, 0.03, -0.04, 0.09, 0.10, 0.11, 0.12, 0.13, 0.14]
    base = [1.0] * 10
    head = [float(np.exp(x)) for x in d]
    runner = FakeRunner(base[:1] + base, head[:1] + head)
    result = run_ab([("b", Side("base"), Side("head"))], Policy(), metrics=["t"], runner=runner)
    (r,) = result.results
    assert result.looks == 1 and r.rounds == 10
    assert r.p_value == pytest.approx(7 / 1024)
    assert r.decision is Decision.REGRESSION


def test_adaptive_rounds_when_inconclusive() -> None:
    rng = np.random.default_rng(5)
    noisy = list(1 + rng.normal(0, 0.08, 31))  # noise wider than the minimum effect
    runner = FakeRunner(noisy, list(1 + rng.normal(0, 0.08, 31)))
    result = run_ab([("b", Side("base"), Side("head"))], Policy(), metrics=["t"], runner=runner)
    (r,) = result.results
    assert result.looks == 3 and r.rounds == 30
    assert r.decision in (Decision.INCONCLUSIVE, Decision.NO_CHANGE)
    assert exit_code(result) == 0
    strict = run_ab(
        [("b", Side("base"), Side("head"))],
        Policy(fail_on_inconclusive=True),
        metrics=["t"],
        runner=FakeRunner(noisy, noisy[::-1]),
    )
    if strict.results[0].decision is Decision.INCONCLUSIVE:
        assert exit_code(strict) == 4


def test_higher_is_better_metrics() -> None:
    runner = FakeRunner([100.0] * 11, [80.0] * 11)
    result = run_ab(
        [("b", Side("base"), Side("head"))],
        Policy(max_rounds=10, higher_is_better=frozenset({"t"})),
        metrics=["t"],
        runner=runner,
    )
    (r,) = result.results
    assert r.higher_is_better
    assert r.decision is Decision.REGRESSION  # throughput fell 20 %
    assert r.effect == pytest.approx(-0.2)
    assert Policy().better_higher("samples_per_s") and not Policy().better_higher("wall_s")


def test_holm_across_metrics_and_zero_benchmarks() -> None:
    result = run_ab([], Policy(), runner=FakeRunner([], []))
    assert result.results == [] and exit_code(result) == 3


# ---- the command line -------------------------------------------------------------------------


def _cmd(value: float) -> str:
    return f'{sys.executable} -c "print(\'{{\\"t\\": {value}}}\')"'


def test_cli_regression_writes_json_junit_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ab.json"
    junit = tmp_path / "ab.xml"
    md = tmp_path / "ab.md"
    code = main(
        [
            "bench",
            "ab",
            "--base",
            _cmd(1.0),
            "--head",
            _cmd(1.25),
            "--metric",
            "t",
            "--rounds",
            "10",
            "--max-rounds",
            "10",
            "--json",
            str(out),
            "--junit",
            str(junit),
            "--markdown",
            str(md),
        ]
    )
    assert code == 1
    doc = json.loads(out.read_text())
    assert doc["schema"] == "badput.bench.ab/1" and doc["exit_code"] == 1
    (r,) = doc["results"]
    assert {"benchmark", "metric", "decision", "effect", "ci", "p_value"} <= set(r)
    assert r["decision"] == "regression" and r["metric"] == "t"
    assert r["effect"] == pytest.approx(0.25)
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1" and suite.find("testcase/failure") is not None
    assert "**regression**" in md.read_text()
    assert "regression" in capsys.readouterr().out


def test_cli_no_change_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "bench",
            "ab",
            "--base",
            _cmd(1.0),
            "--head",
            _cmd(1.0),
            "--metric",
            "t",
            "--rounds",
            "4",
            "--max-rounds",
            "4",
        ]
    )
    assert code == 0
    assert "no_change" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--base", "exit 3", "--head", "true"], 3, "exited 3"),
        (
            ["--base", "true", "--head", "true", "--metric", "nope", "--rounds", "2"],
            3,
            "no metric 'nope'",
        ),
        (["--base", "true", "--head", "true", "--rounds", "1"], 2, "--rounds"),
        (["--base", "true", "--head", "true", "--alpha", "2"], 2, "--alpha"),
    ],
)
def test_cli_errors(
    args: list[str], code: int, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "ab", *args]) == code
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ") and needle in err


def test_infra_error_type() -> None:
    with pytest.raises(BenchmarkInfraError, match="exited"):
        run_ab([("b", Side("exit 1"), Side("true"))], Policy())
