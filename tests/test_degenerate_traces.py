"""Degenerate traces through every command that takes a trace: errors are data, never a crash.

The definitions these tests pin (docs/analysis.md, "Degenerate traces"):

- A window of zero length (all GPU activity at one instant, steps that all lie at one instant,
  a zero-length `--window`, a `--window` range with no step) has no goodput: JSON `null`,
  `n/a` in text, Markdown and HTML; never 0 and never NaN. Nothing is diagnosed.
- A trace without GPU activity: goodput `null` too, device -1, nothing diagnosed.
- Steps of zero duration stay steps (the trace says so; diff counts them); their hull is the
  window, so goodput is defined when the hull has length. Per-step shares are undefined, so
  nothing is diagnosed, and the step-time gate fails (nothing measured).
- Every GPU activity of zero duration: goodput is compute / window as usual (0.0 over a window
  with length), with a warning; nothing is diagnosed.
- `analyze`, `report`, `diff` and `annotate` exit 0 on all of these (their output says what is
  undefined); `--min-goodput` and `--max-step-time-ms` exit 1 where the value is undefined
  (a gate passes only on a measurement). Exit 2 stays for unreadable input, bad options and a
  `--window` the trace lacks (a time window outside its span, steps it does not have): the
  error names the trace and its span or steps (docs/analysis.md, "Steps and window").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from synth import BASE_NS, NCCL_ALLREDUCE, US, TraceBuilder, run_cli

GEMM = "ampere_sgemm_128x64_nn"


# ---- the traces ---------------------------------------------------------------------------------


def all_zero() -> TraceBuilder:
    """(a) Every event of zero duration (but the profiler's own span), at distinct times."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        s = i * 1000
        b.profiler_step(i + 1, s, s)
        b.dataloader(s, s)
        b.launch(GEMM, cpu=(s + 100, s + 100), gpu=(s + 200, s + 200))
        b.memcpy(s + 300, s + 300)
        b.kernel(NCCL_ALLREDUCE, s + 400, s + 400, stream=20)
        b.runtime("cudaStreamSynchronize", s + 500, s + 500)
    return b


def cpu_only() -> TraceBuilder:
    """(b) Host events only: no kernel, memcpy or memset."""
    b = TraceBuilder()
    for i in range(3):
        s = i * 1000
        b.profiler_step(i + 1, s, s + 1000)
        b.cpu_op("aten::mm", s + 10, s + 500)
    return b


def one_instant() -> TraceBuilder:
    """(c) GPU activity, but all of it at one instant: a zero-length window."""
    b = TraceBuilder()
    b.device_properties([0])
    b.kernel(GEMM, 500, 500)
    b.kernel(GEMM, 500, 500, stream=8)
    b.memcpy(500, 500)
    b.cpu_op("aten::mm", 500, 500)
    return b


def single_kernel() -> TraceBuilder:
    """(d) One kernel, [100, 350) us, and nothing else: goodput exactly 1 over its window."""
    b = TraceBuilder()
    b.kernel(GEMM, 100, 350)
    return b


def zero_steps() -> TraceBuilder:
    """(e) Six host ProfilerSteps of zero duration; kernels of 700 us between them."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(6):
        s = i * 1000
        b.profiler_step(i + 1, s, s)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 900))
    return b


def zero_gpu_steps() -> TraceBuilder:
    """(e) The same with GPU-side ProfilerStep annotations of zero duration."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(6):
        s = i * 1000
        b.profiler_step(i + 1, s, s, gpu=True)
        b.kernel(GEMM, s + 200, s + 900)
    return b


def steps_one_instant() -> TraceBuilder:
    """(e) GPU steps of zero duration all at one instant, real kernels elsewhere."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        b.profiler_step(i + 1, 50, 50, gpu=True)
        b.kernel(GEMM, 100 + i * 1000, 800 + i * 1000)
    return b


def comm_only() -> TraceBuilder:
    """(f) Only collective kernels: 700 us of each 1000 us step."""
    b = TraceBuilder()
    b.device_properties([0])
    b.distributed_info(0, 2)
    for i in range(3):
        s = i * 1000
        b.profiler_step(i + 1, s, s + 1000)
        b.launch(NCCL_ALLREDUCE, cpu=(s + 10, s + 20), gpu=(s + 100, s + 800), stream=20)
    return b


def memcpy_only() -> TraceBuilder:
    """(g) Only copies: 700 us of each 1000 us step, from pageable memory."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        s = i * 1000
        b.profiler_step(i + 1, s, s + 1000)
        b.launch(
            "Memcpy HtoD (Pageable -> Device)",
            kind="memcpy",
            cpu=(s + 10, s + 20),
            gpu=(s + 100, s + 800),
        )
    return b


def normal() -> TraceBuilder:
    """A healthy trace to diff against: 3 steps of 1000 us, 700 us of compute each."""
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        s = i * 1000
        b.profiler_step(i + 1, s, s + 1000)
        b.dataloader(s, s + 100)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 900))
    return b


