"""The shape arguments of ops (`Trace.op_args`): the three decode paths agree value for value.

PyTorch writes `"Input Dims"`, `"Input type"`, `"Input Strides"`, `"Concrete Inputs"`,
`"Sequence number"` and `"Fwd thread id"` in the args of ops recorded with
`record_shapes=True`. The C scanner, the typed msgspec path and the lenient path each read
them; whatever path a piece takes, the table must be the same.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.errors import TraceFormatError
from badput.trace import _fastscan, load_trace
from badput.trace._kineto_columns import _Growing, _op_column
from badput.trace.model import NO_ID, OpArgs, Trace

needs_c = pytest.mark.skipif(not _fastscan.AVAILABLE, reason="C scanner not built")

LIST_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
INT_KEYS = ("Sequence number", "Fwd thread id")

#: One row of the table, decoded: (row, dims, types, strides, concrete, sequence, fwd tid).
Row = tuple[int, object, object, object, object, int, int]


def _read(path: Path, use_c: bool, monkeypatch: pytest.MonkeyPatch) -> Trace:
    with monkeypatch.context() as m:
        if use_c:
            m.delenv("BADPUT_NO_C_SCAN", raising=False)
        else:
            m.setenv("BADPUT_NO_C_SCAN", "1")
        return load_trace(str(path))


def _rows(ops: OpArgs | None) -> list[Row] | None:
    if ops is None:
        return None
    out: list[Row] = []
    for i in range(len(ops)):
        out.append(
            (
                int(ops.row[i]),
                ops.value(int(ops.dims[i])),
                ops.value(int(ops.types[i])),
                ops.value(int(ops.strides[i])),
                ops.value(int(ops.concrete[i])),
                int(ops.sequence[i]),
                int(ops.fwd_tid[i]),
            )
        )
    return out


def _assert_well_formed(ops: OpArgs) -> None:
    # Small where the values allow: int32, and a column of NO_ID alone broadcast, no buffer.
    for col in (ops.row, ops.dims, ops.types, ops.strides, ops.concrete, ops.sequence,
                ops.fwd_tid):  # fmt: skip
        assert col.dtype.name == "int32"
        if len(ops) > 1 and (col == NO_ID).all():
            assert col.strides == (0,) and not col.flags.writeable
    assert (ops.row[1:] > ops.row[:-1]).all(), "rows ascending, each once"
    for ids in (ops.dims, ops.types, ops.strides, ops.concrete):
        assert ((ids >= NO_ID) & (ids < len(ops.values))).all()
    assert len(set(ops.values)) == len(ops.values), "values interned"
    assert all(isinstance(v, bytes) for v in ops.values)


def _assert_paths_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    c, slow = _read(path, True, monkeypatch), _read(path, False, monkeypatch)
    assert len(c) == len(slow)
    assert _rows(c.op_args) == _rows(slow.op_args)
    if c.op_args is not None:
        assert slow.op_args is not None
        _assert_well_formed(c.op_args)
        # Both read the same raw texts, in the same order.
        assert c.op_args.values == slow.op_args.values
    return c


def _write(tmp: Path, events: list[str], name: str = "t.json") -> Path:
    path = tmp / name
    text = '{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}"
    path.write_text(text, encoding="utf-8")
    return path


def _op(name: str, ts: int, args: str, cat: str = "cpu_op", extra: str = "") -> str:
    return (
        f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts},'
        f' "dur": 5{extra}, "args": {{"External id": {ts}, {args}}}}}'
    )


# ---- real traces ----------------------------------------------------------------------------


def _real(shared: Path) -> list[Path]:
    paths = sorted(shared.glob("tracelens-h100/*.json.gz")) + sorted(
        shared.glob("kineto-resnet50/*.json.gz")
    )
    assert len(paths) >= 5
    return paths


def _ns(ts: object) -> int:
    # microseconds, digits below 1 ns dropped toward zero, as the reader does
    return int(Decimal(str(ts)) * 1000)


def _expected_from_json(path: Path) -> Counter[tuple[object, ...]]:
    """(name, ts_ns, the six values) of every complete op event that carries shape args."""
    with gzip.open(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    out: Counter[tuple[object, ...]] = Counter()
    for e in doc["traceEvents"]:
        args = e.get("args") if isinstance(e, dict) else None
        if e.get("ph") != "X" or not isinstance(args, dict) or "ts" not in e:
            continue
        lists = [args.get(k) if isinstance(args.get(k), list) else None for k in LIST_KEYS]
        ints = [args.get(k) if isinstance(args.get(k), int) else NO_ID for k in INT_KEYS]
        if lists == [None] * 4 and ints == [NO_ID] * 2:
            continue
        text = json.dumps([*lists, *ints], default=float)
        out[(e.get("name", ""), _ns(e["ts"]), e.get("cat"), text)] += 1
    return out


def _actual(trace: Trace, path: Path) -> Counter[tuple[object, ...]]:
    with gzip.open(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    # category of each (name, ts) in the file: the Trace keeps only the kind
    cats = {(e.get("name", ""), _ns(e["ts"])): e.get("cat") for e in doc["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e}  # fmt: skip
    ops = trace.op_args
    assert ops is not None
    out: Counter[tuple[object, ...]] = Counter()
    for row, *values in _rows(ops) or []:
        key = (trace.names[int(trace.name_id[row])], int(trace.ts_ns[row]))
        out[(*key, cats[key], json.dumps(values, default=float))] += 1
    return out


def test_real_traces_paths_agree(shared_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _real(shared_traces):
        trace = _assert_paths_agree(path, monkeypatch)
        assert trace.op_args is not None, path


def test_real_traces_match_the_file(shared_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _real(shared_traces):
        for use_c in (True, False):
            trace = _read(path, use_c, monkeypatch)
            expected = _expected_from_json(path)
            actual = _actual(trace, path)
            assert actual == expected, path
            n_cpu_op_dims = sum(
                n for key, n in expected.items()
                if str(key[2]).lower() in ("cpu_op", "operator")
                and json.loads(str(key[3]))[0] is not None
            )  # fmt: skip
            assert n_cpu_op_dims > 100, path


# ---- the three paths on synthetic traces -----------------------------------------------------

_ARGS = (
    '"Input Dims": [[2, 3], [3, 4], []], "Input type": ["float", "float", "Scalar"],'
    ' "Input Strides": [[3, 1], [4, 1], []], "Concrete Inputs": ["", "", "1"],'
    ' "Sequence number": 17, "Fwd thread id": 3'
)
_EXPECTED = ([[2, 3], [3, 4], []], ["float", "float", "Scalar"], [[3, 1], [4, 1], []],
             ["", "", "1"], 17, 3)  # fmt: skip


def test_typed_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, [_op("aten::mm", 10, _ARGS), _op("aten::add", 20, '"x": 1')])
    trace = _assert_paths_agree(path, monkeypatch)
    assert _rows(trace.op_args) == [(0, *_EXPECTED)]
    assert trace.op_args is not None
    assert trace.op_args.values[0] == b"[[2, 3], [3, 4], []]"  # the raw text, as in the file


@pytest.mark.parametrize("odd", ['"pid": 1.5', '"cat": 7'])
def test_lenient_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str) -> None:
    """An event with an odd field type sends its piece down the lenient path."""
    weird = '{"ph": "X", "name": "odd", "tid": 1, "ts": 30, "dur": 1, ' + odd + "}"
    path = _write(tmp_path, [_op("aten::mm", 10, _ARGS), weird, _op("aten::add", 40, _ARGS)])
    for use_c in (True, False):
        trace = _read(path, use_c, monkeypatch)
        assert _rows(trace.op_args) == [(0, *_EXPECTED), (2, *_EXPECTED)]
        assert trace.op_args is not None
        # The complete path decodes the odd event's piece leniently: its values are re-encoded
        # from the decoded dicts (compact text). The C scanner's pieces send only the odd
        # event that way and keep the raw text of the others, as in the file.
        compact = b"[[2,3],[3,4],[]]"
        assert trace.op_args.values[0] == (b"[[2, 3], [3, 4], []]" if use_c else compact)
        assert [trace.names[i] for i in trace.name_id.tolist()] == ["aten::mm", "odd", "aten::add"]


def test_dropped_rows_do_not_shift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events dropped for a bad time, and instant and metadata events, are not rows."""
    events = [
        '{"ph": "M", "name": "process_name", "pid": 1, "args": {"Input Dims": [[9]]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 1, "dur": 2,'
        ' "args": {"Input Dims": [[7, 7, 7]], "Sequence number": 70}}',
        _op("aten::relu", 10, '"Input Dims": [[1, 2]]'),
        '{"ph": "i", "cat": "cpu_op", "name": "mark", "pid": 1, "tid": 1, "ts": 11, "s": "t",'
        ' "args": {"Input Dims": [[5]]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "bad_dur", "pid": 1, "tid": 1, "ts": 12,'
        ' "dur": "x", "args": {"Input Dims": [[8]]}}',
        _op("aten::mm", 20, '"Input Dims": [[3], [4]], "Sequence number": 4'),
    ]
    path = _write(tmp_path, events)
    for use_c in (True, False):
        trace = _read(path, use_c, monkeypatch)
        names = [trace.names[i] for i in trace.name_id.tolist()]
        assert names == ["aten::relu", "aten::mm"]
        assert _rows(trace.op_args) == [
            (0, [[1, 2]], None, None, None, NO_ID, NO_ID),
            (1, [[3], [4]], None, None, None, 4, NO_ID),
        ]
        assert trace.op_args is not None
        # the texts of dropped events are not kept
        assert trace.op_args.values in ([b"[[1, 2]]", b"[[3], [4]]"], [b"[[1,2]]", b"[[3],[4]]"])
    _assert_paths_agree(path, monkeypatch)


