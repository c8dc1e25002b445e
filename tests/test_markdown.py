"""Markdown for CI step summaries: `analyze --format markdown`, the gates, `bench --markdown`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from badput.cli.app import main
from badput.report.markdown import md_escape
from synth import TraceBuilder, run_cli

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
# A pipe splits a GFM table row unless a backslash escapes it.
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _tables(text: str) -> list[list[list[str]]]:
    """Every GFM table of `text`: rows of cells, the delimiter row left out."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in _CELL_SPLIT.split(line)[1:-1]]
            if current is None:
                current = []
                tables.append(current)
            if not all(re.fullmatch(r"-+:?", c) for c in cells):
                current.append(cells)
        else:
            current = None
    return tables


def _well_formed(text: str) -> None:
    for table in _tables(text):
        widths = {len(row) for row in table}
        assert len(widths) == 1, table[0]
    assert not re.search(r"(?<!\\)<", text), "raw < would be read as HTML"


def _markdown(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    code, out, err = run_cli(capsys, "analyze", *args, "--format", "markdown")
    assert code == 0, err
    return out


def test_resnet50_same_numbers_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    text = _markdown(capsys, DEMO, "--top", "3")
    code, out, _ = run_cli(capsys, "analyze", DEMO, "--format", "json", "--top", "3")
    assert code == 0
    (dev,) = json.loads(out)["devices"]
    _well_formed(text)
    # The headline: the TensorBoard plugin's reference for this trace is Kernel 55.51 %.
    assert "**Goodput 55.5 %** on 1 GPU (Tesla V100-DGXS-32GB) · median step 177.44 ms" in text
    assert f"{100 * dev['goodput']:.1f} %" == "55.5 %"
    assert dev["step_time_us"]["median"] == pytest.approx(177_440, abs=5)
    tables = _tables(text)
    breakdown = {row[0]: row[1:] for row in tables[0]}
    win = float(dev["window_us"])
    for key in ("compute", "idle"):
        us = float(dev["breakdown_us"][key])
        assert breakdown[key] == [f"{us / 1000:,.2f}", f"{100 * us / win:.1f} %"]
    assert breakdown["compute"] == ["591.53", "55.5 %"]
    assert breakdown["└ waiting on the DataLoader"] == ["355.57", "33.4 %"]
    # findings: the text report's order and savings, each with its first fix
    findings = [line for line in text.splitlines() if re.match(r"\d\. \*\*", line)]
    assert [re.match(r"\d\. \*\*([a-z-]+)\*\*", f).group(1) for f in findings] == [  # type: ignore[union-attr]
        f["id"] for f in dev["findings"]
    ]
    first = dev["findings"][0]
    assert first["id"] == "data-loading"
    assert (
        f"Save ~{first['savings_us'] / 1000:,.2f} ms/step ({first['savings_pct']:.1f} %)"
        in (findings[0])
    )
    assert (
        "Save ~59.26 ms/step (33.4 %)" in findings[0] and "Fix: num\\_workers is 0" in findings[0]
    )
    kernels = tables[1]
    assert kernels[0] == ["top GPU operations", "category", "count", "total ms", "mean us"]
    assert len(kernels) == 1 + 3  # --top 3
    assert [int(r[2].replace(",", "")) for r in kernels[1:]] == [k["count"] for k in dev["kernels"]]
    assert kernels[1][0] == "cudnn::detail::dgrad\\_engine\\<fp32, 512, 6, 5, 3, 3, 3, F\\>"


def test_top_zero_is_capped(capsys: pytest.CaptureFixture[str]) -> None:
    text = _markdown(capsys, DEMO, "--top", "0")
    _, out, _ = run_cli(capsys, "analyze", DEMO, "--format", "json", "--top", "0")
    n = len(json.loads(out)["devices"][0]["kernels"])
    assert n > 50  # the demo trace has more operations than one table shows
    assert len(_tables(text)[1]) == 1 + 50
    assert f"{n - 50} more operations in `--format json`." in text


def test_size_bound_cuts_on_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    from badput.cli.jobs import Executor, run_job
    from badput.report.markdown import analysis_markdown

    text = _markdown(capsys, DEMO)
    assert len(text.encode()) < 16_000  # far below GitHub's 1 MiB per step
    job = run_job(
        [str(DEMO)], window=None, top=10, executor=Executor.LOCAL, jobs=None, address=None
    )
    full = analysis_markdown(job)
    assert full == text
    cut = analysis_markdown(job, max_bytes=2_000)
    assert len(cut.encode()) <= 2_000
    assert cut.endswith("_Report cut at 2,000 bytes; `--format json` has everything._\n")
    body = cut.split("\n_Report cut")[0]
    assert full.startswith(body)  # whole lines of the full report, nothing rewritten


def test_eight_ranks(capsys: pytest.CaptureFixture[str], shared_traces: Path) -> None:
    ranks = shared_traces / "param-dlrm-8rank"
    text = _markdown(capsys, ranks, "--top", "2")
    _, out, _ = run_cli(capsys, "analyze", ranks, "--format", "json", "--top", "2")
    doc = json.loads(out)
    _well_formed(text)
    goodputs = sorted(d["goodput"] for d in doc["devices"])
    assert len(goodputs) == 8
    assert "**Goodput 6.7 %** (median of 8 GPUs; min 5.7 % on rank 1, max 8.5 % on rank 7)" in text
    assert f"{100 * (goodputs[3] + goodputs[4]) / 2:.1f} %" == "6.7 %"
    assert "### Across 8 ranks (world size 8)" in text
    (straggler,) = doc["ranks"]["stragglers"]
    assert straggler["rank"] == 7
    assert "**Stragglers:** rank 7 (score 1.00, others wait 9.17 ms)" in text
    every = next(t for t in _tables(text) if t[0][:2] == ["rank", "goodput"])
    assert [row[0] for row in every[1:]] == [str(r) for r in range(8)]
    per_rank = {r["rank"]: r for r in doc["ranks"]["per_rank"]}
    for row in every[1:]:
        assert row[1] == f"{100 * per_rank[int(row[0])]['goodput']:.1f} %"
    collectives = next(t for t in _tables(text) if t[0][0] == "type")
    # DLRM's SendRecv kernels are its embedding all-to-all (their launching op says so).
    assert {row[0] for row in collectives[1:]} == {"all\\_reduce", "all\\_to\\_all"}


def _odd_trace(path: Path) -> Path:
    """A kernel whose name holds a pipe, backticks and stars; no ProfilerStep."""
    b = TraceBuilder("modern")
    b.launch("evil|kernel`x`*y*", cpu=(0, 5), gpu=(10, 110))
    b.launch("plain_kernel", cpu=(6, 9), gpu=(150, 200))
    return b.write(path / "odd.pt.trace.json")


def test_kernel_names_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert md_escape("a|b`c`<d>*e*_f_") == "a\\|b\\`c\\`\\<d\\>\\*e\\*\\_f\\_"
    assert md_escape("two\nlines") == "two lines"
    text = _markdown(capsys, _odd_trace(tmp_path))
    _well_formed(text)
    kernels = next(t for t in _tables(text) if t[0][0] == "top GPU operations")
    names = [row[0] for row in kernels[1:]]
    assert names == ["evil\\|kernel\\`x\\`\\*y\\*", "plain\\_kernel"]
    # window = GPU activity [10, 200) us: compute 100 + 50 us of 190
    assert "**Goodput 78.9 %** on 1 GPU" in text


def test_gates_exit_1_with_the_shortfall(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.md"
    code, _, err = run_cli(
        capsys, "analyze", DEMO, "--format", "markdown", "--out", out, "--min-goodput", "0.55"
    )
    assert (code, err) == (0, "")
    assert "### Gates: **PASS**" in out.read_text()
    code, _, err = run_cli(
        capsys, "analyze", DEMO, "--min-goodput", "0.6", "--max-step-time-ms", 200
    )
    assert code == 1
    assert err == (
        "badput: gate failed: GPU 0 of resnet50_v100_workers0.pt.trace.json.gz: goodput 55.5 % "
        "is below 60.0 % by 4.5 points\n"
    )
    code, _, err = run_cli(
        capsys, "analyze", DEMO, "--format", "markdown", "--out", out, "--max-step-time-ms", 170
    )
    assert code == 1
    assert "median step time 177.44 ms is above 170.00 ms by 7.44 ms (4.4 %)" in err
    gates = next(t for t in _tables(out.read_text()) if t[0][0] == "gate")
    assert gates[1] == [
        "--max-step-time-ms",
        "GPU 0 of resnet50\\_v100\\_workers0.pt.trace.json.gz",
        "<= 170.00 ms",
        "177.44 ms",
        "**FAIL**",
    ]
    assert "### Gates: **FAIL**: 1 of 1 gate checks" in out.read_text()
    # JSON output carries the checks under "gates" (only when a gate is asked for)
    code, out_json, err = run_cli(capsys, "analyze", DEMO, "-f", "json", "--min-goodput", "0.9")
    doc = json.loads(out_json)
    assert code == 1 and doc["devices"][0]["goodput"] == pytest.approx(0.5551, abs=5e-4)
    assert doc["gates"] == [
        {
            "gate": "--min-goodput",
            "where": "GPU 0 of resnet50_v100_workers0.pt.trace.json.gz",
            "limit": ">= 90.0 %",
            "measured": "55.5 %",
            "passed": False,
            "message": "GPU 0 of resnet50_v100_workers0.pt.trace.json.gz: goodput 55.5 % is "
            "below 90.0 % by 34.5 points",
        }
    ]
    code, out_json, _ = run_cli(capsys, "analyze", DEMO, "-f", "json")
    assert code == 0 and "gates" not in json.loads(out_json)


def test_gates_over_ranks(capsys: pytest.CaptureFixture[str], shared_traces: Path) -> None:
    ranks = shared_traces / "param-dlrm-8rank"
    code, out, err = run_cli(
        capsys,
        "analyze",
        ranks,
        "-f",
        "markdown",
        "--min-goodput",
        "0.07",
        "--max-step-time-ms",
        15,
    )
    assert code == 1
    # ranks 1, 3, 4 and 5: goodput 5.7-6.3 % and median steps 17.8-18.7 ms (see the rank table)
    assert "### Gates: **FAIL**: 8 of 16 gate checks" in out
    # (notes about the folder, such as its LICENSE left out, come on lines of their own)
    lines = [line for line in err.splitlines() if line.startswith("badput: gate failed:")]
    assert len(lines) == 8
    assert (
        lines[0] == "badput: gate failed: rank 1 GPU 1: goodput 5.7 % is below 7.0 % by 1.3 points"
    )
    assert lines[1] == (
        "badput: gate failed: rank 1 GPU 1: median step time 18.58 ms is above 15.00 ms "
        "by 3.58 ms (23.9 %)"
    )
    # every check failing: ten lines name GPUs, the last counts the rest
    code, _, err = run_cli(
        capsys, "analyze", ranks, "--min-goodput", "0.9", "--max-step-time-ms", 1
    )
    lines = [line for line in err.splitlines() if line.startswith("badput: gate failed:")]
    assert code == 1 and len(lines) == 11
    assert lines[-1] == "badput: gate failed: 6 more checks"


def test_gate_table_is_capped(capsys: pytest.CaptureFixture[str]) -> None:
    from badput.cli.jobs import Executor, run_job
    from badput.diagnose.gates import GateCheck
    from badput.report.markdown import analysis_markdown

    job = run_job([str(DEMO)], window=None, top=1, executor=Executor.LOCAL, jobs=None, address=None)
    gates = [
        GateCheck("--min-goodput", f"rank {i}", ">= 50.0 %", "55.5 %", i >= 55) for i in range(70)
    ]
    text = analysis_markdown(job, gates=gates)
    assert "### Gates: **FAIL**: 55 of 70 gate checks" in text
    table = next(t for t in _tables(text) if t[0][0] == "gate")
    assert len(table) == 1 + 50 and all(row[-1] == "**FAIL**" for row in table[1:])
    assert "20 more gate checks, 5 of them failed." in text


def test_gate_without_steps_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "analyze", _odd_trace(tmp_path), "--max-step-time-ms", 1000)
    assert code == 1
    assert "no ProfilerStep in the window" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-goodput", "80"], "--min-goodput is a fraction in [0, 1]"),
        (["--max-step-time-ms", "0"], "--max-step-time-ms must be > 0"),
        (["--append"], "--append needs --out"),
        (["--append", "--out", "x.json", "-f", "json"], "--append cannot add a second JSON"),
    ],
)
def test_bad_gate_options_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, "analyze", DEMO, *args)
    assert code == 2
    assert message in " ".join(err.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["diff", str(DEMO), str(DEMO)],
        ["doctor"],
        ["estimate", "gpus"],
    ],
)
def test_commands_without_markdown_refuse_it(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run_cli(capsys, *argv, "--format", "markdown")
    assert code == 2
    flat = " ".join(err.replace("│", " ").split())  # the error box may wrap the choices
    assert "markdown" in flat and "'text', 'json'" in flat


def test_step_summary_is_appended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# Earlier step output\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    for _ in range(2):
        code, _, _ = run_cli(capsys, "analyze", DEMO, "-f", "markdown", "--out", summary)
        assert code == 0
    text = summary.read_text()
    assert text.startswith("# Earlier step output\n\n## badput analyze\n")
    assert text.count("## badput analyze") == 2
    # any other file is replaced, unless --append
    other = tmp_path / "other.md"
    for extra in ([], [], ["--append"]):
        assert run_cli(capsys, "analyze", DEMO, "-f", "markdown", "--out", other, *extra)[0] == 0
    assert other.read_text().count("## badput analyze") == 2
    plain = tmp_path / "report.txt"
    for _ in range(2):
        assert run_cli(capsys, "analyze", DEMO, "--out", plain, "--append")[0] == 0
    assert plain.read_text().count("Goodput 55.5 %") == 2


def _cmd(value: float) -> str:
    return f'{sys.executable} -c "print(\'{{\\"t\\": {value}}}\')"'


def test_bench_ab_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "ab.md"
    common = ["--metric", "t", "--rounds", "10", "--max-rounds", "10", "--markdown", str(md)]
    code = main(["bench", "ab", "--base", _cmd(1.0), "--head", _cmd(1.25), *common])
    assert code == 1
    text = md.read_text()
    _well_formed(text)
    assert text.startswith("## badput bench ab: **FAIL**\n")
    assert "1 regression, 0 improvements, 0 no change, 0 inconclusive (exit code 1)." in text
    (table,) = _tables(text)
    assert table[0] == [
        "benchmark", "metric", "base", "head", "change", "CI", "p (Holm)", "rounds", "verdict"
    ]  # fmt: skip
    # 10 rounds all one way: exact one-sided Wilcoxon p = 1/1024
    assert table[1] == [
        "command", "t", "1", "1.25", "+25.0 %", "[+25.0 %, +25.0 %]", "0.000977", "10",
        "**regression**",
    ]  # fmt: skip
    code = main(["bench", "ab", "--base", _cmd(2.0), "--head", _cmd(2.0), *common])
    assert code == 0
    text = md.read_text()
    assert text.startswith("## badput bench ab: **PASS**\n")
    assert _tables(text)[0][1][-1] == "no change"


def test_bench_check_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = tmp_path / "expected.json"
    expected.write_text(
        json.dumps(
            {
                "schema": "badput.bench.expected/1",
                "benchmarks": {
                    "peak[n=1]": {"allocs": {"value": 1000, "rel_tol": 0.1}},
                    "count": {"kernels": {"value": 7}},
                },
            }
        )
    )
    measured = tmp_path / "measured.json"
    measured.write_text(
        json.dumps({"benchmarks": {"peak[n=1]": {"allocs": 1200}, "count": {"kernels": 7}}})
    )
    md = tmp_path / "check.md"
    assert main(["bench", "check", str(expected), str(measured), "--markdown", str(md)]) == 1
    text = md.read_text()
    _well_formed(text)
    assert text.startswith("## badput bench check: **FAIL**\n")
    assert "1 pass, 1 regression (exit code 1)." in text
    (table,) = _tables(text)
    # the failing row first: +200 bytes is +20 %, over the 10 % (100 bytes) allowed
    assert table[1] == [
        "peak\\[n=1\\]",
        "allocs",
        "1,000",
        "1,200",
        "+200 (+20.00 %)",
        "100",
        "**regression**",
    ]
    assert table[2] == ["count", "kernels", "7", "7", "+0 (+0.00 %)", "0", "pass"]
    measured.write_text(
        json.dumps({"benchmarks": {"peak[n=1]": {"allocs": 1050}, "count": {"kernels": 7}}})
    )
    assert main(["bench", "check", str(expected), str(measured), "--markdown", str(md)]) == 0
    assert md.read_text().startswith("## badput bench check: **PASS**\n")
