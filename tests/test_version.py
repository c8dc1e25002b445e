"""The package's version is the installed distribution's, read without importlib.metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import badput


def test_version_is_the_distributions() -> None:
    assert badput.__version__ == version("badput")


def test_import_leaves_the_meter_and_telemetry_for_later() -> None:
    # What `import badput` itself brought in (the interpreter's start-up may import more).
    code = (
        "import sys; before = set(sys.modules); import badput; new = set(sys.modules) - before; "
        "print(sorted(m for m in ('badput.meter', 'badput.telemetry', 'importlib.metadata') "
        "if m in new)); "
        "badput.Meter; print('badput.meter' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]
