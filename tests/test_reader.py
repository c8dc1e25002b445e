"""The Kineto reader on files laid out in many ways, and the analysis facts that depend on it.

Every variant is built in a temporary folder from a real trace or with `tests/synth.py`:
streaming in small pieces equals decoding the whole file; event order does not matter; odd
field types take the lenient path; CUDA graphs, `cuda_sync` records, `distributedInfo` and GPU
names; kernel name classification; dropped steps are reported; `--window`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.analysis import DeviceAnalysis, analyze_trace
from badput.analysis.patterns import is_communication_kernel, kernel_category
from badput.cli.app import main
from badput.trace import EventKind, Trace, kineto, load_trace
from conftest import SHARED_TRACES, reference
from synth import BASE_NS, NCCL_ALLREDUCE, NCCL_ALLREDUCE_OLD, TraceBuilder

SHARED = SHARED_TRACES
RESNET = SHARED / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
EDGE_V100 = SHARED / "kineto-edge/gpu_metrics_input.json"
DLRM = SHARED / "param-dlrm-8rank"

COLUMNS = (
    "kind",
    "phase",
    "ts_ns",
    "dur_ns",
    "name_id",
    "pid",
    "tid",
    "device",
    "stream",
    "correlation",
    "external_id",
)
WHOLE = 64 << 20  # a piece larger than any file here: the events array decoded in one go

GEMM = "volta_sgemm_128x32_nt"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)"
)


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys: pytest.CaptureFixture[str], *argv: object) -> dict[str, Any]:
    """`badput analyze ... --format json`, numbers with fractions as exact Decimals."""
    code, out, err = run(capsys, "analyze", *argv, "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out, parse_float=Decimal)
    return doc


def read(monkeypatch: pytest.MonkeyPatch, path: Path, chunk: int) -> tuple[Trace, list[int]]:
    monkeypatch.setattr(kineto, "CHUNK_BYTES", chunk)
    calls: list[int] = []
    trace = kineto.read_kineto(str(path), progress=calls.append)
    return trace, calls


def with_labels(trace: Trace, col: str) -> list[int | str]:
    """A pid or tid column with label ids replaced by their labels."""
    return [trace.labels[-v - 2] if v < -1 else v for v in getattr(trace, col).tolist()]


def assert_same_trace(
    a: Trace, b: Trace, *, header: bool = True, same_label_ids: bool = True
) -> None:
    assert len(a) == len(b)
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype, col
        if col in ("pid", "tid") and not same_label_ids:
            assert with_labels(a, col) == with_labels(b, col), f"column {col} differs"
        else:
            assert np.array_equal(x, y), f"column {col} differs"
    assert a.names == b.names
    if same_label_ids:
        assert a.labels == b.labels
    else:
        assert sorted(a.labels) == sorted(b.labels)
    if header:
        assert (a.rank, a.world_size, a.gpu_names) == (b.rank, b.world_size, b.gpu_names)
        assert a.warnings == b.warnings


def same_analysis(a: list[DeviceAnalysis], b: list[DeviceAnalysis]) -> bool:
    """Equal apart from the trace path."""
    return [dataclasses.replace(d, trace="") for d in a] == [
        dataclasses.replace(d, trace="") for d in b
    ]


def lines_array(events: list[Any]) -> str:
    """A JSON array with one event per line, the way Kineto writes it."""
    return "[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]"


def document_text(
    head: dict[str, Any], events_text: str, tail: dict[str, Any] | None = None
) -> str:
    parts = [f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items()]
    text = "{\n" + "".join(parts) + '  "traceEvents": ' + events_text
    for k, v in (tail or {}).items():
        text += f",\n  {json.dumps(k)}: {json.dumps(v)}"
    return text + "\n}\n"


# ---- (a) streaming equals whole-file decode ----------------------------------------------------


@pytest.fixture(scope="module")
def resnet_json(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The ResNet50 trace decompressed (35 MB, one event per indented block), and parsed."""
    data = gzip.decompress(reference(RESNET).read_bytes())
    path = tmp_path_factory.mktemp("resnet") / "resnet.pt.trace.json"
    path.write_bytes(data)
    return path, json.loads(data)


@pytest.fixture(scope="module")
def resnet_whole(resnet_json: tuple[Path, dict[str, Any]]) -> Trace:
    path = resnet_json[0]
    old = kineto.CHUNK_BYTES
    kineto.CHUNK_BYTES = WHOLE
    try:
        return kineto.read_kineto(str(path))
    finally:
        kineto.CHUNK_BYTES = old