def test_rows_across_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace read in several pieces: rows and value ids stay global."""
    from badput.trace import kineto

    monkeypatch.setattr(kineto, "CHUNK_BYTES", 4096)
    events = []
    for i in range(600):
        if i % 7 == 3:
            events.append('{"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 1}')
        events.append(_op(f"op{i % 5}", 10 * i, f'"Input Dims": [[{i % 11}], []]'))
    path = _write(tmp_path, events)
    trace = _assert_paths_agree(path, monkeypatch)
    assert trace.op_args is not None
    assert len(trace.op_args) == 600 and len(trace.op_args.values) == 11
    assert trace.op_args.row.tolist() == list(range(600))
    dims = [trace.op_args.value(int(d)) for d in trace.op_args.dims.tolist()]
    assert dims == [[[i % 11], []] for i in range(600)]


def test_no_shape_args_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, [_op("aten::mm", 10, '"x": [1]'), _op("k", 20, '"grid": [1, 2]')])
    for use_c in (True, False):
        assert _read(path, use_c, monkeypatch).op_args is None
    # only values that carry nothing: no table either
    path = _write(tmp_path, [_op("a", 10, '"Input Dims": "none", "Sequence number": -1')])
    for use_c in (True, False):
        assert _read(path, use_c, monkeypatch).op_args is None


# ---- hostile values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('"Input Dims": "[1]"', None),  # a string: absent
        ('"Input Dims": 5', None),
        ('"Input Dims": null', None),
        ('"Input Dims": {"a": [1]}', None),
        ('"Input Dims": [[1]], "Sequence number": "7"', ([[1]], 7)),  # lenient: a digit string
        ('"Input Dims": [[1]], "Sequence number": 1.5', ([[1]], NO_ID)),
        ('"Input Dims": [[1]], "Sequence number": 7.0', ([[1]], 7)),
        ('"Input Dims": [[1]], "Sequence number": 1180591620717411303424', ([[1]], NO_ID)),
        ('"Input Dims": [[1]], "Sequence number": -9223372036854775809', ([[1]], NO_ID)),
        ('"Input Dims": [[1]], "Sequence number": true', ([[1]], NO_ID)),
        ('"Input Dims": [[1]], "Fwd thread id": [1]', ([[1]], NO_ID)),
        ('"Input Dims": [1], "Input Dims": [[2]]', ([[2]], NO_ID)),  # the last key counts
        ('"Input Dims": [1], "Input Dims": 3', None),
    ],
)
def test_odd_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: str, expected: tuple[object, int] | None
) -> None:
    path = _write(tmp_path, [_op("aten::mm", 10, args)])
    for use_c in (True, False):
        rows = _rows(_read(path, use_c, monkeypatch).op_args)
        if expected is None:
            assert rows is None
        else:
            assert rows == [(0, expected[0], None, None, None, expected[1], NO_ID)]


def test_deep_and_huge_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "[" * 200 + "]" * 200  # deeper than the C scanner goes: msgspec reads it
    huge = "[" + ",".join(["[1024, 1024]"] * 200_000) + "]"  # 2.6 MB
    path = _write(
        tmp_path,
        [
            _op("deep", 10, f'"Input Dims": {deep}, "Concrete Inputs": [{deep}]'),
            _op("huge", 20, f'"Input Dims": {huge}, "Input type": ["float"]'),
        ],
    )
    trace = _assert_paths_agree(path, monkeypatch)
    ops = trace.op_args
    assert ops is not None
    value = ops.value(int(ops.dims[0]))
    for _ in range(199):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
    assert ops.value(int(ops.dims[1])) is None  # longer than MAX_OP_ARG_BYTES
    assert ops.value(int(ops.types[1])) == ["float"]
    assert ops.value(NO_ID) is None and ops.value(len(ops.values)) is None


def test_nesting_bomb_is_a_format_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deeper than any decoder goes: refused as the reader refuses any deep args."""
    deep = "[" * 100_000 + "]" * 100_000
    path = _write(tmp_path, [_op("deep", 10, f'"Input Dims": {deep}')])
    for use_c in (True, False):
        with monkeypatch.context() as m:
            if use_c:
                m.delenv("BADPUT_NO_C_SCAN", raising=False)
            else:
                m.setenv("BADPUT_NO_C_SCAN", "1")
            with pytest.raises(TraceFormatError, match="nested too deeply"):
                load_trace(str(path))


