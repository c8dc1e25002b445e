"""The doctor's checks as a table and as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.telemetry.gpu_checks import Check, Status

__all__ = ["doctor_document", "encode_doctor", "render_checks"]

_STYLE = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.NA: "dim"}


def doctor_document(checks: Sequence[Check]) -> dict[str, Any]:
    """`{"checks": [{"id", "status", "evidence", "fix"}]}`, the contract scripts rely on."""
    return {
        "checks": [
            {"id": c.id, "status": str(c.status), "evidence": c.evidence, "fix": c.fix}
            for c in checks
        ]
    }


def encode_doctor(checks: Sequence[Check]) -> str:
    """The JSON document as text, with a final newline."""
    return json.dumps(doctor_document(checks), indent=2) + "\n"


def render_checks(checks: Sequence[Check], console: Console) -> None:
    """One row per check (status, evidence, fix), then the count of each status."""
    t = Table(
        box=None, pad_edge=False, header_style="bold", title="badput doctor", title_justify="left"
    )
    t.add_column("check", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("evidence", overflow="fold")
    t.add_column("fix", overflow="fold")
    for c in checks:
        t.add_row(c.id, Text(str(c.status), style=_STYLE[c.status]), c.evidence, c.fix)
    console.print(t)
    counts = {s: sum(1 for c in checks if c.status is s) for s in Status}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
