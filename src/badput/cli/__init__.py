"""The `badput` command line."""

from __future__ import annotations

import sys

#: The cyclic collector's first threshold in a command's own process (Python's default: 700).
#: A command makes few cycles and its arrays are not the collector's; what it allocates as
#: Python objects is the modules' and the pieces' lists and texts, the collector's passes over
#: which cost 14 ms of a 2 s `analyze` at the default, none at this threshold.
COMMAND_GC_THRESHOLD = 200_000


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
        from badput.cli.app import main as run
    finally:
        gc.freeze()
        gc.enable()
    if sys.argv[1:2] != ["run"]:
        gc.set_threshold(COMMAND_GC_THRESHOLD)
    return run()
