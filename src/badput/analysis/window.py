"""The analysis window of one GPU: its steps, and the span they cover (or the user's).

A window comes from, in order: the user's `--window`, the GPU-side ProfilerStep annotations,
the host ProfilerSteps stretched over the GPU work they launched (`steps.cpu_steps`), or the
span of the GPU's activity. The rules are stated in `docs/analysis.md`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from badput.analysis.patterns import profiler_step_number
from badput.analysis.results import WindowSource
from badput.analysis.steps import Launches, Steps, cpu_steps, gpu_steps
from badput.errors import UsageError
from badput.trace.model import EventKind, Trace

__all__ = ["WindowChoice", "WindowSpec", "choose_window"]

I64 = npt.NDArray[np.int64]

_WINDOW = re.compile(r"^\s*(steps|ns|us)\s*:\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class WindowSpec:
    """A user-chosen window: a range of step numbers, or a time range in trace nanoseconds."""

    first_step: int | None = None
    last_step: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None

    @staticmethod
    def parse(text: str) -> WindowSpec:
        """Parse `steps:A-B` (ProfilerStep numbers, inclusive), `ns:T0-T1` or `us:T0-T1`.

        Raises:
            UsageError: the text is in none of these forms.
        """
        match = _WINDOW.match(text)
        if not match:
            raise UsageError(
                f"--window {text!r}: expected steps:A-B, ns:T0-T1 or us:T0-T1 (trace clock)"
            )
        unit, lo, hi = match.groups()
        if unit == "steps":
            if "." in lo or "." in hi:
                raise UsageError(f"--window {text!r}: step numbers are integers")
            spec = WindowSpec(first_step=int(lo), last_step=int(hi))
        elif unit == "ns":
            if "." in lo or "." in hi:
                raise UsageError(f"--window {text!r}: nanoseconds are integers")
            spec = WindowSpec(start_ns=int(lo), end_ns=int(hi))
        else:
            spec = WindowSpec(start_ns=int(Decimal(lo) * 1000), end_ns=int(Decimal(hi) * 1000))
        lo_v = spec.first_step if spec.first_step is not None else spec.start_ns
        hi_v = spec.last_step if spec.last_step is not None else spec.end_ns
        assert lo_v is not None and hi_v is not None
        if hi_v < lo_v:
            raise UsageError(f"--window {text!r}: the range ends before it starts")
        return spec


@dataclass(frozen=True)
class WindowChoice:
    """The window of one GPU and the steps in it.

    Attributes:
        steps: the steps inside the window, in time order.
        start_ns: window start (trace clock).
        end_ns: window end.
        source: where the window came from.
        warnings: what a reader must know about how it was chosen.
    """

    steps: Steps
    start_ns: int
    end_ns: int
    source: WindowSource
    warnings: list[str] = field(default_factory=list)


def _select_steps(steps: Steps, spec: WindowSpec | None) -> Steps:
    if spec is None or spec.first_step is None or spec.last_step is None:
        return steps
    lo, hi = spec.first_step, spec.last_step
    keep = [
        i
        for i, name in enumerate(steps.names)
        if (k := profiler_step_number(name)) is not None and lo <= k <= hi
    ]
    return Steps(
        [steps.names[i] for i in keep],
        steps.starts_ns[keep],
        steps.ends_ns[keep],
        steps.source,
        steps.dropped,
    )


def choose_window(
    trace: Trace,
    device: int,
    gpu_rows: npt.NDArray[np.intp],
    spec: WindowSpec | None,
    *,
    host_steps: tuple[list[str], I64, I64],
    launches: Launches,
) -> WindowChoice:
    """The window and steps of one GPU.

    Args:
        trace: the trace.
        device: the GPU.
        gpu_rows: its kernel, memcpy and memset rows (at least one).
        spec: the user's `--window`, if any.
        host_steps: names, starts and ends of the host ProfilerStep spans.
        launches: the trace's launching host calls.
    """
    kind = trace.kind
    on_device = trace.device == device
    ts, end = trace.ts_ns, trace.end_ns
    step_names, step_starts, step_ends = host_steps
    warnings: list[str] = []
    gpu_step = (kind == EventKind.GPU_ANNOTATION) & on_device
    gpu_step &= trace.name_mask(lambda n: profiler_step_number(n) is not None)[trace.name_id]
    if gpu_step.any():
        rows = np.flatnonzero(gpu_step)
        steps = gpu_steps(
            [trace.names[i] for i in trace.name_id[rows].tolist()], ts[rows], end[rows]
        )
    elif step_names:
        steps = cpu_steps(
            step_names,
            step_starts,
            step_ends,
            launches,
            trace.correlation[gpu_rows],
            ts[gpu_rows],
            end[gpu_rows],
        )
    else:
        steps = Steps([], np.zeros(0, np.int64), np.zeros(0, np.int64), WindowSource.GPU_ACTIVITY)
    steps = _select_steps(steps, spec)
    if steps.dropped:
        warnings.append(
            f"left out {len(steps.dropped)} last step(s) that launched no or too little GPU work "
            f"(incompletely captured): {', '.join(steps.dropped)}"
        )

    source = steps.source
    if spec is not None and spec.start_ns is not None and spec.end_ns is not None:
        w0, w1 = spec.start_ns, spec.end_ns
        source = WindowSource.USER
        inside = (steps.starts_ns >= w0) & (steps.ends_ns <= w1)
        steps = Steps(
            [n for n, k in zip(steps.names, inside.tolist(), strict=True) if k],
            steps.starts_ns[inside],
            steps.ends_ns[inside],
            source,
            steps.dropped,
        )
    elif len(steps):
        w0, w1 = int(steps.starts_ns.min()), int(steps.ends_ns.max())
    elif spec is not None and spec.first_step is not None:
        w0 = w1 = 0
        warnings.append("no step in the requested --window range")
        source = WindowSource.NONE
    else:
        w0, w1 = int(ts[gpu_rows].min()), int(end[gpu_rows].max())
        source = WindowSource.GPU_ACTIVITY

    return WindowChoice(steps, int(w0), int(w1), source, warnings)
