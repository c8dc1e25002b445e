"""Hostile Kineto JSON: nesting bombs, whitespace and gzip bombs, huge strings, odd digits.

Each case ends with exit 0 or with exit 2 and one line naming the file, within bounded memory
and time, never a traceback. The held-text limit is set small through $BADPUT_MAX_HELD_BYTES so
that a bomb of a few hundred MB shows what a bomb of gigabytes would: text is held only until
it can be cut or squeezed, and what cannot be is refused at the limit.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.errors import TraceFormatError
from badput.trace import _limits, _squeeze, kineto
from badput.trace._limits import MAX_HELD_ENV
from badput.trace._squeeze import StringState
from badput.trace.kineto import read_kineto
from synth import TraceBuilder, run_cli

MB = 1 << 20
DEMO_TRACE = Path(__file__).parents[1] / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
KERNEL = (
    '{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%d,"dur":5,'
    '"args":{"device":0,"stream":7,"correlation":%d}}'
)


def _gzip(path: Path, parts: list[bytes | tuple[bytes, int]]) -> Path:
    """Write a gzip file of `parts`: bytes as they are, (block, n) as n copies of block."""
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for part in parts:
            if isinstance(part, tuple):
                block, n = part
                for _ in range(n):
                    f.write(c.compress(block))
            else:
                f.write(c.compress(part))
        f.write(c.flush())
    return path


def _one_line_error(code: int, err: str, path: Path) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"badput: error: {path}: "), err
    return lines[0]


# ---- nesting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        "events",  # the array holds a deep array
        "header",  # a top-level field
        "args",  # an event's args
        "device_properties",  # a field the reader decodes after the events
    ],
)
def test_deep_nesting_is_exit_2(tmp_path: Path, capsys: Any, where: str) -> None:
    depth = 100_000
    deep = "[" * depth + "]" * depth
    event = KERNEL % (0, 1, 1)
    text = {
        "events": '{"traceEvents":[' + deep + "]}",
        "header": '{"x":' + deep + ',"traceEvents":[' + event + "]}",
        "args": '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,'
        '"dur":5,"args":{"a":' + deep + "}}]}",
        "device_properties": '{"traceEvents":[\n' + event + '\n],"deviceProperties":' + deep + "}",
    }[where]
    path = tmp_path / "deep.json"
    path.write_text(text)
    code, _, err = run_cli(capsys, "analyze", path)
    assert "nested too deeply" in _one_line_error(code, err, path)


# ---- whitespace and gzip bombs -------------------------------------------------------------

_EVENT_A = (KERNEL % (0, 1, 1)).encode()
_EVENT_B = (KERNEL % (1, 10, 2)).encode()
# Where the whitespace goes: prefix, block, suffix. 200 MiB of it, at a 16 MiB limit.
_BOMBS = {
    "only whitespace": (b"", b" ", b""),
    "before the array": (b"{", b" \n", b'"traceEvents": [\n' + _EVENT_A + b"]}"),
    "inside the array": (b'{"traceEvents": [', b" \t\r\n", b"]}"),
    "between events": (b'{"traceEvents": [\n' + _EVENT_A + b",", b"\n", b"\n" + _EVENT_B + b"]}"),
    "after the array": (b'{"traceEvents": [\n' + _EVENT_A + b"]", b" ", b"}"),
    "bare array": (b"[" + _EVENT_A + b",", b"  ", _EVENT_B + b"]"),
}
_BOMB_EXPECT = {
    "only whitespace": (2, "empty file"),
    "before the array": (0, 1),
    "inside the array": (2, "the trace has no events"),
    "between events": (0, 2),
    "after the array": (0, 1),
    "bare array": (0, 2),
}


@pytest.mark.parametrize("case", sorted(_BOMBS))
def test_whitespace_bomb_is_squeezed_not_held(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """200 MiB of whitespace read with a 16 MiB limit: never held, so never refused."""
    prefix, unit, suffix = _BOMBS[case]
    block = unit * (MB // len(unit))
    path = _gzip(tmp_path / "bomb.json.gz", [prefix, (block, 200), suffix])
    monkeypatch.setenv(MAX_HELD_ENV, str(16 * MB))
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    want_code, want = _BOMB_EXPECT[case]
    if want_code == 2:
        assert want in _one_line_error(code, err, path)
        return
    assert code == 0, err
    assert json.loads(out)["traces"][0]["events"] == want


def test_text_without_cut_or_whitespace_is_refused_at_the_limit(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-line array of 100 MiB of numbers cannot be cut or squeezed: refused at 16 MiB."""
    block = b"1," * (MB // 2)
    path = _gzip(tmp_path / "numbers.json.gz", [b'{"traceEvents": [', (block, 100), b"1]}"])
    monkeypatch.setenv(MAX_HELD_ENV, str(16 * MB))
    code, _, err = run_cli(capsys, "analyze", path)
    line = _one_line_error(code, err, path)
    assert "refused" in line and "16,777,216 bytes" in line and MAX_HELD_ENV in line


def test_huge_string_is_refused(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 64 MiB name, with strings capped at 4 MiB for the test: refused, naming the size."""
    monkeypatch.setattr(_limits, "MAX_STRING_BYTES", 4 * MB)
    monkeypatch.setenv(MAX_HELD_ENV, str(1 << 34))
    monkeypatch.setattr(kineto, "_SQUEEZE_AFTER", MB)
    prefix = b'{"traceEvents": [\n{"ph":"X","cat":"kernel","name":"k'
    path = _gzip(tmp_path / "name.json.gz", [prefix, (b" " * MB, 64), b'","ts":1,"dur":1}]}'])
    code, _, err = run_cli(capsys, "analyze", path)
    assert "a JSON string of over" in _one_line_error(code, err, path)


def test_bomb_memory_is_bounded_end_to_end(tmp_path: Path) -> None:
    """A 512 MiB whitespace gzip bomb, analysed in a child process at the default limit.

    Before squeezing, the reader held all of it (and copied it twice: RSS over 1.5 GiB); now
    the child's peak RSS stays within interpreter, imports and two read buffers.
    """
    prefix, unit, suffix = _BOMBS["between events"]
    path = _gzip(tmp_path / "bomb.json.gz", [prefix, (unit * MB, 512), suffix])
    out_path = tmp_path / "out.json"
    # A wrapper process whose only child is badput: its RUSAGE_CHILDREN peak is badput's.
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.call([sys.executable, '-m', 'badput', 'analyze', sys.argv[1],"
        " '--format', 'json', '--out', sys.argv[2]])\n"
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MAX_HELD_ENV}
    done = subprocess.run(
        [sys.executable, "-c", wrapper, str(path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    rc, peak_kib = (int(v) for v in done.stdout.split())
    assert rc == 0, done.stderr
    assert json.loads(out_path.read_text())["traces"][0]["events"] == 2
    assert peak_kib < 400 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB for a 512 MiB bomb"


# ---- squeezing keeps every value ------------------------------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.text(alphabet=' \t\n\\"ab\u00e9,:{}[]', max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet=' \\"ab', max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    value=_json_values,
    seps=st.sampled_from([(",", ":"), (" ,  ", " :\t"), (",\n\n ", ": \n")]),
    indent=st.sampled_from([None, 1, 4]),
    block=st.sampled_from([1, 2, 3, 7, 64]),
    seed=st.integers(0, 2**16),
)
def test_squeeze_keeps_the_value(
    value: object, seps: tuple[str, str], indent: int | None, block: int, seed: int
) -> None:
    """Squeezed in random pieces and blocks (followed or squeezed), the text decodes the same."""
    data = json.dumps(value, separators=seps, indent=indent).encode()
    rng = random.Random(seed)
    state = StringState()
    out = bytearray()
    old = _squeeze._BLOCK
    _squeeze._BLOCK = block
    try:
        i = 0
        while i < len(data):
            piece = data[i : i + rng.randint(1, 40)]
            i += len(piece)
            if rng.random() < 0.7:
                out += state.squeeze(piece)
            else:
                state.follow(piece)
                out += piece
    finally:
        _squeeze._BLOCK = old
    assert json.loads(out) == value
    assert not state.in_string
    assert len(out) <= len(data)


def _columns(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    trace = read_kineto(str(path))
    keys = ("kind", "ts_ns", "dur_ns", "name_id", "device", "stream", "correlation")
    return {k: getattr(trace, k) for k in keys} | {"names": np.array(trace.names)}


def test_one_line_real_trace_squeezed_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real V100 trace, re-laid out on one line with whitespace runs between tokens.

    No line starts an event, so the reader cannot cut: it squeezes (threshold lowered to 1 MiB
    to do so early) and must produce the same columns as from the file Kineto wrote.
    """
    with gzip.open(DEMO_TRACE, "rb") as f:
        doc = json.load(f)
    spaced = json.dumps(doc, separators=(",\t" + " " * 8, ":" + " " * 8))
    assert "\n" not in spaced
    one_line = tmp_path / "one_line.json"
    one_line.write_text(spaced)
    expect = _columns(Path(DEMO_TRACE))
    monkeypatch.setattr(kineto, "_SQUEEZE_AFTER", MB)
    # Held whole (one line cannot be cut), but squeezed: each run of whitespace to one byte
    # (never none: `1 2` must not become `12`). The limit lies between that and the spaced size.
    squeezed = len(json.dumps(doc, separators=(", ", ": ")))
    monkeypatch.setenv(MAX_HELD_ENV, str((squeezed + len(spaced)) // 2))
    got = _columns(one_line)
    for key, column in expect.items():
        assert np.array_equal(column, got[key]), key


# ---- other hostile values -------------------------------------------------------------------


def test_unicode_digits_in_ids_are_not_numbers(tmp_path: Path, capsys: Any) -> None:
    """`"²".isdigit()` is True and int("²") fails: such an id is a label, never a crash."""
    b = TraceBuilder()
    b.launch("gemm", cpu=(0, 10), gpu=(15, 100))
    path = b.write(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        e["pid"] = "²"
        e["tid"] = "-²"
        if "args" in e:
            e["args"]["device"] = "²"
            e["args"]["correlation"] = "³"
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "analyze", path)
    assert code in (0, 2) and "Traceback" not in err, err


@pytest.mark.parametrize("scanner", ["c", "fallback"])
def test_an_end_past_int64_nanoseconds_is_a_bad_time(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, scanner: str
) -> None:
    """ts + dur beyond int64 ns (a wrapped end would nest the events wrongly): skipped, said."""
    if scanner == "fallback":
        monkeypatch.setenv("BADPUT_NO_C_SCAN", "1")
    b = TraceBuilder()
    b.launch("gemm", cpu=(0, 10), gpu=(15, 100))
    path = b.write(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    # Each on its own: a far start with a long op, then one more op inside its time.
    far = 9_000_000_000_000_000  # us: 9e18 ns, and as much again for its duration
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::far", "pid": 9, "tid": 9, "ts": far,
         "dur": far},
        {"ph": "X", "cat": "cpu_op", "name": "aten::in", "pid": 9, "tid": 9, "ts": far + 1,
         "dur": 5},
    ]  # fmt: skip
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 0 and "Traceback" not in err, err
    report = json.loads(out)
    assert "skipped 1 event(s) without a valid ts or dur" in report["traces"][0]["warnings"]


@pytest.mark.parametrize("make", ["fifo", "device"])
def test_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, make: str) -> None:
    if make == "fifo":
        path = tmp_path / "trace.json"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(TraceFormatError, match="not a regular file"):
        read_kineto(str(path))


@pytest.mark.parametrize("case", ["before the array", "between events", "after the array"])
def test_annotate_squeezes_a_whitespace_bomb_too(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """`annotate` streams its copy: 200 MiB of whitespace at a 16 MiB limit is neither held
    nor searched again per piece, and the copy holds the original events."""
    prefix, unit, suffix = _BOMBS[case]
    path = _gzip(tmp_path / "bomb.json.gz", [prefix, (unit * MB, 200), suffix])
    monkeypatch.setenv(MAX_HELD_ENV, str(16 * MB))
    out = tmp_path / "annotated.json"
    code, _, err = run_cli(capsys, "annotate", path, "--out", out)
    assert code == 0, err
    names = [e.get("name") for e in json.loads(out.read_text())["traceEvents"]]
    assert "k0" in names
    assert out.stat().st_size < 2 * MB
