"""Launch statistics of one GPU's window: launch delay, queue depth, starved queues, slow calls.

Every GPU activity (kernel, memcpy, memset) was put on its stream's queue by a host call (the
launch tree, `analysis.tree`, links the two). This module measures, per GPU window:

- the **launch delay** of each activity: its start minus the end of its launch call (HTA's
  "launch delay", `cuda_kernel_launch_stats`: "the difference between GPU kernel starting and
  CPU operator ending"), its distribution and the launching ops whose delays are outliers;
- the **queue depth** of each stream over time: activities launched (their call has started)
  and not yet finished;
- the share of the window in which **every queue of the GPU was empty while the host was
  busy** (running Python, ops, the data loader or runtime calls): time the GPU waited for a
  host that had not yet asked it for anything;
- **runtime calls longer than the kernels they launch** (HTA's "short GPU kernels").

The definitions, their sources and the differences to HTA are in `docs/launch.md`. All of it
is columnar: a few sorts over the device's activities, no Python step per event.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import unique_inverse
from badput.analysis.intervals import IntervalSet
from badput.analysis.results import DeviceAnalysis, ratio
from badput.analysis.tree import LaunchTree
from badput.trace.model import NO_ID, EventKind, Trace

__all__ = [
    "MAX_ROWS",
    "QUEUE_POINTS",
    "DelayStats",
    "LaunchOutlier",
    "LaunchStats",
    "QueueDepth",
    "QueueSeries",
    "SlowLaunchOp",
    "launch_stats",
    "outlier_threshold_ns",
]

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: Most rows of the outlier and slow-call tables.
MAX_ROWS = 10
#: Most points per stream of a drawn queue-depth series (`QueueDepth.series`).
QUEUE_POINTS = 500
#: Modified z-score above which a delay is an outlier (Iglewicz and Hoaglin, "How to Detect
#: and Handle Outliers", ASQC 1993: |M| > 3.5 with M = 0.6745 (x - median) / MAD).
MODIFIED_Z = 3.5
#: MAD / sigma of a normal distribution (the 0.6745 of the modified z-score).
_MAD_PER_SIGMA = 0.6745
#: Mean absolute deviation / sigma of a normal distribution, sqrt(2 / pi): the estimate of
#: sigma where the MAD is 0 (more than half of the delays equal, as whole-us traces give).
_MEAN_AD_PER_SIGMA = float(np.sqrt(2.0 / np.pi))


@dataclass(frozen=True)
class DelayStats:
    """Distribution of launch delays, in nanoseconds.

    Delays are signed: a GPU activity can start before its launch call returns.

    Attributes:
        count: delays measured.
        median_ns: their median (numpy's linear interpolation between the middle two).
        p90_ns: their 90th percentile (linear interpolation, numpy's default).
        max_ns: the largest.
    """

    count: int
    median_ns: float
    p90_ns: float
    max_ns: int


@dataclass(frozen=True)
class LaunchOutlier:
    """The outlier launch delays of one launching op, in nanoseconds.

    Attributes:
        op: the innermost `cpu_op` around the launch call, else the call's own name
            (`cudaLaunchKernel`, `cudaGraphLaunch`).
        count: outlier delays of this op.
        median_delay_ns: their median.
        max_delay_ns: the largest.
        total_delay_ns: their sum (how the table is ranked).
    """

    op: str
    count: int
    median_delay_ns: float
    max_delay_ns: int
    total_delay_ns: int


@dataclass(frozen=True)
class SlowLaunchOp:
    """Launch calls of one op that last longer than the kernels they launch, in nanoseconds.

    Attributes:
        op: as in `LaunchOutlier.op`.
        count: such calls.
        excess_ns: sum over them of call duration minus the kernel time it launched.
        max_excess_ns: the largest single excess.
    """

    op: str
    count: int
    excess_ns: int
    max_excess_ns: int


@dataclass(frozen=True, eq=False)
class QueueSeries:
    """Queue depth of one stream over a span, as a step function.

    `depths[i]` holds from `times_ns[i]` to `times_ns[i + 1]` (the last to the span's end).
    Where the span had more changes than the series may hold, each point is the maximum
    depth over its bin (`exact` False): peaks survive, dips shorter than a bin do not.

    Attributes:
        stream: the stream.
        times_ns: ascending times, the first at the span's start.
        depths: depth from each time on.
        exact: whether every change is listed.
    """

    stream: int
    times_ns: I64
    depths: I64
    exact: bool


@dataclass(frozen=True, eq=False)
class QueueDepth:
    """Queue depth of every stream of one GPU over the whole trace, at full resolution.

    Stream k's changes are `times_ns[offsets[k]:offsets[k + 1]]`, with the depth from each
    change on in `depths` (0 before a stream's first change and after its last).

    Attributes:
        streams: the streams, ascending.
        offsets: start of each stream's slice, and the end of the last.
        times_ns: change times, ascending within a stream, one per distinct time.
        depths: depth after each change.
    """

    streams: I64
    offsets: I64
    times_ns: I64
    depths: I64

    def series(
        self, start_ns: int, end_ns: int, max_points: int = QUEUE_POINTS
    ) -> list[QueueSeries]:
        """Each stream's step function over `[start_ns, end_ns)`, at most `max_points` each.

        Streams whose queue stays empty over the span are left out. A stream with more
        changes than `max_points` gets the upper envelope: the span cut into `max_points`
        equal bins, each point the highest depth reached in its bin.
        """
        out: list[QueueSeries] = []
        if end_ns <= start_ns or max_points < 1:
            return out
        for k, stream in enumerate(self.streams.tolist()):
            lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
            t, d = self.times_ns[lo:hi], self.depths[lo:hi]
            first = int(np.searchsorted(t, start_ns, side="right"))
            last = int(np.searchsorted(t, end_ns, side="left"))
            d0 = int(d[first - 1]) if first > 0 else 0
            times = np.concatenate([[start_ns], t[first:last]]).astype(np.int64)
            depths = np.concatenate([[d0], d[first:last]]).astype(np.int64)
            if not depths.any():
                continue
            exact = times.shape[0] <= max_points
            if not exact:
                times, depths = _envelope(times, depths, start_ns, end_ns, max_points)
            out.append(QueueSeries(int(stream), times, depths, exact))
        return out


def _envelope(times: I64, depths: I64, start_ns: int, end_ns: int, bins: int) -> tuple[I64, I64]:
    """Highest depth per bin of `[start_ns, end_ns)` cut in `bins`; equal neighbours merged."""
    span = end_ns - start_ns
    b = (times - start_ns) * bins // span  # bin of each piece's start; times[0] is bin 0
    has = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    inside = np.full(bins, -1, dtype=np.int64)
    inside[b[has]] = np.maximum.reduceat(depths, has)
    # Bin k holds the times t with floor((t - start) * bins / span) == k: it starts at
    # start + ceil(k * span / bins). The depth at a bin's start holds until its first piece.
    bin_start = start_ns + (np.arange(bins, dtype=np.int64) * span + bins - 1) // bins
    at_start = np.searchsorted(times, bin_start, side="right") - 1  # >= 0: times[0] == start
    value = np.maximum(inside, depths[at_start])
    keep = np.r_[True, value[1:] != value[:-1]]
    return bin_start[keep], value[keep]


@dataclass(frozen=True, eq=False)
class LaunchStats:
    """Launch statistics of one GPU's analysis window; times in nanoseconds.

    Attributes:
        device: the GPU.
        window_start_ns: start of the window.
        window_ns: its length.
        activities: GPU activities of the device starting in the window.
        launched: those with a launch call.
        graph_replays: distinct graph launch calls (`cudaGraphLaunch`, ...) among them.
        graph_activities: activities those replays ran.
        delay: the launch delay distribution; None without any delay to measure. A graph
            replay counts once, by its first activity (see `docs/launch.md`).
        delay_rows: the Trace rows of the activities whose delay was measured.
        delay_ns: their delays, in the same order.
        outlier_threshold_ns: delays above this are outliers; None where none can be (fewer
            than 2 delays, or all equal).
        outliers: the launching ops with outlier delays, by total delay, at most `MAX_ROWS`.
        outlier_count: outlier delays in all (the table may list only some ops).
        queue_depth_max: the highest depth of any stream of the device in the window.
        stream_depth_max: that of each stream with work in the window.
        queue: the depth of every stream over the trace (for drawing a step).
        typical_queues: the depth over the typical (median-length) step, else the window,
            at most `QUEUE_POINTS` points per stream.
        typical_span: (start, end) of that span.
        queue_empty_ns: time of the window in which every queue of the device was empty.
        queue_empty_host_busy_ns: the part of it in which the host was busy (Python frames,
            ops, data loading or runtime calls, on any thread); None without host events.
        queue_empty_share: `queue_empty_host_busy_ns / window_ns`; None where undefined.
        slow_calls: launch calls of kernels longer than the kernel time they launched.
        slow_call_excess_ns: sum of the excess.
        slow_call_ops: the ops of those calls, by excess, at most `MAX_ROWS`.
        warnings: what the trace lacked for complete numbers.
    """

    device: int
    window_start_ns: int
    window_ns: int
    activities: int = 0
    launched: int = 0
    graph_replays: int = 0
    graph_activities: int = 0
    delay: DelayStats | None = None
    delay_rows: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    delay_ns: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    outlier_threshold_ns: float | None = None
    outliers: list[LaunchOutlier] = field(default_factory=list)
    outlier_count: int = 0
    queue_depth_max: int = 0
    stream_depth_max: dict[int, int] = field(default_factory=dict)
    queue: QueueDepth | None = None
    typical_queues: list[QueueSeries] = field(default_factory=list)
    typical_span: tuple[int, int] | None = None
    queue_empty_ns: int = 0
    queue_empty_host_busy_ns: int | None = None
    queue_empty_share: float | None = None
    slow_calls: int = 0
    slow_call_excess_ns: int = 0
    slow_call_ops: list[SlowLaunchOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def compact(self) -> LaunchStats:
        """These statistics without the per-activity columns and the whole-window queues.

        What a report needs, small enough to ship from a worker to the driver.
        """
        empty = np.zeros(0, dtype=np.int64)
        return dataclasses.replace(self, delay_rows=empty, delay_ns=empty, queue=None)


def outlier_threshold_ns(delay_ns: npt.ArrayLike) -> float | None:
    """The delay above which a launch delay is an outlier; None where none can be.

    A delay is an outlier when its modified z-score (Iglewicz and Hoaglin, 1993) exceeds 3.5:
    `0.6745 (x - median) / MAD > 3.5`, i.e. `x > median + 5.19 MAD`. The MAD is robust to the
    tail it is meant to find (half the delays can be outliers before it moves), unlike a
    standard deviation, and unlike a fixed percentile it flags nothing in a tight
    distribution. Where the MAD is 0 (more than half the delays equal, as traces in whole
    microseconds give), sigma is estimated from the mean absolute deviation instead
    (`MeanAD / sqrt(2 / pi)` for normal data); where that is 0 too, all delays are equal.

    Example:
        >>> outlier_threshold_ns([10, 11, 12, 13, 100])  # median 12, MAD 1
        17.189...
    """
    x = np.asarray(delay_ns, dtype=np.float64)
    if x.shape[0] < 2:
        return None
    median = float(np.median(x))
    dev = np.abs(x - median)
    mad = float(np.median(dev))
    sigma = mad / _MAD_PER_SIGMA if mad > 0 else float(dev.mean()) / _MEAN_AD_PER_SIGMA
    if sigma <= 0:
        return None
    return median + MODIFIED_Z * sigma


def launch_stats(trace: Trace, analysis: DeviceAnalysis, tree: LaunchTree) -> LaunchStats:
    """Launch delay, queue depth, starved queues and slow launch calls of one GPU's window.

    Args:
        trace: the trace the analysis and the tree were built from.
        analysis: one GPU's analysis (its device, window, steps and host interval sets).
        tree: the trace's launch tree.

    Returns:
        The statistics; a GPU without activity in the window gives zeros and Nones, and what
        the trace lacks (launch calls, host events) is named in `warnings`, never raised.

    Example:
        >>> from badput.analysis import analyze_trace  # doctest: +SKIP
        >>> d = analyze_trace(trace)[0]  # doctest: +SKIP
        >>> launch_stats(trace, d, d.timeline.tree).delay  # doctest: +SKIP
        DelayStats(count=97, median_ns=2000.0, p90_ns=12400.0, max_ns=83000)
    """
    w0, w_ns, device = analysis.window_start_ns, analysis.window_ns, analysis.device
    w1 = w0 + w_ns
    empty = LaunchStats(device=device, window_start_ns=w0, window_ns=w_ns)
    if device < 0 or len(tree) == 0:
        return empty
    on = np.flatnonzero(trace.device[tree.row] == device)
    if on.size == 0:
        return empty
    warnings: list[str] = []
    act = _Activities.build(trace, tree, on)
    in_window = (act.start >= w0) & (act.start < w1)
    n_window = int(in_window.sum())
    launched = in_window & act.has_call
    missing = n_window - int(launched.sum())
    if missing:
        warnings.append(
            f"{missing} of {n_window} GPU activities in the window have no launch call (no "
            "correlation id or launch flow links them to a runtime call): they have no "
            "launch delay, and count in their stream's queue only from their start"
        )

    counted = launched & act.first_of_call
    delay_ns = act.start[counted] - act.call_end[counted]
    op = act.op[counted]
    threshold = outlier_threshold_ns(delay_ns)
    outliers, n_out = _outliers(trace, delay_ns, op, threshold)
    graph_calls = np.unique(act.call[launched & act.graph])
    slow, excess_ns, slow_ops = _slow_calls(trace, act, launched)

    queue = _queue_depth(act)
    depth_max = _window_max(queue, w0, w1)
    span = _typical_span(analysis)
    busy = IntervalSet.from_spans(act.queued_from, act.end)
    queue_empty = IntervalSet.span(w0, w1).subtract(busy)
    host = _host_busy(trace, analysis, warnings)
    empty_busy = None if host is None else queue_empty.intersect(host).total_ns()
    return LaunchStats(
        device=device,
        window_start_ns=w0,
        window_ns=w_ns,
        activities=n_window,
        launched=int(launched.sum()),
        graph_replays=int(graph_calls.shape[0]),
        graph_activities=int((launched & act.graph).sum()),
        delay=_distribution(delay_ns),
        delay_rows=act.row[counted],
        delay_ns=delay_ns,
        outlier_threshold_ns=threshold,
        outliers=outliers,
        outlier_count=n_out,
        queue_depth_max=max(depth_max.values(), default=0),
        stream_depth_max=depth_max,
        queue=queue,
        typical_queues=queue.series(*span) if span else [],
        typical_span=span,
        queue_empty_ns=queue_empty.total_ns(),
        queue_empty_host_busy_ns=empty_busy,
        queue_empty_share=None if empty_busy is None else ratio(empty_busy, w_ns),
        slow_calls=slow,
        slow_call_excess_ns=excess_ns,
        slow_call_ops=slow_ops,
        warnings=warnings,
    )


@dataclass(frozen=True, eq=False)
class _Activities:
    """The device's GPU activities (all of them, not only the window's), as columns.

    `queued_from` is when an activity joined its queue: its launch call's start (HTA's queue
    length counts from there too), or its own start where it has no call or started before
    the call did (clock skew); `end` is never before it. `first_of_call` marks, per launch
    call, its earliest activity: every activity of a call that launched only one, the first
    kernel of a graph replay.
    """

    row: I64
    kind: npt.NDArray[np.int8]
    start: I64
    end: I64
    dur: I64
    stream: I64
    call: I64
    has_call: Bools
    call_start: I64
    call_end: I64
    graph: Bools
    op: I64
    queued_from: I64
    first_of_call: Bools

    @staticmethod
    def build(trace: Trace, tree: LaunchTree, on: npt.NDArray[np.intp]) -> _Activities:
        row = tree.row[on]
        start = trace.ts_ns[row]
        dur = np.maximum(trace.dur_ns[row], 0)
        call = tree.launch_row[on]
        has_call = call >= 0
        safe = np.where(has_call, call, 0)
        call_start = np.where(has_call, trace.ts_ns[safe], start)
        call_end = np.where(has_call, trace.ts_ns[safe] + trace.dur_ns[safe], start)
        inner = tree.inner_op[on]
        # The op named for a launch: its innermost op, else the call itself; NO_ID if neither.
        op = np.where(inner >= 0, trace.name_id[np.maximum(inner, 0)], NO_ID)
        op = np.where((inner < 0) & has_call, trace.name_id[safe], op).astype(np.int64)
        queued_from = np.minimum(call_start, start)
        end = np.maximum(start + dur, queued_from)
        first = np.ones(on.shape[0], dtype=np.bool_)
        if has_call.any():
            idx = np.flatnonzero(has_call)
            order = idx[np.lexsort((start[idx], call[idx]))]
            c = call[order]
            first[order] = np.r_[True, c[1:] != c[:-1]]
        return _Activities(
            row=row,
            kind=trace.kind[row],
            start=start,
            end=end,
            dur=dur,
            stream=tree.stream[on],
            call=call,
            has_call=has_call,
            call_start=call_start,
            call_end=call_end,
            graph=tree.graph_launch[on] >= 0,
            op=op,
            queued_from=queued_from,
            first_of_call=first,
        )


def _distribution(delay_ns: I64) -> DelayStats | None:
    if delay_ns.shape[0] == 0:
        return None
    median, p90 = np.percentile(delay_ns, [50, 90])
    return DelayStats(delay_ns.shape[0], float(median), float(p90), int(delay_ns.max()))


def _op_name(trace: Trace, op: int) -> str:
    return trace.names[op] if op >= 0 else "(no launch call)"


def _outliers(
    trace: Trace, delay_ns: I64, op: I64, threshold: float | None
) -> tuple[list[LaunchOutlier], int]:
    """Per launching op, its outlier delays; the ops by total delay, and the outlier count."""
    if threshold is None:
        return [], 0
    out = delay_ns > threshold
    d, o = delay_ns[out], op[out]
    if d.shape[0] == 0:
        return [], 0
    order = np.lexsort((d, o))
    d, o = d[order], o[order]
    first = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
    count = np.diff(np.r_[first, o.shape[0]])
    total = np.add.reduceat(d, first)
    # Sorted by delay within an op: the median is the middle one (or the mean of the two).
    mid_lo, mid_hi = first + (count - 1) // 2, first + count // 2
    median = (d[mid_lo] + d[mid_hi]) / 2
    biggest = d[first + count - 1]
    # Equal totals by the op's name (its interned id follows the file's order).
    names = [_op_name(trace, int(o[f])) for f in first.tolist()]
    totals = total.tolist()
    rank = sorted(range(len(names)), key=lambda k: (-totals[k], names[k]))[:MAX_ROWS]
    rows = [
        LaunchOutlier(
            op=names[k],
            count=int(count[k]),
            median_delay_ns=float(median[k]),
            max_delay_ns=int(biggest[k]),
            total_delay_ns=int(totals[k]),
        )
        for k in rank
    ]
    return rows, int(d.shape[0])


def _slow_calls(
    trace: Trace, act: _Activities, launched: Bools
) -> tuple[int, int, list[SlowLaunchOp]]:
    """Kernel launch calls that last longer than the kernel time they launched.

    Only kernels: a memcpy's call may block until the copy is done (synchronous copies), so
    its length is no launch cost. A call that launched several kernels (a graph replay) is
    compared with their summed time.
    """
    k = np.flatnonzero(launched & (act.kind == EventKind.KERNEL))
    if k.size == 0:
        return 0, 0, []
    calls, which = unique_inverse(act.call[k])
    kernel_ns = np.bincount(which, weights=act.dur[k]).astype(np.int64)
    call_ns = np.maximum(trace.dur_ns[calls], 0)
    slow = call_ns > kernel_ns
    if not slow.any():
        return 0, 0, []
    excess = (call_ns - kernel_ns)[slow]
    # The op of a call: that of its first kernel (all its kernels share the call's op).
    op_of_call = np.empty(calls.shape[0], dtype=np.int64)
    op_of_call[which] = act.op[k]
    ops = op_of_call[slow]
    names, group = unique_inverse(ops)
    total = np.bincount(group, weights=excess).astype(np.int64)
    count = np.bincount(group)
    biggest = np.zeros(names.shape[0], dtype=np.int64)
    np.maximum.at(biggest, group, excess)
    rank = np.lexsort((names, -total))[:MAX_ROWS]
    rows = [
        SlowLaunchOp(_op_name(trace, int(names[g])), int(count[g]), int(total[g]), int(biggest[g]))
        for g in rank.tolist()
    ]
    return int(slow.sum()), int(excess.sum()), rows


def _queue_depth(act: _Activities) -> QueueDepth:
    """Every stream's depth: +1 when an activity is queued, -1 when it ends.

    An activity is in its queue over `[queued_from, end)`; at one instant ends count before
    launches (half-open intervals), and zero-length stays are left out, so the depth never
    dips below zero.
    """
    stay = act.end > act.queued_from
    n = int(stay.sum())
    if n == 0:  # every activity of zero length (or ending as it is queued): never a queue
        empty = np.zeros(0, dtype=np.int64)
        return QueueDepth(empty, np.zeros(1, dtype=np.int64), empty, empty.copy())
    stream = np.concatenate([act.stream[stay], act.stream[stay]])
    times = np.concatenate([act.queued_from[stay], act.end[stay]])
    step = np.concatenate([np.ones(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)])
    order = np.lexsort((step, times, stream))
    stream, times, step = stream[order], times[order], step[order]
    # Each stream's steps sum to zero, so one running sum over all streams, sorted by stream
    # first, restarts at zero at every stream's first change.
    depth = np.cumsum(step)
    # Keep the last change of each (stream, time): the depth after all of that instant's.
    last = np.r_[(stream[1:] != stream[:-1]) | (times[1:] != times[:-1]), True]
    stream, times, depth = stream[last], times[last], depth[last]
    # And only real changes (one activity ending the instant another is queued is none).
    new_stream = np.r_[True, stream[1:] != stream[:-1]]
    change = new_stream | np.r_[True, depth[1:] != depth[:-1]]
    stream, times, depth = stream[change], times[change], depth[change]
    streams, offsets = np.unique(stream, return_index=True)
    return QueueDepth(
        streams=streams.astype(np.int64),
        offsets=np.r_[offsets, stream.shape[0]].astype(np.int64),
        times_ns=times.astype(np.int64),
        depths=depth.astype(np.int64),
    )


def _window_max(queue: QueueDepth, w0: int, w1: int) -> dict[int, int]:
    """Highest depth of each stream over `[w0, w1)`, streams whose queue was never empty."""
    if w1 <= w0:
        return {}
    out: dict[int, int] = {}
    for k, stream in enumerate(queue.streams.tolist()):
        lo, hi = int(queue.offsets[k]), int(queue.offsets[k + 1])
        t, d = queue.times_ns[lo:hi], queue.depths[lo:hi]
        first = int(np.searchsorted(t, w0, side="right"))
        last = int(np.searchsorted(t, w1, side="left"))
        at_start = int(d[first - 1]) if first > 0 else 0
        top = max(at_start, int(d[first:last].max()) if last > first else 0)
        if top > 0:
            out[int(stream)] = top
    return out


def _typical_span(analysis: DeviceAnalysis) -> tuple[int, int] | None:
    """The median-length step (`segments.pick_steps`'s typical one), else the window."""
    steps = sorted(analysis.steps, key=lambda s: (s.dur_ns, s.start_ns))
    if steps:
        s = steps[(len(steps) - 1) // 2]
        if s.dur_ns > 0:
            return s.start_ns, s.start_ns + s.dur_ns
    if analysis.window_ns > 0:
        return analysis.window_start_ns, analysis.window_start_ns + analysis.window_ns
    return None


def _host_busy(trace: Trace, analysis: DeviceAnalysis, warnings: list[str]) -> IntervalSet | None:
    """When the host ran anything the trace records: Python, ops, data loading, runtime calls.

    The analysis's host sets (ops and annotations without the ProfilerStep spans, data
    loading spans, runtime and driver calls) plus the Python frames, of every host thread.
    None, with a warning, where the trace has no host events.
    """
    python = trace.kind == EventKind.PYTHON
    frame_start = trace.ts_ns[python]
    frames = IntervalSet.from_spans(frame_start, frame_start + trace.dur_ns[python])
    t = analysis.timeline
    if t is None:
        warnings.append("the analysis holds no host interval sets: queue_empty_share is unknown")
        return None
    busy = t.host_cpu.union(t.host_dataloader).union(t.host_runtime).union(frames)
    if len(busy) == 0:
        warnings.append(
            "the trace has no host events (no Python frames, ops or runtime calls): "
            "queue_empty_share is unknown"
        )
        return None
    return busy
