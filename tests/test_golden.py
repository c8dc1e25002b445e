"""The text report, rendered at fixed widths, against reviewed golden files.

Regenerate with `make golden` after a deliberate change, and review the diff: no `…` beside a
digit, no two different names printed alike, every line within its width.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rich.cells import cell_len

from badput.analysis import analyze_trace
from badput.cli.app import main
from badput.report.units import fits_numbers
from badput.trace import load_trace
from synth import run_cli

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
WIDTHS = (80, 100, 160)


def _matches_golden(text: str, name: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("BADPUT_REGEN_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def assert_fits(text: str, width: int) -> None:
    """Every line within `width` columns, and no number cut (a digit, `,` or `.` by a `…`)."""
    for line in text.splitlines():
        assert cell_len(line) <= width, f"over {width} columns: {line!r}"
        assert fits_numbers(line), f"a number may be cut: {line!r}"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("analyze_resnet50.txt", [str(DEMO)]),
        ("analyze_resnet50_top3_steps6-8.txt", [str(DEMO), "--top", "3", "--window", "steps:6-8"]),
    ],
)
def test_text_report_matches_golden(tmp_path: Path, name: str, args: list[str]) -> None:
    out = tmp_path / name
    assert main(["analyze", *args, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert_fits(text, 120)  # --out writes 120 columns
    _matches_golden(text, name)


@pytest.mark.parametrize("width", WIDTHS)
def test_demo_at_terminal_widths(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """`make demo` at 80 columns (and 100, 160) shows every number whole."""
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run_cli(capsys, "analyze", DEMO)
    assert code == 0, err
    assert_fits(out, width)
    # The numbers a person reads first are there whole: goodput, window, the top kernel.
    assert "Goodput 55.5 %" in out and "window 1,065.55 ms (6 steps," in out
    assert re.search(r"dgrad_engine<fp32, 512, [^\n]*gemm +162 +80\.76 +498\.5", out), out
    # Every shape of the top ops is printed whole: at 80 columns they wrap under the op's name
    # (they were cut to `32x1024x14x14 …`).
    (d,) = analyze_trace(load_trace(str(DEMO)))
    assert d.model is not None
    for row in d.model.ops[:10]:
        for dims in row.input_dims:  # type: ignore[attr-defined]
            if isinstance(dims, list) and len(dims) >= 2:
                assert re.search(rf"(?<![\dx]){'x'.join(map(str, dims))}(?![\dx])", out), dims
    _matches_golden(out, f"analyze_resnet50_w{width}.txt")


@pytest.mark.parametrize("width", WIDTHS)
def test_multirank_job_at_terminal_widths(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    shared_traces: Path,
    width: int,
) -> None:
    """Eight ranks of a DLRM job: per-GPU sections, the rank and collectives tables."""
    monkeypatch.setenv("COLUMNS", str(width))
    ranks = shared_traces / "param-dlrm-8rank"
    code, out, err = run_cli(capsys, "analyze", ranks)
    assert code == 0, err
    assert_fits(out, width)
    # Rank 1's row of the rank table whole (numbers as its JSON report gives them).
    assert re.search(r"\n +1 +5\.7 % +59\.5 % +0\.1 % +34\.8 % +18\.58 +11\.34 ", out), out
    assert "1 steps" not in out and "window 14.46 ms (1 step," in out
    _matches_golden(out.replace(str(shared_traces), "<traces>"), f"analyze_dlrm8_w{width}.txt")


def test_markdown_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    """The Markdown report: full kernel names where they fit, findings with their evidence."""
    code, out, err = run_cli(capsys, "analyze", DEMO, "--format", "markdown")
    assert code == 0, err
    assert fits_numbers(out)
    _matches_golden(out, "analyze_resnet50.md")
