"""The text report, rendered at a fixed width, against reviewed golden files.

Regenerate with `make golden` after a deliberate change, and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from badput.cli.app import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("analyze_resnet50.txt", [str(DEMO)]),
        ("analyze_resnet50_top3_steps6-8.txt", [str(DEMO), "--top", "3", "--window", "steps:6-8"]),
    ],
)
def test_text_report_matches_golden(tmp_path: Path, name: str, args: list[str]) -> None:
    out = tmp_path / name
    assert main(["analyze", *args, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    golden = GOLDEN / name
    if os.environ.get("BADPUT_REGEN_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
