"""The results store under attack: a store from a newer badput, a store that cannot be written.

A store whose schema is newer than this badput knows is refused, for writing and for reading,
and left byte for byte as it was. A store that cannot be written (chattr +i, a read-only
directory, a read-only connection) fails with one line naming it (exit 2), never a driver
traceback; `bench history` still reads it when SQLite can.

Tests run as root in CI containers, where chmod does not stop writes: the unwritable cases use
`chattr +i` (skipped where the filesystem or the user cannot set it) and a read-only SQLite
connection (monkeypatched in, so it runs everywhere); the chmod case runs only where
permissions are enforced. The newer-schema cases run on SQLite and on PostgreSQL
(`BADPUT_TEST_PG_URL`, skipped without it, like the other store tests).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

# Imported before any inline pytester session: pytester puts sys.modules back as it was after
# each one, and numpy (under the gate's statistics) cannot be imported twice in one process.
import badput.bench.ab
import badput.bench.history
import badput.bench.runner
import badput.report.markdown  # noqa: F401
from badput.bench.store import MIGRATIONS, Store, StoreError, redact
from badput.errors import BadputError
from synth import run_cli

pytest_plugins = ["pytester"]

KNOWN = max(v for v, _ in MIGRATIONS)
NEWER = KNOWN + 6
HW = {"cpu": {"arch": "x86_64", "model": "Test CPU", "logical_cpus": 4}, "memory_gib": 16}
SOFT = {"python": "CPython 3.11.7", "badput": "0.1.0"}
TABLES = ("schema_migrations", "environment", "run", "result", "round_value", "verdict")

RUN_DOC = {
    "schema": "badput.bench.run/1",
    "file": "b.py",
    "python": "3.11",
    "rounds": 2,
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
            "rounds": [{"i": 0, "value": 0.3, "t": 0.1}, {"i": 1, "value": 0.1, "t": 0.2}],
        }
    ],
}


def _ab_cmd(value: float) -> str:
    return f'{sys.executable} -c "print(\'{{\\"t\\": {value}}}\')"'


def _commands(url: str, tmp_path: Path) -> dict[str, list[str]]:
    """Every CLI command that opens a store, pointed at `url`."""
    doc = tmp_path / "run.json"
    doc.write_text(json.dumps(RUN_DOC))
    ab = ["bench", "ab", "--base", _ab_cmd(1.0), "--head", _ab_cmd(1.0), "--metric", "t"]
    return {
        "ingest": ["bench", "ingest", str(doc), "--store", url],
        "history": ["bench", "history", "--benchmark", "b", "--store", url],
        "ab": [*ab, "--rounds", "2", "--max-rounds", "2", "--store", url],
    }


def _seed(url: str) -> None:
    """A store with one run in it."""
    with Store.open(url) as s:
        s.record_values("b", "m", [1.0, 2.0], hardware=HW, software=SOFT)


def _make_newer(url: str) -> None:
    """What a newer badput leaves: a migration this one does not know, and a table of its own."""
    with Store.open(url) as s, s.transaction() as cur:
        cur.execute("CREATE TABLE future_feature (id INTEGER PRIMARY KEY, note TEXT)")
        cur.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
            (NEWER, "2031-01-01T00:00:00+00:00"),
        )


def _rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the store, read with the bare driver (a guarded `Store` would refuse)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    if "://" not in url:
        con = sqlite3.connect(url)
        try:
            for t in TABLES:
                out[t] = sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        finally:
            con.close()
        return out
    import psycopg

    with psycopg.connect(url) as con:
        for t in TABLES:
            out[t] = sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
    return out


def _sqlite_state(path: Path) -> tuple[bytes, list[str]]:
    """The store file's bytes and what else lies beside it."""
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


