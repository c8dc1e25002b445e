"""Per-GPU diagnosis rules.

Each asks a what-if of the measured timeline: how much shorter would the step be without this
cause of lost time?
"""

from __future__ import annotations

import re

import numpy as np

from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import TUNING as _TUNING
from badput.diagnose._rule import pct as _pct
from badput.diagnose._rule import register as _register
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import RULES, Evidence, Finding, Rule
from badput.trace.model import EventKind

__all__ = ["DEVICE_RULES"]

# ---- data-loading ---------------------------------------------------------------------------


@_register(
    Rule(
        id="data-loading",
        title="The GPU waits for the DataLoader",
        explanation=(
            "The GPU has nothing to run while the training loop is inside the DataLoader's "
            "__next__ (the `enumerate(DataLoader)#...__next__` span of the profiler). With "
            "num_workers=0 every batch is loaded, decoded and collated on the training thread, "
            "between steps; with too few workers the queue of ready batches runs dry."
        ),
        savings=(
            "What-if: the GPU idle time inside DataLoader spans disappears (batches are ready "
            "when asked for). Savings per step = that idle time / steps."
        ),
        fix=[
            "Load in background processes: DataLoader(num_workers=N), N up to the CPU cores "
            "per GPU.",
            "Keep them busy: persistent_workers=True, prefetch_factor=2 or more.",
            "pin_memory=True, then .to(device, non_blocking=True) so the copy overlaps compute.",
            "Make samples cheaper: decode and augment on the GPU (torchvision.io.decode_jpeg "
            "on device, NVIDIA DALI), cache decoded data, or store it in a faster format.",
        ],
        refs=[
            f"{_PT}/data.html#multi-process-data-loading",
            f"{_TUNING}#enable-asynchronous-data-loading-and-augmentation",
        ],
    )
)
def data_loading(ctx: DeviceContext) -> Finding | None:
    """GPU idle while the host is inside the DataLoader."""
    tl = ctx.timeline
    idle = tl.idle_dataloader.total_ns()
    if idle == 0:
        return None
    savings = ctx.per_step(idle)
    t = ctx.trace
    ops = ctx.rows(EventKind.CPU_OP, EventKind.ANNOTATION)
    loader_names = {t.names[int(i)] for i in np.unique(t.name_id[ops])}
    single = any("_SingleProcessDataLoaderIter" in n for n in loader_names)
    w0 = ctx.analysis.window_start_ns
    loader_time = tl.host_dataloader.clip(w0, w0 + ctx.analysis.window_ns).total_ns()
    fix = list(RULES["data-loading"].fix)
    if single:
        fix[0] = (
            "num_workers is 0 (the trace shows _SingleProcessDataLoaderIter): set "
            "DataLoader(num_workers=N), N up to the CPU cores per GPU."
        )
    share = ctx.share(savings)
    return ctx.finding(
        "data-loading",
        f"GPU idles {savings / 1e6:,.1f} ms per step ({_pct(share)}) waiting on the DataLoader",
        savings,
        {
            "gpu_idle_in_dataloader_per_step": ms(savings),
            "dataloader_time_per_step": ms(ctx.per_step(loader_time)),
            "single_process_loading": Evidence("yes" if single else "no"),
        },
        fix,
    )


# ---- synchronization ------------------------------------------------------------------------


@_register(
    Rule(
        id="synchronization",
        title="Host synchronizations drain the GPU queue",
        explanation=(
            "A synchronizing call (cudaStreamSynchronize, cudaDeviceSynchronize, a blocking "
            "cudaMemcpy, ...) makes the host wait until the GPU has finished all queued work. "
            "The queue is then empty, and the GPU idles until the host launches again. In "
            "PyTorch these come from .item(), .cpu(), .tolist(), printing a tensor, "
            "data-dependent shapes (nonzero, boolean masks) and torch.cuda.synchronize()."
        ),
        savings=(
            "What-if: without the sync the host would have kept the queue full. Savings per "
            "step = the GPU idle gaps that begin while the host is blocked in a synchronizing "
            "call (DataLoader waits excluded) / steps."
        ),
        fix=[
            "Do not read GPU values on the host inside the step: keep losses and metrics on "
            "the GPU and read them every N steps (.item(), .cpu(), .tolist(), print).",
            "Avoid data-dependent shapes in the hot loop (torch.nonzero, boolean-mask "
            "indexing, torch.unique), or give them a static size.",
            "Replace torch.cuda.synchronize() used for timing with CUDA events.",
            "Find each one: torch.cuda.set_sync_debug_mode('warn').",
        ],
        refs=[
            f"{_PT}/generated/torch.cuda.set_sync_debug_mode.html",
            f"{_TUNING}#avoid-unnecessary-cpu-gpu-synchronization",
        ],
    )
)
def synchronization(ctx: DeviceContext) -> Finding | None:
    """GPU idle gaps that start while the host sits in a synchronizing call."""
    rows = ctx.sync_rows
    drained = ctx.sync_drained_idle.total_ns()
    if rows.shape[0] == 0 or drained == 0:
        return None
    savings = ctx.per_step(drained)
    callers = ctx.enclosing_ops(rows)
    calls = {ctx.trace.names[int(i)] for i in ctx.trace.name_id[rows]}
    top = ", ".join(f"{name} ({n})" for name, n in callers.most_common(3)) or "no enclosing op"
    return ctx.finding(
        "synchronization",
        f"{rows.shape[0] / ctx.n_steps:,.1f} host synchronizations per step drain the GPU "
        f"queue: {savings / 1e6:,.2f} ms idle per step ({_pct(ctx.share(savings))})",
        savings,
        {
            "syncs_per_step": Evidence(round(rows.shape[0] / ctx.n_steps, 2)),
            "time_in_sync_calls_per_step": ms(ctx.per_step(ctx.spans(rows).total_ns())),
            "drained_idle_per_step": ms(savings),
            "calls": Evidence(", ".join(sorted(calls))),
            "triggered_by": Evidence(top),
        },
    )


