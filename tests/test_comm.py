"""Communication analysis (`analysis/comm.py`) and the reader's NCCL metadata side table."""

from __future__ import annotations

import gzip
import json
import pickle
import re
import warnings
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from badput.analysis import (
    COLLECTIVE_TYPES,
    Collectives,
    DeviceAnalysis,
    analyze_trace,
    bus_factor,
    collective_stats,
    collective_type,
    collectives,
    link_peak_gbps,
)
from badput.estimate.hardware import UnknownGpuWarning
from badput.trace import _fastscan
from badput.trace.kineto import read_kineto
from badput.trace.model import NO_ID, Trace
from synth import NCCL_ALLREDUCE, NCCL_SENDRECV_OLD, TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
NCCL = {
    "all_reduce": NCCL_ALLREDUCE,
    "all_gather": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<8>)",
    "all_to_all": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",  # NCCL's all-to-all
    "send_recv": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "broadcast": "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "reduce": "ncclDevKernel_Reduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
}
US = 1_000


def _read(path: Path, use_c: bool, monkeypatch: pytest.MonkeyPatch) -> Trace:
    with monkeypatch.context() as m:
        if use_c:
            m.delenv("BADPUT_NO_C_SCAN", raising=False)
        else:
            m.setenv("BADPUT_NO_C_SCAN", "1")
        return read_kineto(str(path))


def _one(trace: Trace) -> tuple[Collectives, DeviceAnalysis]:
    (analysis,) = analyze_trace(trace)
    return collectives(trace, analysis), analysis


# ---- names and factors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "collective", "expected"),
    [
        (NCCL_ALLREDUCE, None, "all_reduce"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None,
         "all_reduce"),
        (NCCL_SENDRECV_OLD, None, "send_recv"),
        (NCCL["all_gather"], None, "all_gather"),
        (NCCL["reduce_scatter"], None, "reduce_scatter"),
        (NCCL["broadcast"], None, "broadcast"),
        ("ncclKernel_Reduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None,
         "reduce"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None, "other"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", None, "all_reduce"),
        ("void deep_ep::intranode::dispatch<8, 768>(...)", None, "all_to_all"),
        # Metadata decides: NCCL runs all-to-all as SendRecv kernels.
        (NCCL["send_recv"], "all_to_allv", "all_to_all"),
        (NCCL["send_recv"], "alltoall_base", "all_to_all"),
        (NCCL["send_recv"], "send", "send_recv"),
        (NCCL["send_recv"], "recv", "send_recv"),
        (NCCL["all_gather"], "_allgather_base", "all_gather"),
        (NCCL["all_gather"], "allgather_into_tensor_coalesced", "all_gather"),
        (NCCL["reduce_scatter"], "_reduce_scatter_base", "reduce_scatter"),
        (NCCL_ALLREDUCE, "allreduce", "all_reduce"),
        (NCCL_ALLREDUCE, "barrier", "other"),  # a barrier is a 1-element all-reduce
        (NCCL["broadcast"], "_broadcast_oop", "broadcast"),
        (NCCL["reduce"], "_reduce_oop", "reduce"),
    ],
)  # fmt: skip
def test_collective_type(kernel: str, collective: str | None, expected: str) -> None:
    assert collective_type(kernel, collective) == expected
    assert expected in COLLECTIVE_TYPES


