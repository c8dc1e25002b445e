"""The C scanner (`trace/_scan.c`) and the msgspec decoder must read every trace the same."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.errors import TraceFormatError
from badput.trace import _fastscan, _kineto_columns, kineto
from badput.trace.kineto import read_kineto
from badput.trace.model import EventKind, Trace

COLUMNS = ("kind", "phase", "ts_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation",
           "external_id", "bytes", "total_allocated", "total_reserved")  # fmt: skip

needs_c = pytest.mark.skipif(not _fastscan.AVAILABLE, reason="C scanner not built")


def test_c_scanner_is_built_in_ci() -> None:
    if os.environ.get("CI"):
        assert _fastscan.AVAILABLE, "CI must build the C scanner (gcc and Python headers)"


def _read(path: Path, use_c: bool, monkeypatch: pytest.MonkeyPatch) -> Trace:
    with monkeypatch.context() as m:
        if use_c:
            m.delenv("BADPUT_NO_C_SCAN", raising=False)
        else:
            m.setenv("BADPUT_NO_C_SCAN", "1")
        return read_kineto(str(path))


def _resolved(trace: Trace) -> dict[str, object]:
    out: dict[str, object] = {c: getattr(trace, c) for c in COLUMNS}
    out["names"] = [trace.names[i] for i in trace.name_id.tolist()]
    out["labels"] = sorted(trace.labels)
    out["comm_meta"] = comm_meta_rows(trace)
    w = trace.sync_waits
    cols = (w.row, w.record_correlation, w.record_stream) if w is not None else None
    out["sync_waits"] = (
        None if cols is None else list(zip(*(c.tolist() for c in cols), strict=True))
    )
    return out


def comm_meta_rows(trace: Trace) -> list[tuple[object, ...]] | None:
    """The NCCL metadata side table as plain tuples, strings resolved."""
    m = trace.comm_meta
    if m is None:
        return None
    return [
        (r, m.string(c), i, o, g, m.string(d), m.string(p))
        for r, c, i, o, g, d, p in zip(m.row.tolist(), m.collective.tolist(),
                                       m.in_nelems.tolist(), m.out_nelems.tolist(),
                                       m.group_size.tolist(), m.dtype.tolist(),
                                       m.process_group.tolist(), strict=True)
    ]  # fmt: skip


def assert_same(a: Trace, b: Trace) -> None:
    ra, rb = _resolved(a), _resolved(b)
    for key in COLUMNS:
        assert np.array_equal(ra[key], rb[key]), key  # type: ignore[arg-type]
    assert ra["names"] == rb["names"]
    assert ra["labels"] == rb["labels"]
    assert ra["comm_meta"] == rb["comm_meta"]
    assert ra["sync_waits"] == rb["sync_waits"]
    assert (a.rank, a.world_size, a.gpu_names, a.warnings) == (
        b.rank,
        b.world_size,
        b.gpu_names,
        b.warnings,
    )


def assert_both_paths_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C scanner and msgspec read `path` the same, or fail with the same error."""
    try:
        c = _read(path, True, monkeypatch)
    except Exception as e:  # the same error from both paths
        with pytest.raises(type(e)) as info:
            _read(path, False, monkeypatch)
        assert str(info.value) == str(e)
        return
    assert_same(c, _read(path, False, monkeypatch))


def _real_traces(shared: Path) -> list[Path]:
    return sorted(
        p
        for p in shared.glob("*/*.json*")
        if p.name.endswith((".json", ".json.gz")) and "expected" not in p.name
    )