def test_resnet_reference_read(resnet_whole: Trace) -> None:
    # pin what the reference read sees, so that equality below means something
    # 62,858 complete and flow events, plus 12,838 "[memory]" allocator events
    assert len(resnet_whole) == 62_858 + 12_838
    assert int(np.count_nonzero(resnet_whole.kind == EventKind.MEMORY)) == 12_838
    assert resnet_whole.devices() == [0]
    assert resnet_whole.gpu_names[0] == "Tesla V100-DGXS-32GB"
    assert len(resnet_whole.gpu_names) == 4
    assert int(np.count_nonzero(resnet_whole.kind == EventKind.KERNEL)) == 8_772
    assert resnet_whole.warnings == []
    assert "stream 7" not in resnet_whole.labels  # "stream 7" is read as stream 7
    kernels = resnet_whole.kind == EventKind.KERNEL
    assert set(resnet_whole.stream[kernels].tolist()) == {7}


def test_spans_of_rows_are_starts_and_ends(resnet_whole: Trace) -> None:
    # `spans_of` is `ts_ns[rows]` with `end_of(rows)`, for rows in any order and repeated
    rows = np.flatnonzero(resnet_whole.kind == EventKind.KERNEL)[::-7][:500]
    rows = np.concatenate([rows, rows[:3]])
    start, end = resnet_whole.spans_of(rows)
    assert np.array_equal(start, resnet_whole.ts_ns[rows])
    assert np.array_equal(end, resnet_whole.ts_ns[rows] + resnet_whole.dur_ns[rows])
    assert np.array_equal(end, resnet_whole.end_of(rows))
    assert start.dtype == end.dtype == np.int64 and int((end - start).min()) >= 0
    assert int((end - start).max()) > 0


def test_streaming_equals_whole_decode(
    monkeypatch: pytest.MonkeyPatch,
    resnet_json: tuple[Path, dict[str, Any]],
    resnet_whole: Trace,
) -> None:
    path = resnet_json[0]
    size = path.stat().st_size
    small, calls = read(monkeypatch, path, 4096)
    assert len(calls) > 1000  # it did stream: one progress call per decoded piece
    assert calls[-1] == size
    assert calls == sorted(calls)
    assert_same_trace(small, resnet_whole)
    default, calls = read(monkeypatch, path, 8 << 20)
    assert len(calls) >= 2
    assert_same_trace(default, resnet_whole)


def test_streaming_gzip_equals_whole_decode(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    resnet_json: tuple[Path, dict[str, Any]],
    resnet_whole: Trace,
) -> None:
    gz = tmp_path / "resnet.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(resnet_json[0].read_bytes(), compresslevel=1, mtime=0))
    trace, calls = read(monkeypatch, gz, 1 << 16)
    assert len(calls) > 100
    assert calls[-1] == resnet_json[0].stat().st_size  # uncompressed bytes
    assert_same_trace(trace, resnet_whole)


def test_one_line_and_bare_array_layouts(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    resnet_json: tuple[Path, dict[str, Any]],
    resnet_whole: Trace,
) -> None:
    doc = resnet_json[1]
    # ts and dur are integers in this trace, so json re-serialization keeps them exactly
    one_line = json.dumps(doc).encode()
    assert b"\n" not in one_line
    bare = json.dumps(doc["traceEvents"]).encode()
    assert bare.startswith(b"[") and b"\n" not in bare
    bare_lines = lines_array(doc["traceEvents"]).encode()
    variants: list[tuple[str, bytes, bool, int]] = [
        ("one_line.json", one_line, True, 4096),
        ("one_line.json.gz", gzip.compress(one_line, compresslevel=1, mtime=0), True, 8 << 20),
        ("bare.json", bare, False, 8 << 20),
        ("bare.json.gz", gzip.compress(bare, compresslevel=1, mtime=0), False, 4096),
        ("bare_lines.json", bare_lines, False, 1 << 16),
    ]
    for name, data, has_header, chunk in variants:
        path = tmp_path / name
        path.write_bytes(data)
        trace, calls = read(monkeypatch, path, chunk)
        assert_same_trace(trace, resnet_whole, header=has_header)
        if name == "bare_lines.json":
            assert len(calls) > 100  # one event per line: streamed
        if not has_header:  # a bare array has no deviceProperties
            assert trace.gpu_names == {} and trace.rank is None


def test_cut_points_that_are_not_events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Indented layout, traceEvents first and deviceProperties after it, and an event whose args
    # hold a list of objects: lines `{` after a `,` that do not start an event.
    b = TraceBuilder()
    b.profiler_step(1, 0, 1000)
    for i in range(60):
        b.launch(GEMM if i % 2 else ADD, cpu=(10 * i, 10 * i + 5), gpu=(10 * i + 5, 10 * i + 9))
    events = json.loads(b.text())["traceEvents"]
    events[5]["args"]["Input Dims"] = [{"a": 1}, {"b": [{"c": 2}, {"d": 3}]}, {"e": 4}]
    doc = {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "X"}],
        "distributedInfo": {"rank": 1, "world_size": 2},
    }
    path = tmp_path / "indented.json"
    path.write_text(json.dumps(doc, indent=1))
    whole, _ = read(monkeypatch, path, WHOLE)
    assert whole.gpu_names == {0: "NVIDIA H100 80GB HBM3", 1: "X"}
    assert (whole.rank, whole.world_size) == (1, 2)
    assert int(np.count_nonzero(whole.kind == EventKind.KERNEL)) == 60
    for chunk in (64, 256, 1000, 4096):
        trace, _ = read(monkeypatch, path, chunk)
        assert_same_trace(trace, whole)


