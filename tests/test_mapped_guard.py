"""A plain trace is read through a mapping of the file: should the file shrink while it is read
(truncated, or written again in place), the access past its new end faults (SIGBUS). The
reader's mappings are guarded: the process ends with exit status 2 and a line naming the file,
not killed by the signal with no word of why. Other mappings keep the signal's default.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from badput.trace import _mapped

_scan = pytest.importorskip("badput.trace._scan")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(_scan, "guard"),
    reason="the guard is Linux's, in the C scanner",
)

# Maps the file, truncates it, then reads past the new end (on a page the truncation took).
_TOUCH = """
import os, sys
from badput.trace._mapped import MappedText
path, mode = sys.argv[1], sys.argv[2]
if mode == "beside":  # a guarded mapping of another file: the handler is there, not for this
    other = path + ".other"
    open(other, "wb").write(b"[]" * 5000)
    fd = os.open(other, os.O_RDONLY)
    kept = MappedText(fd, 4096, other)
    os.close(fd)
fd = os.open(path, os.O_RDONLY)
text = MappedText(fd, 4096, path if mode == "guarded" else None)
if mode in ("unnamed", "named later"):  # as `_early` guards: first a line naming no file
    text.guard(None)
if mode == "named later":
    text.guard(path)
os.close(fd)
os.truncate(path, 100)
print(bytes(text._view[200_000:200_010]), flush=True)
"""


def _touch(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "shrinking trace.json"
    path.write_bytes(b"[" + b" " * (1 << 20) + b"]")
    return subprocess.run(
        [sys.executable, "-c", _TOUCH, str(path), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_mapped_trace_that_shrinks_ends_with_its_name_and_status_2(tmp_path: Path) -> None:
    done = _touch(tmp_path, "guarded")
    path = tmp_path / "shrinking trace.json"
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr == f"badput: error: {path}: {_mapped.SHRANK}\n"
    assert done.stdout == ""  # ended at the access, nothing read


def test_a_guard_first_unnamed_then_named_says_the_last_line(tmp_path: Path) -> None:
    done = _touch(tmp_path, "unnamed")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr == f"badput: error: {_mapped.SHRANK}\n"
    done = _touch(tmp_path, "named later")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr == f"badput: error: {tmp_path / 'shrinking trace.json'}: {_mapped.SHRANK}\n"


@pytest.mark.parametrize("mode", ["alone", "beside"])
def test_a_mapping_not_guarded_keeps_the_signal(tmp_path: Path, mode: str) -> None:
    """Unguarded, alone or beside a guarded mapping (the handler passes the fault on)."""
    done = _touch(tmp_path, mode)
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr)
    assert "badput" not in done.stderr


def test_closing_a_text_frees_its_guard(tmp_path: Path) -> None:
    """A process reads many traces: each closed text gives its slot back (8 at once)."""
    import os

    path = tmp_path / "t.json"
    path.write_bytes(b"[" + b" " * 10_000 + b"]")
    slots = []
    for _ in range(20):
        fd = os.open(path, os.O_RDONLY)
        text = _mapped.MappedText(fd, 4096, str(path))
        os.close(fd)
        text.guard(None)  # a guard replaced gives its slot back too
        text.guard(str(path))
        slots.append(text._guard)
        text.close()
        assert text._guard == -1
    assert all(0 <= s < 8 for s in slots), slots


def test_the_line_is_written_as_the_cli_writes_errors() -> None:
    """A crafted file name cannot forge a second line or reach the terminal raw."""
    line = _mapped.shrank_line("/tmp/a\nbadput: error: forged\x1b[2J.json")
    assert line.count(b"\n") == 1 and line.endswith(b"\n") and b"\x1b" not in line
    assert line.startswith(b"badput: error: /tmp/a\\nbadput: error: forged\\x1b[2J.json: ")
