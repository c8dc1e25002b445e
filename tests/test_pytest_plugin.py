"""`pytest --badput-bench`: pytest-benchmark suites recorded in the store, and gated.

Each test runs a small benchmark suite in a pytester session, against the real pytest-benchmark
(pinned in the dev extra) and against the plugin's own fallback fixture (`-p no:benchmark`).
"""

from __future__ import annotations

import json
import shlex
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

# Imported before any inline session: pytester puts sys.modules back as it was after each one,
# and numpy (under the gate's statistics) cannot be imported twice in one process.
import badput.bench.ab
import badput.bench.history
import badput.bench.runner
import badput.report.markdown  # noqa: F401
from badput.bench.store import Store
from badput.cli.app import main
from badput.pytest_plugin import metrics_line_key

pytest_plugins = ["pytester"]

# The suite: one call-mode benchmark (pytest-benchmark calibrates it), one pedantic with
# parameters, rounds fixed. SLOW multiplies the sleep of test_slowed (the head side of the gate).
SUITE = """
import os
import time

import pytest

SLOW = float(os.environ.get("SLOW", "1"))


def test_sum(benchmark):
    assert benchmark(sum, range(1000)) == 499500


@pytest.mark.parametrize("n", [1, 2])
def test_sleep(benchmark, n):
    benchmark.pedantic(time.sleep, args=(0.001 * n,), rounds=7, warmup_rounds=1)


def test_slowed(benchmark):
    benchmark.pedantic(time.sleep, args=(0.002 * SLOW,), rounds=5)


def test_unchanged(benchmark):
    benchmark.pedantic(time.sleep, args=(0.002,), rounds=5)
"""

NO_CACHE = ("-p", "no:cacheprovider")


IDS = {
    "sum": "test_suite.py::test_sum",
    "sleep1": "test_suite.py::test_sleep[1]",
    "sleep2": "test_suite.py::test_sleep[2]",
    "slowed": "test_suite.py::test_slowed",
    "unchanged": "test_suite.py::test_unchanged",
}


def _only_run(db: Store, benchmark: str) -> tuple[str, list[float], int]:
    (point,) = db.series(benchmark, "wall_s")
    return point.run_id, db.rounds(point.run_id, benchmark, "wall_s"), point.n_rounds


def test_plugin_is_a_pytest11_entry_point() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("badput") == "badput.pytest_plugin"
    assert version("pytest-benchmark") == "5.3.1"  # the version the dev extra pins


def test_records_pytest_benchmark_rounds_exactly(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_suite=SUITE)
    url = f"sqlite:///{tmp_path / 'bench.sqlite'}"
    result = pytester.runpytest(
        *NO_CACHE,
        "--badput-bench",
        f"--badput-store={url}",
        "--badput-commit=c0ffee",
        "--badput-branch=main",
        f"--badput-json={tmp_path / 'run.json'}",
        f"--benchmark-json={tmp_path / 'pb.json'}",
    )
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["badput: recorded 5 benchmark(s) in *bench.sqlite (run *)"])
    theirs = {
        b["fullname"]: b for b in json.loads((tmp_path / "pb.json").read_text())["benchmarks"]
    }
    ids = IDS
    assert set(theirs) == set(ids.values())
    with Store.open(url) as db:
        assert db.count("run") == 1 and db.count("result") == 5
        for bench_id, b in theirs.items():
            _, rounds, n_rounds = _only_run(db, bench_id)
            # The stored rounds are pytest-benchmark's own per-round values, bit for bit.
            assert rounds == b["stats"]["data"]
            assert n_rounds == b["stats"]["rounds"] == len(rounds)
            (point,) = db.series(bench_id, "wall_s")
            assert point.value == b["stats"]["median"]
            assert point.commit == "c0ffee" and point.branch == "main"
            assert point.unit == "s" and point.higher_is_better is False
    # pedantic: exactly the rounds asked for, warm-up rounds left out; call mode: calibrated.
    assert theirs[ids["sleep1"]]["stats"]["rounds"] == 7
    assert theirs[ids["slowed"]]["stats"]["rounds"] == 5
    assert theirs[ids["sum"]]["stats"]["rounds"] >= 5
    # A 1 ms sleep takes at least 1 ms; the scheduler may add, never remove.
    assert min(theirs[ids["sleep1"]]["stats"]["data"]) >= 0.001
    assert min(theirs[ids["sleep2"]]["stats"]["data"]) >= 0.002

    # The run document is what `badput bench ingest` takes: a second store gets the same rows.
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["schema"] == "badput.bench.run/1" and doc["exit_code"] == 0
    by_id = {r["id"]: r for r in doc["results"]}
    assert [r["value"] for r in by_id[ids["sleep2"]]["rounds"]] == (
        theirs[ids["sleep2"]]["stats"]["data"]
    )
    assert by_id[ids["sleep2"]]["benchmark"]["params"] == {"n": 2}
    other = tmp_path / "other.sqlite"
    assert main(["bench", "ingest", str(tmp_path / "run.json"), "--store", str(other)]) == 0
    with Store.open(other) as db:
        _, rounds, _ = _only_run(db, ids["sleep2"])
        assert rounds == theirs[ids["sleep2"]]["stats"]["data"]


