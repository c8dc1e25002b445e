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


def _resident(address: int, nbytes: int) -> list[bool]:
    """Whether each page of [address, address + nbytes) is in memory (mincore(2))."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    pages = (nbytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(ctypes.c_void_p(address), nbytes, vec) == 0, ctypes.get_errno()
    return [bool(v & 1) for v in vec]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and mincore")
def test_populate_maps_the_pages_a_write_will_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a command, the whole pages of the range after its first one, and the one holding its
    end, are mapped at once; outside a command nothing is."""
    import ctypes
    import mmap

    import badput._memory as memory

    page = mmap.PAGESIZE
    area = mmap.mmap(-1, 64 * page)  # fresh anonymous pages: none resident yet
    cell = ctypes.c_char.from_buffer(area)
    address = ctypes.addressof(cell)
    try:
        assert not any(_resident(address, 64 * page))
        monkeypatch.setattr(memory, "_KEPT", [])
        memory.populate(address + 100, 40 * page)  # not a command's process: nothing
        assert not any(_resident(address, 64 * page))
        monkeypatch.setattr(memory, "_KEPT", [True])
        monkeypatch.setattr(memory, "_POPULATE", [True])
        memory.populate(address + 100, 40 * page)
        if not memory._POPULATE[0]:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)")
        want = [1 <= i <= 40 for i in range(64)]  # page 0 holds the start: left out
        assert _resident(address, 64 * page) == want
        memory.populate(address + 50 * page, 10 * page)  # under 16 pages: left to the writes
        assert _resident(address, 64 * page) == want
        assert area[: 64 * page] == bytes(64 * page)  # mapped, not written
    finally:
        del cell
        area.close()