def test_value_of_text_that_is_not_json() -> None:
    ops = OpArgs.empty()
    assert len(ops) == 0 and ops.value(0) is None
    bad = OpArgs(ops.row, ops.dims, ops.dims, ops.dims, ops.dims, ops.row, ops.row,
                 [b"[1,", b'["\xff"]', b"[" * 5000 + b"]" * 5000])  # fmt: skip
    assert [bad.value(i) for i in range(3)] == [None, None, None]


# ---- secrets ----------------------------------------------------------------------------------


def test_secrets_in_concrete_inputs_are_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "hf_abcdefghijklmnopqrstuvwxyzSECRET0123"
    args = (
        '"Input Dims": [[], []], "Input type": ["", ""],'
        f' "Concrete Inputs": ["HF_TOKEN=abc123SECRET", "{token}"]'
    )
    path = _write(tmp_path, [_op("aten::load", 10, args), _op("aten::mm", 20, _ARGS)])
    for use_c in (True, False):
        trace = _read(path, use_c, monkeypatch)
        ops = trace.op_args
        assert ops is not None
        joined = b"\n".join(ops.values)
        assert b"SECRET" not in joined
        concrete = ops.value(int(ops.concrete[0]))
        assert isinstance(concrete, list) and len(concrete) == 2  # still valid JSON
        assert all("SECRET" not in str(v) for v in concrete)
        assert ops.value(int(ops.dims[1])) == _EXPECTED[0]  # other values untouched


