"""`badput run -- CMD...`: run a training script with the meter attached, no code changes.

badput owns the command it starts: the command runs in a process group of its own, the
signals that ask badput to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are passed on to that whole
group, and when the command ends no process of its group is left behind. badput exits with the
command's status: its exit code, or 128+N when signal N killed it, as a shell reports it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from badput.cli.child import exit_status, owned_child
from badput.cli.common import new_console
from badput.errors import UsageError

__all__ = ["run_metered"]

_AUTORUN = Path(__file__).resolve().parents[1] / "meter" / "_autorun"


def run_metered(command: list[str], out: str | None) -> int:
    """Run `command` with the meter attached to its Python process; print the summary.

    The command gets a process group of its own; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    badput while it runs are sent on to that group, and badput keeps waiting for the command.
    Processes of the group still alive after the command exits get SIGTERM, then SIGKILL.

    Args:
        command: the program and its arguments.
        out: where to write the summary as JSON; a temporary file without it.

    Returns:
        The command's status: its exit code, or 128+N when signal N killed it.

    Raises:
        UsageError: no command, or a command that cannot be started.
    """
    if not command:
        raise UsageError("nothing to run: badput run [--out F] -- python train.py ARGS")
    with tempfile.TemporaryDirectory(prefix="badput-run-") as tmp:
        path = out or os.path.join(tmp, "summary.json")
        env = dict(os.environ)
        env["BADPUT_RUN"] = "1"
        env["BADPUT_RUN_OUT"] = os.path.abspath(path)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_AUTORUN), env.get("PYTHONPATH")) if p)
        with owned_child(command, env) as child:
            code = exit_status(child.wait())
        console = new_console(stderr=True)
        try:
            with open(path, encoding="utf-8") as f:
                summary = json.load(f)
        except (OSError, ValueError):
            console.print(
                "badput run: no summary (the script did not reach exit, or is not a "
                "Python process that uses torch)",
                style="yellow",
            )
            return code
        from badput.report.meter_report import render_summary

        render_summary(summary, console)
    return code