@needs_c
def test_real_traces_read_the_same(shared_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _real_traces(shared_traces)
    assert len(paths) >= 15
    for path in paths:
        assert_same(_read(path, True, monkeypatch), _read(path, False, monkeypatch))


def _event_text(e: dict[str, object], style: int) -> str:
    if style == 0:
        return json.dumps(e)
    if style == 1:
        return json.dumps(e, indent=2)
    return json.dumps(e, separators=(",", ":"))


_names = st.sampled_from(["aten::mm", "ProfilerStep#3", "[memory]", "cudaLaunchKernel",
                          'we"ird\\name', "é∂", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
                          ""])  # fmt: skip
_ids = st.one_of(st.integers(-5, 2**40), st.sampled_from(["stream 7", "Traces", "123", " 9 "]))
_times = st.one_of(
    st.integers(0, 2**52).map(str),
    st.tuples(st.integers(0, 10**15), st.integers(0, 10**6)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.sampled_from(["1712195495519689.047", "0.04", "1e3", "-0.5", "3.0"]),
)
_args = st.fixed_dictionaries(
    {},
    optional={
        "device": st.integers(0, 7),
        "stream": st.integers(-1, 40),
        "correlation": st.integers(0, 2**31),
        "External id": st.integers(0, 2**31),
        "external id": st.integers(0, 2**31),
        "Input Dims": st.just([[1, 2], []]),
        "grid": st.just([1, 2, 3]),
        "bytes": st.integers(0, 2**40),
        "Bytes": st.integers(-(2**40), 2**40),
        "Total Allocated": st.integers(0, 2**40),
        "Total Reserved": st.integers(0, 2**40),
        "Device Id": st.integers(-1, 7),
        "Device Type": st.integers(0, 1),
        "memory bandwidth (GB/s)": st.floats(0, 1e3, allow_nan=False),
        # NCCL metadata, in the types Kineto writes and in others both paths must judge alike.
        "Collective name": st.sampled_from(["allreduce", "all_to_allv", "", "allgathé", 3, None]),
        "In msg nelems": st.one_of(st.integers(0, 2**40), st.sampled_from(["12", 2.0, None])),
        "Out msg nelems": st.integers(0, 2**40),
        "Group size": st.one_of(st.integers(1, 64), st.just("8")),
        "dtype": st.sampled_from(["Float", "BFloat16", 4]),
        "Process Group Name": st.sampled_from(["0", "1", 7]),
        # cuda_sync args: which record an event wait waited on.
        "wait_on_cuda_event_record_corr_id": st.one_of(st.integers(-1, 2**40), st.just("9")),
        "wait_on_stream": st.one_of(st.integers(-1, 40), st.just(None)),
    },
)


@st.composite
def _events(draw: st.DrawFn) -> dict[str, object]:
    e: dict[str, object] = {"ph": draw(st.sampled_from(["X", "X", "X", "s", "f", "i", "M"]))}
    e["cat"] = draw(
        st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "Kernel", "ac2g", "x", "cuda_sync"])
    )
    e["name"] = draw(_names)
    e["pid"] = draw(_ids)
    e["tid"] = draw(_ids)
    e["ts"] = draw(_times)
    if draw(st.booleans()):
        e["dur"] = draw(_times)
    if e["ph"] in ("s", "f"):
        e["id"] = draw(_ids)
    if draw(st.booleans()):
        e["args"] = draw(_args)
    return e


@needs_c
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(_events(), min_size=1, max_size=30),
    style=st.integers(0, 2),
    gz=st.booleans(),
)
def test_random_events_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[dict[str, object]], style: int,
    gz: bool,
) -> None:  # fmt: skip
    body = ",\n".join(_event_text(e, style) for e in events)
    # Number texts go in verbatim, so that "1e3" and "-0.5" reach the readers as written.
    for e in events:
        for key in ("ts", "dur"):
            if key in e:
                body = body.replace(json.dumps(e[key]), str(e[key]), 1)
    text = '{"schemaVersion": 1, "traceEvents": [\n' + body + "\n]}"
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    assert_both_paths_agree(path, monkeypatch)


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        b'[{"ph": "X", "ts": 1e3, "dur": 1}]',  # exponent
        b'[{"ph": "X", "cat": null, "ts": 1, "dur": 1}]',  # null string
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"device": 0.0}}]',  # float for an int
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"device": "0"}}]',  # string for an int
        b'[{"ts": 1, "dur": 1}]',  # no phase
        b'[{"ph": "X", "ts": 1, "dur": 1}',  # truncated
        b'[{"ph": "X", "ts": 1, "dur": 1}] x',  # trailing junk
        b"[1, 2]",  # not objects
        b'[{"p\\u0068": "X", "ts": 1}]',  # escaped key
        b'[{"ph": "X", "ts": 12345678901234567, "dur": 1}]',  # beyond int64 ns
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"a": ' + b"[" * 80 + b"]" * 80 + b"}}]",
    ],
)
def test_scanner_refuses_what_it_does_not_know(text: bytes) -> None:
    assert _fastscan.scan(text) is None


