"""Tables and prose that fit the terminal: numbers never cut, names give way, none alike.

Every reference Kineto trace is analysed once and its text report rendered at 60 to 160
columns: each line must fit, no digit may stand beside a `…` (a cut number), and the kernel
table must never print two different kernels alike.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from badput.diagnose import JobResult
from badput.report.table import Col, fitted
from badput.report.text import _elide_parts, _shapes, render_job, wrap_text
from badput.report.units import elide_middle, fits_numbers

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
TRACES = {
    "demo": None,
    "falcon": "tracelens-h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "qwen": "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "bert": "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "dlrm-8rank": "param-dlrm-8rank",
    "mi250": "hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "edge-before": "kineto-edge/before_fix_trace.json",
    "edge-metrics": "kineto-edge/gpu_metrics_input.json",
}
WIDTHS = (60, 80, 100, 160)
_JOBS: dict[str, JobResult] = {}


def _job(name: str, shared_traces: Path) -> JobResult:
    from badput.cli.jobs import run_job

    if name not in _JOBS:
        rel = TRACES[name]
        path = DEMO if rel is None else shared_traces / rel
        _JOBS[name] = run_job([str(path)], window=None, top=10)
    return _JOBS[name]


def _render(job: JobResult, width: int) -> str:
    buf = io.StringIO()
    render_job(job, Console(file=buf, width=width, no_color=True, force_terminal=False), top=10)
    return buf.getvalue()


@pytest.mark.parametrize("name", TRACES)
def test_reports_fit_every_width(name: str, shared_traces: Path) -> None:
    job = _job(name, shared_traces)
    for width in WIDTHS:
        text = _render(job, width)
        for line in text.splitlines():
            assert cell_len(line) <= width, f"{name} at {width}: {line!r}"
            assert fits_numbers(line), f"{name} at {width}, a cut number: {line!r}"


def _kernel_rows(text: str) -> list[str]:
    """The name cells of every kernel table in a rendered report."""
    names: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("top GPU operations"):
            continue
        for row in lines[i + 1 :]:
            if row.startswith("totals:") or not row.strip():
                break
            names.append(re.split(r" {2,}", row.strip())[0])
    return names


@pytest.mark.parametrize("name", ["demo", "falcon", "qwen", "bert", "mi250"])
def test_kernel_table_never_prints_two_kernels_alike(name: str, shared_traces: Path) -> None:
    job = _job(name, shared_traces)
    (device,) = [d for o in job.analysed for d in o.devices]
    originals = [k.name for k in device.kernels[:10]]
    for width in (80, 100):
        shown = _kernel_rows(_render(job, width))
        assert len(shown) == len(originals), shown
        printed: dict[str, str] = {}
        for text, original in zip(shown, originals, strict=True):
            assert printed.setdefault(text, original) == original, (width, text)


def test_numbers_keep_their_width_and_names_give_way() -> None:
    rows = [["a_very_long_kernel_name_" * 4, "1,234,567.89", "98.7 %"]] * 2
    rows[1] = ["a_very_long_kernel_name_" * 3 + "x", "12.00", "1.0 %"]
    cols = [Col("name", elastic=True, floor=8), Col("ms", right=True), Col("share", right=True)]
    buf = io.StringIO()
    Console(file=buf, width=40, no_color=True).print(fitted(cols, rows, 40).table)
    out = buf.getvalue()
    assert "1,234,567.89" in out and "98.7 %" in out and "12.00" in out
    assert all(cell_len(line) <= 40 for line in out.splitlines())
    names = [line.split("  ")[0] for line in out.splitlines()[1:]]
    assert len(set(names)) == 2, names  # two different names, printed differently


def test_low_value_columns_drop_before_numbers_wrap() -> None:
    cols = [
        Col("name", elastic=True, floor=10),
        *(Col(f"value {i}", right=True) for i in range(6)),
        Col("busbw GB/s\n(median)", right=True, drop=1),
    ]
    rows = [["kernel", *(f"{1000 + i:,}.25" for i in range(6)), "123.4"]]
    fit = fitted(cols, rows, 70)  # 78 columns in all: the numbers stay, busbw goes
    assert fit.dropped == ["busbw GB/s\n(median)"]
    assert fit.note() == "columns left out to fit the terminal: busbw GB/s (median)"
    # A two-line header is as wide as its longest line: with room the column stays.
    assert fitted(cols, rows, 80).dropped == []


@pytest.mark.parametrize(
    ("text", "width", "want"),
    [
        ("Qwen2Model_0/Qwen2DecoderLayer_13/Qwen2MLP_13", 24, "Qwen2Model_…Qwen2MLP_13"),
        ("sm90_gemm_tilesize128x64x64_warpgroup", 24, "sm90_gemm_ti…_warpgroup"),
        ("aaaa1234567bbbb", 10, "aaaa…bbbb"),
        ("1,234.5678 ms", 8, "… ms"),
    ],
)
def test_elide_middle_never_cuts_a_number(text: str, width: int, want: str) -> None:
    out = elide_middle(text, width)
    assert out == want and len(out) <= width and fits_numbers(out)


def test_shapes_leave_out_whole_shapes_and_stay_apart() -> None:
    a = "32x256x14x14 · 32x256x14x14 · 1024x256x1x1"
    b = "32x256x14x14 · 32x256x14x14 · 256x256x3x3"
    assert _elide_parts(a, 27) == "32x256x14x14 … 1024x256x1x1"
    shown = _shapes([a, b], 20)
    assert len(set(shown)) == 2 and all(fits_numbers(s) and len(s) <= 20 for s in shown)


def test_wrap_keeps_a_number_with_its_unit() -> None:
    text = "GPU starved by the host: 17.54 ms idle per step (9.9 %) between kernels"
    for width in range(20, 60):
        lines = wrap_text(text, width, "   ").splitlines()
        assert all(len(line) <= width for line in lines), (width, lines)
        assert not any(line.endswith(("9.9", "17.54")) for line in lines), (width, lines)
        assert " ".join(line.strip() for line in lines) == text
