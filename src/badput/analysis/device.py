"""Per-GPU goodput analysis of one trace: window, breakdown, idle causes, steps, kernels."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput._memory import memory_kept, populate_heap
from badput.analysis._beside import Beside
from badput.analysis._nesting import is_kind
from badput.analysis.blocking import BlockingCalls, blocking_calls_in
from badput.analysis.classify import ClassRules, KernelClasses, classify_kernels
from badput.analysis.critical_path import (
    CriticalPath,
    DependencyGraph,
    PathBeside,
    blocking_of,
    critical_path,
    early_graph,
)
from badput.analysis.intervals import IntervalSet
from badput.analysis.launch import launch_stats
from badput.analysis.ops import ModelAnalysis, analyze_ops
from badput.analysis.patterns import (
    CATEGORIES,
    COMM_KINDS,
    is_dataloader_span,
    profiler_step_number,
)
from badput.analysis.results import (
    Breakdown,
    CommSummary,
    DeviceAnalysis,
    IdleCauses,
    KernelStat,
    StepResult,
    Timeline,
    WindowSource,
    ratio,
)
from badput.analysis.steps import Launches
from badput.analysis.tree import LaunchTree, launch_tree
from badput.analysis.window import WindowChoice, WindowSpec, choose_window
from badput.estimate.hardware import lookup_gpu
from badput.trace._limits import available_memory_bytes
from badput.trace.model import GPU_ACTIVITY_KINDS, EventKind, Trace

__all__ = ["WindowSpec", "analyze_trace"]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

#: Kernels shorter than this count as short (launch overhead dominates them).
SHORT_KERNEL_NS = 10_000

#: Heap a trace's analyses take per trace row beyond the trace itself (the launch tree's
#: temporaries, then the dependency graph's two nodes per event, its path and what-ifs):
#: 104-139 bytes on the three 1 GB shapes of benchmarks/results/shapes.md (peak heap less
#: the heap after the read, one job; more with two). A command's process makes that much
#: resident in one call before it analyses a trace with GPU activity and a launch tree
#: (`populate_heap`), a little over the least of the three, and at most half the memory it
#: may still use; elsewhere nothing is done.
ANALYSIS_HEAP_BYTES_PER_ROW = 112


@dataclass(frozen=True)
class _Host:
    """What the host was doing, shared by every GPU of a trace."""

    runtime: IntervalSet
    dataloader: IntervalSet
    cpu: IntervalSet
    launches: Launches
    step_names: list[str]
    step_starts: I64
    step_ends: I64


def _name_flags(trace: Trace, predicate: Callable[[str], bool]) -> B:
    """Evaluate a name predicate once per distinct name; index the result by `name_id`."""
    return trace.name_mask(predicate)


def _spans(trace: Trace, mask: B) -> IntervalSet:
    """The union of the rows of `mask`, each [ts, ts + dur): only those rows' ends are made."""
    rows = np.flatnonzero(mask)
    return IntervalSet.from_spans(*trace.spans_of(rows))


def _host(trace: Trace) -> _Host:
    kind = trace.kind
    ts = trace.ts_ns
    is_step_name = _name_flags(trace, lambda n: profiler_step_number(n) is not None)
    is_loader_name = _name_flags(trace, is_dataloader_span)
    op = (kind == EventKind.CPU_OP) | (kind == EventKind.ANNOTATION)
    step_row = op & is_step_name[trace.name_id]
    loader_row = op & is_loader_name[trace.name_id]
    call = (kind == EventKind.RUNTIME) | (kind == EventKind.DRIVER)
    cpu_row = op & ~step_row & ~loader_row

    launch_rows = np.flatnonzero(call & (trace.correlation >= 0))
    by_corr = launch_rows[np.argsort(trace.correlation[launch_rows], kind="stable")]
    steps = np.flatnonzero(step_row)
    return _Host(
        runtime=_spans(trace, call),
        dataloader=_spans(trace, loader_row),
        cpu=_spans(trace, cpu_row),
        launches=Launches(trace.correlation[by_corr], *trace.spans_of(by_corr)),
        step_names=[trace.names[i] for i in trace.name_id[steps].tolist()],
        step_starts=ts[steps],
        step_ends=trace.end_of(steps),
    )


