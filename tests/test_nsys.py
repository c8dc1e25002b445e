"""The Nsight Systems SQLite reader: real exports against their reference tables, one synthetic
timeline written both as Kineto and as nsys giving the same analysis, step ranges, bad input."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.errors import TraceFormatError
from badput.trace import find_traces, load_trace
from badput.trace.model import EventKind
from badput.trace.nsys import read_nsys
from synth import analyze_json, run_cli
from synth_timeline import SESSION_START_NS, standard_timeline, write_kineto, write_nsys
from test_cli_errors import assert_one_error_line

PIPIT = "nsys/pipit-cloverleaf-a100"
NSIGHTFUL = "nsys/nsightful-t4"


@pytest.fixture(scope="module")
def cloverleaf(shared_traces: Path) -> Path:
    return shared_traces / PIPIT / "perlmutter-cloverleaf-cuda.sqlite"


@pytest.fixture(scope="module")
def power_iteration(shared_traces: Path) -> Path:
    return shared_traces / NSIGHTFUL / "power_iteration__baseline.sqlite"


def _enter_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["Event Type"] == "Enter"]


# ---- real exports against their reference tables ----------------------------------------------


def test_cloverleaf_gpu_events_match_pipit(cloverleaf: Path) -> None:
    """Every kernel and memcpy equals pipit's golden row: start, end (ns), stream and bytes."""
    golden = sorted(
        (
            int(r["Timestamp (ns)"]),
            int(r["_matching_timestamp"]),  # the matching Leave: the end
            int(r["streamId"]),
            int(r["bytes"]) if r["bytes"] else -1,
            "kernel" if r["type"] == "kernel" else "memcpy",
        )
        for r in _enter_rows(cloverleaf.parent / "cloverleaf_gpu_trace.csv")
    )
    t = load_trace(str(cloverleaf))
    rows = np.flatnonzero(t.mask(EventKind.KERNEL, EventKind.MEMCPY))
    mine = sorted(
        zip(
            t.ts_ns[rows].tolist(),
            t.end_ns[rows].tolist(),
            t.stream[rows].tolist(),
            t.bytes[rows].tolist(),
            ["kernel" if k == EventKind.KERNEL else "memcpy" for k in t.kind[rows].tolist()],
            strict=True,
        )
    )
    assert len(golden) == 1591  # 1,312 kernels + 279 memcpys (MANIFEST.md)
    assert mine == golden
    assert sum(1 for g in golden if g[4] == "kernel") == 1312


def test_cloverleaf_api_calls_match_pipit(cloverleaf: Path) -> None:
    """Runtime and driver calls: start, end, pid, tid as pipit has them; names without the
    API version suffix nsys adds (`cudaLaunchKernel_v7000`)."""
    golden = sorted(
        (
            int(r["Timestamp (ns)"]),
            int(r["_matching_timestamp"]),
            int(r["Process"]),
            int(r["Thread"]),
            re.sub(r"_v\d{4,}$", "", r["Name"]),
        )
        for r in _enter_rows(cloverleaf.parent / "cloverleaf-cuda_api_trace.csv")
    )
    t = load_trace(str(cloverleaf))
    rows = np.flatnonzero(t.mask(EventKind.RUNTIME, EventKind.DRIVER))
    mine = sorted(
        zip(
            t.ts_ns[rows].tolist(),
            t.end_ns[rows].tolist(),
            t.pid[rows].tolist(),
            t.tid[rows].tolist(),
            [t.names[i] for i in t.name_id[rows].tolist()],
            strict=True,
        )
    )
    assert len(mine) == 3048
    assert mine == golden
    driver = t.rows_named(np.flatnonzero(t.kind == EventKind.DRIVER), lambda n: True)
    assert [t.name_of(int(r)) for r in driver] == ["cuModuleGetLoadingMode"]


