"""How glibc's allocator serves a command's arrays, where the libc is glibc.

Reading a trace frees many piece-sized arrays; glibc keeps the freed memory in its heap
(the process's resident size stays at its peak) until it is trimmed. Trimming once after the
read halves what a 1 GB compact trace holds resident afterwards (`give_back_free_memory`).

The analyses allocate and free arrays of tens of MB by the hundred. glibc maps each large
one afresh (past its mmap threshold, 32 MB at most) and unmaps it when freed, so every such
array is written into new pages that the kernel must first zero: on a virtual machine that
is most of the analysis's system time. A `badput` command, whose process is its own, keeps
them in the heap instead (`keep_freed_memory`), so that a freed array's pages serve the next
one, and it does not trim after the read either: the analyses that follow reuse those pages.
Its threads share that one heap (glibc gives each thread an arena of its own otherwise, whose
freed memory the others cannot reuse: 865 instead of 1,047 MiB resident for the 1 GB
TraceLens shape on two cores). Elsewhere (macOS, musl, a libc without the calls) both do
nothing.

A command's arrays take their memory in few calls, not a page fault per page
(`make_resident`, `populate_heap`): the trace's columns as soon as their length is projected,
and the analyses' heap once the trace is read. A page fault (4 KiB) costs the kernel more
than the page's share of one call that faults in a whole range; on the 2-core virtual machine
of benchmarks/results/shapes.md, 0.50 ms/MB of page faults against 0.35-0.45 ms/MB in one call,
and the faults slow the work around them as well: about 4 % of the command's time.

A command also asks numpy not to advise huge pages for its arrays: where the kernel compacts
memory for a huge page on the fault (transparent huge pages with `defrag` at `madvise`, a
common default), each fresh 2 MB costs more than its 512 small pages. On the 2-core virtual
machine of benchmarks/results/shapes.md fresh memory took 1.7 ms/MB with the advice and
0.34 ms/MB without it.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "give_back_free_memory",
    "keep_freed_memory",
    "make_resident",
    "memory_kept",
    "populate_heap",
]

_KEPT: list[bool] = []  # set once `keep_freed_memory` took effect: the process is a command's

# mallopt(3) parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

# madvise(2): fault a range in now, as writes would (Linux 5.14; EINVAL before).
_MADV_POPULATE_WRITE = 23
_PAGE = 4096  # a multiple of the page size is all the advice needs (its start rounded up)
#: Ranges shorter than this are left to their page faults (one call buys too little).
MIN_RESIDENT_BYTES = 1 << 20
#: The most heap made resident in one block: freed, a block as large as the trim threshold
#: (`keep_freed_memory`: 2 GiB, mallopt's largest) would be given back to the system at once.
MAX_HEAP_BLOCK_BYTES = 3 << 29
_POPULATE_REFUSED: list[bool] = []  # set once the kernel refused the advice


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, None where there is none to be had.

    By glibc's soname first: `find_library` runs `ldconfig -p` in a child process (at every
    command's start, were it asked first), only where that soname does not load (musl).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        pass
    from ctypes import util

    name = util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


@functools.cache
def _trim() -> Callable[[int], int] | None:
    libc = _libc()
    try:
        trim: Callable[[int], int] = libc.malloc_trim  # type: ignore[union-attr]
    except AttributeError:  # no libc, or not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]  # type: ignore[attr-defined]
    trim.restype = ctypes.c_int  # type: ignore[attr-defined]
    return trim


def keep_freed_memory(numpy_too: bool = True) -> bool:
    """Serve large arrays from the heap and keep freed memory there; False where it cannot.

    For a process that is badput's own (a command), never inside a user's job: the heap
    then holds its peak until the process ends, less what `give_back_free_memory` returns.
    `numpy_too`: numpy is imported to be told (False: the heap alone, numpy not imported
    yet; a second call with it tells numpy).
    """
    libc = _libc()
    try:
        mallopt = libc.mallopt  # type: ignore[union-attr]
    except AttributeError:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if numpy_too:
        _no_huge_page_advice()
    try:  # no mmap per large array (the heap serves them), no trim as each is freed, and
        # one heap for every thread (a piece scanned on one thread, freed on another)
        kept = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
        kept = kept and bool(mallopt(_M_ARENA_MAX, 1))
    except OSError:
        return False
    if kept:
        _KEPT.append(True)
    return kept


def memory_kept() -> bool:
    """Whether this process keeps its freed memory (`keep_freed_memory` took effect)."""
    return bool(_KEPT)


def _no_huge_page_advice() -> None:
    """Ask numpy to advise no huge pages for the arrays it allocates from now on (if it can)."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, then 1
        try:
            switch = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if callable(switch):
            try:
                switch(False)
            except Exception:
                return
            return


