"""Memory findings from a snapshot: what to change, and how many bytes it would give back.

Each rule estimates the bytes its fix saves at the peak, from the replayed snapshot
(`analysis.memory`); with the model's size given, `badput estimate memory`'s formulas
(`estimate.memory.estimate_memory`) are computed beside it as a cross-check.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from badput.analysis.memory import DeviceMemory, SnapshotAnalysis
from badput.diagnose.findings import Evidence, Rule
from badput.estimate.memory import MemoryEstimate, estimate_memory

__all__ = [
    "MEMORY_RULES",
    "EstimateCheck",
    "MemoryDiagnosis",
    "MemoryFinding",
    "ModelSize",
    "diagnose_memory",
    "memory_severity",
]

_PT = "https://pytorch.org/docs/stable"

#: Savings as a share of the device's peak reserved bytes at or above which a memory finding
#: is high, medium or low; below `LOW` nothing is reported. Fragmentation of a few percent is
#: the caching allocator working as designed (block rounding, per-stream pools).
HIGH, MEDIUM, LOW = 0.20, 0.10, 0.05

#: Share of the allocated peak held by a stack kind before its rule fires.
ACTIVATION_SHARE = 0.30
OPTIMIZER_SHARE = 0.20

#: Share of activation memory that full activation checkpointing keeps: per transformer layer
#: 2·s·b·h bytes (the layer input) of at least 34·s·b·h (Korthikanti et al. 2022, "Reducing
#: Activation Recomputation in Large Transformer Models", eq. 1 and sec. 4.1).
FULL_RECOMPUTE_KEPT = 2.0 / 34.0


def memory_severity(share: float) -> str | None:
    """Severity of a memory finding by the share of peak reserved bytes it saves."""
    if share >= HIGH:
        return "high"
    if share >= MEDIUM:
        return "medium"
    if share >= LOW:
        return "low"
    return None


@dataclass(frozen=True)
class MemoryFinding:
    """A memory finding: like `Finding`, with savings in bytes at the peak.

    Attributes:
        id: the rule's id (`MEMORY_RULES`).
        title: one line, with the key number.
        severity: high, medium or low, by `savings_share`.
        evidence: named numbers from the snapshot.
        savings_bytes: bytes the fix would take off the reserved peak (an estimate).
        savings_share: `savings_bytes` over the device's peak reserved bytes.
        fix: concrete steps, most effective first.
        refs: documentation links.
        device: CUDA device index.
    """

    id: str
    title: str
    severity: str
    evidence: dict[str, Evidence]
    savings_bytes: int
    savings_share: float
    fix: list[str]
    refs: list[str]
    device: int


@dataclass(frozen=True)
class ModelSize:
    """What `badput estimate memory` needs to cross-check a snapshot (its flags' meanings)."""

    params: float
    gpus: int = 1
    optimizer: str = "adam"
    weight_bytes: float = 2.0
    grad_bytes: float = 2.0


@dataclass(frozen=True)
class EstimateCheck:
    """`badput estimate memory` beside the snapshot, in bytes per GPU.

    Attributes:
        estimate: the estimate without sharding (ZeRO stage 0) for `model`.
        sharded_optimizer_bytes: optimizer bytes with ZeRO stage 1 over `model.gpus`.
        measured_optimizer_bytes: bytes alive at the peak allocated by optimizer code.
        measured_peak_bytes: the allocated peak.
        static_share_of_peak: (weights + gradients + optimizer) estimated over the measured
            peak: near or below 1 when the estimate explains the peak; above 1 the model size
            given is larger than what ran.
    """

    estimate: MemoryEstimate
    sharded_optimizer_bytes: float
    measured_optimizer_bytes: int
    measured_peak_bytes: int
    static_share_of_peak: float | None

    @property
    def static_bytes(self) -> float:
        """Bytes of weights, gradients and optimizer states the estimate gives (ZeRO-0)."""
        e = self.estimate
        return e.weights_bytes + e.grads_bytes + e.optimizer_bytes

    @property
    def peak_share_of_estimate(self) -> float | None:
        """The measured allocated peak over the estimate's `static_bytes`; None without one."""
        static = self.static_bytes
        return self.measured_peak_bytes / static if static > 0 else None


@dataclass(frozen=True)
class MemoryDiagnosis:
    """Findings of a snapshot, largest savings first, and the estimate cross-check."""

    findings: list[MemoryFinding] = field(default_factory=list)
    check: EstimateCheck | None = None


MEMORY_RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            id="memory-fragmentation",
            title="Reserved memory well above what is allocated",
            explanation=(
                "The caching allocator keeps freed blocks in its segments for reuse. When "
                "tensor sizes vary (dynamic shapes, growing sequences, differently sized "
                "buffers), freed blocks cannot fit new requests, so it reserves new segments "
                "while the old ones sit partly empty: reserved memory peaks well above the "
                "allocated peak, and an out-of-memory error comes while much is cached."
            ),
            savings=(
                "What-if: perfect packing, reserved peak = allocated peak. Savings = peak "
                "reserved - peak allocated."
            ),
            fix=[
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place "
                "instead of new cudaMallocs, so free space is not stranded.",
                "Keep shapes steady: pad or bucket sequence lengths; preallocate buffers once.",
                "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N stops splitting blocks above N MB "
                "(large blocks stay whole for large requests).",
            ],
            refs=[f"{_PT}/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"],
        ),
        Rule(
            id="activation-memory",
            title="Activations dominate the peak",
            explanation=(
                "Tensors allocated in modules' forward and still alive at the peak are the "
                "activations autograd saved for the backward pass. They grow with batch size "
                "and sequence length, and usually set the peak of training."
            ),
            savings=(
                "What-if: full activation checkpointing, which keeps only each layer's input: "
                "2·s·b·h of at least 34·s·b·h bytes per transformer layer (Korthikanti et al. "
                "2022), so savings = forward bytes at the peak x (1 - 2/34)."
            ),
            fix=[
                "Activation checkpointing: torch.utils.checkpoint.checkpoint around each "
                "block (or FSDP/torchtitan's activation checkpointing, selective to start).",
                "Smaller micro-batches with gradient accumulation.",
                "Mixed precision (bf16 autocast) halves activations kept in fp32.",
            ],
            refs=[f"{_PT}/checkpoint.html"],
        ),
        Rule(
            id="optimizer-state-sharding",
            title="Optimizer state is a large part of the peak",
            explanation=(
                "Adam keeps two fp32 moments per parameter (and often an fp32 master copy): "
                "8 to 12 bytes per parameter, more than the bf16 weights and gradients "
                "together. Every data-parallel GPU holds all of it unless it is sharded."
            ),
            savings=(
                "What-if: optimizer state sharded over N data-parallel GPUs (ZeRO stage 1). "
                "Savings = optimizer bytes at the peak x (1 - 1/N); N from --gpus, else 2."
            ),
            fix=[
                "Shard the optimizer state: torch.distributed.optim.ZeroRedundancyOptimizer, "
                "or FSDP/FSDP2 (fully_shard), or DeepSpeed ZeRO stage 1 or more.",
                "A lighter optimizer: Adafactor, or 8-bit Adam (bitsandbytes).",
            ],
            refs=[
                f"{_PT}/distributed.optim.html",
                "https://pytorch.org/docs/stable/fsdp.html",
            ],
        ),
    )
}


