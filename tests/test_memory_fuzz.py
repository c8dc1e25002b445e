"""Bad snapshots never reach the user as a traceback: property tests of the memory reader.

Whatever bytes or plain data a file holds (a real snapshot with bytes flipped or cut off, or
any nesting of dicts, lists, strings and numbers), loading and analysing it either works or
raises `TraceFormatError`, which the CLI turns into one line and exit code 2.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.analysis.memory import analyze_snapshot
from badput.diagnose.memory import diagnose_memory
from badput.errors import TraceFormatError
from badput.trace.snapshot import load_snapshot
from test_memory_snapshot import known_snapshot

KNOWN = pickle.dumps(known_snapshot(), protocol=4)

_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,  # the same examples on every run: CI cannot flake on a new one
)


def _load_and_analyse(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(data)
    try:
        snapshot = load_snapshot(str(path))
    except TraceFormatError as e:
        assert str(path) in str(e)
        return
    diagnose_memory(analyze_snapshot(snapshot))


@_SETTINGS
@given(cut=st.integers(min_value=0, max_value=len(KNOWN) - 1))
def test_truncated_snapshot(tmp_path: Path, cut: int) -> None:
    _load_and_analyse(tmp_path, KNOWN[:cut])


@_SETTINGS
@given(flips=st.lists(st.tuples(st.integers(0, len(KNOWN) - 1), st.integers(0, 255)), max_size=4))
def test_corrupted_snapshot(tmp_path: Path, flips: list[tuple[int, int]]) -> None:
    data = bytearray(KNOWN)
    for at, value in flips:
        data[at] = value
    _load_and_analyse(tmp_path, bytes(data))


_PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | st.sampled_from(["alloc", "free_completed", "segment_alloc", "active_allocated", "large"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "segments",
                    "device_traces",
                    "blocks",
                    "frames",
                    "size",
                    "total_size",
                    "address",
                    "addr",
                    "action",
                    "state",
                    "requested_size",
                    "device",
                    "time_us",
                    "filename",
                    "line",
                    "name",
                    "stream",
                    "external_annotations",
                    "stage",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@_SETTINGS
@given(data=_PLAIN)
def test_any_plain_data(tmp_path: Path, data: Any) -> None:
    _load_and_analyse(tmp_path, pickle.dumps(data, protocol=4))


@_SETTINGS
@given(data=_PLAIN)
def test_any_plain_data_in_a_snapshot(tmp_path: Path, data: Any) -> None:
    """Real structure around random values: a block, a segment or an entry gone wrong."""
    snap = known_snapshot()
    snap["segments"][0]["blocks"].append(data)
    snap["device_traces"][0].insert(1, data)
    _load_and_analyse(tmp_path, pickle.dumps(snap, protocol=4))
