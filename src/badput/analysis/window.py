"""The analysis window of one GPU: its steps, and the span they cover (or the user's).

A window comes from, in order: the user's `--window`, the GPU-side ProfilerStep annotations
(unless one misses GPU work its host step launched), the host ProfilerSteps stretched over the
GPU work they launched (`steps.cpu_steps`), or the span of the GPU's activity. Steps are cut at
the end of the capture. The rules and their evidence are stated in `docs/analysis.md`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from badput.analysis.patterns import profiler_step_number
from badput.analysis.results import WindowSource
from badput.analysis.steps import (
    Launches,
    Shortfall,
    Steps,
    clip_steps,
    cpu_steps,
    gpu_step_shortfalls,
    gpu_steps,
)
from badput.errors import UsageError
from badput.trace.model import EventKind, Trace

__all__ = ["Capture", "WindowChoice", "WindowSpec", "capture_of", "choose_window"]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

_NUMBER = r"(\d+(?:\.\d+)?)"
_WINDOW = re.compile(rf"^\s*(steps|ns|us)\s*:\s*{_NUMBER}\s*(?:-\s*{_NUMBER}\s*)?$")
_FORMS = "expected steps:N, steps:A-B, ns:T0-T1 or us:T0-T1 (trace clock)"
# Steps named one by one in a warning before "and N more".
_NAMED_STEPS = 5
# Runs of step numbers listed in a message before "...".
_NAMED_RUNS = 8


@dataclass(frozen=True)
class WindowSpec:
    """A user-chosen window: a range of step numbers, or a time range in trace nanoseconds."""

    first_step: int | None = None
    last_step: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None

    @staticmethod
    def parse(text: str) -> WindowSpec:
        """Parse `steps:N`, `steps:A-B` (ProfilerStep numbers, inclusive), `ns:T0-T1`, `us:T0-T1`.

        Raises:
            UsageError: the text is in none of these forms.
        """
        match = _WINDOW.match(text)
        if not match:
            raise UsageError(f"--window {text!r}: {_FORMS}")
        unit, lo, hi = match.groups()
        if hi is None:
            if unit != "steps":
                raise UsageError(f"--window {text!r}: a time window needs both ends, {unit}:T0-T1")
            hi = lo
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

    def text(self) -> str:
        """The window as `--window` takes it: `steps:N`, `steps:A-B` or `us:T0-T1`."""
        if self.first_step is not None and self.last_step is not None:
            if self.first_step == self.last_step:
                return f"steps:{self.first_step}"
            return f"steps:{self.first_step}-{self.last_step}"
        assert self.start_ns is not None and self.end_ns is not None
        return _us_window(self.start_ns, self.end_ns)


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


def _us_text(ns: int) -> str:
    """Trace nanoseconds as `--window us:` takes them: exact, three decimals."""
    return str(Decimal(ns).scaleb(-3).quantize(Decimal("0.001")))


def _us_window(start_ns: int, end_ns: int) -> str:
    return f"us:{_us_text(start_ns)}-{_us_text(end_ns)}"


def _us(ns: int) -> str:
    """A duration in microseconds, for a warning."""
    return f"{ns / 1000:,.3f} us"


def _runs(numbers: list[int]) -> str:
    """Sorted distinct step numbers as runs: `5-10`, `1-3, 7`."""
    runs: list[tuple[int, int]] = []
    for k in sorted(set(numbers)):
        if runs and k == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], k)
        else:
            runs.append((k, k))
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:_NAMED_RUNS]]
    if len(runs) > _NAMED_RUNS:
        text.append("...")
    return ", ".join(text)


#: Kineto's own span of a capture (category `Trace`, `handleTraceSpan` in libkineto): from the
#: profiler's start to its stop. Every Kineto trace in tests/data/traces has one but the two
#: tiny kineto-edge fragments.
_PROFILER_SPAN = re.compile(r"^PyTorch Profiler \(\d+\)$")


@dataclass(frozen=True)
class Capture:
    """What the trace says of its own extent (trace clock, ns).

    Attributes:
        start_ns: the first instant it recorded.
        end_ns: the end of the capture: where a step is cut (see `capture_of`).
        marked: whether the trace carries the profiler's own mark of its end.
    """

    start_ns: int
    end_ns: int
    marked: bool


def capture_of(trace: Trace, is_step_row: B | None = None) -> Capture:
    """The extent of the capture.

    With the profiler's mark of its stop (Kineto's `PyTorch Profiler (N)` span; Kineto also
    writes a `Record Window End` instant at the stop, which the reader does not keep), the end
    is the later of the mark and the last event other than a ProfilerStep: recorded work is
    never cut, a step that outlasts both is. Without a mark (Nsight Systems exports, trace
    fragments), the end is the last event of any kind: a step's recorded end is then the only
    evidence of when recording stopped, and nothing contradicts it.

    Args:
        trace: a trace with at least one row.
        is_step_row: which rows are ProfilerSteps; computed when not given.
    """
    if is_step_row is None:
        is_step_row = trace.name_mask(lambda n: profiler_step_number(n) is not None)[trace.name_id]
    other = np.flatnonzero(trace.kind == EventKind.OTHER)
    marked = trace.rows_named(other, lambda n: _PROFILER_SPAN.match(n) is not None).shape[0]
    start = int(trace.ts_ns.min())
    ends = trace.end_ns
    if not marked:
        return Capture(start, int(ends.max()), False)
    lowest = np.iinfo(np.int64).min  # (some row is no step: the mark itself)
    return Capture(start, int(np.max(ends, where=~is_step_row, initial=lowest)), True)


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


def _check_steps(spec: WindowSpec, numbers: list[int], span: tuple[int, int]) -> list[str]:
    """Warnings for a `steps:` window; raises when the trace has none of its steps."""
    assert spec.first_step is not None and spec.last_step is not None
    lo, hi = spec.first_step, spec.last_step
    have = sorted({k for k in numbers if lo <= k <= hi})
    if not numbers:
        raise UsageError(
            f"--window {spec.text()}: the trace has no ProfilerStep; a time window inside its "
            f"span, {_us_window(*span)}, works"
        )
    if not have:
        raise UsageError(
            f"--window {spec.text()}: the trace has no such step; its steps are "
            f"{_runs(numbers)} (ProfilerStep#N)"
        )
    if hi - lo + 1 == len(have):
        return []
    found = set(have)
    lacking = [k for k in range(lo, hi + 1) if k not in found] if hi - lo < 10_000 else []
    plural = "s" if len(lacking) > 1 else ""
    what = f"step{plural} {_runs(lacking)}" if lacking else "some of those steps"
    return [f"--window {spec.text()}: the trace lacks {what}; analysing its steps {_runs(have)}"]


def _cut_to_trace(spec: WindowSpec, span: tuple[int, int]) -> tuple[int, int, list[str]]:
    """A time window cut to the trace's span; raises when they do not meet."""
    assert spec.start_ns is not None and spec.end_ns is not None
    w0, w1 = spec.start_ns, spec.end_ns
    s0, s1 = span
    if w1 < s0 or w0 > s1:
        raise UsageError(
            f"--window {spec.text()} lies outside the trace, which spans {_us_window(s0, s1)} "
            "(--window is on the trace's own clock)"
        )
    c0, c1 = max(w0, s0), min(w1, s1)
    if (c0, c1) == (w0, w1):
        return w0, w1, []
    return (
        c0,
        c1,
        [
            f"--window {spec.text()} reaches beyond the trace, which spans {_us_window(s0, s1)}: "
            f"cut to {_us_window(c0, c1)}"
        ],
    )


