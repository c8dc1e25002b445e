"""Windows you can trust (issue 18, item 6): the rules of `analysis/window.py`, end to end.

- A GPU-side ProfilerStep that misses GPU work its host step launched: the GPU's steps become
  the host steps stretched over their GPU work, with a warning naming the step and how much.
- A step that runs past the end of the capture is cut there, with a warning.
- `--window` outside the trace, or naming steps the trace lacks: exit 2, the trace's span or
  its steps named. Partly outside: cut, with a warning.
- `steps:N` is one step.

Every expected number is worked by hand from the synthetic trace (whole microseconds), or
measured once on the real MI250 trace and pinned.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from badput.analysis import WindowSpec, analyze_trace
from badput.errors import UsageError
from badput.trace import load_trace
from badput.trace.model import EventKind
from synth import BASE_NS, US, TraceBuilder, Us, run_cli

GEMM = "ampere_sgemm_128x64_nn"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::relu_kernel>"
MI250 = "hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"

SHORT_WARNING_TAIL = "; the steps are the host ProfilerSteps stretched over their GPU work instead"


def us(t: int) -> Decimal:
    """Absolute trace time of relative whole microsecond `t`, as the JSON report writes it."""
    return Decimal(BASE_NS + t * US) / 1000


def us_text(t: int) -> str:
    """`t` as `--window us:` takes it (three decimals)."""
    return f"{us(t):.3f}"


def analyze(capsys: Any, path: Path, *extra: object) -> dict[str, Any]:
    """`badput analyze PATH --format json`, exit 0, numbers as Decimal (exact)."""
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", *extra)
    assert code == 0, f"exit {code}; stderr: {err}"
    doc: dict[str, Any] = json.loads(out, parse_float=Decimal)
    return doc


def fails(capsys: Any, *argv: object) -> str:
    """Run the CLI, expect exit 2 with one error line and nothing on stdout; return the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, f"exit {code}; stderr: {err}"
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("badput: error: ")
    return lines[0].removeprefix("badput: error: ")


class CaptureBuilder(TraceBuilder):
    """A TraceBuilder whose profiler marks end at `capture_end` (relative units), or that has
    none (`capture_end=None`: an nsys export or a trace fragment has none).

    TraceBuilder puts Kineto's `PyTorch Profiler (0)` span and `Record Window End` at the last
    event; a real capture ends when the profiler stopped, which a step can outlast.
    """

    def __init__(self, capture_end: int | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.capture_end = capture_end

    def _metadata_events(self) -> list[dict[str, Any]]:
        out = super()._metadata_events()
        if self.capture_end is None:
            return [e for e in out if e.get("cat") != "Trace" and e["name"] != "Record Window End"]
        end_ns = self.base_ns + self.capture_end * self.unit_ns
        for event in out:
            if event.get("cat") == "Trace":
                event["dur"] = Us(end_ns - event["ts"].ns)
            elif event["name"] == "Record Window End":
                event["ts"] = Us(end_ns)
        return out


def three_steps(b: TraceBuilder, *, device: int = 0, host: bool = True) -> None:
    """Host steps [0,1000), [1000,2000), [2000,3000); each launches a GEMM [s+200, s+500) and
    a ReLU [s+600, s+900) on `device`: 600 us of compute per step."""
    for k in range(3):
        s = 1000 * k
        if host:
            b.profiler_step(k + 1, s, s + 1000)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 500), device=device)
        b.launch(RELU, cpu=(s + 120, s + 130), gpu=(s + 600, s + 900), device=device)


# ---- 1. a GPU-side step shorter than the GPU work of its host step -----------------------------


def short_gpu_step_trace(tmp_path: Path, step2_end: int, name: str = "t.json") -> Path:
    """GPU-side steps as Kineto records them ([s+200, s+900)), but #2 ends at `step2_end`."""
    b = TraceBuilder()
    b.device_properties([0])
    three_steps(b)
    b.profiler_step(1, 200, 900, gpu=True)
    b.profiler_step(2, 1200, step2_end, gpu=True)
    b.profiler_step(3, 2200, 2900, gpu=True)
    return b.write(tmp_path / name)


