"""badput's own processes keep freed memory in glibc's heap; elsewhere the calls do nothing."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from badput._memory import give_back_free_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _in_fresh_process(code: str) -> str:
    """What `code` prints in a new interpreter (the allocator settings last for a process)."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return run.stdout


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt and malloc_trim only")
def test_a_command_keeps_large_arrays_in_the_heap() -> None:
    # In a fresh process (the setting lasts for the process): a 64 MB array freed and a
    # second one allocated reuse the same heap pages instead of a new mapping each.
    code = (
        "import numpy as np, resource\n"
        "from badput._memory import keep_freed_memory\n"
        "assert keep_freed_memory()\n"
        "a = np.ones(8 << 20); del a\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "b = np.ones(8 << 20)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)\n"
    )
    kept = int(_in_fresh_process(code))
    fresh = int(_in_fresh_process(code.replace("assert keep_freed_memory()\n", "")))
    # A fresh 64 MB mapping faults at least once per huge page (32 of 2 MiB; up to 16,384
    # of 4 KiB without them); the reused heap pages fault almost never.
    assert fresh >= 32 and kept * 8 <= fresh, (kept, fresh)


def test_trim_runs_or_says_it_cannot() -> None:
    assert give_back_free_memory() is GLIBC


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt and malloc_trim only")
def test_a_command_asks_no_huge_pages_and_does_not_trim() -> None:
    # In a fresh process: numpy's huge-page advice, switched on, is off once the process keeps
    # its freed memory (the switch returns its previous value), and the trim after a read
    # does nothing there (the analyses reuse the read's freed pages).
    code = (
        "import numpy as np\n"
        "from numpy._core.multiarray import _set_madvise_hugepage as switch\n"
        "from badput._memory import give_back_free_memory, keep_freed_memory\n"
        "switch(True)\n"
        "trimmed = give_back_free_memory()\n"
        "assert keep_freed_memory()\n"
        "print(trimmed, switch(True), give_back_free_memory())\n"
    )
    out = _in_fresh_process(code).split()
    assert out == ["True", "False", "False"], out


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt and malloc_trim only")
def test_a_commands_pool_workers_keep_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers a command's pool starts are the command's processes: they keep freed memory
    # as it does; a pool started elsewhere (a library call in a user's process) leaves them.
    import badput._memory as memory
    from badput.scale import LocalExecutor

    items = [(), ()]
    assert list(LocalExecutor(2).map(memory.memory_kept, items)) == [False, False]
    monkeypatch.setattr(memory, "_KEPT", [True])
    assert list(LocalExecutor(2).map(memory.memory_kept, items)) == [True, True]