# ---- host-overhead --------------------------------------------------------------------------

_LAUNCH = re.compile(r"LaunchKernel|cuLaunch|GraphLaunch|LaunchCooperative", re.IGNORECASE)


@_register(
    Rule(
        id="host-overhead",
        title="The GPU is starved by the host",
        explanation=(
            "The GPU idles between kernels while the host is busy in Python, framework code or "
            "kernel launches: the host cannot issue work as fast as the GPU runs it. Typical "
            "with many short kernels (small batches, unfused elementwise ops, per-parameter "
            "optimizer loops) where launch overhead (~5-10 us each) exceeds kernel time."
        ),
        savings=(
            "What-if: the GPU never waits on the host (as with a CUDA graph replay). Savings "
            "per step = GPU idle time outside DataLoader waits and outside sync-drained gaps / "
            "steps. An upper bound: some host work stays."
        ),
        fix=[
            "Capture the step in a CUDA graph: torch.compile(mode='reduce-overhead') or "
            "torch.cuda.CUDAGraph: one launch replaces hundreds.",
            "Fuse small ops: torch.compile; fused or foreach optimizers "
            "(torch.optim.AdamW(fused=True)).",
            "Give each launch more work: a larger (micro-)batch.",
            "Move Python work (logging, metrics, data preparation) out of the step or overlap "
            "it with GPU work.",
        ],
        refs=[
            f"{_PT}/notes/cuda.html#cuda-graphs",
            "https://pytorch.org/docs/stable/generated/torch.compile.html",
            f"{_TUNING}#use-cuda-graphs",
        ],
    )
)
def host_overhead(ctx: DeviceContext) -> Finding | None:
    """GPU idle while the host does other work (not data loading, not a sync wait)."""
    tl = ctx.timeline
    rest = tl.idle.subtract(tl.idle_dataloader).subtract(ctx.sync_drained_idle)
    total = rest.total_ns()
    if total == 0:
        return None
    savings = ctx.per_step(total)
    t = ctx.trace
    kernels = ctx.rows(EventKind.KERNEL, on_device=True)
    durs = t.dur_ns[kernels]
    calls = ctx.rows(EventKind.RUNTIME, EventKind.DRIVER)
    launches = t.rows_named(calls, lambda n: _LAUNCH.search(n) is not None).shape[0]
    gaps = rest.ends - rest.starts
    evidence = {
        "gpu_idle_on_host_per_step": ms(savings),
        "kernels_per_step": Evidence(round(kernels.shape[0] / ctx.n_steps, 1)),
        "launches_per_step": Evidence(round(launches / ctx.n_steps, 1)),
        "median_kernel": Evidence(round(float(np.median(durs)) / 1e3, 2) if durs.size else 0, "us"),
        "idle_gaps_per_step": Evidence(round(gaps.shape[0] / ctx.n_steps, 1)),
        "median_idle_gap": Evidence(round(float(np.median(gaps)) / 1e3, 2), "us"),
    }
    share = ctx.analysis.short_kernel_share
    if share is not None:
        evidence["kernel_time_in_kernels_under_10us"] = Evidence(round(100 * share, 1), "%")
    return ctx.finding(
        "host-overhead",
        f"GPU starved by the host: {savings / 1e6:,.2f} ms idle per step "
        f"({_pct(ctx.share(savings))}) between kernels while the host runs Python, ops "
        "and launches",
        savings,
        evidence,
    )