def _analyze_device(
    trace: Trace,
    host: _Host,
    device: int,
    spec: WindowSpec | None,
    tree: LaunchTree | None,
    classes: KernelClasses,
    comm_row: B,
    hip_calls: bool,
    jobs: int = 1,
    choice: WindowChoice | None = None,
    with_launch: bool = False,
) -> DeviceAnalysis:
    """One GPU's analysis; `choice`: its window, where already chosen (`_window_of`).

    `with_launch`: with its launch statistics (`launch_stats`, which need no model view),
    found while the model view is being found beside.
    """
    kind = trace.kind
    on_device = trace.device == device
    kernel = (kind == EventKind.KERNEL) & on_device
    memory = ((kind == EventKind.MEMCPY) | (kind == EventKind.MEMSET)) & on_device
    comm = kernel & comm_row
    compute = kernel & ~comm
    gpu = kernel | memory
    ts = trace.ts_ns
    warnings: list[str] = []

    gpu_rows = np.flatnonzero(gpu)
    if choice is None:
        choice = _window_of(trace, host, device, spec, gpu_rows)
    steps, w0, w1, source = choice.steps, choice.start_ns, choice.end_ns, choice.source
    warnings += choice.warnings

    compute_set = _spans(trace, compute)
    comm_all = _spans(trace, comm)
    memory_all = _spans(trace, memory)
    window = IntervalSet.span(w0, w1)

    compute_w = compute_set.intersect(window)
    comm_w = comm_all.subtract(compute_set).intersect(window)
    memory_w = memory_all.subtract(compute_set).subtract(comm_all).intersect(window)
    busy = compute_w.union(comm_w).union(memory_w)
    idle = window.subtract(busy)
    idle_runtime = idle.intersect(host.runtime)
    rest = idle.subtract(host.runtime)
    idle_loader = rest.intersect(host.dataloader)
    rest = rest.subtract(host.dataloader)
    idle_cpu = rest.intersect(host.cpu)
    idle_other = rest.subtract(host.cpu)

    parts = (compute_w, comm_w, memory_w, idle, idle_runtime, idle_loader, idle_cpu, idle_other)
    totals = [p.total_ns() for p in parts]
    breakdown = Breakdown(*totals[:4])
    causes = IdleCauses(*totals[4:])
    assert breakdown.total_ns == w1 - w0, "breakdown must partition the window"
    gpu_name = trace.gpu_names.get(device)
    # The model view (ops, modules, roofline) beside the steps and the kernel table.
    model = Beside(jobs, _model_view, trace, tree, device, w0, w1, breakdown, gpu_name, comm_row)

    step_results: list[StepResult] = []
    if len(steps):
        # Python ints by column (`tolist`), not a numpy scalar per step and part: thousands.
        per_step = [p.measure_between(steps.starts_ns, steps.ends_ns).tolist() for p in parts]
        starts, ends = steps.starts_ns.tolist(), steps.ends_ns.tolist()
        for name, start, end, *v in zip(steps.names, starts, ends, *per_step, strict=True):
            step_results.append(
                StepResult(
                    name=name,
                    start_ns=start,
                    dur_ns=end - start,
                    breakdown=Breakdown(*v[:4]),
                    idle_causes=IdleCauses(*v[4:]),
                )
            )

    in_window = gpu & (ts >= w0) & (ts < w1)
    kernels, kernel_ns, short_ns = _kernel_table(trace, in_window, classes)
    outside_ns = int(np.maximum(trace.end_of(np.flatnonzero(in_window)) - w1, 0).sum())
    comm_total = comm_all.intersect(window)
    window_ns = w1 - w0
    warnings += _degenerate_warnings(
        bool((trace.dur_ns[gpu_rows] > 0).any()),
        step_results,
        window_ns,
        source,
        breakdown,
        causes,
    )
    analysis = DeviceAnalysis(
        trace=trace.path,
        rank=trace.rank,
        world_size=trace.world_size,
        device=device,
        gpu=gpu_name,
        window_start_ns=w0,
        window_ns=window_ns,
        window_source=source,
        # A window of zero length has no share of anything: undefined, not 0 %.
        goodput=ratio(breakdown.compute_ns, window_ns),
        breakdown=breakdown,
        idle_causes=causes,
        comm=CommSummary(comm_total.total_ns(), comm_total.intersect(compute_set).total_ns()),
        steps=step_results,
        kernels=kernels,
        kernel_ns=kernel_ns,
        short_kernel_ns=short_ns,
        kernels_outside_window_ns=outside_ns,
        dropped_steps=list(steps.dropped),
        warnings=warnings,
        timeline=Timeline(
            compute=compute_w,
            communication=comm_total,
            exposed_communication=comm_w,
            exposed_memory=memory_w,
            idle=idle,
            idle_runtime=idle_runtime,
            idle_dataloader=idle_loader,
            idle_cpu=idle_cpu,
            idle_other=idle_other,
            host_runtime=host.runtime,
            host_dataloader=host.dataloader,
            host_cpu=host.cpu,
            classes=classes,
            tree=tree,
        ),
        runtime_api="HIP" if (gpu_name and _HIP_GPU.search(gpu_name)) or hip_calls else "CUDA",
    )
    launch = launch_stats(trace, analysis, tree) if with_launch and tree is not None else None
    return dataclasses.replace(analysis, launch=launch, model=model.result())


