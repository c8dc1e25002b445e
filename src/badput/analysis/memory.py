"""GPU memory: the caching allocator's snapshot replayed, and Kineto's memory timeline.

Snapshot (`analyze_snapshot`): the history in `device_traces` is replayed forward, as
PyTorch's memory_viz does. An allocation counts from its `alloc` until its `free_completed`
(a block whose free was only requested still holds memory nobody else can use), by the bytes
the trace records (requested bytes). Reserved memory counts `segment_alloc`/`segment_map` up
and `segment_free`/`segment_unmap` down. The history may start after allocations already
existed (a ring buffer, or recording turned on mid-run); those are found from the end: a
`free_completed` of an address the trace never allocated, or a block still active at dump
time that the trace never allocated, was alive at the start. Reserved memory at the start is
the segments at dump time minus what the history added.

Kineto (`memory_timelines`): the `[memory]` instant events carry the allocator's own
`Total Allocated` and `Total Reserved` after each event; their maximum is the peak.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import distinct
from badput.trace.model import NO_ID, EventKind, Trace
from badput.trace.snapshot import ACTIONS, DeviceTrace, Segment, Snapshot

__all__ = [
    "DeviceMemory",
    "MemoryTimeline",
    "SegmentUse",
    "ShortLived",
    "SiteBytes",
    "SnapshotAnalysis",
    "StepChurn",
    "analyze_snapshot",
    "memory_timelines",
    "segment_use",
]

I64 = npt.NDArray[np.int64]

_ALLOC, _FREE_REQ, _FREE, _SEG_ALLOC, _SEG_FREE, _SEG_MAP, _SEG_UNMAP = (
    ACTIONS.index(a)
    for a in (
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
    )
)
_OOM = ACTIONS.index("oom")

#: Site of memory alive before the history starts and freed during it (its allocation is not
#: in the trace, so neither is where it happened).
BEFORE_TRACE = "<allocated before the trace>"

#: Sites listed at the peak.
TOP_SITES = 10
#: A large short-lived allocation: freed within this many allocator entries of its alloc ...
SHORT_ENTRIES = 4
#: ... and at least this share of the peak allocated bytes (and `MIN_LARGE_BYTES`).
LARGE_SHARE = 0.01
MIN_LARGE_BYTES = 1 << 20
_SHORT_LISTED = 10


@dataclass(frozen=True)
class SiteBytes:
    """Bytes alive at a moment, by source site (`trace.snapshot.site_of`)."""

    frame: str
    bytes: int
    count: int


@dataclass(frozen=True)
class SegmentUse:
    """How full the segments are at dump time (fragmentation), in bytes.

    Attributes:
        reserved_bytes: sum of the segments' sizes.
        allocated_bytes: sum of the active blocks' sizes (rounded sizes: memory held).
        fragmentation_bytes: reserved minus allocated: cached but unused.
        segments: number of segments.
        largest_free_block_bytes: the largest free block of each segment, in segment order.
        below_half: segments with less than half their size in active blocks.
    """

    reserved_bytes: int
    allocated_bytes: int
    fragmentation_bytes: int
    segments: int
    largest_free_block_bytes: list[int]
    below_half: int

    @property
    def below_half_share(self) -> float:
        """Share of segments below half use (0 without segments)."""
        return self.below_half / self.segments if self.segments else 0.0


@dataclass(frozen=True)
class ShortLived:
    """A large allocation freed soon after it was made."""

    frame: str
    bytes: int
    alloc_entry: int
    entries: int  # allocator entries between alloc and free_completed
    lifetime_us: int | None


@dataclass(frozen=True)
class StepChurn:
    """Allocator traffic inside one annotated step."""

    name: str
    start_us: int
    allocs: int
    frees: int
    alloc_bytes: int


@dataclass(frozen=True)
class DeviceMemory:
    """One device of a snapshot: its peaks, what was alive at the peak, fragmentation, churn.

    Bytes of allocations are the requested bytes the history records; `end` counts the
    blocks' rounded sizes. Without a history the peaks are the state at dump time.

    Attributes:
        device: CUDA device index.
        entries: history entries replayed (0 without a history).
        peak_allocated_bytes: most bytes allocated at once.
        peak_allocated_entry: index of the history entry that reached it (-1: dump time).
        peak_allocated_time_us: that entry's time (None without times).
        peak_step: the annotated step the peak fell in (None without steps).
        reserved_at_peak_bytes: reserved bytes at that moment.
        peak_reserved_bytes: most bytes reserved at once.
        peak_reserved_entry: index of the entry that reached it (-1: dump time).
        allocated_at_peak_reserved_bytes: allocated bytes when reserved peaked.
        initial_allocated_bytes: alive before the history starts.
        initial_reserved_bytes: reserved before the history starts.
        top_sites: bytes alive at the peak by site, largest first.
        kinds_at_peak: bytes alive at the peak by stack kind (`trace.snapshot.stack_kind`),
            plus `before-trace` for memory allocated before the history.
        end: the segments at dump time.
        allocs: alloc entries.
        frees: free_completed entries.
        ooms: out-of-memory entries.
        steps: allocs and frees per annotated step; None when nothing marks steps.
        short_lived: the largest allocations freed within `SHORT_ENTRIES` entries.
        expandable: whether the segments are expandable (`expandable_segments:True`).
        warnings: inconsistencies met while replaying.
        timeline: allocated and reserved bytes after every history entry, kept for drawing
            (`ts_ns` is the entry's time, or its index when the history has no times); None
            without a history.
    """

    device: int
    entries: int
    peak_allocated_bytes: int
    peak_allocated_entry: int
    peak_allocated_time_us: int | None
    peak_step: str | None
    reserved_at_peak_bytes: int
    peak_reserved_bytes: int
    peak_reserved_entry: int
    allocated_at_peak_reserved_bytes: int
    initial_allocated_bytes: int
    initial_reserved_bytes: int
    top_sites: list[SiteBytes]
    kinds_at_peak: dict[str, int]
    end: SegmentUse
    allocs: int
    frees: int
    ooms: int
    steps: list[StepChurn] | None
    short_lived: list[ShortLived]
    expandable: bool
    warnings: list[str] = field(default_factory=list)
    timeline: MemoryTimeline | None = None

    @property
    def fragmentation_at_peak_reserved_bytes(self) -> int:
        """Reserved but not allocated when reserved memory peaked."""
        return self.peak_reserved_bytes - self.allocated_at_peak_reserved_bytes


@dataclass(frozen=True)
class SnapshotAnalysis:
    """Every device of a snapshot."""

    path: str
    devices: list[DeviceMemory]
    allocator_settings: dict[str, str]
    warnings: list[str]

    @property
    def main(self) -> DeviceMemory | None:
        """The device with the highest reserved peak (the one that decides whether it fits)."""
        return max(self.devices, key=lambda d: (d.peak_reserved_bytes, -d.device), default=None)


def segment_use(segments: list[Segment]) -> SegmentUse:
    """Fragmentation of a set of segments at dump time.

    Args:
        segments: the segments of one device.
    """
    reserved = sum(s.total_size for s in segments)
    allocated = 0
    largest: list[int] = []
    below = 0
    for s in segments:
        active = sum(b.size for b in s.blocks if b.active)
        allocated += active
        largest.append(max((b.size for b in s.blocks if not b.active), default=0))
        if 2 * active < s.total_size:
            below += 1
    return SegmentUse(reserved, allocated, reserved - allocated, len(segments), largest, below)


def analyze_snapshot(snapshot: Snapshot, device: int | None = None) -> SnapshotAnalysis:
    """Replay the allocator history of each device of a snapshot.

    Args:
        snapshot: a loaded snapshot (`trace.snapshot.load_snapshot`).
        device: only this device; None for all.

    Returns:
        Per device: peaks, sites alive at the peak, fragmentation, churn, short-lived
        allocations.

    Example:
        >>> snap = load_snapshot("snap.pickle")  # doctest: +SKIP
        >>> analyze_snapshot(snap).devices[0].peak_allocated_bytes  # doctest: +SKIP
        1073741824
    """
    devices = snapshot.devices() if device is None else [device]
    out = [_device(snapshot, d) for d in devices]
    return SnapshotAnalysis(
        snapshot.path, out, dict(snapshot.allocator_settings), list(snapshot.warnings)
    )


def _device(snapshot: Snapshot, device: int) -> DeviceMemory:
    segments = [s for s in snapshot.segments if s.device == device]
    end = segment_use(segments)
    trace = snapshot.trace_of(device)
    expandable = any(s.is_expandable for s in segments)
    if trace is None:
        return _without_history(snapshot, device, segments, end, expandable)
    return _replay(snapshot, trace, segments, end, expandable)


def _without_history(
    snapshot: Snapshot, device: int, segments: list[Segment], end: SegmentUse, expandable: bool
) -> DeviceMemory:
    """The state at dump time as the only moment known."""
    sites: Counter[int] = Counter()
    counts: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    allocated = 0
    for s in segments:
        for b in s.blocks:
            if b.active:
                allocated += b.requested_size
                sites[b.site] += b.requested_size
                counts[b.site] += 1
                kinds[snapshot.kinds[b.kind]] += b.requested_size
    top = _top(
        {snapshot.sites[k]: v for k, v in sites.items()},
        {snapshot.sites[k]: c for k, c in counts.items()},
    )
    return DeviceMemory(
        device=device,
        entries=0,
        peak_allocated_bytes=allocated,
        peak_allocated_entry=-1,
        peak_allocated_time_us=None,
        peak_step=None,
        reserved_at_peak_bytes=end.reserved_bytes,
        peak_reserved_bytes=end.reserved_bytes,
        peak_reserved_entry=-1,
        allocated_at_peak_reserved_bytes=allocated,
        initial_allocated_bytes=allocated,
        initial_reserved_bytes=end.reserved_bytes,
        top_sites=top,
        kinds_at_peak=dict(kinds),
        end=end,
        allocs=0,
        frees=0,
        ooms=0,
        steps=None,
        short_lived=[],
        expandable=expandable,
        warnings=[
            "no allocator history (record with torch.cuda.memory._record_memory_history): "
            "the peaks are the state at dump time"
        ],
    )


def _top(by_site: dict[str, int], counts: dict[str, int]) -> list[SiteBytes]:
    ranked = sorted(by_site.items(), key=lambda kv: (-kv[1], kv[0]))
    return [SiteBytes(s, b, counts.get(s, 0)) for s, b in ranked[:TOP_SITES] if b > 0]


def _replay(
    snapshot: Snapshot,
    trace: DeviceTrace,
    segments: list[Segment],
    end: SegmentUse,
    expandable: bool,
) -> DeviceMemory:
    warnings: list[str] = []
    action = trace.action.tolist()
    addr = trace.addr.tolist()
    size = trace.size.tolist()
    site = trace.site.tolist()
    kind = trace.kind.tolist()
    n = len(action)

    # Pass 1: what was alive before the history started.
    live: dict[int, int] = {}  # addr -> entry of its alloc
    initial: list[tuple[int, int, str, str]] = []  # (addr, bytes, site, kind) alive at start
    for i in range(n):
        a = action[i]
        if a == _ALLOC:
            live[addr[i]] = i
        elif a == _FREE and live.pop(addr[i], None) is None:
            initial.append((addr[i], size[i], BEFORE_TRACE, "before-trace"))
    active_end = {b.address: b for s in segments for b in s.blocks if b.active}
    for a_, b in active_end.items():
        if a_ not in live:
            initial.append((a_, b.requested_size, snapshot.sites[b.site], "before-trace"))
    initial_allocated = sum(x[1] for x in initial)

    grown = 0
    for i in range(n):
        a = action[i]
        if a in (_SEG_ALLOC, _SEG_MAP):
            grown += size[i]
        elif a in (_SEG_FREE, _SEG_UNMAP):
            grown -= size[i]
    initial_reserved = end.reserved_bytes - grown
    if initial_reserved < 0:
        warnings.append(
            f"the history adds {grown:,} reserved bytes but the segments hold only "
            f"{end.reserved_bytes:,}: reserved memory before the history is unknown (taken as 0)"
        )
        initial_reserved = 0

    # Pass 2: the curves and their peaks.
    allocated = peak_alloc = initial_allocated
    reserved = peak_res = initial_reserved
    peak_alloc_i = peak_res_i = -1
    reserved_at_peak = reserved
    alloc_at_peak_res = allocated
    allocs = frees = ooms = 0
    born: dict[int, tuple[int, int]] = {}  # addr -> (entry, bytes), for short-lived ones
    short: list[tuple[int, int, int]] = []  # (bytes, alloc entry, free entry)
    for i in range(n):
        a = action[i]
        if a == _ALLOC:
            allocated += size[i]
            allocs += 1
            born[addr[i]] = (i, size[i])
        elif a == _FREE:
            allocated -= size[i]
            frees += 1
            birth = born.pop(addr[i], None)
            if birth is not None and i - birth[0] <= SHORT_ENTRIES:
                short.append((birth[1], birth[0], i))
        elif a in (_SEG_ALLOC, _SEG_MAP):
            reserved += size[i]
        elif a in (_SEG_FREE, _SEG_UNMAP):
            reserved -= size[i]
        elif a == _OOM:
            ooms += 1
        if allocated > peak_alloc:
            peak_alloc, peak_alloc_i, reserved_at_peak = allocated, i, reserved
        if reserved > peak_res:
            peak_res, peak_res_i, alloc_at_peak_res = reserved, i, allocated
    if peak_alloc_i == -1:
        reserved_at_peak = initial_reserved
    end_trace = sum(b.requested_size for b in active_end.values())
    if allocated != end_trace:
        warnings.append(
            f"the replayed history ends at {allocated:,} allocated bytes but the segments hold "
            f"{end_trace:,} in active blocks (recording stopped before the dump?)"
        )

    # Pass 3: what was alive at the allocated peak.
    alive: dict[int, tuple[int, str, str]] = {a_: (b_, s_, k_) for a_, b_, s_, k_ in initial}
    for i in range(peak_alloc_i + 1):
        a = action[i]
        if a == _ALLOC:
            alive[addr[i]] = (size[i], snapshot.sites[site[i]], snapshot.kinds[kind[i]])
        elif a == _FREE:
            alive.pop(addr[i], None)
    by_site: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    kinds: dict[str, int] = defaultdict(int)
    for b_, s_, k_ in alive.values():
        by_site[s_] += b_
        counts[s_] += 1
        kinds[k_] += b_

    times = trace.time_us.tolist() if trace.has_times else None
    steps = _steps(snapshot, trace)
    peak_step = None
    if steps is not None and times is not None and peak_alloc_i >= 0:
        t = times[peak_alloc_i]
        for s in steps:
            if s.start_us <= t:
                peak_step = s.name
    threshold = max(MIN_LARGE_BYTES, LARGE_SHARE * peak_alloc)
    short_lived = [
        ShortLived(
            frame=snapshot.sites[site[i0]],
            bytes=b_,
            alloc_entry=i0,
            entries=i1 - i0,
            lifetime_us=times[i1] - times[i0] if times is not None else None,
        )
        for b_, i0, i1 in sorted(short, key=lambda x: (-x[0], x[1]))
        if b_ >= threshold
    ][:_SHORT_LISTED]
    return DeviceMemory(
        device=trace.device,
        entries=n,
        peak_allocated_bytes=peak_alloc,
        peak_allocated_entry=peak_alloc_i,
        peak_allocated_time_us=times[peak_alloc_i]
        if times is not None and peak_alloc_i >= 0
        else None,
        peak_step=peak_step,
        reserved_at_peak_bytes=reserved_at_peak,
        peak_reserved_bytes=peak_res,
        peak_reserved_entry=peak_res_i,
        allocated_at_peak_reserved_bytes=alloc_at_peak_res,
        initial_allocated_bytes=initial_allocated,
        initial_reserved_bytes=initial_reserved,
        top_sites=_top(dict(by_site), dict(counts)),
        kinds_at_peak=dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        end=end,
        allocs=allocs,
        frees=frees,
        ooms=ooms,
        steps=steps,
        short_lived=short_lived,
        expandable=expandable,
        warnings=warnings,
        timeline=_curve(trace, initial_allocated, initial_reserved),
    )


def _curve(trace: DeviceTrace, allocated0: int, reserved0: int) -> MemoryTimeline | None:
    """The replayed totals after each entry as a timeline (the same sums as `_replay`)."""
    act, size = trace.action, trace.size
    if len(act) == 0:
        return None
    grow = np.isin(act, [_SEG_ALLOC, _SEG_MAP])
    shrink = np.isin(act, [_SEG_FREE, _SEG_UNMAP])
    da = np.where(act == _ALLOC, size, np.where(act == _FREE, -size, 0))
    dr = np.where(grow, size, np.where(shrink, -size, 0))
    alloc = allocated0 + np.cumsum(da, dtype=np.int64)
    res = reserved0 + np.cumsum(dr, dtype=np.int64)
    ts = trace.time_us * 1000 if trace.has_times else np.arange(len(act), dtype=np.int64)
    return _timeline(trace.device, ts, alloc, res, MAX_POINTS)


def _steps(snapshot: Snapshot, trace: DeviceTrace) -> list[StepChurn] | None:
    """Allocs and frees per step, the steps marked by `ProfilerStep#N` annotations.

    A step runs from its annotation's start to the next step's start (the last one to its
    END annotation, else to the end of the history). None without step annotations or
    without entry times.
    """
    if not trace.has_times:
        return None
    marks = [
        a
        for a in snapshot.annotations
        if a.name.startswith("ProfilerStep#")
        and a.stage.upper() in ("START", "")
        and a.device in (trace.device, NO_ID)
    ]
    if not marks:
        return None
    ends = [
        a.time_us
        for a in snapshot.annotations
        if a.name == marks[-1].name and a.stage.upper() == "END"
    ]
    t = trace.time_us
    stop = ends[-1] if ends else int(t[-1]) + 1
    bounds = [m.time_us for m in marks] + [stop]
    out = []
    for k, m in enumerate(marks):
        sel = (t >= bounds[k]) & (t < bounds[k + 1])
        acts = trace.action[sel]
        is_alloc = acts == _ALLOC
        out.append(
            StepChurn(
                name=m.name,
                start_us=m.time_us,
                allocs=int(is_alloc.sum()),
                frees=int((acts == _FREE).sum()),
                alloc_bytes=int(trace.size[sel][is_alloc].sum()),
            )
        )
    return out


# ---- Kineto [memory] events ------------------------------------------------------------------

#: Points kept per device for drawing; the peaks are always among them.
MAX_POINTS = 1000


@dataclass(frozen=True, eq=False)
class MemoryTimeline:
    """Allocated and reserved bytes of one GPU over time, from Kineto's `[memory]` events.

    Attributes:
        device: CUDA device index.
        events: memory events on the device that carry totals.
        ts_ns: times of the points kept for drawing (trace clock).
        allocated_bytes: `Total Allocated` at each point.
        reserved_bytes: `Total Reserved` at each point.
        peak_allocated_bytes: the maximum `Total Allocated` over every event.
        peak_allocated_ts_ns: the first time it was reached.
        peak_reserved_bytes: the maximum `Total Reserved` over every event.
        peak_reserved_ts_ns: the first time it was reached.
        start_ns: the first event's time.
        end_ns: the last event's time.
    """

    device: int
    events: int
    ts_ns: I64
    allocated_bytes: I64
    reserved_bytes: I64
    peak_allocated_bytes: int
    peak_allocated_ts_ns: int
    peak_reserved_bytes: int
    peak_reserved_ts_ns: int
    start_ns: int
    end_ns: int


def memory_timelines(trace: Trace, max_points: int = MAX_POINTS) -> list[MemoryTimeline]:
    """Per GPU, the allocator's totals over time from the trace's `[memory]` events.

    Events on the CPU (`Device Type` 0) and events without totals (traces before PyTorch
    1.10 record only `Bytes`) are left out; a GPU without such events has no timeline.

    Args:
        trace: a Kineto trace.
        max_points: points kept per GPU for drawing: in each of `max_points // 2` equal time
            buckets, the point with the most allocated and the one with the most reserved.

    Returns:
        One timeline per GPU, by device index.
    """
    alloc, res = trace.allocated_totals, trace.reserved_totals
    # Rows with both totals: the sparse columns' rows in common (ascending, each unique),
    # and where each column holds them (most traces give every memory row both).
    if alloc.rows.shape == res.rows.shape and np.array_equal(alloc.rows, res.rows):
        both = alloc.rows
        at_alloc = at_res = np.arange(both.shape[0])
    else:
        both = np.intersect1d(alloc.rows, res.rows, assume_unique=True)
        at_alloc, at_res = np.searchsorted(alloc.rows, both), np.searchsorted(res.rows, both)
    device = trace.device[both]
    keep = (trace.kind[both] == EventKind.MEMORY) & (device >= 0)
    rows, device, at_alloc, at_res = both[keep], device[keep], at_alloc[keep], at_res[keep]
    out = []
    devices = distinct(device, int(device.max()) + 1)[0] if device.shape[0] else device
    for dev in devices.tolist():
        mine = np.flatnonzero(device == dev)
        mine = mine[np.argsort(trace.ts_ns[rows[mine]], kind="stable")]
        out.append(
            _timeline(
                dev,
                trace.ts_ns[rows[mine]],
                alloc.values[at_alloc[mine]].astype(np.int64, copy=False),
                res.values[at_res[mine]].astype(np.int64, copy=False),
                max_points,
            )
        )
    return out


def _timeline(device: int, ts: I64, alloc: I64, res: I64, max_points: int) -> MemoryTimeline:
    """A timeline of totals in time order: peaks over every point, a decimated copy to draw."""
    ia, ir = int(np.argmax(alloc)), int(np.argmax(res))
    keep = _decimate(ts, alloc, res, max_points) if len(ts) > max_points else np.arange(len(ts))
    return MemoryTimeline(
        device=device,
        events=len(ts),
        ts_ns=ts[keep],
        allocated_bytes=alloc[keep],
        reserved_bytes=res[keep],
        peak_allocated_bytes=int(alloc[ia]),
        peak_allocated_ts_ns=int(ts[ia]),
        peak_reserved_bytes=int(res[ir]),
        peak_reserved_ts_ns=int(ts[ir]),
        start_ns=int(ts[0]),
        end_ns=int(ts[-1]),
    )


def _decimate(ts: I64, alloc: I64, res: I64, max_points: int) -> npt.NDArray[np.intp]:
    """Indices to draw: first, last, and per time bucket the highest of each curve."""
    buckets = max(1, (max_points - 2) // 2)
    span = max(int(ts[-1] - ts[0]), 1)
    b = np.minimum((ts - ts[0]) * buckets // span, buckets - 1)
    keep = {0, len(ts) - 1}
    # The times ascend, so the buckets come in runs: each run's maximum, and the first
    # point of the run that reaches it.
    starts = np.flatnonzero(np.append(True, b[1:] != b[:-1]))
    run = np.repeat(np.arange(starts.shape[0]), np.diff(np.append(starts, len(ts))))
    for values in (alloc, res):
        top = np.flatnonzero(values == np.maximum.reduceat(values, starts)[run])
        first = np.append(True, run[top][1:] != run[top][:-1])
        keep.update(top[first].tolist())
    return np.asarray(sorted(keep), dtype=np.intp)
