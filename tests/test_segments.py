"""One step's busy and idle pieces in time order (`analysis.segments`) and their HTML drawing."""

from __future__ import annotations

from pathlib import Path

import pytest

from badput.analysis import analyze_trace
from badput.analysis.segments import SEGMENT_KINDS, pick_steps, step_segments
from badput.diagnose import diagnose_job, outcome_of
from badput.report.html_report import render_html
from badput.trace import load_trace
from synth import TraceBuilder


def _parts(step: object) -> dict[str, int]:
    b, c = step.breakdown, step.idle_causes  # type: ignore[attr-defined]
    return {
        "compute": b.compute_ns,
        "communication": b.communication_ns,
        "memory": b.memory_ns,
        "idle_dataloader": c.dataloader_ns,
        "idle_cpu": c.cpu_ns,
        "idle_runtime": c.runtime_ns,
        "idle_other": c.other_ns,
    }


def test_pieces_partition_every_resnet_step(shared_traces: Path) -> None:
    """At full resolution the pieces tile the step, and each kind sums to the step's part."""
    path = next((shared_traces / "kineto-resnet50").glob("*.pt.trace.json.gz"))
    (d,) = analyze_trace(load_trace(str(path)))
    assert len(d.steps) == 6
    for step in d.steps:
        seg = step_segments(d, step, resolution=0)
        assert seg is not None and seg.hidden == 0
        ends = [o + n for o, n in zip(seg.offset_ns, seg.length_ns, strict=True)]
        assert list(seg.offset_ns) == sorted(seg.offset_ns)
        assert all(e <= o for e, o in zip(ends, seg.offset_ns[1:], strict=False))  # no overlap
        assert sum(seg.length_ns) == step.dur_ns  # no gap either
        sums = dict.fromkeys(SEGMENT_KINDS, 0)
        for code, n in zip(seg.kind, seg.length_ns, strict=True):
            sums[SEGMENT_KINDS[code]] += n
        assert sums == _parts(step), step.name
        # the default resolution drops only pieces under 1/2000 of the step, and counts them
        coarse = step_segments(d, step)
        assert coarse is not None and len(coarse.kind) <= 2000
        assert sum(coarse.length_ns) + coarse.hidden_ns == step.dur_ns
        assert len(coarse.kind) + coarse.hidden == len(seg.kind)


def test_synthetic_pieces_in_time_order(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 100, gpu=True)
    b.kernel("gemm", 10, 40)  # compute 10-40
    b.memcpy(50, 60)  # memory 50-60
    b.kernel("gemm", 70, 100)
    (d,) = analyze_trace(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))
    (step,) = d.steps
    seg = step_segments(d, step, resolution=0)
    assert seg is not None
    kinds = [SEGMENT_KINDS[k] for k in seg.kind]
    assert [k for k in kinds if not k.startswith("idle")] == ["compute", "memory", "compute"]
    pieces = {
        (SEGMENT_KINDS[k], o // 1000, n // 1000)
        for k, o, n in zip(seg.kind, seg.offset_ns, seg.length_ns, strict=True)
        if not SEGMENT_KINDS[k].startswith("idle")
    }
    assert pieces == {("compute", 10, 30), ("memory", 50, 10), ("compute", 70, 30)}
    assert sum(seg.length_ns) == step.dur_ns


def test_pick_steps_typical_and_longest(shared_traces: Path) -> None:
    path = next((shared_traces / "kineto-resnet50").glob("*.pt.trace.json.gz"))
    (d,) = analyze_trace(load_trace(str(path)))
    picked = pick_steps(d.steps)
    durs = sorted(s.dur_ns for s in d.steps)
    assert max(s.dur_ns for s in picked) == durs[-1]
    assert durs[(len(durs) - 1) // 2] in [s.dur_ns for s in picked]
    assert pick_steps([]) == []


def test_html_draws_the_pieces(shared_traces: Path) -> None:
    path = next((shared_traces / "kineto-resnet50").glob("*.pt.trace.json.gz"))
    trace = load_trace(str(path))
    outcome = outcome_of(trace, analyze_trace(trace), top=10)
    (segs,) = outcome.segments
    assert 1 <= len(segs) <= 2
    page = render_html(diagnose_job([outcome]))
    assert page.count('class="plot step-pieces"') == len(segs)
    assert page.count('<rect class="piece"') == sum(len(s.kind) for s in segs)


@pytest.mark.parametrize("resolution", [0.5, 1.0])
def test_coarse_resolution_hides_and_counts(shared_traces: Path, resolution: float) -> None:
    path = next((shared_traces / "kineto-resnet50").glob("*.pt.trace.json.gz"))
    (d,) = analyze_trace(load_trace(str(path)))
    seg = step_segments(d, d.steps[0], resolution=resolution)
    assert seg is not None
    assert sum(seg.length_ns) + seg.hidden_ns == d.steps[0].dur_ns
    assert all(n >= resolution * d.steps[0].dur_ns for n in seg.length_ns)


def test_html_environment_shows_cuda_versions(shared_traces: Path) -> None:
    path = shared_traces / "tracelens-h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
    trace = load_trace(str(path))
    page = render_html(diagnose_job([outcome_of(trace, analyze_trace(trace))]))
    env = page[page.index("<h2>Environment</h2>") :]
    assert "<th>CUDA runtime</th>" in env and "<td>12.4</td>" in env and "<td>12.9</td>" in env
