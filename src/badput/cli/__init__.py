"""The `badput` command line."""

from __future__ import annotations

import sys

#: The cyclic collector's first threshold in a command's own process (Python's default: 700).
#: A command makes few cycles and its arrays are not the collector's; what it allocates as
#: Python objects is the modules' and the pieces' lists and texts, the collector's passes over
#: which cost 14 ms of a 2 s `analyze` at the default, none at this threshold.
COMMAND_GC_THRESHOLD = 200_000

#: The commands that read traces: each imports numpy, here, with one BLAS thread.
TRACE_COMMANDS = frozenset({"analyze", "diff", "report", "annotate", "memory", "roofline"})

_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def main() -> int:
    """The `badput` command (its console script and `python -m badput`): `badput.cli.app.main`.

    The command line's modules are imported with the cyclic garbage collector paused, then
    frozen (the collections that follow pass them by); in the command's own process (any
    command but `run`, whose process is the user's job) the collector then runs far less
    often (`COMMAND_GC_THRESHOLD`).
    """
    import gc

    gc.disable()
    try:
        if sys.argv[1:2] == ["analyze"]:  # its trace's first pieces scanned beside the imports
            from badput.trace import _early

            _early.start(sys.argv[2:])
        if sys.argv[1:2] and sys.argv[1] in TRACE_COMMANDS:
            _numpy_on_one_blas_thread()
        from badput.cli.app import main as run
    finally:
        gc.freeze()
        gc.enable()
    if sys.argv[1:2] != ["run"]:
        gc.set_threshold(COMMAND_GC_THRESHOLD)
    return run()


def _numpy_on_one_blas_thread() -> None:
    """Import numpy with its OpenBLAS on one thread, the environment left as it was.

    As it loads, numpy's OpenBLAS starts a thread per core, and each spins, waiting for
    work, before it sleeps: on two cores 2 % of the CPU samples of a 1 GB `analyze` (perf),
    at its start, where the scan begins; badput makes no BLAS call. The library reads
    `OPENBLAS_NUM_THREADS` once, as it loads; the variable is removed again at once, so no
    child process (a benchmark's command, a worker) inherits it. A value the user set stands.
    """
    import os

    if _BLAS_THREADS in os.environ:
        return
    os.environ[_BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        os.environ.pop(_BLAS_THREADS, None)