@needs_c
def test_scanner_values() -> None:
    text = (
        b'[{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "pid": 0, "tid": "stream 7",'
        b' "ts": 1712195495519689.047, "dur": 1.5, "args": {"device": 1, "stream": 7,'
        b' "correlation": 42, "external id": 9, "grid": [1, {"a": "}"}]}},'
        b' {"ph": "i", "name": "[memory]", "ts": 5, "args": {"Bytes": -512,'
        b' "Total Allocated": 1024, "Total Reserved": 2048, "Device Id": 0, "Device Type": 1}},'
        b' {"ph": "i", "name": "other instant", "ts": 6},'
        b' {"ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 3, "cat": "ac2g", "name": "ac2g"}]'
    )
    scanned = _fastscan.scan(text)
    assert scanned is not None
    assert scanned.seen == 4
    assert scanned.column("phase", np.int8).tolist() == [0, 4, 2]
    assert scanned.column("ts", np.int64).tolist() == [1712195495519689047, 5000, 3000]
    assert scanned.column("dur", np.int64).tolist() == [1500, 0, 0]
    assert scanned.column("has_dur", np.int8).tolist() == [1, 0, 0]
    assert scanned.column("device", np.int64).tolist() == [1, -1, -1]
    assert scanned.column("correlation", np.int64).tolist() == [42, -1, -1]
    assert scanned.column("ext_lower", np.int64).tolist() == [9, -1, -1]
    assert scanned.column("id", np.int64).tolist() == [-1, -1, 42]
    assert scanned.column("alloc_bytes", np.int64).tolist() == [-1, -512, -1]
    assert scanned.column("total_reserved", np.int64).tolist() == [-1, 2048, -1]
    assert scanned.column("device_type", np.int64).tolist() == [-1, 1, -1]
    names = [scanned.strings[i] for i in scanned.column("name", np.int32).tolist()]
    assert names == ["ké", "[memory]", "ac2g"]
    assert scanned.labels == ["stream 7"]


@needs_c
@pytest.mark.parametrize("tail", ["", " " * 9])  # digits within 8 bytes of the text's end, or not
def test_digit_runs_of_every_length(tail: str) -> None:
    """Integers and microseconds of 1 to 20 digits, read eight at a time and one at a time.

    Up to 18 digits an integer is read, up to 16 the whole microseconds of a time within
    int64 nanoseconds (more are refused: the slow path decides). The bytes just past the
    digits' range end a run, and are refused after a number; "0" alone is a number, a leading
    zero before another digit is refused.
    """
    for n in range(1, 21):
        for lead in "19":
            digits = lead + "".join(str((7 * i + n) % 10) for i in range(1, n))
            for after in ("", ".5", "x", ":", "?", "/"):  # bytes just past the digits' range
                text = f'[{{"ph": "X", "ts": 2, "args": {{"device": {digits}{after}}}}}{tail}]'
                scanned = _fastscan.scan(text.encode())
                if n > 18 or after:  # too long, a fraction, or junk after the number
                    assert scanned is None, (digits, after)
                else:
                    assert scanned is not None, digits
                    assert scanned.column("device", np.int64).tolist() == [int(digits)]
                text = f'[{{"ph": "X", "ts": 1, "dur": -{digits}{after}}}{tail}]'
                scanned = _fastscan.scan(text.encode())
                if n > 16 or int(digits) > 9223372036854774 or after not in ("", ".5"):
                    assert scanned is None, (digits, after)
                else:
                    assert scanned is not None, (digits, after)
                    ns = int(digits) * 1000 + (500 if after else 0)
                    assert scanned.column("dur", np.int64).tolist() == [-ns]
    assert _fastscan.scan(b'[{"ph": "X", "ts": 0, "dur": 0.25}]') is not None
    for bad in (b"00", b"01", b"0123456789"):
        assert _fastscan.scan(b'[{"ph": "X", "ts": ' + bad + b"}]") is None


