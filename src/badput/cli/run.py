"""`badput run -- CMD...`: run a training script with the meter attached, no code changes."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console

from badput.errors import UsageError

__all__ = ["run_metered"]

_AUTORUN = Path(__file__).resolve().parents[1] / "meter" / "_autorun"


def run_metered(command: list[str], out: str | None) -> int:
    """Run `command` with the meter attached to its Python process; print the summary.

    Returns:
        The command's exit code.

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
        try:
            code = subprocess.call(command, env=env)
        except OSError as e:
            raise UsageError(f"cannot run {command[0]!r}: {e.strerror}") from None
        console = Console(stderr=True)
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