# ---- (b) event order does not matter --------------------------------------------------------


def test_shuffled_real_trace_same_analysis(
    tmp_path: Path, resnet_json: tuple[Path, dict[str, Any]], resnet_whole: Trace
) -> None:
    doc = resnet_json[1]
    events = list(doc["traceEvents"])
    random.Random(7).shuffle(events)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    path = tmp_path / "shuffled.json"
    path.write_text(document_text(head, lines_array(events)))
    expected = analyze_trace(resnet_whole)
    assert len(expected[0].steps) == 6
    assert same_analysis(analyze_trace(load_trace(str(path))), expected)


@pytest.mark.parametrize(
    "name",
    [
        "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
        "param-dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
        "kineto-edge/before_fix_trace.json",
    ],
)
def test_shuffled_small_real_traces_same_analysis(name: str, tmp_path: Path) -> None:
    src = reference(SHARED / name)
    raw = gzip.decompress(src.read_bytes()) if name.endswith(".gz") else src.read_bytes()
    doc = json.loads(raw)
    expected = analyze_trace(load_trace(str(src)))
    for seed in (1, 2):
        events = list(doc["traceEvents"])
        random.Random(seed).shuffle(events)
        path = tmp_path / f"shuffled{seed}.json"
        path.write_text(json.dumps({**doc, "traceEvents": events}))
        assert same_analysis(analyze_trace(load_trace(str(path))), expected)


def test_shuffled_synthetic_same_analysis(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.device_properties([0, 1])
    for k in range(1, 4):
        s = 200 * (k - 1)
        b.profiler_step(k, s, s + 200)
        b.dataloader(s, s + 30)
        b.launch(GEMM, cpu=(s + 40, s + 45), gpu=(s + 50, s + 120))
        b.launch(NCCL_ALLREDUCE, cpu=(s + 45, s + 50), gpu=(s + 100, s + 180), stream=20)
        b.launch(ADD, cpu=(s + 50, s + 55), gpu=(s + 60, s + 90), device=1)
        b.launch("Memcpy DtoH", kind="memcpy", cpu=(s + 55, s + 60), gpu=(s + 180, s + 195))
        b.cpu_op("aten::add", s + 60, s + 100)
    expected = analyze_trace(load_trace(str(b.write(tmp_path / "plain.json"))))
    assert [d.device for d in expected] == [0, 1]
    assert [len(d.steps) for d in expected] == [3, 3]
    for seed in range(4):
        path = b.write(tmp_path / f"s{seed}.json.gz", shuffle=seed)
        assert same_analysis(analyze_trace(load_trace(str(path))), expected)


# ---- (c) the lenient path --------------------------------------------------------------------

LENIENT_EVENTS = [
    # host: pid/tid as numeric strings
    '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": "123", "tid": "123",'
    ' "ts": 1000, "dur": 100}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 123, "tid": 123,'
    ' "ts": 1010, "dur": 5, "args": {"correlation": 7}}',
    # GPU: args.device as a string, a quoted ts, tid "stream 7" but args.stream 9
    '{"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": "stream 7",'
    ' "ts": "1020.5", "dur": 30, "args": {"device": "1", "stream": 9, "correlation": 7}}',
    # GPU without args: device from pid, stream from "stream 5"
    '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 2, "tid": "stream 5", "ts": 1060,'
    ' "dur": 10}',
    # GPU with pid/tid as numeric strings and no args
    '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": "3", "tid": "11",'
    ' "ts": 1070, "dur": 4}',
    # a null category, and label pids/tids
    '{"ph": "X", "cat": null, "name": "weird", "pid": "Traces", "tid": "PyTorch Profiler",'
    ' "ts": 1000, "dur": 200}',
    '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",'
    ' "tid": "PyTorch Profiler", "ts": 1000, "dur": 200}',
    # entries that are not objects
    "42",
    '"text"',
    "null",
    "[1, 2]",
]


def _lenient_file(tmp_path: Path) -> Path:
    path = tmp_path / "lenient.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(LENIENT_EVENTS) + "\n]}\n")
    return path


