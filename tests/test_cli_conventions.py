"""CLI conventions: `--version`, flags shown as flags, `explain` without an id, the inputs each
command's help names, plurals, non-trace files in a trace directory, and progress on stderr.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup, TyperOption

import badput
import badput.cli.progress
from badput.cli.app import command, main
from badput.diagnose import RULES
from badput.report.topics import TOPICS
from badput.report.units import format_bytes
from badput.trace.load import find_trace_files
from synth import TraceBuilder, run_cli
from synth_ranks import write_rank_set


def command_paths(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the tree, as the words that name it (the root is `()`)."""
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from command_paths(sub, (*path, name))


ALL_COMMANDS = list(command_paths(command()))


def test_the_tree_is_walked() -> None:
    # the walk reaches subcommands of subgroups: a test over it cannot pass by seeing nothing
    assert isinstance(command(), TyperGroup)
    assert ("analyze",) in ALL_COMMANDS and ("bench", "ab") in ALL_COMMANDS
    assert ("telemetry", "record") in ALL_COMMANDS and len(ALL_COMMANDS) >= 20


def test_a_named_command_parses_as_in_the_whole_group(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `main` builds only the command its first word names: the same help, the same usage
    # errors as the whole group gives it; groups, typos and options get the whole group.
    monkeypatch.setenv("COLUMNS", "160")
    whole: Any = command()
    names = sorted(whole.commands)
    singles = 0
    for name in names:
        held: Any = command([name, "--help"])
        if list(held.commands) == [name]:
            singles += 1
            assert [p.name for p in held.params] == [p.name for p in whole.params] == ["version"]
            ctx_whole = whole.commands[name].make_context(name, ["--help"], resilient_parsing=True)
            ctx_held = held.commands[name].make_context(name, ["--help"], resilient_parsing=True)
            assert held.commands[name].get_help(ctx_held) == whole.commands[name].get_help(
                ctx_whole
            )
        else:  # a group (bench, estimate, telemetry): the whole app
            assert sorted(held.commands) == names
    assert singles >= 8
    for args in (["anlyze"], ["--version"], ["bench", "--help"], []):
        assert sorted(command(args).commands) == names
    # a usage error of a held command names it as the whole group does
    assert main(["analyze", "--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert "No such option" in err and "--no-such-flag" in err and "badput analyze" in err


# ---- --version -----------------------------------------------------------------------------


def test_version_option_prints_what_version_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    by_command = capsys.readouterr().out
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert out == by_command == badput.__version__ + "\n"
    assert err == ""


# ---- flags in help -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "badput")
def test_help_shows_flags_as_flags(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--help" in out
    assert "<bool>" not in out
    # each flag's row holds no type at all: `--strict   Exit 2 ...`, not `--strict  <...>`
    cmd: Any = command()
    for word in path:
        cmd = cmd.commands[word]
    flags = [p for p in cmd.params if isinstance(p, TyperOption) and p.is_flag]
    if path in (("analyze",), ("doctor",), ()):
        assert flags  # --strict, --version: the check below sees flags
    for flag in flags:
        for name in [n for n in flag.opts if n.startswith("--")]:
            rows = [line for line in out.splitlines() if re.search(rf"{name}(\s|$)", line)]
            assert rows, name
            assert not re.search(rf"{name}\s+(/\s+--\S+\s+)?<", rows[0]), rows[0]


def prose_lines(help_text: str) -> list[str]:
    """The lines of a help screen outside its boxes and example blocks."""
    lines = [line.rstrip() for line in help_text.splitlines()]
    return [line for line in lines if not line.startswith(("│", "╭", "╰", "     "))]


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "badput")
def test_help_prose_rewraps_at_80_columns(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A docstring's own line breaks kept at 80 columns leave one word on a line of its own
    # inside a paragraph ("the report\n is\n written first").
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*path, "--help"]) == 0
    lines = prose_lines(capsys.readouterr().out)
    assert all(len(line) <= 80 for line in lines)
    for line, after in itertools.pairwise(lines):
        if len(line.split()) == 1 and after.strip() and not line.strip().endswith(":"):
            pytest.fail(f"a lone word inside a paragraph: {line!r} then {after!r}")


def test_analyze_flags_stay_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # the metavar change is display only: the flags still parse as flags
    code, _, err = run_cli(capsys, "analyze", "/no/such/dir", "--strict", "--top", "3")
    assert code == 2 and "no such file or directory" in err


# ---- explain without an id -----------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 100, 160])
def test_explain_lists_every_rule_and_topic(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run_cli(capsys, "explain")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    ids = [line.split()[0] for line in lines[1:] if line and not line.startswith(" ")]
    expected = [*RULES, *TOPICS]
    assert ids[: len(expected)] == expected
    text = " ".join(" ".join(line.split()) for line in lines)
    for rule in RULES.values():
        assert rule.title in text or width < 160, rule.id
    if width == 160:  # nothing wraps: each title on its id's line
        for name, title in [(r.id, r.title) for r in RULES.values()] + [
            (t.name, t.title) for t in TOPICS.values()
        ]:
            (row,) = [line for line in lines if line.startswith(name + " ")]
            assert row.rstrip().endswith(title)


def test_explain_unknown_id_points_at_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "explain", "no-such-rule")
    assert code == 2 and out == ""
    assert "no rule or table 'no-such-rule'" in err and "`badput explain` lists them" in err


# ---- inputs named in help ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["analyze", "report"])
def test_trace_commands_name_every_input(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main([name, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for accepted in (".json", ".json.gz", ".sqlite", "#pid=", "director"):
        assert accepted in out, accepted


def test_annotate_help_says_what_it_reads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["annotate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ".json.gz" in out and "(.sqlite) cannot be annotated" in out


# ---- non-trace files in a trace directory ----------------------------------------------------


def one_step_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.profiler_step(1, 0, 100)
    b.launch("gemm_kernel", cpu=(10, 20), gpu=(20, 80))
    return b


def test_stray_files_are_left_out_with_one_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_step_trace().write(tmp_path / "rank0.pt.trace.json")
    one_step_trace().write(tmp_path / "rank1.pt.trace.json.gz")
    (tmp_path / "config.json").write_text('{"lr": 0.1, "batch_size": 32}\n')
    (tmp_path / "results.json.gz").write_bytes(gzip.compress(b'{"goodput": [0.5]}'))
    (tmp_path / "list.json").write_text("[1, 2, 3]")  # a bare array may be a Chrome trace
    (tmp_path / "notes.txt").write_text("nothing\n")
    (tmp_path / "broken.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", ')
    code, out, err = run_cli(capsys, "analyze", tmp_path, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert [Path(t["path"]).name for t in doc["traces"]] == [
        "rank0.pt.trace.json",
        "rank1.pt.trace.json.gz",
    ]
    assert sorted(Path(f["path"]).name for f in doc["ranks"]["failed"]) == [
        "broken.pt.trace.json",
        "list.json",
    ]
    notes = [line for line in err.splitlines() if line.startswith("badput: note:")]
    assert notes == [
        f"badput: note: {tmp_path}: left out 3 files that are not traces: config.json (JSON "
        "without traceEvents), notes.txt (not a trace file name), results.json.gz (JSON without "
        "traceEvents)"
    ]
    assert "truncated JSON" in err  # the corrupt trace keeps its clear error
    assert "(left out; 2 of 4 analysed)" in err


def test_one_stray_file_is_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_step_trace().write(tmp_path / "rank0.pt.trace.json")
    (tmp_path / "config.json").write_text("{}")
    code, _, err = run_cli(capsys, "analyze", tmp_path, "--format", "json")
    assert code == 0
    assert "left out 1 file that is not a trace: config.json (JSON without traceEvents)" in err


def test_a_directory_of_only_stray_files_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text("{}")
    code, out, err = run_cli(capsys, "analyze", tmp_path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert (
        "directory holds no trace files" in err and "config.json (JSON without traceEvents)" in err
    )


def test_peek_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import badput.trace.load as load

    # A big JSON whose start holds no traceEvents is not judged from its start: kept as a
    # trace, so reading it says what it is.
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * (load._PEEK_BYTES + 10) + '", "traceEvents": []}')
    # and a trace is told from its first chunk, not read whole
    trace = one_step_trace().write(tmp_path / "t.pt.trace.json.gz")
    reads: list[int] = []
    real = gzip.GzipFile.read

    def counting(self: gzip.GzipFile, size: int = -1) -> bytes:
        reads.append(size)
        return real(self, size)

    monkeypatch.setattr(gzip.GzipFile, "read", counting)
    found = find_trace_files(str(tmp_path))
    assert found.traces == [str(big), str(trace)] and found.skipped == []
    assert reads == [load._PEEK_CHUNK]


# ---- plurals ---------------------------------------------------------------------------------


def test_annotate_counts_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = TraceBuilder()
    b.device_properties([0])
    b.profiler_step(1, 0, 100)
    b.launch("gemm_kernel", cpu=(10, 20), gpu=(20, 80))
    trace = b.write(tmp_path / "t.pt.trace.json")
    out = tmp_path / "annotated.json"
    code, _, err = run_cli(capsys, "annotate", trace, "--out", out)
    assert code == 0
    events = len(json.loads(trace.read_text())["traceEvents"])
    added = len(json.loads(out.read_text())["traceEvents"]) - events
    line = err.splitlines()[-1]
    assert line.startswith(f"badput: wrote {out}: {events} original events, {added} added (1 GPU, ")
    assert "GPU(s)" not in line and "finding(s)" not in line
    assert re.search(r"\((1 GPU), (1 finding|\d+ findings|0 findings)\)$", line), line


# ---- progress --------------------------------------------------------------------------------


def terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """The captured stderr claims to be a terminal, and progress shows at once.

    Called in the test's body: the stream capsys captures into is set up for the call.
    """
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: draw as on a terminal
    monkeypatch.delenv("BADPUT_NO_PROGRESS", raising=False)
    monkeypatch.setattr(badput.cli.progress, "DELAY_S", 0.0)


def test_progress_over_ranks_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal_stderr(monkeypatch)
    write_rank_set(tmp_path, ranks=3, steps=2)
    code, out, err = run_cli(capsys, "analyze", tmp_path, "--format", "json", "--jobs", "1")
    assert code == 0
    json.loads(out)  # stdout holds the JSON document and nothing else
    assert "analysing 3 traces" in err


def test_progress_reading_one_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal_stderr(monkeypatch)
    path = one_step_trace().write(tmp_path / "rank0.pt.trace.json")
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json")
    assert code == 0
    json.loads(out)
    size = format_bytes(path.stat().st_size)  # 2.23 KiB
    assert f"reading and analysing rank0.pt.trace.json ({size})" in err


def test_no_progress_when_turned_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal_stderr(monkeypatch)
    monkeypatch.setenv("BADPUT_NO_PROGRESS", "1")
    write_rank_set(tmp_path, ranks=2, steps=2)
    code, _, err = run_cli(capsys, "analyze", tmp_path, "--format", "json", "--jobs", "1")
    assert code == 0 and err == ""


def test_no_progress_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_rank_set(tmp_path, ranks=2, steps=2)
    code, _, err = run_cli(capsys, "analyze", tmp_path, "--format", "json", "--jobs", "1")
    assert code == 0 and err == ""
