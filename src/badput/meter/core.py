"""`badput.Meter`: goodput of a training loop, measured continuously and cheaply.

Hot path: `Meter.data` (one clock read before and after each batch), `Meter.step` (two clock
reads, a fixed-size ring buffer write, optionally two CUDA events) and `Meter.phase`. No I/O,
no device synchronization, no allocation that grows with the run; every `report_every` steps
a summary goes to the sinks, which write it from a background thread. Every failure inside the
meter is reported once as a warning and switches the failing part off: the training loop goes
on untouched ("fail open").
"""

from __future__ import annotations

import atexit
import os
import time
import warnings
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from badput.meter.events import EventBackend, PendingSteps
from badput.meter.sinks import Sink, SinkWorker

__all__ = ["BUILTIN_CATEGORIES", "Meter", "MeterWarning"]

T = TypeVar("T")

#: Badput categories every summary has, besides custom phase names.
BUILTIN_CATEGORIES = ("data_wait", "checkpoint", "eval", "compile", "startup", "idle")


class MeterWarning(UserWarning):
    """Something inside the meter failed; the failing part is switched off, training goes on."""


class _StepContext:
    """The reusable context manager behind `Meter.step` (no per-step allocation)."""

    __slots__ = ("_meter",)

    def __init__(self, meter: Meter) -> None:
        self._meter = meter

    def __enter__(self) -> None:
        self._meter._begin_step()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._meter._end_step()


class _PhaseContext:
    __slots__ = ("_meter", "_name", "_start")

    def __init__(self, meter: Meter, name: str) -> None:
        self._meter = meter
        self._name = name
        self._start = 0

    def __enter__(self) -> None:
        self._meter._phase_depth += 1
        self._start = self._meter._clock()
        self._meter._last_ns = self._start

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        meter = self._meter
        meter._phase_depth -= 1
        end = meter._clock()
        if meter._phase_depth == 0:  # a phase inside a phase belongs to the outer one
            meter._add_phase(self._name, end - self._start, end)