def test_lenient_fields_are_read(tmp_path: Path) -> None:
    trace = load_trace(str(_lenient_file(tmp_path)))
    assert trace.warnings == ["skipped 4 entries that are not objects"]
    rows = {trace.name_of(i): i for i in range(len(trace))}
    assert set(rows) == {
        "ProfilerStep#1",
        "cudaLaunchKernel",
        "k1",
        "k2",
        "Memcpy HtoD",
        "weird",
        "PyTorch Profiler (0)",
    }

    def row(name: str, col: str) -> int:
        return int(getattr(trace, col)[rows[name]])

    assert row("ProfilerStep#1", "pid") == 123 and row("ProfilerStep#1", "tid") == 123
    assert row("ProfilerStep#1", "device") == -1
    assert row("k1", "kind") == EventKind.KERNEL
    assert (row("k1", "device"), row("k1", "stream")) == (1, 9)
    assert row("k1", "ts_ns") == 1_020_500
    assert row("k1", "correlation") == 7
    assert (row("k2", "device"), row("k2", "stream")) == (2, 5)
    assert row("Memcpy HtoD", "kind") == EventKind.MEMCPY
    assert (row("Memcpy HtoD", "device"), row("Memcpy HtoD", "stream")) == (3, 11)
    assert row("weird", "kind") == EventKind.OTHER
    assert row("weird", "device") == -1
    # labels get negative ids, the same label the same id
    assert row("weird", "pid") < -1 and row("weird", "tid") < -1
    assert row("weird", "tid") == row("PyTorch Profiler (0)", "tid")
    assert trace.labels[-row("weird", "pid") - 2] == "Traces"
    assert trace.devices() == [1, 2, 3]


def test_lenient_trace_analyzes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = report(capsys, _lenient_file(tmp_path))
    assert doc["traces"][0]["warnings"] == ["skipped 4 entries that are not objects"]
    devices = {d["device"]: d for d in doc["devices"]}
    assert sorted(devices) == [1, 2, 3]
    # device 1: its kernel was launched inside the step: window [1000, 1100) us
    d1 = devices[1]
    assert [s["name"] for s in d1["steps"]] == ["ProfilerStep#1"]
    assert d1["window_start_us"] == 1000 and d1["window_us"] == 100
    assert d1["breakdown_us"]["compute"] == 30
    assert devices[3]["breakdown_us"]["memory"] == 4


def test_lenient_pieces_equal_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # typed and lenient pieces mixed in one streamed file
    plain = [
        json.dumps(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 5}",
                "pid": 0,
                "tid": 7,
                "ts": 2000 + 10 * i,
                "dur": 3,
                "args": {"device": 0, "stream": 7, "correlation": 100 + i},
            }
        )
        for i in range(200)
    ]
    events = plain[:100] + LENIENT_EVENTS + plain[100:] + LENIENT_EVENTS[:7]
    path = tmp_path / "mixed.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + "\n]}\n")
    whole, _ = read(monkeypatch, path, WHOLE)
    assert int(np.count_nonzero(whole.kind == EventKind.KERNEL)) == 200 + 2 + 2
    for chunk in (128, 1024, 4096):
        trace, _ = read(monkeypatch, path, chunk)
        # label ids follow the order labels are first met, which depends on the pieces
        assert_same_trace(trace, whole, same_label_ids=False)


# ---- (d) CUDA graphs ---------------------------------------------------------------------------


def test_graph_launch_stretches_step_to_last_kernel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = TraceBuilder()
    # step 1, CPU [0, 100): one cudaGraphLaunch [10, 20) replays 3 kernels up to 400
    b.profiler_step(1, 0, 100)
    c1 = b.runtime("cudaGraphLaunch", 10, 20)
    for s, e in ((30, 80), (80, 200), (200, 400)):
        b.kernel(GEMM, s, e, correlation=c1)
    # step 2, CPU [100, 200): another graph launch [110, 120), kernels [400, 650)
    b.profiler_step(2, 100, 200)
    c2 = b.runtime("cudaGraphLaunch", 110, 120)
    for s, e in ((400, 450), (450, 500), (500, 650)):
        b.kernel(GEMM, s, e, correlation=c2)
    doc = report(capsys, b.write(tmp_path / "graphs.json"))
    (dev,) = doc["devices"]
    base_us = Decimal(BASE_NS) / 1000
    assert dev["window_source"] == "cpu_steps"
    assert dev["window_start_us"] == base_us
    assert dev["window_us"] == 650  # [0, 650): step 2 ends with its last graph kernel
    steps = [(s["name"], s["start_us"] - base_us, s["dur_us"]) for s in dev["steps"]]
    assert steps == [("ProfilerStep#1", 0, 400), ("ProfilerStep#2", 400, 250)]
    assert dev["dropped_steps"] == []
    # compute [30, 650) = 620; idle [0, 30): runtime [10, 20), other 20
    assert dev["breakdown_us"] == {"compute": 620, "communication": 0, "memory": 0, "idle": 30}
    assert dev["idle_causes_us"] == {"runtime": 10, "dataloader": 0, "cpu": 0, "other": 20}
    assert dev["steps"][0]["breakdown_us"]["compute"] == 370
    assert dev["steps"][1]["breakdown_us"] == {
        "compute": 250,
        "communication": 0,
        "memory": 0,
        "idle": 0,
    }
    assert [(k["name"], k["count"], k["total_us"]) for k in dev["kernels"]] == [(GEMM, 6, 620)]