def test_cloverleaf_mapping(cloverleaf: Path) -> None:
    t = load_trace(str(cloverleaf))
    memcpy = t.kind == EventKind.MEMCPY
    names = {t.names[i]: int((t.name_id[memcpy] == i).sum()) for i in np.unique(t.name_id[memcpy])}
    # copyKind 1 (HtoD) from srcKind 0 (pageable) to dstKind 2 (device), 254 of them; 25 back.
    assert names == {
        "Memcpy HtoD (Pageable -> Device)": 254,
        "Memcpy DtoH (Device -> Pageable)": 25,
    }
    sync = t.kind == EventKind.SYNC
    assert int(sync.sum()) == 1312
    assert {t.names[i] for i in np.unique(t.name_id[sync])} == {"Event Sync"}
    # Launch -> kernel linking works by correlation id, as for Kineto traces.
    kernels = np.flatnonzero(t.kind == EventKind.KERNEL)
    launches = np.flatnonzero(t.kind == EventKind.RUNTIME)
    launch_corr = set(t.correlation[launches].tolist())
    assert all(c in launch_corr for c in t.correlation[kernels].tolist())
    assert np.unique(t.pid[kernels]).tolist() == [1701896]  # PROCESSES: cuda-cloverleaf
    assert t.devices() == [0]
    assert t.gpu_names[0] == "NVIDIA A100-SXM4-80GB"
    assert t.base_time_ns == 1696392839587175550
    assert t.versions == {
        "cuda_driver": "12.0",
        "nsys": "2024.5.1.113",
        "nsys_export_schema": "3.13.2",
    }
    assert np.all(np.diff(t.ts_ns) >= 0)  # rows in time order


def test_power_iteration_kernels_match_chrome_trace(power_iteration: Path) -> None:
    """Kernel count and total kernel time equal nsightful's Chrome-trace conversion.

    The conversion writes microseconds with three decimals (whole nanoseconds), so read as
    decimals they convert to the exact nanoseconds: the comparison has no tolerance.
    """
    with gzip.open(power_iteration.parent / "power_iteration__baseline.json.gz") as f:
        events = json.load(f, parse_float=Decimal)
    chrome = [e for e in events if e.get("cat") == "cuda" and e.get("ph") == "X"]
    t = load_trace(str(power_iteration))
    kernel = t.kind == EventKind.KERNEL
    assert len(chrome) == int(kernel.sum()) == 3689
    assert sum(e["dur"] for e in chrome) == Decimal("1131742.684")
    assert int(t.dur_ns[kernel].sum()) == 1_131_742_684
    chrome_spans = sorted((int(e["ts"] * 1000), int(e["dur"] * 1000)) for e in chrome)
    assert chrome_spans == sorted(
        zip(t.ts_ns[kernel].tolist(), t.dur_ns[kernel].tolist(), strict=True)
    )
    nvtx = [e for e in events if e.get("cat") == "nvtx"]
    assert len(nvtx) == int((t.kind == EventKind.ANNOTATION).sum()) == 786