@dataclass(frozen=True)
class Expect:
    """What `analyze --format json` must say of the trace's one device."""

    goodput: float | None
    window_us: float
    device: int = 0
    findings: bool = False  # whether some finding is expected (False: none at all)
    warnings: tuple[str, ...] = ()  # substrings, each in some warning
    steps: int = 0
    #: exit code of `--max-step-time-ms 5` (no steps or zero-length steps: 1)
    step_gate: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


NO_GPU_TIME = "the trace records no GPU time"
ZERO_STEPS = "every step has zero duration"
ZERO_WINDOW = "the analysis window has zero length"

TRACES: dict[str, tuple[Callable[[], TraceBuilder], Expect]] = {
    "all_zero": (
        all_zero,
        # window = hull of the (zero-length) steps [0, 2000): GPU time 0 over 2000 us
        Expect(0.0, 2000, warnings=(NO_GPU_TIME, ZERO_STEPS), steps=3),
    ),
    "cpu_only": (cpu_only, Expect(None, 0, device=-1, warnings=("no GPU activity",))),
    "one_instant": (one_instant, Expect(None, 0, warnings=(NO_GPU_TIME, ZERO_WINDOW))),
    "single_kernel": (
        single_kernel,
        Expect(1.0, 250, step_gate=1, extra={"breakdown_us": {"compute": 250, "idle": 0}}),
    ),
    # the steps' hull [0, 5000): five of the six kernels, 5 x 700 us
    "zero_steps": (zero_steps, Expect(0.7, 5000, warnings=(ZERO_STEPS,), steps=6)),
    "zero_gpu_steps": (zero_gpu_steps, Expect(0.7, 5000, warnings=(ZERO_STEPS,), steps=6)),
    "steps_one_instant": (
        steps_one_instant,
        Expect(None, 0, warnings=(ZERO_STEPS, ZERO_WINDOW), steps=3),
    ),
    "comm_only": (
        comm_only,
        Expect(
            0.0,
            3000,
            findings=True,
            steps=3,
            step_gate=0,
            extra={"breakdown_us": {"compute": 0, "communication": 2100}},
        ),
    ),
    "memcpy_only": (
        memcpy_only,
        Expect(
            0.0,
            3000,
            findings=True,
            steps=3,
            step_gate=0,
            extra={"breakdown_us": {"compute": 0, "memory": 2100}},
        ),
    ),
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("degenerate")
    paths = {
        name: build().write(root / f"{name}.pt.trace.json") for name, (build, _) in TRACES.items()
    }
    paths["normal"] = normal().write(root / "normal.pt.trace.json")
    return paths


def strict_json(text: str) -> Any:
    """Parse JSON as RFC 8259 has it: NaN and Infinity (Python's extension) are errors."""

    def reject(constant: str) -> Any:
        raise ValueError(f"not valid JSON: {constant}")

    return json.loads(text, parse_constant=reject)


def no_traceback(out: str, err: str) -> None:
    assert "Traceback" not in out + err, out + err


# ---- every command on every trace -------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A command line over a trace; `{T}` is the trace, `{N}` the normal trace, `{O}` an output."""

    argv: tuple[str, ...]
    kind: str  # what it prints: text, json, markdown, html (written to {O}), diff-json, ...


COMMANDS: dict[str, Command] = {
    "analyze": Command(("analyze", "{T}"), "text"),
    "analyze-json": Command(("analyze", "{T}", "--format", "json"), "json"),
    "analyze-markdown": Command(("analyze", "{T}", "--format", "markdown"), "markdown"),
    "analyze-steps-window": Command(("analyze", "{T}", "--window", "steps:1-2"), "text"),
    "analyze-empty-window": Command(
        (
            "analyze",
            "{T}",
            "--window",
            f"ns:{BASE_NS + 500 * US}-{BASE_NS + 500 * US}",
            "-f",
            "json",
        ),
        "json",
    ),
    "analyze-window-outside": Command(
        ("analyze", "{T}", "--window", "us:0-1", "--format", "json"), "json"
    ),
    "report": Command(("report", "{T}", "--out", "{O}.html"), "html"),
    "diff-before": Command(("diff", "{T}", "{N}"), "diff-text"),
    "diff-after": Command(("diff", "{N}", "{T}"), "diff-text"),
    "diff-before-json": Command(("diff", "{T}", "{N}", "--format", "json"), "diff-json"),
    "diff-after-json": Command(("diff", "{N}", "{T}", "--format", "json"), "diff-json"),
    "diff-self-html": Command(("diff", "{T}", "{T}", "--html", "{O}.html"), "diff-html"),
    "annotate": Command(("annotate", "{T}", "--out", "{O}.json"), "annotate"),
}


# Traces without ProfilerSteps, and the one whose activity lies in [100, 350] us (so that the
# zero-length window at 500 us is outside it).
_NO_STEPS = frozenset({"one_instant", "single_kernel"})


def _window_the_trace_lacks(name: str, command: str, device: int) -> str | None:
    """The error text of a --window this trace lacks (exit 2), None where it has it."""
    if device < 0:
        return None  # no GPU activity: nothing to window, goodput is undefined anyway
    if command == "analyze-window-outside":
        return "lies outside the trace, which spans us:"
    if command == "analyze-steps-window" and name in _NO_STEPS:
        return "the trace has no ProfilerStep"
    if command == "analyze-empty-window" and name == "single_kernel":
        return "lies outside the trace"
    return None


def _argv(cmd: Command, trace: Path, normal_trace: Path, out: Path) -> list[str]:
    subst = {"{T}": str(trace), "{N}": str(normal_trace), "{O}": str(out)}
    argv = []
    for a in cmd.argv:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    return argv


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", list(TRACES))
def test_command_on_degenerate_trace(
    name: str,
    command: str,
    traces: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cmd = COMMANDS[command]
    exp = TRACES[name][1]
    out_base = tmp_path / "out"
    code, out, err = run_cli(capsys, *_argv(cmd, traces[name], traces["normal"], out_base))
    no_traceback(out, err)
    lacking = _window_the_trace_lacks(name, command, exp.device)
    if lacking is not None:
        assert code == 2, err
        assert str(traces[name]) in err and lacking in err, err
        assert out == ""
        return
    assert code == 0, err
    undefined = exp.goodput is None
    if cmd.kind == "json":
        doc = strict_json(out)
        (dev,) = doc["devices"]
        if command == "analyze-empty-window" and exp.device >= 0:
            # a zero-length --window: no goodput, whatever the trace
            assert dev["goodput"] is None and dev["window_us"] == 0
            assert any(ZERO_WINDOW in w for w in dev["warnings"])
            assert dev["findings"] == [] and doc["findings"] == []
        elif undefined:
            assert dev["goodput"] is None
    elif cmd.kind == "text" and command == "analyze" and undefined:
        assert "Goodput n/a" in out
    elif cmd.kind == "markdown" and undefined:
        assert "**Goodput n/a**" in out
    elif cmd.kind == "html":
        page = Path(f"{out_base}.html").read_text(encoding="utf-8")
        if undefined:
            assert '<b class="goodput">n/a</b>' in page
            assert "–" not in page.split('data-card="goodput"', 1)[1].split("</div></div>")[0]
    elif cmd.kind == "diff-text" and undefined:
        assert "n/a →" in out or "→ n/a" in out
    elif cmd.kind == "diff-json":
        doc = strict_json(out)
        (dev,) = doc["devices"]
        side = "before" if command == "diff-before-json" else "after"
        gp = dev["goodput"]
        if undefined:
            assert gp[side] is None and gp["delta"] is None
        else:
            assert gp[side] == pytest.approx(exp.goodput)
            assert gp["delta"] == pytest.approx(gp["after"] - gp["before"])
    elif cmd.kind == "diff-html":
        page = Path(f"{out_base}.html").read_text(encoding="utf-8")
        if undefined:
            assert '<b class="goodput">n/a → n/a</b>' in page
    elif cmd.kind == "annotate":
        strict_json(Path(f"{out_base}.json").read_text(encoding="utf-8"))


# ---- exact values ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TRACES))
def test_analysis_values(
    name: str, traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    exp = TRACES[name][1]
    code, out, err = run_cli(capsys, "analyze", traces[name], "--format", "json")
    assert code == 0, err
    doc = strict_json(out)
    (dev,) = doc["devices"]
    assert dev["device"] == exp.device
    if exp.goodput is None:
        assert dev["goodput"] is None  # null: not 0, not NaN
    else:
        assert isinstance(dev["goodput"], float)
        assert dev["goodput"] == pytest.approx(exp.goodput, abs=1e-12)
    assert dev["window_us"] == exp.window_us
    assert sum(dev["breakdown_us"].values()) == dev["window_us"]
    assert len(dev["steps"]) == exp.steps
    for w in exp.warnings:
        assert any(w in x for x in dev["warnings"]), (w, dev["warnings"])
    assert bool(dev["findings"]) == exp.findings, dev["findings"]
    assert bool(doc["findings"]) == exp.findings
    for key, parts in exp.extra.items():
        for part, value in parts.items():
            assert dev[key][part] == value, (key, part)


def test_single_kernel_goodput_is_exactly_one(
    traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "analyze", traces["single_kernel"], "--format", "json")
    assert code == 0
    (dev,) = strict_json(out)["devices"]
    assert dev["goodput"] == 1.0
    assert dev["window_source"] == "gpu_activity"
    assert dev["short_kernel_share"] == 0.0


@pytest.mark.parametrize("name", list(TRACES))
def test_min_goodput_gate(
    name: str, traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    exp = TRACES[name][1]
    code, out, err = run_cli(capsys, "analyze", traces[name], "--min-goodput", "0.5")
    no_traceback(out, err)
    passes = exp.goodput is not None and exp.goodput >= 0.5
    assert code == (0 if passes else 1), err
    if exp.goodput is None:
        (line,) = [x for x in err.splitlines() if "gate failed" in x]
        assert "goodput is n/a (" in line


@pytest.mark.parametrize("name", list(TRACES))
def test_step_time_gate(
    name: str, traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    exp = TRACES[name][1]
    code, out, err = run_cli(capsys, "analyze", traces[name], "--max-step-time-ms", "5")
    no_traceback(out, err)
    assert code == exp.step_gate, err
    if exp.steps and code:
        assert "every step has zero duration" in err


def test_gates_json_on_zero_window(
    traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("analyze", traces["one_instant"], "-f", "json", "--min-goodput", "0.1")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 1
    doc = strict_json(out)
    (gate,) = doc["gates"]
    assert (gate["measured"], gate["passed"]) == ("n/a", False)
    assert "the analysis window has zero length" in gate["message"]


# ---- diff ------------------------------------------------------------------------------------


def test_diff_of_zero_time_kernels(
    traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # GEMM ran before in zero time: its relative change is undefined (null), and it is slower
    # by the absolute threshold alone.
    code, out, err = run_cli(capsys, "diff", traces["all_zero"], traces["normal"], "-f", "json")
    assert code == 0, err
    (dev,) = strict_json(out)["devices"]
    (slower,) = dev["kernels"]["slower"]
    assert slower["name"] == GEMM
    assert slower["rel_change"] is None
    assert slower["per_step_before_us"] == 0 and slower["per_step_after_us"] == 700
    assert dev["goodput"] == {
        "before": 0.0,
        "after": pytest.approx(0.7),
        "delta": pytest.approx(0.7),
    }
    # the copy and the collective ran only before (in zero time)
    assert dev["kernels"]["counts"]["disappeared"] == 2

    # both sides in zero time: unchanged, never "faster" by 0
    code, out, _ = run_cli(capsys, "diff", traces["all_zero"], traces["all_zero"], "-f", "json")
    assert code == 0
    (dev,) = strict_json(out)["devices"]
    assert dev["kernels"]["counts"]["unchanged"] == 3
    assert dev["kernels"]["counts"]["slower"] == dev["kernels"]["counts"]["faster"] == 0


def test_diff_zero_threshold_keeps_unmoved_kernels_unchanged() -> None:
    from badput.analysis.diff import KernelChange, _moved

    still = KernelChange("k", "gemm", 2, 2, 0.0, 0.0, 0.0, 0.0)
    assert still.rel_change is None
    assert not _moved(still, 0.0, 0.0)
    grew = KernelChange("k", "gemm", 2, 2, 0.0, 5000.0, 0.0, 2500.0)
    assert _moved(grew, 0.05, 1000)
    assert not _moved(grew, 0.05, 10_000)


# ---- the shared helpers ----------------------------------------------------------------------


def test_ratio_and_share_formatting() -> None:
    from badput.analysis.results import ratio
    from badput.report.units import format_share

    assert ratio(1, 4) == 0.25
    assert ratio(0, 0) is None and ratio(5, 0) is None and ratio(5, -1) is None
    assert ratio(0, 7) == 0.0
    assert format_share(None) == "n/a"
    assert format_share(0.0) == "0.0 %"
    assert format_share(1.0) == "100.0 %"


def test_undefined_reason_names_the_case(
    traces: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from badput.analysis import WindowSpec, analyze_trace
    from badput.errors import UsageError
    from badput.trace import load_trace

    def reason(name: str, window: str | None = None) -> str | None:
        spec = WindowSpec.parse(window) if window else None
        (d,) = analyze_trace(load_trace(str(traces[name])), spec)
        return d.goodput_undefined_reason

    assert reason("cpu_only") == "no GPU activity in this trace"
    assert reason("one_instant") == "the analysis window has zero length"
    with pytest.raises(UsageError, match="the trace has no such step"):
        reason("zero_steps", "steps:7-9")
    assert reason("single_kernel") is None


def test_bench_ingest_takes_an_analysis_without_goodput(
    traces: dict[str, Path], tmp_path: Path, capsys: Any
) -> None:
    """`bench ingest` of the JSON of a zero-length window: stored without a goodput row."""
    doc = tmp_path / "analysis.json"
    code, _, err = run_cli(
        capsys, "analyze", traces["one_instant"], "--format", "json", "--out", doc
    )
    assert code == 0, err
    assert json.loads(doc.read_text())["devices"][0]["goodput"] is None
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code, _, err = run_cli(capsys, "bench", "ingest", doc, "--store", store)
    assert code == 0, err
    from badput.bench.store import Store

    with Store.open(store) as s:
        assert s.count("run") == 1
        assert s.metrics("analyze") == []  # no goodput, and no idle share of no window