# ---- (e) cuda_sync is not GPU activity ---------------------------------------------------------


def _sync_base(with_steps: bool) -> TraceBuilder:
    b = TraceBuilder()
    if with_steps:
        b.profiler_step(1, 0, 150)
        b.profiler_step(2, 150, 300)
    b.launch(GEMM, cpu=(0, 5), gpu=(10, 100))
    b.launch(GEMM, cpu=(150, 155), gpu=(200, 300))
    return b


@pytest.mark.parametrize("with_steps", [False, True])
def test_cuda_sync_is_not_gpu_activity(tmp_path: Path, with_steps: bool) -> None:
    plain = _sync_base(with_steps)
    synced = _sync_base(with_steps)
    synced.cuda_sync("Stream Sync", 100, 200)  # fills the idle gap, stream -1
    synced.cuda_sync("Event Sync", 300, 500)  # past the last kernel
    synced.cuda_sync("Stream Wait Event", 0, 10, stream=-1, device=3)  # a GPU with no work
    a = load_trace(str(plain.write(tmp_path / "plain.json")))
    b = load_trace(str(synced.write(tmp_path / "synced.json")))
    sync = b.kind == EventKind.SYNC
    assert int(sync.sum()) == 3
    assert set(b.stream[sync].tolist()) == {-1}
    assert set(b.device[sync].tolist()) == {0, 3}
    assert b.devices() == [0]
    expected = analyze_trace(a)
    got = analyze_trace(b)
    assert same_analysis(got, expected)
    (d,) = got
    assert d.breakdown.idle_ns > 0  # the gap [100, 200) stays idle
    assert d.window_ns == (300_000 if with_steps else 290_000)


# ---- (f) distributedInfo -----------------------------------------------------------------------

_DIST_EVENTS = lines_array(
    [
        {
            "ph": "X",
            "cat": "kernel",
            "name": GEMM,
            "pid": 0,
            "tid": 7,
            "ts": 1000,
            "dur": 10,
            "args": {"device": 0, "stream": 7},
        }
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            document_text(
                {"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}}, _DIST_EVENTS
            ),
            (3, 8),
            id="int",
        ),
        pytest.param(
            document_text({"distributedInfo": {"rank": "3", "world_size": "8"}}, _DIST_EVENTS),
            (3, 8),
            id="strings",
        ),
        pytest.param(
            '{\n  "distributedInfo": {\n    "backend": "nccl",\n    "rank": 3,\n'
            '    "world_size": 8\n  },\n  "traceEvents": ' + _DIST_EVENTS + "\n}\n",
            (3, 8),
            id="several-lines",
        ),
        pytest.param(
            document_text({}, _DIST_EVENTS, {"distributedInfo": {"rank": 3, "world_size": 8}}),
            (3, 8),
            id="after-events",
        ),
        pytest.param(
            document_text({"distributedInfo": {"rank": 3, "world_size": 8}}, _DIST_EVENTS).replace(
                "\n", ""
            ),
            (3, 8),
            id="one-line",
        ),
        pytest.param(
            document_text({"distributedInfo": {"rank": 0, "world_size": 2}}, _DIST_EVENTS),
            (0, 2),
            id="rank-0",
        ),
        pytest.param(
            document_text({"distributedInfo": {"rank": 5}}, _DIST_EVENTS), (5, None), id="no-world"
        ),
        pytest.param(
            document_text({"distributedInfo": {"rank": 1, "worldSize": 4}}, _DIST_EVENTS),
            (1, 4),
            id="camel-world",
        ),
        pytest.param(document_text({}, _DIST_EVENTS), (None, None), id="missing"),
        pytest.param(
            document_text({"distributedInfo": {"backend": "nccl"}}, _DIST_EVENTS),
            (None, None),
            id="no-rank",
        ),
    ],
)
def test_distributed_info_layouts(
    text: str, expected: tuple[int | None, int | None], tmp_path: Path
) -> None:
    path = tmp_path / "dist.json"
    path.write_text(text)
    json.loads(text)  # the variant itself is valid JSON
    trace = load_trace(str(path))
    assert (trace.rank, trace.world_size) == expected
    assert trace.warnings == []
    (d,) = analyze_trace(trace)
    assert (d.rank, d.world_size) == expected


def test_distributed_info_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "dist.json"
    path.write_text(document_text({"distributedInfo": "rank 3"}, _DIST_EVENTS))
    trace = load_trace(str(path))
    assert (trace.rank, trace.world_size) == (None, None)
    assert any("distributedInfo" in w for w in trace.warnings)


def test_distributed_info_in_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dist.json"
    path.write_text(
        document_text({"distributedInfo": {"rank": "3", "world_size": 8}}, _DIST_EVENTS)
    )
    doc = report(capsys, path)
    assert (doc["traces"][0]["rank"], doc["traces"][0]["world_size"]) == (3, 8)
    assert (doc["devices"][0]["rank"], doc["devices"][0]["world_size"]) == (3, 8)