def test_power_iteration_mapping(power_iteration: Path) -> None:
    t = load_trace(str(power_iteration))
    count = {k.name: int((t.kind == k).sum()) for k in EventKind if (t.kind == k).any()}
    # 7,417 API calls: 1,695 cuLaunchKernel + 1 cuProfilerStart are driver calls (eventClass 1).
    assert count == {
        "KERNEL": 3689,
        "MEMCPY": 89,
        "RUNTIME": 5721,
        "DRIVER": 1696,
        "ANNOTATION": 786,
        "SYNC": 90,
        "OTHER": 1428,
    }
    runtime = {t.names[i] for i in np.unique(t.name_id[t.kind == EventKind.RUNTIME])}
    assert {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"} <= runtime
    assert "cudaStreamGetCaptureInfo_v2" in runtime  # a real suffix stays
    assert not any(re.search(r"_v\d{4,}$", n) for n in runtime)
    sync = {t.names[i] for i in np.unique(t.name_id[t.kind == EventKind.SYNC])}
    assert sync == {"Stream Wait Event", "Context Sync"}  # syncType 2 (89) and 4 (1)
    # NVTX text comes through StringIds (textId); the CCCL domain's ranges stay annotations.
    annotations = {t.names[i] for i in np.unique(t.name_id[t.kind == EventKind.ANNOTATION])}
    assert {"Setup", "Loop", "cub::DeviceReduce::Sum", "Compute & Residual 0"} <= annotations
    assert t.gpu_names == {0: "Tesla T4"}
    assert t.versions["cuda_driver"] == "12.4"
    assert t.base_time_ns == 1754324972242076786
    assert t.rank is None  # the export records no rank variable


def test_analyze_real_exports(
    capsys: pytest.CaptureFixture[str], cloverleaf: Path, power_iteration: Path
) -> None:
    """`badput analyze report.sqlite` just works, with the same JSON schema as for Kineto."""
    clover = analyze_json(capsys, cloverleaf)
    (dev,) = clover["devices"]
    assert dev["gpu"] == "NVIDIA A100-SXM4-80GB"
    assert dev["window_source"] == "gpu_activity"  # no NVTX: the span of all GPU activity
    # Every kernel lies in the window, so compute is their union: 294.40 ms of 342.41 ms.
    assert dev["goodput"] == pytest.approx(0.8598, abs=1e-4)
    assert {f["id"] for f in clover["findings"]} >= {"synchronization", "pageable-memcpy"}

    power = analyze_json(capsys, power_iteration)
    (dev,) = power["devices"]
    assert dev["window_source"] == "cpu_steps"
    assert power["traces"][0]["warnings"][0].startswith(
        "steps: 44 NVTX ranges matching 'step' (found by name; first 'Step 0 to 10')"
    )
    assert len(dev["steps"]) == 43  # the last range launched nothing and is left out
    assert dev["dropped_steps"] == ["ProfilerStep#430"]
    assert dev["kernel_total_us"] == pytest.approx(1_126_430, rel=1e-3)


# ---- one timeline, two formats ----------------------------------------------------------------


def _comparable(report: dict[str, Any], *, names: bool = True) -> dict[str, Any]:
    (dev,) = report["devices"]
    kernels = [
        (k["name"] if names else k["category"], k["category"], k["count"], k["total_us"])
        for k in dev["kernels"]
    ]
    return {
        "gpu": dev["gpu"],
        "goodput": dev["goodput"],
        "window_us": dev["window_us"],
        "window_source": dev["window_source"],
        "breakdown_us": dev["breakdown_us"],
        "idle_causes_us": dev["idle_causes_us"],
        "comm": dev["comm"],
        "steps": [
            (s["name"], s["dur_us"], s["breakdown_us"], s["idle_causes_us"]) for s in dev["steps"]
        ],
        "kernels": sorted(kernels),
        "findings": sorted(f["id"] for f in report["findings"]),
    }


@pytest.mark.parametrize("legacy", [False, True], ids=["schema-3.20", "older-schema"])
def test_same_timeline_same_analysis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, legacy: bool
) -> None:
    t = standard_timeline(steps=3)
    kineto = analyze_json(capsys, write_kineto(t, tmp_path / "run.pt.trace.json"))
    nsys = analyze_json(capsys, write_nsys(t, tmp_path / "run.sqlite", legacy=legacy))
    # The older layout has base kernel names only (`at::native::vectorized_elementwise_kernel`).
    assert _comparable(nsys, names=not legacy) == _comparable(kineto, names=not legacy)
    (dev,) = nsys["devices"]
    # Hand-worked: per 1 ms step, compute kernels run 300 + 60 us, the all-reduce 190 us, the
    # copy 50 us and the memset 5 us; the window is the three steps' hull, 0 to 2,950 us.
    assert dev["window_us"] == 2950
    assert dev["goodput"] == pytest.approx(1080 / 2950, rel=1e-12)
    assert dev["breakdown_us"] == {
        "compute": 1080,
        "communication": 570,
        "memory": 165,
        "idle": 1135,
    }
    assert [s[0] for s in _comparable(nsys)["steps"]] == [f"ProfilerStep#{k}" for k in range(3)]
    assert "pageable-memcpy" in _comparable(nsys)["findings"]


def test_older_schema_fields(tmp_path: Path) -> None:
    """An export without enum tables, eventClass, textId or mangled names reads the same."""
    t = standard_timeline(steps=2)
    new = load_trace(str(write_nsys(t, tmp_path / "new.sqlite")))
    old = load_trace(str(write_nsys(t, tmp_path / "old.sqlite", legacy=True)))
    for trace in (new, old):
        assert trace.gpu_names == {0: t.gpu_name}
        names = {trace.names[i] for i in np.unique(trace.name_id[trace.kind == EventKind.MEMCPY])}
        assert names == {"Memcpy HtoD (Pageable -> Device)"}
        sync = {trace.names[i] for i in np.unique(trace.name_id[trace.kind == EventKind.SYNC])}
        assert sync == {"Context Sync"}
        assert int((trace.kind == EventKind.ANNOTATION).sum()) == 2 + 2 * 2  # marks skipped
        assert int((trace.kind == EventKind.RUNTIME).sum()) == 2 * 6
    assert new.base_time_ns == SESSION_START_NS and old.base_time_ns is None
    assert new.versions["nsys_export_schema"] == "3.20.2" and old.versions == {}
    assert np.array_equal(new.ts_ns[new.kind != EventKind.OTHER], old.ts_ns)


