"""badput where training already runs: Lightning, Hugging Face, experiment trackers.

Each integration lives in its own module and imports its framework when that module is
imported, so `import badput.integrations` itself needs nothing optional:

- `badput.integrations.lightning.GoodputCallback` (extra `lightning`)
- `badput.integrations.hf.GoodputCallback` (extra `hf`)
- `badput.integrations.trackers`: `TensorBoardSink` (extra `tensorboard`), `WandbSink` (extra
  `wandb`), `MlflowSink` (extra `mlflow`), `PrometheusSink` (extra `prom`)

The profiler hook is `badput.profiler.on_trace_ready`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from badput.meter import Meter

__all__ = ["LoopTimer", "scalar_metrics"]

# Top-level summary values that are plain numbers (None when not measured: then left out).
_SCALARS = ("goodput", "wall_s", "steps", "productive_s", "samples_per_s", "tokens_per_s", "mfu")


def scalar_metrics(summary: Mapping[str, Any], prefix: str = "badput/") -> dict[str, float]:
    """The numbers of a meter summary as flat scalar metrics, for loggers and trackers.

    Names: `{prefix}goodput`, `{prefix}steps`, `{prefix}wall_s`, `{prefix}productive_s`,
    `{prefix}<category>_s` for each badput category (`data_wait_s`, `checkpoint_s`, `eval_s`,
    `compile_s`, `startup_s`, `idle_s`, custom phases), `{prefix}step_<stat>_s` for the step
    time statistics, and `samples_per_s`, `tokens_per_s`, `mfu` when measured. Values that were
    not measured (None) are left out: trackers take only numbers.

    Args:
        summary: `Meter.summary()` or a record the meter sends to its sinks.
        prefix: put before every name.

    Example:
        >>> scalar_metrics(meter.summary())["badput/goodput"]  # doctest: +SKIP
        0.83
    """
    out: dict[str, float] = {}
    for key in _SCALARS:
        value = summary.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[prefix + key] = float(value)
    for category, seconds in (summary.get("badput_s") or {}).items():
        out[f"{prefix}{category}_s"] = float(seconds)
    for stat, seconds in (summary.get("step_time_s") or {}).items():
        if seconds is not None:
            out[f"{prefix}step_{stat}_s"] = float(seconds)
    return out


class LoopTimer:
    """Drives a `Meter` from a framework's callback hooks instead of wrapping the loop.

    Frameworks own the loop, so the meter cannot wrap the data iterator or the step. Their hooks
    mark the boundaries instead: `begin_step`/`end_step` bracket a training step, and every
    hook in between marks the end of a piece of the gap between two steps. `mark(kind)` puts
    the time since the previous mark in `kind`: "data_wait" for the batch fetch, a phase name
    ("eval", "checkpoint") for work the framework announces when it ends, or None for loop
    overhead, which the meter then counts as idle.

    Args:
        meter: the meter to feed.
        clock: nanosecond clock (the meter's by default).
    """

    def __init__(self, meter: Meter, clock: Callable[[], int] | None = None) -> None:
        self.meter = meter
        self._clock: Callable[[], int] = clock if clock is not None else meter._clock
        self._mark: int | None = None
        self._in_step = False
        self._step: Any = None

    def start(self) -> None:
        """Start timing the gap before the first step (call when the training loop begins)."""
        self._mark = self._clock()

    def mark(self, kind: str | None) -> None:
        """Put the time since the last mark in `kind` (None: loop overhead, counted as idle)."""
        if self._in_step:
            return  # hooks inside a step belong to the step
        now = self._clock()
        if self._mark is not None and kind is not None:
            self.meter.add_time(kind, now - self._mark)
        self._mark = now

    def begin_step(self, samples: int | None = None, tokens: int | None = None) -> None:
        """The gap since the last mark was the batch fetch; a step starts now."""
        self.mark("data_wait")
        self._step = self.meter.step(samples=samples, tokens=tokens)
        self._step.__enter__()
        self._in_step = True

    def end_step(self) -> None:
        """The step started by `begin_step` ends now; the next gap starts."""
        if not self._in_step:
            return
        self._in_step = False
        self._step.__exit__(None, None, None)
        self._mark = self._clock()
