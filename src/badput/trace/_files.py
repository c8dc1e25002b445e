"""Input paths must name regular files: told from `os.stat`, before anything opens them.

Opening a FIFO (named pipe) for reading blocks until a writer appears, which may be never;
reading a character device such as `/dev/zero` or `/dev/urandom` never ends; a socket cannot
be opened at all. So every reader of user files asks `file_problem` first, which only stats
the path (following symbolic links, as `open` would) and opens nothing.
"""

from __future__ import annotations

import errno
import os
import stat

from badput.errors import TraceFormatError

__all__ = ["file_problem", "is_regular_file", "require_regular_file"]

# What each kind of non-regular file is called in the error; the test order does not matter,
# since a file has exactly one type.
_KINDS = (
    (stat.S_ISFIFO, "is a FIFO, not a regular file"),
    (stat.S_ISCHR, "is a character device, not a regular file"),
    (stat.S_ISBLK, "is a block device, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
)


def file_problem(path: str) -> str | None:
    """Why `path` cannot be read as an input file, in words for the user; None when it can.

    Only stats the path: nothing is opened, so a FIFO or device is refused without blocking.

    Args:
        path: the path as the user gave it.

    Returns:
        "no such file", "is a directory", "is a FIFO, not a regular file", ...;
        None for a regular file (or a symbolic link to one).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except ValueError:  # os.stat refuses a path with a NUL character before asking the system
        return "not a valid path (it contains a NUL character)"
    except OSError as e:
        if e.errno == errno.ENOTDIR:  # `trace.json/x`: a file where a directory should be
            return "no such file (a part of the path is not a directory)"
        return f"cannot be read ({e.strerror or type(e).__name__})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    for test, problem in _KINDS:
        if test(mode):
            return problem
    return "is not a regular file"


def is_regular_file(path: str) -> bool:
    """Whether `path` is a regular file (or a link to one), without opening it."""
    return file_problem(path) is None


def require_regular_file(path: str) -> None:
    """Raise unless `path` is a regular file; call before opening a user's file.

    Raises:
        TraceFormatError: the path is missing, a directory, a FIFO, a device, a socket, or
            cannot be statted; the message names the path and says which.
    """
    problem = file_problem(path)
    if problem is not None:
        raise TraceFormatError(path, problem)