def _second_process(path: Path, shift_ns: int, pid: int = 4343, device: int = 1) -> None:
    """Append every row of process 4242 again as process `pid` on `device`, `shift_ns` later."""
    conn = sqlite3.connect(path)
    shift = (pid - 4242) << 24
    tables = {
        "CUPTI_ACTIVITY_KIND_KERNEL": "globalPid",
        "CUPTI_ACTIVITY_KIND_MEMCPY": "globalPid",
        "CUPTI_ACTIVITY_KIND_MEMSET": "globalPid",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "globalPid",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "globalTid",
        "NVTX_EVENTS": "globalTid",
        "OSRT_API": "globalTid",
    }
    for table, pid_col in tables.items():
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        select = ", ".join(
            f"{c} + {shift}" if c == pid_col else
            f"{c} + {shift_ns}" if c in ("start", "end") else
            str(device) if c == "deviceId" else c
            for c in cols
        )  # fmt: skip
        conn.execute(f"INSERT INTO {table} SELECT {select} FROM {table}")
    conn.commit()
    conn.close()


def test_one_rank_per_gpu_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`nsys profile torchrun ...` puts every rank in one export: each process is a rank.

    The second process runs the same steps 0.5 ms later on GPU 1. Read whole, its steps and
    host activity would mix with the first's; split, each rank's analysis equals that of a
    single-process export of the same timeline.
    """
    single = write_nsys(standard_timeline(), tmp_path / "single.sqlite")
    expected = _comparable(analyze_json(capsys, single))
    path = write_nsys(standard_timeline(), tmp_path / "job.sqlite")
    _second_process(path, shift_ns=500_000)
    assert find_traces(str(path)) == [f"{path}#pid=4242", f"{path}#pid=4343"]
    assert find_traces(str(tmp_path)) == [
        f"{path}#pid=4242",
        f"{path}#pid=4343",
        str(single),
    ]
    doc = analyze_json(capsys, path)
    assert [(d["trace"], d["rank"], d["world_size"], d["device"]) for d in doc["devices"]] == [
        (f"{path}#pid=4242", 0, 2, 0),
        (f"{path}#pid=4343", 1, 2, 1),
    ]
    for dev in doc["devices"]:  # findings are compared per GPU below, not job-wide
        got = _comparable({**doc, "devices": [dev]})
        skip = ("findings", "gpu")  # the copied rows have no TARGET_INFO_GPU row for GPU 1
        assert {k: v for k, v in got.items() if k not in skip} == {
            k: v for k, v in expected.items() if k not in skip
        }
        assert sorted(f["id"] for f in dev["findings"]) == expected["findings"]
    assert [r["rank"] for r in doc["ranks"]["per_rank"]] == [0, 1]
    warnings = [w for t in doc["traces"] for w in t["warnings"]]
    assert any("analysed as rank 1" in w for w in warnings)
    # One process alone, named by its path, reads only its own rows, selected in SQL.
    from badput.trace import nsys

    with nsys._connect(str(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        read = {}
        for pid in (None, 4343):
            reader = nsys._Reader(str(path), conn, tables, pid)
            for key in ("kernel", "memcpy", "memset", "sync"):
                reader.gpu_table(key)
            reader.runtime_table("runtime")
            reader.nvtx_table()
            reader.osrt_table()
            read[pid] = np.concatenate([part["pid"] for part in reader.parts])
    assert set(read[4343].tolist()) == {4343} and 2 * len(read[4343]) == len(read[None])
    t = load_trace(f"{path}#pid=4343")
    assert set(t.pid.tolist()) == {4343} and (t.rank, t.world_size) == (1, 2)
    assert t.devices() == [1]
    with pytest.raises(TraceFormatError, match="no GPU activity of process 999"):
        load_trace(f"{path}#pid=999")


def test_processes_with_the_same_correlation_ids(tmp_path: Path) -> None:
    """Two processes in one export reuse correlation ids; each launch links to its own work."""
    path = write_nsys(standard_timeline(steps=1), tmp_path / "two.sqlite")
    conn = sqlite3.connect(path)
    shift = (4343 - 4242) << 24  # the same rows again as pid 4343 on GPU 1, 5 ms later
    for table, pid_col in (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
                           ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid")):  # fmt: skip
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        select = ", ".join(
            f"{c} + {shift}" if c == pid_col else
            "start + 5000000" if c == "start" else "end + 5000000" if c == "end" else
            "1" if c == "deviceId" else c
            for c in cols
        )  # fmt: skip
        conn.execute(f"INSERT INTO {table} SELECT {select} FROM {table}")
    conn.commit()
    conn.close()
    t = load_trace(str(path))
    kernels = np.flatnonzero(t.kind == EventKind.KERNEL)
    launches = np.flatnonzero(t.kind == EventKind.RUNTIME)
    by_corr = {int(t.correlation[r]): int(t.pid[r]) for r in launches}
    assert len(by_corr) == launches.shape[0]  # no two processes share an id any more
    assert sorted(set(t.pid[kernels].tolist())) == [4242, 4343]
    assert all(by_corr[int(t.correlation[k])] == int(t.pid[k]) for k in kernels)
    assert t.devices() == [0, 1]


def test_reading_leaves_the_export_untouched(tmp_path: Path) -> None:
    path = write_nsys(standard_timeline(steps=1), tmp_path / "ro.sqlite")
    before = path.read_bytes()
    path.chmod(0o444)
    read_nsys(str(path))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.sqlite"]  # no journal left


# ---- step ranges -----------------------------------------------------------------------------


def test_step_ranges_found_by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    t = standard_timeline(steps=3, step_text="train_step {}")
    report = analyze_json(capsys, write_nsys(t, tmp_path / "run.sqlite"))
    (dev,) = report["devices"]
    assert [s["name"] for s in dev["steps"]] == [
        "ProfilerStep#0",
        "ProfilerStep#1",
        "ProfilerStep#2",
    ]
    assert dev["window_source"] == "cpu_steps"
    assert report["traces"][0]["warnings"] == [
        "steps: 3 NVTX ranges matching 'train_step' (found by name; first 'train_step 0') "
        "delimit the steps, analysed as ProfilerStep#0 to #2"
    ]
    reference = analyze_json(capsys, write_kineto(standard_timeline(steps=3), tmp_path / "k.json"))
    assert _comparable(report) == _comparable(reference)


def test_step_range_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    t = standard_timeline(steps=3, step_text="fit iteration")  # no number in the text
    path = write_nsys(t, tmp_path / "run.sqlite")
    plain = analyze_json(capsys, path)
    assert plain["devices"][0]["window_source"] == "gpu_activity"
    assert plain["devices"][0]["steps"] == []
    chosen = analyze_json(capsys, path, "--step-range", "fit iteration")
    (dev,) = chosen["devices"]
    assert [s["name"] for s in dev["steps"]] == [
        "ProfilerStep#0",
        "ProfilerStep#1",
        "ProfilerStep#2",
    ]
    assert [s["dur_us"] for s in dev["steps"]] == [950, 950, 950]
    assert (
        "'fit iteration' (--step-range; first 'fit iteration')"
        in chosen["traces"][0]["warnings"][0]
    )
    only = analyze_json(capsys, path, "--step-range", "fit iteration", "--window", "steps:1-1")
    assert [s["name"] for s in only["devices"][0]["steps"]] == ["ProfilerStep#1"]
    none = analyze_json(capsys, path, "--step-range", "epoch")
    assert none["traces"][0]["warnings"][0].startswith("--step-range 'epoch': no NVTX ranges")
    assert none["devices"][0]["window_source"] == "gpu_activity"


def test_step_range_on_a_kineto_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Kineto `record_function` ranges can delimit steps too; ProfilerStep#N then do not."""
    path = write_kineto(standard_timeline(steps=3), tmp_path / "run.pt.trace.json")
    report = analyze_json(capsys, path, "--step-range", "forward")
    (dev,) = report["devices"]
    # forward is 16-400 us into each step; the step stretches to the GPU work it launched (the
    # elementwise kernel ends at 400), and the last one keeps only what it launched.
    assert [s["name"] for s in dev["steps"]] == [
        "ProfilerStep#0",
        "ProfilerStep#1",
        "ProfilerStep#2",
    ]
    assert [s["dur_us"] for s in dev["steps"]] == [384, 384, 384]
    assert "3 annotations matching 'forward' (--step-range" in report["traces"][0]["warnings"][0]
    assert analyze_json(capsys, path)["traces"][0]["warnings"] == []  # unchanged without it


