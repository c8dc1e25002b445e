from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from badput.cli.progress import NO_PROGRESS_ENV, progress, progress_enabled


def _tty() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=80), buf


def test_not_a_terminal_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # capsys's stderr is not a TTY: even with no delay, nothing is drawn.
    with progress("reading x", total=3, delay_s=0) as advance:
        for _ in range(3):
            advance()
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ""


def test_terminal_shows_progress_and_leaves_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    console, buf = _tty()
    with progress("analysing ranks", total=4, console=console, delay_s=0) as advance:
        for _ in range(4):
            advance()
            time.sleep(0.02)
    drawn = buf.getvalue()
    assert "analysing ranks" in drawn
    assert "4/4" in drawn
    assert capsys.readouterr().out == ""


def test_delay_hides_quick_work() -> None:
    console, buf = _tty()
    with progress("quick", total=2, console=console, delay_s=5) as advance:
        advance(2)
    assert buf.getvalue() == ""


def test_delay_passed_shows_spinner() -> None:
    console, buf = _tty()
    with progress("slow load", console=console, delay_s=0.05) as advance:
        time.sleep(0.3)
        advance(10)
    assert "slow load" in buf.getvalue()


@pytest.mark.parametrize(
    ("value", "shown"), [("1", False), ("yes", False), ("0", True), ("", True)]
)
def test_env_turns_it_off(monkeypatch: pytest.MonkeyPatch, value: str, shown: bool) -> None:
    monkeypatch.setenv(NO_PROGRESS_ENV, value)
    console, buf = _tty()
    assert progress_enabled(console) is shown
    with progress("x", total=1, console=console, delay_s=0) as advance:
        advance()
    assert ("x" in buf.getvalue()) is shown


def test_enabled_false() -> None:
    console, buf = _tty()
    with progress("x", total=1, console=console, delay_s=0, enabled=False) as advance:
        advance()
    assert buf.getvalue() == ""


def test_fails_open() -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("terminal went away")

    console = Console(file=Broken(), force_terminal=True)
    with progress("x", total=2, console=console, delay_s=0) as advance:
        advance()
        advance()
    # reaching here without an exception is the point; the caller's errors still propagate:
    with pytest.raises(KeyError), progress("x", console=console, delay_s=0):
        raise KeyError("mine")


def test_elapsed_counts_from_the_start_of_the_work_and_counts_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock read `0:00:00` when the display appeared 2 s into the work; the count of
    samples done (no total) was not shown at all."""
    from badput.cli import progress as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    console, _ = _tty()
    shown = module._Delayed("telemetry record", None, console, delay_s=0)
    try:
        now[0] = 165.0  # 65 s of work, the display appeared at once or 2 s in: 1:05 either way
        shown.advance(1234)
        assert shown._progress is not None
        task = shown._progress.tasks[0]
        cells = [str(c.render(task)) for c in shown._progress.columns[2:]]
        assert cells == ["1,234", "0:01:05"]
    finally:
        shown.close()
