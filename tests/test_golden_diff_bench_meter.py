"""`badput diff`, `badput bench` and the meter summary, rendered at 80, 100 and 160 columns.

Each output is compared with a reviewed golden file (`BADPUT_REGEN_GOLDEN=1` rewrites them;
review the diff), and checked on its own: every line fits the width, no number stands beside
an ellipsis, and the numbers of the data are printed whole.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from badput.bench.ab import ABResult, MetricResult, Policy
from badput.bench.api import Benchmark, Case
from badput.bench.runner import CaseResult, RunResult
from badput.bench.stats import Decision
from badput.bench.store import Store
from badput.meter import Meter
from badput.report.bench_report import render_ab, render_run
from badput.report.meter_report import render_summary
from badput.report.units import fits_numbers
from synth import run_cli

GOLDEN = Path(__file__).parent / "golden"
WIDTHS = (80, 100, 160)
RESNET = "kineto-resnet50"
RESNET_A = "worker0.1623143089861.pt.trace.json.gz"
RESNET_B = "worker0.1623143566756.pt.trace.json.gz"
BERT = "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz"
VIT = "tracelens-h100/Falconsai_nsfw_image_detection__1016002.json.gz"
MS = 1_000_000


def _check_lines(text: str, width: int) -> None:
    for line in text.splitlines():
        assert cell_len(line.rstrip()) <= width, f"over {width} columns: {line!r}"
        assert fits_numbers(line), f"a number next to an ellipsis: {line!r}"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("BADPUT_REGEN_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


# ---- diff ------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_of_two_resnet_windows_matches_golden(
    width: int,
    shared_traces: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.chdir(shared_traces / RESNET)  # relative names: the golden holds no path
    code, out, err = run_cli(capsys, "diff", RESNET_A, RESNET_B)
    assert code == 0, err
    _check_lines(out, width)
    _golden(f"diff_resnet50_windows_{width}.txt", out)


def _kernel_numbers(doc: dict[str, Any]) -> list[str]:
    """The cells of every kernel row the text diff shows, as it formats them."""
    cells = []
    for d in doc["devices"]:
        for group in ("slower", "faster", "appeared", "disappeared"):
            for k in d["kernels"][group]:
                cells += [
                    f"{k['count_before']:,} → {k['count_after']:,}",
                    f"{k['per_step_before_us']:,.1f} → {k['per_step_after_us']:,.1f}",
                    f"{k['delta_per_step_us']:+,.1f}",
                ]
    return cells


@pytest.mark.parametrize("width", [80, 100, 120, 160])
@pytest.mark.parametrize("pair", [(f"{RESNET}/{RESNET_A}", f"{RESNET}/{RESNET_B}"), (BERT, VIT)])
def test_diff_prints_every_kernel_number_whole(
    width: int,
    pair: tuple[str, str],
    shared_traces: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reported bug: at 120 columns `catego…`, `162 → 1…`, `13,459.3 → 14,475…`; at 80
    # nearly every number ended in `…`.
    monkeypatch.chdir(shared_traces)
    code, out, err = run_cli(capsys, "diff", *pair, "--format", "json")
    assert code == 0, err
    numbers = _kernel_numbers(json.loads(out))
    assert numbers
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run_cli(capsys, "diff", *pair)
    assert code == 0, err
    for line in out.splitlines():
        assert cell_len(line.rstrip()) <= width, line
    for cell in numbers:
        assert cell in out, cell
    assert "catego…" not in out
    # Low-value columns may drop to make room, and the output says which.
    if "mean us" not in out:
        assert "columns left out to fit the terminal: mean us" in out


def test_diff_html_alone_writes_only_the_page(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "diff.html"
    a, b = shared_traces / RESNET / RESNET_A, shared_traces / RESNET / RESNET_B
    code, out, err = run_cli(capsys, "diff", a, b, "--html", page)
    assert code == 0, err
    assert re.fullmatch(rf"wrote {re.escape(str(page))} \(\d+ KiB\)\n", out), out
    html = page.read_text(encoding="utf-8")
    assert "<html" in html
    # The diff page names each side's GPU (the report lacked them): both traces ran on a V100.
    assert html.count("Tesla V100-DGXS-32GB") >= 2
    # An explicit format still prints the report as well.
    code, out, _ = run_cli(capsys, "diff", a, b, "--html", page, "--format", "text")
    assert code == 0 and "goodput" in out and "wrote" not in out
    code, out, _ = run_cli(capsys, "diff", a, b, "--html", page, "--format", "json")
    assert code == 0 and json.loads(out)["schema"] == "badput.diff/1"


# ---- bench -----------------------------------------------------------------------------------


def _ab_result() -> ABResult:
    def r(benchmark: str, metric: str, decision: Decision, effect: float) -> MetricResult:
        return MetricResult(
            benchmark=benchmark,
            metric=metric,
            decision=decision,
            effect=effect,
            ci=(effect - 0.031, effect + 0.042),
            p_value=0.000977,
            p_adjusted=0.00293,
            rounds=30,
            higher_is_better=metric.endswith("per_s"),
            base=[1.0] * 30,
            head=[1.0 + effect] * 30,
        )

    return ABResult(
        [
            r(
                "tests/bench/test_training.py::test_resnet50_step[batch=256]",
                "wall_s",
                Decision.REGRESSION,
                0.1234,
            ),
            r(
                "tests/bench/test_training.py::test_resnet50_step[batch=256]",
                "resnet50/samples_per_s",
                Decision.IMPROVEMENT,
                -0.0567,
            ),
            r("dataloader", "wall_s", Decision.NO_CHANGE, 0.0012),
            r("dataloader", "peak_bytes", Decision.INCONCLUSIVE, 0.0489),
        ],
        Policy(rounds=10, max_rounds=30),
        looks=3,
        elapsed_s=16.25,
    )


def _run_result() -> RunResult:
    def bench(name: str, metric: str) -> Benchmark:
        return Benchmark(name, lambda: None, {}, None, metric, None, 1, 3)

    matmul = bench("matmul_throughput_with_a_long_benchmark_name", "wall_s")
    allocs = bench("allocations", "allocated_bytes_per_step")
    return RunResult(
        "benchmarks/bench_example.py",
        5,
        [
            CaseResult(
                Case(matmul, {"n": 4096, "dtype": "bf16"}),
                [0.012345, 0.012402, 0.012299, 0.012511, 0.012377],
            ),
            CaseResult(Case(allocs, {}), [1_073_741_824.0] * 5),
            CaseResult(Case(bench("broken", "wall_s"), {}), [], error="boom"),
        ],
        elapsed_s=12.5,
        python="3.11",
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_ab_and_run_tables_match_golden(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    console = Console()
    render_ab(_ab_result(), console)
    console.print()
    render_run(_run_result(), console)
    out = capsys.readouterr().out
    _check_lines(out, width)
    for number in ("+12.3 %", "[+9.2 %, +16.5 %]", "-5.7 %", "0.00293", "1.07374e+09",
                   "12.4 ms"):  # fmt: skip
        assert number in out, number
    # Benchmark ids are what --filter takes: they wrap where they must, never shortened.
    assert "…" not in out
    lines = out.splitlines()
    col = lines[1].index("metric")  # the benchmark column of the A/B table, header on line 2
    first = "".join(line[:col].strip() for line in lines[2 : lines.index("")])
    assert first.count("tests/bench/test_training.py::test_resnet50_step[batch=256]") == 2
    _golden(f"bench_ab_run_{width}.txt", out)


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_check_and_history_match_golden(
    width: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    expected = _write(
        tmp_path / "expected.json",
        {
            "schema": "badput.bench.expected/1",
            "benchmarks": {
                "memory/peak_allocated_bytes[model=llama-7b,seq=4096]": {
                    "peak_bytes": {"value": 17_179_869_184, "rel_tol": 0.01}
                },
                "kernels": {"launches": {"value": 1516, "abs_tol": 0}},
            },
        },
    )
    results = _write(
        tmp_path / "results.json",
        {
            "benchmarks": {
                "memory/peak_allocated_bytes[model=llama-7b,seq=4096]": {
                    "peak_bytes": 18_253_611_008
                },
                "kernels": {"launches": 1516},
            }
        },
    )
    code, out, _ = run_cli(capsys, "bench", "check", expected, results)
    assert code == 1
    # A results store planted with a step: torch 2.4.0 -> 2.5.0 makes `train` 10 % slower.
    store = tmp_path / "bench.sqlite"
    hardware = {"cpu": {"arch": "x86_64", "model": "Test CPU", "logical_cpus": 4},
                "memory_gib": 16}  # fmt: skip
    software = {"python": "CPython 3.11.7", "badput": "0.1.0", "numpy": "1.26.4"}
    rng = random.Random(1)
    with Store.open(str(store)) as s:
        for i in range(24):
            values = [(1.0 if i < 12 else 1.1) * (1 + rng.gauss(0, 0.005)) for _ in range(5)]
            soft = {**software, "torch": "2.4.0" if i < 12 else "2.5.0"}
            s.record_values("train", "wall_s", values, unit="s", commit=f"c{i:02}",
                            hardware=hardware, software=soft)  # fmt: skip
    code, history, err = run_cli(capsys, "bench", "history", "--benchmark", "train",
                                 "--store", store)  # fmt: skip
    assert code == 0, err
    text = out + "\n" + history
    _check_lines(text, width)
    for number in ("17,179,869,184", "18,253,611,008", "1,516"):
        assert number in out, number
    if "+1,073,741,824 (+6.25 %)" not in out:  # dropped whole, and named, never cut
        assert "columns left out to fit the terminal: allowed, change" in out
        assert "+1,073" not in out
    assert "regression at point 12" in " ".join(history.split())
    _golden(f"bench_check_history_{width}.txt", text)


# ---- meter -----------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += round(ms * MS)


def _summaries() -> list[dict[str, Any]]:
    """Two summaries from a fake clock: every figure measured, and most of them missing."""
    clock = _Clock()
    full = Meter(clock=clock, gpu_name="NVIDIA H100 80GB HBM3", precision="bf16",
                 flops_per_step=4.9475e12, gpu_timing=False, distributed=False,
                 report_every=10**9)  # fmt: skip
    clock.advance_ms(1500)  # start-up
    for i in range(11):
        clock.advance_ms(3)  # the batch
        full.add_time("data_wait", 3 * MS)
        with full.step(samples=256, tokens=256 * 2048):
            clock.advance_ms(10 + (i % 3))
        if i == 5:
            with full.phase("checkpoint_to_object_storage_with_a_long_name"):
                clock.advance_ms(40)
    a = full.summary()
    full.close()
    clock = _Clock()
    bare = Meter(clock=clock, gpu_timing=False, distributed=False, report_every=10**9)
    for _ in range(3):
        with bare.step():
            clock.advance_ms(20)
        clock.advance_ms(2)
    b = bare.summary()
    bare.close()
    return [a, b]


@pytest.mark.parametrize("width", WIDTHS)
def test_meter_summary_matches_golden(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    # The bare loop uses no torch: earlier tests in the session may have imported it.
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    console = Console()
    full, bare = _summaries()
    render_summary(full, console)
    console.print()
    render_summary(bare, console)
    out = capsys.readouterr().out
    _check_lines(out, width)
    words = " ".join(out.split())
    assert f"goodput {100 * full['goodput']:.1f} %" in words
    assert f"{full['samples_per_s']:,.1f} samples/s" in words
    assert f"MFU {100 * full['mfu']:.1f} % of 989.5 TFLOP/s (bf16, NVIDIA H100 80GB HBM3)" in words
    assert "samples/s: not measured, no step was given a sample count" in words
    assert "precision unknown" in words
    _golden(f"meter_summary_{width}.txt", out)
