"""What the rules see of one GPU: its analysis, its trace, and derived facts computed once."""

from __future__ import annotations

import functools
import re
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from badput.analysis._beside import Beside
from badput.analysis._nesting import is_kind, order_by
from badput.analysis.blocking import (
    BLOCKING_DECIDERS,
    RETURN_LATENCY_NS,
    SYNC_CALLS,
    TIMING_MIN_WAIT_NS,
    BlockingCalls,
    blocking_calls,
)
from badput.analysis.critical_path import CriticalPath, GraphChange, PathBeside, what_if
from badput.analysis.intervals import IntervalSet
from badput.analysis.patterns import is_dataloader_span
from badput.analysis.results import DeviceAnalysis, Timeline, ratio
from badput.diagnose.findings import RULES, Evidence, Finding, severity_of
from badput.trace.model import EventKind, Trace

__all__ = [
    "BLOCKING_DECIDERS",
    "RETURN_LATENCY_NS",
    "SYNC_CALLS",
    "TIMING_MIN_WAIT_NS",
    "BlockingCalls",
    "DeviceContext",
    "ms",
]

_CUDA_WORD = re.compile(r"\bCUDA\b")
_CUDA_API = re.compile(r"\bcuda(?=[A-Z])")


def ms(ns: float) -> Evidence:
    """Milliseconds evidence from nanoseconds."""
    return Evidence(round(ns / 1e6, 3), "ms")


