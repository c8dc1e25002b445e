"""The benchmark API: @benchmark, rounds in fresh processes, `bench run`, and `bench check`."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from badput.bench import benchmark
from badput.bench.api import (
    WALL,
    BenchmarkDefinitionError,
    BenchmarkFileError,
    Case,
    load_benchmarks,
    measure,
)
from badput.bench.deterministic import (
    Expectations,
    Expected,
    Verdict,
    check,
    load_expected,
    measured_from_doc,
    updated,
)
from badput.bench.runner import round_stats, run_file
from badput.cli.app import main
from badput.errors import UsageError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bench_example.py"


def _file(tmp_path: Path, body: str, name: str = "benches.py") -> Path:
    path = tmp_path / name
    path.write_text("from badput.bench import benchmark\n" + textwrap.dedent(body))
    return path


# ---- the decorator ----------------------------------------------------------------------------


def test_registration_and_params_expansion(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        @benchmark(params={"n": [1, 2], "mode": ["a", "b"]})
        def grid(n, mode):
            pass

        @benchmark(name="renamed", metric="items_per_s", warmup=0, iterations=3)
        def custom():
            return 1.0

        @benchmark
        def bare():
            pass

        def not_a_benchmark():
            pass
        """,
    )
    grid, renamed, bare = load_benchmarks(path)
    assert [c.id for c in grid.cases()] == [
        "grid[n=1,mode=a]",
        "grid[n=1,mode=b]",
        "grid[n=2,mode=a]",
        "grid[n=2,mode=b]",
    ]
    assert grid.cases()[3].params == {"n": 2, "mode": "b"}
    assert (grid.metric, grid.warmup, grid.iterations) == (WALL, 1, 1)
    assert grid.unit == "s" and not grid.better_higher()
    assert renamed.name == "renamed" and renamed.func.__name__ == "custom"
    assert (renamed.warmup, renamed.iterations) == (0, 3)
    assert renamed.better_higher()  # inferred from "_per_s"
    assert renamed.unit is None
    assert bare.name == "bare" and [c.id for c in bare.cases()] == ["bare"]


def test_decorator_returns_the_function_unchanged() -> None:
    def f(n: int) -> int:
        return n * 2

    def g() -> None:
        pass

    assert benchmark(params={"n": [3]})(f) is f
    assert benchmark(g) is g
    assert f(4) == 8


