"""badput.profiler.on_trace_ready: torch's trace handler, plus the analysis of each trace.

The real-run tests profile a tiny CPU training loop with torch.profiler; the GPU-trace tests
feed the handler a real GPU trace (kineto-resnet50) through a profiler stand-in whose export
copies that file, so that goodput and findings have something to show on a CPU-only machine.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import badput.scale.work  # noqa: E402
from badput.cli.app import main  # noqa: E402
from badput.profiler import TraceHandler, on_trace_ready  # noqa: E402

NAME = re.compile(r"^w0\.(\d{19})\.pt\.trace\.json(\.gz)?$")


def _profile(on_ready: Any, steps: int = 6) -> None:
    """A tiny training loop under torch.profiler: wait 1, warm-up 1, record 3 steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, on_trace_ready=on_ready
    ) as prof:
        for _ in range(steps):
            loss = model(torch.randn(8, 16)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()


def _events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


@pytest.mark.parametrize("use_gzip", [False, True])
def test_real_profiler_run_writes_the_trace_as_torch_does(tmp_path: Path, use_gzip: bool) -> None:
    theirs = torch.profiler.tensorboard_trace_handler(
        str(tmp_path / "torch"), worker_name="w0", use_gzip=use_gzip
    )
    ours = on_trace_ready(tmp_path / "ours", worker_name="w0", use_gzip=use_gzip)
    _profile(lambda prof: None)  # warm-up: first-run initialisation shows in neither trace
    _profile(theirs)  # a profile can be exported once: the same loop, profiled twice
    _profile(ours)
    assert ours.wait(timeout_s=60)
    (torch_file,) = (tmp_path / "torch").iterdir()
    our_files = sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert len(our_files) == 2  # the trace and its report
    (our_file,) = (tmp_path / "ours" / n for n in our_files if ".pt.trace.json" in n)
    # Same naming: worker name, 19-digit time_ns, same suffix.
    m_torch, m_ours = NAME.match(torch_file.name), NAME.match(our_file.name)
    assert m_torch and m_ours
    assert m_torch.group(2) == m_ours.group(2) == (".gz" if use_gzip else None)
    assert 0 < int(m_ours.group(1)) - int(m_torch.group(1)) < 60 * 10**9
    if use_gzip:
        assert our_file.read_bytes()[:2] == b"\x1f\x8b"
    # Same content: the same loop exported by the same exporter gives the same operators.
    theirs_ev, ours_ev = _events(torch_file), _events(our_file)
    assert len(ours_ev) > 50

    def ops(events: list[dict[str, Any]]) -> list[str]:
        return sorted(e["name"] for e in events if e.get("cat") == "cpu_op")

    assert ops(ours_ev) == ops(theirs_ev)
    assert any(e.get("name") == "ProfilerStep#2" for e in ours_ev)
    # The analysis ran: a JSON report next to the trace, named after it.
    (result,) = ours.results
    assert result.error is None
    stem = our_file.name.split(".pt.trace.json")[0]
    report = tmp_path / "ours" / f"{stem}.badput.json"
    assert result.json_path == str(report)
    doc = json.loads(report.read_text())
    assert doc["schema"] == "badput.analysis/1"
    assert doc["traces"][0]["path"] == str(our_file)
    assert doc["traces"][0]["events"] > 50
    assert result.goodput == [] and result.top_finding is None  # CPU only: no GPU goodput


def test_report_is_the_same_document_as_badput_analyze(tmp_path: Path) -> None:
    handler = on_trace_ready(tmp_path, worker_name="w0", background=False)
    _profile(handler)
    (result,) = handler.results
    assert result.json_path is not None
    cli_out = tmp_path / "cli.json"
    assert main(["analyze", result.trace_path, "--format", "json", "--out", str(cli_out)]) == 0
    assert Path(result.json_path).read_bytes() == cli_out.read_bytes()
    # The report lies beside the trace, and `badput analyze <dir>` still reads traces only.
    assert Path(result.json_path).parent == Path(result.trace_path).parent
    cli_out.unlink()
    dir_out = tmp_path / "dir.json"
    assert main(["analyze", str(tmp_path), "--format", "json", "--strict", "-o", str(dir_out)]) == 0
    assert [t["path"] for t in json.loads(dir_out.read_text())["traces"]] == [result.trace_path]


class _CopyProfiler:
    """Stands in for a profiler whose export writes a real GPU trace (a copy of `source`)."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self.exports: list[tuple[str, bool]] = []

    def export_chrome_trace(self, path: str, use_python_export: bool = False) -> None:
        self.exports.append((path, use_python_export))
        shutil.copyfile(self.source, path)


def test_gpu_trace_logs_goodput_and_top_finding(
    tmp_path: Path, shared_traces: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = shared_traces / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    expected = badput.scale.work.analyze_path(str(source))
    goodput = expected.devices[0].goodput
    assert goodput is not None
    prof = _CopyProfiler(source)
    handler = on_trace_ready(tmp_path, worker_name="w0", use_gzip=True, use_python_export=True)
    with caplog.at_level(logging.INFO, logger="badput"):
        handler(prof)
        assert handler.wait(timeout_s=60)
    assert prof.exports[0][1] is True  # use_python_export goes through, as in torch
    (result,) = handler.results
    assert result.goodput == pytest.approx([goodput], abs=1e-12)
    assert result.top_finding == "data-loading"
    lines = [r.getMessage() for r in caplog.records if r.name == "badput"]
    # The same numbers as `badput analyze`: 55.5 % goodput, data loading first.
    assert any(
        f"GPU 0 goodput {100 * goodput:.1f} %" in line and "[data-loading]" in line
        for line in lines
    ), lines
    assert "55.5 %" in lines[0]
    assert any(str(result.json_path) in line for line in lines)


def test_analysis_error_is_a_warning_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(badput.scale.work, "analyze_path", broken)
    handler = on_trace_ready(tmp_path, worker_name="w0")
    with caplog.at_level(logging.WARNING, logger="badput"):
        _profile(handler)  # would raise out of prof.step() if the hook raised
        assert handler.wait(timeout_s=60)
    (trace,) = tmp_path.glob("w0.*.pt.trace.json")
    assert len(_events(trace)) > 50  # the trace is written all the same
    (result,) = handler.results
    assert result.error == "RuntimeError: analysis exploded" and result.json_path is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "analysis exploded" in warnings[0].getMessage()
    assert not list(tmp_path.glob("*.badput.json"))


def test_unreadable_trace_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "garbage.json"
    bad.write_text('{"traceEvents": [oops')
    handler = on_trace_ready(tmp_path / "log", worker_name="w0", background=False)
    with caplog.at_level(logging.WARNING, logger="badput"):
        handler(_CopyProfiler(bad))
    (result,) = handler.results
    assert result.error is not None and result.json_path is None
    assert [r.levelno for r in caplog.records if r.name == "badput"] == [logging.WARNING]


def test_background_analysis_does_not_hold_the_training_loop(
    tmp_path: Path, shared_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    real = badput.scale.work.analyze_path

    def slow(*args: Any, **kwargs: Any) -> Any:
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(badput.scale.work, "analyze_path", slow)
    source = shared_traces / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    handler = on_trace_ready(tmp_path, worker_name="w0", use_gzip=True)
    start = time.perf_counter()
    handler(_CopyProfiler(source))
    returned_s = time.perf_counter() - start
    assert handler.results == []  # the call returned while the analysis was still waiting
    assert not handler.wait(timeout_s=0.05)
    release.set()
    assert handler.wait(timeout_s=60)
    assert [r.top_finding for r in handler.results] == ["data-loading"]
    assert returned_s < 5.0  # copy of a 1.1 MB file; the analysis itself was held for longer
    handler.close()


def test_unwritable_folder_fails_as_torch_does(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    theirs = torch.profiler.tensorboard_trace_handler(str(blocker / "log"))
    with pytest.raises(RuntimeError, match="Can't create directory"):
        theirs(_CopyProfiler(blocker))
    ours: TraceHandler = on_trace_ready(blocker / "log")
    with pytest.raises(RuntimeError, match="Can't create directory"):
        ours(_CopyProfiler(blocker))