@pytest.mark.parametrize(
    ("kind", "n", "expected"),
    [
        # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n
        ("all_reduce", 8, 2 * 7 / 8),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        # all-gather, reduce-scatter, all-to-all: (n-1)/n
        ("all_gather", 8, 7 / 8),
        ("reduce_scatter", 4, 3 / 4),
        ("all_to_all", 16, 15 / 16),
        # broadcast, reduce, send/recv: 1
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factor(kind: str, n: int, expected: float) -> None:
    assert bus_factor(kind, n) == pytest.approx(expected)


def test_bus_factor_refuses() -> None:
    with pytest.raises(ValueError, match="other"):
        bus_factor("other", 8)
    with pytest.raises(ValueError, match="rank"):
        bus_factor("all_reduce", 0)


NCCL_TESTS_LOG = "nccl-tests/nccl_allreduce.log"


def test_bandwidths_reproduce_nccl_tests_log(shared_traces: Path) -> None:
    """Three rows of a real nccl-tests all_reduce_perf log: our algbw and busbw match its own."""
    text = (shared_traces / NCCL_TESTS_LOG).read_text()
    ranks = int(re.search(r"nGpus (\d+)", text).group(1))  # type: ignore[union-attr]
    rows: dict[int, tuple[str, float, float]] = {}
    for line in text.splitlines():
        cols = line.split()
        # size count type redop | out-of-place: time algbw busbw error | in-place: ...
        if len(cols) == 12 and cols[0].isdigit() and cols[2] == "float":
            rows[int(cols[0])] = (cols[4], float(cols[5]), float(cols[6]))
    assert ranks == 8
    for size in (1_048_576, 67_108_864, 1_073_741_824):
        time_us, algbw, busbw = rows[size]
        dur_ns = int(Decimal(time_us) * 1000)
        one = Collectives(
            type_code=np.array([COLLECTIVE_TYPES.index("all_reduce")], np.int8),
            start_ns=np.array([0]),
            end_ns=np.array([dur_ns]),
            exposed_ns=np.array([dur_ns]),
            msg_bytes=np.array([size]),
            group_size=np.array([ranks]),
            stream=np.array([7]),
            inside_ns=np.array([dur_ns]),
            row=np.array([0]),
        )
        (stat,) = collective_stats(one)
        # The log rounds bandwidths to 2 decimals and times to 4-5 digits ("584.5", "16215"):
        # allow both roundings, nothing more.
        decimals = len(time_us.partition(".")[2])
        time_rel = 0.5 * 10.0**-decimals / float(time_us)
        assert stat.algbw_gbps == pytest.approx(algbw, abs=0.005 + algbw * time_rel), size
        assert stat.busbw_gbps == pytest.approx(busbw, abs=0.005 + busbw * time_rel), size


# ---- the real 8-rank DLRM traces (2023: no NCCL metadata) -----------------------------------


def _nccl_kernels_from_json(path: Path) -> list[tuple[str, int, int, int]]:
    """(name, device, start_ns, end_ns) of every NCCL kernel, read with the json module."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower():
            start = int(Decimal(e["ts"]) * 1000)
            end = start + int(Decimal(e["dur"]) * 1000)
            out.append((e["name"], e["args"]["device"], start, end))
    return out


def test_dlrm_per_rank_totals_equal_direct_sum(shared_traces: Path) -> None:
    """Per rank, NCCL kernel time summed straight from the JSON equals the stats' totals.

    The analysis clips to its window (here the ProfilerStep hull); so does the direct sum:
    each kernel contributes its part inside [window_start, window_start + window).
    """
    paths = sorted((shared_traces / "param-dlrm-8rank").glob("*.pt.trace.json.gz"))
    assert len(paths) == 8
    ranks = set()
    for path in paths:
        trace = read_kineto(str(path))
        assert trace.comm_meta is None  # 2023 traces carry no NCCL metadata
        (analysis,) = analyze_trace(trace)
        ranks.add(trace.rank)
        w0 = analysis.window_start_ns
        w1 = w0 + analysis.window_ns
        direct_ns: Counter[str] = Counter()
        direct_count: Counter[str] = Counter()
        for name, device, start, end in _nccl_kernels_from_json(path):
            assert device == analysis.device
            inside = min(end, w1) - max(start, w0)
            if inside <= 0:
                continue
            # NCCL runs DLRM's embedding all-to-all as SendRecv kernels; their launching op
            # (`nccl:all_to_all`) says what they are (analysis/classify.py).
            kind = {"AllReduce": "all_reduce", "SendRecv": "all_to_all"}[name.split("_")[1]]
            direct_ns[kind] += inside
            direct_count[kind] += 1
        c = collectives(trace, analysis)
        stats = {s.type: s for s in collective_stats(c)}
        assert {k: s.total_ns for k, s in stats.items()} == dict(direct_ns), path.name
        assert {k: s.count for k, s in stats.items()} == dict(direct_count), path.name
        assert dict(direct_count) == {"all_reduce": 3, "all_to_all": 5}, path.name
        # Exposed time agrees with the breakdown; the total with the analysis' comm summary
        # where kernels do not overlap each other (they do not here).
        assert sum(s.exposed_ns for s in stats.values()) == analysis.breakdown.communication_ns
        assert sum(s.total_ns for s in stats.values()) == analysis.comm.total_ns
        for s in stats.values():
            assert s.msg_bytes is None and s.algbw_gbps is None and s.busbw_gbps is None
            assert s.overlap_share is not None and 0.0 <= s.overlap_share <= 1.0
    assert ranks == set(range(8))


# ---- synthetic traces with metadata --------------------------------------------------------

# (type, collective name, in nelems, out nelems) for 8 ranks: nccl-tests' "size" is the larger
# buffer (all-gather: the gathered output; reduce-scatter: the input), here always 1e6 elements.
CASES = [
    ("all_reduce", "allreduce", 1_000_000, 1_000_000),
    ("all_gather", "_allgather_base", 125_000, 1_000_000),
    ("reduce_scatter", "_reduce_scatter_base", 1_000_000, 125_000),
    ("all_to_all", "all_to_allv", 1_000_000, 1_000_000),
    ("send_recv", "send", 1_000_000, 0),
    ("broadcast", "broadcast", 1_000_000, 1_000_000),
    ("reduce", "reduce", 1_000_000, 1_000_000),
]
# busbw / algbw, written out from nccl-tests PERFORMANCE.md for n = 8.
HAND_FACTOR = {
    "all_reduce": 2 * (8 - 1) / 8,
    "all_gather": (8 - 1) / 8,
    "reduce_scatter": (8 - 1) / 8,
    "all_to_all": (8 - 1) / 8,
    "send_recv": 1.0,
    "broadcast": 1.0,
    "reduce": 1.0,
}


def _metadata_trace(tmp_path: Path) -> Path:
    """Each collective type once, 100 us, BFloat16 (2 bytes), 8 ranks; plus a second all-reduce."""
    b = TraceBuilder()
    b.distributed_info(0, 8)
    b.device_properties([0])
    b.profiler_step(1, 0, 2_000, gpu=True)
    for k, (kind, coll, n_in, n_out) in enumerate(CASES):
        start = 100 + 200 * k
        event = b.kernel(NCCL[kind], start, start + 100, stream=20)
        b.nccl_metadata(event, coll, in_nelems=n_in, out_nelems=n_out, group_size=8,
                        dtype="BFloat16")  # fmt: skip
    # A second all-reduce, 4e6 bytes in 300 us, its metadata only on the launching op.
    kernel = b.kernel(NCCL["all_reduce"], 1_600, 1_900, stream=20)
    op = b.cpu_op("record_param_comms", 1_590, 1_595)
    op["args"]["External id"] = kernel["args"]["External id"]
    b.nccl_metadata(op, "allreduce", in_nelems=2_000_000, group_size=8, dtype="BFloat16")
    return b.write(tmp_path / "meta.pt.trace.json")


@pytest.mark.parametrize("use_c", [True, False])
def test_metadata_bandwidths_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_c: bool
) -> None:
    if use_c and not _fastscan.AVAILABLE:
        pytest.skip("C scanner not built")
    trace = _read(_metadata_trace(tmp_path), use_c, monkeypatch)
    c, _ = _one(trace)
    assert c.types == [kind for kind, *_ in CASES] + ["all_reduce"]
    assert c.msg_bytes.tolist() == [2_000_000] * len(CASES) + [4_000_000]
    assert c.group_size.tolist() == [8] * (len(CASES) + 1)
    stats = {s.type: s for s in collective_stats(c)}
    assert list(stats) == [t for t in COLLECTIVE_TYPES if t in stats]  # report order
    for kind, *_ in CASES[1:]:
        s = stats[kind]
        # 2e6 bytes in 100 us = 2e6 B / 1e5 ns = 20 B/ns = 20 GB/s (1e9 B/s, as nccl-tests)
        assert (s.count, s.msg_bytes, s.sized_count) == (1, 2_000_000, 1)
        assert s.algbw_gbps == pytest.approx(20.0)
        assert s.busbw_gbps == pytest.approx(20.0 * HAND_FACTOR[kind])
    ar = stats["all_reduce"]
    # (2e6 + 4e6) bytes over (100 + 300) us = 6e6 / 4e5 ns = 15 GB/s; busbw 15 x 2(n-1)/n
    assert (ar.count, ar.msg_bytes) == (2, 6_000_000)
    assert ar.algbw_gbps == pytest.approx(15.0)
    assert ar.busbw_gbps == pytest.approx(15.0 * 2 * 7 / 8)


def _meta_rows(trace: Trace) -> list[tuple[object, ...]]:
    m = trace.comm_meta
    assert m is not None
    return [
        (trace.name_of(r), m.string(c), i, o, g, m.string(d), m.string(p))
        for r, c, i, o, g, d, p in zip(m.row.tolist(), m.collective.tolist(),
                                       m.in_nelems.tolist(), m.out_nelems.tolist(),
                                       m.group_size.tolist(), m.dtype.tolist(),
                                       m.process_group.tolist(), strict=True)
    ]  # fmt: skip


def test_both_reader_paths_give_the_same_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _fastscan.AVAILABLE:
        pytest.skip("C scanner not built")
    b = TraceBuilder()
    b.profiler_step(1, 0, 500, gpu=True)
    b.raw_event({"ph": "X", "cat": "kernel", "name": "no time", "pid": 0, "tid": 7})  # dropped
    e = b.kernel(NCCL_ALLREDUCE, 10, 20, stream=20)
    b.nccl_metadata(e, "allreduce", in_nelems=3, group_size=4, dtype="Half", process_group="1")
    e = b.kernel(NCCL["send_recv"], 30, 40, stream=21)
    b.nccl_metadata(e, "all_to_allv", in_nelems=8, out_nelems=16, group_size=4)
    e["args"]["Group size"] = "4"  # a string where Kineto writes an int: read alike
    e = b.kernel(NCCL["all_gather"], 50, 60, stream=20)
    e["args"].update({"Collective name": "", "dtype": None})  # empty name: no metadata
    op = b.cpu_op("record_param_comms", 5, 8)
    b.nccl_metadata(op, "broadcast", in_nelems=5, group_size=2, dtype="Float8_e4m3fn")
    path = b.write(tmp_path / "t.pt.trace.json")
    c_trace = _read(path, True, monkeypatch)
    py_trace = _read(path, False, monkeypatch)
    rows = [_meta_rows(c_trace), _meta_rows(py_trace)]
    assert np.array_equal(py_trace.name_id, c_trace.name_id)
    assert rows[0] == rows[1]
    assert sorted(rows[0]) == sorted(
        [
            (NCCL_ALLREDUCE, "allreduce", 3, 3, 4, "Half", "1"),
            (NCCL["send_recv"], "all_to_allv", 8, 16, 4, "Float", "0"),
            ("record_param_comms", "broadcast", 5, 5, 2, "Float8_e4m3fn", "0"),
        ]
    )
    assert c_trace.warnings == py_trace.warnings != []  # the event without ts was skipped


def test_exposed_and_overlapped_all_reduce(tmp_path: Path) -> None:
    """Compute covers the second half of an all-reduce: half of it is exposed."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 400, gpu=True)
    b.kernel(NCCL_ALLREDUCE, 100, 200, stream=20)  # [100, 200)
    b.kernel(GEMM, 150, 300, stream=7)  # covers [150, 200) of it
    trace = read_kineto(str(b.write(tmp_path / "t.pt.trace.json")))
    c, analysis = _one(trace)
    assert c.exposed_ns.tolist() == [50 * US]
    (s,) = collective_stats(c)
    assert (s.type, s.count, s.total_ns, s.exposed_ns) == ("all_reduce", 1, 100 * US, 50 * US)
    assert s.overlap_share == pytest.approx(0.5)
    assert s.msg_bytes is None and s.algbw_gbps is None and s.busbw_gbps is None
    assert analysis.breakdown.communication_ns == 50 * US
    assert pickle.loads(pickle.dumps(c)).exposed_ns.tolist() == [50 * US]


def test_overlapping_collectives_share_exposed_time_once(tmp_path: Path) -> None:
    """Two streams' collectives overlap; the exposed column still sums to the breakdown."""
    b = TraceBuilder()
    b.profiler_step(1, 0, 400, gpu=True)
    b.kernel(NCCL_ALLREDUCE, 100, 200, stream=20)
    b.kernel(NCCL["send_recv"], 150, 260, stream=21)
    b.kernel(NCCL["send_recv"], 380, 450, stream=21)  # cut by the window end at 400
    b.kernel(GEMM, 0, 120, stream=7)
    trace = read_kineto(str(b.write(tmp_path / "t.pt.trace.json")))
    c, analysis = _one(trace)
    # all-reduce owns [120, 200) exposed = 80; the first SendRecv what is left of it,
    # [200, 260) = 60; the second [380, 400) = 20.
    assert c.exposed_ns.tolist() == [80 * US, 60 * US, 20 * US]
    assert c.inside_ns.tolist() == [100 * US, 110 * US, 20 * US]
    assert c.end_ns.tolist()[-1] - c.start_ns.tolist()[-1] == 70 * US  # not clipped
    assert int(c.exposed_ns.sum()) == analysis.breakdown.communication_ns
    stats = {s.type: s for s in collective_stats(c)}
    assert (stats["send_recv"].count, stats["send_recv"].total_ns) == (2, 130 * US)


def test_no_gpu_and_unknown_sizes(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.cpu_op("aten::add", 0, 10)
    trace = read_kineto(str(b.write(tmp_path / "t.pt.trace.json")))
    c, _ = _one(trace)
    assert len(c) == 0 and collective_stats(c) == []
    b = TraceBuilder()
    b.profiler_step(1, 0, 100, gpu=True)
    e = b.kernel(NCCL_ALLREDUCE, 10, 20, stream=20)
    b.nccl_metadata(e, "allreduce", in_nelems=4, group_size=2, dtype="NoSuchType")
    trace = read_kineto(str(b.write(tmp_path / "u.pt.trace.json")))
    c, _ = _one(trace)
    assert c.msg_bytes.tolist() == [NO_ID] and c.group_size.tolist() == [2]


def test_link_peak() -> None:
    # A100 SXM NVLink 3: 600 GB/s both directions in the table, 300 one way; the nccl-tests
    # log above (8 x A100-SXM4-40GB) peaks at 235 GB/s busbw, below it.
    assert link_peak_gbps("NVIDIA A100-SXM4-40GB") == pytest.approx(300.0)
    assert link_peak_gbps("Tesla T4") is None  # PCIe only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert link_peak_gbps("Imaginary GPU 9000") is None
    assert any(issubclass(w.category, UnknownGpuWarning) for w in caught)


def test_json_compares_busbw_with_the_link_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from synth import analyze_json

    doc = analyze_json(capsys, _metadata_trace(tmp_path))
    peak = link_peak_gbps("NVIDIA H100 80GB HBM3")  # the builder's GPU: NVLink 900 GB/s both ways
    assert peak == pytest.approx(450.0)
    by_type = {c["type"]: c for c in doc["collectives"]}
    ar = by_type["all_reduce"]
    assert ar["busbw_gbps"] == pytest.approx(15.0 * 2 * 7 / 8)
    assert ar["link_peak_gbps"] == pytest.approx(450.0)
    assert ar["busbw_of_peak"] == pytest.approx(15.0 * 2 * 7 / 8 / 450.0)


def test_metadata_of_an_op_above_the_launch(tmp_path: Path) -> None:
    # The metadata on an op around the launch call, neither the kernel's own nor on the op
    # with its External id: found up the launch tree, each kernel its own op's entry.
    from badput.analysis.classify import classify_kernels
    from badput.analysis.comm import meta_index
    from badput.analysis.tree import launch_tree

    b = TraceBuilder()
    b.device_properties([0])
    b.profiler_step(1, 0, 2_000)
    for k, n in enumerate((1_000, 3_000)):
        op = b.cpu_op("c10d::allreduce_", 100 + 500 * k, 200 + 500 * k)
        op["args"]["External id"] = 9_000 + k  # no kernel has it
        b.nccl_metadata(op, "allreduce", in_nelems=n, group_size=8)
        b.launch(NCCL["all_reduce"], cpu=(110 + 500 * k, 120 + 500 * k),
                 gpu=(300 + 500 * k, 400 + 500 * k), stream=20)  # fmt: skip
    trace = read_kineto(str(b.write(tmp_path / "t.json")))
    meta = trace.comm_meta
    assert meta is not None and len(meta) == 2
    classes = classify_kernels(trace, launch_tree(trace))
    assert (meta_index(trace, classes.row) == NO_ID).all()  # not by the kernel or its id
    assert meta.in_nelems[classes.meta].tolist() == [1_000, 3_000]


def test_exposed_communication_kinds_tally_each_kinds_evidence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Per kind: its time, count and the evidence that decided most of its kernels' time (by
    # the evidence's words: two class entries may share them), as kernel by kernel.
    from types import SimpleNamespace

    from badput.analysis.comm import COLLECTIVE_TYPES
    from badput.diagnose import comm as diagnose_comm

    rng = np.random.default_rng(5)
    n = 400
    code = rng.integers(0, 3, n).astype(np.int8)
    start = rng.integers(0, 10**6, n).astype(np.int64)
    end = start + rng.integers(0, 5, n) * 1000  # some of no length
    source = np.array([0, 1, 1, 2, 1], dtype=np.int8)
    detail = np.array([0, 1, 2, 1, 1], dtype=np.int64)  # entries 1 and 4: the same words
    entry = rng.integers(0, 5, n)
    words = ["name", "launching op", "stream"]

    classes = SimpleNamespace(
        source=source,
        detail=detail,
        index_of=lambda rows: entry[rows],
        evidence=lambda i: f"{words[int(source[i])]}: {['a', 'b', 'c'][int(detail[i])]}",
    )
    c = SimpleNamespace(
        row=np.arange(n),
        type_code=code,
        start_ns=start,
        end_ns=end,
        exposed_ns=end - start,
        inside_ns=2 * (end - start),
        group_size=rng.integers(-1, 3, n).astype(np.int64) * 4,
    )
    monkeypatch.setattr(diagnose_comm, "collectives", lambda t, a: _Sized(c, n))
    ctx = SimpleNamespace(
        trace=None,
        analysis=SimpleNamespace(world_size=8),
        timeline=SimpleNamespace(classes=classes),
    )
    got = {
        k.kind: (k.exposed_ns, k.total_ns, k.count, k.evidence) for k in diagnose_comm._by_kind(ctx)
    }  # type: ignore[arg-type]
    expected = {}
    for k in sorted(set(code.tolist())):
        mine = np.flatnonzero(code == k)
        counts: Counter[str] = Counter()
        for i in mine.tolist():
            counts[classes.evidence(int(entry[i]))] += int(end[i] - start[i])
        ev = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        total = int((end - start)[mine].sum())
        expected[COLLECTIVE_TYPES[k]] = (total, 2 * total, mine.shape[0], ev)
    assert got == expected


class _Sized:
    """A fake `Collectives`: its arrays and a length."""

    def __init__(self, c: object, n: int) -> None:
        self.__dict__.update(vars(c))
        self._n = n

    def __len__(self) -> int:
        return self._n