def test_gpu_step_shorter_than_its_work_is_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GPU step #2 [1200, 1500) holds the GEMM, not the ReLU [1600, 1900) its host step launched
    (dev,) = analyze(capsys, short_gpu_step_trace(tmp_path, 1500))["devices"]
    assert dev["window_source"] == "cpu_steps"
    # the host steps stretched over their work: [0,1000), [1000,2000), [2000,3000)
    assert [(s["name"], s["start_us"], s["dur_us"]) for s in dev["steps"]] == [
        ("ProfilerStep#1", us(0), 1000),
        ("ProfilerStep#2", us(1000), 1000),
        ("ProfilerStep#3", us(2000), 1000),
    ]
    assert dev["window_start_us"] == us(0) and dev["window_us"] == 3000
    assert dev["breakdown_us"] == {"compute": 1800, "communication": 0, "memory": 0, "idle": 1200}
    for s in dev["steps"]:
        assert s["breakdown_us"]["compute"] == 600
    # work of host step 2: [1200, 1900) = 700 us; inside the GPU step: [1200, 1500) = 300 us
    assert dev["warnings"] == [
        "GPU-side ProfilerSteps leave out GPU work their host steps launched: ProfilerStep#2 "
        "(300.000 us) holds 1 of the 2 kernels its host step launched (1 of 2 GPU activities), "
        "and 400.000 us of their 700.000 us span lies in no GPU-side step" + SHORT_WARNING_TAIL
    ]


@pytest.mark.parametrize(
    ("step2_end", "source"),
    [
        (1900, "gpu_steps"),  # covers its work exactly
        (1899, "gpu_steps"),  # 1 us short: timestamp rounding (ROUNDING_NS), not lost work
        (1898, "cpu_steps"),  # 2 us short: lost work
    ],
)
def test_gpu_step_that_covers_its_work_stays(
    step2_end: int, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dev,) = analyze(capsys, short_gpu_step_trace(tmp_path, step2_end))["devices"]
    assert dev["window_source"] == source
    if source == "gpu_steps":
        assert dev["warnings"] == []
        assert dev["window_start_us"] == us(200) and dev["window_us"] == 2700
        assert [s["dur_us"] for s in dev["steps"]] == [700, step2_end - 1200, 700]
    else:
        assert dev["window_start_us"] == us(0) and dev["window_us"] == 3000
        (warning,) = dev["warnings"]
        assert "ProfilerStep#2 (698.000 us)" in warning
        assert "and 2.000 us of their 700.000 us span lies in no GPU-side step" in warning


def test_gpu_step_without_host_steps_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No host step to compare with: the GPU-side steps are all the evidence there is."""
    b = TraceBuilder()
    three_steps(b, host=False)
    b.profiler_step(1, 200, 900, gpu=True)
    b.profiler_step(2, 1200, 1500, gpu=True)
    (dev,) = analyze(capsys, b.write(tmp_path / "t.json"))["devices"]
    assert dev["window_source"] == "gpu_steps"
    assert dev["window_start_us"] == us(200) and dev["window_us"] == 1300
    assert dev["warnings"] == []


def test_replacement_is_per_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GPU 0's steps cover their work and stay; GPU 1's #3 misses the ReLU: GPU 1 alone moves."""
    b = TraceBuilder()
    b.device_properties([0, 1])
    three_steps(b, device=0)
    three_steps(b, device=1, host=False)
    for k in range(3):
        s = 1000 * k
        b.profiler_step(k + 1, s + 200, s + 900, gpu=True, device=0)
        b.profiler_step(k + 1, s + 200, s + (500 if k == 2 else 900), gpu=True, device=1)
    dev0, dev1 = analyze(capsys, b.write(tmp_path / "t.json"))["devices"]
    assert (dev0["device"], dev0["window_source"], dev0["window_us"]) == (0, "gpu_steps", 2700)
    assert dev0["warnings"] == []
    assert (dev1["device"], dev1["window_source"], dev1["window_us"]) == (1, "cpu_steps", 3000)
    (warning,) = dev1["warnings"]
    assert warning.startswith(
        "GPU-side ProfilerSteps leave out GPU work their host steps launched: ProfilerStep#3 "
        "(300.000 us) holds 1 of the 2 kernels"
    )


