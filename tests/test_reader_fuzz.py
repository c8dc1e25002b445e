"""Bad Nsight exports never reach the user as a traceback: property tests of both readers.

The real Nsight Compute CSV cut off or with bytes flipped, and an Nsight Systems export cut off
or overwritten inside: reading either works (partial data, with warnings) or raises
`TraceFormatError` naming the file, which the CLI turns into one line and exit code 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.analysis.roofline import analyze_roofline
from badput.errors import TraceFormatError
from badput.trace import load_trace
from badput.trace.ncu import read_ncu_csv
from conftest import SHARED_TRACES, reference
from synth_timeline import standard_timeline, write_nsys

NCU = SHARED_TRACES / "ncu" / "copy_blocked.csv"

_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,  # the same examples on every run: CI cannot flake on a new one
)


def _ncu_bytes() -> bytes:
    return reference(NCU).read_bytes()


def _read_ncu(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "ncu.csv"
    path.write_bytes(data)
    try:
        report = read_ncu_csv(str(path))
    except TraceFormatError as e:
        assert str(path) in str(e)
        return
    try:
        analyze_roofline(report, gpu="T4")
    except TraceFormatError as e:  # e.g. the CSV lost the field that names the device
        assert str(path) in str(e) or "T4" in str(e)


@_SETTINGS
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_truncated_ncu_csv(tmp_path: Path, cut: float) -> None:
    data = _ncu_bytes()
    _read_ncu(tmp_path, data[: int(cut * len(data))])


@_SETTINGS
@given(flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.sampled_from(b',"\n\r0x;\x00\xff')),
                      min_size=1, max_size=6))  # fmt: skip
def test_corrupted_ncu_csv(tmp_path: Path, flips: list[tuple[float, int]]) -> None:
    data = bytearray(_ncu_bytes())
    for at, value in flips:
        data[min(int(at * len(data)), len(data) - 1)] = value
    _read_ncu(tmp_path, bytes(data))


@pytest.fixture(scope="module")
def nsys_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = write_nsys(standard_timeline(steps=2), tmp_path_factory.mktemp("nsys") / "t.sqlite")
    return path.read_bytes()


def _read_nsys(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "report.sqlite"
    path.write_bytes(data)
    try:
        load_trace(str(path))
    except TraceFormatError as e:
        assert str(path) in str(e)


@_SETTINGS
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_truncated_nsys_export(tmp_path: Path, nsys_bytes: bytes, cut: float) -> None:
    _read_nsys(tmp_path, nsys_bytes[: int(cut * len(nsys_bytes))])


@_SETTINGS
@given(at=st.floats(min_value=0.0, max_value=1.0), junk=st.binary(min_size=1, max_size=64))
def test_overwritten_nsys_export(tmp_path: Path, nsys_bytes: bytes, at: float, junk: bytes) -> None:
    data = bytearray(nsys_bytes)
    start = min(int(at * len(data)), len(data) - 1)
    data[start : start + len(junk)] = junk[: len(data) - start]
    _read_nsys(tmp_path, bytes(data))
