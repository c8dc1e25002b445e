"""Blocking host calls: the host calls during which the host waited for one GPU (issue 18).

A pure function of a trace and one GPU's analysis (`blocking_calls`); the synchronization
rule (`badput.diagnose`) and the critical path (`analysis.critical_path`, its sync edges) read
it. The evidence and its thresholds are stated with the constants below and in
docs/analysis.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import is_kind
from badput.analysis.intervals import IntervalSet
from badput.analysis.results import DeviceAnalysis
from badput.trace.model import EventKind, Trace

__all__ = [
    "BLOCKING_DECIDERS",
    "RETURN_LATENCY_NS",
    "SYNC_CALLS",
    "TIMING_MIN_WAIT_NS",
    "BlockingCalls",
    "blocking_calls",
    "blocking_calls_in",
]

#: Host calls that block until the GPU has finished queued work (or a copy completes), by
#: name: the last decider of `blocking_calls`. CUDA: the runtime API's "API
#: synchronization behavior" section (synchronous cudaMemcpy*, cuMemcpy*) and the
#: cuda*/cu*Synchronize entries. HIP: hip_runtime_api.h (hipMemcpyWithStream is "akin to
#: hipMemcpyAsync + hipStreamSynchronize. Since it is a sync API ...").
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2",
        "cuMemcpy",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipCtxSynchronize",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemcpyToSymbol",
        "hipMemcpyFromSymbol",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipMemcpyWithStream",
    }
)

#: How long after the GPU finished the work queued before it a host call may return and still
#: count as having waited for it. Measured on the reference traces (tests/data/traces): over
#: the 1,590 calls of the synchronizing kinds (cuda/hipStreamSynchronize,
#: cudaDeviceSynchronize, cudaEventSynchronize, blocking and pageable cudaMemcpy*,
#: hipMemcpyWithStream) during which the GPU's queued work finished, the return came a median
#: 2.1 us after it, 90 % within 6.9 us, 95 % within 11.5 us and 99 % within 19.8 us (V100,
#: A100, H100, T4, MI250; the rest are pageable device-to-host copies, whose return also
#: waits for the driver's host-side copy out of its staging buffer, up to 74 us on a T4).
RETURN_LATENCY_NS = 20_000

#: Shortest wait (from the call's start to the end of the work it waited for) that the timing
#: decider accepts: a call shorter than this can span the end of the GPU's queue and return
#: within `RETURN_LATENCY_NS` of it by chance. On the reference traces, calls that do not
#: block (launches, cudaEventRecord, cudaFuncSetAttribute, cudaMemsetAsync) and met every
#: other timing condition had waited at most 31.9 us (a cuLaunchKernel on the T4).
TIMING_MIN_WAIT_NS = 50_000

#: The deciders of `blocking_calls`, in the order they are asked: the first that
#: speaks decides, and `BlockingCalls.decided_by` indexes this tuple.
BLOCKING_DECIDERS = ("timing", "pageable copy", "name")

_DTOH_PAGEABLE = re.compile(r"DtoH.*Pageable|Device -> Pageable", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class BlockingCalls:
    """Host calls during which the host waited for this GPU, and the GPU idle it cost.

    Attributes:
        rows: the calls, outermost on their thread (a driver call inside a blocking runtime
            call is the same wait), by start.
        decided_by: per call, the index into `BLOCKING_DECIDERS` of the evidence that decided.
        blocked_ns: per call, its duration: the host time the wait took.
        copy_bytes: per call, bytes its own copies moved on this GPU; -1 where it made no
            copy (or the trace gives no size).
        idle: the GPU idle the waits cost (see `blocking_calls`); a subset of the
            idle time outside DataLoader waits.
    """

    rows: npt.NDArray[np.intp]
    decided_by: npt.NDArray[np.int8]
    blocked_ns: npt.NDArray[np.int64]
    copy_bytes: npt.NDArray[np.int64]
    idle: IntervalSet

    def __len__(self) -> int:
        """Number of blocking calls."""
        return int(self.rows.shape[0])

    @staticmethod
    def empty() -> BlockingCalls:
        """No blocking call."""
        i64 = np.zeros(0, dtype=np.int64)
        return BlockingCalls(
            np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int8), i64, i64, IntervalSet.empty()
        )


def blocking_calls(trace: Trace, analysis: DeviceAnalysis) -> BlockingCalls:
    """The host calls of `trace` during which the host waited for this GPU, and the idle that cost.

    A host call (runtime or driver, any name) is blocking when a GPU idle gap (outside
    DataLoader waits) begins during it, at the end of GPU work, and one decider speaks
    (`BLOCKING_DECIDERS`, first wins):

    - timing: the GPU was still running work launched before the call when it began
      ("the queue": GPU activities of this GPU whose launch call started earlier; an
      activity without a recorded launch counts when it had started by then), the call
      lasted until that queue and its own copies (a blocking copy's own transfer is the
      last work) had finished, waiting at least `TIMING_MIN_WAIT_NS`, and it returned
      within `RETURN_LATENCY_NS` of that: the host was waiting for the GPU.
    - pageable copy: one of its own copies is device-to-host into pageable memory, which
      CUDA defines as returning only once the copy has completed.
    - name: it is one of `SYNC_CALLS`.

    The idle it costs (the what-if of the synchronization rule): had the call not waited,
    the host would have been `blocked_ns` (its duration) further ahead, and its next launch
    that much earlier, so the idle gap that begins in the call shrinks by at most that:
    from each such gap, its first `blocked_ns` (of the longest blocking call it begins
    in). The gaps are disjoint, so no idle counts twice.
    """
    assert analysis.timeline is not None
    tl = analysis.timeline
    w0 = analysis.window_start_ns
    return blocking_calls_in(
        trace, tl.idle, tl.idle_dataloader, w0, analysis.window_ns, analysis.device
    )


def blocking_calls_in(
    trace: Trace,
    idle: IntervalSet,
    idle_dataloader: IntervalSet,
    window_start_ns: int,
    window_ns: int,
    device: int,
) -> BlockingCalls:
    """`blocking_calls` from what it reads of the analysis, given on their own.

    That is the GPU's idle time and its part in DataLoader waits (`Timeline.idle`,
    `Timeline.idle_dataloader`), its window and the GPU. Neither needs the launch tree or
    the kernel classes: found from them, the calls can be found before the rest of the
    analysis (`analysis.device`, on two threads or more).
    """
    t = trace
    gaps = idle.subtract(idle_dataloader)
    # Gaps that begin where GPU work ends (not where a DataLoader wait ends).
    # (Both start arrays are sorted: a binary search, not np.isin's hashing of every start.)
    idle_starts = idle.starts
    at = np.minimum(np.searchsorted(idle_starts, gaps.starts), max(idle_starts.shape[0] - 1, 0))
    found = idle_starts[at] == gaps.starts if idle_starts.shape[0] else np.zeros(0, np.bool_)
    drained = found & (gaps.starts > window_start_ns)
    gap_s, gap_e = gaps.starts[drained], gaps.ends[drained]
    w0 = window_start_ns
    w1 = w0 + window_ns
    is_call = is_kind(t.kind, (EventKind.RUNTIME, EventKind.DRIVER))
    ts = t.ts_ns  # (ends only of the rows that need one: `Trace.end_ns` makes every row's)
    calls = np.flatnonzero(is_call & (ts < w1))
    call_end = t.end_of(calls)
    during = call_end > w0
    calls, call_end = calls[during], call_end[during]
    del during
    if calls.shape[0] == 0 or gap_s.shape[0] == 0:
        return BlockingCalls.empty()
    # Candidates: calls during which a drained gap begins, in (start, end].
    k = np.searchsorted(gap_s, ts[calls], side="right")
    hit = k < gap_s.shape[0]
    hit &= gap_s[np.minimum(k, gap_s.shape[0] - 1)] <= call_end
    cand = calls[hit]
    if cand.shape[0] == 0:
        return BlockingCalls.empty()
    c0, c1 = ts[cand], call_end[hit]
    del call_end

    # The queue: every GPU activity of this device, with the start of its launch call.
    gpu = np.flatnonzero(
        is_kind(t.kind, (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET))
        & (t.device == device)
    )
    launchers = np.flatnonzero(is_call & (t.correlation >= 0))
    launchers = launchers[np.argsort(t.correlation[launchers], kind="stable")]
    launcher = _lookup(t.correlation[launchers], t.correlation[gpu], launchers)
    launch_ns = np.where(launcher >= 0, ts[np.maximum(launcher, 0)], ts[gpu])
    order = np.argsort(launch_ns, kind="stable")
    reach = np.maximum.accumulate(t.end_of(gpu)[order])
    before = np.searchsorted(launch_ns[order], c0, side="left") - 1  # launched earlier
    queue_end = np.where(before >= 0, reach[np.maximum(before, 0)], np.iinfo(np.int64).min)

    # Each candidate's own copies (memcpy/memset it launched on this GPU).
    copy = gpu[(t.kind[gpu] != EventKind.KERNEL) & (launcher >= 0)]
    copy_call = launcher[(t.kind[gpu] != EventKind.KERNEL) & (launcher >= 0)]
    at = np.searchsorted(cand, copy_call)
    mine = (at < cand.shape[0]) & (cand[np.minimum(at, cand.shape[0] - 1)] == copy_call)
    copy, at = copy[mine], at[mine]
    own_end = np.full(cand.shape[0], np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(own_end, at, t.end_of(copy))
    nbytes = t.byte_counts.at(copy)
    copy_bytes = np.full(cand.shape[0], -1, dtype=np.int64)
    sized = nbytes >= 0
    np.maximum.at(copy_bytes, at[sized], 0)
    np.add.at(copy_bytes, at[sized], nbytes[sized])
    pageable_dtoh = np.zeros(cand.shape[0], dtype=np.bool_)
    dtoh = t.name_mask(lambda n: _DTOH_PAGEABLE.search(n) is not None)
    pageable_dtoh[at[dtoh[t.name_id[copy]]]] = True

    done = np.maximum(queue_end, own_end)
    by_timing = (
        (queue_end > c0)
        & (done - c0 >= TIMING_MIN_WAIT_NS)
        & (c1 >= done)
        & (c1 - done <= RETURN_LATENCY_NS)
    )
    by_name = t.name_mask(SYNC_CALLS.__contains__)[t.name_id[cand]]
    votes = np.stack([by_timing, pageable_dtoh, by_name])
    blocking = votes.any(axis=0)
    decided = np.argmax(votes, axis=0).astype(np.int8)
    rows, decided, copy_bytes = cand[blocking], decided[blocking], copy_bytes[blocking]
    if rows.shape[0] == 0:
        return BlockingCalls.empty()
    rows, decided, copy_bytes = _outermost(t, rows, decided, copy_bytes)
    blocked = t.dur_ns[rows]  # its end less its start

    # The what-if: each drained gap that begins in a blocking call loses its first
    # `blocked` ns (the longest call it begins in, over the host threads).
    cut = np.zeros(gap_s.shape[0], dtype=np.int64)
    tids = t.tid[rows]
    for tid in np.unique(tids).tolist():
        mine_rows = rows[tids == tid]  # disjoint on one thread, by start
        mine_start, mine_blocked = ts[mine_rows], blocked[tids == tid]
        j = np.searchsorted(mine_start, gap_s, side="left") - 1
        mine_end = mine_start + mine_blocked
        inside = (j >= 0) & (gap_s <= mine_end[np.maximum(j, 0)])
        cut = np.maximum(cut, np.where(inside, mine_blocked[np.maximum(j, 0)], 0))
    claim = cut > 0
    idle = IntervalSet(gap_s[claim], np.minimum(gap_e[claim], gap_s[claim] + cut[claim]))
    return BlockingCalls(rows, decided, blocked, copy_bytes, idle)


def _lookup(
    keys: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64], values: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """`values[i]` where `keys[i] == wanted` (keys sorted), -1 where no key matches."""
    if keys.shape[0] == 0:
        return np.full(wanted.shape, -1, dtype=np.intp)
    idx = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
    return np.where((keys[idx] == wanted) & (wanted >= 0), values[idx], -1).astype(np.intp)


def _outermost(
    t: Trace,
    rows: npt.NDArray[np.intp],
    decided: npt.NDArray[np.int8],
    copy_bytes: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int8], npt.NDArray[np.int64]]:
    """The calls of `rows` not inside another of them on their thread, by start.

    A nested call (a driver call inside a runtime call) is the same wait: its decider (the
    stronger of the two) and its copied bytes go to the call around it.
    """
    ts = t.ts_ns[rows]
    end = ts + t.dur_ns[rows]
    order = np.lexsort((-(end - ts), ts, t.tid[rows]))  # by thread, start, longest first
    rows, decided, copy_bytes = rows[order], decided[order], copy_bytes[order]
    ts, end, tid = ts[order], end[order], t.tid[rows]
    n = rows.shape[0]
    top = np.ones(n, dtype=np.bool_)
    new_thread = np.ones(n, dtype=np.bool_)
    new_thread[1:] = tid[1:] != tid[:-1]
    # the end reached by the calls before each one on the same thread
    reach = np.zeros(n, dtype=np.int64)
    for lo, hi in _runs(new_thread):
        reach[lo:hi] = np.maximum.accumulate(end[lo:hi])
    top[1:] = new_thread[1:] | (ts[1:] >= reach[:-1])
    outer = np.maximum.accumulate(np.where(top, np.arange(n), 0))
    best = np.full(n, np.iinfo(np.int8).max, dtype=np.int8)
    np.minimum.at(best, outer, decided)
    total = np.full(n, -1, dtype=np.int64)
    sized = copy_bytes >= 0
    np.maximum.at(total, outer[sized], 0)
    np.add.at(total, outer[sized], copy_bytes[sized])
    keep = np.flatnonzero(top)
    keep = keep[np.argsort(ts[keep], kind="stable")]
    return rows[keep], best[keep], total[keep]


def _runs(first: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """The [lo, hi) index ranges of the runs that start where `first` is True."""
    starts = np.flatnonzero(first).tolist()
    return list(zip(starts, [*starts[1:], int(first.shape[0])], strict=True))
