"""Layouts in the C scanner (`trace/_scan.c`): an event matched against the layouts its piece
learnt is read exactly as the general way reads it, and one that matches none is read the
general way. The scanner's whole result (every column, the string tables, the count of events
seen, where and how the run stopped) must not depend on whether layouts are used.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.errors import TraceFormatError
from badput.trace import _fastscan
from test_fastscan import _read, assert_both_paths_agree, assert_same

_scan: Any = _fastscan._scan
needs_layouts = pytest.mark.skipif(
    _scan is None or not hasattr(_scan, "layouts"), reason="C scanner not built"
)

DATA = Path(__file__).parent / "data" / "traces"
_BYTE = re.compile(r" \(byte (\d+)\)")


def _plain(result: tuple[Any, ...]) -> list[Any]:
    """The scanner's result with its column buffers as bytes."""
    return [x if isinstance(x, (int, list)) else bytes(x) for x in result]


def _scan_with(layouts: bool, buf: bytes, start: int, first: bool) -> tuple[list[Any], int]:
    """The run's result, and how many events it matched against layouts."""
    was = _scan.layouts(layouts)
    try:
        before = _scan.layouts_matched()
        result = _plain(_scan.scan_events(buf, start, first))
        return result, _scan.layouts_matched() - before
    finally:
        _scan.layouts(was)


def assert_alike(buf: bytes, start: int, first: bool = True) -> int:
    """Both ways give the same result; returns how many events layouts matched."""
    general, unmatched = _scan_with(False, buf, start, first)
    learnt, matched = _scan_with(True, buf, start, first)
    assert unmatched == 0
    assert len(general) == len(learnt)
    for i, (a, b) in enumerate(zip(general, learnt, strict=True)):
        assert a == b, f"result item {i} differs"
    was = _scan.layouts(False)
    try:
        whole = _scan.scan(buf[start - 1 :]) if first else None
    finally:
        _scan.layouts(was)
    if whole is not None:  # the whole-array entry point agrees too
        assert _plain(_scan.scan(buf[start - 1 :])) == _plain(whole)
    return matched


def _events_start(buf: bytes) -> int:
    at = buf.find(b'"traceEvents"')
    return buf.find(b"[", at) + 1


def _trace_files() -> Iterator[Path]:
    for p in sorted(DATA.glob("*/*.json*")):
        if p.name.endswith((".json", ".json.gz")) and "expected" not in p.name:
            yield p