@dataclass(frozen=True)
class _FoundBlocking:
    """A GPU's blocking calls found before its analysis, and the idle time they came from."""

    idle: IntervalSet
    idle_dataloader: IntervalSet
    window: tuple[int, int]
    calls: BlockingCalls

    def calls_of(self, analysis: DeviceAnalysis) -> BlockingCalls | None:
        """The calls, where `analysis` has the same window and idle time; else None."""
        tl = analysis.timeline
        if tl is None or self.window != (analysis.window_start_ns, analysis.window_ns):
            return None
        same = all(
            np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends)
            for a, b in ((self.idle, tl.idle), (self.idle_dataloader, tl.idle_dataloader))
        )
        return self.calls if same else None


def _host_window_blocking(
    trace: Trace,
    device: int,
    spec: WindowSpec | None,
    chosen: Future[tuple[_Host, WindowChoice]] | None = None,
) -> tuple[_Host, WindowChoice, _FoundBlocking | None]:
    """The host's interval sets, a GPU's window (`_window_of`), its blocking calls in it.

    The calls are None without a window. They read the GPU's idle time alone, which needs
    neither the launch tree nor the kernel classes: the window less the GPU's busy time
    (compute, communication and memory together are every kernel, memcpy and memset,
    whatever their classes), its DataLoader part as `_analyze_device` finds it. Found here,
    beside the launch tree, they are not found after it (where the analysis and the graph
    fill both cores).

    `chosen`, where given, gets the host's sets and the window as soon as they are found
    (or the error that ended the search), before the calls: the caller goes on with them
    while the calls are found.
    """
    try:
        host = _host(trace)
        gpu_rows = np.flatnonzero(
            is_kind(trace.kind, GPU_ACTIVITY_KINDS) & (trace.device == device)
        )
        choice = _window_of(trace, host, device, spec, gpu_rows)
    except BaseException as e:
        if chosen is not None:
            chosen.set_exception(e)
        raise
    if chosen is not None:
        chosen.set_result((host, choice))
    w0, w1 = choice.start_ns, choice.end_ns
    if w1 <= w0:
        return host, choice, None
    window = IntervalSet.span(w0, w1)
    busy = IntervalSet.from_spans(*trace.spans_of(gpu_rows)).intersect(window)
    idle = window.subtract(busy)
    idle_dataloader = idle.subtract(host.runtime).intersect(host.dataloader)
    calls = blocking_calls_in(trace, idle, idle_dataloader, w0, w1 - w0, device)
    return host, choice, _FoundBlocking(idle, idle_dataloader, (w0, w1 - w0), calls)


def _window_of(
    trace: Trace,
    host: _Host,
    device: int,
    spec: WindowSpec | None,
    gpu_rows: npt.NDArray[np.intp],
) -> WindowChoice:
    """The window and steps of one GPU (`choose_window`): no launch tree or classes needed.

    `gpu_rows`: its kernel, memcpy and memset rows.
    """
    return choose_window(
        trace,
        device,
        gpu_rows,
        spec,
        host_steps=(host.step_names, host.step_starts, host.step_ends),
        launches=host.launches,
    )


def _model_view(
    trace: Trace,
    tree: LaunchTree | None,
    device: int,
    w0: int,
    w1: int,
    breakdown: Breakdown,
    gpu_name: str | None,
    comm_row: B,
) -> ModelAnalysis | None:
    """The GPU's ops, modules and roofline in the window (`analyze_ops`); None without a tree."""
    if tree is None:
        return None
    gpu_spec = lookup_gpu(gpu_name, warn=False) if gpu_name else None
    return analyze_ops(trace, tree, device, w0, w1, breakdown, gpu_spec, comm_row)


_HIP_GPU = re.compile(r"\bAMD\b|Radeon|Instinct", re.IGNORECASE)


