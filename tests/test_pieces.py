"""The reader's fast path (`badput.trace._pieces`): the events array cut at guessed places,
scanned in parallel threads, gives exactly what the complete path gives.

Every guess of a place to cut (a `{` after a `,`) that can be wrong is made wrong here: inside
a name, inside a list of objects in args; pieces of one byte make every event its own piece;
events the scanner refuses sit between them. Truncated and malformed texts keep the complete
path's errors.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.errors import TraceFormatError
from badput.trace import _fastscan, _pieces, kineto
from badput.trace.model import NO_ID, SparseColumn, Trace
from test_reader import assert_same_trace

pytestmark = pytest.mark.skipif(not _pieces.usable(), reason="the C scanner is not built")

TRICKY_NAMES = [
    "aten::mm",
    'a},{\\"ph\\":\\"X\\",\\"name\\":\\"fake\\"',  # a cut guess inside a string
    'quote \\" and },\\n{ escaped',
    "caf\\u00e9 },{",
    "ProfilerStep#1",
]


def _events(n: int, seed: int) -> list[str]:
    """Event texts: tricky names, nested lists of objects, some events the scanner refuses."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        name = rng.choice(TRICKY_NAMES)
        args = [f'"External id": {i}']
        if rng.random() < 0.3:
            args.append('"l": [{"a": 1},{"b": [{"c": 2}]}]')  # `},{` and `,{` inside an event
        if rng.random() < 0.3:
            args.append('"Input Dims": [[2, 3], []], "Input type": ["float", ""]')
        pid = "1.5" if rng.random() < 0.1 else "1"  # a float pid: refused, decoded leniently
        out.append(
            f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {pid}, "tid": 2, '
            f'"ts": {10 * i}, "dur": 5, "args": {{{", ".join(args)}}}}}'
        )
    out.append('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, '
               '"dur": 2, "args": {"device": 0, "stream": 7, "correlation": 1}}')  # fmt: skip
    return out


def _write(tmp_path: Path, events: list[str], *, compact: bool, gz: bool, bare: bool) -> Path:
    sep = "," if compact else ",\n  "
    array = "[" + sep.join(events) + "]"
    if bare:
        text = array
    else:
        text = (
            '{"schemaVersion": 1, "traceEvents": '
            + array
            + ', "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], '
            '"distributedInfo": {"rank": 3, "world_size": 8}}'
        )
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    data = text.encode()
    path.write_bytes(gzip.compress(data, 1) if gz else data)
    return path


def _complete(path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    with monkeypatch.context() as m:
        m.setattr(_pieces, "usable", lambda: False)
        m.setenv("BADPUT_NO_C_SCAN", "1")
        return kineto.read_kineto(str(path))


def _fast(path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, jobs: int) -> Trace:
    calls: list[int] = []
    real = _pieces.read_events

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(kineto, "CHUNK_BYTES", piece)
        m.setattr(_pieces, "read_events", spy)
        trace = kineto.read_kineto(str(path), jobs=jobs)
    assert calls, "the fast path was not taken"
    return trace


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("bare", [False, True])
def test_any_cut_any_jobs_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compact: bool, gz: bool, bare: bool
) -> None:
    path = _write(tmp_path, _events(300, seed=7), compact=compact, gz=gz, bare=bare)
    want = _complete(path, monkeypatch)
    assert len(want) == 301
    for piece in (1, 37, 500, 1 << 20):
        for jobs in (1, 3):
            got = _fast(path, monkeypatch, piece, jobs)
            # Label ids follow first sight, which the lenient events change: compare labels.
            assert_same_trace(got, want, same_label_ids=False)
            assert got.op_args is not None and want.op_args is not None
            assert [got.op_args.value(i) for i in got.op_args.dims.tolist()] == [
                want.op_args.value(i) for i in want.op_args.dims.tolist()
            ]


