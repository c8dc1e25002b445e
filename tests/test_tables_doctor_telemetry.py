"""`badput doctor` and the telemetry tables fit the terminal and never cut a number.

At 80 and 160 columns: every line fits the width, no number stands beside an ellipsis, and
every number of every cell (the evidence, the fix, a metric's mean, min and max) is printed
whole on one line.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from badput.analysis import WindowSource
from badput.analysis.results import Breakdown, CommSummary, DeviceAnalysis, IdleCauses
from badput.analysis.telemetry import align_devices, align_telemetry
from badput.cli.app import main
from badput.report.doctor_report import render_checks
from badput.report.telemetry_report import (
    _fmt,
    render_alignment,
    render_device_telemetry,
    render_sampler_summary,
)
from badput.report.units import fits_numbers
from badput.telemetry.doctor import run_doctor
from badput.telemetry.gpu_checks import Check, Status
from badput.telemetry.sampler import GPU_FIELDS
from badput.telemetry.sources import FakeNvml, GpuInfo, GpuProcess, record_nvml

WIDTHS = (80, 160)
#: A number as printed: digits, with thousands separators and a decimal point inside.
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")

SICK = GpuInfo(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    bus_id="00000000:06:00.0",
    persistence_mode=False,
    sm_clock_mhz=1110,
    sm_clock_max_mhz=1980,
    mem_clock_mhz=1593,
    mem_clock_max_mhz=2619,
    throttle_reasons=0xFF,  # every clock event reason: the longest evidence and fix
    power_mw=650_000,
    power_limit_mw=350_000,
    power_default_limit_mw=700_000,
    temperature_c=91,
    temperature_slowdown_c=87,
    ecc_uncorrected=2,
    ecc_corrected=1_234_567,
    pcie_gen=3,
    pcie_gen_max=5,
    pcie_width=8,
    pcie_width_max=16,
    nvlink_up=(True,) * 10 + (False,) * 8,
    mig_mode=False,
    mig_pending=True,
    utilization_pct=100,
    memory_used_bytes=70 << 30,
    memory_total_bytes=80 << 30,
    processes=(GpuProcess(os.getpid() + 1, 70 << 30),),
)


def _fake_nvml() -> FakeNvml:
    gpus = [SICK, replace(SICK, index=1, bus_id="00000000:07:00.0")]
    return FakeNvml(
        {
            "driver_version": "550.54.15",
            "cuda_driver_version": 12040,
            "gpus": [asdict(g) for g in gpus],
        }
    )


#: Checks written to be hard to fit: long paths and words, numbers beside units, no fix.
MADE_UP = [
    Check(
        "host.cgroup_memory",
        Status.WARN,
        "memory limit 12,884,901,888 bytes (12.0 GiB) in "
        "/sys/fs/cgroup/memory/kubepods/burstable/pod0a1b2c3d4e5f60718293a4b5c6d7e8f9/"
        "memory.limit_in_bytes, 11.5 GiB in use (95.8 %)",
        "raise the pod's memory limit above 16 GiB or lower the batch size from 512 to 256",
    ),
    Check("storage.read", Status.OK, "read 1,234.5 MB/s over 3 files (4,096 MiB) in 3.32 s"),
    Check(
        "software.env",
        Status.FAIL,
        "CUDA_LAUNCH_BLOCKING serializes every kernel launch "
        "(CUDA_LAUNCH_BLOCKING=1, NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=eth0)",
        "unset CUDA_LAUNCH_BLOCKING (a debugging switch)",
    ),
]


def _lines_fit(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines
    for line in lines:
        assert cell_len(line) <= width, f"{cell_len(line)} > {width}: {line!r}"
        assert fits_numbers(line), f"a number beside an ellipsis: {line!r}"


def _numbers_whole(cells: list[str], text: str) -> None:
    """Every number of `cells` is printed whole: none is missing or split over two lines."""
    printed = Counter(NUMBER.findall(text))
    wanted = Counter(n for cell in cells for n in NUMBER.findall(cell))
    missing = wanted - printed
    assert not missing, f"numbers cut or lost: {sorted(missing)}"


def _doctor_checks() -> list[Check]:
    return [*run_doctor(nvml=_fake_nvml()), *MADE_UP]


# ---- badput doctor --------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_table_fits(width: int) -> None:
    checks = _doctor_checks()
    console = Console(record=True, width=width)
    render_checks(checks, console)
    text = console.export_text()
    _lines_fit(text, width)
    _numbers_whole([cell for c in checks for cell in (c.evidence, c.fix)], text)
    for c in checks:  # ids and statuses are never shortened
        assert re.search(rf"^{re.escape(c.id)} +{re.escape(str(c.status))}\b", text, re.M), c.id
    assert "…" not in text


def test_doctor_table_folds_at_80_and_not_at_160() -> None:
    checks = MADE_UP
    texts = {}
    for width in WIDTHS:
        console = Console(record=True, width=width)
        render_checks(checks, console)
        texts[width] = console.export_text()
    rows = {w: len(t.splitlines()) for w, t in texts.items()}
    assert rows[80] > rows[160]  # the evidence folds onto more lines on the narrow terminal
    assert "12,884,901,888 bytes (12.0 GiB)" in texts[160]
    assert "12.0 GiB" in texts[80]  # a number and its unit stay on one line


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_command_fits(
    width: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replay = tmp_path / "nvml.json"
    replay.write_text(json.dumps(record_nvml(_fake_nvml())))
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")  # a failing check with a fix
    # Both renderings show one set of checks: the live host facts (memory in use, load)
    # would change between two runs on a busy machine.
    import badput.telemetry.doctor as doctor_module

    real_run, first = doctor_module.run_doctor, []

    def once(**kwargs: Any) -> Any:
        if not first:
            first.append(real_run(**kwargs))
        return first[0]

    monkeypatch.setattr(doctor_module, "run_doctor", once)
    assert main(["doctor", "--nvml-replay", str(replay)]) == 0
    out = capsys.readouterr().out
    _lines_fit(out, width)
    assert main(["doctor", "--nvml-replay", str(replay), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _numbers_whole([c[k] for c in doc["checks"] for k in ("evidence", "fix")], out)
    assert out.splitlines()[-1].endswith("n/a")  # the count of each status closes it


# ---- telemetry --------------------------------------------------------------------------------

T0 = 1_764_500_000 * 10**9  # an epoch time in ns (2025)


def _columns() -> dict[str, list[float | int | None]]:
    """20 samples every 100 ms from T0 of two GPUs and the host, with wide values."""
    cols: dict[str, list[float | int | None]] = {"ts_ns": [T0 + i * 100_000_000 for i in range(20)]}
    big = {
        "util_pct": 99.5,
        "sm_clock_mhz": 1980,
        "mem_used_bytes": 79_999_999_999,
        "power_mw": 1_234_567,
        "temp_c": 87,
        "pcie_tx_bytes_per_s": 25_000_000_000_000,
        "pcie_rx_bytes_per_s": 12_345_678_901_234,
    }
    for gpu in (0, 12345):  # a long index: the longest metric names
        for name, _ in GPU_FIELDS:
            cols[f"gpu{gpu}_{name}"] = [big[name] * (1 + i / 100) for i in range(20)]
    for j in range(4):
        cols[f"cpu{j}_util_pct"] = [12.5 * j + i for i in range(20)]
    cols["rss_bytes"] = [123 * 2**30 + i for i in range(20)]
    for name in ("disk_read", "disk_write", "net_rx", "net_tx"):
        cols[f"{name}_bytes_per_s"] = [9_876_543_210_987 + i for i in range(20)]
    return cols


def _device(start_ns: int, length_ns: int, rank: int) -> DeviceAnalysis:
    return DeviceAnalysis(
        trace="/data/runs/2025-12-01/llama-70b-pretrain/rank00012.pt.trace.json",
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


@pytest.mark.parametrize("width", WIDTHS)
def test_telemetry_table_fits(width: int) -> None:
    a = align_telemetry(_columns(), T0, T0 + 2 * 10**9)
    console = Console(record=True, width=width)
    render_alignment(a, console)
    text = console.export_text()
    _lines_fit(text, width)
    shown = [m for m in a.metrics if not re.match(r"cpu\d+_util_pct$", m.name)]
    assert len(shown) == 2 * len(GPU_FIELDS) + 1 + 4 + 1  # GPUs, RSS, disk and net, CPU mean
    lines = text.splitlines()
    for m in shown:
        cells = [_fmt(v, m.unit) for v in (m.mean, m.min, m.max)]
        # the three numbers of a metric print whole, on one line
        assert any(all(c in line for c in cells) for line in lines), (m.name, cells)
    assert "…" not in text
    # metric names give way by folding at "_", never shortened: every one reads back whole
    flat = "".join(line.split("  ")[0].strip() for line in lines[2:])
    for m in shown:
        if m.name != "cpu_util_pct":
            assert m.name in flat, m.name


def test_telemetry_names_fold_at_80_only() -> None:
    a = align_telemetry(_columns(), T0, T0 + 2 * 10**9)
    texts = {}
    for width in WIDTHS:
        console = Console(record=True, width=width)
        render_alignment(a, console)
        texts[width] = console.export_text()
    assert "gpu12345_pcie_tx_bytes_per_s" in texts[160]
    assert "gpu12345_pcie_tx_bytes_per_s" not in texts[80]  # folded onto two lines there
    assert len(texts[80].splitlines()) > len(texts[160].splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_device_telemetry_and_sampler_summary_fit(width: int) -> None:
    devices = [_device(T0 + 500_000_000, 500_000_000, 0), _device(T0, 150_000_000, 1)]
    alignments = align_devices(_columns(), devices)
    console = Console(record=True, width=width)
    render_device_telemetry(devices, alignments, console)
    summary = {
        "samples": 1_234_567,
        "hz_requested": 10.0,
        "hz_achieved": 9.998,
        "missed_slots": 12_345,
        "wall_s": 123_456.7,
        "sampler_cpu_s": 617.283,
        "cpu_share_of_one_core": 0.005,
        "errors": {"gpu0": 2, "gpu12345": 1_000},
        "lost": ["gpu: no NVIDIA driver found (NVML: NVML Shared Library Not Found)"],
    }
    render_sampler_summary(summary, console)
    text = console.export_text()
    _lines_fit(text, width)
    for number in ("1234567 samples", "9.998 Hz", "12345 slots", "617.283 s", "0.50 %"):
        assert number in " ".join(text.split()), number
    for a in alignments:
        for m in a.metrics:
            if not re.match(r"cpu\d+_util_pct$", m.name):
                assert all(_fmt(v, m.unit) in text for v in (m.mean, m.min, m.max)), m.name
