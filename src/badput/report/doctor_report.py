"""The doctor's checks as a table and as JSON.

The table goes through `badput.report.table.fitted` at the console's width: the evidence and
fix columns fold onto more lines at blanks (a number and its unit stay together), check ids
and statuses are never shortened, and no number is cut.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from badput.report.table import Col, fitted_table
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


# A number and its unit, kept on one line when a cell folds ("23.5 GiB", "1980 MHz").
_NUMBER_UNIT = re.compile(r"(?<=\d) (?=(?:%|[KMGT]i?B|B|MHz|W|C|s|ms|GB/s|MB/s|x)(?![\w/]))")
_KEEP = "\u00a0"  # no-break space: textwrap never breaks at it
# Where a word longer than the column (a path) may break: after one of these.
_BREAKS = "/_.,:-"


def _break_long(line: str, width: int) -> list[str]:
    """`line` in pieces of at most `width`, broken after a path separator, never in a number."""
    pieces: list[str] = []
    while cell_len(line) > width:
        cut = max((line.rfind(sep, 0, width) + 1 for sep in _BREAKS), default=0)
        if cut <= width // 3:
            cut = width
            while cut > width // 3 and line[cut - 1].isdigit() and line[cut].isdigit():
                cut -= 1  # a run of digits stays whole where it can
            if cut <= width // 3:
                cut = width
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


def _fold(cells: list[str], width: int) -> list[str]:
    """Prose cells folded onto lines of at most `width` at blanks: a number is never cut."""
    out = []
    for cell in cells:
        kept = _NUMBER_UNIT.sub(_KEEP, cell.replace(_KEEP, " "))
        lines = textwrap.wrap(kept, width, break_long_words=False, break_on_hyphens=False)
        folded = [p for line in lines or [kept] for p in _break_long(line, width)]
        out.append("\n".join(folded).replace(_KEEP, " "))
    return out


def render_checks(checks: Sequence[Check], console: Console) -> None:
    """One row per check (status, evidence, fix), then the count of each status."""
    cols = [
        Col("check"),
        Col("status"),
        Col("evidence", elastic=True, floor=24, shrink=_fold),
        Col("fix", elastic=True, floor=16, shrink=_fold),
    ]
    rows = [[c.id, str(c.status), c.evidence, c.fix] for c in checks]
    t = fitted_table(cols, rows, console.width)
    t.title = "badput doctor"
    status = t.columns[1]
    for cell, c in zip(status._cells, checks, strict=True):
        if isinstance(cell, Text):
            cell.stylize(_STYLE[c.status])
    console.print(t)
    counts = {s: sum(1 for c in checks if c.status is s) for s in Status}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