def test_work_in_a_neighbouring_gpu_step_is_not_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host runs ahead: host step k launches the first kernel of GPU step k+1. That kernel
    is in a GPU-side step, so nothing is lost and the GPU-side steps stay."""
    b = TraceBuilder()
    b.device_properties([0])
    for k in range(3):
        s = 1000 * k
        b.profiler_step(k + 1, s, s + 1000)
        b.profiler_step(k + 1, s, s + 1000, gpu=True)
        for t in (s, s + 500):  # kernels launched just ahead: the first from host step k-1
            b.launch(GEMM, cpu=(t - 3, t - 2), gpu=(t, t + 400))
    (dev,) = analyze(capsys, b.write(tmp_path / "t.json"))["devices"]
    assert dev["window_source"] == "gpu_steps" and dev["warnings"] == []
    assert [s["dur_us"] for s in dev["steps"]] == [1000, 1000, 1000]


def test_gpu_steps_of_several_streams_are_one_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kineto writes a GPU-side ProfilerStep per stream: the step is their hull."""
    b = TraceBuilder()
    b.device_properties([0])
    three_steps(b)  # GEMM on stream 7
    for k in range(3):
        s = 1000 * k
        b.launch(RELU, cpu=(s + 140, s + 150), gpu=(s + 300, s + 950), stream=20)
        b.profiler_step(k + 1, s + 200, s + 900, gpu=True, stream=7)
        b.profiler_step(k + 1, s + 300, s + 950, gpu=True, stream=20)
    (dev,) = analyze(capsys, b.write(tmp_path / "t.json"))["devices"]
    assert dev["window_source"] == "gpu_steps" and dev["warnings"] == []
    assert [(s["name"], s["start_us"], s["dur_us"]) for s in dev["steps"]] == [
        ("ProfilerStep#1", us(200), 750),
        ("ProfilerStep#2", us(1200), 750),
        ("ProfilerStep#3", us(2200), 750),
    ]
    assert dev["window_start_us"] == us(200) and dev["window_us"] == 2750


def test_mi250_window_covers_all_kernels(shared_traces: Path) -> None:
    """The real case: the GPU-side ProfilerStep#1 (1,031.368 us) holds 6 of 14 kernels."""
    trace = load_trace(str(shared_traces / MI250))
    (d,) = analyze_trace(trace, model=False)
    assert d.device == 2 and d.window_source == "cpu_steps"
    # host ProfilerStep#1 [4203669603187.439, +9288.291) us: its CPU span, which outlasts the
    # last kernel it launched (the optimizer's, ending at 4203669612366.093 us)
    assert (d.window_start_ns, d.window_ns) == (4_203_669_603_187_439, 9_288_291)
    assert [s.name for s in d.steps] == ["ProfilerStep#1"]
    assert d.dropped_steps == ["ProfilerStep#2"]  # launched no GPU work
    kernels = (trace.kind == EventKind.KERNEL) & (trace.device == 2)
    assert int(kernels.sum()) == 14
    w0, w1 = d.window_start_ns, d.window_start_ns + d.window_ns
    assert bool(((trace.ts_ns[kernels] >= w0) & (trace.end_ns[kernels] <= w1)).all())
    # the 14 kernels do not overlap: compute is their sum, 110.881 us
    assert d.breakdown.compute_ns == int(trace.dur_ns[kernels].sum()) == 110_881
    assert d.warnings[0] == (
        "GPU-side ProfilerSteps leave out GPU work their host steps launched: ProfilerStep#1 "
        "(1,031.368 us) holds 6 of the 14 kernels its host step launched (8 of 16 GPU "
        "activities), and 7,880.520 us of their 8,911.887 us span lies in no GPU-side step"
        + SHORT_WARNING_TAIL
    )


# ---- 2. a step past the end of the capture ------------------------------------------------------


def past_end_trace(tmp_path: Path, step3_end: int, capture_end: int | None = 3000) -> Path:
    """three_steps, but host step 3 ends at `step3_end`; the profiler stopped at 3000."""
    b = CaptureBuilder(capture_end)
    b.device_properties([0])
    for k in range(3):
        s = 1000 * k
        b.profiler_step(k + 1, s, step3_end if k == 2 else s + 1000)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 500))
        b.launch(RELU, cpu=(s + 120, s + 130), gpu=(s + 600, s + 900))
    return b.write(tmp_path / "t.json")


