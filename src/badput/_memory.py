"""How glibc's allocator serves a command's arrays, where the libc is glibc.

Reading a trace frees many piece-sized arrays; glibc keeps the freed memory in its heap
(the process's resident size stays at its peak) until it is trimmed. Trimming once after the
read halves what a 1 GB compact trace holds resident afterwards (`give_back_free_memory`).

The analyses allocate and free arrays of tens of MB by the hundred. glibc maps each large
one afresh (past its mmap threshold, 32 MB at most) and unmaps it when freed, so every such
array is written into new pages
that the kernel must first zero: on a virtual machine that is most of the analysis's system
time. A `badput` command, whose process is its own, keeps them in the heap instead
(`keep_freed_memory`), so that a freed array's pages serve the next one. Elsewhere (macOS,
musl, a libc without the calls) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable

__all__ = ["give_back_free_memory", "keep_freed_memory"]

# mallopt(3) parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


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
    try:  # no mmap per large array (the heap serves them), no trim as each is freed
        return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    except OSError:
        return False


def give_back_free_memory() -> bool:
    """Return the heap's free memory to the system; False where the libc cannot."""
    trim = _trim()
    if trim is None:
        return False
    try:
        trim(0)
    except OSError:
        return False
    return True
