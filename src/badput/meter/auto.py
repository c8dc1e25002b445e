"""Zero-code metering for `badput run`: hooks on DataLoader iteration and optimizer steps.

A step runs from the moment a batch arrives (when no step is open) to the end of the next
`optimizer.step()`; waits for further batches inside it (gradient accumulation) are data
wait. Without a DataLoader, each optimizer step ends one step and opens the next.
`torch.save` and `torch.distributed.checkpoint.save` count as the checkpoint phase. Evaluation
loops cannot be told apart from training without code: they count as idle (use
`Meter.phase("eval")` for that).

Samples per second count the samples of each batch: the leading dimension of its tensors, when
the DataLoader batches (`batch_size` or `batch_sampler` set) and its tensors agree on it.
Otherwise the summary's `missing` says why there is no samples/s.
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


_NO_BATCHING = (
    "the DataLoader has batch_size=None, so its items are the dataset's own and their batch "
    "size is unknown; give the DataLoader a batch_size, or meter the loop with "
    "Meter.step(samples=N)"
)


def batch_samples(batch: Any) -> tuple[int | None, str | None]:
    """(samples in a collated batch, None) from its tensors' leading dimension, or (None, why).

    The batch is a tensor, or a tuple, list or dict of them (one level of nesting looked
    into); every tensor with a dimension must agree on the first.
    """
    import torch

    dims: set[int] = set()
    items = list(batch.values()) if isinstance(batch, dict) else [batch]
    for item in items:
        parts = item if isinstance(item, tuple | list) else [item]
        for part in parts:
            inner = list(part.values()) if isinstance(part, dict) else [part]
            for t in inner:
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    dims.add(int(t.shape[0]))
    if len(dims) == 1:
        return dims.pop(), None
    if not dims:
        return None, "the DataLoader's batches hold no tensor with a batch dimension"
    return None, (
        f"the tensors of a batch disagree on their leading dimension ({sorted(dims)}), so "
        "the batch size is unknown; meter the loop with Meter.step(samples=N)"
    )


class _TimedIterator:
    """Wraps a DataLoader iterator: times each batch and opens a step when it arrives."""

    def __init__(
        self, inner: Iterator[Any], meter: Meter, state: dict[str, bool], batching: bool
    ) -> None:
        self._inner = inner
        self._meter = meter
        self._state = state
        self._batching = batching

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        meter = self._meter
        start = meter._clock()
        try:
            item = next(self._inner)
        finally:
            end = meter._clock()
            meter._add_data(end - start, end)
        if not self._state["data_seen"]:
            meter._samples_why = None  # a batch came: no longer "no batch was seen"
        self._state["data_seen"] = True
        n, why = batch_samples(item) if self._batching else (None, _NO_BATCHING)
        if why is not None and meter._samples_why is None:
            meter._samples_why = why  # one batch without a count: samples/s would be short
        if not meter._in_step:
            meter._step_samples = n
            meter._begin_step()
        elif n is not None and meter._step_samples is not None:
            meter._step_samples += n  # gradient accumulation: every batch of the step counts
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
    meter._samples_why = "no DataLoader batch was seen (badput run counts samples in them)"
    state = {"data_seen": False}
    loader_iter = torch.utils.data.DataLoader.__iter__

    def timed_iter(self: Any) -> Any:
        batching = getattr(self, "batch_sampler", None) is not None
        return _TimedIterator(loader_iter(self), meter, state, batching)

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