def _finding(
    rule_id: str, d: DeviceMemory, title: str, savings: float, evidence: dict[str, Evidence]
) -> MemoryFinding | None:
    rule = MEMORY_RULES[rule_id]
    share = savings / d.peak_reserved_bytes if d.peak_reserved_bytes else 0.0
    severity = memory_severity(share)
    if severity is None:
        return None
    return MemoryFinding(
        rule_id, title, severity, evidence, round(savings), share, rule.fix, rule.refs, d.device
    )


def _gib(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def fragmentation(d: DeviceMemory) -> MemoryFinding | None:
    """Reserved peak above the allocated peak."""
    savings = d.peak_reserved_bytes - d.peak_allocated_bytes
    if savings <= 0:
        return None
    evidence = {
        "peak_reserved": Evidence(d.peak_reserved_bytes, "B"),
        "peak_allocated": Evidence(d.peak_allocated_bytes, "B"),
        "fragmentation_at_reserved_peak": Evidence(d.fragmentation_at_peak_reserved_bytes, "B"),
        "fragmentation_at_dump": Evidence(d.end.fragmentation_bytes, "B"),
        "segments_below_half_use": Evidence(round(100 * d.end.below_half_share, 1), "%"),
        "largest_free_block": Evidence(max(d.end.largest_free_block_bytes, default=0), "B"),
        "expandable_segments": Evidence(str(d.expandable).lower()),
    }
    title = (
        f"{_gib(savings)} reserved above the allocated peak "
        f"({_gib(d.peak_reserved_bytes)} reserved, {_gib(d.peak_allocated_bytes)} allocated)"
    )
    f = _finding("memory-fragmentation", d, title, savings, evidence)
    if f is not None and d.expandable:
        # Already on: the first fix would change nothing.
        f = dataclasses.replace(f, fix=f.fix[1:])
    return f


def activations(d: DeviceMemory) -> MemoryFinding | None:
    """Forward-pass allocations dominate what is alive at the peak."""
    fwd = d.kinds_at_peak.get("forward", 0)
    if not d.peak_allocated_bytes or fwd < ACTIVATION_SHARE * d.peak_allocated_bytes:
        return None
    savings = fwd * (1.0 - FULL_RECOMPUTE_KEPT)
    evidence = {
        "forward_bytes_at_peak": Evidence(fwd, "B"),
        "forward_share_of_peak": Evidence(round(100 * fwd / d.peak_allocated_bytes, 1), "%"),
        "kept_with_full_recompute": Evidence(round(100 * FULL_RECOMPUTE_KEPT, 1), "%"),
    }
    title = (
        f"activations (forward allocations) hold {_gib(fwd)}, "
        f"{100 * fwd / d.peak_allocated_bytes:.0f} % of the allocated peak"
    )
    return _finding("activation-memory", d, title, savings, evidence)


def optimizer_state(
    d: DeviceMemory, check: EstimateCheck | None, gpus: int
) -> MemoryFinding | None:
    """Optimizer state is a large part of what is alive at the peak."""
    opt = d.kinds_at_peak.get("optimizer", 0)
    if not d.peak_allocated_bytes or opt < OPTIMIZER_SHARE * d.peak_allocated_bytes:
        return None
    n = max(gpus, 2)
    savings = opt * (1.0 - 1.0 / n)
    evidence = {
        "optimizer_bytes_at_peak": Evidence(opt, "B"),
        "optimizer_share_of_peak": Evidence(round(100 * opt / d.peak_allocated_bytes, 1), "%"),
        "data_parallel_gpus": Evidence(n),
    }
    if check is not None:
        est = check.estimate.optimizer_bytes - check.sharded_optimizer_bytes
        evidence["estimated_savings_from_model_size"] = Evidence(round(est), "B")
    title = (
        f"optimizer state holds {_gib(opt)}, {100 * opt / d.peak_allocated_bytes:.0f} % of the "
        f"allocated peak; sharded over {n} GPUs it would take {_gib(opt / n)}"
    )
    return _finding("optimizer-state-sharding", d, title, savings, evidence)


def estimate_check(d: DeviceMemory, model: ModelSize) -> EstimateCheck:
    """`badput estimate memory` for `model` beside the measured peak of one device.

    Raises:
        UsageError: model sizes `estimate_memory` refuses.
    """
    est = estimate_memory(
        params=model.params,
        gpus=model.gpus,
        optimizer=model.optimizer,
        weight_bytes=model.weight_bytes,
        grad_bytes=model.grad_bytes,
    )
    sharded = estimate_memory(
        params=model.params,
        gpus=model.gpus,
        optimizer=model.optimizer,
        weight_bytes=model.weight_bytes,
        grad_bytes=model.grad_bytes,
        zero_stage=1,
    )
    static = est.weights_bytes + est.grads_bytes + est.optimizer_bytes
    peak = d.peak_allocated_bytes
    return EstimateCheck(
        estimate=est,
        sharded_optimizer_bytes=sharded.optimizer_bytes,
        measured_optimizer_bytes=d.kinds_at_peak.get("optimizer", 0),
        measured_peak_bytes=peak,
        static_share_of_peak=static / peak if peak else None,
    )


def diagnose_memory(
    analysis: SnapshotAnalysis, model: ModelSize | None = None, gpus: int | None = None
) -> MemoryDiagnosis:
    """Memory findings of every device of a snapshot, largest savings first.

    Args:
        analysis: the replayed snapshot.
        model: the model's size for the estimate cross-check; None to skip it.
        gpus: data-parallel GPUs the optimizer state could be sharded over (default: the
            model's `gpus`, else 2).

    Example:
        >>> diagnose_memory(analyze_snapshot(load_snapshot("s.pickle"))).findings[0].id
        ... # doctest: +SKIP
        'memory-fragmentation'
    """
    main = analysis.main
    check = estimate_check(main, model) if model is not None and main is not None else None
    n = gpus if gpus is not None else (model.gpus if model is not None else 2)
    found: list[MemoryFinding] = []
    for d in analysis.devices:
        c = check if d is main else None
        for f in (fragmentation(d), activations(d), optimizer_state(d, c, n)):
            if f is not None:
                found.append(f)
    found.sort(key=lambda f: (-f.savings_bytes, f.id, f.device))
    return MemoryDiagnosis(found, check)