class Meter:
    """Measures where a training loop's wall time goes.

    Args:
        out: a JSONL file for periodic and final summaries (optional).
        flops_per_step: model FLOPs of one step, for MFU (or pass `flops=` to `step`).
        count_flops: measure FLOPs once, on the first step, with torch's FlopCounterMode.
        precision: precision of the matrix math, for the MFU denominator ("bf16", "fp32"...);
            None: decided from the dtypes of the first step's matrix products, or autocast
            (see `badput.meter.precision`), else unknown and no MFU.
        warmup_steps: first steps counted as compile/warm-up, not as productive.
        report_every: steps between summaries to the sinks (and cross-rank gathers).
        straggler_threshold: a rank whose median step is slower than the fastest rank's by
            more than this factor's inverse is named a straggler (score < threshold).
        window: recent steps kept for the median, p90 and ideal step time.
        gpu_timing: time steps on the GPU with CUDA events: "auto" (when CUDA is available),
            True or False.
        sinks: extra sinks (objects with `emit(record)` and `close()`).
        prometheus_port: serve metrics for Prometheus on this port plus LOCAL_RANK (extra
            `prom`; 0 picks a free port).
        prometheus_addr: address of the Prometheus endpoint.
        console: print a one-line status at each report.
        distributed: gather per-rank summaries when torch.distributed is initialized: "auto",
            True or False.
        events: the device-event backend (tests pass a fake).
        gpu_name: GPU model for the MFU peak (default: torch.cuda.get_device_name()).
        clock: nanosecond clock (tests pass a fake).

    Example:
        >>> meter = Meter(out="goodput.jsonl")  # doctest: +SKIP
        >>> for batch in meter.data(loader):  # doctest: +SKIP
        ...     with meter.step(samples=len(batch)):
        ...         train_step(batch)
        >>> meter.summary()["goodput"]  # doctest: +SKIP
        0.83
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        flops_per_step: float | None = None,
        count_flops: bool = False,
        precision: str | None = None,
        warmup_steps: int = 1,
        report_every: int = 100,
        straggler_threshold: float = 0.8,
        window: int = 4096,
        gpu_timing: bool | str = "auto",
        sinks: Iterable[Sink] = (),
        prometheus_port: int | None = None,
        prometheus_addr: str = "0.0.0.0",
        console: bool = False,
        distributed: bool | str = "auto",
        events: EventBackend | None = None,
        gpu_name: str | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._clock = clock
        self._t0 = clock()
        self._warned: set[str] = set()
        self.lost: list[str] = []
        self._enabled = True
        self.flops_per_step = flops_per_step
        self._count_flops = count_flops
        self.precision = precision
        self._precision_source = (
            "given (Meter(precision=...))"
            if precision is not None
            else "the first step has not ended"
        )
        self._probe: Any = None
        self._autocast: str | None = None
        self._precision_open = precision is None  # decided when the first step ends
        self.warmup_steps = max(0, warmup_steps)
        self.report_every = max(1, report_every)
        self.straggler_threshold = straggler_threshold

        self._first_step_start: int | None = None
        # The measured window ends at the meter's last event (a step's start or end, the end
        # of a data wait or a phase), not at the moment a summary is asked for: a summary
        # printed after the loop and the final one sent at exit cover the same time.
        self._last_ns = self._t0
        self._samples_why: str | None = None  # why samples/s is missing, where known
        self._before_first_ns = 0  # data/phase time before the first step (not start-up)
        self._in_step = False
        self._phase_depth = 0
        self._step_start = 0
        self._nested_ns = 0
        self._step_samples: int | None = None
        self._step_tokens: int | None = None
        self._step_flops: float | None = None

        self.steps = 0
        self._productive_ns = 0
        self._warmup_ns = 0
        self._data_ns = 0
        self._phase_ns: dict[str, int] = {}
        self._samples = 0
        self._tokens = 0
        self._flops = 0.0
        self._flops_steps = 0
        self._ring = array("q", bytes(8 * max(1, window)))
        self._ring_size = max(1, window)
        self._ring_n = 0
        self._step_max = 0
        self._step_ctx = _StepContext(self)
        self._flop_counter: Any = None

        self._pending: PendingSteps | None = None
        self._events: EventBackend | None = None
        self._gpu_name = gpu_name
        self._setup_gpu(gpu_timing, events)

        self._ranks: list[dict[str, Any]] | None = None
        self._stragglers: list[int] = []
        self._dist: Any = None
        self._setup_distributed(distributed)

        all_sinks: list[Sink] = list(sinks)
        if out is not None:
            from badput.meter.sinks import JsonlSink

            all_sinks.append(JsonlSink(os.fspath(out)))
        if prometheus_port is not None:
            self._guard(
                "prometheus",
                lambda: all_sinks.append(_prometheus(prometheus_port, prometheus_addr, self.rank)),
            )
        if console:
            from badput.meter.sinks import ConsoleSink

            all_sinks.append(ConsoleSink())
        self._worker = SinkWorker(all_sinks, self._fail) if all_sinks else None
        self._closed = False
        atexit.register(_close_at_exit, weakref.ref(self))

    # ---- public API ----------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """The distributed rank of this process (0 without torch.distributed)."""
        return int(self._dist.rank) if self._dist is not None else 0

    def data(self, iterable: Iterable[T]) -> Iterator[T]:
        """Iterate `iterable`, timing each wait for the next item as data wait."""
        iterator = iter(iterable)
        clock = self._clock
        while True:
            start = clock()
            try:
                item = next(iterator)
            except StopIteration:
                end = clock()
                self._add_data(end - start, end)
                return
            end = clock()
            self._add_data(end - start, end)
            yield item

    def step(
        self,
        samples: int | None = None,
        tokens: int | None = None,
        flops: float | None = None,
    ) -> _StepContext:
        """Context manager around one training step (forward, backward, optimizer).

        Args:
            samples: samples in the step, for samples/s.
            tokens: tokens in the step, for tokens/s.
            flops: model FLOPs of the step, for MFU (else `flops_per_step`).
        """
        self._step_samples = samples
        self._step_tokens = tokens
        self._step_flops = flops
        return self._step_ctx

    def phase(self, name: str) -> _PhaseContext:
        """Context manager around non-step work: "checkpoint", "eval", or any custom name."""
        return _PhaseContext(self, name)

    def add_time(self, category: str, ns: int) -> None:
        """Count `ns` nanoseconds measured elsewhere as `category`.

        For loops the meter cannot wrap: a framework's hooks time the batch fetch or an
        evaluation themselves and hand the result here. "data_wait" adds to the data wait that
        `data()` measures; any other name is a phase, as `phase(name)` would time it. Negative
        times are ignored (a clock that went backwards).

        Example:
            >>> meter.add_time("data_wait", 2_500_000)  # 2.5 ms waiting for a batch
            ... # doctest: +SKIP
        """
        if ns < 0:
            return
        if category == "data_wait":
            self._add_data(ns)
        else:
            self._add_phase(category, ns)

    def summary(self) -> dict[str, Any]:
        """Where the wall time went so far (see the module docs of `badput.meter`)."""
        from badput.meter.summary import build_summary

        return build_summary(self)

    def close(self) -> None:
        """Send the final summary to the sinks and stop their thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        # Each part on its own, so that one failure does not lose the rest (fail open).
        pending = self._pending
        if pending is not None:
            self._guard("gpu", lambda: pending.drain(limit=len(pending)))
        worker = self._worker
        if worker is not None:
            self._guard("report", lambda: worker.put({"type": "final", **self.summary()}))
            self._guard("sinks", worker.close)

    def __enter__(self) -> Meter:
        """Use as a context manager: the final summary is sent on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the meter."""
        self.close()

    # ---- hot path ------------------------------------------------------------------------

    def _begin_step(self) -> None:
        if not self._enabled:
            return
        try:
            now = self._clock()
            if self._first_step_start is None:
                self._first_step_start = now
                if self._count_flops and self.flops_per_step is None:
                    self._start_flop_counter()
                if self._precision_open:
                    self._start_precision_probe()
            self._in_step = True
            self._step_start = now
            self._last_ns = now
            self._nested_ns = 0
        except Exception as e:
            self._fail("step", e)
            return
        if self._events is not None:
            try:
                self._gpu_start = self._events.record()
            except Exception as e:
                self._fail("gpu", e)

    def _end_step(self) -> None:
        if not self._enabled or not self._in_step:
            return
        try:
            now = self._clock()
            self._in_step = False
            self._last_ns = now
            dur = now - self._step_start - self._nested_ns
            self.steps += 1
            if self.steps <= self.warmup_steps:
                self._warmup_ns += dur
            else:
                self._productive_ns += dur
                self._ring[self._ring_n % self._ring_size] = dur
                self._ring_n += 1
                if dur > self._step_max:
                    self._step_max = dur
            if self._step_samples is not None:
                self._samples += self._step_samples
            if self._step_tokens is not None:
                self._tokens += self._step_tokens
            self._step_samples = self._step_tokens = None  # each step says its own
            if self._precision_open:
                self._decide_precision()  # before the flop counter: its mode is entered first
            if self._flop_counter is not None:
                self._stop_flop_counter()  # before reading flops_per_step: this step counts
            flops = self._step_flops if self._step_flops is not None else self.flops_per_step
            if flops is not None and self.steps > self.warmup_steps:
                self._flops += flops
                self._flops_steps += 1
        except Exception as e:
            self._fail("step", e)
            return
        if self._events is not None and self._pending is not None:
            try:
                self._pending.push(self._gpu_start, self._events.record())
                self._pending.drain()
            except Exception as e:
                self._fail("gpu", e)
        if self.steps % self.report_every == 0:
            self._guard("report", self._report)

    def _add_data(self, ns: int, end: int | None = None) -> None:
        if not self._enabled:
            return
        self._last_ns = end if end is not None else self._clock()
        self._data_ns += ns
        if self._in_step:
            self._nested_ns += ns
        elif self._first_step_start is None:
            self._before_first_ns += ns

    def _add_phase(self, name: str, ns: int, end: int | None = None) -> None:
        if not self._enabled:
            return
        self._last_ns = end if end is not None else self._clock()
        self._phase_ns[name] = self._phase_ns.get(name, 0) + ns
        if self._in_step:
            self._nested_ns += ns
        elif self._first_step_start is None:
            self._before_first_ns += ns

    # ---- reports, failures ---------------------------------------------------------------

    def _report(self) -> None:
        if self._dist is not None:
            self._guard("distributed", self._gather)
        if self._worker is not None:
            self._worker.put({"type": "report", **self.summary()})

    def _gather(self) -> None:
        from badput.meter.distributed import gather

        ranks = gather(self)
        if ranks is not None:
            self._ranks = ranks
            self._stragglers = [
                r["rank"] for r in ranks if r["straggler_score"] < self.straggler_threshold
            ]

    def _guard(self, part: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as e:
            self._fail(part, e)

    def _fail(self, part: str, error: BaseException) -> None:
        """Switch a failing part off, warn once, and remember what was lost."""
        if part == "gpu":
            self._events = None
            self._pending = None
        elif part == "distributed":
            self._dist = None
        elif part == "step":
            self._enabled = False
        if part not in self._warned:
            self._warned.add(part)
            self.lost.append(f"{part}: {type(error).__name__}: {error}")
            warnings.warn(
                f"badput meter: {part} failed and is switched off ({type(error).__name__}: "
                f"{error}); training continues",
                MeterWarning,
                stacklevel=3,
            )

    # ---- set-up --------------------------------------------------------------------------

    def _setup_gpu(self, gpu_timing: bool | str, events: EventBackend | None) -> None:
        if gpu_timing is False:
            return
        if events is None:
            try:
                import torch

                available = torch.cuda.is_available()
            except Exception:
                available = False
            if not available:
                if gpu_timing is True:
                    self._fail("gpu", RuntimeError("CUDA is not available"))
                return
            try:
                from badput.meter.events import CudaEvents

                events = CudaEvents()
                if self._gpu_name is None:
                    self._gpu_name = torch.cuda.get_device_name()
            except Exception as e:
                self._fail("gpu", e)
                return
        self._events = events
        self._pending = PendingSteps()

    def _setup_distributed(self, distributed: bool | str) -> None:
        if distributed is False:
            return
        try:
            from badput.meter.distributed import RankGroup

            self._dist = RankGroup.current()
        except Exception as e:
            self._fail("distributed", e)

    def _start_precision_probe(self) -> None:
        import sys

        from badput.meter.precision import DtypeProbe, autocast_precision

        if "torch" not in sys.modules:  # a loop without torch: nothing to look at
            return
        self._autocast = autocast_precision()
        try:
            self._probe = DtypeProbe().__enter__()
        except Exception as e:
            self._probe = None
            self._fail("precision probe", e)

    def _decide_precision(self) -> None:
        from badput.meter.precision import autocast_precision, decide_precision

        probe, self._probe = self._probe, None
        counts: dict[str, int] | None = None
        note = "torch is not in use" if probe is None else ""
        if probe is not None:
            try:
                probe.__exit__(None, None, None)
                counts = dict(probe.counts)
            except Exception as e:
                self._fail("precision probe", e)
                note = "the dtype probe failed"
        elif "precision probe" in self._warned:
            note = "the dtype probe failed"
        autocast = self._autocast or autocast_precision()
        self.precision, self._precision_source = decide_precision(None, counts, autocast, note)
        self._precision_open = False

    def _start_flop_counter(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self._flop_counter = FlopCounterMode(display=False)
            self._flop_counter.__enter__()
        except Exception as e:
            self._flop_counter = None
            self._fail("flop counter", e)

    def _stop_flop_counter(self) -> None:
        counter, self._flop_counter = self._flop_counter, None
        try:
            counter.__exit__(None, None, None)
            self.flops_per_step = float(counter.get_total_flops())
        except Exception as e:
            self._fail("flop counter", e)

    # ---- read by summary -----------------------------------------------------------------

    def _recent_steps_ns(self) -> list[int]:
        n = min(self._ring_n, self._ring_size)
        return list(self._ring[:n])


def _close_at_exit(ref: weakref.ref[Meter]) -> None:
    meter = ref()
    if meter is not None:
        meter.close()


def _prometheus(port: int, addr: str, rank: int) -> Sink:
    from badput.meter.sinks import PrometheusSink

    return PrometheusSink(port, addr, rank)
