"""`badput run` owns its command: signals reach the whole group, nothing outlives it, and the
exit status is the command's (128+N for death by signal N), as a shell reports it.

Each test runs the real CLI as a subprocess around a child script that starts a grandchild
(a sleeping Python in the child's group) and writes both pids to a file. Every wait is
bounded, and whatever a failing test leaves running is killed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

START_TIMEOUT_S = 30.0  # two Python start-ups on a busy machine
GONE_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 30.0
BADPUT_RUN = (sys.executable, "-m", "badput", "run", "--")

# argv: pidfile, mode, signal number, grandchild mode. The child's stderr goes to a file of
# its own (pidfile + ".err"), so that badput's stderr holds only what badput writes.
CHILD = r"""
import os, signal, subprocess, sys, time

pidfile, mode, signum, grand = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.dup2(os.open(pidfile + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)

seen = []
def trap(sig, frame):
    seen.append(sig)
    if mode == "trap":
        sys.exit(3)
    if mode == "trap-twice":
        if len(seen) == 2:
            sys.exit(4)
        with open(pidfile + ".first", "w") as f:
            f.write("1")

if mode in ("trap", "trap-twice"):
    signal.signal(signum, trap)

GRAND = '''
import signal, sys, time
if sys.argv[1] == "stubborn":  # outlives every polite signal: only SIGKILL ends it
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
'''
grandchild = subprocess.Popen(
    [sys.executable, "-S", "-c", GRAND, grand], stdout=subprocess.PIPE
)
assert grandchild.stdout.readline() == b"ready\n"

with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
os.replace(pidfile + ".tmp", pidfile)

if mode == "exit5":
    sys.exit(5)
if mode == "exit0":
    sys.exit(0)
if mode == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(99)  # never signalled
"""


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (an exited process nobody has reaped yet counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # the pid was reused by someone else's process
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class Run:
    """`badput run -- python CHILD ...` as a subprocess, with the pids of its descendants."""

    def __init__(
        self, tmp_path: Path, mode: str, signum: int, grand: str, front: tuple[str, ...]
    ) -> None:
        child = tmp_path / "child.py"
        child.write_text(CHILD)
        self.pidfile = tmp_path / "pids"
        # `python -S` skips site, and so the meter `badput run` attaches through sitecustomize:
        # it imports torch (seconds), and has no part in how signals travel.
        self.proc = subprocess.Popen(
            [
                *front,
                sys.executable,
                "-S",
                str(child),
                str(self.pidfile),
                mode,
                str(signum),
                grand,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pids: list[int] = []

    def started(self) -> tuple[int, int]:
        """Wait until the child and the grandchild run; returns their pids."""
        assert _wait_for(
            lambda: self.pidfile.exists() or self.proc.poll() is not None, START_TIMEOUT_S
        ), "the child did not start"
        assert self.pidfile.exists(), f"badput exited {self.proc.poll()}: {self.stderr()}"
        child, grandchild = (int(p) for p in self.pidfile.read_text().split())
        self.pids = [child, grandchild]
        return child, grandchild

    def finish(self) -> tuple[int, str]:
        """Wait for badput; returns (exit status, stderr)."""
        _, err = self.proc.communicate(timeout=EXIT_TIMEOUT_S)
        return self.proc.returncode, err

    def stderr(self) -> str:
        self.proc.kill()
        return self.proc.communicate(timeout=EXIT_TIMEOUT_S)[1]

    def assert_nothing_left(self) -> None:
        if not self.pids:
            self.started()
        for pid in self.pids:
            assert _wait_for(lambda pid=pid: _gone(pid), GONE_TIMEOUT_S), f"pid {pid} survived"

    def kill_all(self) -> None:
        """Teardown: end whatever a failed test left running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_TIMEOUT_S)
        for pid in self.pids:
            if not _gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def _as_from_a_terminal() -> Iterator[None]:
    """The signals the tests send not ignored, as in a runner started from a terminal.

    A runner started in the background, or under nohup, has SIGINT or SIGHUP ignored, and an
    ignored signal stays ignored across exec: badput's child would outlive it. A test that
    ignores one itself does so inside.
    """
    handlers = {signal.SIGINT: signal.default_int_handler}
    ignored = [
        s
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT)
        if signal.getsignal(s) == signal.SIG_IGN
    ]
    for s in ignored:
        signal.signal(s, handlers.get(s, signal.SIG_DFL))
    try:
        yield
    finally:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def make(
        mode: str, signum: int = 0, grand: str = "plain", front: tuple[str, ...] = BADPUT_RUN
    ) -> Run:
        run = Run(tmp_path, mode, signum, grand, front)
        runs.append(run)
        return run

    with _as_from_a_terminal():
        yield make
    for run in runs:
        run.kill_all()