# ---- files and bad input ---------------------------------------------------------------------


def test_find_traces_lists_exports(tmp_path: Path) -> None:
    write_nsys(standard_timeline(steps=1), tmp_path / "b.sqlite")
    write_kineto(standard_timeline(steps=1), tmp_path / "a.pt.trace.json")
    (tmp_path / "notes.txt").write_text("x")
    assert [Path(p).name for p in find_traces(str(tmp_path))] == ["a.pt.trace.json", "b.sqlite"]


def _not_sqlite(tmp: Path) -> Path:
    path = tmp / "report.sqlite"
    path.write_text("not a database\n")
    return path


def _database(path: Path, *ddl: str) -> Path:
    """An SQLite file holding the tables `ddl` creates, and nothing else."""
    conn = sqlite3.connect(path)
    for statement in ddl:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def _sqlite_not_nsys(tmp: Path) -> Path:
    return _database(tmp / "inventory.sqlite", "CREATE TABLE items (id INTEGER, name TEXT)")


def _nsys_without_cuda(tmp: Path) -> Path:
    return _database(
        tmp / "cpu-only.sqlite",
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)",
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER)",
        "CREATE TABLE OSRT_API (start INTEGER, end INTEGER, nameId INTEGER)",
    )


def _unknown_schema(tmp: Path) -> Path:
    return _database(
        tmp / "odd.sqlite",
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (begin INTEGER, finish INTEGER)",
    )