@needs_layouts
@pytest.mark.parametrize("path", list(_trace_files()), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_read_alike(path: Path) -> None:
    raw = path.read_bytes()
    buf = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    if b'"traceEvents"' not in buf:
        pytest.skip("not a Kineto trace")
    start = _events_start(buf)
    matched = assert_alike(buf, start)
    # Cut anywhere (a piece's end): the run stops at the same place with the same rows.
    rng = random.Random(path.name)
    for cut in sorted(rng.sample(range(start, len(buf)), 6)):
        assert_alike(buf[:cut], start)
    if buf.count(b'"ph"') > 1000:  # a real trace repeats its layouts
        assert matched > buf.count(b'"ph"') // 2


def _render(e: dict[str, Any], style: int) -> str:
    if style == 0:
        return json.dumps(e, separators=(",", ":"))
    if style == 1:
        return json.dumps(e)
    return json.dumps(e, indent=2)


_layouts = [
    ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"],
    ["ph", "cat", "name", "pid", "tid", "ts", "dur"],
    ["ph", "id", "pid", "tid", "ts", "cat", "name"],
    ["name", "ph", "ts", "dur", "tid", "pid", "cat", "args"],
]
_arg_layouts = [
    ["External id", "Ev Idx", "Input Dims", "Input type", "Fwd thread id", "Sequence number"],
    ["External id", "Input Dims", "Input type"],
    ["device", "stream", "correlation", "queued", "grid", "context"],
    ["cbid", "correlation", "External id"],
    ["Trace name", "Trace iteration", "Device", "Call stack", "Input Dims"],
    [],
]
_names = ["aten::mm", "aten::add_", "cudaLaunchKernel", "[memory]", 'we"ird', "é", ""]
_dims = [[[16, 1], [1, 256]], [[16]], [[16], []], [], [[1, 2, 3]], [[16, 1]]]
_types = [["float", "float"], ["float"], ["", "Scalar"], []]


def _value(key: str, draw: st.DrawFn) -> Any:
    pick = draw(st.integers(0, 30))
    if key == "ph":
        return ["X", "X", "X", "s", "f", "i", "M"][pick % 7]
    if key == "cat":
        return ["cpu_op", "kernel", "cuda_runtime", "ac2g", "cpu_instant_event"][pick % 5]
    if key == "name":
        return _names[pick % len(_names)]
    if key in ("pid", "tid"):
        return [7, 7, 9, "7", "stream 7", -1][pick % 6]
    if key == "id":
        return pick
    if key in ("ts", "dur"):
        return draw(st.integers(0, 2**50))
    if key == "Input Dims":
        return _dims[pick % len(_dims)]
    if key == "Input type":
        return _types[pick % len(_types)]
    if key in ("Trace name", "Call stack"):
        return ["PyTorch Profiler", "a;b;c"][pick % 2]
    if key == "grid":
        return [pick % 3, 1, 1]
    return [pick % 4, pick, "7", None, 1.5][pick % 5] if pick > 26 else pick % 4


@st.composite
def _event_texts(draw: st.DrawFn) -> str:
    layout = draw(st.sampled_from(_layouts))
    e: dict[str, Any] = {}
    for key in layout:
        if key == "args":
            e["args"] = {k: _value(k, draw) for k in draw(st.sampled_from(_arg_layouts))}
        else:
            e[key] = _value(key, draw)
    text = _render(e, draw(st.sampled_from([0, 0, 0, 1, 2])))
    change = draw(st.integers(0, 40))
    if change == 1:  # a space more before a value
        text = text.replace(":", ": ", 1)
    elif change == 2:  # a key twice (the last one counts)
        text = text[:-1] + ', "tid": 3}'
    elif change == 3:  # an escaped key: refused
        text = text.replace('"ph"', '"p\\u0068"', 1)
    elif change == 4:  # a value the scanner refuses
        text = text.replace('"ts":', '"ts":1e3,"x":', 1)
    elif change == 5:  # a key it does not know
        text = text[:-1] + ', "zz": {"a": [1, 2]}}'
    elif change == 6:  # a list cut short
        text = text.replace("]]", "]", 1)
    elif change == 7:  # a second args object (the last one counts)
        text = text[:-1] + ', "args": {"stream": 3, "correlation": 4}}'
    return text


@needs_layouts
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(_event_texts(), min_size=1, max_size=60),
    repeat=st.integers(1, 4),
    cut=st.floats(0, 1),
)
def test_learnt_layouts_read_alike(texts: list[str], repeat: int, cut: float) -> None:
    # Repeated, the events meet the layouts learnt from their earlier copies.
    body = ",\n".join(texts * repeat)
    buf = ("[" + body + "]").encode()
    assert_alike(buf, 1)
    assert_alike(buf[: 1 + int(cut * (len(buf) - 1))], 1)


@needs_layouts
def test_a_layout_that_matches_up_to_the_last_byte() -> None:
    good = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":2,"ts":5,"dur":1}'
    events = (
        [good] * 5
        + [
            good[:-1] + " }",  # whitespace before the end
            good.replace('"dur":1', '"dur":1 '),
            good.replace('"tid":2', '"tid":"2"'),  # a label where a number was learnt
            good.replace('"tid":2', '"tid":23'),  # a longer value than learnt
            good.replace('"pid":1', '"pid":1,"pid":4'),  # repeated key
            good[:-1] + ',"args":{}}',
            good[:-1],  # no close: the run is malformed or truncated alike
        ]
    )
    buf = ("[" + ",".join(events) + "]").encode()
    assert assert_alike(buf, 1) >= 4
    for n in range(1, len(buf)):
        assert_alike(buf[:n], 1)