STOP_SIGNALS = [
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGINT, id="SIGINT"),
    pytest.param(signal.SIGHUP, id="SIGHUP"),
]


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_signal_to_badput_ends_the_child_and_grandchild_and_gives_128_plus_n(
    start: Callable[..., Run], signum: signal.Signals
) -> None:
    run = start("die")
    run.started()
    run.proc.send_signal(signum)
    code, err = run.finish()
    assert code == 128 + signum, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    run.assert_nothing_left()


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_telemetry_record_owns_its_command_the_same_way(
    start: Callable[..., Run], tmp_path: Path, signum: signal.Signals
) -> None:
    """`badput telemetry record -- CMD` shares `badput run`'s ownership of the command."""
    out = tmp_path / "telemetry.jsonl"
    front = (sys.executable, "-m", "badput", "telemetry", "record", "--out", str(out), "--")
    run = start("die", front=front)
    run.started()
    run.proc.send_signal(signum)
    code, err = run.finish()
    assert code == 128 + signum, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    run.assert_nothing_left()
    assert out.exists()  # the sampler stopped and wrote its file


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_child_that_traps_the_signal_gives_its_own_exit_code(
    start: Callable[..., Run], signum: signal.Signals
) -> None:
    run = start("trap", signum)
    run.started()
    run.proc.send_signal(signum)
    code, err = run.finish()
    assert code == 3, err
    run.assert_nothing_left()


def test_a_second_ctrl_c_is_forwarded_too_without_a_traceback(
    start: Callable[..., Run], tmp_path: Path
) -> None:
    run = start("trap-twice", signal.SIGINT)
    run.started()
    run.proc.send_signal(signal.SIGINT)
    assert _wait_for((tmp_path / "pids.first").exists, START_TIMEOUT_S), "first Ctrl-C lost"
    assert run.proc.poll() is None  # badput keeps waiting for the child
    run.proc.send_signal(signal.SIGINT)
    code, err = run.finish()
    assert code == 4, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    run.assert_nothing_left()


def test_a_child_killed_by_sigkill_gives_137_and_its_grandchild_is_ended(
    start: Callable[..., Run],
) -> None:
    run = start("sigkill")
    code, err = run.finish()
    assert code == 128 + signal.SIGKILL == 137, err
    run.assert_nothing_left()


def test_the_exit_code_is_the_childs_and_the_run_is_reported_as_before(
    start: Callable[..., Run],
) -> None:
    run = start("exit5")
    code, err = run.finish()
    assert code == 5, err
    # No meter under `python -S`: the note of a run without summary, as before (test_meter.py
    # runs a metered script).
    assert "badput run: no summary" in err
    run.assert_nothing_left()


def test_a_grandchild_that_ignores_sigterm_is_killed_after_the_grace_period(
    start: Callable[..., Run],
) -> None:
    run = start("exit0", grand="stubborn")
    code, err = run.finish()
    assert code == 0, err
    run.assert_nothing_left()


def test_a_signal_ignored_by_badputs_caller_stays_ignored(start: Callable[..., Run]) -> None:
    # As under `nohup`: badput starts with SIGHUP ignored, and so does the child.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited by badput
    try:
        run = start("die")
    finally:
        signal.signal(signal.SIGHUP, previous)
    run.started()
    run.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert run.proc.poll() is None
    assert all(not _gone(pid) for pid in run.pids)
    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish()
    assert code == 128 + signal.SIGTERM, err
    run.assert_nothing_left()


def test_a_command_that_cannot_start_is_a_usage_error_and_the_handlers_are_restored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from badput.cli.app import main

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert main(["run", "--", "/no/such/binary"]) == 2
    err = capsys.readouterr().err
    assert "cannot run '/no/such/binary'" in err and "Traceback" not in err
    assert main(["run", "--", sys.executable, "-S", "-c", "raise SystemExit(6)"]) == 6
    assert {s: signal.getsignal(s) for s in before} == before
