"""Error, warning and gate lines are one line each: control characters in paths are escaped.

A path is the user's, but it may come from elsewhere (a directory of traces someone shared): a
newline in it must not print a second, forged `badput: error:` line, and an ESC must not reach
the terminal as an escape sequence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from badput.errors import printable
from synth import TraceBuilder, run_cli

FORGED = "x\nbadput: error: everything is fine\x1b[2J\u202e"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("plain/ü/path.json", "plain/ü/path.json"),
        ("a\nb", "a\\nb"),
        ("a\r\tb", "a\\r\\tb"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("\x00\x7f\x85", "\\x00\\x7f\\x85"),
        ("rtl\u202eevil\u2028next", "rtl\\u202eevil\\u2028next"),
    ],
)
def test_printable_escapes_controls_and_keeps_the_rest(text: str, want: str) -> None:
    assert printable(text) == want
    assert "\n" not in printable(text)


def test_missing_path_with_a_newline_is_one_escaped_line(capsys: Any, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / FORGED))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("badput: error: ")
    assert "\\nbadput: error: everything is fine\\x1b[2J\\u202e" in err
    assert "\x1b" not in err and "\u202e" not in err


def test_warning_about_a_crafted_file_name_is_one_line(capsys: Any, tmp_path: Path) -> None:
    """A directory with a good trace and a broken one whose name holds a newline."""
    b = TraceBuilder()
    b.launch("gemm", cpu=(0, 10), gpu=(15, 100))
    b.write(tmp_path / "good.json")
    (tmp_path / (FORGED.replace("/", "_") + ".json")).write_text("{not json")
    code, _, err = run_cli(capsys, "analyze", tmp_path)
    assert code == 0, err
    lines = err.splitlines()
    assert lines and all(line.startswith("badput: ") for line in lines), err
    assert not any(line.startswith("badput: error: everything") for line in lines)


def test_gate_line_is_one_line(capsys: Any, tmp_path: Path) -> None:
    b = TraceBuilder()
    b.launch("gemm", cpu=(0, 10), gpu=(15, 40))
    b.launch("gemm", cpu=(10, 20), gpu=(80, 100))  # idle between: goodput 45/85
    path = b.write(tmp_path / "a\nb.json")
    code, _, err = run_cli(capsys, "analyze", path, "--min-goodput", "0.99")
    assert code == 1, err
    gate_lines = [line for line in err.splitlines() if line.startswith("badput: gate failed:")]
    assert gate_lines and all("a\\nb.json" in line for line in gate_lines), err
    assert all(line.startswith("badput: ") for line in err.splitlines()), err
