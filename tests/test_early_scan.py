"""A trace's first pieces scanned from the command's first moments (`badput.trace._early`).

The reader takes them as if it had scheduled them: the trace is the same, whatever was
scanned early; a file other than the one named is read as ever; bad text keeps its error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from badput.trace import _early, _kineto_columns, _mapped, _pieces, kineto
from test_pieces import _complete, _events, _write
from test_reader import assert_same_trace

pytestmark = [
    pytest.mark.skipif(not _pieces.usable(), reason="the C scanner is not built"),
    pytest.mark.skipif(
        not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
        reason="a trace is scanned early only with two CPUs or more",
    ),
]


@pytest.fixture(autouse=True)
def _test_heap(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`start` sets the heap of a command's own process: not this one's."""
    import badput._memory as memory

    monkeypatch.setattr(memory, "keep_freed_memory", lambda numpy_too=True: False)
    yield
    _early.drop()


def _taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of pieces each reader took from the early scan (spied)."""
    taken: list[int] = []
    real = _mapped.MappedText.take_ahead

    def spy(self: _mapped.MappedText, start: int) -> list[_mapped.Ahead]:
        got = real(self, start)
        taken.append(len(got))
        return got

    monkeypatch.setattr(_mapped.MappedText, "take_ahead", spy)
    return taken


def _settled() -> None:
    """Wait until the early threads begin no more pieces (the cap, or the text's end)."""
    early = _early._started
    assert early is not None, "nothing is being scanned early"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        n = len(early.text.ahead)
        if n >= _early.MAX_PIECES or (n and early.text.ahead[-1].piece.last):
            break
        time.sleep(0.01)
    for ahead in early.text.ahead:
        ahead.raw()


@pytest.mark.parametrize("piece", [64, 997, 1 << 20])
@pytest.mark.parametrize("compact", [True, False])
def test_pieces_scanned_early_give_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, compact: bool
) -> None:
    path = _write(tmp_path, _events(400, seed=11), compact=compact, gz=False, bare=False)
    want = _complete(path, monkeypatch)
    taken = _taken(monkeypatch)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", piece)
    _early.start(["--format", "json", str(path), "--jobs", "2"], piece_bytes=piece)
    _settled()
    got = kineto.read_kineto(str(path), jobs=2)
    assert_same_trace(got, want, same_label_ids=False)
    pieces = (path.stat().st_size + piece - 1) // piece
    assert taken and 1 <= taken[0] <= min(_early.MAX_PIECES, pieces)
    if piece == 64:  # more pieces than the cap: the reader scanned the rest itself
        assert taken[0] == _early.MAX_PIECES
    assert _early._started is None


def _read_with_cuts_counted(
    path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> tuple[list[int], list[int], int]:
    """Read `path` on two jobs once its first pieces (of `piece` bytes) are scanned early,
    the same trace as the complete way: the pieces the reader took from the early scan, the
    merges done before each piece it cut itself, and the merges in all."""
    want = _complete(path, monkeypatch)
    taken = _taken(monkeypatch)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", piece)
    _early.start([str(path), "--jobs", "2"], piece_bytes=piece)
    _settled()  # the early threads cut no more pieces: every piece cut from now is the reader's
    merged: list[int] = []
    merged_at_cut: list[int] = []
    add_scanned, cut = _kineto_columns._Columns.add_scanned, _mapped.MappedText.piece

    def spy_merge(self: Any, scanned: Any) -> None:
        merged.append(1)
        add_scanned(self, scanned)

    def spy_cut(self: _mapped.MappedText, pos: int, min_end: int) -> _mapped.Piece:
        merged_at_cut.append(len(merged))
        return cut(self, pos, min_end)

    monkeypatch.setattr(_kineto_columns._Columns, "add_scanned", spy_merge)
    monkeypatch.setattr(_mapped.MappedText, "piece", spy_cut)
    got = kineto.read_kineto(str(path), jobs=2)
    assert_same_trace(got, want, same_label_ids=False)
    return taken, merged_at_cut, len(merged)


def test_the_reader_scans_on_while_it_merges_the_early_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The early pieces are done: the reader cuts (and its pool scans) its own next
    `jobs + SPARE_PIECES` pieces before it merges the first of them, not once they are
    merged (a core idle meanwhile), and keeps as many ahead of the merge, no more."""
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i % 7}", "pid": 1, "tid": 2, '
        f'"ts": {10 * i}, "dur": 5, "args": {{"External id": {i}}}}}'
        for i in range(2000)
    ]  # plain events: every cut holds (no piece is cut again)
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    taken, merged_at_cut, merged = _read_with_cuts_counted(path, monkeypatch, 997)
    ahead = 2 + _pieces.SPARE_PIECES
    assert taken == [_early.MAX_PIECES]
    assert merged == _early.MAX_PIECES + len(merged_at_cut)  # each piece merged once
    assert merged_at_cut[:ahead] == [0] * ahead  # the old reader: the first at 28 merged
    assert max(k - m for k, m in enumerate(merged_at_cut, 1)) == ahead


def test_pieces_lost_to_a_cut_that_did_not_hold_are_as_few_as_without_the_early_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cut inside an event (a `},{` in a string) loses the pieces scheduled after it: past
    the first, the reader schedules `jobs + SPARE_PIECES` again, not as many as the early
    pieces it took besides."""
    from collections import Counter

    path = _write(tmp_path, _events(400, seed=13), compact=True, gz=False, bare=False)
    # Pieces shorter than an event: cuts fail often.
    taken, merged_at_cut, _ = _read_with_cuts_counted(path, monkeypatch, 64)
    cuts = Counter(merged_at_cut)  # pieces cut before each merge
    assert taken == [_early.MAX_PIECES] and len(cuts) > 10
    assert max(cuts.values()) == 2 + _pieces.SPARE_PIECES  # 37 without the reset


def test_another_file_is_read_as_ever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _write(tmp_path, _events(100, seed=1), compact=True, gz=False, bare=False)
    other = first.rename(tmp_path / "early.json")
    second = _write(tmp_path, _events(120, seed=2), compact=True, gz=False, bare=False)
    taken = _taken(monkeypatch)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64)
    _early.start([str(other), "--jobs", "2"], piece_bytes=64)
    _settled()
    got = kineto.read_kineto(str(second), jobs=2)
    assert_same_trace(got, _complete(second, monkeypatch), same_label_ids=False)
    assert taken == [0] and _early._started is None


