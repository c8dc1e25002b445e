"""One call run beside the caller's work, on a helper thread, when the caller has cores to spare.

Most of an analysis is numpy work on large arrays, which releases the GIL: two independent
parts (a GPU's launch statistics and its critical path, say) then run on two cores at once.
With `jobs` 1 the call runs in the caller's thread when its result is asked for, so the work
and its result are the same either way (the parts share no state but read-only arrays).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["Beside"]


class Beside(Generic[T]):
    """`fn(*args, **kwargs)`, started on a thread at once if `jobs > 1`, else when asked.

    `result()` waits for it and returns its value, or raises what it raised (in the caller's
    thread, with its traceback).
    """

    def __init__(self, jobs: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> None:
        self._call: Callable[[], T] = lambda: fn(*args, **kwargs)
        self._done = False
        self._once = threading.Lock()  # a call run when asked runs once, whoever asks
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if jobs > 1:
            self._thread = threading.Thread(target=self._run, name="badput-beside", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as e:  # handed to the caller by result()
            self._error = e
        self._done = True

    def result(self) -> T:
        if self._thread is not None:
            self._thread.join()
        elif not self._done:
            with self._once:  # two threads asking at once: one runs it, the other waits
                if not self._done:
                    self._run()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
