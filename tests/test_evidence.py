"""Findings show their key evidence, with units, in the text and Markdown reports.

Also: shares in the evidence are percentages with a unit; counts in prose agree in number
(`1 step`, never `1 steps`); and the kernel table says what its totals count against the
window the breakdown is clipped to.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from badput.diagnose.findings import Evidence
from badput.report.evidence import evidence_value
from badput.report.units import plural
from synth import TraceBuilder, run_cli
from test_diagnose import jitter_trace, new_trace, rank_traces


@pytest.mark.parametrize(
    ("n", "word", "want"),
    [(0, "step", "0 steps"), (1, "step", "1 step"), (2, "rank", "2 ranks"),
     (1_234, "kernel", "1,234 kernels"), (1.0, "GPU", "1 GPU"), (2.5, "copy", "2.5 copys")],
)  # fmt: skip
def test_plural(n: float, word: str, want: str) -> None:
    assert plural(n, word) == want
    assert plural(3, "copy", "copies") == "3 copies"


def test_shares_are_percent_with_one_decimal() -> None:
    assert evidence_value(Evidence(62.5, "%")) == "62.5 %"
    assert evidence_value(Evidence(50, "%")) == "50.0 %"
    assert evidence_value(Evidence(1.234, "x")) == "1.23x"


def test_memory_shares_carry_a_unit(tmp_path: Path) -> None:
    """`segments_below_half_use`, `forward_share_of_peak` were bare fractions (0.5)."""
    from badput.analysis.memory import analyze_snapshot
    from badput.diagnose.memory import FULL_RECOMPUTE_KEPT, diagnose_memory
    from badput.trace.snapshot import load_snapshot
    from test_memory_snapshot import _write, known_snapshot

    dx = diagnose_memory(analyze_snapshot(load_snapshot(str(_write(tmp_path, known_snapshot())))))
    found = {f.id: f for f in dx.findings}
    frag, act = found["memory-fragmentation"], found["activation-memory"]
    # 1 of 2 segments below half use; 8 of 15 MiB alive at the peak from forward.
    assert frag.evidence["segments_below_half_use"] == Evidence(50.0, "%")
    assert act.evidence["forward_share_of_peak"] == Evidence(round(100 * 8 / 15, 1), "%")
    assert act.evidence["kept_with_full_recompute"] == Evidence(
        round(100 * FULL_RECOMPUTE_KEPT, 1), "%"
    )
    assert evidence_value(act.evidence["forward_share_of_peak"]) == "53.3 %"


def test_step_jitter_text_and_markdown_list_the_outlier_steps(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fix says "look at the outlier steps listed in the evidence": they are printed."""
    monkeypatch.setenv("COLUMNS", "100")
    path = jitter_trace(new_trace(), 6, 3, 500).write(tmp_path / "t.json")
    code, text, err = run_cli(capsys, "analyze", path)
    assert code == 0, err
    # Steps of 1000 us but ProfilerStep#4 (1500 us): median 1.00 ms, max 1.50 ms.
    line = next(x for x in text.splitlines() if x.strip().startswith("evidence: outlier steps"))
    assert line.strip().startswith("evidence: outlier steps ProfilerStep#4 · grew most in worst")
    code, md, err = run_cli(capsys, "analyze", path, "--format", "markdown")
    assert code == 0, err
    assert "   Evidence: outlier steps ProfilerStep\\#4 · grew most in worst step idle: " in md
    assert "median step 1 ms · p90 step 1.50 ms" in md


def test_straggler_evidence_says_what_the_slow_rank_does(tmp_path: Path, capsys: Any) -> None:
    """The fix says "the evidence shows what it spends more time on": it is printed."""
    paths = rank_traces(tmp_path, [600, 650, 900, 700])
    code, text, err = run_cli(capsys, "analyze", *paths)
    assert code == 0, err
    flat = " ".join(text.split())
    assert "evidence: straggler rank 2 · straggler spends more on compute +0.25 ms" in flat


