"""The GitHub Actions example: valid workflow YAML, and every badput command in it works.

The commands are taken from the workflow file itself, so the example cannot drift from the
CLI: each parses with the real command line, and those that need no GPU and no git checkout
run here on the bundled ResNet50 trace (a real V100 trace standing in for the profiled run).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from badput.bench.ab import Side, _run_once
from badput.cli.app import command as cli_command
from badput.cli.app import main

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples/github-actions"
WORKFLOW = EXAMPLE / "badput.yml"
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"


def _workflow() -> dict[Any, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _steps(job: str) -> list[dict[str, Any]]:
    steps = _workflow()["jobs"][job]["steps"]
    assert isinstance(steps, list)
    return steps


def _badput_commands(job: str) -> list[list[str]]:
    """The argv (after `badput`) of every badput command in a job's `run:` steps."""
    out = []
    for step in _steps(job):
        for line in str(step.get("run", "")).splitlines():
            words = shlex.split(line)
            if words and words[0] == "badput":
                out.append(words[1:])
    return out


def _substitute(argv: list[str], env: dict[str, str]) -> list[str]:
    return [re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), a) for a in argv]


def _parse(argv: list[str]) -> Any:
    """Parse a command line with the real CLI's leaf command, without running it.

    Returns the leaf command's context (its `params`); raises the CLI's usage error on an
    unknown option or a bad value.
    """
    command: Any = cli_command()
    rest = list(argv)
    while hasattr(command, "commands"):  # a group: descend by the subcommand's name
        name, rest = rest[0], rest[1:]
        command = command.commands[name]
    return command.make_context(" ".join(argv[: len(argv) - len(rest)]), rest)


def test_workflow_structure() -> None:
    doc = _workflow()
    assert doc["name"] == "badput"
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert set(on) == {"pull_request", "push"}
    assert doc["permissions"] == {"contents": "read"}
    assert set(doc["jobs"]) == {"goodput", "bench-gate"}
    for name, job in doc["jobs"].items():
        assert job["runs-on"] and job["timeout-minutes"] > 0, name
        uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
        assert uses[:2] == ["actions/checkout", "actions/setup-python"], name
        assert uses[-1] == "actions/upload-artifact", name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
    upload = _steps("goodput")[-1]["with"]
    assert upload["path"].split() == ["badput-report.html", "traces/"]
    # the bench gate compares with the merge base: it needs the whole history
    checkout = _steps("bench-gate")[0]
    assert checkout["with"]["fetch-depth"] == 0


def test_goodput_job_commands_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    analyze, report = _badput_commands("goodput")
    assert analyze[:4] == ["analyze", "traces", "--format", "markdown"]
    assert "--min-goodput" in analyze and "--max-step-time-ms" in analyze
    assert report[:2] == ["report", "traces"]
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(DEMO, traces)
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GITHUB_STEP_SUMMARY", str(summary))
            # The example's gates (goodput >= 50 %, median step <= 250 ms) pass on the ResNet50
            # trace: goodput 55.5 %, median step 177.44 ms.
            assert main(_substitute(analyze, env)) == 0
            assert main(_substitute(report, env)) == 0
    finally:
        os.chdir(cwd)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n\n## badput analyze\n")  # appended, not replaced
    assert "### Gates: **PASS**" in text
    assert "| --min-goodput | GPU 0 of resnet50" in text and "| 55.5 % | pass |" in text
    html = (tmp_path / "badput-report.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    capsys.readouterr()


def test_bench_gate_command_parses_and_its_rounds_yield_metrics(tmp_path: Path) -> None:
    (ab,) = _badput_commands("bench-gate")
    ctx = _parse(_substitute(ab, {"GITHUB_BASE_REF": "main", "GITHUB_STEP_SUMMARY": "s.md"}))
    p = ctx.params
    assert (p["base_ref"], p["head_ref"], p["merge_base"]) == ("origin/main", "HEAD", True)
    assert p["system_site_packages"] and p["rounds"] == 10
    assert (p["markdown"], p["json_out"], p["junit"]) == ("s.md", "ab.json", "ab.xml")
    # One round of the gate: the --command, run the way `bench ab` runs it, in a project with
    # a benchmarks/ suite, yields the suite's medians as metrics beside the wall time.
    suite = tmp_path / "benchmarks"
    suite.mkdir()
    (suite / "test_fast.py").write_text(
        "import time\n\n\ndef test_nap(benchmark):\n"
        "    benchmark.pedantic(time.sleep, args=(0.002,), rounds=3)\n",
        encoding="utf-8",
    )
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    metrics = _run_once(Side(p["command"], cwd=str(tmp_path), env=env), "suite")
    nap = "benchmarks/test_fast.py::test_nap wall_s"
    assert set(metrics) == {"wall_s", nap}
    assert 0.002 <= metrics[nap] < 0.1


def test_every_badput_command_parses() -> None:
    env = {"GITHUB_STEP_SUMMARY": "summary.md", "GITHUB_BASE_REF": "main"}
    commands = _badput_commands("goodput") + _badput_commands("bench-gate")
    assert len(commands) == 3
    for argv in commands:
        _parse(_substitute(argv, env))
    # the parse does check: a misspelt option or a bad value fails
    with pytest.raises(Exception, match="No such option: --min-goodputt"):
        _parse(["analyze", "traces", "--min-goodputt", "0.5"])
    with pytest.raises(Exception, match="'html' is not one of 'text', 'json', 'markdown'"):
        _parse(["analyze", "traces", "--format", "html"])


def test_profile_script_writes_a_trace_badput_reads(tmp_path: Path) -> None:
    """The example's training script on CPU: a trace with its ProfilerSteps and no GPU work."""
    pytest.importorskip("torch")
    (profile,) = [s["run"] for s in _steps("goodput") if "profile_train.py" in str(s.get("run"))]
    argv = shlex.split(profile)
    assert argv[:2] == ["python", "examples/github-actions/profile_train.py"]
    out = tmp_path / "traces"
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "profile_train.py"),
            *("--steps", "3", "--width", "32"),
            *("--batch", "4", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (trace,) = out.glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = sorted(
        {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    )
    # schedule(wait=1, warmup=2, active=3): steps 3, 4 and 5 are recorded
    assert steps == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    code = main(["analyze", str(out), "--format", "json", "--out", str(tmp_path / "a.json")])
    assert code == 0
    (dev,) = json.loads((tmp_path / "a.json").read_text())["devices"]
    assert dev["goodput"] is None  # no GPU on this machine: the goodput gate would fail
    assert main(["analyze", str(out), "--min-goodput", "0.5"]) == 1