# Every branch of a piece's derived columns (`_fastscan.derive` in C, `_Columns._derive` in
# numpy): GPU rows with and without their device and stream, host rows (neither), flows, the
# allocator's events on a GPU and on the CPU, the lower-case op id and bad times (no start;
# an end past int64 nanoseconds), split over pieces; negative lengths (on a flow too) apart.
_DERIVE_EVENTS = [
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": 9, "ts": 10, "dur": 2,'
    ' "args": {"device": 1, "stream": 7, "correlation": 5, "External id": 8}}',
    '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 3, "tid": 9, "ts": 11, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4, "tid": 6, "ts": 12, "dur": 3,'
    ' "args": {"device": 2, "stream": 3, "external id": 11}}',
    '{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 4, "tid": 6, "ts": 12, "dur": 4}',
    '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 4, "tid": 6, "ts": 13,'
    ' "args": {"Bytes": 512, "Device Id": 2, "Device Type": 1, "Total Allocated": 9}}',
    '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 4, "tid": 6, "ts": 14,'
    ' "args": {"Bytes": -64, "Device Id": -1, "Device Type": 0}}',
    '{"ph": "X", "cat": "cpu_op", "name": "no start", "pid": 4, "tid": 6, "dur": 1}',
    '{"ph": "X", "cat": "gpu_memcpy", "name": "far", "pid": 3, "tid": 2,'
    ' "ts": 9223372036854775, "dur": 1000}',
    '{"ph": "X", "cat": "gpu_memset", "name": "m", "pid": 3, "tid": 2, "ts": 20, "dur": 1,'
    ' "args": {"bytes": 4096}}',
    # Labels: a pid and a flow id given as strings, a tid as "stream N".
    '{"ph": "X", "cat": "kernel", "name": "kl", "pid": "Traces", "tid": "stream 5", "ts": 21,'
    ' "dur": 1}',
    '{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": "x1", "pid": 4, "tid": 6, "ts": 22}',
]


def _three_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[str], cut: int
) -> list[Trace | str]:
    """The trace of `events` (pieces cut after the first `cut`) read by C with its derived
    columns, by C with numpy deriving them, and by msgspec; the error text where one fails."""
    meta = '{{"ph": "M", "name": "p{}", "args": {{"x": "' + "y" * 60 + '"}}}}'
    pad = ",".join(meta.format(i) for i in range(40))
    body = ",\n".join([*events[:cut], pad, *events[cut:]])
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + body + "\n]}")
    out: list[Trace | str] = []
    assert _fastscan.DERIVE_AVAILABLE
    with monkeypatch.context() as m:
        m.setattr(kineto, "CHUNK_BYTES", 1024)  # pieces, where the reader cuts them
        for derive, use_c in ((True, True), (False, True), (False, False)):
            m.setattr(_fastscan, "DERIVE_AVAILABLE", derive)
            try:
                out.append(_read(path, use_c, m))
            except TraceFormatError as e:
                out.append(str(e))
    return out


@needs_c
@pytest.mark.parametrize("cut", [0, 4, len(_DERIVE_EVENTS)])
def test_derived_columns_alike_in_c_and_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: int
) -> None:
    t, *others = _three_reads(tmp_path, monkeypatch, _DERIVE_EVENTS, cut)
    assert isinstance(t, Trace)
    for other in others:
        assert isinstance(other, Trace)
        assert_same(t, other)
    names = [t.names[i] for i in t.name_id.tolist()]
    assert names == ["k", "k2", "aten::mm", "ac2g", "[memory]", "[memory]", "m", "kl", "ac2g"]
    assert t.kind.tolist() == [
        EventKind.KERNEL, EventKind.KERNEL, EventKind.CPU_OP, EventKind.FLOW, EventKind.MEMORY,
        EventKind.MEMORY, EventKind.MEMSET, EventKind.KERNEL, EventKind.FLOW,
    ]  # fmt: skip
    traces_id, x1_id = (-(t.labels.index(k) + 2) for k in ("Traces", "x1"))
    assert t.device.tolist() == [1, 3, -1, -1, 2, -1, 3, traces_id, -1]
    assert t.stream.tolist() == [7, 9, -1, -1, -1, -1, 2, 5, -1]
    assert (t.pid[7], t.tid[7]) == (traces_id, 5)
    assert t.dur_ns.tolist() == [2000, 1000, 3000, 0, 0, 0, 1000, 1000, 0]
    assert t.external_id.tolist() == [8, -1, 11, -1, -1, -1, -1, -1, -1]
    assert t.correlation.tolist()[:4] == [5, -1, -1, 5] and t.correlation[8] == x1_id
    counts = t.byte_counts
    assert dict(zip(counts.rows.tolist(), counts.values.tolist(), strict=True)) == {
        4: 512, 5: -64, 6: 4096
    }  # fmt: skip
    assert any("skipped 2 event(s) without a valid ts or dur" in w for w in t.warnings)