# ---- random traces: the C scanner and msgspec agree -------------------------------------------

_list_values = st.one_of(
    st.just([[2, 3], []]),
    st.just(["float", "c10::BFloat16", ""]),
    st.just(["", "1", "[0, 1]", 'weird \\ " é']),
    st.lists(st.lists(st.integers(0, 2**40), max_size=4), max_size=4),
    st.sampled_from(["[1]", 3, None, True, {"a": [1]}, [], [1.5, -0.0, 1e300]]),
)
_int_values = st.one_of(
    st.integers(-5, 2**40), st.sampled_from([2**63, -(2**63), 2**70, "12", 1.5, 3.0, None])
)


@st.composite
def _events(draw: st.DrawFn) -> str:
    e: dict[str, Any] = {"ph": draw(st.sampled_from(["X", "X", "X", "i", "M", "f"]))}
    e["cat"] = draw(st.sampled_from(["cpu_op", "kernel", "cuda_runtime"]))
    e["name"] = draw(st.sampled_from(["aten::mm", "[memory]", "k"]))
    e["pid"] = draw(st.sampled_from([1, 2, "1"]))
    e["tid"] = 1
    if draw(st.integers(0, 9)):
        e["ts"] = draw(st.integers(0, 10**6))
    e["dur"] = draw(st.sampled_from([1, 2, 5]))
    if e["ph"] == "f":
        e["id"] = 3
    args: dict[str, Any] = {}
    for key in LIST_KEYS:
        if draw(st.booleans()):
            args[key] = draw(_list_values)
    for key in INT_KEYS:
        if draw(st.integers(0, 3)) == 0:
            args[key] = draw(_int_values)
    e["args"] = args
    indent = draw(st.sampled_from([None, 1]))
    return json.dumps(e, indent=indent, ensure_ascii=draw(st.booleans()))