def test_step_past_capture_end_is_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # host step 3 runs 13 s: to 13,002,000 us, 12,999,000 us past the profiler's stop at 3000
    (dev,) = analyze(capsys, past_end_trace(tmp_path, 13_002_000))["devices"]
    assert dev["window_source"] == "cpu_steps"
    assert dev["window_start_us"] == us(0) and dev["window_us"] == 3000
    assert [(s["name"], s["dur_us"]) for s in dev["steps"]] == [
        ("ProfilerStep#1", 1000),
        ("ProfilerStep#2", 1000),
        ("ProfilerStep#3", 1000),
    ]
    assert dev["steps"][2]["breakdown_us"] == {
        "compute": 600,
        "communication": 0,
        "memory": 0,
        "idle": 400,
    }
    assert dev["breakdown_us"]["compute"] == 1800 and dev["goodput"] == Decimal("0.6")
    assert dev["warnings"] == [
        f"steps run past the end of the capture (us:{us_text(3000)}, the profiler's stop or the "
        "last event recorded after it): ProfilerStep#3 by 12,999,000.000 us; cut there"
    ]


def test_step_past_the_last_event_without_profiler_mark_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No mark of the profiler's stop: the step's own recorded end is the capture's end."""
    path = past_end_trace(tmp_path, 13_002_000, capture_end=None)
    (dev,) = analyze(capsys, path)["devices"]
    assert dev["window_us"] == 13_002_000 and dev["warnings"] == []


def test_step_within_rounding_of_capture_end_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dev,) = analyze(capsys, past_end_trace(tmp_path, 3001))["devices"]
    assert dev["window_us"] == 3001 and dev["warnings"] == []


# ---- 3. --window outside the trace, or steps it lacks -----------------------------------------


@pytest.fixture
def steps_5_to_10(tmp_path: Path) -> Path:
    """Host steps 5-10 of 1000 us over [0, 6000), 600 us of compute each."""
    b = TraceBuilder()
    b.device_properties([0])
    for k in range(6):
        s = 1000 * k
        b.profiler_step(k + 5, s, s + 1000)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 500))
        b.launch(RELU, cpu=(s + 120, s + 130), gpu=(s + 600, s + 900))
    return b.write(tmp_path / "steps5-10.json")