@needs_c
def test_negative_lengths_alike_in_c_and_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flow's negative length counts as an op's does; a row with a bad time does not count.
    events = [e.replace('"dur": 4}', '"dur": -4}') for e in _DERIVE_EVENTS]
    events.insert(
        5, '{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 4, "tid": 6, "ts": 15, "dur": -1}'
    )
    events.append('{"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 4, "tid": 6, "dur": -1}')
    errors = _three_reads(tmp_path, monkeypatch, events, 5)
    assert (
        errors
        == [
            "{}: 2 event(s) with a negative duration (first: 'ac2g' at ts 12000 ns)".format(
                tmp_path / "t.json"
            )
        ]
        * 3
    )


@needs_c
def test_columns_are_handed_over_read_only_and_reused() -> None:
    # The C columns come as buffers of their own (no copy into bytes): read-only views of
    # their length; once freed they serve the next scan's columns, and drop_spare lets go.
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1}'
    for round_ in range(3):
        text = b"[" + b",".join(event % (10 * i + round_) for i in range(5000)) + b"]"
        scanned = _fastscan.scan(text)
        assert scanned is not None
        ts = scanned.column("ts", np.int64)
        assert ts.tolist() == [(10 * i + round_) * 1000 for i in range(5000)]
        assert not ts.flags.writeable
        with pytest.raises(ValueError):
            ts[0] = 1
        assert len(scanned.raw["ts"]) == 8 * 5000
        assert len(scanned.raw["meta_row"]) == 0 and not scanned.raw["meta_row"]
        del ts, scanned
    _fastscan.drop_spare()
    again = _fastscan.scan(b'[{"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": 3, "dur": 4}]')
    assert again is not None and again.column("dur", np.int64).tolist() == [4000]


@needs_c
def test_rare_columns_are_none_where_unset_over_reused_memory() -> None:
    # Columns that most rows leave unset (labels, flow ids, copies' and the allocator's args)
    # are written only where set, the rows between filled: a scan into the memory of one whose
    # rows set them (its columns' mappings, pooled, larger text first) reads none of its
    # values, and values at the first, a middle and the last row land on their rows.
    rare = ("pid_label", "tid_label", "id", "id_label", "ext_lower", "bytes", "alloc_bytes",
            "total_allocated", "total_reserved", "device_id", "device_type")  # fmt: skip
    dense = (
        b'{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": "p", "tid": "t",'
        b' "ts": %d, "args": {"Bytes": 5, "Total Allocated": 6, "Total Reserved": 7,'
        b' "Device Id": 0, "Device Type": 1, "external id": 3}},'
        b' {"ph": "s", "id": "f", "pid": 1, "tid": 2, "ts": %d, "cat": "ac2g", "name": "ac2g"},'
        b' {"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 7, "ts": %d,'
        b' "dur": 1, "args": {"bytes": 64}}'
    )
    plain = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1}'
    for _ in range(2):
        text = b"[" + b",".join(dense % (i, i, i) for i in range(8000)) + b"]"
        scanned = _fastscan.scan(text)
        assert scanned is not None
        for key in rare:
            column = scanned.column(key, np.int32 if key in _INT32_KEYS else np.int64)
            assert key == "id" or int(column.max()) >= 0, key  # flow ids here are labels
        del scanned
        n = 20000
        set_at = {0, 777, n - 1}
        rows = [
            (b'{"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 7, "ts": %d,'
             b' "dur": 1, "args": {"bytes": %d}}' % (i, 100 + i))
            if i in set_at else plain % i
            for i in range(n)
        ]  # fmt: skip
        scanned = _fastscan.scan(b"[" + b",".join(rows) + b"]")
        assert scanned is not None
        for key in rare:
            column = scanned.column(key, np.int32 if key in _INT32_KEYS else np.int64)
            want = np.full(n, -1)
            if key == "bytes":
                want[sorted(set_at)] = [100 + i for i in sorted(set_at)]
            assert np.array_equal(column, want), key
        del scanned


_INT32_KEYS = ("pid_label", "tid_label", "id_label")