def _corrupt(tmp: Path) -> Path:
    data = write_nsys(standard_timeline(steps=1), tmp / "src.sqlite").read_bytes()
    path = tmp / "corrupt.sqlite"
    path.write_bytes(data[:100] + b"\xff" * (len(data) - 100))
    return path


def _nsys_rep(tmp: Path) -> Path:
    path = tmp / "report1.nsys-rep"
    path.write_bytes(b"\x00\x01QDREP binary")
    return path


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_not_sqlite, "not an SQLite database"),
        (_sqlite_not_nsys, "not an Nsight Systems export"),
        (_nsys_without_cuda, "without CUDA GPU activity"),
        (_unknown_schema, "unknown Nsight Systems export schema"),
        (_corrupt, "SQLite"),
        (_nsys_rep, "nsys export --type sqlite --output report.sqlite report.nsys-rep"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:],
)
def test_bad_input_exits_2(
    make: Any, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 2, err
    assert out == ""
    assert_one_error_line(err, path)
    assert says in err
    with pytest.raises(TraceFormatError):
        load_trace(str(path))


def test_directory_of_reports_says_how_to_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _nsys_rep(tmp_path)
    code, _, err = run_cli(capsys, "analyze", tmp_path)
    assert code == 2
    assert_one_error_line(err, tmp_path)
    assert "nsys export --type sqlite" in err


def test_copy_of_real_export_in_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cloverleaf: Path
) -> None:
    shutil.copy(cloverleaf, tmp_path / "rank0.sqlite")
    report = analyze_json(capsys, tmp_path)
    assert [t["path"] for t in report["traces"]] == [str(tmp_path / "rank0.sqlite")]
    assert report["traces"][0]["events"] == 7782


def test_rank_from_the_launch_environment(tmp_path: Path) -> None:
    """RANK/WORLD_SIZE of the one profiled process give the rank; nothing else is read."""
    path = write_nsys(standard_timeline(steps=1), tmp_path / "rank3.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
    env = ["RANK=3", 'WORLD_SIZE="8"', "HF_TOKEN=hf_secret_value", "LOCAL_RANK=3"]
    conn.executemany(
        "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
        [("PROCESS_0:COMMAND", "python")] + [("PROCESS_0:ENVIRONMENT_VARIABLE", v) for v in env],
    )
    conn.commit()
    conn.close()
    t = load_trace(str(path))
    assert (t.rank, t.world_size) == (3, 8)
    shown = json.dumps([t.names, t.warnings, t.versions, t.gpu_names])
    assert "hf_secret_value" not in shown
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_1:COMMAND', 'python')")
    conn.commit()
    conn.close()
    assert load_trace(str(path)).rank is None  # two processes: whose rank would it be?
