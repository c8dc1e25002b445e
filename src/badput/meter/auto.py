"""Zero-code metering for `badput run`: hooks on DataLoader iteration and optimizer steps.

A step runs from the moment a batch arrives (when no step is open) to the end of the next
`optimizer.step()`; waits for further batches inside it (gradient accumulation) are data
wait. Without a DataLoader, each optimizer step ends one step and opens the next.
`torch.save` and `torch.distributed.checkpoint.save` count as the checkpoint phase. Evaluation
loops cannot be told apart from training without code: they count as idle (use
`Meter.phase("eval")` for that).
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterator
from typing import Any

from badput.meter.core import Meter

__all__ = ["OUT_ENV", "install"]

#: Where the child process writes its final summary (set by `badput run`).
OUT_ENV = "BADPUT_RUN_OUT"


class _TimedIterator:
    """Wraps a DataLoader iterator: times each batch and opens a step when it arrives."""

    def __init__(self, inner: Iterator[Any], meter: Meter, state: dict[str, bool]) -> None:
        self._inner = inner
        self._meter = meter
        self._state = state

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        meter = self._meter
        start = meter._clock()
        try:
            item = next(self._inner)
        finally:
            meter._add_data(meter._clock() - start)
        self._state["data_seen"] = True
        if not meter._in_step:
            meter._begin_step()
        return item

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install(out: str | None = None) -> Meter:
    """Attach a meter to this process's DataLoaders and optimizers; write its summary at exit.

    Args:
        out: JSON file for the final summary (default: `$BADPUT_RUN_OUT`, if set).
    """
    import torch.utils.data
    from torch.optim.optimizer import register_optimizer_step_post_hook

    meter = Meter(report_every=10**9)  # no periodic reports: one summary at exit
    state = {"data_seen": False}
    loader_iter = torch.utils.data.DataLoader.__iter__

    def timed_iter(self: Any) -> Any:
        return _TimedIterator(loader_iter(self), meter, state)

    torch.utils.data.DataLoader.__iter__ = timed_iter  # type: ignore[method-assign]

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if meter._in_step:
            meter._end_step()
        if not state["data_seen"]:
            meter._begin_step()

    register_optimizer_step_post_hook(after_step)
    _time_as_phase(torch, "save", meter, "checkpoint")
    try:
        import torch.distributed.checkpoint as dcp

        _time_as_phase(dcp, "save", meter, "checkpoint")
    except Exception:  # no distributed checkpointing in this build
        pass
    path = out if out is not None else os.environ.get(OUT_ENV)
    if path:
        atexit.register(_write_summary, meter, path)
    return meter


def _time_as_phase(module: Any, attr: str, meter: Meter, phase: str) -> None:
    """Replace `module.attr` by a wrapper that times each call as `phase`."""
    original = getattr(module, attr)

    def timed(*args: Any, **kwargs: Any) -> Any:
        with meter.phase(phase):
            return original(*args, **kwargs)

    timed.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(module, attr, timed)


def _write_summary(meter: Meter, path: str) -> None:
    try:
        if meter._in_step:  # a step cut short by the end of the script is not productive
            meter._in_step = False
        with open(path, "w", encoding="utf-8") as f:
            json.dump(meter.summary(), f)
    except Exception as e:
        import sys

        sys.stderr.write(f"badput run: could not write the summary to {path}: {e}\n")