def test_dlrm_ranks() -> None:
    files = sorted(reference(DLRM).glob("worker*_step_12.*.pt.trace.json.gz"))
    assert len(files) == 8
    for f in files:
        trace = load_trace(str(f))
        rank = int(f.name.split("_")[0].removeprefix("worker"))
        assert (trace.rank, trace.world_size) == (rank, 8)
        assert set(trace.gpu_names.values()) == {"Tesla V100-SXM2-32GB"}


# ---- (g) GPU names -------------------------------------------------------------------------------


def test_compute_properties_gpu_name(capsys: pytest.CaptureFixture[str]) -> None:
    trace = load_trace(str(reference(EDGE_V100)))
    assert trace.gpu_names[0] == "Tesla V100-DGXS-32GB"
    doc = report(capsys, EDGE_V100)
    assert [d["gpu"] for d in doc["devices"]] == ["Tesla V100-DGXS-32GB"] * len(doc["devices"])


def test_device_properties_gpu_name(resnet_whole: Trace) -> None:
    assert resnet_whole.gpu_names == {i: "Tesla V100-DGXS-32GB" for i in range(4)}
    assert analyze_trace(resnet_whole)[0].gpu == "Tesla V100-DGXS-32GB"


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ({"deviceProperties": [{"id": 0, "name": "A100"}]}, "A100"),
        ({"computeProperties": [{"id": 0, "name": "V100"}]}, "V100"),
        (
            {
                "deviceProperties": [{"id": 0, "name": "A100"}],
                "computeProperties": [{"id": 0, "name": "V100"}],
            },
            "A100",
        ),
        ({"deviceProperties": [{"id": 1, "name": "A100"}]}, None),  # another GPU's entry
        ({"deviceProperties": [{"id": "0", "name": "H100"}]}, "H100"),
        ({"deviceProperties": "not a list"}, None),
        ({}, None),
    ],
)
def test_gpu_name_sources(head: dict[str, Any], expected: str | None, tmp_path: Path) -> None:
    path = tmp_path / "props.json"
    path.write_text(document_text(head, _DIST_EVENTS))
    (d,) = analyze_trace(load_trace(str(path)))
    assert d.device == 0
    assert d.gpu == expected


# ---- (h) kernel names ----------------------------------------------------------------------------

COMMUNICATION = [
    NCCL_ALLREDUCE,
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    NCCL_ALLREDUCE_OLD,
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*, int*)",
    "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, float*, int*, long*)",
    "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*)",
    "void nvshmemi_transfer_rma_nbi_kernel<(nvshmemi_op_t)1>(void*, void const*, unsigned long)",
    "nvshmemx_barrier_all_on_stream_kernel",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
]

NOT_COMMUNICATION = [
    GEMM,
    ADD,
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MeanOps<float, float>, unsigned int, float, 4> >",
    "void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, float*, "
    "long*, float*, int, int, int, int, long)",
    "Memcpy DtoD (Device -> Device)",
]

# Real kernel names from the traces in tests/data/traces, with the category they must get.
CATEGORIES = [
    ("volta_sgemm_128x32_nt", "gemm"),
    ("volta_sgemm_64x32_sliced1x4_tn", "gemm"),
    ("volta_scudnn_128x64_relu_medium_nn_v1", "gemm"),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
        "gemm",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
        "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2::Params)",
        "gemm",
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, "
        "float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, "
        "int, unsigned long long, int, float, int, int, int)",
        "gemm",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, "
        "128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, "
        "128, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, false>"
        "(pytorch_flash::Flash_fwd_params)",
        "attention",
    ),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, "
        "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, "
        "float*, float*, float*, float*, float, float)",
        "reduction",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>"
        "(float*, float const*, int, int, int)",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
        "float*, float*, c10::BFloat16*)",
        "reduction",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float>, unsigned int, float, 4>)",
        "reduction",
    ),
    (ADD, "elementwise"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1>)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, "
        "128, 1>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, "
        "unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned "
        "int, 4u>, int, unsigned int)",
        "elementwise",
    ),
]


@pytest.mark.parametrize("name", COMMUNICATION)
def test_communication_kernels(name: str) -> None:
    assert is_communication_kernel(name)
    assert kernel_category(name) == "communication"


@pytest.mark.parametrize("name", NOT_COMMUNICATION)
def test_not_communication_kernels(name: str) -> None:
    assert not is_communication_kernel(name)
    assert kernel_category(name) != "communication"


@pytest.mark.parametrize(("name", "category"), CATEGORIES, ids=[c[0][:40] for c in CATEGORIES])
def test_kernel_categories(name: str, category: str) -> None:
    assert kernel_category(name) == category


