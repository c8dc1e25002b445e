"""The scanner's profile-guided build (setup.py): its training traces and its training run."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _setup_constants() -> dict[str, object]:
    """TRAINING and _TRAIN as setup.py defines them (setup.py is not imported: it builds)."""
    found: dict[str, object] = {}
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("TRAINING", "_TRAIN"):
                found[target.id] = ast.literal_eval(node.value)
    return found


def test_training_traces_exist_and_no_benchmark_shape_replicates_one() -> None:
    training = _setup_constants()["TRAINING"]
    assert isinstance(training, tuple) and len(training) >= 3
    shapes = (ROOT / "benchmarks" / "make_shapes.py").read_text()
    sources = set(re.findall(r'TRACES / "([^"]+)"', shapes))
    assert len(sources) == 3  # the shapes' sources, as make_shapes.py names them
    for path in training:
        assert (ROOT / path).is_file(), path
        assert path.removeprefix("tests/data/traces/") not in sources, path


def test_training_run_scans_every_trace() -> None:
    """The child process setup.py runs, against the built scanner: it matches many events."""
    scan = pytest.importorskip("badput.trace._scan")
    constants = _setup_constants()
    script = str(constants["_TRAIN"]) + "\nprint(module.layouts_matched())\n"
    training = [str(ROOT / p) for p in constants["TRAINING"]]  # type: ignore[attr-defined]
    run = subprocess.run(
        [sys.executable, "-c", script, str(scan.__file__), *training],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # The five traces hold 10,383 events the scanner keeps, 10,166 of them matched by a
    # learnt layout: each of the four larger traces (1,308 to 5,076 events) is needed to pass.
    assert int(run.stdout.split()[-1]) >= 9_000
