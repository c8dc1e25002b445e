"""Per-GPU diagnosis rules.

Each asks a what-if of the measured timeline: how much shorter would the step be without this
cause of lost time?
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from badput.analysis.patterns import kernel_category
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import RULES, Evidence, Finding, Rule
from badput.trace.model import EventKind

__all__ = ["DEVICE_RULES"]

_PT = "https://pytorch.org/docs/stable"
_TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


def _register(rule: Rule) -> Callable[[Callable[[DeviceContext], Finding | None]], Rule]:
    def wrap(check: Callable[[DeviceContext], Finding | None]) -> Rule:
        full = Rule(rule.id, rule.title, rule.explanation, rule.savings, rule.fix, rule.refs, check)
        RULES[rule.id] = full
        return full

    return wrap


def _pct(share: float | None) -> str:
    # None: no step time to take a share of (such a GPU is not diagnosed; this is a backstop).
    return "n/a" if share is None else f"{100 * share:.1f} %"


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


# ---- exposed-communication ------------------------------------------------------------------


@_register(
    Rule(
        id="exposed-communication",
        title="Collective communication not hidden under compute",
        explanation=(
            "Collective kernels (NCCL all-reduce, all-gather, reduce-scatter, all-to-all...) "
            "run while no compute kernel runs: the step waits on the network. Either the "
            "collectives are not overlapped with backward/forward compute, or they are too "
            "slow (small messages, a slow link, a straggling rank)."
        ),
        savings=(
            "What-if: communication fully overlapped with compute. Savings per step = "
            "collective time not under compute / steps (the exposed part)."
        ),
        fix=[
            "Overlap gradient all-reduce with backward: DDP buckets (bucket_cap_mb, "
            "gradient_as_bucket_view=True); no blocking collective inside the step.",
            "With FSDP, prefetch: forward_prefetch=True, backward_prefetch=BACKWARD_PRE (or "
            "FSDP2 reshard_after_forward / explicit prefetching).",
            "Fewer, larger collectives: bucket small tensors together.",
            "Check the link: NCCL_DEBUG=INFO for the transport, nccl-tests busbw against the "
            "hardware's NVLink/InfiniBand bandwidth.",
        ],
        refs=[f"{_PT}/notes/ddp.html", f"{_PT}/fsdp.html"],
    )
)
def exposed_communication(ctx: DeviceContext) -> Finding | None:
    """Collective time outside compute."""
    tl = ctx.timeline
    exposed = tl.exposed_communication.total_ns()
    if exposed == 0:
        return None
    savings = ctx.per_step(exposed)
    comm = ctx.analysis.comm
    collectives = [k for k in ctx.analysis.kernels if k.category == "communication"]
    count = sum(k.count for k in collectives)
    evidence = {
        "exposed_communication_per_step": ms(savings),
        "communication_per_step": ms(ctx.per_step(comm.total_ns)),
        "hidden_under_compute": Evidence(
            round(100 * comm.overlapped_ns / comm.total_ns, 1) if comm.total_ns else 0.0, "%"
        ),
        "collective_kernels_per_step": Evidence(round(count / ctx.n_steps, 1)),
    }
    if collectives:
        evidence["largest_collective"] = Evidence(collectives[0].name[:120])
    return ctx.finding(
        "exposed-communication",
        f"{savings / 1e6:,.2f} ms per step ({_pct(ctx.share(savings))}) of communication "
        "is not hidden under compute",
        savings,
        evidence,
    )


# ---- low-precision-math ---------------------------------------------------------------------

# Tensor-core kernels by name: Volta/Turing HMMA (884, 1688), Ampere 16816, Hopper GMMA/WGMMA,
# cuBLASLt nvjet, CUTLASS tensorop, and any kernel that names a 16-bit or TF32 input type.
_TENSOR_CORE = re.compile(
    r"884|1688|16816|hmma|xmma|wmma|gmma|tensorop|tf32|bf16|fp16|f16|half|nvjet|_h\d+gemm",
    re.IGNORECASE,
)
# FP32 math on CUDA cores: cuBLAS sgemm/sgemv, cuDNN's "scudnn" kernels, templates on float.
_FP32 = re.compile(r"sgemm|sgemv|scudnn|<float\b|\bfloat,|_f32_|fp32", re.IGNORECASE)

# Speed-up assumed for moving FP32 GEMM/convolution time to tensor cores: the peak ratio is
# 8x (V100 fp16 vs fp32) to 15x (H100 bf16 vs fp32), but real kernels are partly memory-bound;
# NVIDIA reports 1.5x to 3x end to end for mixed precision. 2x is the conservative middle.
_TENSOR_CORE_SPEEDUP = 2.0


def is_fp32_matmul(name: str) -> bool:
    """Whether a kernel name is a GEMM or convolution running FP32 math on CUDA cores."""
    return (
        kernel_category(name) == "gemm"
        and not _TENSOR_CORE.search(name)
        and _FP32.search(name) is not None
    )


@_register(
    Rule(
        id="low-precision-math",
        title="Matrix math in FP32 on a GPU with tensor cores",
        explanation=(
            "GEMM and convolution kernels run in full FP32 on CUDA cores, although the GPU's "
            "tensor cores run the same math several times faster in TF32 (Ampere and later, "
            "one line of code) or in bf16/fp16 with autocast. Found from kernel names (sgemm, "
            "scudnn, templates on float) and the GPU's peaks in the hardware table."
        ),
        savings=(
            "What-if: these kernels run 2x faster (the peak ratio is 8-15x, real kernels get "
            "1.5-3x with mixed precision). Savings per step = their time x (1 - 1/2) / steps."
        ),
        fix=[],
        refs=[
            f"{_PT}/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
            f"{_PT}/amp.html",
        ],
    )
)
def low_precision_math(ctx: DeviceContext) -> Finding | None:
    """FP32 GEMM/conv kernels on a GPU whose tensor cores would run them faster."""
    from badput.estimate.hardware import lookup_gpu

    gpu = ctx.analysis.gpu
    spec = lookup_gpu(gpu, warn=False) if gpu else None
    if spec is None:
        return None
    fp32 = spec.peak("fp32")
    fast = {p: spec.peak(p) for p in ("tf32", "bf16", "fp16")}
    best = max((v for v in fast.values() if v is not None), default=None)
    if fp32 is None or best is None or best <= fp32:
        return None
    t = ctx.trace
    kernels = ctx.rows(EventKind.KERNEL, on_device=True)
    rows = t.rows_named(kernels, is_fp32_matmul)
    if rows.shape[0] == 0:
        return None
    time = ctx.spans(rows).total_ns()
    speedup = min(_TENSOR_CORE_SPEEDUP, best / fp32)
    savings = ctx.per_step(time * (1 - 1 / speedup))
    if fast["tf32"] is not None:
        fix = [
            "Allow TF32 for matmuls (one line, no model change): "
            "torch.set_float32_matmul_precision('high'); convolutions: "
            "torch.backends.cudnn.allow_tf32 = True.",
            "Or train in bf16 mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16).",
        ]
    else:
        fix = [
            "Train in fp16 mixed precision: torch.autocast('cuda', dtype=torch.float16) with "
            "torch.amp.GradScaler (this GPU has no bf16 or TF32 tensor cores).",
            "Use channels_last memory format for convolutions so cuDNN picks tensor-core kernels.",
        ]
    ids, inverse = np.unique(t.name_id[rows], return_inverse=True)
    by_name = np.bincount(inverse, weights=t.dur_ns[rows].astype(np.float64))
    top = [t.names[int(ids[i])] for i in np.argsort(-by_name)[:3].tolist()]
    compute = ctx.timeline.compute.total_ns()
    return ctx.finding(
        "low-precision-math",
        f"{time / ctx.n_steps / 1e6:,.1f} ms per step of GEMM/convolution in FP32 on a "
        f"{spec.key} with tensor cores",
        savings,
        {
            "fp32_matmul_time_per_step": ms(ctx.per_step(time)),
            "share_of_compute": Evidence(round(100 * time / compute, 1) if compute else 0.0, "%"),
            "fp32_peak": Evidence(fp32, "TFLOP/s"),
            "tensor_core_peak": Evidence(best, "TFLOP/s"),
            "assumed_speedup": Evidence(speedup, "x"),
            "top_kernels": Evidence("; ".join(n[:80] for n in top[:3])),
        },
        fix,
    )


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