def test_new_and_old_nccl_names_are_communication_in_analysis(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.launch(GEMM, cpu=(0, 5), gpu=(10, 50))
    b.launch(NCCL_ALLREDUCE, cpu=(5, 10), gpu=(40, 70), stream=20)
    b.launch(NCCL_ALLREDUCE_OLD, cpu=(10, 15), gpu=(80, 100), stream=21)
    b.launch(COMMUNICATION[8], cpu=(15, 20), gpu=(100, 110), stream=22)  # DeepEP dispatch
    (d,) = analyze_trace(load_trace(str(b.write(tmp_path / "comm.json"))))
    # window [10, 110); compute [10, 50) = 40; comm [40, 70) u [80, 110) = 60, 10 under compute
    assert d.window_ns == 100_000
    assert d.breakdown.compute_ns == 40_000
    assert d.breakdown.communication_ns == 50_000
    assert d.breakdown.idle_ns == 10_000
    assert (d.comm.total_ns, d.comm.overlapped_ns) == (60_000, 10_000)
    categories = {k.name: k.category for k in d.kernels}
    assert categories[NCCL_ALLREDUCE] == "communication"
    assert categories[NCCL_ALLREDUCE_OLD] == "communication"
    assert categories[COMMUNICATION[8]] == "communication"
    assert categories[GEMM] == "gemm"


def test_real_nccl_trace_has_communication() -> None:
    path = reference(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")
    (d,) = analyze_trace(load_trace(str(path)))
    assert d.comm.total_ns > 1_000_000  # over 1 ms of NCCL
    assert d.breakdown.communication_ns > 0
    nccl = [k for k in d.kernels if k.name.startswith("ncclKernel_")]
    assert nccl and all(k.category == "communication" for k in nccl)


# ---- (i) dropped steps are reported --------------------------------------------------------------


def _burst(b: TraceBuilder, s: int, n: int) -> None:
    for i in range(n):
        b.launch(ADD, cpu=(s + 10 * i + 5, s + 10 * i + 10), gpu=(s + 10 * i + 10, s + 10 * i + 18))


@pytest.mark.parametrize(
    ("steps", "kept", "dropped"),
    [
        # step 3 launched 2 < 0.8 x 5 kernels: incompletely captured
        ([5, 5, 2], ["ProfilerStep#1", "ProfilerStep#2"], ["ProfilerStep#3"]),
        # steps 4 and 5 launched nothing, then step 3 is incomplete
        (
            [5, 5, 3, 0, 0],
            ["ProfilerStep#1", "ProfilerStep#2"],
            ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"],
        ),
        # only a trailing empty step
        ([5, 5, 5, 0], ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#4"]),
    ],
)
def test_dropped_last_step_is_reported(
    steps: list[int],
    kept: list[str],
    dropped: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = TraceBuilder()
    for k, n in enumerate(steps, start=1):
        b.profiler_step(k, 100 * (k - 1), 100 * k)
        _burst(b, 100 * (k - 1), n)
    path = b.write(tmp_path / "drop.json")
    doc = report(capsys, path)
    (dev,) = doc["devices"]
    assert [s["name"] for s in dev["steps"]] == kept
    assert dev["dropped_steps"] == dropped
    assert dev["window_us"] == 100 * len(kept)
    assert any(all(name in w for name in dropped) for w in dev["warnings"]), dev["warnings"]
    # also with a step window that selects the kept steps
    doc = report(capsys, path, "--window", "steps:1-2")
    assert doc["devices"][0]["dropped_steps"] == dropped
    assert doc["devices"][0]["warnings"]
    # and in the text report
    code, out, _ = run(capsys, "analyze", path)
    assert code == 0
    assert all(name in out for name in dropped)


def test_nothing_dropped_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = TraceBuilder()
    for k in (1, 2, 3):
        b.profiler_step(k, 100 * (k - 1), 100 * k)
        _burst(b, 100 * (k - 1), 5)
    (dev,) = report(capsys, b.write(tmp_path / "full.json"))["devices"]
    assert dev["dropped_steps"] == []
    assert dev["warnings"] == []
    assert len(dev["steps"]) == 3


# ---- (j) --window ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_default_report() -> dict[str, Any]:
    """`badput analyze` JSON of the ResNet50 trace (run once, outside capsys)."""
    from badput.analysis import analyze_trace as analyze
    from badput.report.json_report import analysis_document, encode_document

    trace = load_trace(str(reference(RESNET)))
    data = encode_document(analysis_document([(trace, analyze(trace))]))
    doc: dict[str, Any] = json.loads(data, parse_float=Decimal)
    return doc


def test_resnet_default_steps(resnet_default_report: dict[str, Any]) -> None:
    (dev,) = resnet_default_report["devices"]
    assert [s["name"] for s in dev["steps"]] == [f"ProfilerStep#{k}" for k in range(5, 11)]
    assert dev["window_source"] == "cpu_steps"


def test_window_steps(
    resnet_default_report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (full,) = resnet_default_report["devices"]
    doc = report(capsys, reference(RESNET), "--window", "steps:6-8")
    (dev,) = doc["devices"]
    names = [s["name"] for s in dev["steps"]]
    assert names == ["ProfilerStep#6", "ProfilerStep#7", "ProfilerStep#8"]
    # the same steps as in the full run, unchanged
    assert dev["steps"] == [s for s in full["steps"] if s["name"] in names]
    first, last = dev["steps"][0], dev["steps"][-1]
    assert dev["window_start_us"] == first["start_us"]
    assert dev["window_us"] == last["start_us"] + last["dur_us"] - first["start_us"]
    assert sum(dev["breakdown_us"].values()) == dev["window_us"]
    assert sum(dev["idle_causes_us"].values()) == dev["breakdown_us"]["idle"]
    for part in ("compute", "memory", "idle"):
        assert dev["breakdown_us"][part] == sum(s["breakdown_us"][part] for s in dev["steps"])
    assert dev["window_source"] == "cpu_steps"
    assert dev["dropped_steps"] == []


def test_window_us(
    resnet_default_report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    steps = {s["name"]: s for s in resnet_default_report["devices"][0]["steps"]}
    t0 = Decimal(steps["ProfilerStep#6"]["start_us"])
    last = steps["ProfilerStep#8"]
    t1 = Decimal(last["start_us"]) + Decimal(last["dur_us"])
    by_steps = report(capsys, reference(RESNET), "--window", "steps:6-8")["devices"][0]

    (dev,) = report(capsys, reference(RESNET), "--window", f"us:{t0}-{t1}")["devices"]
    assert dev["window_source"] == "user"
    assert [s["name"] for s in dev["steps"]] == [
        "ProfilerStep#6",
        "ProfilerStep#7",
        "ProfilerStep#8",
    ]
    assert dev["window_start_us"] == t0
    assert dev["window_us"] == t1 - t0
    assert dev["breakdown_us"] == by_steps["breakdown_us"]
    assert dev["idle_causes_us"] == by_steps["idle_causes_us"]

    # a window that starts half a microsecond into step 6: steps 7 and 8 lie wholly inside
    window = f"us:{t0 + Decimal('0.5')}-{t1}"
    (dev,) = report(capsys, reference(RESNET), "--window", window)["devices"]
    assert [s["name"] for s in dev["steps"]] == ["ProfilerStep#7", "ProfilerStep#8"]
    assert dev["window_start_us"] == t0 + Decimal("0.5")
    assert dev["window_us"] == t1 - t0 - Decimal("0.5")
    assert sum(dev["breakdown_us"].values()) == dev["window_us"]


@pytest.mark.parametrize(
    "value",
    ["bogus", "steps:8-6", "steps:1.5-3", "steps:a-b", "us:5", "steps:", "ns:10-5", "us:2-1"],
)
def test_window_malformed(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "analyze", reference(RESNET), "--window", value)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("badput: error: ")
    assert "--window" in lines[0]


def test_base_time_is_kept(shared_traces: Path, tmp_path: Path) -> None:
    """Newer traces' times are relative to `baseTimeNanoseconds`; older ones have none."""
    h100 = sorted((shared_traces / "tracelens-h100").glob("*.json*"))
    assert load_trace(str(h100[0])).base_time_ns == 1_751_410_836_000_000_000
    # the same header's CUDA versions, in CUDA's encoding 12040 / 12090
    assert load_trace(str(h100[0])).versions == {"cuda_runtime": "12.4", "cuda_driver": "12.9"}
    resnet = next((shared_traces / "kineto-resnet50").glob("*.pt.trace.json.gz"))
    assert load_trace(str(resnet)).base_time_ns is None
    assert load_trace(str(resnet)).versions == {}
    b = TraceBuilder()
    b.kernel("k", 0, 10)
    for raw, expected in (("12345", 12345), ('"12345"', 12345), ("-5", None), ('"x"', None)):
        text = b.text().replace('"traceEvents"', f'"baseTimeNanoseconds": {raw}, "traceEvents"')
        path = tmp_path / "t.json"
        path.write_text(text)
        assert load_trace(str(path)).base_time_ns == expected, raw


@pytest.mark.parametrize(
    "devices",
    [[0], [3, 1, 3, 0], [7, 2**20 + 7], [5, 2**31 - 1], [0, 1, 2, 3, 4, 5, 6, 7, 6, 5]],
)
def test_devices_ascending_once_each(tmp_path: Path, devices: list[int]) -> None:
    """`Trace.devices`: each GPU with activity once, ascending; ids near or far apart."""
    b = TraceBuilder()
    for i, d in enumerate(devices):
        b.kernel(f"k{i}", 10 * i, 10 * i + 5, device=d)
    b.cpu_op("host only", 0, 50)  # host rows have no device
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    assert trace.devices() == sorted(set(devices))
    host = TraceBuilder()
    host.cpu_op("host only", 0, 50)
    assert load_trace(str(host.write(tmp_path / "host.json"))).devices() == []