def _target(n: int) -> None:
    pass


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"params": [1, 2]}, "params must be a dict"),
        ({"params": {"n": []}}, "non-empty list"),
        ({"params": {"n": "abc"}}, "non-empty list"),
        ({"params": {"n": [object()]}}, "not JSON"),
        ({"params": {"n": [(1, 2)]}}, "not JSON"),  # a tuple would arrive as a list
        ({"params": {"not valid": [1]}}, "not an identifier"),
        ({"params": {"m": [1]}}, "cannot take the params (m)"),
        ({"params": {}}, "cannot take the params (none)"),  # n is required
        ({"params": {"n": [1]}, "warmup": -1}, "warmup"),
        ({"params": {"n": [1]}, "iterations": 0}, "iterations"),
        ({"params": {"n": [1]}, "iterations": 1.5}, "iterations"),
        ({"params": {"n": [1]}, "metric": ""}, "metric"),
        ({"params": {"n": [1]}, "setup": 3}, "setup must be callable"),
        ({"params": {"n": [1]}, "higher_is_better": "yes"}, "higher_is_better"),
    ],
)
def test_decorator_misuse(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(BenchmarkDefinitionError) as e:
        benchmark(**kwargs)(_target)
    assert needle in str(e.value)


def test_setup_runs_once_per_round_and_its_result_is_passed_first(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        setups = []

        def make(n):
            setups.append(n)
            return list(range(n))

        @benchmark(params={"n": [4]}, setup=make, metric="total", warmup=1, iterations=2)
        def total(data, n):
            return sum(data) + n + 10 * (len(setups) - 1)

        @benchmark(setup=lambda: None, metric="args", warmup=0)
        def no_state(*args):
            return len(args)  # a setup that returns None passes nothing
        """,
    )
    total, no_state = load_benchmarks(path)
    assert measure(total.cases()[0]) == [10.0, 10.0]  # 0+1+2+3 + n, setup ran once
    assert measure(no_state.cases()[0]) == [0.0]


def test_round_stats() -> None:
    s = round_stats([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s["median"] == 3.0 and s["q1"] == 2.0 and s["q3"] == 4.0 and s["iqr"] == 2.0
    assert s["mad"] == 1.0  # |x - 3| = 2 1 0 1 7
    assert (s["min"], s["max"], s["n_rounds"]) == (1.0, 10.0, 5)
    assert round_stats([5.0])["iqr"] == 0.0


# ---- rounds in fresh processes ----------------------------------------------------------------


def test_each_round_is_a_fresh_process(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        import os

        @benchmark(metric="pid", warmup=0)
        def pid():
            return os.getpid()
        """,
    )
    (r,) = run_file(path, rounds=4).results
    assert r.ok and len(r.values) == 4
    assert len(set(r.values)) == 4  # four processes
    assert os.getpid() not in r.values  # none of them this one


def test_warmup_is_discarded_and_the_round_is_the_median(tmp_path: Path) -> None:
    # The nth call in a process returns n: state that only a fresh process resets.
    path = _file(
        tmp_path,
        """
        calls = [0]

        def count():
            calls[0] += 1
            return calls[0]

        @benchmark(metric="call_number", warmup=2, iterations=3)
        def warm():
            return count()

        @benchmark(metric="call_number", warmup=0, iterations=3)
        def cold():
            return count()
        """,
    )
    warm, cold = run_file(path, rounds=2).results
    assert warm.values == [4.0, 4.0]  # calls 1 and 2 discarded; median of 3, 4, 5
    assert cold.values == [2.0, 2.0]  # median of 1, 2, 3


def test_wall_time_and_custom_metric(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        import time

        @benchmark(params={"ms": [20]}, warmup=0)
        def sleep(ms):
            time.sleep(ms / 1000)
            return 123.0  # ignored: the metric is wall time

        @benchmark(params={"n": [1000]}, metric="items_per_s", setup=lambda n: list(range(n)))
        def throughput(data, n):
            return len(data) * 2.5
        """,
    )
    sleep, throughput = run_file(path, rounds=2).results
    assert all(0.02 <= v < 1.0 for v in sleep.values)
    assert throughput.values == [2500.0, 2500.0]
    doc = throughput.as_dict()
    assert doc["metric"] == {"name": "items_per_s", "unit": None, "higher_is_better": True}


def test_a_failing_case_stops_alone(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        @benchmark(metric="x")
        def broken():
            raise ValueError("no luck")

        @benchmark(metric="x")
        def fine():
            return 1
        """,
    )
    result = run_file(path, rounds=3)
    broken, fine = result.results
    assert broken.error == "broken: round 1: ValueError: no luck (benches.py:5)"
    assert broken.values == [] and fine.values == [1.0, 1.0, 1.0]
    assert result.exit_code == 3


def test_filters_and_custom_runner(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        @benchmark(params={"n": [1, 2]})
        def alpha(n):
            pass

        @benchmark
        def beta():
            pass
        """,
    )
    seen: list[str] = []

    def runner(case: Case) -> float:
        seen.append(case.id)
        return 1.0

    result = run_file(path, rounds=2, filters=["alpha[n=2]", "bet*"], runner=runner)
    # Rounds interleave across cases: round 1 of every case, then round 2.
    assert seen == ["alpha[n=2]", "beta", "alpha[n=2]", "beta"]
    assert [r.case.id for r in result.results] == ["alpha[n=2]", "beta"]
    assert run_file(path, filters=["alpha"], runner=runner).results[0].case.id == "alpha[n=1]"
    assert run_file(path, filters=["gamma"], runner=runner).exit_code == 3


# ---- the command line: bench run ---------------------------------------------------------------


def test_cli_run_json_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The table fits the terminal by wrapping ids, as wide as the measured numbers leave
    # room for: at 80 columns an id could come out on two lines in one run and not another.
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "run.json"
    code = main(
        [
            "bench",
            "run",
            str(EXAMPLE),
            "--rounds",
            "2",
            "--filter",
            "sum_of_squares[n=10000]",
            "--filter",
            "list_peak_memory*",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    for needle in ("sum_of_squares[n=10000]", "list_peak_memory[n=10000]", "median", "IQR"):
        assert needle in printed
    doc = json.loads(out.read_text())
    assert doc["schema"] == "badput.bench.run/1" and doc["exit_code"] == 0
    assert doc["rounds"] == 2 and doc["file"] == str(EXAMPLE)
    timed, memory = doc["results"]
    assert set(timed) == {
        "id",
        "benchmark",
        "metric",
        "status",
        "error",
        "estimate",
        "stats",
        "protocol",
        "rounds",
    }
    assert timed["id"] == "sum_of_squares[n=10000]"
    assert timed["benchmark"] == {"name": "sum_of_squares", "params": {"n": 10000}}
    assert timed["metric"] == {"name": "wall_s", "unit": "s", "higher_is_better": False}
    assert timed["status"] == "ok" and timed["error"] is None
    assert timed["protocol"] == {
        "warmup_iters": 1,
        "iters_per_round": 5,
        "round_stat": "median",
        "process_per_round": True,
    }
    assert [r["i"] for r in timed["rounds"]] == [0, 1]
    values = [r["value"] for r in timed["rounds"]]
    assert timed["stats"]["n_rounds"] == 2
    assert timed["estimate"] == timed["stats"]["median"] == pytest.approx(sum(values) / 2)
    assert set(timed["stats"]) == {"n_rounds", "median", "mean", "q1", "q3", "iqr", "mad"} | {
        "min",
        "max",
    }
    assert memory["metric"]["name"] == "peak_bytes" and memory["estimate"] > 10_000 * 40


@pytest.mark.parametrize(
    ("body", "args"),
    [
        ("x = 1\n", []),  # no benchmarks at all
        ("@benchmark\ndef f():\n    pass\n", ["--filter", "nothing*"]),
    ],
)
def test_cli_run_exits_3_when_nothing_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, args: list[str]
) -> None:
    path = _file(tmp_path, body)
    out = tmp_path / "run.json"
    assert main(["bench", "run", str(path), "--json", str(out), *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ") and str(path) in err and "no benchmarks" in err
    assert json.loads(out.read_text())["results"] == []


def test_cli_run_exits_3_when_a_benchmark_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, '@benchmark(metric="m")\ndef f():\n    return "fast"\n')
    assert main(["bench", "run", str(path), "--rounds", "1"]) == 3
    err = capsys.readouterr().err
    assert err == "badput: error: f: round 1: TypeError: metric 'm': f returned str, not a number\n"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("@benchmark(\ndef f(:\n", ":3: SyntaxError"),
        ("import badput_no_such_module\n", ":2: ModuleNotFoundError"),
        ("raise RuntimeError('at import\\nsecond line')\n", ":2: RuntimeError: at import"),
        ("@benchmark(params={'n': [1]})\ndef f(m):\n    pass\n", "cannot take the params (n)"),
        ("@benchmark(iterations=0)\ndef f():\n    pass\n", ":2: iterations must be"),
        ("@benchmark\ndef f():\n    pass\n@benchmark(name='f')\ndef g():\n    pass\n", "two"),
        ("import sys\nsys.exit(4)\n", "SystemExit: 4"),
    ],
)
def test_cli_run_malformed_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, needle: str
) -> None:
    path = _file(tmp_path, body)
    assert main(["bench", "run", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"badput: error: {path}")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert needle in captured.err
    assert captured.out == ""
    with pytest.raises(BenchmarkFileError):
        load_benchmarks(path)


def test_cli_run_missing_file_and_bad_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.py"
    assert main(["bench", "run", str(missing)]) == 2
    assert capsys.readouterr().err == f"badput: error: {missing}: no such file\n"
    assert main(["bench", "run", str(EXAMPLE), "--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err


def test_example_file_defines_both_benchmarks() -> None:
    loop, memory = load_benchmarks(EXAMPLE)
    assert [c.id for c in loop.cases()] == ["sum_of_squares[n=10000]", "sum_of_squares[n=50000]"]
    assert loop.metric == "wall_s" and memory.metric == "peak_bytes"
    # Peak memory of a fixed list build is deterministic: every fresh process measures the same.
    (r,) = run_file(EXAMPLE, rounds=2, filters=["list_peak_memory"]).results
    assert r.values[0] == r.values[1] > 10_000 * 40


# ---- deterministic metrics: bench check --------------------------------------------------------

MIB = 1 << 20


def _expected(spec: dict[str, Any], fail_on_wins: bool = False) -> dict[str, Any]:
    return {
        "schema": "badput.bench.expected/1",
        "fail_on_wins": fail_on_wins,
        "benchmarks": {"b": {"m": spec}},
    }


MEM = {"value": 1000 * MIB, "rel_tol": 0.01, "abs_tol": 16 * MIB}  # +1 % and +16 MiB
BIG = {**MEM, "value": 3000 * MIB}
SMALL = {**MEM, "value": 100 * MIB}
RATE = {"value": 100, "rel_tol": 0.05, "higher_is_better": True}


@pytest.mark.parametrize(
    ("spec", "measured", "fail_on_wins", "verdict"),
    [
        # memory: a change fails only beyond both tolerances
        (MEM, 1016 * MIB, False, "pass"),  # 16 MiB > 1 % = 10 MiB
        (MEM, 1017 * MIB, False, "regression"),
        (SMALL, 110 * MIB, False, "pass"),  # +10 %, but under 16 MiB
        (BIG, 3030 * MIB, False, "pass"),  # 30 MiB, but 1 %
        (BIG, 3031 * MIB, False, "regression"),
        (MEM, 900 * MIB, False, "improvement"),
        # the ratchet: a win beyond tolerance fails until the file records it
        (MEM, 900 * MIB, True, "improvement_needs_update"),
        ({**MEM, "fail_on_wins": False}, 900 * MIB, True, "improvement"),  # per-metric wins
        # counts: exact
        ({"value": 12}, 12, False, "pass"),
        ({"value": 12}, 13, False, "regression"),
        ({"value": 12}, 11, False, "improvement"),
        ({"value": 0}, 1, False, "regression"),
        # higher is better: a drop is the regression
        (RATE, 94, False, "regression"),
        (RATE, 95, False, "pass"),
        (RATE, 110, True, "improvement_needs_update"),
    ],
)
def test_check_verdicts(
    spec: dict[str, Any], measured: float, fail_on_wins: bool, verdict: str
) -> None:
    result = check(_expected(spec, fail_on_wins), {"b": {"m": measured}})
    (c,) = result.checks
    assert c.verdict == verdict
    assert c.delta == measured - spec["value"]
    assert result.exit_code == (1 if verdict in ("regression", "improvement_needs_update") else 0)


def test_check_missing_new_defaults_and_exit_codes() -> None:
    exp = {
        "benchmarks": {
            "a": {"peak_bytes": {"value": 1000 * MIB}, "kernels": {"value": 7}},
            "gone": {"kernels": {"value": 3}},
        }
    }
    result = check(exp, {"a": {"peak_bytes": 1010 * MIB, "kernels": 7, "wall_s": 0.1, "x": 1}})
    by_key = {(c.benchmark, c.metric): c for c in result.checks}
    assert set(by_key) == {("a", "peak_bytes"), ("a", "kernels"), ("gone", "kernels"), ("a", "x")}
    # "bytes" in the name: the design's memory default, +1 % and 16 MiB (here 1 % = 10 MiB)
    assert by_key["a", "peak_bytes"].verdict is Verdict.PASS
    peak = by_key["a", "peak_bytes"]
    assert (peak.rel_tol, peak.abs_tol) == (0.01, 16 * MIB)
    assert by_key["a", "kernels"].verdict is Verdict.PASS
    assert by_key["gone", "kernels"].verdict is Verdict.MISSING
    assert by_key["a", "x"].verdict is Verdict.NEW  # and wall_s is left to the A/B gate
    assert result.exit_code == 3  # missing: the benchmark did not run, not a regression
    assert check(exp, {}).exit_code == 3
    assert check({}, {"a": {"x": 1}}).exit_code == 3  # nothing compared
    # a regression outranks missing
    assert check(exp, {"a": {"kernels": 8}}).exit_code == 1
    # file defaults apply to metrics without their own tolerance
    loose = {"defaults": {"rel_tol": 0.5}, "benchmarks": {"a": {"kernels": {"value": 10}}}}
    assert check(loose, {"a": {"kernels": 14}}).exit_code == 0


def test_updated_rewrites_only_what_did_not_pass() -> None:
    exp = load_expected_doc(
        {
            "fail_on_wins": True,
            "benchmarks": {
                "a": {
                    "same": {"value": 100, "rel_tol": 0.05, "note": "kept"},
                    "worse": {"value": 10},
                    "better": {"value": 10},
                },
                "gone": {"k": {"value": 1}},
            },
        }
    )
    measured = {"a": {"same": 103.0, "worse": 11.0, "better": 9.0, "peak_bytes": 5.0}}
    result = check(exp, measured)
    new = updated(exp, result)
    assert new.metrics["a", "same"] == Expected(100, rel_tol=0.05, note="kept")  # drift stays
    assert new.metrics["a", "worse"].value == 11
    assert new.metrics["a", "better"].value == 9
    assert new.metrics["gone", "k"].value == 1
    assert new.metrics["a", "peak_bytes"] == Expected(5, 0.01, 16 * MIB, False)
    assert new.fail_on_wins
    assert check(new, {**measured, "gone": {"k": 1.0}}).exit_code == 0


def load_expected_doc(doc: dict[str, Any]) -> Expectations:
    from badput.bench.deterministic import _parse

    return _parse(doc, "test")


def test_measured_from_a_run_document() -> None:
    doc = {
        "schema": "badput.bench.run/1",
        "results": [
            {"id": "a[n=1]", "metric": {"name": "peak_bytes"}, "status": "ok", "estimate": 5.0},
            {"id": "b", "metric": {"name": "m"}, "status": "error", "estimate": None},
        ],
    }
    assert measured_from_doc(doc) == {"a[n=1]": {"peak_bytes": 5.0}}
    assert measured_from_doc({"benchmarks": {"x": {"y": 2}}}) == {"x": {"y": 2.0}}


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_cli_check_update_then_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _write(
        tmp_path / "expected.json",
        {
            "schema": "badput.bench.expected/1",
            "fail_on_wins": True,
            "benchmarks": {"k": {"kernels": {"value": 10, "note": "why 10"}}},
        },
    )
    results = _write(tmp_path / "results.json", {"benchmarks": {"k": {"kernels": 8}}})
    report = tmp_path / "check.json"
    assert main(["bench", "check", str(expected), str(results), "--json", str(report)]) == 1
    captured = capsys.readouterr()
    assert "improvement_needs_update" in captured.out and "--update" in captured.err
    doc = json.loads(report.read_text())
    assert doc["schema"] == "badput.bench.check/1" and doc["exit_code"] == 1
    (r,) = doc["results"]
    assert (r["verdict"], r["expected"], r["measured"], r["delta"]) == (
        "improvement_needs_update",
        10,
        8,
        -2,
    )
    assert doc["updated_expectations"]["benchmarks"]["k"]["kernels"]["value"] == 8
    # --allow-wins overrides the file's ratchet
    assert main(["bench", "check", str(expected), str(results), "--allow-wins"]) == 0
    assert main(["bench", "check", str(expected), str(results), "--update"]) == 0
    capsys.readouterr()
    written = json.loads(expected.read_text())
    assert written == {
        "schema": "badput.bench.expected/1",
        "fail_on_wins": True,
        "benchmarks": {"k": {"kernels": {"value": 8, "note": "why 10"}}},
    }
    assert main(["bench", "check", str(expected), str(results)]) == 0
    assert "pass" in capsys.readouterr().out


def test_cli_check_against_a_run_and_first_update(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_json = tmp_path / "run.json"
    path = _file(tmp_path, '@benchmark(metric="allocs", warmup=0)\ndef f():\n    return 42\n')
    assert main(["bench", "run", str(path), "--rounds", "2", "--json", str(run_json)]) == 0
    expected = tmp_path / "expected.json"
    assert main(["bench", "check", str(expected), str(run_json)]) == 2  # no file yet
    assert capsys.readouterr().err == f"badput: error: {expected}: no such file\n"
    assert main(["bench", "check", str(expected), str(run_json), "--update"]) == 0
    assert load_expected(expected).metrics == {("f", "allocs"): Expected(42, 0, 0, False)}
    assert main(["bench", "check", str(expected), str(run_json)]) == 0
    _write(run_json, {"benchmarks": {"f": {"allocs": 43}}})
    assert main(["bench", "check", str(expected), str(run_json)]) == 1
    assert "regression" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([1, 2], "JSON object"),
        ({"benchmarks": {"a": {"m": {"valeu": 1}}}}, "benchmarks.a.m: unknown key(s) valeu"),
        ({"benchmarks": {"a": {"m": {"value": "1"}}}}, "needs a numeric value"),
        ({"benchmarks": {"a": {"m": {"value": 1, "rel_tol": -1}}}}, "rel_tol: must be"),
        ({"schema": "other/2"}, "schema"),
        ({"fail_on_wins": "yes"}, "fail_on_wins"),
    ],
)
def test_cli_check_malformed_expectations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, needle: str
) -> None:
    expected = _write(tmp_path / "expected.json", doc)
    results = _write(tmp_path / "results.json", {"benchmarks": {"a": {"m": 1}}})
    assert main(["bench", "check", str(expected), str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"badput: error: {expected}: ") and needle in err
    assert err.count("\n") == 1


def test_cli_check_bad_results_and_nothing_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _write(tmp_path / "expected.json", {"benchmarks": {"a": {"m": {"value": 1}}}})
    junk = tmp_path / "results.json"
    junk.write_text("{not json")
    assert main(["bench", "check", str(expected), str(junk)]) == 2
    assert capsys.readouterr().err.startswith(f"badput: error: {junk}: not JSON")
    other = _write(tmp_path / "other.json", {"benchmarks": {"b": {"m": 1}}})
    assert main(["bench", "check", str(expected), str(other)]) == 3
    assert "no expected metric was measured" in capsys.readouterr().err


def test_check_api_accepts_parsed_expectations(tmp_path: Path) -> None:
    path = _write(tmp_path / "e.json", {"benchmarks": {"a": {"m": {"value": 2}}}})
    exp = load_expected(path)
    assert check(exp, {"a": {"m": 2}}).checks[0].verdict is Verdict.PASS
    with pytest.raises(UsageError, match="unknown key"):
        check({"bogus": 1}, {})
