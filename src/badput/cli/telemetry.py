"""`badput telemetry record -- CMD`: run a command with the system sampler on."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Annotated

import typer

from badput.cli.child import exit_status, owned_child
from badput.cli.common import new_console
from badput.errors import UsageError

if TYPE_CHECKING:
    from badput.telemetry.sampler import Sampler

__all__ = ["record_command", "telemetry_app"]

telemetry_app = typer.Typer(
    name="telemetry",
    help="Sample GPU and host metrics (NVML, /proc) while a command runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def record_command(command: list[str], out: str, hz: float) -> int:
    """Run `command` with a `Sampler` watching it; print the sampler's summary on stderr.

    The command is owned as `badput run` owns it (`badput.cli.child`).

    Returns:
        The command's status: its exit code, or 128+N when signal N killed it.

    Raises:
        UsageError: no command, a command that cannot start, or a bad rate or file.
    """
    from badput.report.telemetry_report import render_sampler_summary
    from badput.telemetry.sampler import Sampler
    from badput.telemetry.sources import TelemetryError

    if not command:
        raise UsageError("nothing to run: badput telemetry record [--hz 10] [--out F] -- CMD")
    if not hz > 0:
        raise UsageError(f"--hz must be positive, got {hz}")
    with owned_child(command) as proc:
        try:
            sampler = Sampler(out, hz, pid=proc.pid)
        except TelemetryError as e:
            raise UsageError(str(e)) from None  # leaving the block ends the command
        sampler.start()
        code = exit_status(_wait_with_progress(proc, sampler, hz))
    summary = sampler.stop()
    render_sampler_summary(summary, new_console(stderr=True))
    return code


#: How often the progress display polls the command and the sampler's count, seconds.
_POLL_S = 0.25


def _wait_with_progress(proc: subprocess.Popen[bytes], sampler: Sampler, hz: float) -> int:
    """Wait for the command; meanwhile progress on stderr: rate, samples and time elapsed.

    The display is `badput.cli.progress`: on a terminal only, after a couple of seconds, and
    gone when the command ends. There is no known duration (the command decides), so it is a
    spinner with the samples taken so far and the elapsed time; each poll advances it by the
    samples taken since the last.
    """
    from badput.cli.progress import progress

    seen = 0
    with progress(f"telemetry record: sampling at {hz:g} Hz") as advance:
        while True:
            try:
                return proc.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                pass
            taken = len(sampler.columns["ts_ns"])
            if taken > seen:
                advance(taken - seen)
                seen = taken


@telemetry_app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def record(
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="The samples: .jsonl, or .parquet (needs pyarrow)."),
    ] = "telemetry.jsonl",
    hz: Annotated[float, typer.Option("--hz", help="Samples per second.")] = 10.0,
) -> None:
    """Run a command and sample GPUs (NVML) and host (CPU per core, RSS, disk, network).

    Exits with the command's exit code.

    Example:
        badput telemetry record --hz 10 --out telemetry.jsonl -- python train.py
    """
    code = record_command(command, out, hz)
    if code:
        raise typer.Exit(code)