@needs_layouts
def test_a_value_set_again_later_is_not_learnt() -> None:
    # An event that sets a field twice shares the start of its layout with one that sets it
    # once: the value learnt at the start must be the start's, not the event's last.
    twice = '{"ph":"X","cat":"c","name":"n","pid":1,"tid":9,"ts":0,"dur":1,"tid":3}'
    once = '{"ph":"X","cat":"c","name":"n","pid":1,"tid":9,"ts":0,"dur":1}'
    args2 = (
        '{"ph":"X","cat":"k","name":"n","ts":0,"args":{"device":1,"correlation":5},'
        '"args":{"stream":2}}'
    )
    args1 = '{"ph":"X","cat":"k","name":"n","ts":0,"args":{"device":1,"correlation":5}}'
    buf = ("[" + ",".join([twice, once, args2, args1] * 3) + "]").encode()
    assert assert_alike(buf, 1) > 0


@needs_layouts
def test_shape_lists_remembered_by_name_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same op name with lists that share a beginning, one cut short, one with a string
    # that holds a bracket: a remembered list is taken only where the whole of it is there.
    def op(i: int, dims: str, types: str) -> str:
        return (
            f'{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{i},"dur":1,'
            f'"args":{{"External id":{i},"Input Dims":{dims},"Input type":{types}}}}}'
        )

    variants = [
        ("[[16,1],[1,256]]", '["float","float"]'),
        ("[[16,1],[1,256],[]]", '["float","float",""]'),
        ("[[16,1]]", '["float"]'),
        ("[[16,1],[1,256]]", '["float]","float"]'),
        ("[[16,1],[1,256]]", '"float"'),  # not a list: absent
        ("[[16,1],[1,25]]", '["float","float"]'),
    ]
    events = [op(i, *variants[i % len(variants)]) for i in range(60)]
    text = '{"traceEvents":[' + ",".join(events) + "]}"
    buf = text.encode()
    assert assert_alike(buf, _events_start(buf)) > 30
    path = tmp_path / "t.json"
    path.write_text(text)
    assert_both_paths_agree(path, monkeypatch)


def _event_mix(rng: random.Random, n: int, first: list[str]) -> list[str]:
    """`n` events of a compact trace of several kinds: complete events of five categories on
    three threads, and the launch flows' start and end (whose literal ends at their "id")."""
    cats = ["cuda_runtime", "kernel", "cpu_op", "gpu_memcpy", "user_annotation"]
    kinds = first + [rng.choice([*cats, "s", "f"]) for _ in range(n - len(first))]
    out = []
    for i, kind in enumerate(kinds):
        tid = rng.choice([7, 59811, 59976])
        if kind in ("s", "f"):
            end = ',"bp":"e"' if kind == "f" else ""
            out.append(
                f'{{"ph":"{kind}","id":{i},"pid":0,"tid":{tid},"ts":{i},"cat":"ac2g",'
                f'"name":"ac2g"{end}}}'
            )
        else:
            out.append(
                f'{{"ph":"X","cat":"{kind}","name":"op{i % 5}","pid":0,"tid":{tid},'
                f'"ts":{i},"dur":1,"args":{{"External id":{i}}}}}'
            )
    return out


@needs_layouts
@pytest.mark.parametrize(
    "first",
    [
        [],
        # The first kinds a node meets leave its window where they differ (the phase, the
        # category's first letter); "cpu_op" after "cuda_runtime" shares that letter.
        ["f", "cuda_runtime", "kernel", "s", "cpu_op", "gpu_memcpy", "user_annotation"],
    ],
)
def test_a_layout_picks_its_next_step_by_its_table(first: list[str]) -> None:
    # Complete events differ from one another only past where a flow's literal ends (their
    # "cat"): the window of the node they share must lie there, the flows tried beside it.
    events = _event_mix(random.Random(5), 4000, first)
    buf = ("[" + ",".join(events) + "]").encode()
    before = _scan.layouts_searched()
    matched = assert_alike(buf, 1)
    searched = _scan.layouts_searched() - before
    assert matched > 3900
    # A search here is an event of a layout not learnt yet (its first: about 30 layouts) or
    # a child that shares its window's hash with another. A window left where only the
    # phase or the category's first letter differs searched for every other event (6,684).
    assert searched <= matched // 50, searched


