"""`badput roofline`: kernels against their GPU's roofline, ncu's findings, the three outputs.

Peaks are the hardware table's (``gpus.toml``): T4 8.1 fp32 TFLOP/s and 320 GB/s; A100-SXM-80GB
19.5 fp32, 9.7 fp64 and 312 fp16 (tensor) TFLOP/s and 2,039 GB/s. The real export
(``copy_blocked.csv``, a T4 copy kernel) has no FLOP counters; its figures are listed in
``test_ncu.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from badput.analysis.roofline import analyze_roofline, resolve_roof
from badput.errors import UsageError
from badput.trace.ncu import read_ncu_csv
from synth import run_cli
from test_html_browser import _browse, chromium  # noqa: F401  (a fixture, used by name)
from test_ncu import RAW_METRICS, raw_csv

# copy_blocked.csv, by hand: Memory Throughput 196,456,177,859.63 byte/s, Duration 21,058,944 ns.
CB_BPS = 196_456_177_859.63
CB_DUR_NS = 21_058_944


@pytest.fixture(scope="module")
def copy_blocked(shared_traces: Path) -> Path:
    return shared_traces / "ncu" / "copy_blocked.csv"


def _json(capsys: pytest.CaptureFixture[str], *argv: object) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "roofline", *argv, "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_copy_blocked_on_the_t4_roofline(copy_blocked: Path) -> None:
    a = analyze_roofline(read_ncu_csv(str(copy_blocked)))
    (k,) = a.kernels
    assert k.roof.label == "T4" and "compute capability 7.5" in k.roof.how
    assert k.roof.peak_gbps == 320.0 and k.peak_tflops == 8.1 and k.precision == "fp32"
    assert k.ridge_flop_per_byte == pytest.approx(8.1e12 / 320e9, rel=1e-12)  # 25.3125
    # No FLOP counters on this page: bound from SOL (memory 61.84 % > compute 1.30 %), distance
    # to the roof from the DRAM share: 196.456 / 320 GB/s.
    assert (k.bound, k.bound_basis) == ("memory-bound", "SOL")
    assert k.achieved_tflops is None and k.arithmetic_intensity is None
    assert k.dram_gbps == pytest.approx(CB_BPS / 1e9, rel=1e-12)
    assert k.dram_share == pytest.approx(CB_BPS / 320e9, rel=1e-12)  # 0.6139
    assert k.roof_share == k.dram_share
    assert k.distance_to_roof == pytest.approx(320e9 / CB_BPS, rel=1e-12)
    # Findings: the seven rules with an estimated speedup, by speedup x 21,058.944 us.
    ranked = [(f.rule.name, f.rule.estimated_speedup_pct) for f in a.findings]
    assert ranked[:4] == [
        ("HighPipeUtilization", 98.86),
        ("UncoalescedGlobalAccess", 74.14),
        ("MemoryCacheAccessPattern", 45.14),
        ("MemoryCacheAccessPattern", 42.96),
    ]
    assert sorted(ranked[4:]) == [
        ("CPIStall", 38.16),
        ("CPIStall", 38.16),
        ("IssueSlotUtilization", 38.16),
    ]
    assert a.findings[0].savings_ns == pytest.approx(CB_DUR_NS * 0.9886, rel=1e-12)
    assert a.findings[1].savings_ns == pytest.approx(CB_DUR_NS * 0.7414, rel=1e-12)


def test_json_interface(copy_blocked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, copy_blocked)
    assert doc["schema"] == "badput.roofline/1" and doc["page"] == "details"
    (k,) = doc["kernels"]
    for key in ("name", "duration_us", "achieved_tflops", "dram_gbps"):
        assert key in k
    assert {"arithmetic_intensity", "bound", "peak_tflops", "peak_dram_gbps"} <= set(k)
    assert k["duration_us"] == 21058.944
    assert k["achieved_tflops"] is None and k["arithmetic_intensity"] is None
    assert k["dram_gbps"] == 196.456178  # 196.45617785963, to 9 significant digits
    assert k["bound"] == "memory-bound" and k["gpu"] == "T4"
    assert (k["peak_tflops"], k["peak_dram_gbps"], k["ridge_flop_per_byte"]) == (8.1, 320, 25.3125)
    assert k["roof_share"] == pytest.approx(CB_BPS / 320e9, abs=1e-9)
    assert (k["sol_compute_pct"], k["sol_memory_pct"], k["occupancy_pct"]) == (1.3, 61.84, 96.26)
    assert len(k["rules"]) == 11
    assert k["rules"][2] == {
        "name": "HighPipeUtilization",
        "type": "OPT",
        "section": "ComputeWorkloadAnalysis",
        "description": k["rules"][2]["description"],
        "speedup_type": "local",
        "estimated_speedup_pct": 98.86,
    }
    assert doc["findings_total"] == 7 and len(doc["findings"]) == 7
    first = doc["findings"][0]
    assert (first["rank"], first["rule"], first["est_savings_us"]) == (
        1,
        "HighPipeUtilization",
        round(21058.944 * 0.9886, 3),
    )
    top = _json(capsys, copy_blocked, "--top", "2")
    assert [f["rule"] for f in top["findings"]] == [
        "HighPipeUtilization",
        "UncoalescedGlobalAccess",
    ]
    assert top["findings_total"] == 7


def test_text_report(
    copy_blocked: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "roof.txt"
    code, _, err = run_cli(capsys, "roofline", copy_blocked, "--out", out, "--top", "3")
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert "GPU T4 (by compute capability 7.5" in text
    assert "memory-bound" in text and "61.4 %" in text  # 196.456 / 320
    assert "21,058.9" in text and "196.5" in text and "1.3 / 61.8" in text
    # Findings are a table: rank, rule, kernel ID, type, estimated speedup, saving in us.
    assert re.search(r"^1 +HighPipeUtilization +0 +OPT, local +98\.86 % +20,818\.9 *$", text, re.M)
    assert re.search(r"^3 +MemoryCacheAccessPattern +0 ", text, re.M) and "4 more" in text
    assert "CPIStall" not in text


# ---- synthetic exports: placement, precisions, peaks -------------------------------------------


def _raw(tmp_path: Path, kernels: list[tuple[str, list[str]]], name: str = "raw.csv") -> Path:
    path = tmp_path / name
    path.write_text(raw_csv(RAW_METRICS, kernels), encoding="utf-8")
    return path


A100 = "NVIDIA A100-SXM4-80GB"
# Columns of RAW_METRICS after the name: dur us, DRAM Mbyte, DRAM Gbyte/s, fadd, fmul, ffma,
# dfma, hfma, tensor inst, SOL SM %, SOL memory %, DRAM %, occupancy %.
SGEMM = ["2,000", "100", "50", "500,000,000", "500,000,000", "1,000,000,000", "0", "0", "0"]
SGEMM += ["80", "40", "30", "45"]  # 3e9 FLOP, 1e8 B: 30 FLOP/B, 1.5 TFLOP/s
SAXPY = ["1,000", "1,200", "1,200", "0", "0", "100,000,000", "0", "0", "0", "5", "90", "90", "85"]
DGEMM = ["1,000", "10", "10", "0", "0", "0", "2,000,000,000", "0", "0", "70", "20", "5", "40"]
HGEMM = ["1,000", "10", "10", "0", "0", "0", "0", "4,000,000,000", "0", "70", "20", "5", "40"]
TENSOR = ["1,000", "10", "10", "0", "0", "1,000", "0", "0", "5,000", "70", "20", "5", "40"]
ZERO = ["500", "100", "200", "0", "0", "0", "0", "0", "0", "1", "70", "70", "90"]


def test_placement_on_the_a100(tmp_path: Path) -> None:
    path = _raw(
        tmp_path,
        [
            ("sgemm", [A100, *SGEMM]),
            ("saxpy", [A100, *SAXPY]),
            ("dgemm", [A100, *DGEMM]),
            ("hgemm", [A100, *HGEMM]),
            ("mma", [A100, *TENSOR]),
            ("copy", [A100, *ZERO]),
        ],
    )
    a = analyze_roofline(read_ncu_csv(str(path)))
    sgemm, saxpy, dgemm, hgemm, mma, copy = a.kernels
    assert {k.roof.label for k in a.kernels} == {"A100-SXM-80GB"}
    assert "by device name" in sgemm.roof.how
    # sgemm: 30 FLOP/B above the fp32 ridge 19.5e12 / 2,039e9 = 9.56: compute-bound at
    # 1.5 of 19.5 TFLOP/s.
    assert sgemm.precision == "fp32" and sgemm.peak_tflops == 19.5
    assert sgemm.ridge_flop_per_byte == pytest.approx(19.5e12 / 2039e9, rel=1e-12)
    assert (sgemm.bound, sgemm.bound_basis) == ("compute-bound", "roofline")
    assert sgemm.achieved_tflops == pytest.approx(1.5, rel=1e-12)
    assert sgemm.attainable_tflops == 19.5
    assert sgemm.roof_share == pytest.approx(1.5 / 19.5, rel=1e-12)
    assert sgemm.distance_to_roof == pytest.approx(13.0, rel=1e-12)
    # saxpy: 2e8 FLOP over 1.2e9 B = 1/6 FLOP/B: memory-bound; attainable = I x 2,039 GB/s,
    # so its share of the roof is its share of the bandwidth: 1,200 / 2,039.
    assert saxpy.bound == "memory-bound"
    assert saxpy.arithmetic_intensity == pytest.approx(1 / 6, rel=1e-12)
    assert saxpy.attainable_tflops == pytest.approx(2039e9 / 6 / 1e12, rel=1e-12)
    assert saxpy.roof_share == pytest.approx(1200 / 2039, rel=1e-12)
    assert saxpy.roof_share == pytest.approx(saxpy.dram_share, rel=1e-12)
    # dgemm: FP64 dominates, so the fp64 roof (9.7); 4e9 FLOP / 1e7 B = 400 FLOP/B.
    assert (dgemm.precision, dgemm.peak_tflops, dgemm.bound) == ("fp64", 9.7, "compute-bound")
    assert dgemm.roof_share == pytest.approx(4.0 / 9.7, rel=1e-12)
    assert "dominant FLOP type fp64 (100.0 % of FLOPs)" in dgemm.precision_note
    # hgemm: half precision; the table's fp16 is the tensor peak, and the note says so.
    assert (hgemm.precision, hgemm.peak_tflops) == ("fp16", 312.0)
    assert "tensor-core rate" in hgemm.precision_note
    # mma: tensor-pipe instructions: the tensor roof; counted FLOPs leave tensor math out.
    assert (mma.precision, mma.peak_tflops) == ("tensor", 312.0)
    assert "leave tensor math out" in mma.precision_note
    # ... so ncu's SOL places it (SM 70 % against memory 20 %), with no roof share.
    assert (mma.bound, mma.bound_basis, mma.roof_share) == ("compute-bound", "SOL", None)
    # copy: counters present and zero: memory-bound, share = 200 / 2,039 GB/s.
    assert (copy.bound, copy.bound_basis) == ("memory-bound", "no FLOPs")
    assert copy.roof_share == pytest.approx(200 / 2039, rel=1e-12)
    assert a.findings == ()  # the raw page carries no rule results


def test_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str], copy_blocked: Path) -> None:
    doc = _json(capsys, copy_blocked, "--gpu", "A100-SXM-80GB")
    (k,) = doc["kernels"]
    assert (k["gpu"], k["gpu_how"], k["peak_dram_gbps"]) == (
        "A100-SXM-80GB",
        "--gpu A100-SXM-80GB",
        2039,
    )
    assert k["roof_share"] == pytest.approx(CB_BPS / 2039e9, abs=1e-9)
    doc = _json(capsys, copy_blocked, "--peak-gbps", "300")
    (k,) = doc["kernels"]
    assert k["gpu"] == "T4" and k["peak_dram_gbps"] == 300 and k["peak_tflops"] == 8.1
    assert k["roof_share"] == pytest.approx(CB_BPS / 300e9, abs=1e-9)
    assert "with --peak-gbps" in k["gpu_how"]


def test_unknown_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # CC 8.6 (an A10 or RTX 30xx): not in the table; no device name.
    text = raw_csv(RAW_METRICS, [("sgemm", ["", *SGEMM])]).replace('"8.0"', '"8.6"')
    path = tmp_path / "cc86.csv"
    path.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, "roofline", path)
    assert code == 2 and out == ""
    assert err.startswith(f"badput: error: {path}: unknown GPU (device 0, compute capability 8.6")
    assert "--gpu NAME" in err and "--peak-tflops and --peak-gbps" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "roofline", path, "--peak-tflops", "31.2")
    assert code == 2 and "unknown GPU" in err
    doc = _json(capsys, path, "--peak-tflops", "30", "--peak-gbps", "600")
    (k,) = doc["kernels"]
    assert (k["gpu"], k["peak_tflops"], k["peak_dram_gbps"]) == ("custom", 30, 600)
    assert k["ridge_flop_per_byte"] == 50 and k["bound"] == "memory-bound"  # 30 < 50 FLOP/B
    assert k["roof_share"] == pytest.approx(1.5 / (30 * 0.6), rel=1e-9)  # roof at 30 x 600 GB/s
    code, _, err = run_cli(capsys, "roofline", path, "--gpu", "RTX 3090")
    assert code == 2 and "--gpu 'RTX 3090': not in badput's hardware table" in err


def test_ambiguous_compute_capability(tmp_path: Path) -> None:
    text = raw_csv(RAW_METRICS, [("sgemm", ["", *SGEMM])]).replace('"8.0"', '"9.0"')
    path = tmp_path / "cc90.csv"
    path.write_text(text, encoding="utf-8")
    report = read_ncu_csv(str(path))
    with pytest.raises(UsageError, match=r"several GPUs of the table have CC 9.0: H100-SXM, "):
        analyze_roofline(report)
    a = analyze_roofline(report, gpu="H100 SXM")
    assert a.kernels[0].roof.label == "H100-SXM" and a.kernels[0].peak_tflops == 67.0
    with pytest.raises(UsageError, match="--peak-gbps must be positive"):
        resolve_roof(report.kernels[0], str(path), gpu="H100", peak_gbps=0.0)


def test_no_table_peak_for_the_precision(tmp_path: Path) -> None:
    # A T4 (CC 7.5) running FP64: the table has no fp64 T4 peak, so no compute roof and no
    # ridge; the kernel is not classified rather than guessed.
    text = raw_csv(RAW_METRICS, [("dgemm", ["Tesla T4", *DGEMM])]).replace('"8.0"', '"7.5"')
    path = tmp_path / "t4-fp64.csv"
    path.write_text(text, encoding="utf-8")
    (k,) = analyze_roofline(read_ncu_csv(str(path))).kernels
    assert k.roof.label == "T4" and k.precision == "fp64" and k.peak_tflops is None
    assert (k.bound, k.ridge_flop_per_byte, k.roof_share) == ("unknown", None, None)
    assert "the hardware table has no fp64 peak for T4" in k.precision_note


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("missing.csv", None, "no such file"),
        ("empty.csv", "", "empty file"),
        ("notncu.csv", "a,b\n1,2\n", "not Nsight Compute CSV output"),
        ("cut.csv", "cut", "truncated"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    copy_blocked: Path,
    name: str,
    content: str | None,
    problem: str,
) -> None:
    path = tmp_path / name
    if content == "cut":
        path.write_bytes(copy_blocked.read_bytes()[:20_000])
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    code, out, err = run_cli(capsys, "roofline", path, "--format", "json")
    assert code == 2 and out == ""
    assert err.startswith(f"badput: error: {path}: ") and problem in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- HTML --------------------------------------------------------------------------------------

EVIL = "<script>document.body.setAttribute('data-pwned','1')</script>"


def _evil_export(tmp_path: Path) -> Path:
    return _raw(
        tmp_path,
        [(f"k{EVIL}", [A100, *SGEMM]), ("saxpy<&>", [A100, *SAXPY]), ("copy", [A100, *ZERO])],
        name="evil.csv",
    )


def test_html_page(copy_blocked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "roof.html"
    code, _, err = run_cli(capsys, "roofline", copy_blocked, "--html", page, "--format", "json")
    assert code == 0, err
    source = page.read_text(encoding="utf-8")
    assert source.startswith("<!DOCTYPE html>") and "<script" not in source
    assert not re.search(r"<link|src=|href=|@import|url\(", source)  # nothing from the network
    assert len(re.findall(r'class="roof-memory"', source)) == 1
    assert len(re.findall(r'class="roof-compute"', source)) == 1  # T4 fp32
    assert len(re.findall(r'class="kernel-dot"', source)) == 1
    assert "T4 fp32 8.1 TFLOP/s" in source and "ridge 25.3" in source
    assert "UncoalescedGlobalAccess" in source and "20,818.9" in source

    page = tmp_path / "evil.html"
    code, _, err = run_cli(
        capsys, "roofline", _evil_export(tmp_path), "--html", page, "-o", tmp_path / "t"
    )
    assert code == 0, err
    source = page.read_text(encoding="utf-8")
    assert "<script" not in source and "&lt;script&gt;" in source
    assert "saxpy&lt;&amp;&gt;" in source
    assert len(re.findall(r'class="kernel-dot"', source)) == 3


def test_html_page_in_browser(
    chromium: str,  # noqa: F811
    copy_blocked: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, source in (("copy_blocked", copy_blocked), ("evil", _evil_export(tmp_path))):
        page = tmp_path / f"{name}.html"
        code, _, err = run_cli(capsys, "roofline", source, "--html", page, "-o", tmp_path / "t")
        assert code == 0, err
        html = page.read_text(encoding="utf-8")
        dom = _browse(chromium, page, tmp_path, "--dump-dom")
        for cls in ("kernel-dot", "roof-memory", "roof-compute", "bw-bar"):
            expected = len(re.findall(rf'class="{cls}"', html))
            assert expected > 0 and len(re.findall(rf'class="{cls}"', dom)) == expected
        assert "data-pwned" not in dom.replace("data-pwned','1')", "")
        assert "<script" not in dom


def test_kernel_without_duration_or_bandwidth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only the Occupancy section and one rule: no time, no bandwidth, no SOL. Nothing is made
    # up: the kernel is `unknown`, its rule has no time to rank by, and a note says why.
    head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    head += '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    head += '"Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type",'
    head += '"Estimated Speedup"'
    launch = '"0","1","app","h","k","1","7","(32, 1, 1)","(1, 1, 1)","0","7.5"'
    rows = [
        f'{launch},"Occupancy","Achieved Occupancy","%","12.5",',
        f'{launch},"Occupancy",,,,"AchievedOccupancy","OPT","Low occupancy.","local","40"',
    ]
    path = tmp_path / "occupancy.csv"
    path.write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    doc = _json(capsys, path)
    (k,) = doc["kernels"]
    assert (k["duration_us"], k["dram_gbps"], k["bound"], k["roof_share"]) == (
        None,
        None,
        "unknown",
        None,
    )
    assert k["occupancy_pct"] == 12.5 and k["rules"][0]["estimated_speedup_pct"] == 40
    assert doc["findings"] == []
    assert doc["warnings"] == [
        "1 kernel(s) without a duration (IDs [0]): collect the SpeedOfLight section or "
        "gpu__time_duration.sum"
    ]


def test_unwritable_outputs(
    copy_blocked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    code, _, err = run_cli(capsys, "roofline", copy_blocked, "--html", missing / "r.html")
    assert code == 2 and err.startswith(f"badput: error: --html {missing / 'r.html'}: ")
    code, _, err = run_cli(capsys, "roofline", copy_blocked, "-o", missing / "r.txt")
    assert code == 2 and err.startswith(f"badput: error: --out {missing / 'r.txt'}: ")
    code, _, err = run_cli(capsys, "roofline", copy_blocked, "--top", "-1")
    assert code == 2 and "--top must be >= 0" in err


# ---- issue 20: the roof from the kernel's precision; latency-bound; the HTML's dots and DRAM --

H100 = "NVIDIA H100 80GB HBM3"
FP8_NAME = "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128_cublas"
# 1,000 us, 500 MB of DRAM (500 GB/s), 1 M FFMA (2 M CUDA-core FLOP), 20,000 tensor-pipe
# instructions, SOL SM 23.6 % and memory 21.7 %.
FP8 = ["1,000", "500", "500", "0", "0", "1,000,000", "0", "0", "20,000", "23.6", "21.7", "21.7"]
FP8 += ["40"]
TENSOR_OPS = ("sm__ops_path_tensor_src_fp8.sum", "")


def _fp8_csv(
    tmp_path: Path, metrics: list[tuple[str, str]], rows: list[tuple[str, list[str]]]
) -> Path:
    path = tmp_path / "fp8.csv"
    path.write_text(raw_csv(metrics, rows).replace('"8.0"', '"9.0"'), encoding="utf-8")
    return path


def test_fp8_kernel_gets_the_fp8_roof_from_its_tensor_op_counters(tmp_path: Path) -> None:
    # 1e11 FP8 tensor ops (= FLOPs, ncu's tensor roofline weight 1) + 2e6 CUDA-core FLOPs.
    path = _fp8_csv(tmp_path, [*RAW_METRICS, TENSOR_OPS], [(FP8_NAME, [H100, *FP8, "1e11"])])
    (k,) = analyze_roofline(read_ncu_csv(str(path))).kernels
    assert (k.precision, k.precision_basis, k.peak_tflops) == ("fp8", "tensor op counters", 1979)
    assert "sm__ops_path_tensor_src_fp8.sum" in k.precision_note
    total = 1e11 + 2e6
    assert k.bound_basis == "roofline"
    assert k.achieved_tflops == pytest.approx(total / 1e-3 / 1e12, rel=1e-12)  # 100.002
    assert k.arithmetic_intensity == pytest.approx(total / 5e8, rel=1e-12)  # 200.004 FLOP/B
    ridge = 1979e12 / 3350e9  # 590.7 FLOP/B: the kernel is on the memory side ...
    assert k.ridge_flop_per_byte == pytest.approx(ridge, rel=1e-12) and k.roof_side == "memory"
    assert k.roof_share == pytest.approx(total / 1e-3 / (total / 5e8 * 3350e9), rel=1e-12)
    # ... but SOL SM 23.6 % and memory 21.7 % are both below ncu's 60 %: latency-bound.
    assert k.bound == "latency-bound"
    assert "23.6 %" in k.bound_note and "21.7 %" in k.bound_note and "60 %" in k.bound_note


@pytest.mark.parametrize(
    ("tensor_col", "basis"),
    [("20,000", "tensor pipe"), (None, "kernel name")],
)
def test_fp8_roof_from_the_name_when_that_is_all_there_is(
    tmp_path: Path, tensor_col: str | None, basis: str
) -> None:
    # Tensor-pipe instructions without a type (or no tensor metric at all): the name's `e4m3`
    # decides; the counted FLOPs leave tensor math out, so SOL places it.
    metrics, values = list(RAW_METRICS), [H100, *FP8]
    if tensor_col is None:
        i = [m[0] for m in metrics].index("sm__inst_executed_pipe_tensor.sum")
        del metrics[i]
        del values[i - 1]  # values start at the device name, metrics at it too
    path = _fp8_csv(tmp_path, metrics, [(FP8_NAME, values)])
    (k,) = analyze_roofline(read_ncu_csv(str(path))).kernels
    assert (k.precision, k.precision_basis, k.peak_tflops) == ("fp8", basis, 1979)
    assert "'e4m3'" in k.precision_note
    assert (k.bound_basis, k.bound) == ("SOL", "latency-bound")


@pytest.mark.parametrize(
    ("sm", "mem", "bound"),
    [("59.9", "59.9", "latency-bound"), ("1", "61", "memory-bound"), ("70", "20", "compute-bound")],
)
def test_latency_bound_when_both_sol_below_60(
    tmp_path: Path, sm: str, mem: str, bound: str
) -> None:
    values = [H100, *FP8]
    values[10], values[11] = sm, mem  # SOL SM %, SOL memory %
    path = _fp8_csv(tmp_path, RAW_METRICS, [("mma", values)])
    (k,) = analyze_roofline(read_ncu_csv(str(path))).kernels
    assert k.bound == bound


def test_html_dots_and_dram_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # sgemm, saxpy and the FP8 GEMM with tensor ops have FLOPs: three filled dots; copy has
    # none counted (a hollow dot). A fifth kernel has only dram__bytes.sum (no time): it has no
    # bandwidth, but its DRAM bytes still get a row in the DRAM section.
    metrics = [*RAW_METRICS, TENSOR_OPS]
    rows = [
        ("sgemm", [H100, *SGEMM, "0"]),
        ("saxpy", [H100, *SAXPY, "0"]),
        (FP8_NAME, [H100, *FP8, "1e11"]),
        ("copy", [H100, *ZERO, "0"]),
        ("bytes_only", [H100, "", "250", *([""] * 12)]),
    ]
    path = _fp8_csv(tmp_path, metrics, rows)
    page = tmp_path / "roof.html"
    code, _, err = run_cli(capsys, "roofline", path, "--html", page)
    assert code == 0, err
    source = page.read_text(encoding="utf-8")
    svg = re.search(r'<svg class="plot roofline".*?</svg>', source, re.S)
    assert svg is not None
    placed = re.findall(r'class="kernel-dot" data-placed="flops" data-id="(\d+)"', svg.group(0))
    assert placed == ["0", "1", "2"]
    hollow = re.findall(r'data-placed="dram-share" data-id="(\d+)"', svg.group(0))
    assert hollow == ["3"]
    # Every dot inside the plot area (y from 20 to 420 px), none pinned to an edge.
    for cy in re.findall(r'class="kernel-dot"[^>]* cy="([\d.]+)"', svg.group(0)):
        assert 20 < float(cy) < 420
    dram = re.search(r'<div class="dram">(.*?)</div>', source, re.S)
    assert dram is not None
    body = dram.group(1).split("<tbody>")[1]
    assert body.count("<tr>") == 5 and ">250.000<" in body  # bytes_only: 250 MB
    assert len(re.findall(r'class="bw-bar"', source)) == 4  # the four with a bandwidth
    assert "fp8 1,979.0 TFLOP/s" in source


def test_html_alone_writes_the_page_and_one_line(
    copy_blocked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "roof.html"
    code, out, err = run_cli(capsys, "roofline", copy_blocked, "--html", page)
    assert code == 0, err
    assert out.splitlines() == [f"wrote {page} ({page.stat().st_size / 1024:,.0f} KiB)"]
    code, out, _ = run_cli(capsys, "roofline", copy_blocked, "--html", page, "--format", "text")
    assert code == 0 and "ncu findings" in out  # asked for: the report too


def test_a_type_in_an_elementwise_name_does_not_override_the_flop_counters(
    tmp_path: Path,
) -> None:
    # No tensor metric in the CSV, HFMA counted: `Half` in an elementwise kernel's name says
    # nothing about its math unit, so the FLOP counters decide (fp16, placed by its FLOPs).
    metrics = [m for m in RAW_METRICS if m[0] != "sm__inst_executed_pipe_tensor.sum"]
    values = [A100, *HGEMM[:8], *HGEMM[9:]]
    name = "at::native::vectorized_elementwise_kernel<4, FillFunctor<c10::Half>>"
    path = tmp_path / "half.csv"
    path.write_text(raw_csv(metrics, [(name, values)]), encoding="utf-8")
    (k,) = analyze_roofline(read_ncu_csv(str(path))).kernels
    assert (k.precision, k.precision_basis, k.bound_basis) == ("fp16", "FLOP counters", "roofline")