def test_window_outside_the_trace_exits_2(
    steps_5_to_10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails(capsys, "analyze", steps_5_to_10, "--window", "us:0-1000")
    assert line == (
        f"{steps_5_to_10}: --window us:0.000-1000.000 lies outside the trace, which spans "
        f"us:{us_text(0)}-{us_text(6000)} (--window is on the trace's own clock)"
    )
    after = f"ns:{BASE_NS + 7000 * US}-{BASE_NS + 8000 * US}"
    assert "lies outside the trace" in fails(capsys, "analyze", steps_5_to_10, "--window", after)


def test_window_partly_outside_is_cut(
    steps_5_to_10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = f"us:{us_text(5000)}-{us_text(9000)}"
    (dev,) = analyze(capsys, steps_5_to_10, "--window", window)["devices"]
    assert dev["window_source"] == "user"
    assert dev["window_start_us"] == us(5000) and dev["window_us"] == 1000
    assert [s["name"] for s in dev["steps"]] == ["ProfilerStep#10"]
    assert dev["breakdown_us"]["compute"] == 600
    assert dev["warnings"] == [
        f"--window {window} reaches beyond the trace, which spans "
        f"us:{us_text(0)}-{us_text(6000)}: cut to us:{us_text(5000)}-{us_text(6000)}"
    ]


@pytest.mark.parametrize("window", ["steps:20-30", "steps:4", "steps:11-12"])
def test_window_steps_the_trace_lacks_exit_2(
    window: str, steps_5_to_10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails(capsys, "analyze", steps_5_to_10, "--window", window)
    assert line == (
        f"{steps_5_to_10}: --window {window}: the trace has no such step; its steps are 5-10 "
        "(ProfilerStep#N)"
    )


def test_window_steps_on_a_trace_without_steps_names_its_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = TraceBuilder()
    three_steps(b, host=False)
    path = b.write(tmp_path / "nosteps.json")
    assert fails(capsys, "analyze", path, "--window", "steps:1-2") == (
        f"{path}: --window steps:1-2: the trace has no ProfilerStep; a time window inside its "
        f"span, us:{us_text(100)}-{us_text(2900)}, works"
    )


def test_window_steps_partly_in_the_trace(
    steps_5_to_10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dev,) = analyze(capsys, steps_5_to_10, "--window", "steps:9-12")["devices"]
    assert [s["name"] for s in dev["steps"]] == ["ProfilerStep#9", "ProfilerStep#10"]
    assert dev["window_start_us"] == us(4000) and dev["window_us"] == 2000
    assert dev["warnings"] == [
        "--window steps:9-12: the trace lacks steps 11-12; analysing its steps 9-10"
    ]
    (dev,) = analyze(capsys, steps_5_to_10, "--window", "steps:4-5")["devices"]
    assert dev["warnings"] == ["--window steps:4-5: the trace lacks step 4; analysing its steps 5"]


def test_window_steps_left_out_as_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 3 is in the trace but launched no GPU work (dropped): no exit 2, a warning why."""
    b = TraceBuilder()
    b.device_properties([0])
    for k in range(2):
        s = 1000 * k
        b.profiler_step(k + 1, s, s + 1000)
        b.launch(GEMM, cpu=(s + 100, s + 110), gpu=(s + 200, s + 500))
    b.profiler_step(3, 2000, 3000)
    (dev,) = analyze(capsys, b.write(tmp_path / "t.json"), "--window", "steps:3")["devices"]
    assert dev["window_source"] == "none" and dev["goodput"] is None
    assert dev["dropped_steps"] == ["ProfilerStep#3"]
    assert (
        "no step in the requested --window range on this GPU: ProfilerStep#3 left out as "
        "incompletely captured"
    ) in dev["warnings"]


def test_several_traces_some_lacking_the_steps(
    steps_5_to_10: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace without the steps is left out with a warning (as an unreadable one is); the
    others are analysed. `--strict` makes it exit 2; no trace with the steps: exit 2."""
    b = TraceBuilder()
    b.device_properties([0])
    three_steps(b)  # steps 1-3
    other = b.write(tmp_path / "steps1-3.json")
    reason = "--window steps:2: the trace has no such step; its steps are 5-10 (ProfilerStep#N)"

    code, out, err = run_cli(
        capsys, "analyze", steps_5_to_10, other, "-f", "json", "--window", "steps:2"
    )
    assert code == 0, err
    doc = json.loads(out, parse_float=Decimal)
    (dev,) = doc["devices"]
    assert dev["trace"] == str(other)
    assert [s["name"] for s in dev["steps"]] == ["ProfilerStep#2"]
    assert doc["ranks"]["failed"] == [{"path": str(steps_5_to_10), "reason": reason}]
    assert f"{steps_5_to_10}: {reason} (left out; 1 of 2 analysed)" in err

    code, _, err = run_cli(
        capsys, "analyze", steps_5_to_10, other, "--strict", "--window", "steps:2"
    )
    assert code == 2, err

    code, out, err = run_cli(capsys, "analyze", steps_5_to_10, other, "--window", "steps:40")
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == "badput: error: none of the 2 traces could be analysed"
    assert f"{other}: --window steps:40: the trace has no such step; its steps are 1-3" in err


# ---- 4. steps:N ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("steps:7", WindowSpec(first_step=7, last_step=7)),
        (" steps : 7 ", WindowSpec(first_step=7, last_step=7)),
        ("steps:7-7", WindowSpec(first_step=7, last_step=7)),
        ("steps:5-9", WindowSpec(first_step=5, last_step=9)),
        ("ns:10-20", WindowSpec(start_ns=10, end_ns=20)),
        ("us:1.5-2", WindowSpec(start_ns=1500, end_ns=2000)),
    ],
)
def test_window_spec_parse(text: str, spec: WindowSpec) -> None:
    assert WindowSpec.parse(text) == spec


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("us:5", "a time window needs both ends, us:T0-T1"),
        ("ns:5", "a time window needs both ends, ns:T0-T1"),
        ("steps:1.5", "step numbers are integers"),
        ("steps:", "expected steps:N, steps:A-B, ns:T0-T1 or us:T0-T1 (trace clock)"),
        ("steps:3-", "expected steps:N, steps:A-B, ns:T0-T1 or us:T0-T1 (trace clock)"),
    ],
)
def test_window_spec_rejects(text: str, problem: str) -> None:
    with pytest.raises(UsageError) as e:
        WindowSpec.parse(text)
    assert str(e.value) == f"--window {text!r}: {problem}"


def test_window_one_step(steps_5_to_10: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (one,) = analyze(capsys, steps_5_to_10, "--window", "steps:7")["devices"]
    (same,) = analyze(capsys, steps_5_to_10, "--window", "steps:7-7")["devices"]
    assert one == same
    assert [s["name"] for s in one["steps"]] == ["ProfilerStep#7"]
    assert one["window_start_us"] == us(2000) and one["window_us"] == 1000
    assert one["breakdown_us"] == {"compute": 600, "communication": 0, "memory": 0, "idle": 400}
    assert one["warnings"] == []
