"""A PyTorch Lightning callback that runs the badput meter over the training loop.

Needs Lightning (`pip install 'badput[lightning]'`); `lightning.pytorch` is used when present,
else the older `pytorch_lightning` package.

Step boundaries come from `on_train_batch_start`/`on_train_batch_end` (one meter step per
batch, so with gradient accumulation a step is a micro-batch). The gap between two batches is
data wait: Lightning fetches the next batch there. Validation inside the fit loop is bracketed
by `on_validation_start`/`on_validation_end` and counted as eval. Checkpoints that Lightning's
`ModelCheckpoint` writes after a batch fall in the gap too; they have no hook that brackets them,
so they count as data wait (see docs/integrations.md).
"""

from __future__ import annotations

import warnings
from typing import Any

from badput.integrations import LoopTimer, scalar_metrics
from badput.meter import Meter, MeterWarning

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:
    try:
        from pytorch_lightning.callbacks import Callback  # type: ignore[assignment,unused-ignore]
    except ImportError:
        raise ImportError(
            "badput's Lightning callback needs lightning: pip install 'badput[lightning]'"
        ) from None

__all__ = ["GoodputCallback"]


def _batch_samples(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (None if there is none)."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, list | tuple):
        for item in batch:
            n = _batch_samples(item)
            if n is not None:
                return n
    if isinstance(batch, dict):
        for item in batch.values():
            n = _batch_samples(item)
            if n is not None:
                return n
    return None


class GoodputCallback(Callback):  # type: ignore[misc,unused-ignore]  # Any without stubs
    """Measures goodput of `Trainer.fit` and logs it through the trainer's own loggers.

    Every `log_every_n_steps` batches (the trainer's setting by default) and once at the end,
    the meter's summary goes to each of `trainer.loggers` as scalar metrics named
    `badput/goodput`, `badput/steps`, `badput/data_wait_s`, ... (see `scalar_metrics`).

    Args:
        log_every_n_steps: batches between two logged summaries (default: the trainer's).
        prefix: put before every metric name.
        meter: a meter to feed, closed by its owner (default: one made at each
            `on_train_start` from `meter_kwargs`, closed at `on_train_end`).
        **meter_kwargs: passed to `badput.Meter` (e.g. `out=`, `sinks=`, `flops_per_step=`).

    Example:
        >>> trainer = L.Trainer(callbacks=[GoodputCallback()])  # doctest: +SKIP
        >>> trainer.fit(model, loader)  # doctest: +SKIP
        >>> trainer.callbacks[0].meter.summary()["goodput"]  # doctest: +SKIP
        0.91
    """

    def __init__(
        self,
        log_every_n_steps: int | None = None,
        prefix: str = "badput/",
        meter: Meter | None = None,
        **meter_kwargs: Any,
    ) -> None:
        super().__init__()
        self.log_every_n_steps = log_every_n_steps
        self.prefix = prefix
        self.meter = meter
        self._own_meter = meter is None  # made here: a new one for each training run
        self._meter_kwargs = meter_kwargs
        self._timer: LoopTimer | None = None
        self._every = 1
        self._log_failed = False

    @property
    def state_key(self) -> str:
        """Key of this callback's state in checkpoints (it keeps none)."""
        return f"badput.GoodputCallback[{self.prefix}]"

    # ---- Lightning hooks -----------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Start the meter (if not given) and the timing of the first batch fetch."""
        if self._own_meter or self.meter is None:
            self.meter = Meter(**self._meter_kwargs)
        every = self.log_every_n_steps or getattr(trainer, "log_every_n_steps", 50) or 50
        self._every = max(1, int(every))
        self._timer = LoopTimer(self.meter)
        self._timer.start()

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """A step starts; the time since the previous batch ended was the fetch."""
        if self._timer is not None:
            self._timer.begin_step(samples=_batch_samples(batch))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """The step ends; every `log_every_n_steps` steps the summary goes to the loggers."""
        timer = self._timer
        if timer is None:
            return
        timer.end_step()
        if timer.meter.steps % self._every == 0:
            self._log(trainer, save=False)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        """Validation inside fit starts: the time before it was loop overhead."""
        if self._timer is not None and not trainer.sanity_checking:
            self._timer.mark(None)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """Validation inside fit ends: its time is eval."""
        if self._timer is not None and not trainer.sanity_checking:
            self._timer.mark("eval")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Log the final summary, save the loggers and close the meter made here."""
        if self._timer is None or self.meter is None:
            return
        self._timer.mark(None)
        self._log(trainer, save=True)
        if self._own_meter:
            self.meter.close()
        self._timer = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training failed: close the meter made here, so its sinks get the final summary."""
        if self.meter is not None and self._own_meter:
            self.meter.close()
        self._timer = None

    # ---- helpers -------------------------------------------------------------------------

    def _log(self, trainer: Any, save: bool) -> None:
        if self.meter is None or self._log_failed:
            return
        try:
            metrics = scalar_metrics(self.meter.summary(), self.prefix)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
                if save:
                    logger.save()
        except Exception as e:  # never into the training loop (fail open)
            self._log_failed = True
            warnings.warn(
                f"badput: logging to the trainer's loggers failed and is switched off "
                f"({type(e).__name__}: {e}); training continues",
                MeterWarning,
                stacklevel=2,
            )