def _one_line_error(code: int, out: str, err: str, *needles: str) -> str:
    assert code == 2, f"exit {code}; stdout: {out!r}; stderr: {err!r}"
    assert "Traceback" not in out + err and "sqlite3." not in err and "psycopg" not in err
    assert err.count("\n") == 1 and err.startswith("badput: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# ---- a store from a newer badput ----------------------------------------------------------


@pytest.mark.parametrize("command", ["ingest", "history", "ab"])
def test_newer_schema_is_refused_by_the_cli(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv = _commands(store_url, tmp_path)[command]
    _seed(store_url)
    _make_newer(store_url)
    before = _rows(store_url)
    sqlite = None if "://" in store_url else Path(store_url)
    state = _sqlite_state(sqlite) if sqlite else None
    shown = str(sqlite) if sqlite else redact(store_url)
    code, out, err = run_cli(capsys, *argv)
    _one_line_error(
        code,
        out,
        err,
        shown,
        f"schema version {NEWER} is newer than this badput knows ({KNOWN})",
        "upgrade badput",
    )
    if sqlite:
        assert _sqlite_state(sqlite) == state  # byte for byte, and no journal left behind
    assert _rows(store_url) == before


@pytest.mark.parametrize("read_only", [False, True])
def test_newer_schema_is_refused_by_the_api(store_url: str, read_only: bool) -> None:
    _seed(store_url)
    _make_newer(store_url)
    before = _rows(store_url)
    with pytest.raises(BadputError, match=rf"schema version {NEWER} is newer .* \({KNOWN}\)") as e:
        Store.open(store_url, read_only=read_only)
    assert isinstance(e.value, StoreError) and "\n" not in str(e.value)
    assert _rows(store_url) == before


def test_newer_schema_is_refused_by_an_open_store(store_url: str) -> None:
    """A newer badput migrating the store while this one holds it open: the next write stops."""
    _seed(store_url)
    with Store.open(store_url) as s:
        _make_newer(store_url)
        with pytest.raises(BadputError, match=f"schema version {NEWER} is newer"):
            s.record_values("b", "m", [3.0], hardware=HW, software=SOFT)
        with pytest.raises(BadputError, match=f"schema version {NEWER} is newer"):
            s.migrate()
    assert len(_rows(store_url)["run"]) == 1


def test_newer_schema_is_refused_by_the_pytest_plugin(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    url = str(tmp_path / "bench.sqlite")
    _seed(url)
    _make_newer(url)
    state = _sqlite_state(Path(url))
    pytester.makepyfile(test_suite="def test_b(benchmark):\n    benchmark(sum, [1])\n")
    result = pytester.runpytest(
        "-p", "no:benchmark", "-p", "no:cacheprovider", "--badput-bench", f"--badput-store={url}"
    )
    assert result.ret == 3
    result.stdout.fnmatch_lines(
        [f"badput: error: could not record the benchmarks: {url}: schema version {NEWER} is *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert _sqlite_state(Path(url)) == state


# ---- a store that cannot be written -------------------------------------------------------


def _chattr(path: Path, flag: str) -> bool:
    try:
        proc = subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False)
    except OSError:  # no chattr on this machine
        return False
    return proc.returncode == 0


@pytest.fixture
def immutable() -> Iterator[Any]:
    """`make(path)` sets chattr +i on a path (skips where it cannot); undone after the test."""
    done: list[Path] = []

    def make(path: Path) -> Path:
        if not _chattr(path, "+i"):
            pytest.skip("chattr +i is not available here (not root, or not supported)")
        done.append(path)
        return path

    yield make
    for path in reversed(done):
        _chattr(path, "-i")


def _history_works(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, err = run_cli(capsys, "bench", "history", "--benchmark", "b", "--store", url)
    assert code == 0, err
    assert "b m on" in out and "Traceback" not in out + err


@pytest.mark.parametrize("command", ["ingest", "ab"])
def test_immutable_store_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], immutable: Any, command: str
) -> None:
    path = tmp_path / "s.sqlite"
    _seed(str(path))
    immutable(path)
    before = path.read_bytes()
    code, out, err = run_cli(capsys, *_commands(str(path), tmp_path)[command])
    _one_line_error(code, out, err, f"{path}: cannot write the results store", "read-only")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "s.sqlite"]  # no journal
    _history_works(capsys, str(path))
    assert path.read_bytes() == before


def test_immutable_store_fails_the_pytest_plugin(
    pytester: pytest.Pytester, tmp_path: Path, immutable: Any
) -> None:
    path = tmp_path / "s.sqlite"
    _seed(str(path))
    immutable(path)
    pytester.makepyfile(test_suite="def test_b(benchmark):\n    benchmark(sum, [1])\n")
    result = pytester.runpytest(
        "-p", "no:benchmark", "-p", "no:cacheprovider", "--badput-bench", f"--badput-store={path}"
    )
    assert result.ret == 3
    result.stdout.fnmatch_lines(
        [f"badput: error: could not record the benchmarks: {path}: cannot write the results *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_store_in_a_read_only_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], immutable: Any
) -> None:
    """SQLite keeps its journal (-wal, -shm) beside the store: a read-only directory stops it."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "s.sqlite"
    _seed(str(path))
    immutable(folder)
    before = path.read_bytes()
    doc = tmp_path / "run.json"
    doc.write_text(json.dumps(RUN_DOC))
    code, out, err = run_cli(capsys, "bench", "ingest", doc, "--store", path)
    _one_line_error(code, out, err, f"{path}: cannot write the results store", "directory")
    # A new store there cannot even be created.
    code, out, err = run_cli(capsys, "bench", "ingest", doc, "--store", folder / "new.sqlite")
    _one_line_error(code, out, err, f"{folder / 'new.sqlite'}: cannot ")
    # Reading needs no journal: history still shows what is stored.
    _history_works(capsys, str(path))
    assert path.read_bytes() == before and sorted(os.listdir(folder)) == ["s.sqlite"]


def test_read_only_permissions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.sqlite"
    _seed(str(path))
    path.chmod(0o444)
    if os.access(path, os.W_OK):  # root ignores permissions
        pytest.skip("permissions are not enforced for this user")
    before = path.read_bytes()
    code, out, err = run_cli(capsys, *_commands(str(path), tmp_path)["ingest"])
    _one_line_error(code, out, err, f"{path}: cannot write the results store")
    assert path.read_bytes() == before
    _history_works(capsys, str(path))


@pytest.fixture
def read_only_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQLite connection the store makes is read-only (mode=ro): unwritable, even as root."""
    real = sqlite3.connect

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        name = os.fspath(database)
        path = urlsplit(name).path if name.startswith("file:") else name
        kwargs["uri"] = True
        return real(Path(path).resolve().as_uri() + "?mode=ro", *args, **kwargs)

    monkeypatch.setattr("badput.bench.store.dialect.sqlite3.connect", connect)


@pytest.mark.parametrize("command", ["ingest", "ab"])
def test_read_only_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, request: Any
) -> None:
    path = tmp_path / "s.sqlite"
    _seed(str(path))
    before = _rows(str(path))
    request.getfixturevalue("read_only_sqlite")
    code, out, err = run_cli(capsys, *_commands(str(path), tmp_path)[command])
    _one_line_error(code, out, err, f"{path}: cannot write the results store", "readonly")
    _history_works(capsys, str(path))
    assert _rows(str(path)) == before


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_read_only_postgres_session(store_url: str, tmp_path: Path, capsys: Any) -> None:
    """A role or server that only reads (a hot standby, default_transaction_read_only)."""
    _seed(store_url)
    before = _rows(store_url)
    parts = urlsplit(store_url)
    query = "options=" + quote("-c default_transaction_read_only=on")
    url = urlunsplit(parts._replace(query=f"{parts.query}&{query}" if parts.query else query))
    code, out, err = run_cli(capsys, *_commands(url, tmp_path)["ingest"])
    _one_line_error(code, out, err, f"{parts.path}", "cannot write the results store")
    _history_works(capsys, url)
    assert _rows(store_url) == before


# ---- reading never creates a store --------------------------------------------------------


def test_history_of_a_missing_store_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sub" / "missing.sqlite"
    code, _out, err = run_cli(capsys, "bench", "history", "--benchmark", "b", "--store", path)
    assert code == 3 and err == f"badput: error: {path}: no results store there (no such file)\n"
    assert not (tmp_path / "sub").exists()
