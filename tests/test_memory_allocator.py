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


@pytest.mark.skipif(not GLIBC, reason="glibc's soname")
def test_the_c_library_loads_without_a_child_process() -> None:
    # `find_library` runs `ldconfig -p` in a child process: every command's start paid for
    # it. In a fresh process, with it made to fail, the C library (and C++'s) still load.
    code = (
        "from ctypes import util\n"
        "def refuse(name): raise AssertionError('find_library ran')\n"
        "util.find_library = refuse\n"
        "from badput._memory import _libc, keep_freed_memory\n"
        "from badput.report.names import _cxa_demangle\n"
        "print(_libc() is not None, keep_freed_memory(), _cxa_demangle() is not None)\n"
    )
    assert _in_fresh_process(code).split() == ["True", "True", "True"]


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


_FAULTS_AFTER = (
    "import resource\n"
    "def faults():\n"
    "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
)


def _with_and_without(code: str) -> tuple[list[str], list[str]]:
    """What `code` prints in a fresh process with POPULATE True, then with it False."""
    return tuple(  # type: ignore[return-value]
        _in_fresh_process(f"POPULATE = {on}\n{_FAULTS_AFTER}{code}").split() for on in (True, False)
    )


@pytest.mark.skipif(not GLIBC, reason="glibc's heap only")
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_populated_heap_serves_the_next_arrays_without_page_faults(jobs: int) -> None:
    # In a fresh process: 64 MiB of heap made resident in one call (two threads with two
    # jobs), then a 64 MiB array written: it takes the populated pages, nearly no fault;
    # without the call the same array faults once per page (4 KiB: 16,384; 32 huge pages).
    (made, populated, refused), (_, faulted, _) = _with_and_without(
        "import numpy as np\n"
        "from badput._memory import keep_freed_memory, populate_heap, _POPULATE_REFUSED\n"
        "assert keep_freed_memory()\n"
        f"made = populate_heap(66 << 20, jobs={jobs}) if POPULATE else 0\n"
        "f0 = faults()\n"
        "a = np.ones(8 << 20)\n"
        "print(made, faults() - f0, bool(_POPULATE_REFUSED))\n"
    )
    if refused == "True":  # a kernel before 5.14: nothing made resident, the pages fault
        assert int(made) == 0
        return
    assert int(made) >= 64 << 20
    # At least one fault per huge page (32 of 2 MiB) where the system hands out those.
    assert int(faulted) >= 32 and int(populated) * 8 <= int(faulted), (populated, faulted)


@pytest.mark.skipif(not GLIBC, reason="glibc's heap only")
def test_a_heap_block_made_resident_stays_under_the_trim_threshold() -> None:
    # Freed, a block as large as the trim threshold would be trimmed away with its pages: one
    # block is at most MAX_HEAP_BLOCK_BYTES (here lowered to 32 MiB), and what it made
    # resident stays in the heap: the next 64 MiB array faults for about its other half.
    (made, half, refused), (_, whole, _) = _with_and_without(
        "import numpy as np\n"
        "import badput._memory as memory\n"
        "assert memory.keep_freed_memory()\n"
        "memory.MAX_HEAP_BLOCK_BYTES = 32 << 20\n"
        "made = memory.populate_heap(64 << 20) if POPULATE else 0\n"
        "f0 = faults(); a = np.ones(8 << 20)\n"
        "print(made, faults() - f0, bool(memory._POPULATE_REFUSED))\n"
    )
    if refused == "True":
        return
    assert (32 << 20) - 4096 <= int(made) <= 32 << 20
    assert int(whole) >= 32 and 0.3 * int(whole) <= int(half) <= 0.7 * int(whole), (half, whole)


@pytest.mark.skipif(not GLIBC, reason="glibc's heap only")
def test_a_reserved_columns_projected_rows_are_made_resident() -> None:
    # A column reserved for 16 M rows with 8 M expected to be written: those 8 M rows' pages
    # (64 MiB) are resident at once, so writing them faults almost never; the rows beyond
    # stay address space (writing them faults as ever).
    code = (
        _FAULTS_AFTER + "import numpy as np\n"
        "from badput._memory import keep_freed_memory, _POPULATE_REFUSED\n"
        "from badput.trace._kineto_columns import _Growing\n"
        "assert keep_freed_memory()\n"
        "g = _Growing(np.int64)\n"
        "g.append(np.arange(1000, dtype=np.int64))\n"
        "g.reserve(16 << 20, filled=8 << 20)\n"
        "assert g.buf[:1000].tolist() == list(range(1000))\n"
        "f0 = faults(); g.buf[1000 : 8 << 20] = 7; f1 = faults(); g.buf[8 << 20 :] = 7\n"
        "print(f1 - f0, faults() - f1, bool(_POPULATE_REFUSED))\n"
    )
    inside, beyond, refused = _in_fresh_process(code).split()
    if refused == "True":
        return
    assert int(beyond) >= 32 and int(inside) * 8 <= int(beyond), (inside, beyond)


def test_nothing_is_made_resident_outside_a_commands_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In a user's process (a library call) the memory is theirs: no call faults it in.
    import numpy as np

    import badput._memory as memory

    monkeypatch.setattr(memory, "_KEPT", [])
    a = np.empty(4 << 20)
    assert memory.make_resident(a.ctypes.data, a.nbytes) == 0
    assert memory.populate_heap(64 << 20) == 0
    # Under the least range worth a call, nothing either (even in a command's process).
    monkeypatch.setattr(memory, "_KEPT", [True])
    assert memory.make_resident(a.ctypes.data, memory.MIN_RESIDENT_BYTES - 1) == 0


def test_the_analysis_makes_its_heap_resident_once_per_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before it analyses a trace with GPU activity and a launch tree, a command's analysis
    # asks for its measured heap per row at once, with its jobs; without the model view, or
    # in a user's process, it asks none.
    import badput._memory as memory
    import badput.analysis.device as device_mod
    from badput.analysis import analyze_trace
    from badput.trace import load_trace
    from conftest import SHARED_TRACES, reference

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(device_mod, "populate_heap", lambda n, jobs=1: calls.append((n, jobs)))
    name = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(reference(SHARED_TRACES / name)))
    monkeypatch.setattr(memory, "_KEPT", [])
    analyze_trace(trace, jobs=2, critical_paths=False)
    assert calls == []
    monkeypatch.setattr(memory, "_KEPT", [True])
    analyze_trace(trace, jobs=2, critical_paths=False)
    assert calls == [(device_mod.ANALYSIS_HEAP_BYTES_PER_ROW * len(trace), 2)]
    analyze_trace(trace, jobs=1, critical_paths=False, model=False)
    assert len(calls) == 1
    # Never more than half the memory the process may still use (machine, cgroup, ulimit).
    monkeypatch.setattr(device_mod, "available_memory_bytes", lambda: 6 << 20)
    analyze_trace(trace, jobs=1, critical_paths=False)
    assert calls[1:] == [(3 << 20, 1)]