@dataclass(frozen=True, eq=False)
class DeviceContext:
    """One GPU of one trace, as the rules see it.

    With `jobs` of 2 or more, the critical-path what-ifs of the findings (`graph_savings`)
    run one after another on a helper thread while the rules go on; `with_graph_savings`
    gives the findings their results. One thread runs them all, in the order asked, so the
    path's what-if caches are never shared between threads. `path`: the GPU's critical path
    still being found on another thread (`analyze_path` on two cores); the rules go on
    without it; the what-ifs wait on their thread for its graph alone, and their savings
    (against the path's length) are taken when the findings get them.
    """

    trace: Trace
    analysis: DeviceAnalysis
    jobs: int = 1
    path: Beside[CriticalPath] | PathBeside | None = None
    _pending: dict[tuple[str, str, float], Future[int | None]] = field(
        default_factory=dict, init=False, repr=False
    )
    _what_if_paths: list[CriticalPath] = field(default_factory=list, init=False, repr=False)
    _rows: dict[tuple[frozenset[int], bool], npt.NDArray[np.intp]] = field(
        default_factory=dict, init=False, repr=False
    )

    @property
    def timeline(self) -> Timeline:
        """The interval sets behind the analysis."""
        assert self.analysis.timeline is not None
        return self.analysis.timeline

    @property
    def n_steps(self) -> int:
        """Steps in the window; a window without steps counts as one."""
        return max(1, len(self.analysis.steps))

    @property
    def has_steps(self) -> bool:
        """Whether the window holds steps (else "per step" means "in the window")."""
        return bool(self.analysis.steps)

    @property
    def per_step_text(self) -> str:
        """How a finding's title names its time unit: "per step", or "in the window"."""
        return "per step" if self.has_steps else "in the window"

    @property
    def step_ns(self) -> float:
        """Mean step time, or the window without steps."""
        stats = self.analysis.step_time_stats_ns()
        return stats[0] if stats is not None else float(self.analysis.window_ns)

    def per_step(self, total_ns: float) -> float:
        """A window total as a per-step mean."""
        return total_ns / self.n_steps

    def share(self, per_step_ns: float) -> float | None:
        """A per-step time as a share of the mean step; None where the mean step is 0."""
        return ratio(per_step_ns, self.step_ns)

    @functools.cached_property
    def undiagnosable(self) -> str | None:
        """Why no rule can say anything about this GPU; None when the rules may run.

        Every rule is a what-if on the GPU's measured time, reported per step and as a share of
        the step. Without a window, without step time, without any recorded GPU time, or with
        nothing recorded in the window, whatever it found would describe the gaps of a broken
        (or mis-windowed) trace, not the workload: better no finding than a false one.
        """
        d = self.analysis
        if d.timeline is None or d.goodput is None or d.window_ns <= 0:
            return "the window has zero length"
        if self.step_ns <= 0:
            return "every step has zero duration"
        gpu = is_kind(self.trace.kind, (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET))
        gpu &= self.trace.device == d.device
        if not bool((self.trace.dur_ns[gpu] > 0).any()):
            return "the trace records no GPU time on this GPU"
        if d.breakdown.busy_ns == 0 and d.idle_causes.other_ns == d.window_ns:
            return "the window holds no GPU or host activity"
        return None

    @functools.cached_property
    def in_window(self) -> npt.NDArray[np.bool_]:
        """Rows that start inside the window."""
        w0 = self.analysis.window_start_ns
        ts = self.trace.ts_ns
        return (ts >= w0) & (ts < w0 + self.analysis.window_ns)

    def rows(self, *kinds: EventKind, on_device: bool = False) -> npt.NDArray[np.intp]:
        """Row indices of the given kinds inside the window (optionally on this GPU only).

        Found once per set of kinds (several rules ask for the same: each a pass over every
        row), and read-only.
        """
        key = (frozenset(int(k) for k in kinds), on_device)
        if (found := self._rows.get(key)) is None:
            mask = is_kind(self.trace.kind, kinds) & self.in_window
            if on_device:
                mask &= self.trace.device == self.analysis.device
            found = np.flatnonzero(mask)
            found.setflags(write=False)
            self._rows[key] = found
        return found

    def named(self, rows: npt.NDArray[np.intp], names: frozenset[str]) -> npt.NDArray[np.intp]:
        """The rows whose name is in `names`."""
        return self.trace.rows_named(rows, names.__contains__)

    def spans(self, rows: npt.NDArray[np.intp]) -> IntervalSet:
        """Union of the rows' spans."""
        start = self.trace.ts_ns[rows]
        return IntervalSet.from_spans(start, start + self.trace.dur_ns[rows])

    @property
    def runtime_name(self) -> str:
        """The GPU runtime the trace records: "HIP" on AMD GPUs, else "CUDA".

        Decided by the GPU's name (an AMD device), else by the host calls (HIP's are hip*):
        `DeviceAnalysis.runtime_api`.
        """
        return self.analysis.runtime_api

    def runtime_text(self, text: str) -> str:
        """`text` in the trace's runtime: on HIP, "CUDA graph" -> "HIP graph", cudaFree -> hipFree.

        PyTorch's names stay (torch.cuda, torch.cuda.CUDAGraph are what ROCm builds call them).
        """
        if self.runtime_name != "HIP":
            return text
        return _CUDA_API.sub("hip", _CUDA_WORD.sub("HIP", text))

    @functools.cached_property
    def blocking(self) -> BlockingCalls:
        """The host calls during which the host waited for this GPU, and the idle that cost.

        `badput.analysis.blocking.blocking_calls` decides (its docstring states the deciders
        and the what-if); the context computes it once.
        """
        cp = self.analysis.critical_path
        if cp is not None and cp.blocking is not None:  # found once, for the path's syncs
            return cp.blocking
        if isinstance(self.path, PathBeside):  # a path being found: its calls, found once
            found = self.path.blocking()
            if found is not None:
                return found
        return blocking_calls(self.trace, self.analysis)

    @property
    def sync_idle(self) -> IntervalSet:
        """The GPU idle that blocking host calls cost (`blocking`): synchronization's share."""
        return self.blocking.idle

    def enclosing_ops(self, rows: npt.NDArray[np.intp]) -> Counter[str]:
        """Names of the outermost CPU ops (not annotations) containing each row, same thread.

        That is the user-visible op that made each call.
        """
        t = self.trace
        found: Counter[str] = Counter()
        ops = np.flatnonzero(t.kind == EventKind.CPU_OP)
        if len(t) <= np.iinfo(np.int32).max:  # millions of ops: held small while sorting
            ops = ops.astype(np.int32)
        op_tid = t.tid[ops]  # once, not per thread
        for tid in np.unique(t.tid[rows]).tolist():
            mine = ops[op_tid == tid]
            if mine.shape[0] == 0:
                continue
            # By start, longest first; each node-sized temporary goes once it is used.
            start = t.ts_ns[mine]
            longest_first = -t.dur_ns[mine]
            order = order_by(start, longest_first)
            del longest_first
            mine, start = mine[order], start[order]
            del order
            # Ends of these rows only (`Trace.end_ns` adds up every row of the trace).
            end = start + t.dur_ns[mine]
            top = np.ones(mine.shape[0], dtype=np.bool_)
            top[1:] = start[1:] >= np.maximum.accumulate(end)[:-1]  # not inside an earlier op
            top_rows = mine[top]
            top_start, top_end = start[top], end[top]
            del mine, start, end, top
            calls = rows[t.tid[rows] == tid]
            call_start = t.ts_ns[calls]
            idx = np.searchsorted(top_start, call_start, side="right") - 1
            ok = (idx >= 0) & (call_start + t.dur_ns[calls] <= top_end[np.maximum(idx, 0)])
            # Counted per name, the names in the order their first call comes (Counter's ties).
            ids, first, counts = np.unique(
                t.name_id[top_rows[idx[ok]]], return_index=True, return_counts=True
            )
            for at in np.argsort(first, kind="stable").tolist():
                found[t.names[int(ids[at])]] += int(counts[at])
        return found

    def finding(
        self,
        rule_id: str,
        title: str,
        savings_ns: float,
        evidence: dict[str, Evidence],
        fix: list[str] | None = None,
        floor: str | None = None,
        change: GraphChange | None = None,
    ) -> Finding | None:
        """A finding of `rule_id` if its savings are worth reporting (or `floor` is set).

        `change` is the fix as a change of the dependency graph's edges: the finding then
        also carries the saving along the critical path (`graph_savings_ns`).
        """
        rule = RULES[rule_id]
        share = self.share(savings_ns)
        if share is None:
            return None  # no step time to compare with (`undiagnosable` keeps rules away)
        severity = severity_of(share) or floor
        if severity is None:
            return None
        graph_savings = None
        if change is not None:
            if self.jobs > 1 and self._has_path:
                job = self._what_ifs.submit(self._length_after, change)
                self._pending[(rule_id, title, savings_ns)] = job
            else:
                graph_savings = self.graph_savings(change)
        return Finding(
            id=rule_id,
            title=title,
            severity=severity,
            evidence=evidence,
            savings_ns=savings_ns,
            savings_share=share,
            fix=fix if fix is not None else list(rule.fix),
            refs=list(rule.refs),
            trace=self.analysis.trace,
            rank=self.analysis.rank,
            device=self.analysis.device,
            graph_savings_ns=graph_savings,
        )

    @functools.cached_property
    def _what_ifs(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(1, thread_name_prefix="badput-what-if")

    def with_graph_savings(self, findings: list[Finding]) -> list[Finding]:
        """`findings`, each whose what-if ran on the helper thread given its result.

        A finding is known by its rule, title and savings (what `finding` made it with).
        """
        if not self._pending:
            return findings
        try:
            out = []
            for f in findings:
                job = self._pending.get((f.id, f.title, f.savings_ns))
                if job is not None:
                    f = replace(f, graph_savings_ns=self._savings_of(job.result()))
                out.append(f)
            return out
        finally:
            self.close()

    def close(self) -> None:
        """Stop the what-if thread (a what-if running finishes; none queued starts)."""
        if "_what_ifs" in self.__dict__:
            self._what_ifs.shutdown(wait=False, cancel_futures=True)

    def done_with_what_ifs(self) -> None:
        """After the findings' last what-if: stop the thread, drop the paths' what-if caches.

        A what-if still running is awaited; what comes after reuses the caches' memory.
        """
        if "_what_ifs" in self.__dict__:
            self._what_ifs.shutdown(wait=True, cancel_futures=True)
        if isinstance(self.path, PathBeside):  # what-ifs of findings not taken made its caches
            self.path.drop_what_if_caches()
        for cp in self._what_if_paths:
            cp.drop_what_if_caches()
        self._what_if_paths.clear()

    @property
    def _has_path(self) -> bool:
        return self.analysis.critical_path is not None or self.path is not None

    def graph_savings(self, change: GraphChange) -> float | None:
        """Per-step saving of `change` along the critical path; None without a path graph."""
        return self._savings_of(self._length_after(change))

    def _length_after(self, change: GraphChange) -> int | None:
        """The critical path's length after `change` (None: no path graph).

        On the what-if thread, with a path still being found (`PathBeside`), it waits for
        the graph alone: the next what-ifs need not wait for the path.
        """
        if isinstance(self.path, PathBeside):
            return self.path.what_if(self.trace, change)
        found = self._found_path()
        return None if found is None else what_if(self.trace, found, change)

    def _found_path(self) -> CriticalPath | None:
        return self.path.result() if self.path is not None else self.analysis.critical_path

    def _savings_of(self, shorter: int | None) -> float | None:
        """Per-step saving of a what-if whose path is `shorter` long (waits for the path)."""
        cp = self._found_path()
        if cp is None:
            return None
        if all(p is not cp for p in self._what_if_paths):
            self._what_if_paths.append(cp)
        return None if shorter is None else self.per_step(max(cp.length_ns - shorter, 0))

    @functools.cached_property
    def loader_rows(self) -> npt.NDArray[np.int64]:
        """The DataLoader spans (`enumerate(DataLoader)#...__next__`) of the trace."""
        ops = self.rows(EventKind.CPU_OP, EventKind.ANNOTATION)
        rows: npt.NDArray[np.int64] = self.trace.rows_named(ops, is_dataloader_span).astype(
            np.int64
        )
        return rows