@needs_c
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(_events(), min_size=1, max_size=25))
def test_random_events_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[str]
) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + "\n]}", encoding="utf-8")
    try:
        c = _read(path, True, monkeypatch)
    except TraceFormatError as error:  # the same error from both paths
        with pytest.raises(TraceFormatError) as info:
            _read(path, False, monkeypatch)
        assert str(info.value) == str(error)
        return
    slow = _read(path, False, monkeypatch)
    assert _rows(c.op_args) == _rows(slow.op_args)
    expected: list[Row] = []
    row = -1
    for text in events:
        e = json.loads(text)
        kept = e["ph"] in ("X", "f") or (e["ph"] == "i" and e["name"] == "[memory]")
        if not kept or (e["ph"] == "X" and "ts" not in e):
            continue
        row += 1
        lists = [e["args"].get(k) if isinstance(e["args"].get(k), list) else None
                 for k in LIST_KEYS]  # fmt: skip
        ints = [_int_of(e["args"].get(k)) for k in INT_KEYS]
        if lists != [None] * 4 or ints != [NO_ID] * 2:
            expected.append((row, *lists, *ints))  # type: ignore[arg-type]
    assert (_rows(c.op_args) or []) == expected


def _int_of(value: object) -> int:
    if isinstance(value, bool) or value is None:
        return NO_ID
    if isinstance(value, float):
        return int(value) if value.is_integer() else NO_ID
    if isinstance(value, str):
        return int(value) if value.isdigit() else NO_ID
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else NO_ID
    return NO_ID


# ---- the C scanner refuses what msgspec refuses ------------------------------------------------


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": [1-2]}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": [1.]}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": [01]}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": [1e]}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Concrete Inputs": ["\\q"]}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Concrete Inputs": ["\\u12"]}}]',
        b'[{"ph": "X", "name": "a\\x", "ts": 1, "dur": 1}]',
        b'[{"ph": "X", "ts": 01, "dur": 1}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Sequence number": 01}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Sequence number": "3"}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Fwd thread id": 1.5}}]',
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": ' + b"[" * 80 + b"]" * 80 + b"}}]",
    ],
)
def test_scanner_refuses_invalid_json(text: bytes) -> None:
    assert _fastscan.scan(text) is None