def test_a_file_changed_since_is_read_as_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _events(100, seed=4), compact=True, gz=False, bare=False)
    taken = _taken(monkeypatch)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 64)
    _early.start([str(path), "--jobs", "2"], piece_bytes=64)
    _settled()
    changed = _write(tmp_path, _events(90, seed=5), compact=True, gz=False, bare=False)
    assert changed == path  # written over: another size and time
    got = kineto.read_kineto(str(path), jobs=2)
    assert_same_trace(got, _complete(path, monkeypatch), same_label_ids=False)
    assert taken == [0]


@pytest.mark.parametrize(
    "argv",
    [
        ["T", "--jobs", "1"],
        ["T", "-j1"],
        ["T", "--jobs=1"],
        ["T", "--jobs", "x"],
        ["T", "--executor", "ray"],
        ["T", "T2"],  # two traces: each read on its own task
        ["NOT_A_TRACE"],
        ["DIR"],
        [],
    ],
    ids=["jobs-1", "j1", "jobs=1", "jobs-x", "ray", "two", "not-a-trace", "dir", "none"],
)
def test_nothing_is_scanned_early_unless_one_trace_on_two_jobs(
    tmp_path: Path, argv: list[str]
) -> None:
    trace = _write(tmp_path, _events(10, seed=6), compact=True, gz=False, bare=False)
    (tmp_path / "t2.json").write_bytes(trace.read_bytes())
    report = tmp_path / "report.json"
    report.write_text('{"summaries": []}')
    (tmp_path / "d.json").mkdir()
    names = {
        "T": trace,
        "T2": tmp_path / "t2.json",
        "NOT_A_TRACE": report,
        "DIR": tmp_path / "d.json",
    }
    _early.start([str(names.get(a, a)) for a in argv])
    assert _early._started is None
    _early.start([str(trace), "--out", str(report), "-j", "2"])  # the report is no trace
    assert _early._started is not None


def _big_trace(path: Path, events: int) -> bytes:
    """A compact trace of `events` CPU ops (tens of MB: several 8 MiB pieces)."""
    one = (
        '{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":{ts},"dur":5,'
        '"args":{{"External id":{i},"Sequence number":{i},"Fwd thread id":0}}}}'
    )
    body = ",".join(one.format(ts=10 * i, i=i) for i in range(events))
    kernel = (
        '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":3,"dur":2,'
        '"args":{"device":0,"stream":7,"correlation":1}}'
    )
    data = ('{"schemaVersion":1,"traceEvents":[' + kernel + "," + body + "]}").encode()
    path.write_bytes(data)
    return data


def test_a_corrupt_piece_scanned_early_keeps_its_error(tmp_path: Path) -> None:
    # Through the command line: the early scan starts from its arguments. A missing comma
    # in the third 8 MiB piece: the same error, file and byte, on one job and on two.
    path = tmp_path / "bad.json"
    data = _big_trace(path, 200_000)
    assert len(data) > 3 * _mapped.PIECE_BYTES
    at = data.index(b',"tid":2', 2 * _mapped.PIECE_BYTES + 1000)
    path.write_bytes(data[:at] + b' "tid":2' + data[at + len(b',"tid":2') :])
    errors = []
    for jobs in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "badput", "analyze", str(path), "--jobs", jobs],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        errors.append(done.stderr)
    assert errors[0] == errors[1]
    assert str(path) in errors[0] and f"at byte {at + 1:,}" in errors[0], errors[0]  # its "