def test_cuts_that_do_not_hold_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of one byte: each guess inside a name is taken, fails and is scanned again."""
    events = [
        '{"ph": "X", "name": "a},{\\"x\\": 1, \\"y\\":{", "pid": 1, "tid": 1, "ts": 1, "dur": 1}',
        '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1}',
    ]
    text = ("[" + ",".join(events) + "]").encode()
    runs: list[_fastscan.RunStatus] = []
    real = _fastscan.scan_run

    def spy(buffer: Any, start: int, first: bool) -> Any:
        run = real(buffer, start, first)
        runs.append(run.status)  # type: ignore[union-attr]
        return run

    class Columns:
        seen = 0
        rows = 0  # no rows kept: nothing to reserve room for

        def add_scanned(self, scanned: _fastscan.Scanned) -> None:
            self.seen += scanned.seen

    monkeypatch.setattr(_fastscan, "scan_run", spy)

    class Mem(_pieces.MappedText):
        def __init__(self) -> None:  # the text in memory, not in a file
            self._piece_bytes = 1
            self._map = text  # type: ignore[assignment]
            self._view = memoryview(text)
            self._size = len(text)
            self._released = 0
            self.ahead = []

        def release(self, end: int) -> None:
            pass

    cols = Columns()
    doc = _pieces.read_events(Mem(), cols, 1, lambda c, b: None)  # type: ignore[arg-type]
    assert doc is None and cols.seen == 2
    assert _fastscan.RunStatus.TRUNCATED in runs and runs[-1] is _fastscan.RunStatus.DONE


def test_scans_run_ahead_of_the_merge_by_the_spare_pieces() -> None:
    """With two jobs, `jobs + SPARE_PIECES` pieces are scheduled before the first is merged
    (the scanners keep work while the merging thread is busy), and every event arrives once."""
    events = [
        f'{{"ph": "X", "name": "e{i}", "pid": 1, "tid": 1, "ts": {i}, "dur": 1}}' for i in range(40)
    ]
    text = ("[" + ",".join(events) + "]").encode()
    asked: list[int] = []
    at_first_merge: list[int] = []

    class Columns:
        seen = 0
        rows = 0

        def add_scanned(self, scanned: _fastscan.Scanned) -> None:
            if not at_first_merge:
                at_first_merge.append(len(asked))
            self.seen += scanned.seen

    class Mem(_pieces.MappedText):
        def __init__(self) -> None:
            self._piece_bytes = 60  # about one event a piece
            self._map = text  # type: ignore[assignment]
            self._view = memoryview(text)
            self._size = len(text)
            self._released = 0
            self.ahead = []

        def piece(self, pos: int, min_end: int) -> _pieces.Piece:
            asked.append(pos)
            return super().piece(pos, min_end)

        def release(self, end: int) -> None:
            pass

    cols = Columns()
    assert _pieces.read_events(Mem(), cols, 2, lambda c, b: None) is None  # type: ignore[arg-type]
    assert cols.seen == 40
    assert at_first_merge == [2 + _pieces.SPARE_PIECES]
    assert _pieces.SPARE_PIECES == 3


def _errors_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch, piece: int) -> list[str]:
    """The errors of the fast path (pieces of `piece` bytes, two jobs) and of the complete one."""
    errors = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            m.setattr(kineto, "CHUNK_BYTES", piece)
            if not fast:
                m.setattr(_pieces, "usable", lambda: False)
            with pytest.raises(TraceFormatError) as e:
                kineto.read_kineto(str(path), jobs=2)
            errors.append(str(e.value))
    return errors


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "cut",
    [
        lambda t: t[: len(t) // 2],  # truncated in the middle
        lambda t: t[: t.rindex(b"]")],  # the array never closes
        lambda t: t.replace(b'"tid": 2, ', b'"tid": 2 ', 1),  # a missing comma
        lambda t: t.replace(b"}},{", b"}},]{", 1),  # a stray bracket between events
    ],
    ids=["half", "unclosed", "no-comma", "bracket"],
)
def test_bad_text_keeps_the_complete_paths_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool, cut: Any
) -> None:
    good = _write(tmp_path, _events(200, seed=3), compact=True, gz=False, bare=False)
    data = cut(good.read_bytes())
    path = tmp_path / ("bad.json.gz" if gz else "bad.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    errors = _errors_both_ways(path, monkeypatch, 64)
    assert str(path) in errors[0]
    at = re.search(r"at byte ([\d,]+)", errors[0])
    if at is None:  # truncated: the complete path's words
        assert errors[0] == errors[1]
    else:
        # Malformed inside the array: the byte counts from the start of the whole
        # (uncompressed) text, wherever the piece began; the complete path counts from
        # where it resumed.
        pairs = zip(good.read_bytes(), data, strict=False)
        first_diff = next(i for i, (a, b) in enumerate(pairs) if a != b)
        assert first_diff <= int(at.group(1).replace(",", "")) <= first_diff + 16, errors
        assert ("of the uncompressed text" in errors[0]) is gz


def test_header_fields_around_the_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _events(20, seed=1), compact=False, gz=False, bare=False)
    got = _fast(path, monkeypatch, 64, 2)
    assert (got.rank, got.world_size, got.gpu_names) == (3, 8, {0: "NVIDIA H100 80GB HBM3"})


def test_progress_reaches_the_text_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _events(200, seed=2), compact=True, gz=True, bare=False)
    calls: list[int] = []
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 256)
    kineto.read_kineto(str(path), progress=calls.append, jobs=2)
    size = len(gzip.decompress(path.read_bytes()))
    assert len(calls) > 10 and calls == sorted(calls) and calls[-1] == size


def test_mapped_pages_are_handed_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each merged piece's pages go back (MADV_DONTNEED): the text is never held whole."""
    path = _write(tmp_path, _events(3000, seed=5), compact=True, gz=False, bare=False)
    released: list[int] = []
    real = _pieces.MappedText.release

    def spy(self: _pieces.MappedText, end: int) -> None:
        released.append(end)
        real(self, end)

    monkeypatch.setattr(_pieces.MappedText, "release", spy)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 16 << 10)
    kineto.read_kineto(str(path))
    size = path.stat().st_size
    assert len(released) > 5 and released == sorted(released) and released[-1] < size
    assert json.loads(path.read_bytes())["traceEvents"]  # the file is untouched