def give_back_free_memory() -> bool:
    """Return the heap's free memory to the system; False where the libc cannot.

    Nothing in a process that keeps its freed memory (`keep_freed_memory`).
    """
    trim = _trim()
    if trim is None or _KEPT:
        return False
    try:
        trim(0)
    except OSError:
        return False
    return True


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    libc = _libc()
    try:
        madvise: Callable[[int, int, int], int] = libc.madvise  # type: ignore[union-attr]
    except AttributeError:
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]  # type: ignore[attr-defined]
    madvise.restype = ctypes.c_int  # type: ignore[attr-defined]
    return madvise


@functools.cache
def _heap_calls() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None:
    """The C library's malloc, free and mallinfo2 (glibc 2.33 and later), else None."""
    libc = _libc()
    try:
        malloc, free, info = libc.malloc, libc.free, libc.mallinfo2  # type: ignore[union-attr]
    except AttributeError:
        return None
    malloc.argtypes, malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    free.argtypes, free.restype = [ctypes.c_void_p], None
    info.argtypes, info.restype = [], _MallInfo2
    return malloc, free, info


def make_resident(address: int, nbytes: int, jobs: int = 1) -> int:
    """Fault in the whole pages of `nbytes` at `address` now; the bytes made resident.

    In one `madvise(MADV_POPULATE_WRITE)` call (two threads with `jobs` of 2 or more), not a
    fault per page when the memory is first written. For a process that keeps its freed
    memory (`keep_freed_memory`): the memory is its own and will be written (the caller
    knows it); 0 elsewhere, for a range under `MIN_RESIDENT_BYTES`, or where the kernel has
    no such advice (the pages then fault as they are written, as ever).
    """
    if not _KEPT or _POPULATE_REFUSED:
        return 0
    madvise = _madvise()
    lo = (address + _PAGE - 1) // _PAGE * _PAGE
    hi = (address + nbytes) // _PAGE * _PAGE
    if madvise is None or hi - lo < MIN_RESIDENT_BYTES:
        return 0
    parts = [(lo, hi)]
    if jobs > 1:
        mid = (lo + hi) // 2 // _PAGE * _PAGE
        parts = [(lo, mid), (mid, hi)]
    failed: list[bool] = []

    def fault_in(a: int, b: int) -> None:  # ctypes lets go of the GIL for the call
        if madvise(a, b - a, _MADV_POPULATE_WRITE) != 0:
            failed.append(True)

    helper = None
    if len(parts) > 1:
        helper = threading.Thread(target=fault_in, args=parts[1], daemon=True)
        try:
            helper.start()
        except RuntimeError:  # no thread to be had: this one does both halves
            helper, parts = None, [(lo, hi)]
    fault_in(*parts[0])
    if helper is not None:
        helper.join()
    if failed:  # EINVAL: a kernel before 5.14 (or ENOMEM, EFAULT: the pages fault later)
        _POPULATE_REFUSED.append(True)
        return 0
    return hi - lo


def populate_heap(nbytes: int, jobs: int = 1) -> int:
    """Have `nbytes` of free heap resident (`make_resident`); the bytes made resident.

    The heap's free memory counts toward them (freed, never trimmed: resident already); the
    rest is one block allocated, made resident and freed, which the next arrays are then
    cut from, up to `MAX_HEAP_BLOCK_BYTES`. For a process that keeps its freed memory, with
    glibc; 0 elsewhere. The caller bounds `nbytes` by the memory the process may still use
    (an estimate made resident must not be what runs it out).
    """
    calls = _heap_calls()
    if not _KEPT or calls is None or nbytes < MIN_RESIDENT_BYTES:
        return 0
    malloc, free, info = calls
    want = min(nbytes - int(info().fordblks), MAX_HEAP_BLOCK_BYTES)
    if want < MIN_RESIDENT_BYTES:
        return 0
    block = malloc(want)
    if not block:
        return 0
    try:
        return make_resident(int(block), want, jobs)
    finally:
        free(block)
