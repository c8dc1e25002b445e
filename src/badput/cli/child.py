"""A command badput starts and owns (`badput run`, `badput telemetry record`).

The command runs in a session (so a process group) of its own; the signals that ask badput to
stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are passed on to that whole group while it runs, and
when it ends no process of its group is left behind. Its status is reported as a shell does:
its exit code, or 128+N when signal N killed it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeAlias

from badput.errors import UsageError

__all__ = ["exit_status", "owned_child"]

# The signals passed on to the command. Since it runs in a session of its own, the terminal's
# Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT) and a hang-up (SIGHUP) reach only badput, which was in
# the foreground with it before; a supervisor's SIGTERM reaches only badput too.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# How long processes the command left in its group get to exit on SIGTERM before SIGKILL.
_GRACE_S = 2.0
_POLL_S = 0.02

_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def exit_status(returncode: int) -> int:
    """A `Popen.returncode` as a shell reports it: death by signal N (-N) is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


@contextlib.contextmanager
def owned_child(
    command: list[str], env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `command` in a new session, forwarding stop signals; end its whole group on exit.

    The body waits for the child (`child.wait()`) and may do other work meanwhile; leaving the
    block, by return or by error, sends SIGTERM and then SIGKILL to whatever of the group is
    still alive, and reaps the child.

    Raises:
        UsageError: the command cannot be started.
    """
    # The handlers go in before the child starts, so that a signal arriving while it starts
    # is held and passed on rather than killing badput and orphaning the child.
    with _forwarding() as forwarder:
        try:
            # A new session, not only a new group: the child has no controlling terminal, so
            # reading the terminal (pdb, input()) works instead of stopping it with SIGTTIN as
            # a background group of badput's session would be.
            child = subprocess.Popen(command, env=env, start_new_session=True)
        except OSError as e:
            raise UsageError(f"cannot run {command[0]!r}: {e.strerror}") from None
        try:
            forwarder.attach(child.pid)  # the session leader's pid is its group's id
            yield child
        finally:
            _end_group(child.pid)
            child.wait()  # handlers return, so the wait resumes (PEP 475)


class _Forwarder:
    """Signal handlers that send each signal badput gets on to the child's process group."""

    def __init__(self) -> None:
        self._pgid: int | None = None
        self._held: list[int] = []  # signals that came before the child had started

    def attach(self, pgid: int) -> None:
        """Forward to the group `pgid` from now on, first the signals held until now."""
        self._pgid = pgid
        held, self._held = self._held, []
        for signum in held:
            _signal_group(pgid, signum)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """Signal handler: forward `signum` to the child's group (or hold it until it starts).

        It never raises, so no KeyboardInterrupt however many Ctrl-C: the child decides
        whether it stops, and badput reports how it did.
        """
        if self._pgid is None:
            self._held.append(signum)
        else:
            _signal_group(self._pgid, signum)


@contextlib.contextmanager
def _forwarding() -> Iterator[_Forwarder]:
    """Install a `_Forwarder` for the forwarded signals; restore the previous handlers."""
    forwarder = _Forwarder()
    previous: dict[signal.Signals, _Handler] = {}
    # Python runs signal handlers in the main thread only, and refuses to set them elsewhere:
    # called from another thread, the child still gets its own group, but nothing is passed on.
    if threading.current_thread() is threading.main_thread():
        for signum in _FORWARDED:
            # An ignored signal stays ignored, for badput and (inherited) for the child: that
            # is what `nohup` or a shell's background job asked for.
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, forwarder.handle)
    try:
        yield forwarder
    finally:
        for restored, handler in previous.items():
            # None: a handler set outside Python, which cannot be put back; the default is
            # the nearest.
            signal.signal(restored, signal.SIG_DFL if handler is None else handler)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to the process group `pgid`.

    Returns:
        Whether the group still has a process that could be signalled.
    """
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # the group is gone: every process of it has exited
        return False
    except PermissionError:  # what is left changed user (setuid): badput cannot end it
        return False
    return True


def _end_group(pgid: int) -> None:
    """Make sure no process of the group `pgid` is left: SIGTERM, a grace period, SIGKILL."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline:
        time.sleep(_POLL_S)
        if not _signal_group(pgid, 0):  # signal 0 only checks that the group exists
            return
    # Still there: it ignores SIGTERM, or it is an exited process nobody has reaped yet
    # (SIGKILL does nothing to that, and it holds no resources but its pid).
    _signal_group(pgid, signal.SIGKILL)
