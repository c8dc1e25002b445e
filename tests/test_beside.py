"""Parts of an analysis run side by side (`analysis._beside`): same results on 1 or 2 threads.

`analyze_trace(jobs=2)` runs the host's interval sets beside the launch tree, each GPU's
launch statistics beside its critical path, and the steps' own paths beside the window's
path; `outcome_of(jobs=2)` runs the findings' critical-path what-ifs beside the rules, and
`analyze_path` on two threads a lone GPU's critical path beside its diagnosis. Every
reference Kineto trace must give the same JSON report either way.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from badput.analysis._beside import Beside
from badput.analysis.blocking import blocking_calls
from badput.analysis.critical_path import CriticalPath, PathBeside
from badput.analysis.device import analyze_trace
from badput.analysis.results import DeviceAnalysis
from badput.diagnose import diagnose_job, outcome_of
from badput.report.json_report import encode_document, job_document
from badput.trace import load_trace
from badput.trace.model import EventKind, Trace
from conftest import SHARED_TRACES, reference

KINETO = sorted(
    p.relative_to(SHARED_TRACES).as_posix()
    for p in [*SHARED_TRACES.glob("*/*.json"), *SHARED_TRACES.glob("*/*.json.gz")]
    if p.parent.name.startswith(("hta-", "kineto-resnet50", "param-dlrm", "tracelens"))
)


def test_beside_runs_on_a_thread_only_with_jobs() -> None:
    seen: list[str] = []

    def where() -> str:
        seen.append(threading.current_thread().name)
        return "done"

    lazy = Beside(1, where)
    assert seen == []  # one job: runs when asked, in the caller's thread
    assert lazy.result() == "done" and lazy.result() == "done"
    assert seen == [threading.current_thread().name]
    assert Beside(2, where).result() == "done"
    assert seen[-1] == "badput-beside"


def test_beside_raises_in_the_caller() -> None:
    def boom(x: int) -> int:
        raise ValueError(f"bad {x}")

    for jobs in (1, 2):
        part = Beside(jobs, boom, 3)
        with pytest.raises(ValueError, match="bad 3"):
            part.result()


@pytest.mark.parametrize("name", KINETO)
def test_two_threads_give_the_same_report(name: str) -> None:
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    docs = []
    for jobs in (1, 2):
        devices = analyze_trace(trace, jobs=jobs)
        job = diagnose_job([outcome_of(trace, devices, jobs=jobs)])
        docs.append(encode_document(job_document(job, top=0)))
    assert docs[0] == docs[1]


def test_what_ifs_on_the_helper_thread_reach_their_findings() -> None:
    """The ResNet trace's findings that carry a what-if get it from the helper thread."""
    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    got = {}
    for jobs in (1, 2):
        outcome = outcome_of(trace, analyze_trace(trace, jobs=jobs), jobs=jobs)
        got[jobs] = {f.id: f.graph_savings_ns for fs in outcome.findings for f in fs}
    with_path = {k: v for k, v in got[2].items() if v is not None}
    assert with_path, got  # at least one finding's saving was found along the path
    assert got[1] == got[2]


@pytest.mark.parametrize("name", KINETO)
def test_a_path_found_beside_the_diagnosis_gives_the_same_report(name: str) -> None:
    """`analyze_path` on two threads finds a lone GPU's critical path beside the rules."""
    from badput.scale.work import analyze_path

    path = str(reference(SHARED_TRACES / name))
    docs = []
    for jobs in (1, 2):
        job = diagnose_job([analyze_path(path, top=0, read_jobs=jobs)])
        docs.append(encode_document(job_document(job, top=0)))
    assert docs[0] == docs[1]


def test_a_path_being_found_is_waited_for_by_the_what_ifs_alone() -> None:
    """The rules run while the path is found; each what-if waits for it on the what-if thread."""
    from badput.analysis.critical_path import critical_path
    from badput.diagnose import diagnose_device

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    (device,) = analyze_trace(trace, jobs=2, critical_paths=False)
    assert device.critical_path is None
    release = threading.Event()
    waited_on: list[str] = []

    def slow_path() -> CriticalPath:
        release.wait(timeout=60)  # held until the rules are done
        waited_on.append(threading.current_thread().name)
        assert device.timeline is not None
        return critical_path(trace, device, device.timeline.tree)

    pending = Beside(2, slow_path)
    found = []

    def rules_then_release() -> None:
        found.extend(diagnose_device(trace, device, 2, pending))

    worker = threading.Thread(target=rules_then_release)
    worker.start()
    worker.join(timeout=0.5)
    # The what-ifs wait for the path: the diagnosis is not done while it is held.
    assert worker.is_alive() and not found
    release.set()
    worker.join(timeout=60)
    expected = outcome_of(trace, analyze_trace(trace, jobs=1), jobs=1).findings[0]
    assert [(f.id, f.graph_savings_ns) for f in found] == [
        (f.id, f.graph_savings_ns) for f in expected
    ]
    assert waited_on == ["badput-beside"]