# Keys the scanner matches as they stand (_scan.c event_key / args_key), their near misses
# (a prefix, one more byte, another case) and the escaped spellings of them.
_NEAR_KEYS = ["ph", "p", "phx", "pid", "pi", "pidd", "tid", "ts", "t", "tss", "name", "nam",
              "names", "cat", "cats", "dur", "du", "id", "i", "ids", "args", "arg", "s", "bp",
              "Ph", "PH", "Name", "Args"]  # fmt: skip
_NEAR_ARGS = ["device", "devic", "devices", "Device", "Device Id", "Device Ids", "Device Type",
              "Device Typ", "stream", "streams", "correlation", "correlatio", "External id",
              "External ID", "external id", "external ts", "Ev Idx", "bytes", "Bytes", "byte",
              "block", "blocks per SM", "Total Allocated", "Total Allocate", "Total Reserved",
              "Sequence number", "Sequence numbers", "Fwd thread id", "Collective name",
              "Collective nam", "wait_on_stream", "wait_on_streams", "Input Dims", "Input Dim",
              "Input type", "Input Strides", "Concrete Inputs", "grid", "gri", "q", "Python id",
              "Python parent id", "Record function id", "cbid", "context", "queued",
              "est. achieved occupancy %"]  # fmt: skip


@needs_c
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(st.sampled_from(_NEAR_KEYS), min_size=1, max_size=6),
    arg_keys=st.lists(st.sampled_from(_NEAR_ARGS), min_size=0, max_size=8),
    values=st.lists(st.sampled_from(['7', '"7"', "[1,2]", "null", '"X"', "1.5", "{}"]),
                    min_size=14, max_size=14),
    compact=st.booleans(),
)  # fmt: skip
def test_near_miss_keys_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: list[str], arg_keys: list[str],
    values: list[str], compact: bool,
) -> None:  # fmt: skip
    sep = "," if compact else ", "
    colon = ":" if compact else ": "
    members = [f'"ph"{colon}"X"', f'"ts"{colon}5', f'"dur"{colon}2']
    members += [f'"{k}"{colon}{values[i % 14]}' for i, k in enumerate(keys)]
    args = [f'"{k}"{colon}{values[(i + 3) % 14]}' for i, k in enumerate(arg_keys)]
    members.append(f'"args"{colon}{{{sep.join(args)}}}')
    event = "{" + sep.join(members) + "}"
    path = tmp_path / "t.json"
    # The event last, its closing brace the text's last byte but two: keys near the end.
    path.write_text('{"traceEvents": [' + event + sep + event + "]}")
    assert_both_paths_agree(path, monkeypatch)


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        b'[{"p\\u0068": "X", "ts": 1}]',  # an escaped event key
        b'[{"ph": "X", "ts": 1, "args": {"devic\\u0065": 0}}]',  # an escaped args key
        b'[{"ph": "X", "ts": 1, "args": {"\\u0064evice": 0}}]',
    ],
)
def test_escaped_known_keys_are_refused(text: bytes) -> None:
    assert _fastscan.scan(text) is None


@needs_c
def test_scanner_takes_each_known_key_exactly() -> None:
    # Each known key beside a near miss that must not be taken for it.
    text = (
        b'[{"ph":"X","phx":"f","pid":3,"pidd":9,"tid":4,"tss":8,"ts":10,"dur":2,"du":7,'
        b'"id":5,"ids":1,"cat":"kernel","cats":"x","name":"k","nam":"j","args":{"devices":6,'
        b'"device":1,"stream":2,"streams":9,"correlation":11,"correlatio":12,'
        b'"External ID":13,"External id":14,"Device":15,"Device Ids":16,"Device Id":0,'
        b'"Bytes":-4,"byte":17,"Total Allocate":18,"Total Allocated":19}}]'
    )
    scanned = _fastscan.scan(text)
    assert scanned is not None
    assert scanned.column("pid", np.int64).tolist() == [3]
    assert scanned.column("tid", np.int64).tolist() == [4]
    assert scanned.column("ts", np.int64).tolist() == [10000]
    assert scanned.column("dur", np.int64).tolist() == [2000]
    assert scanned.column("id", np.int64).tolist() == [5]
    assert scanned.column("device", np.int64).tolist() == [1]
    assert scanned.column("stream", np.int64).tolist() == [2]
    assert scanned.column("correlation", np.int64).tolist() == [11]
    assert scanned.column("ext", np.int64).tolist() == [14]
    assert scanned.column("device_id", np.int64).tolist() == [0]
    assert scanned.column("alloc_bytes", np.int64).tolist() == [-4]
    assert scanned.column("total_allocated", np.int64).tolist() == [19]
    assert [scanned.strings[i] for i in scanned.column("name", np.int32).tolist()] == ["k"]
    assert [scanned.strings[i] for i in scanned.column("cat", np.int32).tolist()] == ["kernel"]