def _mostly_hip(trace: Trace) -> bool:
    """Whether most runtime and driver calls of the trace are HIP's (`hip*`)."""
    calls = np.flatnonzero((trace.kind == EventKind.RUNTIME) | (trace.kind == EventKind.DRIVER))
    hip = trace.rows_named(calls, lambda n: n.startswith("hip")).shape[0]
    return bool(hip > calls.shape[0] - hip)


def _degenerate_warnings(
    gpu_time: bool,
    steps: list[StepResult],
    window_ns: int,
    source: WindowSource,
    breakdown: Breakdown,
    causes: IdleCauses,
) -> list[str]:
    """What a reader must know when the trace leaves a number undefined or empty.

    The numbers themselves stay as defined (goodput None on a zero-length window, zeros
    elsewhere); these lines say why, in the report and in the JSON alike.

    Args:
        gpu_time: whether any kernel, memcpy or memset of the GPU has a positive duration.
        steps: the analysed steps.
        window_ns: length of the window.
        source: where the window came from.
        breakdown: partition of the window.
        causes: partition of its idle part.
    """
    out: list[str] = []
    if not gpu_time:
        out.append(
            "every kernel, memcpy and memset on this GPU has zero duration: the trace records "
            "no GPU time"
        )
    if steps and all(s.dur_ns == 0 for s in steps):
        out.append("every step has zero duration: per-step numbers are undefined")
    if window_ns == 0 and source is not WindowSource.NONE:
        # (WindowSource.NONE already has its warning: no step in the --window range.)
        out.append("the analysis window has zero length: goodput is undefined")
    elif gpu_time and window_ns > 0 and breakdown.busy_ns == 0 and causes.other_ns == window_ns:
        out.append("the window holds no GPU or host activity of the trace")
    return out