def test_two_gpus_paths_found_when_asked_give_the_same_report(tmp_path: Path) -> None:
    """A trace with two GPUs: each path is found when its diagnosis first asks for it."""
    from badput.scale.work import analyze_path
    from synth import TraceBuilder

    b = TraceBuilder()
    b.device_properties([0, 1], name="NVIDIA A100-SXM4-80GB")
    for step in range(3):
        t0 = step * 1000
        b.profiler_step(step + 1, t0, t0 + 900)
        b.runtime("cudaStreamSynchronize", t0 + 850, t0 + 890)  # a blocking call per step
        for dev in (0, 1):
            b.launch(
                "gemm_kernel", cpu=(t0 + 10 + dev, t0 + 20), gpu=(t0 + 30, t0 + 700), device=dev
            )
    path = str(b.write(tmp_path / "two_gpus.json"))
    docs = []
    for jobs in (1, 2):
        outcome = analyze_path(path, top=0, read_jobs=jobs)
        assert outcome.error is None and len(outcome.devices) == 2
        assert all(d.critical_path is not None for d in outcome.devices)
        docs.append(encode_document(job_document(diagnose_job([outcome]), top=0)))
    assert docs[0] == docs[1]


def test_a_lone_gpus_graph_starts_with_its_window_and_is_the_analysis_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`analyze_with_paths` on two threads: the graph starts once the window is chosen (before
    the GPU's launch statistics), and the path is the one `analyze_trace` finds."""

    import badput.analysis.device as device_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    order: list[str] = []
    start, stats = device_mod._EarlyPath.start, device_mod.launch_stats

    def started(self: device_mod._EarlyPath, w0: int, w1: int, names: list[str]) -> None:
        order.append("graph")
        start(self, w0, w1, names)

    def launch_stats(*args: object, **kwargs: object) -> object:
        order.append("launch stats")
        return stats(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(device_mod._EarlyPath, "start", started)
    monkeypatch.setattr(device_mod, "launch_stats", launch_stats)
    devices, paths = device_mod.analyze_with_paths(trace, jobs=2)
    assert order == ["graph", "launch stats"]
    assert devices[0].critical_path is None and paths[0] is not None
    got = paths[0].result()
    want = analyze_trace(trace, jobs=1)[0].critical_path
    assert want is not None and got.graph is not None and want.graph is not None
    assert (got.length_ns, got.breakdown_ns, got.top_ops, got.steps, got.warnings) == (
        want.length_ns, want.breakdown_ns, want.top_ops, want.steps, want.warnings,
    )  # fmt: skip
    assert np.array_equal(got.rows, want.rows)
    for key in ("node_ns", "edge_src", "edge_dst", "edge_weight_ns", "chain_weight_ns"):
        assert np.array_equal(getattr(got.graph, key), getattr(want.graph, key)), key
    assert got.blocking is not None and want.blocking is not None
    assert np.array_equal(got.blocking.rows, want.blocking.rows)


def test_a_graph_waiting_for_a_failed_analysis_gets_its_error() -> None:
    """The early graph asks for the blocking calls late; a failed analysis hands it the error."""
    import badput.analysis.device as device_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    (device,) = analyze_trace(trace, jobs=1, critical_paths=False)
    assert device.timeline is not None and device.timeline.tree is not None
    early = device_mod._EarlyPath(trace, device.timeline.tree, device.device, 2, True)
    w0 = device.window_start_ns
    early.start(w0, w0 + device.window_ns, [s.name for s in device.steps])
    early.failed(RuntimeError("the analysis broke"))
    assert early.graph is not None
    with pytest.raises(RuntimeError, match="the analysis broke"):
        early.graph.result()


class _HeldPath(NamedTuple):
    trace: Trace
    device: DeviceAnalysis
    want: CriticalPath  # the path found on one thread
    pending: PathBeside  # the same path, found beside from the same graph once released
    release: threading.Event


def _held_path(monkeypatch: pytest.MonkeyPatch) -> _HeldPath:
    """The ResNet sample's GPU, its path being found beside and held until `release` is set."""
    import badput.analysis.critical_path as cp_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    (device,) = analyze_trace(trace, jobs=1)
    want = device.critical_path
    assert want is not None and want.graph is not None and device.timeline is not None
    tree = device.timeline.tree
    assert tree is not None
    release = threading.Event()
    real = cp_mod.critical_path

    def held(*args: object, **kwargs: object) -> cp_mod.CriticalPath:
        assert release.wait(timeout=60)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cp_mod, "critical_path", held)
    graph = want.graph
    pending = cp_mod.PathBeside(2, trace, device, tree, lambda: graph, lambda: want.blocking)
    return _HeldPath(trace, device, want, pending, release)


def test_what_ifs_run_in_the_graph_before_the_path_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`PathBeside.what_if` needs the graph alone; the path, once found, holds its caches."""

    import badput.analysis.critical_path as cp_mod

    trace, _, want, pending, release = _held_path(monkeypatch)
    loader = np.flatnonzero(trace.kind == EventKind.CPU_OP)[:50].astype(np.int64)
    change = cp_mod.GraphChange(host_rows=loader)
    shorter = pending.what_if(trace, change)  # the path is still held
    assert not release.is_set()
    release.set()
    got = pending.result()
    assert got.length_ns == want.length_ns
    assert got._what_if_base is pending._base and got._what_if_base  # the same caches
    assert shorter == cp_mod.what_if(trace, got, change) == cp_mod.what_if(trace, want, change)


def test_the_findings_what_ifs_all_run_before_the_path_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On two threads each finding's what-if needs the graph alone: the second runs while the
    path is still being found (the first does not hold the what-if thread waiting for it),
    and the savings, taken against the path once found, are those of one thread."""
    import badput.analysis.critical_path as cp_mod
    from badput.diagnose.context import DeviceContext

    trace, device, want, pending, release = _held_path(monkeypatch)
    ctx = DeviceContext(trace, device, jobs=2, path=pending)
    # The path is the host's (a data-loading-bound step): two host what-ifs shorten it.
    changes = [cp_mod.GraphChange(all_host=True), cp_mod.GraphChange(all_host=True, host_scale=0.5)]
    found = [
        ctx.finding("host-overhead", f"what-if {i}", ctx.step_ns, {}, change=c)
        for i, c in enumerate(changes)
    ]
    assert all(f is not None and f.graph_savings_ns is None for f in found)
    try:
        lengths = [job.result(timeout=30) for job in ctx._pending.values()]
        assert not release.is_set()  # both ran with the path still held
    finally:
        release.set()
    assert pending._base  # the what-ifs' caches, made in the graph
    ctx.done_with_what_ifs()  # before the findings take their savings: the caches go all the same
    assert not pending._base and not pending._spans
    got = ctx.with_graph_savings([f for f in found if f is not None])
    one = DeviceContext(trace, device)  # one thread: the path found, each what-if in turn
    expected = [one.graph_savings(c) for c in changes]
    assert lengths == [cp_mod.what_if(trace, want, c) for c in changes]
    assert [f.graph_savings_ns for f in got] == expected
    assert all(s is not None and s > 0 for s in expected) and expected[0] != expected[1]


def test_a_failed_analysis_leaves_no_graph_thread_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis fails after its graph started: the error reaches the caller, and the
    graph's thread, which waits for the analysis's blocking calls, ends rather than hangs."""
    import time

    import badput.analysis.device as device_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("launch statistics broke")

    monkeypatch.setattr(device_mod, "launch_stats", broken)
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="launch statistics broke"):
        device_mod.analyze_with_paths(trace, jobs=2)
    started = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + 60
    for t in started:
        t.join(timeout=max(deadline - time.monotonic(), 0))
    assert not [t.name for t in started if t.is_alive()]


def test_a_call_run_when_asked_runs_once_for_two_threads() -> None:
    calls: list[int] = []
    gate = threading.Event()

    def slow() -> int:
        calls.append(1)
        gate.wait(5)
        return len(calls)

    part = Beside(1, slow)
    out: list[int] = []
    asking = [threading.Thread(target=lambda: out.append(part.result())) for _ in range(2)]
    for t in asking:
        t.start()
    gate.set()
    for t in asking:
        t.join(5)
    assert calls == [1] and out == [1, 1]


def test_blocking_calls_found_once_beside_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # On two threads a lone GPU's graph and its diagnosis both need the blocking calls: they
    # are found once, beside the launch tree (from the idle time alone), and taken by both.
    import badput.analysis.critical_path as cp
    import badput.analysis.device as device_mod
    import badput.diagnose.context as context
    from badput.analysis.device import analyze_with_paths

    found: list[str] = []

    def counted(where: str, real: Any) -> Any:
        def call(*args: object, **kwargs: object) -> object:
            found.append(where)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(cp, "blocking_calls", counted("analysis", cp.blocking_calls))
    monkeypatch.setattr(context, "blocking_calls", counted("analysis", context.blocking_calls))
    early = counted("early", device_mod.blocking_calls_in)
    monkeypatch.setattr(device_mod, "blocking_calls_in", early)
    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    devices, paths = analyze_with_paths(trace, jobs=2)
    outcome = outcome_of(trace, devices, jobs=2, paths=paths)
    assert found == ["early"]
    # The same calls as the analysis's own, found after it: the same sync finding.
    (device,) = analyze_trace(trace, jobs=1, critical_paths=False)
    assert device.critical_path is None
    want = blocking_calls(trace, device)
    (path,) = paths
    assert path is not None
    got = path.blocking()
    assert got is not None
    for key in ("rows", "decided_by", "blocked_ns", "copy_bytes"):
        assert np.array_equal(getattr(got, key), getattr(want, key)), key
    assert np.array_equal(got.idle.starts, want.idle.starts)
    assert got.idle.total_ns() == want.idle.total_ns() > 0
    assert len(got) > 0
    alone = outcome_of(trace, analyze_trace(trace, jobs=1), jobs=1)
    assert [f.id for f in outcome.findings[0]] == [f.id for f in alone.findings[0]]


def test_a_lone_gpus_analysis_goes_on_while_its_blocking_calls_are_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On two threads the window is handed over as soon as it is chosen: the kernel classes
    are found while the blocking calls still are, and the calls reach the path."""
    import badput.analysis.device as device_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    classified = threading.Event()
    waited: list[bool] = []
    calls_in, classify = device_mod.blocking_calls_in, device_mod.classify_kernels

    def blocking_calls_in(*args: Any, **kwargs: Any) -> Any:
        waited.append(classified.wait(timeout=20))  # the classes come first, or never
        return calls_in(*args, **kwargs)

    def classify_kernels(*args: Any, **kwargs: Any) -> Any:
        classified.set()
        return classify(*args, **kwargs)

    monkeypatch.setattr(device_mod, "blocking_calls_in", blocking_calls_in)
    monkeypatch.setattr(device_mod, "classify_kernels", classify_kernels)
    _, paths = device_mod.analyze_with_paths(trace, jobs=2)
    assert waited == [True]
    (path,) = paths
    assert path is not None
    got = path.blocking()
    (device,) = analyze_trace(trace, jobs=1, critical_paths=False)
    want = blocking_calls(trace, device)
    assert got is not None and len(got) == len(want) > 0
    assert np.array_equal(got.rows, want.rows)
    alone = analyze_trace(trace, jobs=1)[0].critical_path
    assert alone is not None and path.result().length_ns == alone.length_ns > 0


def test_a_failed_window_search_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is searched for on the helper thread: its error reaches the caller, which
    does not wait on for a window that never comes."""
    import badput.analysis.device as device_mod

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("no window")

    monkeypatch.setattr(device_mod, "choose_window", broken)
    raised: list[BaseException] = []

    def analyze() -> None:
        try:
            device_mod.analyze_with_paths(trace, jobs=2)
        except BaseException as e:
            raised.append(e)

    caller = threading.Thread(target=analyze, daemon=True)
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "the caller still waits for the window"
    assert [str(e) for e in raised] == ["no window"]


def test_blocking_found_early_is_taken_only_for_the_same_idle_time() -> None:
    # The calls found before the analysis stand only where the analysis has the window and
    # the idle time they were found in; anything else finds them from the analysis.
    import dataclasses

    import badput.analysis.device as device_mod
    from badput.analysis.intervals import IntervalSet

    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    (device,) = analyze_trace(trace, jobs=1, critical_paths=False)
    host, choice, found = device_mod._host_window_blocking(trace, device.device, None)
    assert found is not None and len(host.step_names) > 0
    assert (choice.start_ns, choice.end_ns - choice.start_ns) == (
        device.window_start_ns,
        device.window_ns,
    )
    assert found.calls_of(device) is found.calls
    tl = device.timeline
    assert tl is not None
    less = tl.idle.subtract(IntervalSet.span(int(tl.idle.starts[0]), int(tl.idle.starts[0]) + 1))
    other = dataclasses.replace(device, timeline=dataclasses.replace(tl, idle=less))
    assert found.calls_of(other) is None
    loader = IntervalSet.span(int(tl.idle.starts[0]), int(tl.idle.ends[0]))
    other = dataclasses.replace(device, timeline=dataclasses.replace(tl, idle_dataloader=loader))
    assert found.calls_of(other) is None
    shifted = dataclasses.replace(device, window_start_ns=device.window_start_ns + 1)
    assert found.calls_of(shifted) is None
    # Without a window there is nothing to find early.
    empty = device_mod.WindowSpec.parse(f"ns:{choice.start_ns}-{choice.start_ns}")
    assert device_mod._host_window_blocking(trace, device.device, empty)[2] is None
