"""Per-GPU diagnosis rules.

Each asks a what-if of the measured timeline: how much shorter would the step be without this
cause of lost time?
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from badput.analysis.critical_path import GraphChange
from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import TUNING as _TUNING
from badput.diagnose._rule import pct as _pct
from badput.diagnose._rule import register as _register
from badput.diagnose.context import (
    BLOCKING_DECIDERS,
    RETURN_LATENCY_NS,
    TIMING_MIN_WAIT_NS,
    DeviceContext,
    ms,
)
from badput.diagnose.findings import RULES, Evidence, Finding, Rule
from badput.trace.model import EventKind

__all__ = ["DEVICE_RULES"]


def _count(ctx: DeviceContext, n: int) -> str:
    """How many of something a title names: per step (one decimal), or in the window."""
    return f"{n / ctx.n_steps:,.1f}" if ctx.has_steps else f"{n:,}"


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
    # The names first (most traces have none such): rows only where one has it.
    named = t.name_mask(lambda n: "_SingleProcessDataLoaderIter" in n)
    single = bool(named.any()) and bool(
        named[t.name_id[ctx.rows(EventKind.CPU_OP, EventKind.ANNOTATION)]].any()
    )
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
        f"GPU idles {savings / 1e6:,.1f} ms {ctx.per_step_text} ({_pct(share)}) waiting on "
        "the DataLoader",
        savings,
        {
            "gpu_idle_in_dataloader_per_step": ms(savings),
            "dataloader_time_per_step": ms(ctx.per_step(loader_time)),
            "single_process_loading": Evidence("yes" if single else "no"),
        },
        fix,
        change=GraphChange(host_rows=ctx.loader_rows),
    )


# ---- synchronization ------------------------------------------------------------------------


@_register(
    Rule(
        id="synchronization",
        title="Blocking host calls drain the GPU queue",
        explanation=(
            "A blocking host call (cudaStreamSynchronize, cudaDeviceSynchronize, "
            "cudaEventSynchronize, a cudaMemcpy to or from pageable memory, a cudaFree that "
            "synchronizes, their HIP forms, or any call the timing shows waiting) makes the "
            "host wait until the GPU has finished the work queued before it. The queue is then "
            "empty, and the GPU idles until the host has done its next piece of work and "
            "launched again. A call counts as blocking when the GPU goes idle during it and "
            f"(first evidence that speaks) it returned within {RETURN_LATENCY_NS // 1000} us of "
            "the GPU finishing the work queued before it, after waiting at least "
            f"{TIMING_MIN_WAIT_NS // 1000} us, or its own copy is "
            "device-to-host into pageable memory, or its name is a known synchronizing call. "
            "In PyTorch these come from .item(), .cpu(), .tolist(), printing a tensor, "
            "data-dependent shapes (nonzero, boolean masks, `if tensor:`) and "
            "torch.cuda.synchronize()."
        ),
        savings=(
            "What-if: the call does not wait, so the host gets back the time it was blocked "
            "(the call's duration) and launches its next work that much earlier. The idle gap "
            "that begins in the call therefore shrinks by at most that time: savings per step "
            "= for each gap (outside DataLoader waits) that begins at the end of GPU work "
            "during a blocking call, min(gap, the call's duration), summed / steps. This is "
            "idle inside the call (the breakdown's runtime part) and, after it, at most the "
            "host time it lost (cpu ops or other); host-overhead does not count it again."
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
    """GPU idle after blocking host calls, as much of it as the host lost waiting."""
    found = ctx.blocking
    saved = found.idle.total_ns()
    if len(found) == 0 or saved == 0:
        return None
    t = ctx.trace
    savings = ctx.per_step(saved)
    names = Counter(t.names[int(i)] for i in t.name_id[found.rows])
    callers = ctx.enclosing_ops(found.rows)
    top = ", ".join(f"{name} ({n})" for name, n in callers.most_common(3)) or "no enclosing op"
    by = Counter(BLOCKING_DECIDERS[int(i)] for i in found.decided_by)
    inside = found.idle.intersect(ctx.spans(found.rows)).total_ns()
    n = len(found) / ctx.n_steps
    call, op = names.most_common(1)[0][0], (callers.most_common(1) or [("", 0)])[0][0]
    where = f"{call} in {op}" if op else call
    evidence = {
        "syncs_per_step": Evidence(round(n, 2)),
        "time_in_sync_calls_per_step": ms(ctx.per_step(ctx.spans(found.rows).total_ns())),
        "drained_idle_per_step": ms(savings),
        "of_which_inside_the_calls_per_step": ms(ctx.per_step(inside)),
        "calls": Evidence(", ".join(sorted(names))),
        "calls_per_step": Evidence(
            ", ".join(f"{k} ({v / ctx.n_steps:,.2f})" for k, v in names.most_common())
        ),
        "decided_by": Evidence(", ".join(f"{k} ({v})" for k, v in by.most_common())),
        "triggered_by": Evidence(top),
    }
    copies = found.copy_bytes[found.copy_bytes >= 0]
    fix = [ctx.runtime_text(line) for line in RULES["synchronization"].fix]
    if copies.size:
        sizes = Counter(copies.tolist())
        evidence["copy_bytes"] = Evidence(
            ", ".join(f"{size:,} B ({k})" for size, k in sizes.most_common(3))
        )
        fix.insert(
            1,
            "For a value the host needs later: copy it into pinned memory without waiting "
            "(x.to('cpu', non_blocking=True) into a pin_memory() buffer), record an event, and "
            "synchronize on it only where the value is used.",
        )
    return ctx.finding(
        "synchronization",
        f"{_count(ctx, len(found))} blocking host calls {ctx.per_step_text} ({where}) leave "
        "the GPU idle: "
        f"{savings / 1e6:,.2f} ms {ctx.per_step_text} ({_pct(ctx.share(savings))})",
        savings,
        evidence,
        fix,
        change=GraphChange(unblock_rows=found.rows.astype(np.int64)),
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
            "per step = GPU idle time outside DataLoader waits and outside the idle that "
            "blocking host calls cost (synchronization's savings) / steps. An upper bound: "
            "some host work stays."
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
    rest = tl.idle.subtract(tl.idle_dataloader).subtract(ctx.sync_idle)
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
        f"GPU starved by the host: {savings / 1e6:,.2f} ms idle {ctx.per_step_text} "
        f"({_pct(ctx.share(savings))}) between kernels while the host runs Python, ops "
        "and launches",
        savings,
        evidence,
        [ctx.runtime_text(line) for line in RULES["host-overhead"].fix],
        # The host never makes the GPU wait: its time outside DataLoader spans and launch
        # delays go; blocking calls still wait for the GPU.
        change=GraphChange(all_host=True, keep_host_rows=ctx.loader_rows, no_launch_delay=True),
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
    moved = t.byte_counts.at(rows)
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
        f"{_count(ctx, rows.shape[0])} copies {ctx.per_step_text} from pageable memory: "
        f"{savings / 1e6:,.2f} ms exposed {ctx.per_step_text} ({_pct(ctx.share(savings))})",
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
            # Most telling first (reports show the first few): the fix points at these.
            "outlier_steps": Evidence(names),
            "grew_most_in_worst_step": Evidence(f"{grew} +{by / 1e6:,.2f} ms"),
            "median_step": ms(median),
            "p90_step": ms(p90),
            "max_step": ms(float(durs.max())),
            "p90_over_median": Evidence(round(p90 / median, 3), "x"),
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
        # HIP (hip_runtime_api.h)
        "hipMalloc",
        "hipFree",
        "hipHostMalloc",
        "hipHostFree",
        "hipMallocManaged",
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
    reserved = t.reserved_totals.at(events)
    reserved = reserved[reserved >= 0]
    growth = float(reserved.max() - reserved[0]) if reserved.size else 0.0
    grew = bool(reserved.size) and growth >= _RESERVE_GROWTH * float(reserved.max())
    if calls.shape[0] == 0 and not grew:
        return None
    idle = ctx.spans(calls).intersect(ctx.timeline.idle).total_ns() if calls.shape[0] else 0
    savings = ctx.per_step(idle)
    allocs = int((t.byte_counts.at(events) > 0).sum())
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
        ctx.runtime_text(
            f"{_count(ctx, calls.shape[0])} cudaMalloc/cudaFree calls {ctx.per_step_text}"
        )
        + (f", reserved memory grew {growth / 1e6:,.0f} MB in the window" if grew else ""),
        savings,
        evidence,
        [ctx.runtime_text(line) for line in RULES["memory-churn"].fix],
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
