"""Pieces shared by the command modules."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from badput.errors import UsageError, printable

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "STEP_SUMMARY_ENV",
    "TRACE_INPUTS",
    "Format",
    "FormatOption",
    "OutOption",
    "ReportFormat",
    "appends",
    "json_out",
    "new_console",
    "stderr_line",
    "text_out",
    "write_html",
    "write_report",
]

#: Every input `badput.trace.load_trace` reads, in words for the help of each command that
#: takes a trace (the format is told by content: `badput.trace.load`).
TRACE_INPUTS = (
    "PyTorch profiler JSON (.json, .json.gz, e.g. *.pt.trace.json.gz) or an Nsight Systems "
    "SQLite export (.sqlite: `nsys export --type sqlite`; one process of it: "
    "FILE.sqlite#pid=N)"
)

#: The file GitHub Actions gives each step for its job summary (written with `>>`).
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


class Format(StrEnum):
    """Output formats of the commands that have no Markdown form (diff, doctor, estimate)."""

    TEXT = "text"
    JSON = "json"


#: `--format text|json` of the commands without a Markdown form.
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Report format.")]
#: `--out FILE` of the commands that print a report (stdout without it).
OutOption = Annotated[
    str | None, typer.Option("--out", "-o", help="Write the report to this file.")
]


class ReportFormat(StrEnum):
    """Output formats of `badput analyze`: `Format` and Markdown for CI step summaries.

    A separate enum rather than a member added to `Format`, so that the commands without a
    Markdown rendering refuse `--format markdown` at parse time (exit 2) instead of quietly
    printing text.
    """

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"


def appends(path: str, append: bool = False) -> bool:
    """Whether a report written to `path` goes at its end rather than replacing it.

    Always with `--append`; and for the file named by `$GITHUB_STEP_SUMMARY`, which GitHub
    documents as written with `>>`: one step may write several summaries into it, and
    replacing the file would drop the earlier ones.
    """
    if append:
        return True
    summary = os.environ.get(STEP_SUMMARY_ENV)
    if not summary:
        return False
    try:
        return os.path.samefile(summary, path)
    except OSError:
        return os.path.abspath(summary) == os.path.abspath(path)


def write_report(path: str, text: str, append: bool = False) -> None:
    """Write a text report to `path` (UTF-8), appending when `appends` says so.

    An appended report starts on a line of its own after a blank line, so that two Markdown
    documents in one file do not run into each other.
    """
    if appends(path, append):
        with open(path, "a+", encoding="utf-8") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                text = "\n" + text
            f.write(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def json_out(out: str | None, data: bytes) -> None:
    """A JSON document to the file `out`, or to stdout when None.

    Raises:
        UsageError: `out` cannot be written.
    """
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        with open(out, "wb") as f:
            f.write(data)
    except OSError as e:
        raise UsageError(f"--out {out}: {e.strerror}") from None


def new_console(**kwargs: Any) -> Console:
    """A rich Console; rich is imported on the first (30 ms a command that prints none spares)."""
    from rich.console import Console

    return Console(**kwargs)


@contextlib.contextmanager
def text_out(out: str | None, append: bool = False, width: int = 120) -> Iterator[Console]:
    """A rich Console writing to the file `out` (plain, `width` columns), or to the terminal.

    The file is appended to when `appends(out, append)` says so.

    Raises:
        UsageError: `out` cannot be opened or written.
    """
    if out is None:
        yield new_console()
        return
    try:
        with open(out, "a" if appends(out, append) else "w", encoding="utf-8") as f:
            yield new_console(file=f, width=width, no_color=True)
    except OSError as e:
        raise UsageError(f"--out {out}: {e.strerror}") from None


def write_html(path: str, page: str) -> None:
    """Write an `--html` page.

    Raises:
        UsageError: `path` cannot be written.
    """
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise UsageError(f"--html {path}: {e.strerror}") from None


def stderr_line(kind: str, message: str) -> None:
    """`badput: KIND: MESSAGE` as one line on stderr: redacted, control characters escaped.

    Every error, warning and gate line goes through here, so that neither a secret
    (`badput.trace.redact`) nor a crafted path (a newline in it would print a second, forged
    `badput: error:` line) reaches the terminal as it is.
    """
    from badput.trace.redact import redact_text

    sys.stderr.write(f"badput: {kind}: {printable(redact_text(message))}\n")
    sys.stderr.flush()
