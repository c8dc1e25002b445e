"""Fuzzing that stays: Kineto traces (plain and gzipped) cut, corrupted and mutated, the CLI's
path handling, and a corpus of every hostile input that once crashed badput.

Each input ends in a result or in one `badput: error:` line with exit 2, never a traceback.
Examples are derandomized with fixed counts, so the suite's time is bounded and CI cannot flake
on a new example; a crash found here becomes a file in `tests/hostile_corpus/` (see its README).
"""

from __future__ import annotations

import gzip
import json
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.errors import TraceFormatError
from badput.trace.kineto import read_kineto
from synth import NCCL_ALLREDUCE, TraceBuilder, run_cli

CORPUS = Path(__file__).parent / "hostile_corpus"

_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)


def _trace_text() -> bytes:
    b = TraceBuilder()
    b.device_properties([0])
    b.distributed_info(0, 2)
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100)
    b.launch("gemm", cpu=(100, 110), gpu=(115, 200))
    b.launch(NCCL_ALLREDUCE, cpu=(110, 120), gpu=(150, 260), stream=20)
    b.launch("Memcpy DtoH (Device -> Pinned)", kind="memcpy", cpu=(120, 130), gpu=(260, 270))
    b.cpu_op("aten::mm", 100, 112)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return b.write(Path(tmp) / "t.json").read_bytes()


TEXT = _trace_text()


def _read_or_clean_error(path: Path) -> None:
    try:
        read_kineto(str(path))
    except TraceFormatError as e:
        assert e.path == str(path)
        assert "\n" not in str(e)


def _write(tmp_path: Path, data: bytes, gz: bool) -> Path:
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    return path


@_SETTINGS
@given(cut=st.integers(0, len(TEXT)), gz=st.booleans())
def test_cut_trace(tmp_path: Path, cut: int, gz: bool) -> None:
    _read_or_clean_error(_write(tmp_path, TEXT[:cut], gz))


@_SETTINGS
@given(
    flips=st.lists(st.tuples(st.integers(0, len(TEXT) - 1), st.integers(0, 255)), max_size=8),
    gz=st.booleans(),
)
def test_corrupted_trace(tmp_path: Path, flips: list[tuple[int, int]], gz: bool) -> None:
    data = bytearray(TEXT)
    for at, byte in flips:
        data[at] = byte
    _read_or_clean_error(_write(tmp_path, bytes(data), gz))


@_SETTINGS
@given(cut=st.integers(10, 2000), junk=st.binary(min_size=1, max_size=64))
def test_corrupted_gzip_stream(tmp_path: Path, cut: int, junk: bytes) -> None:
    packed = bytearray(gzip.compress(TEXT, 1))
    at = min(cut, len(packed) - 1)
    packed[at : at + len(junk)] = junk
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(packed))
    _read_or_clean_error(path)


_HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=string.printable + "²³٣\u202e\x00\x1b", max_size=20),
    st.recursive(st.integers(), lambda x: st.lists(x, max_size=2), max_leaves=6),
)
_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args")
_ARGS = ("device", "stream", "correlation", "External id", "bytes", "Collective name")


@_SETTINGS
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(_FIELDS + tuple(f"args.{a}" for a in _ARGS)),
            _HOSTILE_VALUES,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_mutated_event_values(tmp_path: Path, edits: list[tuple[int, str, Any]]) -> None:
    """Any field of any event set to any JSON value: a result or a clean error."""
    doc = json.loads(TEXT)
    events = doc["traceEvents"]
    for index, field, value in edits:
        event = events[index % len(events)]
        if field.startswith("args."):
            args = event.setdefault("args", {})
            if isinstance(args, dict):
                args[field[5:]] = value
        else:
            event[field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    _read_or_clean_error(path)


_PATH_CHARS = string.ascii_letters + string.digits + "/._-#=~ \n\r\t\x1b\x7f\u202e²٣é"


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    name=st.text(alphabet=_PATH_CHARS, min_size=1, max_size=30),
    suffix=st.sampled_from(["", ".json", ".json.gz", ".sqlite", ".sqlite#pid=", ".nsys-rep"]),
    pid=st.text(alphabet=string.digits + "²٣-x ", max_size=25),
)
def test_cli_path_handling(
    tmp_path_factory: pytest.TempPathFactory, name: str, suffix: str, pid: str
) -> None:
    """Odd paths, missing or not, with `#pid=` parts: exit 2 and one line, never a traceback."""
    import contextlib
    import io

    from badput.cli.app import main

    base = tmp_path_factory.mktemp("paths")
    target = str(base / name.replace("/", "_")) + suffix + (pid if suffix.endswith("=") else "")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["analyze", target])
    text = err.getvalue()
    assert code == 2, text
    assert "Traceback" not in text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("badput: error: "), text


# ---- the corpus ----------------------------------------------------------------------------


def _corpus() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.name != "README.md")


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_corpus_case_is_a_result_or_one_clean_line(capsys: Any, path: Path, fmt: str) -> None:
    code, out, err = run_cli(capsys, "analyze", path, "--format", fmt)
    assert "Traceback" not in err + out
    assert code in (0, 2), err
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith(f"badput: error: {path}: "), err
    elif fmt == "json":
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
