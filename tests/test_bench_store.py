"""The results store, its history and change points, and `bench ingest`/`history`.

Tests that take `store_url` run against SQLite and against a real PostgreSQL server
(`BADPUT_TEST_PG_URL`, started by `.ci/postgres.sh`; skipped without it, failed in CI).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from badput.bench.ab import ABResult, MetricResult, Policy
from badput.bench.history import history
from badput.bench.stats import Decision
from badput.bench.store import (
    MIGRATIONS,
    ResultRow,
    RunRow,
    Store,
    StoreInputError,
    environment_id,
    hardware_fingerprint,
    redact,
    software_versions,
)
from badput.cli.app import main
from badput.errors import UsageError

HW = {"cpu": {"arch": "x86_64", "model": "Test CPU", "logical_cpus": 4}, "memory_gib": 16}
SOFT = {"python": "CPython 3.11.7", "badput": "0.1.0", "numpy": "1.26.4"}


def _ab_doc() -> dict[str, Any]:
    r = MetricResult(
        benchmark="train",
        metric="wall_s",
        decision=Decision.REGRESSION,
        effect=0.12,
        ci=(0.08, 0.16),
        p_value=0.001,
        p_adjusted=0.002,
        rounds=4,
        higher_is_better=False,
        base=[1.0, 1.1, 0.9, 1.0],
        head=[1.2, 1.1, 1.15, 1.13],
    )
    return ABResult([r], Policy(rounds=4), looks=1, elapsed_s=3.0).as_dict()


def _run_doc() -> dict[str, Any]:
    return {
        "schema": "badput.bench.run/1",
        "file": "b.py",
        "python": "3.11",
        "rounds": 3,
        "elapsed_s": 1.0,
        "exit_code": 0,
        "results": [
            {
                "id": "matmul[n=64]",
                "benchmark": {"name": "matmul", "params": {"n": 64}},
                "metric": {"name": "wall_s", "unit": "s", "higher_is_better": False},
                "status": "ok",
                "error": None,
                "estimate": 0.2,
                "rounds": [
                    {"i": 0, "value": 0.3, "t": 0.1},
                    {"i": 1, "value": 0.1, "t": 0.2},
                    {"i": 2, "value": 0.2, "t": 0.3},
                ],
            },
            {
                "id": "broken",
                "benchmark": {"name": "broken", "params": {}},
                "metric": {"name": "wall_s", "unit": "s", "higher_is_better": False},
                "status": "error",
                "error": "boom",
                "estimate": None,
                "rounds": [],
            },
        ],
    }


def _device(rank: int, goodput: float) -> dict[str, Any]:
    return {
        "rank": rank,
        "device": 0,
        "gpu": "NVIDIA H200",
        "window_us": 1000.0,
        "goodput": goodput,
        "breakdown_us": {"compute": 700.0, "communication": 0, "memory": 50.0, "idle": 250.0},
        "step_time_us": {"mean": 100.0, "median": 99.0, "max": 120.0},
    }


def _analysis_doc(n: int = 1) -> dict[str, Any]:
    return {
        "schema": "badput.analysis/1",
        "badput_version": "0.1.0",
        "traces": [],
        "findings": [],
        "devices": [_device(r, 0.7 - 0.1 * r) for r in range(n)],
    }


def _meter_summary() -> dict[str, Any]:
    from badput.meter import Meter

    meter = Meter(report_every=10**9, gpu_timing=False, distributed=False)
    for _ in range(5):
        with meter.step(samples=4):
            time.sleep(0.001)
    summary = meter.summary()
    meter.close()
    return summary


def test_migrations_idempotent(store_url: str) -> None:
    with Store.open(store_url) as s:
        assert s.dialect == ("postgresql" if store_url.startswith("postgresql:") else "sqlite")
        assert s.schema_version() == MIGRATIONS[-1][0]
        assert s.migrate() == []
        s.record_values("b", "m", [1.0], hardware=HW, software=SOFT)
    with Store.open(store_url) as s:
        assert s.migrate() == []
        assert s.count("run") == 1
        rows = s._conn.execute("SELECT version FROM schema_migrations ORDER BY version")
        assert [r[0] for r in rows] == [v for v, _ in MIGRATIONS]
        assert s.integrity_ok()


def test_sqlite_url_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store.open(f"sqlite:///{path}") as s:
        assert s.dialect == "sqlite" and s.path == str(path)
        s.record_values("b", "m", [1.0], hardware=HW, software=SOFT)
    con = sqlite3.connect(path)
    rows = con.execute("SELECT version FROM schema_migrations").fetchall()
    assert rows == [(v,) for v, _ in MIGRATIONS]
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_default_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Store.open() as s:
        assert s.path == ".badput/bench.sqlite"
    assert (tmp_path / ".badput" / "bench.sqlite").is_file()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:secret@db/x", "unknown store URL scheme 'mysql'"),
        ("postgresql://u:secret@[::1/x", "malformed postgresql:// store URL"),
        ("sqlite://relative", "sqlite:///PATH"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as e:
        Store.open(url)
    assert "secret" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@127.0.0.1:1/x", "postgresql://u@127.0.0.1:1/x"),
        ("postgres://u:secret@127.0.0.1:1/x", "postgres://u@127.0.0.1:1/x"),
        ("postgresql+psycopg://:secret@127.0.0.1:1/x", "postgresql+psycopg://127.0.0.1:1/x"),
        ("postgresql://u@127.0.0.1:1/x?password=secret&sslmode=disable", "127.0.0.1:1/x?sslmode"),
        ("postgresql://u:secret@127.0.0.1:notaport/x", "postgresql://u@127.0.0.1:notaport/x"),
    ],
)
def test_unreachable_postgres(url: str, shown: str) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(UsageError) as e:
        Store.open(url)
    message = str(e.value)
    assert shown in message and "results store (" in message
    assert "secret" not in message and "\n" not in message


def test_postgres_without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(UsageError) as e:
        Store.open("postgresql://u:secret@127.0.0.1:1/x")
    assert str(e.value) == (
        "postgresql://u@127.0.0.1:1/x: a PostgreSQL store needs psycopg 3: "
        "pip install 'badput[postgres]'"
    )


def test_redact() -> None:
    assert redact("postgresql://u:p%40ss@h:5/db?password=x&a=b") == "postgresql://u@h:5/db?a=b"
    assert redact("postgresql://h/db") == "postgresql://h/db"
    assert redact("postgresql://u:p@ss@h/db") == "postgresql://u@h/db"


def test_missing_postgres_database(pg_admin_url: str) -> None:
    url = urlunsplit(urlsplit(pg_admin_url)._replace(path="/no_such_db_here"))
    with pytest.raises(UsageError, match=r"/no_such_db_here: cannot connect .*does not exist"):
        Store.open(url)


def test_bad_url_through_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "run.json"
    doc.write_text(json.dumps(_run_doc()))
    url = "postgresql://u:s3cret@127.0.0.1:1/db"
    assert main(["bench", "ingest", str(doc), "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("badput: error: postgresql://u@127.0.0.1:1/db: ")
    assert err.count("\n") == 1 and "s3cret" not in err
    assert main(["bench", "history", "--benchmark", "x", "--store", "ftp://h/x"]) == 2
    assert "unknown store URL scheme 'ftp'" in capsys.readouterr().err


def test_fingerprint_and_software_are_stable() -> None:
    a, b = hardware_fingerprint(), hardware_fingerprint()
    assert a == b and environment_id(a) == environment_id(b)
    assert environment_id(a).startswith("sha256:") and len(environment_id(a)) == 71
    assert a["cpu"]["logical_cpus"] == os.cpu_count()
    assert isinstance(a["memory_gib"], int)
    soft = software_versions()
    assert soft["python"].split()[-1].startswith("3.")
    assert "numpy" in soft and "badput" in soft


def test_record_ab_round_trip(store_url: str) -> None:
    with Store.open(store_url) as s:
        base_id, head_id = s.record_ab(
            _ab_doc(), commit="head1", base_commit="base1", hardware=HW, software=SOFT
        )
        assert s.rounds(base_id, "train", "wall_s") == [1.0, 1.1, 0.9, 1.0]
        assert s.rounds(head_id, "train", "wall_s") == [1.2, 1.1, 1.15, 1.13]
        (p,) = s.series("train", "wall_s")  # history + ab_base by default
        assert (p.run_id, p.commit, p.purpose, p.value, p.n_rounds) == (
            base_id,
            "base1",
            "ab_base",
            1.0,
            4,
        )
        assert p.software == SOFT and p.unit == "s" and p.higher_is_better is False
        assert p.environment_id == environment_id(HW)
        both = s.series("train", "wall_s", purposes=("ab_base", "ab_head"))
        assert [q.commit for q in both] == ["base1", "head1"]
        assert both[1].value == pytest.approx(1.14)
        (v,) = s.verdicts()
        assert v["head_run"] == head_id and v["decision"] == "regression"
        assert (v["effect"], v["ci_low"], v["ci_high"], v["p_adjusted"]) == (
            0.12,
            0.08,
            0.16,
            0.002,
        )
        assert v["params"]["rounds"] == 4 and v["method"] == "ab-wilcoxon-paired"


def test_record_run_round_trip(store_url: str) -> None:
    with Store.open(store_url) as s:
        run_id = s.record_run(_run_doc(), commit="c1", branch="main", hardware=HW, software=SOFT)
        (p,) = s.series("matmul[n=64]", "wall_s")
        assert (p.run_id, p.value, p.n_rounds, p.commit, p.branch) == (run_id, 0.2, 3, "c1", "main")
        assert s.rounds(run_id, "matmul[n=64]", "wall_s") == [0.3, 0.1, 0.2]
        assert s.series("broken", "wall_s") == []  # failed results are stored, not in series
        assert s.count("result") == 2 and s.count("round_value") == 3


def test_record_values_analysis_meter(store_url: str) -> None:
    with Store.open(store_url) as s:
        s.record_values(
            "job", "goodput", [0.5, 0.7, 0.6], unit="ratio", higher_is_better=True, hardware=HW
        )
        (p,) = s.series("job", "goodput")
        assert p.value == 0.6 and p.higher_is_better and p.unit == "ratio"

        s.record_analysis(_analysis_doc(1), hardware=HW, software=SOFT)
        assert s.metrics("analyze") == ["goodput", "idle_share", "step_time_mean_s"]
        assert s.series("analyze", "goodput")[0].value == pytest.approx(0.7)
        assert s.series("analyze", "idle_share")[0].value == pytest.approx(0.25)
        assert s.series("analyze", "step_time_mean_s")[0].value == pytest.approx(1e-4)
        s.record_analysis(_analysis_doc(2), benchmark="job2", hardware=HW, software=SOFT)
        assert s.series("job2[rank=1,device=0]", "goodput")[0].value == pytest.approx(0.6)

        summary = _meter_summary()
        s.record_meter(summary, hardware=HW, software=SOFT)
        assert s.series("meter", "goodput")[0].value == pytest.approx(summary["goodput"])
        assert s.series("meter", "step_time_s")[0].value == pytest.approx(
            summary["step_time_s"]["median"]
        )
        assert s.series("meter", "samples_per_s")[0].value == pytest.approx(
            summary["samples_per_s"]
        )


def test_malformed_documents_write_nothing(store_url: str) -> None:
    with Store.open(store_url) as s:
        bad = _run_doc()
        bad["results"][0]["rounds"][1]["value"] = "fast"
        with pytest.raises(StoreInputError, match=r"rounds: 'value' has the wrong type"):
            s.record_run(bad, hardware=HW)
        with pytest.raises(StoreInputError, match="missing 'devices'"):
            s.record_analysis({"schema": "badput.analysis/1"}, hardware=HW)
        with pytest.raises(StoreInputError, match="no values"):
            s.record_values("b", "m", [], hardware=HW)
        assert s.count("run") == 0 and s.count("environment") == 0


# ---- concurrency -----------------------------------------------------------------------------


def _writer(path: str, worker: int, runs: int) -> None:
    with Store.open(path) as s:
        for i in range(runs):
            values = [float(worker * 1000 + i + k / 10) for k in range(5)]
            s.record_values(
                f"w{worker}", "wall_s", values, commit=f"{worker}-{i}", hardware=HW, software=SOFT
            )


def _context() -> Any:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def test_concurrent_writers_lose_nothing(store_url: str) -> None:
    path = store_url
    Store.open(path).close()
    ctx = _context()
    procs = [ctx.Process(target=_writer, args=(path, w, 50)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store.open(path) as s:
        assert s.count("run") == 400
        assert s.count("result") == 400
        assert s.count("round_value") == 2000
        assert s.count("environment") == 1
        for w in range(8):
            pts = s.series(f"w{w}", "wall_s")
            assert [p.commit for p in pts] == [f"{w}-{i}" for i in range(50)]
            assert [p.value for p in pts] == [w * 1000 + i + 0.2 for i in range(50)]
            assert all(p.n_rounds == 5 for p in pts)
        assert s.integrity_ok()


def _opener(url: str) -> None:
    Store.open(url).close()


def test_concurrent_first_opens_migrate_once(store_url: str) -> None:
    ctx = _context()
    procs = [ctx.Process(target=_opener, args=(store_url,)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store.open(store_url) as s:
        rows = s._conn.execute("SELECT version FROM schema_migrations").fetchall()
        assert sorted(r[0] for r in rows) == [v for v, _ in MIGRATIONS]


def _stuck_writer(path: str, ready: str) -> None:
    s = Store.open(path)
    with s.transaction() as cur:
        env = s._environment(cur, HW)
        run_id, _ = s._insert_run(cur, RunRow("values", []), env, SOFT)
        s._insert_result(cur, run_id, ResultRow("stuck", "wall_s", [1.0, 2.0, 3.0]))
        Path(ready).write_text("ready")
        time.sleep(60)


def test_writer_killed_mid_transaction(store_url: str, tmp_path: Path) -> None:
    path = store_url
    ready = tmp_path / "ready"
    with Store.open(path) as s:
        s.record_values("ok", "wall_s", [1.0, 2.0], hardware=HW, software=SOFT)
    proc = _context().Process(target=_stuck_writer, args=(path, str(ready)))
    proc.start()
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.01)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    with Store.open(path, timeout_s=10) as s:
        assert s.integrity_ok()
        assert (s.count("run"), s.count("result"), s.count("round_value")) == (1, 1, 2)
        assert s.series("stuck", "wall_s") == []
        s.record_values("after", "wall_s", [3.0], hardware=HW, software=SOFT)
        assert s.count("run") == 2 and s.series("after", "wall_s")[0].value == 3.0


# ---- history -------------------------------------------------------------------------------


def _planted(s: Store) -> None:
    rng = random.Random(1)
    for i in range(24):
        soft = {**SOFT, "torch": "2.4.0" if i < 12 else "2.5.0"}
        level = 1.0 if i < 12 else 1.1
        values = [level * (1 + rng.gauss(0, 0.005)) for _ in range(5)]
        s.record_values(
            "train", "wall_s", values, unit="s", commit=f"c{i:02}", hardware=HW, software=soft
        )
    # Another machine: its own series, no step.
    other = {**HW, "memory_gib": 32}
    for i in range(8):
        s.record_values(
            "train", "wall_s", [2.0 + 0.001 * (i % 2)], commit=f"c{i:02}", hardware=other
        )


def test_history_finds_planted_step(store_url: str) -> None:
    with Store.open(store_url) as s:
        _planted(s)
        # A repeated commit is aggregated into one point.
        s.record_values(
            "train", "wall_s", [1.1], commit="c23", hardware=HW, software={**SOFT, "torch": "2.5.0"}
        )
        series = history(s, "train", "wall_s")
    assert [x.environment_id for x in series] == [
        environment_id(HW),
        environment_id({**HW, "memory_gib": 32}),
    ]
    main_series, other = series
    assert len(main_series.points) == 24 and len(main_series.points[-1].runs) == 2
    (shift,) = main_series.shifts
    assert shift.change.index == 12
    assert shift.change.change == pytest.approx(0.10, abs=0.01)
    assert (shift.last_good, shift.first_bad) == ("c11", "c12")
    assert shift.software_diff == {"torch": ["2.4.0", "2.5.0"]}
    assert other.shifts == [] and len(other.points) == 8


def test_cli_ingest_and_history(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_url
    files = {
        "ab.json": _ab_doc(),
        "run.json": _run_doc(),
        "analysis.json": _analysis_doc(1),
        "meter.json": _meter_summary(),
    }
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
    jsonl = tmp_path / "meter.jsonl"
    jsonl.write_text(
        json.dumps({"type": "report", **files["meter.json"]})
        + "\n"
        + json.dumps({"type": "final", **files["meter.json"], "goodput": 0.5})
        + "\n"
    )
    paths = [str(tmp_path / n) for n in files] + [str(jsonl)]
    assert main(["bench", "ingest", *paths, "--store", store, "--commit", "abc"]) == 0
    out = capsys.readouterr().out
    assert "A/B verdict, 2 run(s), 2 result(s)" in out
    assert "bench run, 1 run(s), 2 result(s)" in out
    assert "analysis, 1 run(s), 3 result(s)" in out
    with Store.open(store) as s:
        assert s.count("run") == 6
        assert [p.value for p in s.series("meter", "goodput")][-1] == 0.5
        assert s.series("matmul[n=64]", "wall_s")[0].commit == "abc"

    with Store.open(store) as s:
        _planted(s)
    assert (
        main(["bench", "history", "--benchmark", "train", "--store", store, "--format", "json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "badput.bench.history/1"
    by_env = {x["environment_id"]: x for x in doc["metrics"]["wall_s"]}
    assert len(by_env) == 3  # this machine (the A/B base side), HW and HW with 32 GiB
    assert len(by_env[environment_id(hardware_fingerprint())]["points"]) == 1
    first = by_env[environment_id(HW)]
    (cp,) = first["change_points"]
    assert cp["first_bad"] == "c12" and cp["regression"] is True
    assert cp["software_diff"] == {"torch": ["2.4.0", "2.5.0"]}
    assert main(["bench", "history", "--benchmark", "train", "--store", store]) == 0
    text = capsys.readouterr().out
    assert "regression at point 12" in text and "torch 2.4.0 -> 2.5.0" in text
    assert main(["bench", "history", "--benchmark", "nope", "--store", store]) == 3
    assert "nothing stored for benchmark 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "badput.bench.run/1"}', "missing 'results'"),
        ('{"schema": "other/1"}', "not a document badput can store"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_cli_ingest_malformed(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, problem: str
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_run_doc()))
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    store = store_url
    assert main(["bench", "ingest", str(good), str(bad), "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"badput: error: {bad}: ") and problem in err
    # Checked before anything was written (before the store was even opened).
    if "://" in store:
        with Store.open(store) as s:
            assert s.count("run") == 0
    else:
        assert not Path(store).exists()