def _shortfall_warning(found: list[Shortfall]) -> str:
    parts = []
    for s in found[:_NAMED_STEPS]:
        parts.append(
            f"{s.name} ({_us(s.gpu_end_ns - s.gpu_start_ns)}) holds {s.kernels_held} of the "
            f"{s.kernels} kernel{'' if s.kernels == 1 else 's'} its host step launched "
            f"({s.held} of {s.launched} GPU activities), and {_us(s.missing_ns)} of their "
            f"{_us(s.work_end_ns - s.work_start_ns)} span lies in no GPU-side step"
        )
    if len(found) > _NAMED_STEPS:
        rest = sum(s.missing_ns for s in found[_NAMED_STEPS:])
        parts.append(f"and {len(found) - _NAMED_STEPS} more steps ({_us(rest)} left out)")
    return (
        "GPU-side ProfilerSteps leave out GPU work their host steps launched: "
        + "; ".join(parts)
        + "; the steps are the host ProfilerSteps stretched over their GPU work instead"
    )


def _clip_warning(clipped: list[tuple[str, int]], end_ns: int) -> str:
    parts = [f"{name} by {_us(past)}" for name, past in clipped[:_NAMED_STEPS]]
    if len(clipped) > _NAMED_STEPS:
        parts.append(f"and {len(clipped) - _NAMED_STEPS} more")
    return (
        f"steps run past the end of the capture (us:{_us_text(end_ns)}, the profiler's stop or "
        f"the last event recorded after it): {', '.join(parts)}; cut there"
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

    Raises:
        UsageError: `spec` is a time window outside the trace, or steps the trace lacks.
    """
    kind = trace.kind
    ts = trace.ts_ns
    step_names, step_starts, step_ends = host_steps
    warnings: list[str] = []
    is_step = trace.name_mask(lambda n: profiler_step_number(n) is not None)[trace.name_id]
    capture = capture_of(trace, is_step)
    span = (capture.start_ns, capture.end_ns)

    user_time = spec is not None and spec.start_ns is not None and spec.end_ns is not None
    w0 = w1 = 0
    if spec is not None and user_time:
        w0, w1, cut = _cut_to_trace(spec, span)
        warnings += cut
    elif spec is not None:
        gpu_step_rows = np.flatnonzero(is_step & (kind == EventKind.GPU_ANNOTATION))
        numbers = [profiler_step_number(n) for n in step_names]
        numbers += [profiler_step_number(trace.name_of(int(r))) for r in gpu_step_rows]
        warnings += _check_steps(spec, [k for k in numbers if k is not None], span)

    gpu_corr, (gpu_ts, gpu_end) = trace.correlation[gpu_rows], trace.spans_of(gpu_rows)

    def stretched() -> Steps:
        return cpu_steps(step_names, step_starts, step_ends, launches, gpu_corr, gpu_ts, gpu_end)

    gpu_step = is_step & (kind == EventKind.GPU_ANNOTATION) & (trace.device == device)
    if gpu_step.any():
        rows = np.flatnonzero(gpu_step)
        steps = gpu_steps(
            [trace.names[i] for i in trace.name_id[rows].tolist()], ts[rows], trace.end_of(rows)
        )
        short = gpu_step_shortfalls(
            steps,
            step_names,
            step_starts,
            step_ends,
            launches,
            gpu_corr,
            gpu_ts,
            gpu_end,
            kind[gpu_rows] == EventKind.KERNEL,
        )
        if short:
            # One family per GPU: stretched host steps tile time, GPU-side steps start at
            # their first kernel; a mix would overlap or leave gaps between steps.
            steps = stretched()
            warnings.append(_shortfall_warning(short))
    elif step_names:
        steps = stretched()
    else:
        steps = Steps([], np.zeros(0, np.int64), np.zeros(0, np.int64), WindowSource.GPU_ACTIVITY)
    if capture.marked:
        steps, clipped = clip_steps(steps, capture.end_ns)
        if clipped:
            warnings.append(_clip_warning(clipped, capture.end_ns))
    selected = _select_steps(steps, spec)
    if steps.dropped:
        warnings.append(
            f"left out {len(steps.dropped)} last step(s) that launched no or too little GPU work "
            f"(incompletely captured): {', '.join(steps.dropped)}"
        )

    source = steps.source
    if user_time:
        source = WindowSource.USER
        inside = (selected.starts_ns >= w0) & (selected.ends_ns <= w1)
        selected = Steps(
            [n for n, k in zip(selected.names, inside.tolist(), strict=True) if k],
            selected.starts_ns[inside],
            selected.ends_ns[inside],
            source,
            selected.dropped,
        )
    elif len(selected):
        w0, w1 = int(selected.starts_ns.min()), int(selected.ends_ns.max())
    elif spec is not None and spec.first_step is not None:
        # The trace has the steps, but this GPU's window has none of them.
        why = ""
        assert spec.last_step is not None
        lo, hi = spec.first_step, spec.last_step
        left_out = [
            n for n in steps.dropped if (k := profiler_step_number(n)) is not None and lo <= k <= hi
        ]
        if left_out:
            why = f": {', '.join(left_out)} left out as incompletely captured"
        warnings.append(f"no step in the requested --window range on this GPU{why}")
        source = WindowSource.NONE
    else:
        w0, w1 = int(gpu_ts.min()), int(gpu_end.max())
        source = WindowSource.GPU_ACTIVITY

    return WindowChoice(selected, int(w0), int(w1), source, warnings)
