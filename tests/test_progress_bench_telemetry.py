"""Progress of `badput bench ab`, `bench run` and `telemetry record`: on stderr, on a terminal.

The bench library prints nothing: it calls `on_round(done, total)` after each round and the
command line advances its progress display from it. Off a terminal nothing extra is printed,
and stdout is the same byte for byte whether progress is drawn or not.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import badput.bench.ab
import badput.bench.runner
import badput.cli.progress
from badput.bench.ab import Policy, Side, run_ab
from badput.bench.api import Case
from badput.bench.runner import run_file
from badput.bench.stats import Decision
from badput.cli.app import main


def terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """The captured stderr claims to be a terminal, and progress shows at once.

    Called in the test's body: the stream capsys captures into is set up for the call.
    """
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE", "TERM"):
        monkeypatch.delenv(name, raising=False)  # stderr alone is a terminal, stdout is not
    monkeypatch.delenv(badput.cli.progress.NO_PROGRESS_ENV, raising=False)
    monkeypatch.setattr(badput.cli.progress, "DELAY_S", 0.0)


def _bench_file(tmp_path: Path) -> Path:
    path = tmp_path / "benches.py"
    path.write_text(
        "from badput.bench import benchmark\n"
        + textwrap.dedent(
            """
            @benchmark(params={"n": [1, 2]})
            def alpha(n):
                pass
            """
        )
    )
    return path


# ---- the callback: once per round, with (done, total) --------------------------------------


class FakeRunner:
    """One metric per side, from a list of values per side."""

    def __init__(self, base: list[float], head: list[float]) -> None:
        self.values = {"base": iter(base), "head": iter(head)}

    def __call__(self, side: Side, name: str) -> dict[str, float]:
        return {"t": next(self.values[side.command])}


def test_ab_calls_on_round_once_per_round() -> None:
    calls: list[tuple[int, int]] = []
    # A clear regression: decided at the first look (10 rounds of at most 30).
    runner = FakeRunner([1.0] * 31, [1.25] * 31)
    policy = Policy()
    result = run_ab(
        [("b", Side("base"), Side("head"))],
        policy,
        metrics=["t"],
        runner=runner,
        on_round=lambda done, total: calls.append((done, total)),
    )
    (r,) = result.results
    assert r.decision is Decision.REGRESSION
    assert len(r.base) == policy.rounds
    assert calls == [(k, policy.max_rounds) for k in range(1, policy.rounds + 1)]


def test_ab_on_round_through_every_look() -> None:
    rng = np.random.default_rng(5)
    noisy = list(1 + rng.normal(0, 0.08, 31))  # noise wider than the minimum effect
    runner = FakeRunner(noisy, list(1 + rng.normal(0, 0.08, 31)))
    calls: list[tuple[int, int]] = []
    lines: list[str] = []
    result = run_ab(
        [("b", Side("base"), Side("head"))],
        Policy(),
        metrics=["t"],
        runner=runner,
        progress=lines.append,  # the line form still works beside it
        on_round=lambda done, total: calls.append((done, total)),
    )
    assert result.looks == 3
    assert calls == [(k, 30) for k in range(1, 31)]
    assert len(lines) == 30 and lines[-1] == "round 30/30"


def test_ab_one_call_per_round_over_several_benchmarks() -> None:
    calls: list[tuple[int, int]] = []

    def runner(side: Side, name: str) -> dict[str, float]:
        return {"t": 1.0 if side.command == "base" else 1.25}

    run_ab(
        [("b", Side("base"), Side("head")), ("c", Side("base"), Side("head"))],
        Policy(rounds=4, max_rounds=4),
        metrics=["t"],
        runner=runner,
        on_round=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_run_file_calls_on_round_once_per_round(tmp_path: Path) -> None:
    seen: list[str] = []
    calls: list[tuple[int, int]] = []

    def runner(case: Case) -> float:
        seen.append(case.id)
        return 1.0

    result = run_file(
        _bench_file(tmp_path),
        rounds=3,
        runner=runner,
        on_round=lambda done, total: calls.append((done, total)),
    )
    assert len(result.results) == 2 and len(seen) == 6  # two cases, three rounds each
    assert calls == [(1, 3), (2, 3), (3, 3)]


# ---- the command line: on a terminal, and off one ---------------------------------------------


def _fake_ab(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench ab` runs its rounds on a fake runner: no processes, the same numbers each time."""
    real = badput.bench.ab.run_ab

    def fake(*args: Any, **kwargs: Any) -> badput.bench.ab.ABResult:
        kwargs["runner"] = FakeRunner([1.0] * 40, [1.25] * 40)
        return real(*args, **kwargs)

    monkeypatch.setattr(badput.bench.ab, "run_ab", fake)


