"""`badput roofline`, `memory` and `estimate` rendered at 80, 100 and 160 columns, against
reviewed golden files (regenerate with `BADPUT_REGEN_GOLDEN=1` and review the diff).

Inputs: the real ncu export (`copy_blocked.csv`, copied so the path printed is its bare name),
the hand-worked snapshot of `test_memory_snapshot.known_snapshot` and three estimate commands.
Every output line fits its width and no number is cut (no digit, `,` or `.` beside a `…`).
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from synth import run_cli
from test_memory_snapshot import known_snapshot

GOLDEN = Path(__file__).parent / "golden"
WIDTHS = (80, 100, 160)
CUT_NUMBER = re.compile(r"[\d,.]…|…[\d,.]")

CASES: dict[str, list[str]] = {
    "roofline_copy_blocked": ["roofline", "copy_blocked.csv"],
    "memory_known_snapshot": ["memory", "snap.pickle", "--params", "7B", "--gpus", "8"],
    "estimate_memory_over_h100": ["estimate", "memory", "--params", "4.96B", "--gpu", "H100"],
    "estimate_memory_activations": [
        *("estimate", "memory", "--params", "7B", "--gpus", "8", "--zero", "1", "--gpu", "H100"),
        *("--layers", "32", "--d-model", "4096", "--seq-len", "4096", "--micro-batch", "1"),
        *("--heads", "32", "--recompute", "full"),
    ],
    "estimate_train_70b": [
        *("estimate", "train", "--params", "70B", "--tokens", "15T", "--gpu", "H100"),
        *("--gpus", "1024", "--mfu", "0.4"),
    ],
}


def check_fits(text: str, width: int) -> None:
    """Every line within `width` cells; no number shortened."""
    for line in text.splitlines():
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
        assert not CUT_NUMBER.search(line), f"a number cut: {line!r}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(
    case: str,
    width: int,
    tmp_path: Path,
    shared_traces: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copy(shared_traces / "ncu" / "copy_blocked.csv", tmp_path / "copy_blocked.csv")
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(known_snapshot(), protocol=4))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run_cli(capsys, *CASES[case])
    assert code == 0, err
    check_fits(out, width)
    golden = GOLDEN / f"{case}_{width}.txt"
    if os.environ.get("BADPUT_REGEN_GOLDEN"):
        golden.write_text(out, encoding="utf-8")
    assert out == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "ok"),
    [("1,058.9 us", True), ("21,05… us", False), ("…9 us", False), ("copy_bl…XagIA]", True)],
)
def test_the_check_catches_cut_numbers(text: str, ok: bool) -> None:
    if ok:
        check_fits(text, 80)
    else:
        with pytest.raises(AssertionError):
            check_fits(text, 80)