@needs_c
def test_scanner_columns() -> None:
    text = (
        b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"Input Dims": [[1, 2]], "Input type": "x",'
        b' "Sequence number": 5, "Fwd thread id": 0}},'
        b' {"ph": "M", "ts": 1, "args": {"Input Dims": [[9]]}},'
        b' {"ph": "X", "ts": 2, "dur": 1, "args": {"Input Dims": [[9]]},'
        b' "args": {"Input Strides": [[2, 1]], "Concrete Inputs": ["a\\u00e9"]}},'
        b' {"ph": "X", "ts": 3, "dur": 1, "args": {"Input Dims": [[1, 2]]}}]'
    )
    scanned = _fastscan.scan(text)
    assert scanned is not None
    assert scanned.op_values == [b"[[1, 2]]", b"[[2, 1]]", b'["a\\u00e9"]']  # kept rows only
    assert scanned.column("op_row", np.int64).tolist() == [0, 1, 2]
    assert scanned.column("op_dims", np.int32).tolist() == [0, -1, 0]  # the last "args" counts
    assert scanned.column("op_types", np.int32).tolist() == [-1, -1, -1]  # not a list
    assert scanned.column("op_strides", np.int32).tolist() == [-1, 1, -1]
    assert scanned.column("op_concrete", np.int32).tolist() == [-1, 2, -1]
    assert scanned.column("op_seq", np.int64).tolist() == [5, -1, -1]
    assert scanned.column("op_fwd", np.int64).tolist() == [0, -1, -1]


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(
        st.text(st.sampled_from('ab"\\\x01\x1f é∂\U0001f600/\n'), max_size=40), min_size=1
    )
)
def test_scanner_strings(names: list[str]) -> None:
    """The string scan (8 bytes a step) finds each string's end at any offset and length."""
    events = [json.dumps({"ph": "X", "name": n, "ts": 1, "dur": 1}) for n in names]
    for ensure_ascii in (True, False):
        if not ensure_ascii:
            events = [json.dumps({"ph": "X", "name": n, "ts": 1, "dur": 1}, ensure_ascii=False)
                      for n in names]  # fmt: skip
        scanned = _fastscan.scan(("[" + ",".join(events) + "]").encode())
        assert scanned is not None
        got = [scanned.strings[i] for i in scanned.column("name", np.int32).tolist()]
        assert got == names
    # a raw control character inside a string is not JSON
    assert _fastscan.scan(b'[{"ph": "X", "name": "abcdefghij\x01klmnop", "ts": 1}]') is None
    assert _fastscan.scan(b'[{"ph": "X", "name": "abcdefghijklmnop') is None


def test_a_narrow_table_finds_wide_rows_exactly() -> None:
    # An int32 table searched with int64 rows: rows past int32's range are clipped for the
    # search and then fail the compare, never taken for the table's last (or first) row.
    top = 2**31 - 1
    i32 = np.array([-(2**31), 0, 5, top], dtype=np.int32)
    none = np.full(4, NO_ID, dtype=np.int32)
    ops = OpArgs(i32, none, none, none, none, none, none, [])
    rows = np.array([5, top, top + 1, 2**40, -1, 0, -(2**31), -(2**31) - 1], dtype=np.int64)
    assert ops.entries_of(rows).tolist() == [2, 3, -1, -1, -1, 1, 0, -1]
    wide = OpArgs(i32.astype(np.int64), none, none, none, none, none, none, [])
    assert wide.entries_of(rows).tolist() == [2, 3, -1, -1, -1, 1, 0, -1]


def _op_column_of(pieces: list[npt.NDArray[np.int64]]) -> npt.NDArray[Any]:
    """A shape-argument id column filled piece by piece, as the read fills it."""
    part = _Growing(np.int64, narrow=True)
    part.reserve(2)
    for p in pieces:
        part.append(p)
    return _op_column(part)


def test_op_column_per_piece_matches_the_whole_column() -> None:
    none = np.full(3, NO_ID, dtype=np.int64)
    small = np.array([5, NO_ID, 2**31 - 1], dtype=np.int64)
    wide = np.array([2**31, 1], dtype=np.int64)  # a sequence number past int32
    every_none = _op_column_of([none, none[:1]])
    assert every_none.tolist() == [NO_ID] * 4 and every_none.strides == (0,)
    assert every_none.dtype.name == "int32"
    mixed = _op_column_of([none, small])  # one piece NO_ID alone: not broadcast
    assert mixed.dtype.name == "int32" and mixed.tolist() == [NO_ID] * 3 + small.tolist()
    past = _op_column_of([small, wide])  # one piece past int32: all kept int64
    assert past.dtype.name == "int64" and past.tolist() == small.tolist() + wide.tolist()
    low = _op_column_of([np.array([-(2**31) - 1], dtype=np.int64)])
    assert low.dtype.name == "int64" and low.tolist() == [-(2**31) - 1]
    # One value on every row, not NO_ID (a single forward thread): written out, writable.
    same = _op_column_of([np.full(3, 7, dtype=np.int64), np.full(2, 7, dtype=np.int64)])
    assert same.tolist() == [7] * 5 and same.dtype.name == "int32" and same.flags.writeable
