"""A Hugging Face `transformers` TrainerCallback that runs the badput meter over training.

Needs transformers (`pip install 'badput[hf]'`).

Step boundaries come from `on_step_begin`/`on_step_end` (one meter step per optimizer step,
gradient accumulation included). In the gap between two steps the Trainer logs, may evaluate
and save, then fetches the next batches; the hooks that end each piece mark it:
`on_evaluate` ends eval, `on_save` ends a checkpoint, and `on_step_begin` ends the fetch, which
is data wait. Metrics reach the loggers by being added to the `logs` of `on_log`.
"""

from __future__ import annotations

import warnings
from typing import Any

from badput.integrations import LoopTimer, scalar_metrics
from badput.meter import Meter, MeterWarning

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError(
        "badput's Hugging Face callback needs transformers: pip install 'badput[hf]'"
    ) from None

__all__ = ["GoodputCallback", "attach"]


class GoodputCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]  # Any without stubs
    """Measures goodput of `Trainer.train` and adds it to every log the Trainer writes.

    Each time the Trainer logs (every `logging_steps`, and the final training log), the meter's
    summary is added to the logs as scalar metrics named `badput/goodput`, `badput/steps`,
    `badput/data_wait_s`, ... (see `scalar_metrics`), and to the same entry of
    `state.log_history`. The Trainer calls the `report_to` integrations before the callbacks
    passed to it, so to reach them add this callback with `attach(trainer)`, which puts it
    first.

    Args:
        prefix: put before every metric name.
        meter: a meter to feed, closed by its owner (default: one made at each
            `on_train_begin` from `meter_kwargs`, closed at `on_train_end`).
        **meter_kwargs: passed to `badput.Meter` (e.g. `out=`, `sinks=`, `flops_per_step=`).

    Example:
        >>> trainer = Trainer(model, args, train_dataset=ds)  # doctest: +SKIP
        >>> attach(trainer)  # doctest: +SKIP
        >>> trainer.train()  # doctest: +SKIP
        >>> trainer.state.log_history[-1]["badput/goodput"]  # doctest: +SKIP
        0.88
    """

    def __init__(self, prefix: str = "badput/", meter: Meter | None = None, **meter_kwargs: Any):
        self.prefix = prefix
        self.meter = meter
        self._own_meter = meter is None  # made here: a new one for each training run
        self._meter_kwargs = meter_kwargs
        self._timer: LoopTimer | None = None
        self._log_failed = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the meter (if not given) and the timing of the first batch fetch."""
        if self._own_meter or self.meter is None:
            self.meter = Meter(**self._meter_kwargs)
        self._timer = LoopTimer(self.meter)
        self._timer.start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A step starts; the time since the last mark was the fetch of its batches."""
        if self._timer is not None:
            self._timer.begin_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer step is done; the gap to the next step starts."""
        if self._timer is not None:
            self._timer.end_step()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Evaluation just ended: the time since the last mark was eval."""
        if self._timer is not None:
            self._timer.mark("eval")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A checkpoint was just written: the time since the last mark was checkpointing."""
        if self._timer is not None:
            self._timer.mark("checkpoint")

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Add the meter's summary to the logs and to their entry in `state.log_history`."""
        if self.meter is None or logs is None or self._log_failed:
            return
        try:
            history = state.log_history
            # `Trainer.log` appends a copy of `logs` (plus "step") just before `on_log`.
            entry = history[-1] if history else None
            same = entry is not None and all(entry.get(k) == v for k, v in logs.items())
            metrics = scalar_metrics(self.meter.summary(), self.prefix)
            logs.update(metrics)
            if same and entry is not None:
                entry.update(metrics)
        except Exception as e:  # never into the training loop (fail open)
            self._log_failed = True
            warnings.warn(
                f"badput: adding metrics to the Trainer's logs failed and is switched off "
                f"({type(e).__name__}: {e}); training continues",
                MeterWarning,
                stacklevel=2,
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close the meter made here: its sinks get the final summary."""
        if self.meter is not None and self._own_meter:
            self.meter.close()
        self._timer = None


def attach(trainer: Any, callback: GoodputCallback | None = None, **kwargs: Any) -> GoodputCallback:
    """Add a `GoodputCallback` to a Trainer ahead of its other callbacks.

    The Trainer calls its callbacks in order, its `report_to` integrations (TensorBoard,
    W&B, MLflow, ...) before the callbacks passed by the user; in first place, the metrics this
    callback adds in `on_log` reach them.

    Args:
        trainer: a `transformers.Trainer`.
        callback: the callback to add (default: `GoodputCallback(**kwargs)`).
        **kwargs: passed to `GoodputCallback` when `callback` is None.

    Returns:
        The callback added (its `meter` holds the measurements once training has begun).
    """
    cb = callback if callback is not None else GoodputCallback(**kwargs)
    trainer.callback_handler.callbacks.insert(0, cb)
    return cb