@needs_layouts
def test_more_layouts_than_a_piece_holds() -> None:
    # Every event a layout of its own (a key no other has) fills the trie, then the piece
    # stops matching: the rows are the general way's all the same.
    events = [
        f'{{"ph":"X","cat":"c","name":"n","pid":1,"tid":1,"ts":{i},"dur":1,"k{i}":1}}'
        for i in range(6000)
    ]
    repeated = ['{"ph":"X","cat":"c","name":"n","pid":1,"tid":1,"ts":1,"dur":1}'] * 50
    buf = ("[" + ",".join(repeated + events + repeated) + "]").encode()
    assert assert_alike(buf, 1) >= 49


def test_layouts_can_be_turned_off() -> None:
    if _scan is None:
        pytest.skip("C scanner not built")
    was = _scan.layouts(False)
    try:
        assert _scan.layouts(True) is False
        assert _scan.layouts(was) is True
    finally:
        _scan.layouts(was)


@needs_layouts
@pytest.mark.parametrize(
    "dims",
    [
        "[]", "[[]]", "[[16, 1], [1, 256]]", "[ [ 1 ,2 ] ,[ ] ]", "[[0], [10]]", '["a]b", "c"]',
        "[01]", "[[1.5]]", "[-1]", "[1e3]", "[[1],]", "[,1]", "[1 2]", '["a\\"b"]',
        '["a\\u0041"]', "[[[[[[[[[1]]]]]]]]]", "[" * 70 + "]" * 70, "[true, null]",
        '[{"a": 1}]', "[[1]]]", "[[1]", "[[1] [2]]",
    ],
)  # fmt: skip
def test_shape_lists_skipped_as_the_general_way_skips_them(
    dims: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = (
        '{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":%d,"dur":1,'
        '"args":{"External id":%d,"Input Dims":%s,"Input type":["float"]}}'
    )
    text = '{"traceEvents":[' + ",".join(event % (i, i, dims) for i in range(4)) + "]}"
    buf = text.encode()
    assert_alike(buf, _events_start(buf))  # as the scanner read them before
    path = tmp_path / "t.json"
    path.write_text(text)
    try:
        c = _read(path, True, monkeypatch)
    except TraceFormatError as e:  # the same error from msgspec, at the same byte (a piece's
        # decode words it "at byte N", the whole document's "(byte N)")
        with pytest.raises(TraceFormatError) as info:
            _read(path, False, monkeypatch)
        assert _BYTE.sub(r" at byte \1", str(info.value)) == str(e)
        return
    assert_same(c, _read(path, False, monkeypatch))


@needs_layouts
@pytest.mark.parametrize("length", [15, 16, 31, 32, 33, 47, 48, 63, 64, 65, 100, 300])
def test_long_strings_end_where_they_end(length: int) -> None:
    # Strings are scanned 16 and, past 32 plain bytes, 32 bytes at a time (AVX2 where the CPU
    # has it): an escape, a quote or a control character anywhere ends the plain run there.
    strings_at = len(_fastscan._COLUMNS)
    for at in range(length + 1):
        for special in ("", '\\"', "\\\\", "\\u0041", "\x01"):
            name = "a" * at + special + "b" * (length - at)
            text = '[{"ph":"X","cat":"c","name":"' + name + '","ts":1,"dur":1}]'
            result = _scan.scan(text.encode())
            if special == "\x01":  # a raw control character: no JSON string
                assert result is None
                continue
            assert result is not None
            got = result[strings_at][1]
            assert (got if isinstance(got, bytes) else got.encode()) == name.encode()