def test_fallback_fixture_without_pytest_benchmark(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_suite="""
        import time

        import pytest


        def test_call(benchmark):
            assert benchmark(sum, [1, 2, 3]) == 6
            assert benchmark.name == "test_call"


        @pytest.mark.parametrize("k", [2])
        def test_pedantic(benchmark, k):
            calls = []
            out = benchmark.pedantic(
                lambda: calls.append(time.sleep(0.002)) or k,
                rounds=3,
                warmup_rounds=1,
                iterations=2,
            )
            assert out == k and len(calls) == (1 + 3) * 2


        def test_used_twice(benchmark):
            benchmark(sum, [1])
            with pytest.raises(RuntimeError):
                benchmark(sum, [1])


        def test_setup(benchmark):
            seen = []
            benchmark.pedantic(
                seen.append, setup=lambda: ((len(seen),), {}), rounds=4
            )
            assert seen == [0, 1, 2, 3]
        """
    )
    url = str(tmp_path / "fallback.sqlite")
    result = pytester.runpytest(
        "-p", "no:benchmark", *NO_CACHE, "--badput-bench", f"--badput-store={url}"
    )
    result.assert_outcomes(passed=4)
    with Store.open(url) as db:
        assert db.count("result") == 4
        _, rounds, n = _only_run(db, "test_suite.py::test_pedantic[2]")
        assert n == 3  # warm-up round left out
        # each value is one round's time over its 2 iterations: one 2 ms sleep and a list append
        assert all(0.002 <= v < 0.1 for v in rounds)
        _, rounds, n = _only_run(db, "test_suite.py::test_call")
        assert n >= 5 and all(0 < v < 0.01 for v in rounds)
        _, _, n = _only_run(db, "test_suite.py::test_setup")
        assert n == 4