def _fake_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench run` measures each round with a fake runner instead of a fresh process."""
    real = badput.bench.runner.run_file

    def fake(*args: Any, **kwargs: Any) -> badput.bench.runner.RunResult:
        kwargs["runner"] = lambda case: 0.25
        return real(*args, **kwargs)

    monkeypatch.setattr(badput.bench.runner, "run_file", fake)


AB = ["bench", "ab", "--base", "base", "--head", "head", "--metric", "t", "--rounds", "4"]
AB_DESCRIPTION = "bench ab command: rounds (4 per look, 12 at most)"


def _ab_args(tmp_path: Path) -> list[str]:
    del tmp_path  # the commands are fakes: no files
    return [*AB, "--max-rounds", "12"]


def _run_args(tmp_path: Path) -> list[str]:
    return ["bench", "run", str(_bench_file(tmp_path)), "--rounds", "3"]


CASES: list[tuple[str, Callable[[pytest.MonkeyPatch], None], Callable[[Path], list[str]], str]] = [
    ("ab", _fake_ab, _ab_args, AB_DESCRIPTION),
    ("run", _fake_run, _run_args, "bench run benches.py: rounds"),
]


def _cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("kind", "fake", "args", "description"), CASES, ids=[c[0] for c in CASES])
def test_bench_progress_on_a_terminal(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    fake: Callable[[pytest.MonkeyPatch], None],
    args: Callable[[Path], list[str]],
    description: str,
) -> None:
    fake(monkeypatch)
    argv = args(tmp_path)
    plain_code, plain_out, plain_err = _cli(capsys, argv)  # capsys's stderr: not a terminal
    terminal_stderr(monkeypatch)
    code, out, err = _cli(capsys, argv)
    assert code == plain_code
    assert description in err
    # every round advanced the bar: the last state drawn is the rounds run of the total
    assert ("12/12" if kind == "ab" else "3/3") in err
    assert out == plain_out  # stdout holds the report only, byte for byte
    assert plain_err == ""


@pytest.mark.parametrize(("kind", "fake", "args", "description"), CASES, ids=[c[0] for c in CASES])
def test_bench_no_progress_off_a_terminal(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    fake: Callable[[pytest.MonkeyPatch], None],
    args: Callable[[Path], list[str]],
    description: str,
) -> None:
    fake(monkeypatch)
    monkeypatch.setattr(badput.cli.progress, "DELAY_S", 0.0)  # would show at once, if allowed
    argv = args(tmp_path)
    code, out, err = _cli(capsys, argv)
    assert err == ""  # nothing extra on a stderr that is not a terminal
    assert "badput bench " + kind in out and description not in out
    monkeypatch.setenv(badput.cli.progress.NO_PROGRESS_ENV, "1")
    off_code, off_out, off_err = _cli(capsys, argv)
    assert (off_code, off_out, off_err) == (code, out, err)  # byte-identical


def _record(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`telemetry record` of a child that prints a line and runs for about 0.7 s."""
    child = "import time; print('child says hi', flush=True); time.sleep(0.7)"
    out_file = tmp_path / "t.jsonl"
    command = [sys.executable, "-c", child]
    code = main(["telemetry", "record", "--hz", "20", "--out", str(out_file), "--", *command])
    out, err = capfd.readouterr()
    assert out_file.is_file()
    return code, out, err


def _summary_words(err: str) -> list[str]:
    """The sampler's summary on stderr, word by word, the numbers that vary masked."""
    return [re.sub(r"\d[\d.,]*", "#", word) for word in err.split()]


def test_telemetry_record_progress_on_a_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plain_code, plain_out, plain_err = _record(tmp_path, capfd)
    terminal_stderr(monkeypatch)
    code, out, err = _record(tmp_path, capfd)
    assert code == plain_code == 0
    assert "telemetry record: sampling at 20 Hz" in err
    assert "badput telemetry: " in err  # the summary still follows
    assert out == plain_out == "child says hi\n"  # the child's stdout only, byte for byte
    assert "sampling at" not in plain_err


def test_telemetry_record_no_progress_off_a_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(badput.cli.progress, "DELAY_S", 0.0)
    code, out, err = _record(tmp_path, capfd)
    assert code == 0 and out == "child says hi\n"
    assert "sampling at" not in err and "\x1b" not in err and "\r" not in err
    monkeypatch.setenv(badput.cli.progress.NO_PROGRESS_ENV, "1")
    off_code, off_out, off_err = _record(tmp_path, capfd)
    assert (off_code, off_out) == (code, out)
    # stderr holds the sampler's summary alone, the same lines either way
    assert _summary_words(off_err) == _summary_words(err)
    assert err.startswith("badput telemetry: ")
