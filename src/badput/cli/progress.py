"""Progress on stderr for work that takes a while: shown late, only on a terminal, fail-open.

One helper for every command, so that progress looks the same everywhere and never reaches an
output: it writes to stderr only (reports and JSON go to stdout or `--out`), only when stderr
is an interactive terminal, and only once the work has run for `DELAY_S` seconds, so that
quick commands print nothing but their result. `BADPUT_NO_PROGRESS=1` turns it off.

A failure of the display (a closed stderr, a terminal that went away) never reaches the
caller: the work goes on without progress.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["DELAY_S", "NO_PROGRESS_ENV", "progress", "progress_enabled"]

#: Work shorter than this (seconds) shows no progress at all: a display that flashes for a
#: fraction of a second is noise.
DELAY_S = 2.0
#: Set to 1 (or any non-empty value but 0) to turn progress off.
NO_PROGRESS_ENV = "BADPUT_NO_PROGRESS"

#: `advance(n)`: n more units of the work are done (ranks, tasks, bytes, samples).
Advance = Callable[[int], None]


def progress_enabled(console: Console | None = None) -> bool:
    """Whether progress may show: not turned off, and stderr (or `console`) is a terminal."""
    if os.environ.get(NO_PROGRESS_ENV, "").strip() not in ("", "0"):
        return False
    try:
        if console is not None:
            return bool(console.is_terminal)
        return sys.stderr.isatty()
    except (AttributeError, OSError, ValueError):  # no stderr, or a closed one
        return False


def _noop(n: int = 1) -> None:
    del n


class _Delayed:
    """A rich Progress that starts `delay_s` after creation (on a timer), if not closed first."""

    def __init__(
        self, description: str, total: int | None, console: Console | None, delay_s: float
    ) -> None:
        self._description = description
        self._total = total
        self._console = console
        self._lock = threading.Lock()
        self._t0 = time.monotonic()  # the work's start: the display comes `delay_s` later
        self._done = 0
        self._closed = False
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._timer: threading.Timer | None = None
        if delay_s <= 0:
            self._start()
        else:
            self._timer = threading.Timer(delay_s, self._start)
            self._timer.daemon = True
            self._timer.start()

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._progress is not None:
                return
            try:
                self._progress = self._make()
                self._task = self._progress.add_task(
                    self._description, total=self._total, completed=self._done
                )
                self._progress.start()
            except Exception:  # fail open: no display, the work goes on
                self._progress = None

    def _make(self) -> Progress:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            SpinnerColumn,
            Task,
            TextColumn,
        )
        from rich.text import Text

        t0 = self._t0

        class Count(ProgressColumn):
            """Units done so far, when there is no total to show them against (and any)."""

            def render(self, task: Task) -> Text:
                done = int(task.completed)
                return Text(f"{done:,}" if done else "", style="progress.download")

        class Since(ProgressColumn):
            """Time since the work began, not since the display appeared."""

            def render(self, task: Task) -> Text:
                del task
                s = int(time.monotonic() - t0)
                return Text(f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}", "progress.elapsed")

        console = self._console if self._console is not None else Console(stderr=True)
        columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
        if self._total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        else:
            columns.append(Count())
        columns.append(Since())
        return Progress(*columns, console=console, transient=True)

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self._done += n
            if self._progress is None or self._task is None:
                return
            try:
                self._progress.update(self._task, completed=self._done)
            except Exception:  # fail open
                self._progress = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            shown, self._progress = self._progress, None
        if shown is not None:
            with contextlib.suppress(Exception):
                shown.stop()


@contextlib.contextmanager
def progress(
    description: str,
    total: int | None = None,
    *,
    enabled: bool = True,
    console: Console | None = None,
    delay_s: float | None = None,
) -> Iterator[Advance]:
    """Progress of one piece of work on stderr; yields `advance(n=1)`.

    A spinner, the description, a bar and `done/total` when `total` is known (else the
    count done, once there is one), and the time since the work began; removed when the work
    ends. It appears only when stderr is a terminal, not
    turned off (`enabled=False` or `BADPUT_NO_PROGRESS=1`), and the work has taken more than
    `delay_s` seconds; otherwise `advance` does nothing. It never writes to stdout and never
    raises into the caller.

    Args:
        description: what is being done, e.g. "reading trace.json.gz (1.2 GB)".
        total: units of work when known (ranks, tasks); None shows a spinner only.
        enabled: False turns it off (a caller's quiet mode).
        console: where to draw instead of a new stderr Console (tests pass a terminal one).
        delay_s: seconds before anything is drawn (default `DELAY_S`).

    Example:
        >>> with progress("analysing ranks", total=len(paths)) as advance:  # doctest: +SKIP
        ...     for p in paths:
        ...         work(p)
        ...         advance()
    """
    if not enabled or not progress_enabled(console):
        yield _noop
        return
    try:
        shown = _Delayed(description, total, console, DELAY_S if delay_s is None else delay_s)
    except Exception:  # a timer that cannot start: no progress
        yield _noop
        return
    try:
        yield shown.advance
    finally:
        shown.close()
