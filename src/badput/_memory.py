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

A command also asks numpy not to advise huge pages for its arrays: where the kernel compacts
memory for a huge page on the fault (transparent huge pages with `defrag` at `madvise`, a
common default), each fresh 2 MB costs more than its 512 small pages. On the 2-core virtual
machine of benchmarks/results/shapes.md fresh memory took 1.7 ms/MB with the advice and
0.34 ms/MB without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib
import sys
from collections.abc import Callable

__all__ = ["give_back_free_memory", "keep_freed_memory", "memory_kept"]

_KEPT: list[bool] = []  # set once `keep_freed_memory` took effect: the process is a command's

# mallopt(3) parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
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


def keep_freed_memory() -> bool:
    """Serve large arrays from the heap and keep freed memory there; False where it cannot.

    For a process that is badput's own (a command), never inside a user's job: the heap
    then holds its peak until the process ends, less what `give_back_free_memory` returns.
    """
    libc = _libc()
    try:
        mallopt = libc.mallopt  # type: ignore[union-attr]
    except AttributeError:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
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