@pytest.mark.parametrize("isal", [True, False])
def test_gzip_with_and_without_isal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isal: bool
) -> None:
    """python-isal inflates when installed (the `fast` extra); zlib's gzip otherwise."""
    import sys

    path = _write(tmp_path, _events(100, seed=4), compact=False, gz=True, bare=False)
    want = _complete(path, monkeypatch)
    if not isal:
        for name in ("isal", "isal.igzip"):  # importing it fails: as if not installed
            monkeypatch.setitem(sys.modules, name, None)
    elif pytest.importorskip("isal") is None:
        pytest.skip("isal is not installed")
    seen: list[str] = []
    real = _pieces._inflater

    def spy(raw: Any) -> Any:
        reader = real(raw)
        seen.append(type(reader).__module__)
        return reader

    monkeypatch.setattr(_pieces, "_inflater", spy)
    assert_same_trace(_fast(path, monkeypatch, 300, 2), want, same_label_ids=False)
    assert seen == (["isal.igzip"] if isal else ["gzip"])


@pytest.mark.parametrize("gz", [False, True])
def test_columns_grow_a_few_times_not_per_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    """Room for the rows is reserved from the text's size: over 100 pieces, a few resizes.

    A trace whose events at the end are far denser than at its start outgrows the first
    projection: the columns grow again and the rows are the same.
    """
    from badput.trace import _kineto_columns

    sparse = _events(400, seed=8)
    dense = [  # short events after long ones: more rows per byte than the start projects
        f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {i}, "dur": 1}}'
        for i in range(40000)
    ]
    path = _write(tmp_path, sparse + dense, compact=True, gz=gz, bare=False)
    want = _complete(path, monkeypatch)
    sizes: list[int] = []
    real = _kineto_columns._Growing._resize

    def spy(self: Any, rows: int, filled: int = 0) -> None:
        if self.dtype is np.int8 and self is self_kind[0]:
            sizes.append(rows)
        real(self, rows, filled)

    self_kind: list[Any] = []
    real_init = _kineto_columns._Columns.__init__

    def init(self: Any, path: str) -> None:
        real_init(self, path)
        self_kind.append(self.parts["kind"])

    monkeypatch.setattr(_kineto_columns._Growing, "_resize", spy)
    monkeypatch.setattr(_kineto_columns._Columns, "__init__", init)
    size = path.stat().st_size if not gz else len(gzip.decompress(path.read_bytes()))
    got = _fast(path, monkeypatch, size // 100, 1)
    assert_same_trace(got, want, same_label_ids=False)
    assert 2 <= len(sizes) <= 8, sizes  # reserved, then grown as the density rose
    assert sizes == sorted(sizes) and sizes[-1] >= len(want)


def test_no_piece_column_is_kept_past_its_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the columns keep of a piece is copied out of the scanner's buffers: a view kept
    would hold the buffer's mapping until the read ends, so that the next piece's columns
    take fresh memory (page faults) instead of the pooled pages."""
    from badput.trace import _kineto_columns

    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": {10 * i}, '
        f'"dur": 5, "args": {{"External id": {i}, "Sequence number": {i}, "Fwd thread id": 1, '
        '"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}}'
        for i in range(400)
    ]
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    real = _kineto_columns._Columns.add_scanned
    merged: list[int] = []

    def spy(self: Any, scanned: _fastscan.Scanned) -> None:
        real(self, scanned)
        raw = [np.frombuffer(b, dtype=np.uint8) for b in scanned.raw.values() if len(b)]
        held = [g.buf for g in self.parts.values()]
        held += [a for s in self.sparse.values() for a in (*s.rows, *s.values)]
        for key, g in self.op_parts.items():
            assert not any(np.may_share_memory(g.buf, r) for r in raw), key
        assert not any(np.may_share_memory(a, r) for a in held for r in raw)
        merged.append(1)

    monkeypatch.setattr(_kineto_columns._Columns, "add_scanned", spy)
    got = _fast(path, monkeypatch, path.stat().st_size // 10, 1)
    assert len(merged) >= 5 and len(got) == 400
    assert got.op_args is not None and got.op_args.sequence.tolist() == list(range(400))


def test_growing_column_keeps_every_piece_in_order() -> None:
    from badput.trace._kineto_columns import _Growing

    col = _Growing(np.int64)
    col.reserve(5)
    pieces = [np.arange(k, dtype=np.int64) + 10 * k for k in (3, 0, 4, 9)]
    for p in pieces:
        col.append(p)
    assert col.array().tolist() == np.concatenate(pieces).tolist()
    out = col.take()
    assert out.tolist() == np.concatenate(pieces).tolist() and col.array().shape == (0,)
    col.reserve(2)  # nothing held until a piece shows whether the column needs a buffer
    assert col.buf.shape[0] == 0
    col.reserve(1 << 62)  # a projection no system maps: ignored, appends still grow
    col.append(np.arange(3, dtype=np.int64))
    assert col.array().tolist() == [0, 1, 2] and col.buf.shape[0] < 1 << 20


def test_growing_column_appends_ids_looked_up_in_a_table() -> None:
    # A piece's local ids made global: table[ids], -1 (none) taking the last slot, looked
    # up straight into the buffer once the column holds one; the same as appending them.
    from badput.trace._kineto_columns import _Growing

    table = np.array([7, 5, 9, NO_ID], dtype=np.int32)
    pieces = [np.array(p, dtype=np.int32) for p in ([-1, -1], [2, -1, 0], [], [1, 1, 2, -1])]
    looked, plain = _Growing(np.int32), _Growing(np.int32)
    looked.reserve(4)  # the last piece grows past the reservation
    for ids in pieces:
        looked.append_looked_up(table, ids)
        plain.append(np.take(table, ids))
        assert looked.array().tolist() == plain.array().tolist()
    assert looked.array().tolist() == [NO_ID, NO_ID, 9, NO_ID, 7, 5, 5, 9, NO_ID]
    # A column absent on every row so far holds no buffer.
    absent = _Growing(np.int32)
    for ids in pieces[:1] * 3:
        absent.append_looked_up(table, ids)
    assert absent.buf.shape[0] == 0 and absent.array().tolist() == [NO_ID] * 6


def test_a_column_of_one_value_holds_no_buffer() -> None:
    from badput.trace._kineto_columns import _Growing

    col = _Growing(np.int64)
    col.reserve(1000)
    for k in (3, 0, 5):
        col.append(np.full(k, -1, dtype=np.int64))
    held = col.array()
    assert held.tolist() == [-1] * 8 and col.buf.shape[0] == 0
    assert not held.flags.writeable  # a broadcast value: no row may be changed in place
    # Another value: the rows so far are written out, in order, into the reserved room.
    col.append(np.array([-1, 7, -1], dtype=np.int64))
    col.append(np.full(2, -1, dtype=np.int64))
    assert col.array().tolist() == [-1] * 9 + [7, -1, -1, -1]
    assert col.buf.shape[0] == 1000
    out = col.take()
    assert out.dtype == np.int64 and out.shape == (13,)
    # A first piece that is not one value: a buffer from the start.
    col.append(np.array([1, 2], dtype=np.int64))
    col.append(np.array([2, 2], dtype=np.int64))
    assert col.array().tolist() == [1, 2, 2, 2]


@pytest.mark.parametrize("jobs", [1, 2])
def test_stream_size_hint_scales_by_the_compressed_share(tmp_path: Path, jobs: int) -> None:
    # Names of random hex: a text that compresses about 2:1, far more compressed bytes than
    # the inflater reads ahead of what it gives (512 KiB for python-isal).
    rng = np.random.default_rng(9)
    events = [
        f'{{"ph": "X", "cat": "kernel", "name": "{rng.bytes(2000).hex()}", "pid": 0, '
        f'"tid": 7, "ts": {i}, "dur": 1}}'
        for i in range(2000)
    ]
    path = _write(tmp_path, events, compact=True, gz=True, bare=False)
    size = len(gzip.decompress(path.read_bytes()))
    with open(path, "rb") as raw, _pieces.open_text(raw, True, 256 << 10, jobs) as text:
        text.piece(0, 0)
        hint = text.size_hint()
        assert 0.5 * size <= hint <= 2 * size, (hint, size)
        text.rest(0)
        assert text.size_hint() == size  # at the end: exact


def test_allocator_totals_are_kept_sparse_piece_by_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory events' totals: only their rows are held, the same from every path."""
    events = _events(400, seed=5)
    memory = []
    for i in range(0, 400, 37):  # spread over many pieces
        memory.append(i)
        events.insert(
            i,
            f'{{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", '
            f'"pid": 1, "tid": 2, "ts": {10 * i + 1}, "args": {{"Device Type": 1, '
            f'"Device Id": 0, "Addr": {1000 + i}, "Bytes": {512 * (i + 1)}, '
            f'"Total Allocated": {4096 * (i + 1)}, "Total Reserved": {8192 * (i + 1)}}}}}',
        )
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    complete = _complete(path, monkeypatch)
    for trace in (complete, _fast(path, monkeypatch, piece=700, jobs=2)):
        rows = trace.allocated_totals.rows
        assert rows.tolist() == trace.reserved_totals.rows.tolist()
        assert len(rows) == len(memory)
        assert (trace.kind[rows] == 12).all()  # EventKind.MEMORY, and no other row
        order = np.argsort(trace.ts_ns[rows])
        assert trace.allocated_totals.values[order].tolist() == [4096 * (i + 1) for i in memory]
        assert trace.reserved_totals.values[order].tolist() == [8192 * (i + 1) for i in memory]
        dense = trace.total_allocated
        assert dense.shape == (len(trace),)
        assert (dense != -1).sum() == len(memory)
        assert np.array_equal(dense[rows], trace.allocated_totals.values)
    assert_same_trace(complete, _fast(path, monkeypatch, piece=700, jobs=1))


def test_sparse_column_looks_up_any_rows() -> None:
    col = SparseColumn.of(np.array([-1, 5, -1, -1, 7, -1], dtype=np.int64))
    assert (col.n, col.rows.tolist(), col.values.tolist()) == (6, [1, 4], [5, 7])
    assert col.at([4, 0, 1, 5, 4]).tolist() == [7, -1, 5, -1, 7]
    assert col.dense().tolist() == [-1, 5, -1, -1, 7, -1]
    empty = SparseColumn.of(np.full(3, -1, dtype=np.int64))
    assert empty.at([0, 2]).tolist() == [-1, -1]
    assert empty.dense().tolist() == [-1, -1, -1] and len(empty) == 3


def test_id_columns_are_int32_until_a_value_needs_int64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pid..external_id are held as int32; a later piece's larger value widens that column."""
    events = _events(400, seed=9)
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    ids = ("pid", "tid", "device", "stream", "correlation", "external_id")
    for trace in (_complete(path, monkeypatch), _fast(path, monkeypatch, piece=700, jobs=2)):
        assert {getattr(trace, k).dtype.name for k in ids} == {"int32"}
        assert trace.ts_ns.dtype == trace.bytes.dtype == np.int64
    big_ext, big_tid = 2**40 + 3, -(2**35)
    events[330] = (
        '{"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": ' + str(big_tid) + ', '
        '"ts": 3300, "dur": 5, "args": {"External id": ' + str(big_ext) + "}}"
    )  # fmt: skip
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    complete = _complete(path, monkeypatch)
    for trace in (complete, _fast(path, monkeypatch, piece=700, jobs=2)):
        assert trace.external_id.dtype == trace.tid.dtype == np.int64
        assert trace.pid.dtype == trace.correlation.dtype == np.int32
        late = trace.names.index("late")
        row = int(np.flatnonzero(trace.name_id == late)[0])
        assert (int(trace.external_id[row]), int(trace.tid[row])) == (big_ext, big_tid)
        first = np.argsort(trace.ts_ns, kind="stable")[:5]  # rows before the widening: intact
        assert trace.external_id[first].tolist() == complete.external_id[first].tolist()
        assert set(trace.tid[trace.tid != big_tid].tolist()) <= {2, 7}
    assert_same_trace(complete, _fast(path, monkeypatch, piece=700, jobs=1))


@pytest.mark.parametrize("column", ["pid", "tid", "device", "stream", "correlation", "external_id"])
@pytest.mark.parametrize(
    "value, wide",
    [(2**31 - 1, False), (-(2**31), False), (2**31, True), (-(2**31) - 1, True)],
)
def test_each_id_column_widens_exactly_past_int32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str, value: int, wide: bool
) -> None:
    """The scanner's pass notes the range of each id column as it writes it: the column is
    int32 up to int32's bounds and int64 one past them, with the value intact."""
    ids = {"pid": 0, "tid": 7, "device": 0, "stream": 7, "correlation": 5, "external_id": 9}
    ids[column] = value
    kernel = (
        f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": {ids["pid"]}, "tid": {ids["tid"]}, '
        f'"ts": 20, "dur": 2, "args": {{"device": {ids["device"]}, "stream": {ids["stream"]}, '
        f'"correlation": {ids["correlation"]}, "External id": {ids["external_id"]}}}}}'
    )
    events = [*_events(40, seed=3)[:-1], kernel]
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    complete = _complete(path, monkeypatch)
    for jobs in (1, 2):
        trace = _fast(path, monkeypatch, piece=1 << 20, jobs=jobs)
        assert_same_trace(trace, complete)
        assert getattr(trace, column).dtype == (np.int64 if wide else np.int32)
        row = int(np.flatnonzero(trace.name_id == trace.names.index("k"))[0])
        assert int(getattr(trace, column)[row]) == value


