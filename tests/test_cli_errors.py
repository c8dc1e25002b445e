"""`badput analyze` on bad input: exit 2 and one `badput: error: ` line naming the file.

Also the inputs that are unusual but fine: a CPU-only trace and a directory of traces.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, reference
from synth import TraceBuilder, analyze_json, run_cli

REPO = Path(__file__).resolve().parents[1]
#: A real Kineto trace shipped with badput (ResNet50 on a V100, 2021 schema).
DEMO_TRACE = REPO / "src" / "badput" / "_data" / "resnet50_v100_workers0.pt.trace.json.gz"
#: A smaller real trace (tests/data/traces).
SHARED_TRACE = SHARED_TRACES / "param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz"


def real_trace_gz() -> Path:
    return reference(SHARED_TRACE)


def small_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.launch("gemm_kernel", cpu=(10, 20), gpu=(20, 80))
    return b


def not_json(tmp: Path) -> Path:
    path = tmp / "notes.pt.trace.json"
    path.write_text("this is not a trace, just some text\n")
    return path


def byte_order_mark(tmp: Path) -> Path:
    path = tmp / "bom.pt.trace.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"traceEvents": []}')
    return path


def empty_file(tmp: Path) -> Path:
    path = tmp / "empty.pt.trace.json"
    path.write_bytes(b"")
    return path


def truncated_json(tmp: Path) -> Path:
    data = gzip.decompress(real_trace_gz().read_bytes())
    path = tmp / "half.pt.trace.json"
    path.write_bytes(data[: len(data) // 2])
    return path


def truncated_gzip(tmp: Path) -> Path:
    data = real_trace_gz().read_bytes()
    path = tmp / "half.pt.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def json_list(tmp: Path) -> Path:
    path = tmp / "list.json"
    path.write_text("[1,2]")
    return path


def json_object_not_trace(tmp: Path) -> Path:
    path = tmp / "object.json"
    path.write_text('{"a": 1}')
    return path


def trace_events_not_list(tmp: Path) -> Path:
    path = tmp / "events-object.json"
    path.write_text('{"traceEvents": {"ph": "X"}}')
    return path


def no_events(tmp: Path) -> Path:
    path = tmp / "no-events.json"
    path.write_text('{"traceEvents": []}')
    return path


def negative_duration(tmp: Path) -> Path:
    b = small_trace()
    b.kernel("broken_kernel", 90, 40)  # dur -50 us
    return b.write(tmp / "negative.pt.trace.json")


def negative_duration_host(tmp: Path) -> Path:
    b = small_trace()
    b.cpu_op("aten::broken", 60, 55)  # dur -5 us
    return b.write(tmp / "negative-host.pt.trace.json.gz")


def empty_dir(tmp: Path) -> Path:
    path = tmp / "empty-dir"
    path.mkdir()
    return path


def missing(tmp: Path) -> Path:
    return tmp / "does-not-exist.pt.trace.json"


BAD_INPUTS: list[Callable[[Path], Path]] = [
    not_json,
    byte_order_mark,
    empty_file,
    truncated_json,
    truncated_gzip,
    json_list,
    json_object_not_trace,
    trace_events_not_list,
    no_events,
    negative_duration,
    negative_duration_host,
    empty_dir,
    missing,
]


def assert_one_error_line(err: str, path: Path) -> None:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got {len(lines)}:\n{err}"
    line = lines[0]
    assert line.startswith("badput: error: "), line
    assert str(path) in line, f"the path {path} is not in: {line}"
    assert len(line) > len("badput: error: ") + len(str(path)), "says nothing about what is wrong"


@pytest.mark.parametrize("make", BAD_INPUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_bad_input(
    make: Callable[[Path], Path], fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)
    argv: list[object] = ["analyze", path]
    if fmt == "json":
        argv += ["--format", "json"]
    code, _out, err = run_cli(capsys, *argv)
    assert code == 2, f"exit {code}; stderr: {err}"
    assert_one_error_line(err, path)


def test_cpu_only_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 500)
    b.dataloader(0, 200)
    b.cpu_op("aten::mm", 200, 450)
    b.cpu_op("aten::add", 450, 480)
    b.runtime("cudaGetDeviceCount", 480, 482)
    report = analyze_json(capsys, b.write(tmp_path / "cpu-only.pt.trace.json"))
    assert report["schema"] == "badput.analysis/1"
    (dev,) = report["devices"]
    assert dev["device"] == -1
    assert dev["goodput"] is None
    assert dev["window_us"] == 0
    assert sum(dev["breakdown_us"].values()) == 0
    assert dev["kernels"] == []


def test_cpu_only_trace_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = TraceBuilder("legacy")
    b.cpu_op("aten::mm", 0, 450)
    code, out, err = run_cli(capsys, "analyze", b.write(tmp_path / "cpu-only.pt.trace.json"))
    assert code == 0, err
    assert "Traceback" not in out + err


def test_directory_of_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = tmp_path / "run"
    traces.mkdir()
    names = set()
    for rank in (0, 1):
        b = TraceBuilder()
        b.distributed_info(rank=rank, world_size=2)
        b.profiler_step(1, 0, 100)
        b.launch("gemm_kernel", cpu=(10, 20), gpu=(20, 80))
        suffix = ".pt.trace.json" if rank == 0 else ".pt.trace.json.gz"
        name = f"worker{rank}{suffix}"
        b.write(traces / name)
        names.add(name)
    report = analyze_json(capsys, traces)
    devices = report["devices"]
    assert len(devices) == 2
    assert {Path(dev["trace"]).name for dev in devices} == names
    assert sorted(dev["rank"] for dev in devices) == [0, 1]
    for dev in devices:
        # step [0, 100): compute [20, 80) = 60
        assert abs(dev["window_us"] - 100.0) <= 0.001
        assert abs(dev["breakdown_us"]["compute"] - 60.0) <= 0.001


def test_real_trace_ok(capsys: pytest.CaptureFixture[str]) -> None:
    # the untruncated trace the truncation cases start from is fine
    report = analyze_json(capsys, real_trace_gz())
    assert report["devices"]
    for dev in report["devices"]:
        assert dev["window_us"] > 0


@pytest.mark.parametrize("command", ["analyze", "annotate"])
def test_a_byte_order_mark_is_named(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A UTF-8 byte-order mark before the JSON (an editor's): the error says so, not only
    that the text is not JSON; the trace reader and the Perfetto writer alike."""
    path = real_trace_gz()
    bom = tmp_path / "bom.pt.trace.json"
    bom.write_bytes(b"\xef\xbb\xbf" + gzip.decompress(path.read_bytes()))
    argv: list[object] = [command, bom]
    if command == "annotate":
        argv += ["--out", tmp_path / "o.json"]
    code, _out, err = run_cli(capsys, *argv)
    assert code == 2
    assert_one_error_line(err, bom)
    assert "byte-order mark" in err and "EF BB BF" in err
