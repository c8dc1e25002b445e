"""The sampler, its files, `badput telemetry record`, and telemetry aligned with a trace window."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from badput.analysis import WindowSource
from badput.analysis.telemetry import EPOCH_MIN_NS, align_telemetry, metric_unit
from badput.cli.app import main
from badput.report.telemetry_report import (
    alignment_document,
    render_alignment,
    render_sampler_summary,
)
from badput.telemetry import (
    FakeNvml,
    Host,
    Sampler,
    TelemetryError,
    TelemetryWarning,
    read_telemetry,
)
from badput.telemetry.sampler import GPU_FIELDS, MAX_CONSECUTIVE_ERRORS
from badput.telemetry.sources import GpuSample

RECORDED = {
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "bus_id": "00000000:06:00.0",
            "samples": [
                {
                    "utilization_pct": 100,
                    "sm_clock_mhz": 1980,
                    "memory_used_bytes": 70 << 30,
                    "power_mw": 650_000,
                    "temperature_c": 61,
                    "pcie_tx_bytes_per_s": 1 << 20,
                    "pcie_rx_bytes_per_s": 2 << 20,
                },
                {
                    "utilization_pct": 50,
                    "sm_clock_mhz": 1755,
                    "memory_used_bytes": 70 << 30,
                    "power_mw": 400_000,
                    "temperature_c": 63,
                    "pcie_tx_bytes_per_s": 0,
                    "pcie_rx_bytes_per_s": 0,
                },
            ],
        }
    ],
}
GPU_COLUMNS = [f"gpu0_{name}" for name, _ in GPU_FIELDS]
HOST_COLUMNS = [
    "rss_bytes",
    "disk_read_bytes_per_s",
    "disk_write_bytes_per_s",
    "net_rx_bytes_per_s",
    "net_tx_bytes_per_s",
]


def _cores() -> int:
    return len(Host().cpu_times())


def test_sampler_rate_columns_and_file(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    with Sampler(out, hz=20, nvml=FakeNvml(RECORDED)) as sampler:
        time.sleep(1.0)
    s = sampler.summary
    cpu_cols = [f"cpu{j}_util_pct" for j in range(_cores())]
    assert list(sampler.columns) == ["ts_ns", *GPU_COLUMNS, *cpu_cols, *HOST_COLUMNS]
    n, missed = s["samples"], s["missed_slots"]
    # One sample at the start, then one per 50 ms slot; a slot the thread fell behind on (a
    # loaded machine) is skipped and counted as missed. Slot k is taken at or after k * 50 ms
    # of the sampler's own wall time, so samples and missed slots never outrun it; and they
    # reach the last sample's time stamp but for up to two slots (that sample's own lateness,
    # the skipped slots counted only after a sample). 1 s of sleep: 21 on an idle machine.
    ts = sampler.columns["ts_ns"]
    span_s = (ts[-1] - ts[0]) / 1e9  # type: ignore[operator]
    assert s["wall_s"] >= 1.0
    assert n + missed - 1 <= s["wall_s"] * 20 + 1e-3
    assert span_s * 20 - 2 <= n + missed - 1
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(ts)]  # type: ignore[operator]
    assert statistics.median(gaps) == pytest.approx(50.0, rel=0.2)
    assert s["hz_achieved"] == pytest.approx((n - 1) / span_s, rel=1e-3)
    assert sampler.columns["gpu0_util_pct"][:4] == [100, 50, 100, 50]
    assert sampler.columns["gpu0_power_mw"][:2] == [650_000, 400_000]
    assert all(v is not None and v > 0 for v in sampler.columns["rss_bytes"])
    assert sampler.columns["disk_read_bytes_per_s"][0] is None  # no rate before a 2nd sample
    assert sampler.columns["net_rx_bytes_per_s"][1] is not None
    # the sampler's own cost
    assert 0 < s["sampler_cpu_s"] <= s["wall_s"]
    assert s["cpu_share_of_one_core"] == pytest.approx(s["sampler_cpu_s"] / s["wall_s"], rel=1e-3)
    assert s["errors"] == {} and s["lost"] == []
    # the file: header, one line per sample, the summary
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["schema"] == "badput.telemetry/1" and header["hz"] == 20.0
    assert header["columns"] == list(sampler.columns)
    assert len(lines) == n + 2
    assert json.loads(lines[-1])["summary"] == s
    back = read_telemetry(out)
    assert back.columns == sampler.columns and back.summary == s


class FailingNvml(FakeNvml):
    def sample(self, index: int) -> GpuSample:
        raise RuntimeError("GPU fell off the bus")


def test_sampler_fails_open(tmp_path: Path) -> None:
    with (
        pytest.warns(TelemetryWarning, match="GPU fell off the bus"),
        Sampler(tmp_path / "t.jsonl", hz=100, nvml=FailingNvml(RECORDED)) as sampler,
    ):
        # Until the GPU source failed often enough to be switched off (30 ms at 100 Hz on an
        # idle machine; a loaded one may run the sampler's thread seldom), 10 s at most.
        deadline = time.monotonic() + 10.0
        while len(sampler.columns["ts_ns"]) <= MAX_CONSECUTIVE_ERRORS + 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    s = sampler.summary
    assert s["errors"]["gpu0"] == MAX_CONSECUTIVE_ERRORS  # then switched off
    assert any("gpu0: switched off" in lost for lost in s["lost"])
    assert all(v is None for v in sampler.columns["gpu0_util_pct"])
    assert all(v is not None for v in sampler.columns["rss_bytes"])  # the rest goes on
    assert s["samples"] > MAX_CONSECUTIVE_ERRORS


def test_sampler_unwritable_file_fails_open(tmp_path: Path) -> None:
    with (
        pytest.warns(TelemetryWarning, match="file"),
        Sampler(tmp_path / "no" / "such" / "dir.jsonl", hz=50, nvml=False) as sampler,
    ):
        time.sleep(0.1)
    assert sampler.summary["samples"] >= 1
    assert any(lost.startswith("file:") for lost in sampler.summary["lost"])


def test_sampler_in_memory_without_sources() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Sampler(hz=50, nvml=False, host=False) as sampler:
            time.sleep(0.1)
    assert list(sampler.columns) == ["ts_ns"]
    assert sampler.summary["sources"] == []
    assert sampler.stop() is sampler.summary  # idempotent


def test_sampler_bad_rate_and_parquet() -> None:
    with pytest.raises(TelemetryError, match="positive"):
        Sampler(hz=0)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(TelemetryError, match=r"badput\[parquet\]"):
            Sampler("t.parquet")


def test_parquet_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "t.parquet"
    with Sampler(out, hz=50, nvml=FakeNvml(RECORDED)) as sampler:
        time.sleep(0.2)
    back = read_telemetry(out)
    assert back.columns == sampler.columns and back.summary == sampler.summary


def test_read_telemetry_errors(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="not a badput telemetry file"):
        bad = tmp_path / "x.jsonl"
        bad.write_text('{"a": 1}\n')
        read_telemetry(bad)
    with pytest.raises(TelemetryError, match="No such file"):
        read_telemetry(tmp_path / "missing.jsonl")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(
        json.dumps({"schema": "badput.telemetry/1", "columns": ["ts_ns", "x_pct"]})
        + '\n{"ts_ns": 1, "x_pct": 5}\n{"ts_ns": 2, "x_p'
    )
    assert read_telemetry(cut).columns == {"ts_ns": [1], "x_pct": [5]}


def test_host_counters_on_fake_tree(tmp_path: Path) -> None:
    files = {
        "proc/stat": "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\n"
        "cpu1 5 0 5 30 10 0 0 0 0 0\nintr 1\n",
        "proc/self/status": "Name: x\nVmRSS:\t  2048 kB\n",
        "proc/diskstats": "   8  0 sda 10 0 100 0 5 0 40 0 0 0 0\n"
        "   8  1 sda1 10 0 100 0 5 0 40 0 0 0 0\n   7  0 loop0 1 0 8 0 0 0 0 0 0 0 0\n",
        "sys/block/sda/device/model": "disk\n",
        "sys/block/loop0/ro": "0\n",
        "proc/net/dev": "h1\nh2\n    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n"
        "  eth0: 300 1 0 0 0 0 0 0 700 1 0 0 0 0 0 0\n",
    }
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    host = Host(str(tmp_path))
    assert host.cpu_times() == [(10, 50), (10, 50)]
    assert host.rss_bytes() == 2048 * 1024
    assert host.disk_bytes() == (100 * 512, 40 * 512)  # sda only: no partition, no loop
    assert host.net_bytes() == (300, 700)


# ---- telemetry record -- CMD ------------------------------------------------------------


def test_telemetry_record_returns_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rec.jsonl"
    script = "import sys, time; x = bytearray(50 << 20); time.sleep(0.6); sys.exit(3)"
    code = main(
        ["telemetry", "record", "--hz", "20", "--out", str(out), "--", sys.executable, "-c", script]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert "badput telemetry:" in err and "of one core" in err
    data = read_telemetry(out)
    assert data.summary["samples"] >= 5
    rss = [v for v in data.columns["rss_bytes"] if v is not None]
    assert max(rss) >= 50 << 20  # the child's RSS, not badput's
    assert data.header["pid"] != os.getpid()


def test_telemetry_record_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["telemetry", "record", "--", "/no/such/binary"]) == 2
    assert "cannot run" in capsys.readouterr().err
    assert main(["telemetry", "record", "--hz", "0", "--", "true"]) == 2
    assert "--hz" in capsys.readouterr().err


# ---- alignment with a trace window --------------------------------------------------------

T0 = 1_764_500_000 * 10**9  # an epoch time in ns (2025)


def _columns() -> dict[str, list[Any]]:
    # 20 samples, one every 100 ms from T0; metric values known per sample
    return {
        "ts_ns": [T0 + i * 100_000_000 for i in range(20)],
        "gpu0_util_pct": [float(i) for i in range(20)],
        "gpu0_power_mw": [1000 * i for i in range(20)],
        "cpu0_util_pct": [10.0] * 20,
        "cpu1_util_pct": [30.0] * 19 + [None],
        "disk_read_bytes_per_s": [None] * 20,
    }


def test_align_epoch_window() -> None:
    # window [T0 + 0.5 s, T0 + 1.0 s] holds samples 5..10
    a = align_telemetry(_columns(), T0 + 500_000_000, T0 + 1_000_000_000)
    assert a.clock == "epoch" and a.samples_in_window == 6 and a.samples_total == 20
    m = {x.name: x for x in a.metrics}
    assert (m["gpu0_util_pct"].mean, m["gpu0_util_pct"].min, m["gpu0_util_pct"].max) == (
        7.5,
        5.0,
        10.0,
    )
    assert m["gpu0_power_mw"].unit == "mW"
    assert m["cpu_util_pct"].mean == 20.0  # mean of the two cores
    assert "disk_read_bytes_per_s" not in m  # no value in the window
    assert a.warnings == []


def test_align_relative_window_with_base_time() -> None:
    base = T0 - 7 * 10**9
    a = align_telemetry(
        _columns(), 7 * 10**9 + 500_000_000, 7 * 10**9 + 1_000_000_000, base_time_ns=base
    )
    assert a.clock == "base_time" and a.samples_in_window == 6
    assert a.window_start_ns == T0 + 500_000_000


def test_align_impossible_says_why() -> None:
    a = align_telemetry(_columns(), 500_000_000, 1_000_000_000)
    assert a.clock == "unaligned" and a.metrics == []
    assert "baseTimeNanoseconds" in a.warnings[0]
    b = align_telemetry(_columns(), T0 + 10**12, T0 + 2 * 10**12)
    assert (
        b.samples_in_window == 0 and "no telemetry sample inside the trace window" in b.warnings[0]
    )
    c = align_telemetry(_columns(), T0 + 100_000_000, T0 + 150_000_000)
    assert c.samples_in_window == 1 and "only 1 telemetry sample" in c.warnings[0]
    assert T0 > EPOCH_MIN_NS > 10**17


def test_units() -> None:
    assert [
        metric_unit(c)
        for c in ("gpu0_pcie_tx_bytes_per_s", "rss_bytes", "gpu0_temp_c", "gpu0_sm_clock_mhz")
    ] == [
        "bytes/s",
        "bytes",
        "C",
        "MHz",
    ]


def test_reports() -> None:
    a = align_telemetry(_columns(), T0 + 500_000_000, T0 + 1_000_000_000)
    console = Console(record=True, width=120)
    render_alignment(a, console)
    text = console.export_text()
    assert "6 of 20 samples inside the window (clock: epoch)" in text
    assert "cpu_util_pct (mean of cores)" in text and "cpu0_util_pct" not in text
    assert "7.5 %" in text and "7.5 W" in text  # power: mean 7,500 mW
    doc = alignment_document(a)
    assert json.loads(json.dumps(doc))["samples_in_window"] == 6
    console = Console(record=True, width=200)
    render_sampler_summary(
        {
            "samples": 600,
            "hz_requested": 10.0,
            "hz_achieved": 9.998,
            "missed_slots": 0,
            "wall_s": 60.0,
            "sampler_cpu_s": 0.3,
            "cpu_share_of_one_core": 0.005,
            "errors": {"gpu0": 2},
            "lost": [],
        },
        console,
    )
    text = console.export_text()
    assert "600 samples at 9.998 Hz" in text and "0.50 % of one core" in text
    assert "gpu0: 2 samples failed" in text


def test_align_devices_and_report() -> None:
    from badput.analysis.results import Breakdown, CommSummary, DeviceAnalysis, IdleCauses
    from badput.analysis.telemetry import align_devices
    from badput.report.telemetry_report import render_device_telemetry, telemetry_document

    def device(start_ns: int, length_ns: int, rank: int) -> DeviceAnalysis:
        return DeviceAnalysis(
            trace="w.pt.trace.json",
            rank=rank,
            world_size=2,
            device=rank,
            gpu=None,
            window_start_ns=start_ns,
            window_ns=length_ns,
            window_source=WindowSource.GPU_ACTIVITY,
            goodput=0.5,
            breakdown=Breakdown(0, 0, 0, 0),
            idle_causes=IdleCauses(0, 0, 0, 0),
            comm=CommSummary(0, 0),
        )

    devices = [device(T0 + 500_000_000, 500_000_000, 0), device(T0, 150_000_000, 1)]
    alignments = align_devices(_columns(), devices)
    assert [a.samples_in_window for a in alignments] == [6, 2]
    doc = telemetry_document(devices, alignments)
    assert [(d["rank"], d["samples_in_window"]) for d in doc] == [(0, 6), (1, 2)]
    console = Console(record=True, width=120)
    render_device_telemetry(devices, alignments, console)
    text = console.export_text()
    assert "w.pt.trace.json rank 1 GPU 1" in text and "only 2 telemetry sample(s)" in text


def _telemetry_file(path: Path, t0_ns: int) -> Path:
    """20 samples every 100 ms from t0 (epoch ns): gpu0_util_pct = sample index."""
    cols = ["ts_ns", "gpu0_util_pct"]
    header = {"schema": "badput.telemetry/1", "hz": 10.0, "clock": "epoch ns", "columns": cols}
    rows = [{"ts_ns": t0_ns + i * 100_000_000, "gpu0_util_pct": float(i)} for i in range(20)]
    path.write_text("\n".join(json.dumps(x) for x in [header, *rows]) + "\n")
    return path


@pytest.mark.parametrize("relative", [False, True])
def test_analyze_shows_telemetry_in_each_gpu_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], relative: bool
) -> None:
    """The trace's window [0.5 s, 1.0 s] holds samples 5..10, on either clock convention.

    Older traces write epoch times; newer ones write times relative to their
    `baseTimeNanoseconds`, which the reader keeps (`Trace.base_time_ns`).
    """
    from synth import BASE_NS, TraceBuilder, run_cli

    base = 3 * 10**9 if relative else BASE_NS  # trace-clock origin of the builder's times
    epoch_of_zero = BASE_NS  # the epoch time of trace time `base`
    b = TraceBuilder(base_ns=base, unit_ns=1_000_000)  # builder times in ms
    b.device_properties([0])
    if relative:
        b.set_top("baseTimeNanoseconds", epoch_of_zero - base)
    b.profiler_step(1, 500, 1000, gpu=True)
    b.kernel("gemm_kernel", 500, 1000)
    trace = b.write(tmp_path / "t.pt.trace.json")
    samples = _telemetry_file(tmp_path / "s.jsonl", epoch_of_zero)

    code, out, err = run_cli(capsys, "analyze", trace, "--telemetry", samples, "-f", "json")
    assert code == 0, err
    (entry,) = json.loads(out)["telemetry"]
    assert entry["samples_in_window"] == 6
    gpu = {m["name"]: m for m in entry["metrics"]}["gpu0_util_pct"]
    assert (gpu["mean"], gpu["min"], gpu["max"]) == (7.5, 5.0, 10.0)
    assert entry["clock"] == ("base_time" if relative else "epoch")

    code, out, err = run_cli(capsys, "analyze", trace, "--telemetry", samples)
    assert code == 0, err
    assert "telemetry in each GPU's window" in out and "gpu0_util_pct" in out


def test_analyze_telemetry_bad_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from synth import TraceBuilder, run_cli

    b = TraceBuilder()
    b.kernel("k", 0, 10)
    trace = b.write(tmp_path / "t.pt.trace.json")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    code, _, err = run_cli(capsys, "analyze", trace, "--telemetry", bad)
    assert code == 2 and "bad.jsonl" in err and "Traceback" not in err