def test_demo_findings_show_evidence_with_units(capsys: Any) -> None:
    demo = Path(__file__).resolve().parents[1] / "src/badput/_data"
    code, text, err = run_cli(capsys, "analyze", demo / "resnet50_v100_workers0.pt.trace.json.gz")
    assert code == 0, err
    flat = " ".join(text.split())
    assert "evidence: GPU idle in dataloader per step 59.26 ms" in flat
    assert "share of compute 62.5 %" in flat and "FP32 peak 15.70 TFLOP/s" in flat


def _straddling_trace(tmp_path: Path) -> list[str]:
    """A window [0, 1000) us; a 400 us kernel from 900 us runs 300 us past its end.

    Returns the trace's path and the `--window` option for it.
    """
    b = TraceBuilder()
    b.profiler_step(1, 0, 1000)
    b.launch("gemm_kernel", cpu=(10, 20), gpu=(100, 500))
    b.launch("gemm_kernel", cpu=(30, 40), gpu=(900, 1300))
    path = b.write(tmp_path / "straddle.json")
    return [str(path), "--window", f"us:{b.abs_us(0)}-{b.abs_us(1000)}"]


def test_kernel_table_says_its_totals_are_not_clipped(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    args = _straddling_trace(tmp_path)
    code, text, err = run_cli(capsys, "analyze", *args)
    assert code == 0, err
    # The breakdown is clipped to the window: 400 + 100 us of compute in 1000 us; the kernel
    # table counts both kernels whole: 800 us.
    assert re.search(r"\ncompute +0\.50 +50\.0 %", text), text
    assert re.search(r"\ngemm_kernel +gemm +2 +0\.80 +400\.0", text), text
    flat = " ".join(text.split())
    assert "totals: whole GPU operations that start in the window, not clipped to it" in flat
    # The second kernel runs 300 us past the window's end: the note gives that amount.
    assert "0.30 ms of them runs past the window's end" in flat
    code, md, err = run_cli(capsys, "analyze", *args, "-f", "markdown")
    assert "Totals: whole GPU operations that start in the window, not clipped to it" in md
    assert "0.30 ms of them runs past the window's end" in md


def test_one_step_in_words(tmp_path: Path, capsys: Any) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 1000)
    b.launch("gemm_kernel", cpu=(10, 20), gpu=(100, 500))
    path = b.write(tmp_path / "one.json")
    code, text, err = run_cli(capsys, "analyze", path)
    assert code == 0, err
    assert "window 1.00 ms (1 step, CPU ProfilerStep spans" in text
    assert not re.search(r"\b1 (steps|ranks|kernels|traces|GPUs)\b", text)
    code, md, err = run_cli(capsys, "analyze", path, "-f", "markdown")
    assert "(1 step, CPU ProfilerStep spans" in md


def test_job_level_findings_lead_text_and_markdown(tmp_path: Path) -> None:
    """A job-level finding (`device == -1`) ranked last still comes first, in every format.

    The text and Markdown reports put only a finding with id "straggler" first; HTML used
    `device == -1` as well. Now all three use `Finding.job_level`.
    """
    from rich.console import Console

    from badput.diagnose import Finding
    from badput.report.markdown import analysis_markdown
    from badput.report.text import render_job
    from test_html_report import _job_with

    trace = str(tmp_path / "t.json")
    whole = Finding(
        id="job-rule", title="the job finding", severity="low", evidence={}, savings_ns=1.0,
        savings_share=0.001, fix=["do it"], refs=[], trace=trace, rank=0, device=-1,
    )  # fmt: skip
    job = _job_with(tmp_path, whole)  # writes the trace above; `whole` ranked last
    assert job.diagnosis.ranked[0].id == "data-loading"
    assert whole.job_level and not job.diagnosis.ranked[0].job_level
    console = Console(width=120, record=True, force_terminal=False)
    render_job(job, console)
    text = console.export_text()
    assert "job-rule" in text and text.index("job-rule") < text.index("data-loading")
    md = analysis_markdown(job)
    assert "**job-rule**" in md and md.index("**job-rule**") < md.index("**data-loading**")