@needs_c
def test_mark_sets_the_slot_of_each_id() -> None:
    seen = np.zeros(5, dtype=np.bool_)  # ids 0..3, and -1 (none) in the last slot
    assert _fastscan.mark(np.array([2, -1, 2, 0], dtype=np.int32), seen)
    assert seen.tolist() == [True, False, True, False, True]
    assert _fastscan.mark(np.array([], dtype=np.int32), seen)
    assert _fastscan.mark(np.array([3], dtype=np.int64), seen)  # any integer column
    assert seen.tolist() == [True, False, True, True, True]
    for outside in ([4], [-2], [1, 7]):  # the caller marks those its own way
        assert not _fastscan.mark(np.array(outside, dtype=np.int32), np.zeros(5, np.bool_))
    # `_used_ids` gives the same set either way.
    rng = np.random.default_rng(3)
    columns = [rng.integers(-1, 40, int(rng.integers(0, 200))).astype(np.int32) for _ in range(4)]
    expected = np.unique(np.concatenate(columns)).tolist()
    assert _kineto_columns._used_ids(40, *columns) == expected


@needs_c
def test_names_and_labels_as_text() -> None:
    """Raw UTF-8 and escaped names and labels give the same text; bytes not UTF-8 refuse."""
    text = (
        '[{"ph": "X", "name": "café ★", "pid": "gpu é", "tid": "t\\u00e9", "ts": 1},'
        ' {"ph": "X", "name": "caf\\u00e9 \\u2605", "pid": 1, "tid": 2, "ts": 2},'
        ' {"ph": "X", "name": "plain", "ts": 3}]'
    ).encode()
    scanned = _fastscan.scan(text)
    assert scanned is not None
    names = [scanned.strings[i] for i in scanned.column("name", np.int32).tolist()]
    assert names == ["café ★", "café ★", "plain"]
    assert all(type(s) is str for s in (*scanned.strings, *scanned.labels))
    assert sorted(scanned.labels) == ["gpu é", "té"]
    assert _fastscan.scan(b'[{"ph": "X", "name": "\xff", "ts": 1}]') is None
    assert _fastscan.scan(b'[{"ph": "X", "name": "k", "pid": "\xc3", "ts": 1}]') is None


@needs_c
def test_pieces_share_their_texts_objects() -> None:
    # The texts of later pieces are the objects the first piece made (one object per text,
    # kept across pieces): equal values, and the same object, str or bytes alike.
    def piece(names: list[str]) -> _fastscan.Scanned:
        events = ",".join(
            f'{{"ph": "X", "name": "{n}", "ts": {i}, "dur": 1, "args": {{"Input Dims": '
            f'[[{i % 3}, 4]], "Input type": ["float"]}}}}'
            for i, n in enumerate(names)
        )
        scanned = _fastscan.scan(f"[{events}]".encode())
        assert scanned is not None
        return scanned

    first = piece(["aten::mm", "aten::shared_text_probe", "caf\\u00e9"])
    again = piece(["aten::shared_text_probe", "aten::mm", "caf\\u00e9", "aten::other_probe"])
    assert first.strings == ["aten::mm", "aten::shared_text_probe", "café"]
    assert again.strings == ["aten::shared_text_probe", "aten::mm", "café", "aten::other_probe"]
    assert again.strings[0] is first.strings[1] and again.strings[1] is first.strings[0]
    assert first.op_values[0] == b"[[0, 4]]" and isinstance(first.op_values[0], bytes)
    assert any(v is first.op_values[0] for v in again.op_values)
    # Tens of thousands of distinct names fill the cache: past it, texts are fresh objects,
    # still right.
    many = [f"aten::distinct_probe_{i}" for i in range(70_000)]
    assert piece(many).strings == many
    assert piece(many[::-1]).strings == many[::-1]