def test_a_dropped_rows_wide_id_leaves_its_column_int32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row dropped for a bad time (no start) does not count toward its column's range."""
    bad = (
        '{"ph": "X", "cat": "cpu_op", "name": "no start", "pid": 1, "tid": 2, "dur": 5, '
        f'"args": {{"External id": {2**40}}}}}'
    )
    events = [*_events(40, seed=4), bad]
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    complete = _complete(path, monkeypatch)
    assert complete.external_id.dtype == np.int32
    assert "no start" not in {complete.names[i] for i in complete.name_id.tolist()}  # dropped
    for jobs in (1, 2):
        trace = _fast(path, monkeypatch, piece=1 << 20, jobs=jobs)
        assert_same_trace(trace, complete)
        assert trace.external_id.dtype == np.int32


@pytest.mark.parametrize("chunk", [1, 64, 65, 100, 1000])
def test_stream_cuts_and_pieces_across_chunk_seams(chunk: int) -> None:
    """A text held in chunks cuts and slices as the whole text does: cuts that straddle two
    chunks are found (whitespace up to the seam's width; chunks of less are made that wide),
    pieces inside one chunk are views."""
    import io
    import random

    rng = random.Random(chunk)
    parts = []
    for i in range(300):
        space = " " * rng.choice([0, 0, 1, 2, 5, 30])
        newline = "\n" if rng.random() < 0.3 else ""
        parts.append(f'{{"i": {i}, "s": "a,{{b"}}' + "," + newline + space)
    whole = ("[" + "".join(parts)[:-1] + "]").encode()

    class Reader:
        def __init__(self) -> None:
            self.buf = io.BytesIO(whole)

        def read(self, n: int) -> bytes:
            return self.buf.read(n)

    for ahead in (False, True):
        text = _pieces.StreamText(Reader(), 1, None, ahead=ahead, chunk_bytes=chunk)
        try:
            text._fill(len(whole) + 1)
            assert text._top == len(whole) and bytes(text._span(0, len(whole))) == whole
            for _ in range(300):
                lo = rng.randrange(0, len(whole))
                hi = rng.randrange(lo, len(whole) + 1)
                assert text._cut(lo, hi) == _pieces._cut_in(whole, lo, hi), (lo, hi)
                assert bytes(text._span(lo, hi)) == whole[lo:hi]
            if chunk == 1000:
                view = text._span(10, 20)  # inside the first chunk: a view, not a copy
                assert isinstance(view, memoryview) and view.obj is text._chunks[0]
            text.release(len(whole) // 2)
            assert text._base <= len(whole) // 2 < text._base + max(chunk, _pieces._SEAM)
            assert bytes(text._span(len(whole) // 2, len(whole))) == whole[len(whole) // 2 :]
        finally:
            text.close()


def test_inflating_thread_ends_with_the_text(tmp_path: Path) -> None:
    """Two jobs inflate on a thread of their own; closing the text (early, too) ends it."""
    import threading

    path = _write(tmp_path, _events(3000, seed=9), compact=True, gz=True, bare=False)
    for read_all in (True, False):
        with open(path, "rb") as raw, _pieces.open_text(raw, True, 4096, jobs=2) as text:
            assert any(t.name == "badput-inflate" for t in threading.enumerate())
            text.piece(0, 0)
            if read_all:
                assert text.rest(0) == gzip.decompress(path.read_bytes())
        assert not any(t.name == "badput-inflate" for t in threading.enumerate())


def test_a_corrupt_gzip_inflated_ahead_reads_the_complete_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inflating thread's error reaches the reader: the complete path then says why."""
    good = _write(tmp_path, _events(2000, seed=2), compact=True, gz=True, bare=False)
    data = bytearray(good.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # a corrupt block mid-stream
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(data))
    errors = _errors_both_ways(path, monkeypatch, 1024)
    assert errors[0] == errors[1] and str(path) in errors[0]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_corrupt_gzip_is_named_not_the_garbage_it_inflates_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """A stream that inflates without a zlib error to malformed text, its checksum wrong at
    the end (a flipped bit in a Huffman block can do this): every path says the gzip data is
    corrupt, in the complete path's words, not that the JSON is malformed."""
    # Past the head the reader inflates first (1 MB), well before the end.
    good = _write(tmp_path, _events(12000, seed=5), compact=True, gz=False, bare=False)
    text = good.read_bytes()
    assert len(text) > 1.5 * 2**20
    at = text.index(b'"tid": 2, ', 2 * len(text) // 3) + 8
    bad = text[:at] + text[at + 1 :]  # a comma gone, two thirds of the way in
    packed = bytearray(gzip.compress(bad, 1))
    packed[-8:-4] = (zlib.crc32(text) & 0xFFFFFFFF).to_bytes(4, "little")  # the good text's
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(packed))
    checked: list[str] = []
    real = kineto._check_gzip

    def spy(p: str) -> None:
        checked.append(p)
        real(p)

    monkeypatch.setattr(kineto, "_check_gzip", spy)
    errors = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            m.setattr(kineto, "CHUNK_BYTES", 4096)
            if not fast:
                m.setattr(_pieces, "usable", lambda: False)
            with pytest.raises(TraceFormatError) as e:
                kineto.read_kineto(str(path), jobs=jobs)
            errors.append(str(e.value))
    assert errors[0] == errors[1], errors
    assert errors[0].startswith(f"{path}: corrupt gzip data (CRC check failed"), errors[0]
    if jobs == 1:  # no thread inflates ahead: the scan meets the garbage first
        assert checked == [str(path)]


def test_malformed_text_in_an_intact_gzip_is_still_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gzip check finds the stream whole: the error stays the fast path's own (where)."""
    good = _write(tmp_path, _events(500, seed=6), compact=True, gz=False, bare=False)
    path = tmp_path / "bad.json.gz"
    text = good.read_bytes()
    at = text.index(b'"tid": 2, ', len(text) // 5) + 8
    path.write_bytes(gzip.compress(text[:at] + text[at + 1 :]))
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 256)
    with pytest.raises(TraceFormatError) as e:
        kineto.read_kineto(str(path), jobs=1)
    assert "of the uncompressed text" in str(e.value) and "gzip" not in str(e.value)


@pytest.mark.parametrize("second", ["[]", "null", '[{"ph": "X", "cat": "kernel", "name": "k2", '
                                    '"pid": 0, "tid": 7, "ts": 9, "dur": 1, "args": '
                                    '{"device": 0, "stream": 7, "correlation": 2}}]'])  # fmt: skip
def test_a_second_events_key_reads_as_the_complete_path_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    """Two `traceEvents` keys: a JSON decoder keeps the last, and so does every path (an
    empty one after the array too, which the fast path once took for its own)."""
    events = _events(300, seed=7)
    text = '{"traceEvents": [' + ",".join(events) + '], "traceEvents": ' + second + "}"
    path = tmp_path / "two.json"
    path.write_text(text)
    if second in ("[]", "null"):  # no events; no array
        errors = _errors_both_ways(path, monkeypatch, 512)
        assert errors[0] == errors[1] and errors[0].startswith(f"{path}: "), errors
        assert ("no events" in errors[0]) is (second == "[]")
        return
    want = _complete(path, monkeypatch)
    assert len(want) == 1
    assert_same_trace(_fast(path, monkeypatch, 512, 2), want, same_label_ids=False)


@pytest.mark.parametrize("share", [1.0, 0.5, 0.05])
@pytest.mark.parametrize("jobs", [1, 2])
def test_refused_events_are_decoded_in_few_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: float, jobs: int
) -> None:
    """Events the scanner refuses (a float pid) go the complete way a few arrays a piece,
    not one decode per event (which read a trace of such events 150 times slower than the
    complete path); the trace is the complete path's, whatever their share."""
    rng = random.Random(12)
    events = [  # plain names: every guess of a place to cut holds (see the tests above)
        f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", '
        f'"pid": {1.5 if rng.random() < share else 1}, "tid": 2, "ts": {10 * i}, "dur": 5, '
        f'"args": {{"External id": {i}}}}}'
        for i in range(4000)
    ]
    path = _write(tmp_path, events, compact=True, gz=False, bare=False)
    want = _complete(path, monkeypatch)
    calls: list[int] = []
    real = kineto._decode_piece

    def counted(columns: Any, text: Any) -> None:
        calls.append(len(text))
        real(columns, text)

    monkeypatch.setattr(kineto, "_decode_piece", counted)
    piece = 16384
    assert_same_trace(_fast(path, monkeypatch, piece, jobs), want, same_label_ids=False)
    refused = sum('"pid": 1.5' in e for e in events)
    pieces = len(path.read_bytes()) // piece + 2
    assert refused > 150 or share < 0.1
    assert len(calls) <= pieces * (_pieces.REFUSED_ALONE + 1), (len(calls), refused, pieces)


@pytest.mark.parametrize("jobs", [1, 2])
def test_string_streams_read_as_the_complete_path_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """A string "stream" arg (ROCm writes "0x0" on its runtime calls): no integer where it
    holds a letter (the scanner takes it); digits and anything else as the complete path
    reads them (the scanner refuses those). Kernels and runtime calls alike."""
    values = ['"0x0"', '"12"', '" 7 "', '"-3"', '"abc"', '"1x"', '"\\u0030"', '""', '"\u0663"',
              '"+5"', '"5."', '"0x7f-1"', "4", "null"]  # fmt: skip
    events = []
    for i in range(600):
        stream = values[i % len(values)]
        cat, name = ("cuda_runtime", "hipLaunchKernel") if i % 2 else ("kernel", "k")
        events.append(
            f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 2, '
            f'"ts": {10 * i}, "dur": 5, "args": {{"device": 0, "stream": {stream}, '
            f'"correlation": {i}}}}}'
        )
    path = _write(tmp_path, events, compact=False, gz=False, bare=False)
    want = _complete(path, monkeypatch)
    assert_same_trace(_fast(path, monkeypatch, 2048, jobs), want, same_label_ids=False)
    assert len(set(want.stream.tolist())) > 3  # digits read, the rest no value (the tid)


def test_the_scanner_takes_a_stream_that_holds_a_letter() -> None:
    """ROCm's "stream": "0x0" is no integer: scanned (no value), not refused; a string of
    digits is refused (the complete path reads it as its number)."""
    event = (
        '[{{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 2, '
        '"ts": 1, "dur": 1, "args": {{"stream": {}, "correlation": 3}}}}]'
    )
    taken = _fastscan.scan(event.format('"0x0"').encode())
    assert taken is not None and taken.column("stream", np.int64).tolist() == [NO_ID]
    assert _fastscan.scan(event.format('"12"').encode()) is None
    assert _fastscan.scan(event.format('"\\u0078"').encode()) is None  # an escape: refused
