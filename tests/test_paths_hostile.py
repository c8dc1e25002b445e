"""Input paths that are not regular files: every command refuses them with exit 2 and one error
line naming the file, before opening anything.

A FIFO (named pipe) blocked `open` forever, so those cases run the real CLI in a subprocess
with a timeout; a character device or a socket does not block `open`, so those run in-process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from synth import run_cli
from synth_timeline import standard_timeline, write_kineto
from test_cli_errors import assert_one_error_line

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")

# Starting the CLI takes about 2 s on this slow machine; a FIFO read blocks forever.
_FINISH_WITHIN_S = 20.0

# (id, FIFO file name, argv): {fifo} is the FIFO, {good} a sound Kineto trace, {tmp} a folder.
_FIFO_CASES = [
    ("analyze-kineto", "trace.pt.trace.json", ["analyze", "{fifo}"]),
    ("analyze-nsys", "report.sqlite", ["analyze", "{fifo}", "--format", "json"]),
    ("analyze-process", "report.sqlite", ["analyze", "{fifo}#pid=4242"]),
    ("report", "trace.json", ["report", "{fifo}", "--out", "{tmp}/report.html"]),
    ("diff", "after.json", ["diff", "{good}", "{fifo}"]),
    ("annotate", "trace.json", ["annotate", "{fifo}", "--out", "{tmp}/annotated.json"]),
    ("memory", "snapshot.pickle", ["memory", "{fifo}"]),
    ("roofline", "kernels.csv", ["roofline", "{fifo}"]),
    ("telemetry", "samples.jsonl", ["analyze", "{good}", "--telemetry", "{fifo}"]),
    ("bench-check", "bench.json", ["bench", "check", "{tmp}/expected.json", "{fifo}"]),
    ("bench-ingest", "ab.json", ["bench", "ingest", "{fifo}", "--store", "{tmp}/store.sqlite"]),
    ("bench-run", "bench_file.py", ["bench", "run", "{fifo}"]),
    ("estimate-cost", "analysis.json", ["estimate", "cost", "{fifo}", "--gpus", "8"]),
    ("doctor-replay", "nvml.json", ["doctor", "--nvml-replay", "{fifo}"]),
]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kineto(standard_timeline(steps=2), tmp_path_factory.mktemp("good") / "ok.json")


@pytest.mark.parametrize(
    ("name", "argv"), [c[1:] for c in _FIFO_CASES], ids=[c[0] for c in _FIFO_CASES]
)
def test_fifo_is_refused_without_blocking(
    tmp_path: Path, good: Path, name: str, argv: list[str]
) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    (tmp_path / "expected.json").write_text("{}\n")
    args = [a.format(fifo=fifo, good=good, tmp=tmp_path) for a in argv]
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "badput", *args],
            capture_output=True,
            text=True,
            timeout=_FINISH_WITHIN_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"badput {' '.join(args)} still ran after {_FINISH_WITHIN_S:.0f} s (blocked)")
    elapsed = time.perf_counter() - start
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert_one_error_line(result.stderr, fifo)
    assert "is a FIFO, not a regular file" in result.stderr
    assert elapsed < _FINISH_WITHIN_S


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "{path}"],
        ["memory", "{path}"],
        ["roofline", "{path}"],
        ["diff", "{path}", "{path}"],
    ],
    ids=["analyze", "memory", "roofline", "diff"],
)
def test_character_device_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null reads as empty and /dev/zero never ends: neither is read at all."""
    if not os.path.exists(os.devnull):
        pytest.skip("no /dev/null")
    code, out, err = run_cli(capsys, *(a.format(path=os.devnull) for a in argv))
    assert code == 2 and out == ""
    assert_one_error_line(err, Path(os.devnull))
    assert "is a character device, not a regular file" in err


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "s.json"
    if len(str(path)) > 100:  # the limit of an AF_UNIX address
        pytest.skip("temporary folder too deep for a socket path")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


@pytest.mark.parametrize("command", ["analyze", "memory", "roofline"])
def test_socket_is_refused(
    unix_socket: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, command, unix_socket)
    assert code == 2 and out == ""
    assert_one_error_line(err, unix_socket)
    assert "is a socket, not a regular file" in err