def test_inert_without_the_option(pytester: pytest.Pytester) -> None:
    """Loaded from the entry point in every session, the plugin adds nothing unless asked."""
    pytester.makepyfile(
        test_suite="""
        def test_plain():
            assert True


        def test_wants_benchmark(benchmark):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:benchmark", *NO_CACHE)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'benchmark' not found*"])
    assert "badput:" not in result.stdout.str()  # (the header lists the plugin: badput-0.1.0)
    assert not (pytester.path / ".badput").exists()


def test_no_benchmark_is_an_infrastructure_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite="def test_plain():\n    assert True\n")
    result = pytester.runpytest(*NO_CACHE, "--badput-bench")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["badput: error: --badput-bench: no benchmark ran in this session"])


def test_store_that_cannot_open_fails_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite="def test_b(benchmark):\n    benchmark(sum, [1])\n")
    result = pytester.runpytest(*NO_CACHE, "--badput-bench", "--badput-store=mysql://h/db")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["badput: error: could not record the benchmarks: *'mysql'*"])


def test_history_flags_a_3x_slowdown(
    pytester: pytest.Pytester, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twelve sessions, one per commit: six before test_slowed became 3x slower, six after."""
    pytester.makepyfile(test_suite=SUITE)
    url = str(tmp_path / "history.sqlite")
    ids = IDS
    for i in range(12):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SLOW", "3" if i >= 6 else "1")
            result = pytester.runpytest(
                *NO_CACHE,
                "--badput-bench",
                f"--badput-store={url}",
                f"--badput-commit=commit{i:02d}",
                "-k",
                "slowed or unchanged",
            )
        result.assert_outcomes(passed=2, deselected=3)
    capsys.readouterr()
    args = ["bench", "history", "--store", url, "--format", "json", "--benchmark"]
    assert main([*args, ids["slowed"]]) == 0
    doc = json.loads(capsys.readouterr().out)
    (series,) = doc["metrics"]["wall_s"]
    assert [p["commit"] for p in series["points"]] == [f"commit{i:02d}" for i in range(12)]
    (change,) = series["change_points"]
    assert change["index"] == 6 and change["first_bad"] == "commit06"
    assert change["regression"] and change["confirmed"]
    # 2 ms -> 6 ms sleeps: about 3x, less the fixed overhead of a call to time.sleep
    assert 1.0 < change["change"] < 2.5
    # the benchmark that did not change has no change point
    assert main([*args, ids["unchanged"]]) == 0
    (series,) = json.loads(capsys.readouterr().out)["metrics"]["wall_s"]
    assert series["change_points"] == []


def test_ab_gate_flags_a_3x_slowdown(tmp_path: Path, pytester: pytest.Pytester) -> None:
    """`bench ab` runs the suite as base and head, one pytest session per round, and fails it."""
    pytester.makepyfile(test_suite=SUITE)
    ids = IDS
    suite = pytester.path
    pytest_cmd = (
        f"{shlex.quote(sys.executable)} -m pytest {shlex.quote(str(suite))} -q "
        "-p no:cacheprovider --badput-bench --badput-store none --badput-metrics-line "
        "-k 'slowed or unchanged'"
    )
    md = tmp_path / "ab.md"
    verdict = tmp_path / "ab.json"
    code = main(
        [
            "bench",
            "ab",
            "--base",
            f"cd {shlex.quote(str(suite))} && {pytest_cmd}",
            "--head",
            f"cd {shlex.quote(str(suite))} && SLOW=3 {pytest_cmd}",
            "--metric",
            metrics_line_key(ids["slowed"]),
            "--metric",
            metrics_line_key(ids["unchanged"]),
            "--rounds",
            "6",
            "--max-rounds",
            "6",
            "--alpha",
            "0.05",
            "--json",
            str(verdict),
            "--markdown",
            str(md),
        ]
    )
    assert code == 1
    results = {r["metric"]: r for r in json.loads(verdict.read_text())["results"]}
    slowed = results[metrics_line_key(ids["slowed"])]
    assert slowed["decision"] == "regression" and slowed["rounds"] == 6
    assert 1.0 < slowed["effect"] < 2.5  # sleep overshoot under load only shrinks the 3x
    # 6 rounds all one way: exact one-sided Wilcoxon p = 1/64, doubled by Holm over 2 metrics
    assert slowed["p_adjusted"] == pytest.approx(2 / 64)
    assert results[metrics_line_key(ids["unchanged"])]["decision"] != "regression"
    text = md.read_text()
    assert text.startswith("## badput bench ab: **FAIL**")
    assert "test\\_suite.py::test\\_slowed" in text


def test_metrics_line_keys_read_as_seconds_whatever_the_test_is_called() -> None:
    """`bench ab` judges direction by the key's last word: `wall_s`, so lower is better."""
    from badput.bench.ab import Policy

    key = metrics_line_key("benchmarks/test_io.py::test_speed[samples_per_s]")
    assert key.endswith(" wall_s") and not Policy().better_higher(key)
    assert Policy().better_higher("resnet/samples_per_s")
    assert not Policy().better_higher("tests/t.py::test_throughput wall_s")
