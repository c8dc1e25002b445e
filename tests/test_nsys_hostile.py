"""Hostile Nsight Systems exports and process paths: each gets exit 2 and one error line that
names the file (and the table and column), or is read as well as it can be; never a
traceback, never minutes spent on one name.

Every case here failed before the reader checked it: a `#pid=N` path crashed the progress
code, `#pid=²` crashed `int()`, TEXT/BLOB/REAL values in integer columns crashed the numpy
conversion, step numbers of 5000 digits crashed `int()`, and a 10 MB kernel name took about
20 s of regex matching.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from synth import run_cli
from synth_timeline import standard_timeline, write_kineto, write_nsys
from test_cli_errors import assert_one_error_line
from test_nsys import _second_process

# A regression to matching whole names costs 20 s and more for one 10 MB name; the bounded
# matching costs well under a second on this slow machine, plus reading and writing the name
# (about 1 s in all here). Half the regression's cost: room for a CI machine several times
# slower under load, none for the regression.
_LONG_NAME_BOUND_S = 10.0
_LONG = 10_000_000


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sound single-process export, copied by each test that damages it."""
    return write_nsys(standard_timeline(steps=2), tmp_path_factory.mktemp("base") / "base.sqlite")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export of two processes with GPU activity: 4242 on GPU 0, 4343 on GPU 1."""
    path = write_nsys(standard_timeline(steps=2), tmp_path_factory.mktemp("job") / "job.sqlite")
    _second_process(path, shift_ns=500_000)
    return path


def _copy(base: Path, tmp: Path, name: str = "damaged.sqlite") -> Path:
    path = tmp / name
    shutil.copy(base, path)
    return path


def _execute(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


# ---- one process of an export: `report.sqlite#pid=N` ------------------------------------------


@pytest.mark.parametrize("pid", [4242, 4343])
def test_process_path_analyses(job: Path, pid: int, capsys: pytest.CaptureFixture[str]) -> None:
    """One process named on the command line is analysed (the progress code stats the file)."""
    code, out, err = run_cli(capsys, "analyze", f"{job}#pid={pid}", "--format", "json")
    assert code == 0, err
    assert "Traceback" not in err
    (device,) = json.loads(out)["devices"]
    assert device["trace"] == f"{job}#pid={pid}"
    assert device["device"] == (0 if pid == 4242 else 1)


def test_process_not_in_the_export(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "analyze", f"{job}#pid=999", "--format", "json")
    assert code == 2 and out == ""
    assert_one_error_line(err, job)
    assert "no GPU activity of process 999" in err
    assert "4242, 4343" in err  # the processes it does hold


@pytest.mark.parametrize(
    "pid",
    ["²", "٣", "abc", "", "-1", "42 ", "0x10", "9" * 30],
    ids=["superscript", "arabic-indic", "letters", "empty", "negative", "space", "hex", "huge"],
)
def test_not_a_process_id(job: Path, pid: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Only ASCII digits are a process id; `str.isdigit` alone takes `²`, which int() refuses."""
    path = f"{job}#pid={pid}"
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 2 and out == ""
    assert_one_error_line(err, job)
    assert "not a process id" in err