# ---- pageable-memcpy ------------------------------------------------------------------------


@_register(
    Rule(
        id="pageable-memcpy",
        title="Copies from pageable host memory",
        explanation=(
            "A host-device copy from pageable (not pinned) memory is staged through a pinned "
            "buffer by the driver: it runs at a fraction of PCIe bandwidth and cannot overlap "
            "with compute; blocking cudaMemcpy calls also stop the host."
        ),
        savings=(
            "What-if: from pinned memory with non_blocking=True the copy overlaps compute. "
            "Savings per step = the time these copies run with nothing else on the GPU / steps."
        ),
        fix=[
            "Pin host buffers: DataLoader(pin_memory=True), tensor.pin_memory(), "
            "torch.empty(..., pin_memory=True).",
            "Copy asynchronously: .to(device, non_blocking=True) from pinned memory.",
            "Keep tensors on the GPU between steps instead of round-tripping through the host.",
        ],
        refs=[
            f"{_PT}/notes/cuda.html#use-pinned-memory-buffers",
            "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        ],
    )
)
def pageable_memcpy(ctx: DeviceContext) -> Finding | None:
    """Exposed time of memcpys from or to pageable memory."""
    t = ctx.trace
    copies = ctx.rows(EventKind.MEMCPY, on_device=True)
    rows = t.rows_named(copies, lambda n: "pageable" in n.lower())
    if rows.shape[0] == 0:
        return None
    exposed = ctx.spans(rows).intersect(ctx.timeline.exposed_memory).total_ns()
    savings = ctx.per_step(exposed)
    moved = t.bytes[rows]
    known = moved >= 0
    busy = int(t.dur_ns[rows][known].sum())
    evidence = {
        "pageable_copies_per_step": Evidence(round(rows.shape[0] / ctx.n_steps, 1)),
        "exposed_copy_time_per_step": ms(savings),
    }
    if known.any() and busy > 0:
        evidence["bytes_per_step"] = Evidence(
            round(int(moved[known].sum()) / ctx.n_steps / 1e6, 2), "MB"
        )
        evidence["achieved_bandwidth"] = Evidence(round(int(moved[known].sum()) / busy, 2), "GB/s")
    return ctx.finding(
        "pageable-memcpy",
        f"{rows.shape[0] / ctx.n_steps:,.1f} copies per step from pageable memory: "
        f"{savings / 1e6:,.2f} ms exposed per step ({_pct(ctx.share(savings))})",
        savings,
        evidence,
    )


# Registered here, so that the catalogue keeps its order.
from badput.diagnose.comm import exposed_communication  # noqa: E402
from badput.diagnose.precision import low_precision_math  # noqa: E402

# ---- step-jitter ----------------------------------------------------------------------------

_MIN_STEPS = 5
_OUTLIER = 1.2  # a step 20 % slower than the median is an outlier


@_register(
    Rule(
        id="step-jitter",
        title="Some steps are much slower than the rest",
        explanation=(
            "Step times spread: a few outlier steps take much longer than the median. Typical "
            "causes: periodic host work (logging, checkpointing, evaluation, Python garbage "
            "collection), uneven batches (variable sequence lengths), data-loading hiccups, or "
            "a straggling rank in collectives."
        ),
        savings=(
            "What-if: every outlier step (over 1.2x the median) takes the median time. Savings "
            "per step = sum of (outlier - median) / steps."
        ),
        fix=[
            "Look at the outlier steps listed in the evidence and what grew in them.",
            "Move periodic work (checkpoints, evaluation, logging) out of the step or make it "
            "asynchronous.",
            "Python GC pauses: gc.freeze() after start-up, or collect at fixed step intervals.",
            "Uneven batches: bucket or pack sequences by length.",
        ],
        refs=[_TUNING],
    )
)
def step_jitter(ctx: DeviceContext) -> Finding | None:
    """Outlier steps against the median, and what grew in the worst one."""
    steps = ctx.analysis.steps
    if len(steps) < _MIN_STEPS:
        return None
    durs = np.array([s.dur_ns for s in steps], dtype=np.float64)
    median = float(np.median(durs))
    p90 = float(np.sort(durs)[int(np.ceil(0.9 * len(durs))) - 1])
    outliers = np.flatnonzero(durs > _OUTLIER * median)
    if outliers.shape[0] == 0 or median <= 0:
        return None
    savings = float((durs[outliers] - median).sum()) / len(steps)
    parts = {
        "compute": [s.breakdown.compute_ns for s in steps],
        "communication": [s.breakdown.communication_ns for s in steps],
        "memory": [s.breakdown.memory_ns for s in steps],
        "idle: dataloader": [s.idle_causes.dataloader_ns for s in steps],
        "idle: cpu ops": [s.idle_causes.cpu_ns for s in steps],
        "idle: runtime": [s.idle_causes.runtime_ns for s in steps],
        "idle: other": [s.idle_causes.other_ns for s in steps],
    }
    worst = int(outliers[np.argmax(durs[outliers])])
    growth = {k: v[worst] - float(np.median(v)) for k, v in parts.items()}
    grew, by = max(growth.items(), key=lambda kv: kv[1])
    names = ", ".join(steps[i].name for i in outliers[:8].tolist())
    return ctx.finding(
        "step-jitter",
        f"{outliers.shape[0]} of {len(steps)} steps take over {_OUTLIER}x the median "
        f"({median / 1e6:,.1f} ms); the worst, {steps[worst].name}, spends "
        f"+{by / 1e6:,.1f} ms more in {grew}",
        savings,
        {
            "median_step": ms(median),
            "p90_step": ms(p90),
            "max_step": ms(float(durs.max())),
            "p90_over_median": Evidence(round(p90 / median, 3), "x"),
            "outlier_steps": Evidence(names),
            "grew_most_in_worst_step": Evidence(f"{grew} +{by / 1e6:,.2f} ms"),
        },
    )


# ---- memory-churn ---------------------------------------------------------------------------

_ALLOC_CALLS = frozenset(
    {
        "cudaMalloc",
        "cudaFree",
        "cudaMallocHost",
        "cudaFreeHost",
        "cudaHostAlloc",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemFree",
        "cuMemFree_v2",
    }
)
_RESERVE_GROWTH = 0.10  # reserved memory growing 10 % within the window: not warmed up


@_register(
    Rule(
        id="memory-churn",
        title="The allocator keeps asking the driver for memory",
        explanation=(
            "PyTorch's caching allocator should serve every allocation from its cache after "
            "the first steps. Calls to cudaMalloc/cudaFree inside the steps, or reserved memory "
            "that keeps growing, mean it does not: shapes change from step to step, memory is "
            "fragmented, or torch.cuda.empty_cache() is called. cudaFree synchronizes the "
            "device."
        ),
        savings=(
            "What-if: no driver allocation inside the steps. Savings per step = GPU idle time "
            "while the host is in cudaMalloc/cudaFree-family calls / steps."
        ),
        fix=[
            "Keep shapes static across steps (pad variable-length batches into a few buckets) "
            "so cached blocks are reused.",
            "Do not call torch.cuda.empty_cache() in the training loop.",
            "Reduce fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
            "Reuse preallocated buffers (out= arguments, CUDA graph memory pools).",
        ],
        refs=[
            f"{_PT}/notes/cuda.html#memory-management",
            f"{_PT}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
        ],
    )
)
def memory_churn(ctx: DeviceContext) -> Finding | None:
    """Driver allocations inside the window and reserved-memory growth."""
    t = ctx.trace
    calls = ctx.named(ctx.rows(EventKind.RUNTIME, EventKind.DRIVER), _ALLOC_CALLS)
    events = ctx.rows(EventKind.MEMORY, on_device=True)
    events = events[np.argsort(t.ts_ns[events], kind="stable")]
    reserved = t.total_reserved[events]
    reserved = reserved[reserved >= 0]
    growth = float(reserved.max() - reserved[0]) if reserved.size else 0.0
    grew = bool(reserved.size) and growth >= _RESERVE_GROWTH * float(reserved.max())
    if calls.shape[0] == 0 and not grew:
        return None
    idle = ctx.spans(calls).intersect(ctx.timeline.idle).total_ns() if calls.shape[0] else 0
    savings = ctx.per_step(idle)
    allocs = int((t.bytes[events] > 0).sum())
    evidence = {
        "driver_allocation_calls_per_step": Evidence(round(calls.shape[0] / ctx.n_steps, 2)),
        "gpu_idle_in_them_per_step": ms(savings),
        "allocator_events_per_step": Evidence(round(allocs / ctx.n_steps, 1)),
    }
    if reserved.size:
        evidence["reserved_growth_in_window"] = Evidence(round(growth / 1e6, 1), "MB")
        evidence["reserved_at_end"] = Evidence(round(float(reserved[-1]) / 1e6, 1), "MB")
    return ctx.finding(
        "memory-churn",
        f"{calls.shape[0] / ctx.n_steps:,.1f} cudaMalloc/cudaFree calls per step"
        + (f", reserved memory grew {growth / 1e6:,.0f} MB in the window" if grew else ""),
        savings,
        evidence,
        floor="low",
    )


#: Rules run on every GPU, in catalogue order.
DEVICE_RULES = [
    data_loading,
    synchronization,
    host_overhead,
    pageable_memcpy,
    exposed_communication,
    low_precision_math,
    step_jitter,
    memory_churn,
]
