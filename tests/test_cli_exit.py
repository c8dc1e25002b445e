"""`badput analyze` ends its own process without the interpreter's shutdown (`app._leave`).

What must survive that: the report (to a file and to a pipe), the exit code (0, 1 for a failed
gate, 2 for bad input), the process's exit handlers, and a thread that still runs (then the
usual shutdown waits for it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synth_timeline import standard_timeline, write_kineto

_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kineto(standard_timeline(steps=2), tmp_path_factory.mktemp("exit") / "t.json")


def _badput(*args: object, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m badput ARGS`, or, with `code`, that Python run first in the same process."""
    argv = [str(a) for a in args]
    if code is None:
        command = [sys.executable, "-m", "badput", *argv]
    else:
        script = f"import sys\n{code}\nfrom badput.cli.app import main\nsys.exit(main())\n"
        command = [sys.executable, "-c", script, *argv]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def test_the_report_reaches_a_file_and_a_pipe(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    to_file = _badput("analyze", trace, "--format", "json", "--out", out)
    assert to_file.returncode == 0, to_file.stderr
    to_pipe = _badput("analyze", trace, "--format", "json")
    assert to_pipe.returncode == 0, to_pipe.stderr
    assert json.loads(out.read_text()) == json.loads(to_pipe.stdout)
    text = _badput("analyze", trace)
    assert text.returncode == 0 and "goodput" in text.stdout.lower(), text.stderr


def test_exit_codes_of_a_gate_and_of_bad_input(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "gated.json"
    gated = _badput("analyze", trace, "--format", "json", "--out", out, "--min-goodput", "1.0")
    assert gated.returncode == 1, gated.stderr
    assert json.loads(out.read_text())["gates"]  # the report is written before the exit
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ')
    refused = _badput("analyze", bad, "--format", "json", "--strict")
    assert refused.returncode == 2
    assert str(bad) in refused.stderr and "Traceback" not in refused.stderr


def test_exit_handlers_run(trace: Path, tmp_path: Path) -> None:
    mark = tmp_path / "handler-ran"
    code = f"import atexit, pathlib\natexit.register(pathlib.Path({str(mark)!r}).touch)"
    done = _badput("analyze", trace, "--format", "json", "--out", tmp_path / "r.json", code=code)
    assert done.returncode == 0, done.stderr
    assert mark.exists()


def test_a_running_thread_is_waited_for(trace: Path, tmp_path: Path) -> None:
    # A non-daemon thread still running when the report is done: the process ends the usual
    # way, after it (here it writes a file half a second after the report).
    mark, report = tmp_path / "thread-done", tmp_path / "r.json"
    code = (
        "import pathlib, threading, time\n"
        "def late():\n"
        f"    while not pathlib.Path({str(report)!r}).exists():\n"
        "        time.sleep(0.01)\n"
        "    time.sleep(0.5)\n"
        f"    pathlib.Path({str(mark)!r}).touch()\n"
        "threading.Thread(target=late).start()"
    )
    done = _badput("analyze", trace, "--format", "json", "--out", report, code=code)
    assert done.returncode == 0, done.stderr
    assert mark.exists()


@pytest.mark.parametrize("command", ["analyze", "run"])
def test_the_command_process_collects_rarely(command: str, tmp_path: Path) -> None:
    # `badput.cli.main` (the console script, `python -m badput`) imports the command line with
    # the collector paused, freezes what it made, and raises the collector's threshold in the
    # command's own process; `run`'s process is the user's job: its threshold stays.
    script = (
        "import gc, sys\n"
        "default = gc.get_threshold()[0]\n"
        "import badput.cli.app as app\n"
        "def probe(argv=None):\n"
        "    print(gc.isenabled(), gc.get_freeze_count() > 1000, gc.get_threshold()[0])\n"
        "    return 0\n"
        "app.main = probe\n"
        "from badput.cli import main, COMMAND_GC_THRESHOLD\n"
        "print(COMMAND_GC_THRESHOLD, default)\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, command, "--help"],
        capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, state = done.stdout.splitlines()
    threshold, default = first.split()
    assert state == ("True True " + (threshold if command == "analyze" else default))
    assert int(threshold) > int(default)


_THREADS_AFTER = (
    "import os, sys\n"
    "{setup}\n"
    "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))\n"
)


def _threads_after(setup: str, *env: tuple[str, str]) -> tuple[int, str]:
    """The threads of a fresh process after `setup`, and its OPENBLAS_NUM_THREADS then."""
    import os

    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", _THREADS_AFTER.format(setup=setup)],
        capture_output=True, text=True, timeout=_TIMEOUT_S, env=environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    threads, value = done.stdout.split()
    return int(threads), value


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or len(os.sched_getaffinity(0)) < 2,
    reason="counts a process's threads in /proc, with two cores or more",
)
def test_a_trace_command_imports_numpy_with_one_blas_thread() -> None:
    # numpy's OpenBLAS starts a thread per core as it loads, each spinning for work a while:
    # a trace command's process imports numpy with one (badput makes no BLAS call), and its
    # children inherit the environment as it was; a value the user set stands.
    plain, _ = _threads_after("import numpy")
    if plain == 1:
        pytest.skip("this numpy's BLAS starts no threads of its own")
    ours = "sys.argv = ['badput', 'analyze']\nimport badput.cli as c\nc._numpy_on_one_blas_thread()"
    assert _threads_after(ours) == (1, "None")
    two = ("OPENBLAS_NUM_THREADS", "2")
    later = ours + "\nimport numpy"  # imported later, as the user's value has it
    assert _threads_after(later, two) == _threads_after("import numpy", two) == (2, "2")