# ---- values of the wrong type ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "column", "value", "kind"),
    [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "'soon'", "TEXT"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "1e300", "REAL"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName", "x'00ff'", "BLOB"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid", "'me'", "TEXT"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", "'lots'", "TEXT"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "memKind", "x'01'", "BLOB"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId", "'cudaLaunchKernel'", "TEXT"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "x'0102'", "BLOB"),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType", "'stream'", "TEXT"),
        ("NVTX_EVENTS", "textId", "'forward'", "TEXT"),
        ("TARGET_INFO_GPU", "id", "'gpu0'", "TEXT"),
        ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "'yesterday'", "TEXT"),
    ],
    ids=lambda v: str(v),
)
def test_wrong_type_in_an_integer_column(
    base: Path,
    tmp_path: Path,
    table: str,
    column: str,
    value: str,
    kind: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _copy(base, tmp_path)
    _execute(
        path,
        f'UPDATE "{table}" SET "{column}" = {value} '
        f'WHERE rowid = (SELECT MIN(rowid) FROM "{table}")',
    )
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 2 and out == ""
    assert_one_error_line(err, path)
    assert f"table {table}, column {column} holds {kind} values" in err


def test_text_string_ids(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A StringIds table without an INTEGER PRIMARY KEY can hold text ids."""
    path = _copy(base, tmp_path)
    _execute(
        path,
        "ALTER TABLE StringIds RENAME TO old_strings",
        "CREATE TABLE StringIds (id, value)",
        "INSERT INTO StringIds SELECT id, value FROM old_strings",
        "INSERT INTO StringIds VALUES ('seven', 'a name')",
    )
    code, _, err = run_cli(capsys, "analyze", path)
    assert code == 2
    assert_one_error_line(err, path)
    assert "table StringIds, column id holds TEXT values" in err


def test_wrong_type_in_a_process_of_a_job(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Listing the processes reads globalPid too: a damaged one is named there as well."""
    path = _copy(job, tmp_path, "job.sqlite")
    _execute(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'gpu' WHERE rowid = 1")
    code, _, err = run_cli(capsys, "analyze", f"{path}#pid=4242")
    assert code == 2
    assert_one_error_line(err, path)
    assert "table CUPTI_ACTIVITY_KIND_KERNEL, column deviceId holds TEXT values" in err


@pytest.mark.parametrize("digit", ["²", "٣"])
def test_unicode_digits_in_the_environment(
    base: Path, tmp_path: Path, digit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A driver version or RANK of non-ASCII digits is not a number: ignored, not a crash."""
    path = _copy(base, tmp_path)
    _execute(
        path,
        "CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)",
        f"INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('CudaDriverVersion', '1204{digit}')",
        "CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)",
        "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:COMMAND', 'python')",
        f"INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'RANK={digit}')",
        "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'WORLD_SIZE=8')",
    )
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 0, err
    (device,) = json.loads(out)["devices"]
    assert device["rank"] is None


# ---- huge names ------------------------------------------------------------------------------


def test_huge_kernel_name(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 10 MB kernel name in StringIds: kept whole, classified by its head, in seconds."""
    path = _copy(base, tmp_path)
    conn = sqlite3.connect(path)
    (sid, name) = conn.execute(
        "SELECT id, value FROM StringIds WHERE value LIKE 'sm90_xmma_gemm%' LIMIT 1"
    ).fetchone()
    conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (name + "x" * _LONG, sid))
    conn.commit()
    conn.close()
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    elapsed = time.perf_counter() - start
    assert code == 0, err
    kernels = {k["name"]: k["category"] for k in json.loads(out)["devices"][0]["kernels"]}
    assert kernels[name + "x" * _LONG] == "gemm"  # whole in the report, matched on its head
    assert elapsed < _LONG_NAME_BOUND_S, f"{elapsed:.1f} s for one 10 MB kernel name"


def test_huge_kineto_kernel_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two 10 MB kernel names in a Kineto trace cost seconds at most, not minutes."""
    t = standard_timeline(steps=2)
    gemm, elementwise = t.launches[0].name, t.launches[1].name
    long = {gemm: gemm + "a" * _LONG, elementwise: elementwise + "b" * _LONG}
    t.launches = [dataclasses.replace(x, name=long.get(x.name, x.name)) for x in t.launches]
    path = write_kineto(t, tmp_path / "long.pt.trace.json")
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    elapsed = time.perf_counter() - start
    assert code == 0, err
    kernels = {k["name"]: k["category"] for k in json.loads(out)["devices"][0]["kernels"]}
    assert kernels[long[gemm]] == "gemm" and kernels[long[elementwise]] == "elementwise"
    assert elapsed < _LONG_NAME_BOUND_S, f"{elapsed:.1f} s for two 10 MB kernel names"


@pytest.mark.parametrize(
    ("fmt", "step_text", "extra"),
    [
        ("nsys", "ProfilerStep#{}", ()),
        ("kineto", "ProfilerStep#{}", ()),
        ("nsys", "train_step {}", ()),  # found by name
        ("kineto", "train_step {}", ("--step-range", "train_step")),
    ],
    ids=["nsys-profiler-step", "kineto-profiler-step", "nsys-named", "kineto-step-range"],
)
def test_step_number_of_5000_digits(
    tmp_path: Path,
    fmt: str,
    step_text: str,
    extra: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A step number longer than int() converts is not a step number: no crash."""
    t = standard_timeline(steps=3, step_text=step_text)
    text, start, end = t.steps[0]
    t.steps[0] = (text.replace("0", "9" * 5000), start, end)
    write = write_nsys if fmt == "nsys" else write_kineto
    path = write(t, tmp_path / ("run.sqlite" if fmt == "nsys" else "run.pt.trace.json"))
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", *extra)
    assert code == 0, err
    assert "Traceback" not in err
    steps = [s["name"] for s in json.loads(out)["devices"][0]["steps"]]
    assert steps and all(len(s) < 100 for s in steps)
