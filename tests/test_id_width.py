"""Results do not depend on the width of the Trace's id columns (int32 where values fit).

The Kineto reader holds pid, tid, device, stream, correlation and external_id as int32 where
every value fits; the helpers that build keys from them multiply by time or id ranges far
beyond int32, so they widen first. These cases overflow int32 if they did not.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from badput.analysis import analyze_trace
from badput.analysis._nesting import dense_pairs, find_by_key_time
from badput.analysis.tree import _Threads
from badput.diagnose import diagnose_job, outcome_of
from badput.report.json_report import encode_document, job_document
from badput.trace import load_trace
from synth import TraceBuilder

IDS = ("pid", "tid", "device", "stream", "correlation", "external_id")


class _Columns(SimpleNamespace):
    def __len__(self) -> int:
        return int(self.pid.shape[0])


def test_dense_pairs_of_int32_ids_whose_key_passes_int32() -> None:
    a = np.array([0, 40_000, 5, 40_000, 0], dtype=np.int32)
    b = np.array([70_000, 0, 70_000, 0, 1], dtype=np.int32)
    # (0, 1) < (0, 70000) < (5, 70000) < (40000, 0): the packed key reaches 2.8e9
    assert dense_pairs(a, b).tolist() == [1, 3, 2, 3, 0]
    assert (
        dense_pairs(a, b).tolist() == dense_pairs(a.astype(np.int64), b.astype(np.int64)).tolist()
    )


def test_thread_keys_of_int32_pids_and_tids() -> None:
    pid = np.array([3_000_000, 3_000_000, 1, 1, 0], dtype=np.int32)
    tid = np.array([2_000_000_000, 5, 2_000_000_000, 5, 7], dtype=np.int32)
    keys = _Threads(_Columns(pid=pid, tid=tid))(np.arange(5))  # type: ignore[arg-type]
    pairs = list(zip(pid.tolist(), tid.tolist(), strict=True))
    # equal within a thread, in the (pid, tid) pairs' order
    assert [sorted(pairs).index(p) for p in pairs] == np.argsort(np.argsort(keys)).tolist()


def test_find_by_key_time_with_int32_keys() -> None:
    key_a = np.array([2_000_000_000, 2_000_000_000, 3], dtype=np.int32)
    t_a = np.array([10**15, 2 * 10**15, 10**15], dtype=np.int64)
    key_q = np.array([2_000_000_000, 3, 4], dtype=np.int32)
    t_q = np.array([2 * 10**15 + 1, 10**15 + 5, 0], dtype=np.int64)
    assert find_by_key_time(key_a, t_a, key_q, t_q, exact=False).tolist() == [1, 2, -1]


def _wide(trace):  # type: ignore[no-untyped-def]
    return dataclasses.replace(trace, **{k: getattr(trace, k).astype(np.int64) for k in IDS})


def _document(trace) -> bytes:  # type: ignore[no-untyped-def]
    devices = analyze_trace(trace)
    return encode_document(job_document(diagnose_job([outcome_of(trace, devices, top=0)]), top=0))


def test_a_trace_with_ids_near_int32s_limits_reports_as_with_int64_ids(tmp_path: Path) -> None:
    """Big pids and tids (as on long-running hosts), two host threads, every analysis on."""
    b = TraceBuilder(pid=3_000_000, tid=2_000_000_000)
    b.device_properties([0], name="NVIDIA A100-SXM4-80GB")
    for step in range(4):
        t0 = step * 2000
        b.profiler_step(step + 1, t0, t0 + 1900)
        b.dataloader(t0 + 5, t0 + 200)
        b.cpu_op("aten::mm", t0 + 210, t0 + 400)
        b.launch("ampere_sgemm_128x64_tn", cpu=(t0 + 220, t0 + 240), gpu=(t0 + 260, t0 + 900))
        b.cpu_op("aten::add", t0 + 300, t0 + 350, tid=5)
        b.launch(
            "vectorized_elementwise_kernel",
            cpu=(t0 + 310, t0 + 330),
            gpu=(t0 + 950, t0 + 990),
            tid=5,
        )
        b.launch(
            "Memcpy DtoH (Device -> Pinned)",
            kind="memcpy",
            cpu=(t0 + 1000, t0 + 1500),
            gpu=(t0 + 1010, t0 + 1490),
        )
        b.runtime("cudaStreamSynchronize", t0 + 1510, t0 + 1800)
    trace = load_trace(str(b.write(tmp_path / "big_ids.json")))
    assert trace.pid.dtype == trace.tid.dtype == np.int32
    assert int(trace.tid.max()) == 2_000_000_000
    assert _document(trace) == _document(_wide(trace))
