"""Modules imported beside a trace's read (`badput._imports.import_beside`, `analyze_path`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from badput._imports import import_beside


def _fresh(code: str) -> str:
    """What `code` prints in a new interpreter (imports are per process)."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return run.stdout.strip()


def test_modules_are_imported_on_a_daemon_thread() -> None:
    code = (
        "import sys\n"
        "from badput._imports import import_beside\n"
        "t = import_beside(['colorsys', 'badput.analysis.intervals'])\n"
        "t.join(60)\n"
        "print(t.daemon, t.name, 'colorsys' in sys.modules, 'badput.analysis.intervals' in "
        "sys.modules)\n"
    )
    assert _fresh(code) == "True badput-imports True True"


def test_a_module_that_fails_fails_where_the_caller_imports_it(tmp_path: Path) -> None:
    (tmp_path / "broken_for_badput_test.py").write_text("raise RuntimeError('boom')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import_beside(["broken_for_badput_test", "colorsys"]).join(60)
        with pytest.raises(RuntimeError, match="boom"):
            import broken_for_badput_test  # noqa: F401
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("broken_for_badput_test", None)


def test_the_cli_reaches_the_read_without_the_analyses() -> None:
    # For the analyses to be imported beside the scan, nothing before the read imports them:
    # the command line, its job runner and the per-trace task.
    code = (
        "import sys\n"
        "import badput.cli.app, badput.cli.jobs, badput.scale, badput.scale.work, badput.trace\n"
        "print(sorted(m for m in sys.modules if m.startswith(('badput.analysis', "
        "'badput.diagnose', 'badput.report.json_report'))))\n"
    )
    assert _fresh(code) == "[]"
