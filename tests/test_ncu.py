"""The Nsight Compute CSV reader: the real T4 export, its variants, the raw page, bad input.

Expected values for `copy_blocked.csv` are read off the file by hand (one kernel, ID 0, on a
T4, CC 7.5; the details page with rule columns):

- "GPU Speed Of Light Throughput" / Duration, ns: "21,058,944";
- DRAM Throughput, %: "61.84"; Memory Throughput, %: "61.84"; Compute (SM) Throughput, %:
  "1.30"; SM Frequency, hz: "584,998,877.44";
- "Memory Workload Analysis" / Memory Throughput, byte/s: "196,456,177,859.63";
- Occupancy / Achieved Occupancy, %: "96.26"; Theoretical Occupancy, %: "100";
- eleven rule rows (listed in `RULES` below, in file order), seven of them with an estimated
  speedup: HighPipeUtilization local 98.86, MemoryCacheAccessPattern global 45.14 and 42.96,
  IssueSlotUtilization local 38.16, CPIStall global 38.16 twice, UncoalescedGlobalAccess
  global 74.14;
- no FLOP counter: the SpeedOfLight_RooflineChart section prints only its rule on this page.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from badput.errors import TraceFormatError
from badput.trace.ncu import (
    NcuKernel,
    read_ncu_csv,
    to_bytes,
    to_bytes_per_s,
    to_hz,
    to_ns,
)

# (name, type, section, speedup type, estimated speedup %), in file order.
RULES = [
    ("SOLBottleneck", "OPT", "SpeedOfLight", None, None),
    ("SOLFPRoofline", "INF", "SpeedOfLight_RooflineChart", None, None),
    ("HighPipeUtilization", "OPT", "ComputeWorkloadAnalysis", "local", 98.86),
    ("MemoryL2Compression", "WRN", "MemoryWorkloadAnalysis_Chart", None, None),
    ("MemoryCacheAccessPattern", "OPT", "MemoryWorkloadAnalysis_Tables", "global", 45.14),
    ("MemoryCacheAccessPattern", "OPT", "MemoryWorkloadAnalysis_Tables", "global", 42.96),
    ("IssueSlotUtilization", "OPT", "SchedulerStats", "local", 38.16),
    ("CPIStall", "OPT", "WarpStateStats", "global", 38.16),
    ("CPIStall", "OPT", "WarpStateStats", "global", 38.16),
    ("CPIStall", "INF", "WarpStateStats", None, None),
    ("UncoalescedGlobalAccess", "OPT", "SourceCounters", "global", 74.14),
]


@pytest.fixture(scope="module")
def copy_blocked(shared_traces: Path) -> Path:
    return shared_traces / "ncu" / "copy_blocked.csv"


def _check_copy_blocked(k: NcuKernel) -> None:
    assert k.id == 0 and k.process_id == "6153"
    assert k.name.startswith("copy_blocked[v1,cw51cXTLSUwv1sDUaKthrqNgqqmjg")
    assert k.name.endswith("Array<long long, 1, C, mutable, aligned>, long long)")
    assert (k.device, k.cc, k.device_name) == ("0", "7.5", None)
    assert (k.block_size, k.grid_size) == ("(256, 1, 1)", "(1024, 1, 1)")
    # Parsed from text without arithmetic: exact.
    assert k.dur_ns == 21_058_944.0
    assert k.dram_bytes_per_s == 196_456_177_859.63
    assert k.dram_throughput_pct == 61.84
    assert k.sol_memory_pct == 61.84
    assert k.sol_compute_pct == 1.30
    assert k.achieved_occupancy_pct == 96.26
    assert k.theoretical_occupancy_pct == 100.0
    assert k.sm_frequency_hz == 584_998_877.44
    # Bytes = rate x time: two roundings of float64 at most.
    assert k.dram_bytes == pytest.approx(196_456_177_859.63 * 0.021058944, rel=1e-12)
    assert k.flops is None and k.flop_per_s is None and k.arithmetic_intensity is None
    assert k.tensor_pipe_used is None
    assert [
        (r.name, r.type, r.section, r.speedup_type, r.estimated_speedup_pct) for r in k.rules
    ] == RULES
    assert k.rules[-1].description.startswith("This kernel has uncoalesced global accesses")
    assert k.sources["dram_bytes_per_s"] == "Memory Workload Analysis / Memory Throughput (byte/s)"
    assert k.sources["dur_ns"] == "GPU Speed Of Light Throughput / Duration (ns)"


def test_copy_blocked(copy_blocked: Path) -> None:
    report = read_ncu_csv(str(copy_blocked))
    assert report.page == "details"
    assert report.skipped_lines == 0 and report.warnings == ()
    assert len(report.kernels) == 1
    _check_copy_blocked(report.kernels[0])


def test_noise_around_and_inside_the_table(copy_blocked: Path, tmp_path: Path) -> None:
    lines = copy_blocked.read_text(encoding="utf-8").splitlines()
    noisy = [
        "==PROF== Connected to process 6153 (/usr/bin/python3.11)",
        "loading model... done",
        '"quoted program output" before the table',
        '==PROF== Profiling "copy_blocked": 0%....50%....100% - 37 passes',
        lines[0],
        *lines[1:40],
        "==WARNING== Found outstanding GPU clock reset, trying to revert...",
        "step 3 loss 0.25",
        *lines[40:],
        "==PROF== Disconnected from process 6153",
        "",
    ]
    path = tmp_path / "noisy.csv"
    path.write_text("\r\n".join(noisy), encoding="utf-8")  # CRLF too
    report = read_ncu_csv(str(path))
    assert report.skipped_lines == 7  # the blank last line is not counted
    assert len(report.kernels) == 1
    _check_copy_blocked(report.kernels[0])


@pytest.mark.parametrize("style", ["none", "all"])
def test_trailing_commas(copy_blocked: Path, tmp_path: Path, style: str) -> None:
    lines = copy_blocked.read_text(encoding="utf-8").splitlines()
    if style == "none":
        out = [line.removesuffix(",") for line in lines]
        assert sum(a != b for a, b in zip(out, lines, strict=True)) == 72  # 72 metric rows
    else:
        out = [line if line.endswith(",") else line + "," for line in lines]
    path = tmp_path / "commas.csv"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    report = read_ncu_csv(str(path))
    _check_copy_blocked(report.kernels[0])


def test_several_kernels_and_a_repeated_header(copy_blocked: Path, tmp_path: Path) -> None:
    lines = copy_blocked.read_text(encoding="utf-8").splitlines()
    second = [
        line.replace('"0","6153"', '"1","6153"', 1).replace('"21,058,944"', '"10,529,472"')
        for line in lines[1:]
    ]
    path = tmp_path / "two.csv"
    path.write_text("\n".join([*lines, lines[0], *second]) + "\n", encoding="utf-8")
    report = read_ncu_csv(str(path))
    assert [k.id for k in report.kernels] == [0, 1]
    assert [k.dur_ns for k in report.kernels] == [21_058_944.0, 10_529_472.0]
    assert len(report.kernels[1].rules) == 11


# ---- raw page ------------------------------------------------------------------------------------

_LAUNCH = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
_LAUNCH += '"Block Size","Grid Size","Device","CC"'


def raw_csv(metrics: list[tuple[str, str]], kernels: list[tuple[str, list[str]]]) -> str:
    """A `--page raw` table: metric columns (name, unit), one row per (name, values)."""
    header = _LAUNCH + "".join(f',"{name}"' for name, _ in metrics)
    units = '"","","","","","","","","","",""' + "".join(f',"{u}"' for _, u in metrics)
    rows = [
        f'"{i}","4242","app","127.0.0.1","{name}","1","7","(128, 1, 1)","(80, 1, 1)","0","8.0"'
        + "".join(f',"{v}"' for v in values)
        for i, (name, values) in enumerate(kernels)
    ]
    return "\n".join([header, units, *rows]) + "\n"


RAW_METRICS = [
    ("device__attribute_display_name", ""),
    ("gpu__time_duration.sum", "usecond"),
    ("dram__bytes.sum", "Mbyte"),
    ("dram__bytes.sum.per_second", "Gbyte/second"),
    ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst"),
    ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "inst"),
    ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst"),
    ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", "inst"),
    ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", "inst"),
    ("sm__inst_executed_pipe_tensor.sum", "inst"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%"),
]


def test_raw_page(tmp_path: Path) -> None:
    # sgemm: 2,000 us; 500 M FADD + 500 M FMUL + 1,000 M FFMA = 3e9 FLOP; 100 MB of DRAM
    # (50 GB/s over 2 ms): intensity 30 FLOP/byte, 1.5 TFLOP/s.
    text = raw_csv(
        RAW_METRICS,
        [
            (
                "sgemm_kernel(float*)",
                [
                    *("NVIDIA A100-SXM4-80GB", "2,000", "100", "50", "500,000,000"),
                    *("500,000,000", "1,000,000,000", "0", "0", "0", "80.5", "40.25", "30"),
                    "45.5",
                ],
            ),
            (
                "dgemm_kernel(double*)",
                [
                    *("NVIDIA A100-SXM4-80GB", "1,000", "1,000", "1,000", "n/a", "n/a"),
                    *("n/a", "250,000,000", "0", "0", "60", "70", "70", "50"),
                ],
            ),
        ],
    )
    path = tmp_path / "raw.csv"
    path.write_text("==PROF== Connected to process 4242\n" + text, encoding="utf-8")
    report = read_ncu_csv(str(path))
    assert report.page == "raw" and report.skipped_lines == 1
    s, d = report.kernels
    assert s.name == "sgemm_kernel(float*)" and s.device_name == "NVIDIA A100-SXM4-80GB"
    assert s.dur_ns == 2_000_000.0
    assert s.flops == {"fp64": 0.0, "fp32": 3e9, "fp16": 0.0}
    assert s.flop_per_s == pytest.approx(1.5e12, rel=1e-12)
    assert s.dram_bytes == 1e8 and s.dram_bytes_per_s == 5e10
    assert s.arithmetic_intensity == pytest.approx(30.0, rel=1e-12)
    assert s.tensor_pipe_used is False
    assert (s.sol_compute_pct, s.sol_memory_pct, s.dram_throughput_pct) == (80.5, 40.25, 30.0)
    assert s.achieved_occupancy_pct == 45.5 and s.theoretical_occupancy_pct is None
    assert s.sources["flops"].startswith("sm__sass_thread_inst_executed_op_")
    # dgemm: FP32 counters "n/a", 250 M DFMA = 5e8 FP64 FLOP over 1 ms, 1 GB of DRAM.
    assert d.flops == {"fp64": 5e8, "fp32": 0.0, "fp16": 0.0}
    assert d.arithmetic_intensity == pytest.approx(0.5, rel=1e-12)
    assert d.dram_bytes_per_s == 1e12


def test_raw_roofline_section_rates(tmp_path: Path) -> None:
    # The SpeedOfLight_RooflineChart metrics: FFMA 1,000 per cycle (2,000 FLOP), FADD 500 per
    # cycle, at 1.5 cycle/ns: 2,500 x 1.5e9 = 3.75e12 FLOP/s; over 1 msecond, 3.75e9 FLOP.
    metrics = [
        ("gpu__time_duration.sum", "msecond"),
        ("dram__bytes.sum.per_second", "Tbyte/second"),
        ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed", "inst/cycle"),
        ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed", "inst/cycle"),
        ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed", "inst/cycle"),
        ("smsp__cycles_elapsed.avg.per_second", "cycle/nsecond"),
    ]
    path = tmp_path / "rates.csv"
    path.write_text(
        raw_csv(metrics, [("k", ["1", "1.5", "1,000", "500", "0", "1.5"])]), encoding="utf-8"
    )
    (k,) = read_ncu_csv(str(path)).kernels
    assert k.flop_per_s == pytest.approx(3.75e12, rel=1e-12)
    assert k.flops == pytest.approx({"fp64": 0.0, "fp32": 3.75e9, "fp16": 0.0}, rel=1e-12)
    assert k.dram_bytes_per_s == pytest.approx(1.5e12, rel=1e-12)
    assert k.dram_bytes == pytest.approx(1.5e9, rel=1e-12)
    assert k.arithmetic_intensity == pytest.approx(2.5, rel=1e-12)


def test_details_with_command_line_metrics(tmp_path: Path) -> None:
    # `ncu --metrics ...` on the details page: raw names under "Command line profiler metrics".
    head = _LAUNCH + ',"Section Name","Metric Name","Metric Unit","Metric Value"'
    launch = '"3","7","app","h","axpy","1","7","(256, 1, 1)","(64, 1, 1)","0","8.9"'
    section = '"Command line profiler metrics"'
    rows = [
        f'{launch},{section},"gpu__time_duration.sum","us","4.5"',
        f'{launch},{section},"dram__bytes_read.sum","Kbyte","1,024"',
        f'{launch},{section},"dram__bytes_write.sum","Kbyte","512"',
        f'{launch},{section},"sm__sass_thread_inst_executed_op_ffma_pred_on.sum","inst","262,144"',
        f'{launch},{section},"sm__inst_executed_pipe_tensor.sum","inst","0"',
    ]
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    (k,) = read_ncu_csv(str(path)).kernels
    assert k.id == 3 and k.dur_ns == 4500.0
    assert k.dram_bytes == 1_536_000.0  # (1,024 + 512) Kbyte, K = 1,000 (ncu's SI prefixes)
    assert k.flops == {"fp64": 0.0, "fp32": 524_288.0, "fp16": 0.0}
    assert k.arithmetic_intensity == pytest.approx(524_288 / 1_536_000, rel=1e-12)
    assert k.dram_bytes_per_s == pytest.approx(1_536_000 / 4.5e-6, rel=1e-12)
    assert k.rules == ()


# ---- units ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "ns"),
    [
        (21_058_944, "ns", 21_058_944),
        (21_058_944, "nsecond", 21_058_944),
        (21_058.944, "usecond", 21_058_944),
        (21_058.944, "us", 21_058_944),
        (21.058944, "msecond", 21_058_944),
        (21.058944, "ms", 21_058_944),
        (0.021058944, "second", 21_058_944),
    ],
)
def test_time_units(value: float, unit: str, ns: float) -> None:
    assert to_ns(value, unit) == pytest.approx(ns, rel=1e-15)


@pytest.mark.parametrize(
    ("value", "unit", "bps"),
    [
        (196_456_177_859.63, "byte/s", 196_456_177_859.63),
        (196_456_177_859.63, "byte/second", 196_456_177_859.63),
        (196_456_177.85963, "Kbyte/s", 196_456_177_859.63),
        (196_456.17785963, "Mbyte/second", 196_456_177_859.63),
        (196.45617785963, "Gbyte/second", 196_456_177_859.63),
        (196.45617785963, "GB/s", 196_456_177_859.63),
        (0.19645617785963, "Tbyte/s", 196_456_177_859.63),
        (1.0, "KiB/s", 1024.0),
        (1.0, "Mbyte/msecond", 1e9),
    ],
)
def test_bandwidth_units(value: float, unit: str, bps: float) -> None:
    assert to_bytes_per_s(value, unit) == pytest.approx(bps, rel=1e-14)


@pytest.mark.parametrize(
    ("value", "unit", "hz"),
    [
        (584_998_877.44, "hz", 584_998_877.44),
        (584.99887744, "Mhz", 584_998_877.44),
        (0.58499887744, "Ghz", 584_998_877.44),
        (0.58499887744, "cycle/nsecond", 584_998_877.44),
        (584.99887744, "cycle/usecond", 584_998_877.44),
    ],
)
def test_frequency_units(value: float, unit: str, hz: float) -> None:
    assert to_hz(value, unit) == pytest.approx(hz, rel=1e-14)


def test_units_that_do_not_fit() -> None:
    assert to_ns(1.0, "byte") is None
    assert to_bytes(1.0, "%") is None
    assert to_bytes(2.0, "Gbyte") == 2e9
    assert to_bytes_per_s(1.0, "byte") is None
    assert to_bytes_per_s(1.0, "%") is None
    assert to_hz(1.0, "cycle") is None


# ---- bad input -----------------------------------------------------------------------------------


def _cut_inside_a_field(text: str) -> str:
    lines = text.splitlines(keepends=True)
    head = "".join(lines[:30])
    return head + lines[30][:25]  # inside the Process Name field of row 30


def _cut_rule_row(text: str) -> str:
    last = text.splitlines()[-1]  # the UncoalescedGlobalAccess rule row
    return text[: text.index(last)] + last[: last.index('"OPT",') + 6]


def _cut_after_a_comma(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:30]) + '"0","6153","python3.11",'


@pytest.mark.parametrize(
    ("name", "make", "problem"),
    [
        ("empty.csv", lambda t: "", "empty file"),
        ("blank.csv", lambda t: "\n\n  \n", "empty file"),
        ("cut-field.csv", _cut_inside_a_field, "truncated: the file ends inside a quoted field"),
        ("cut-row.csv", _cut_after_a_comma, "truncated: the last row (line 31) ends after 3"),
        ("cut-rule.csv", _cut_rule_row, "truncated: the last row (line 84) ends after 17 of 20"),
        ("other.csv", lambda t: "name,value\na,1\nb,2\n", "not Nsight Compute CSV output"),
        ("trace.json", lambda t: '{"traceEvents": []}', "not Nsight Compute CSV output"),
        (
            "only-prof.log",
            lambda t: "==PROF== Connected to process 1\n",
            "--csv?",
        ),
        ("header-only.csv", lambda t: t.splitlines()[0] + "\n", "no kernel rows"),
        (
            "no-kernel-col.csv",
            lambda t: '"ID","Process ID","Metric Name"\n"0","1","x"\n',
            "has no 'Kernel Name' column",
        ),
        (
            "no-metrics.csv",
            lambda t: '"ID","Kernel Name","Device"\n"0","k","0"\n',
            "names no metric column",
        ),
        (
            "half-details.csv",
            lambda t: '"ID","Kernel Name","Section Name","Metric Value"\n"0","k","s","1"\n',
            "not a complete ncu details page",
        ),
    ],
)
def test_bad_input(
    copy_blocked: Path, tmp_path: Path, name: str, make: object, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(make(copy_blocked.read_text(encoding="utf-8")), encoding="utf-8")  # type: ignore[operator]
    with pytest.raises(TraceFormatError) as info:
        read_ncu_csv(str(path))
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: ")
    assert problem in info.value.problem


def test_short_row_inside_the_table(copy_blocked: Path, tmp_path: Path) -> None:
    lines = copy_blocked.read_text(encoding="utf-8").splitlines()
    lines[10] = '"0","6153","python3.11"'
    path = tmp_path / "short.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"line 11: 3 fields where the header has 15"):
        read_ncu_csv(str(path))


def test_missing_directory_and_binary(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        read_ncu_csv(str(tmp_path / "absent.csv"))
    with pytest.raises(TraceFormatError, match="is a directory"):
        read_ncu_csv(str(tmp_path))
    binary = tmp_path / "report.ncu-rep"
    binary.write_bytes(b"\x89NCU\xff\xfe\x00\x01" * 10)
    with pytest.raises(TraceFormatError, match="not text"):
        read_ncu_csv(str(binary))


def test_raw_page_without_units_line(tmp_path: Path) -> None:
    # Units taken as ncu's base units (ns, byte, byte/second), and the reader says so.
    text = raw_csv(
        [("gpu__time_duration.sum", ""), ("dram__bytes.sum", "")], [("k", ["800", "4,000"])]
    )
    lines = text.splitlines()
    path = tmp_path / "nounits.csv"
    path.write_text("\n".join([lines[0], *lines[2:]]) + "\n", encoding="utf-8")
    report = read_ncu_csv(str(path))
    (k,) = report.kernels
    assert k.dur_ns == 800.0 and k.dram_bytes == 4000.0
    assert k.dram_bytes_per_s == pytest.approx(4000 / 800e-9, rel=1e-12)
    assert report.warnings == ("raw page without a units line: units taken as ncu's base units",)


def test_tensor_op_counters_one_level_per_type(tmp_path: Path) -> None:
    # FP8: the plain counter (100) and its destination split (60 + 40) count the same work:
    # 100, not 200. BF16 only split by destination and sparsity: the destination level, 30.
    # Tensor-pipe MMA kinds with instructions: hmma (0 is not "executed") and gmma.
    metrics = [
        ("gpu__time_duration.sum", "usecond"),
        ("sm__ops_path_tensor_src_fp8.sum", ""),
        ("sm__ops_path_tensor_src_fp8_dst_fp16.sum", ""),
        ("sm__ops_path_tensor_src_fp8_dst_fp32.sum", ""),
        ("sm__ops_path_tensor_src_bf16_dst_fp32.sum", ""),
        ("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum", ""),
        ("sm__ops_path_tensor_src_fp8.sum.per_cycle_elapsed", ""),
        ("smsp__inst_executed_pipe_tensor_op_hmma.sum", "inst"),
        ("smsp__inst_executed_pipe_tensor_op_gmma.sum", "inst"),
    ]
    values = ["10", "100", "60", "40", "30", "30", "5", "0", "7"]
    path = tmp_path / "tensor.csv"
    path.write_text(raw_csv(metrics, [("gemm", values)]), encoding="utf-8")
    (k,) = read_ncu_csv(str(path)).kernels
    assert k.tensor_ops == {"fp8": 100.0, "bf16": 30.0}
    assert k.tensor_kinds == ("gmma",) and k.tensor_pipe_used is True
    assert k.sources["tensor_ops"] == (
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum + sm__ops_path_tensor_src_fp8.sum"
    )