def _kernel_table(
    trace: Trace, rows_mask: B, classes: KernelClasses
) -> tuple[list[KernelStat], int, int]:
    """Per (name, class) count and total of GPU operations, by total descending."""
    rows = np.flatnonzero(rows_mask)
    if rows.shape[0] == 0:
        return [], 0, 0
    kind = trace.kind[rows]
    dur = trace.dur_ns[rows]
    is_kernel = kind == EventKind.KERNEL
    kernel_ns = int(dur[is_kernel].sum())
    short_ns = int(dur[is_kernel & (dur < SHORT_KERNEL_NS)].sum())
    # Group by (name, class): a memcpy and a kernel never share a row, nor do two kernels of
    # one name that the evidence puts in different classes. Class 0 is memory.
    cls = np.zeros(rows.shape[0], dtype=np.int64)
    entry = classes.index_of(rows[is_kernel])
    n_cls = len(COMM_KINDS) + 1
    cls[is_kernel] = (
        1
        + classes.category[entry].astype(np.int64) * n_cls
        + (classes.kind[entry].astype(np.int64) + 1)
    )
    width = 1 + len(CATEGORIES) * n_cls
    key = trace.name_id[rows].astype(np.int64) * width + cls
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    first = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    totals = np.add.reduceat(dur[order], first)
    counts = np.diff(np.r_[first, key_sorted.shape[0]])
    # The evidence of a group: that of its first kernel (one name and class: one decision,
    # except where the launching op differs between its kernels).
    sample = rows[order[first]]
    stats: list[KernelStat] = []
    for k, total, count, row in zip(key_sorted[first].tolist(), totals.tolist(),
                                    counts.tolist(), sample.tolist(), strict=True):  # fmt: skip
        name = trace.names[k // width]
        if k % width == 0:
            stats.append(KernelStat(name, "memory", int(count), int(total)))
            continue
        i = int(classes.index_of(np.array([row]))[0])
        stats.append(
            KernelStat(name, classes.category_name(i), int(count), int(total), classes.evidence(i))
        )
    stats.sort(key=lambda s: (-s.total_ns, s.name, s.category))
    return stats, kernel_ns, short_ns


def analyze_trace(
    trace: Trace,
    window: WindowSpec | None = None,
    *,
    model: bool = True,
    rules: ClassRules | None = None,
    jobs: int = 1,
    critical_paths: bool = True,
    path_edges: bool = True,
) -> list[DeviceAnalysis]:
    """Analyze every GPU of a trace.

    Args:
        trace: a trace from any reader.
        window: a user-chosen window; by default the steps' hull (see docs/analysis.md).
        model: also build the launch tree and the model view of each GPU's window
            (`DeviceAnalysis.model`: ops, modules, roofline, MFU waterfall). Without the
            tree, kernel classes miss the launching-op evidence (`analysis.classify`).
        rules: user overrides of the kernel classes (`--classify FILE`).
        jobs: threads: with 2 or more, independent parts (the host's interval sets and the
            launch tree; a GPU's launch statistics and its critical path) run side by side.
            The results are the same for any number.
        critical_paths: False leaves each GPU's critical path (`DeviceAnalysis.critical_path`)
            to the caller, who may find it beside other work (`critical_path`).
        path_edges: False keeps no path's rows and edges (`critical_path`'s `path_edges`):
            for a caller that reports the paths, not draws them.

    Returns:
        One result per GPU with activity, by device index; a trace without GPU activity gives
        one result with `device == -1` and `goodput is None`.

    Example:
        >>> from badput.trace import load_trace  # doctest: +SKIP
        >>> [d.goodput for d in analyze_trace(load_trace("trace.json.gz"))]  # doctest: +SKIP
        [0.5551]
    """
    return _analyze(
        trace, window, model, rules, jobs, critical_paths, paths_beside=False, path_edges=path_edges
    )[0]


def analyze_with_paths(
    trace: Trace,
    window: WindowSpec | None = None,
    *,
    rules: ClassRules | None = None,
    jobs: int = 1,
    path_edges: bool = True,
) -> tuple[list[DeviceAnalysis], list[Beside[CriticalPath] | PathBeside | None]]:
    """`analyze_trace` without critical paths, and each GPU's path being found beside.

    With `jobs` of 2 or more and a lone GPU, its dependency graph (the larger part of the
    path) is started as soon as its window is chosen, beside the rest of its analysis, and
    the path found on from it; several GPUs' paths are each found when first asked (one
    graph held at a time). With one job, each path is found when first asked. The analyses
    and the paths are those of `analyze_trace` (the same graph, from the same window);
    `path_edges` as there.

    Returns:
        The analyses (`critical_path` None), and per analysis its path, None where it has
        none (no window, no launch tree).
    """
    return _analyze(
        trace, window, True, rules, jobs, False, paths_beside=True, path_edges=path_edges
    )


def _analyze(
    trace: Trace,
    window: WindowSpec | None,
    model: bool,
    rules: ClassRules | None,
    jobs: int,
    critical_paths: bool,
    *,
    paths_beside: bool,
    path_edges: bool = True,
) -> tuple[list[DeviceAnalysis], list[Beside[CriticalPath] | PathBeside | None]]:
    devices = trace.devices()
    if not devices:
        zero_b = Breakdown(0, 0, 0, 0)
        cpu_only = [
            DeviceAnalysis(
                trace=trace.path,
                rank=trace.rank,
                world_size=trace.world_size,
                device=-1,
                gpu=None,
                window_start_ns=0,
                window_ns=0,
                window_source=WindowSource.NONE,
                goodput=None,
                breakdown=zero_b,
                idle_causes=IdleCauses(0, 0, 0, 0),
                comm=CommSummary(0, 0),
                warnings=["no GPU activity (no kernel, memcpy or memset): a CPU-only trace"],
            )
        ]
        return cpu_only, [None]
    if model and memory_kept():  # the launch tree and the graph: most of its memory
        want = ANALYSIS_HEAP_BYTES_PER_ROW * len(trace)
        populate_heap(min(want, available_memory_bytes() // 2), jobs)
    if paths_beside and jobs > 1 and len(devices) == 1 and model:
        return _analyze_lone(trace, devices[0], window, rules, jobs, path_edges)
    host_sets = Beside(jobs, _host, trace)
    tree = launch_tree(trace) if model else None
    classes = classify_kernels(trace, tree, rules)
    comm_row = classes.comm_mask(len(trace))
    hip = _mostly_hip(trace)
    host = host_sets.result()
    out = [
        _analyze_device(trace, host, d, window, tree, classes, comm_row, hip, jobs) for d in devices
    ]
    if tree is None:
        return out, [None] * len(out)
    done = []
    for d in out:
        launch = Beside(jobs, launch_stats, trace, d, tree)
        path = None
        if critical_paths and d.goodput is not None:
            path = critical_path(trace, d, tree, jobs=jobs, path_edges=path_edges)
        done.append(dataclasses.replace(d, launch=launch.result(), critical_path=path))
    if not paths_beside:
        return done, [None] * len(done)
    now = jobs if len(done) == 1 else 1
    return done, [_path_beside(trace, d, tree, now, jobs, path_edges) for d in done]


def _analyze_lone(
    trace: Trace,
    device: int,
    window: WindowSpec | None,
    rules: ClassRules | None,
    jobs: int,
    path_edges: bool,
) -> tuple[list[DeviceAnalysis], list[Beside[CriticalPath] | PathBeside | None]]:
    """`_analyze` of a lone GPU on two threads or more, its critical path found beside.

    Its window is chosen beside the launch tree, and its graph started from them beside the
    kernel classes and the rest of its analysis. The blocking calls in the window are found
    on after the window is handed over, beside the graph's start and the kernel classes.
    """
    chosen: Future[tuple[_Host, WindowChoice]] = Future()
    host_window = Beside(jobs, _host_window_blocking, trace, device, window, chosen)
    tree = launch_tree(trace)
    host, choice = chosen.result()  # jobs > 1: being found on the helper thread
    early = _EarlyPath(trace, tree, device, jobs, path_edges)
    try:
        early.start(choice.start_ns, choice.end_ns, list(choice.steps.names))
        classes = classify_kernels(trace, tree, rules)
        d = _analyze_device(
            trace, host, device, window, tree, classes, classes.comm_mask(len(trace)),
            _mostly_hip(trace), jobs, choice=choice, with_launch=True,
        )  # fmt: skip
        found = host_window.result()[2]
    except BaseException as e:  # a graph waiting for this analysis must not wait on
        early.failed(e)
        raise
    return [d], [early.path(d, found)]


def _path_beside(
    trace: Trace,
    analysis: DeviceAnalysis,
    tree: LaunchTree,
    start: int,
    jobs: int,
    path_edges: bool,
) -> Beside[CriticalPath] | None:
    """The GPU's critical path (None where it has none), found with `jobs` threads.

    Started on a helper thread at once where `start` > 1, else when first asked for.
    """
    if analysis.goodput is None or analysis.timeline is None:
        return None
    return Beside(
        start, lambda: critical_path(trace, analysis, tree, jobs=jobs, path_edges=path_edges)
    )


class _EarlyPath:
    """A lone GPU's critical path, its graph started once the GPU's window is chosen.

    The graph needs the analysis only for its blocking calls, which it asks for late in its
    build: those found beside the launch tree (`_FoundBlocking`), once the analysis is done
    (`path`) and has their idle time; else found then, from the analysis.
    """

    def __init__(
        self, trace: Trace, tree: LaunchTree, device: int, jobs: int, path_edges: bool
    ) -> None:
        self.trace, self.tree, self.device, self.jobs = trace, tree, device, jobs
        self.path_edges = path_edges
        # The analysis, and the blocking calls found beside the launch tree (`path`).
        self.analysis: Future[tuple[DeviceAnalysis, _FoundBlocking | None]] = Future()
        self.blocking: Beside[BlockingCalls | None] = Beside(1, self._blocking)
        self.graph: Beside[DependencyGraph] | None = None

    def _blocking(self) -> BlockingCalls | None:
        """The analysis's blocking calls: those found before it where it has their idle."""
        analysis, found = self.analysis.result()
        calls = found.calls_of(analysis) if found is not None else None
        return calls if calls is not None else blocking_of(self.trace, analysis)

    def start(self, w0: int, w1: int, step_names: list[str]) -> None:
        """Start the graph of the window [w0, w1] (none for an empty window: no path)."""
        if w1 <= w0:
            return
        self.graph = Beside(
            self.jobs, early_graph, self.trace, self.tree, self.device, (w0, w1), step_names,
            self.blocking.result, self.jobs,
        )  # fmt: skip

    def failed(self, error: BaseException) -> None:
        """The analysis failed: a graph waiting for its blocking calls gets the error."""
        if not self.analysis.done():
            self.analysis.set_exception(error)

    def path(self, analysis: DeviceAnalysis, found: _FoundBlocking | None) -> PathBeside | None:
        """The path of `analysis` (the analysis whose window started the graph).

        `found`: the blocking calls found beside the launch tree, if any (`_FoundBlocking`).
        """
        self.analysis.set_result((analysis, found))
        graph = self.graph
        if graph is None or analysis.goodput is None or analysis.timeline is None:
            return None
        return PathBeside(
            self.jobs, self.trace, analysis, self.tree, graph.result, self.blocking.result,
            self.path_edges,
        )  # fmt: skip
