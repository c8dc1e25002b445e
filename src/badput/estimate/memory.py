"""`badput estimate memory`: per-GPU bytes of weights, gradients, optimizer and activations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from badput.errors import UsageError
from badput.estimate.hardware import GpuSpec

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "OPTIMIZER_BYTES",
    "TIGHT_SHARE",
    "MemoryEstimate",
    "Recompute",
    "estimate_memory",
    "fit_verdict",
]

#: Bytes a training process holds on each GPU before its first tensor: the CUDA context and the
#: kernels of CUDA, cuBLAS and cuDNN that PyTorch loads. Hugging Face's "Model training anatomy"
#: (transformers docs, https://huggingface.co/docs/transformers/model_memory_anatomy) measures
#: 1,343 MB right after initialising CUDA with a 1-byte tensor ("the kernels alone take up
#: 1.3GB"); badput reserves 1.3e9 bytes. NCCL buffers and library workspaces come on top.
CUDA_CONTEXT_BYTES = 1.3e9

#: A margin below this share of the GPU's memory (after the CUDA context) is "tight": the
#: caching allocator's fragmentation, NCCL buffers and temporary workspaces commonly take that
#: much (badput's convention; `badput memory` measures a run's fragmentation).
TIGHT_SHARE = 0.10

#: Optimizer state bytes per parameter. Mixed-precision Adam keeps an fp32 master copy of the
#: weights, fp32 momentum and fp32 variance: 4 + 4 + 4 = 12 (Rajbhandari et al. 2020, "ZeRO",
#: sec. 3.1, K = 12). With bf16 weights and gradients (2 + 2) that is the 16 bytes/param rule.
OPTIMIZER_BYTES = {
    "adam": 12.0,  # fp32 master weights + momentum + variance
    "adam-no-master": 8.0,  # fp32 momentum + variance, weights kept in their training dtype
    "sgd-momentum": 8.0,  # fp32 master weights + momentum
    "adafactor": 4.0,  # fp32 master weights; factored second moments (sub-linear, ignored)
}


class Recompute(StrEnum):
    """Activation checkpointing mode."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU bytes and whether they fit."""

    params: float
    dp: int
    tp: int
    pp: int
    ep: int
    zero_stage: int
    bytes_per_param: dict[str, float]
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float | None
    activations_formula: str
    total_bytes: float
    gpu: str | None
    gpu_memory_bytes: int | None
    fits: bool | None
    notes: list[str] = field(default_factory=list)
    verdict: str | None = None  # "fits", "tight" or "does not fit" (see `fit_verdict`)
    margin_bytes: float | None = None  # capacity - CUDA context - total; negative: over
    reserved_bytes: float | None = None  # the CUDA context reserve, CUDA_CONTEXT_BYTES
    activations_counted: bool = False


def fit_verdict(total_bytes: float, capacity_bytes: float, gpus: int = 1) -> tuple[str, float]:
    """Whether `total_bytes` fit `gpus` GPUs of `capacity_bytes` each, and the margin in bytes.

    The margin is gpus x (capacity - CUDA_CONTEXT_BYTES) - total. Below zero: "does not fit";
    below TIGHT_SHARE of the memory: "tight"; otherwise "fits".

    Example:
        >>> fit_verdict(79.4e9, 80e9)[0]
        'does not fit'
    """
    margin = gpus * (capacity_bytes - CUDA_CONTEXT_BYTES) - total_bytes
    if margin < 0:
        return "does not fit", margin
    if margin < TIGHT_SHARE * capacity_bytes * gpus:
        return "tight", margin
    return "fits", margin


def _activation_bytes(
    layers: int,
    d_model: int,
    seq_len: int,
    micro_batch: int,
    heads: int | None,
    tp: int,
    recompute: Recompute,
) -> tuple[float, str]:
    """Activation bytes per GPU of a transformer with 16-bit activations.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
    per layer s·b·h·(34 + 5·a·s/h) bytes without recomputation (eq. 1), 34·s·b·h with
    selective recomputation, 2·s·b·h with full recomputation (only each layer's input kept);
    tensor parallelism with sequence parallelism divides all by t. With 1F1B pipelining the
    first stage holds L/p layers for p micro-batches in flight: L layers' worth, whatever p.
    """
    sbh = float(seq_len) * micro_batch * d_model
    if recompute is Recompute.FULL:
        per_layer, formula = 2.0 * sbh, "L·2·s·b·h/t"
    elif recompute is Recompute.SELECTIVE:
        per_layer, formula = 34.0 * sbh, "L·34·s·b·h/t"
    else:
        if heads is None:
            raise UsageError("activations without recomputation need --heads (attention heads)")
        per_layer = sbh * (34.0 + 5.0 * heads * seq_len / d_model)
        formula = "L·s·b·h·(34 + 5·a·s/h)/t"
    return layers * per_layer / tp, formula + " (Korthikanti et al. 2022)"


def estimate_memory(
    *,
    params: float,
    gpus: int = 1,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    expert_params: float = 0.0,
    zero_stage: int = 0,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
    optimizer: str = "adam",
    layers: int | None = None,
    d_model: int | None = None,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    heads: int | None = None,
    recompute: Recompute = Recompute.NONE,
    gpu: GpuSpec | None = None,
) -> MemoryEstimate:
    """Per-GPU memory of mixed-precision training.

    Covers data parallelism with ZeRO/FSDP sharding, and tensor, pipeline and expert
    parallelism.
    Model parallelism splits parameters over `tp * pp` GPUs (expert parameters also over `ep`);
    the data-parallel degree is `gpus / (tp * pp)`; ZeRO stage 1 shards optimizer states over
    it, stage 2 also gradients, stage 3 (= FSDP full sharding) also weights (expert parameters
    shard over `dp / ep`, their own data-parallel group).

    Raises:
        UsageError: sizes that are not positive or degrees that do not divide.
    """
    if params <= 0 or gpus < 1 or min(tp, pp, ep) < 1:
        raise UsageError("--params must be positive and --gpus, --tp, --pp, --ep at least 1")
    if gpus % (tp * pp):
        raise UsageError(f"--gpus {gpus} is not a multiple of tp*pp = {tp * pp}")
    dp = gpus // (tp * pp)
    if dp % ep:
        raise UsageError(f"--ep {ep} must divide the data-parallel degree {dp}")
    if not 0 <= expert_params <= params:
        raise UsageError("--expert-params must be between 0 and --params")
    if zero_stage not in (0, 1, 2, 3):
        raise UsageError("--zero must be 0, 1, 2 or 3")
    if optimizer not in OPTIMIZER_BYTES:
        raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZER_BYTES)}")
    if min(weight_bytes, grad_bytes) <= 0:
        raise UsageError("bytes per weight and per gradient must be positive")

    dense = (params - expert_params) / (tp * pp)
    experts = expert_params / (tp * pp * ep)
    k = OPTIMIZER_BYTES[optimizer]

    def sharded(stage: int) -> float:
        """Parameters per GPU of a state that ZeRO shards from `stage` on."""
        if zero_stage >= stage:
            return dense / dp + experts / (dp // ep)
        return dense + experts

    weights = weight_bytes * sharded(3)
    grads = grad_bytes * sharded(2)
    opt = k * sharded(1)

    activations: float | None = None
    formula = ""
    shape = (layers, d_model, seq_len, micro_batch)
    if all(v is not None for v in shape):
        assert layers and d_model and seq_len and micro_batch
        if min(layers, d_model, seq_len, micro_batch) <= 0:
            raise UsageError("--layers, --d-model, --seq-len and --micro-batch must be positive")
        activations, formula = _activation_bytes(
            layers, d_model, seq_len, micro_batch, heads, tp, recompute
        )
    elif any(v is not None for v in shape):
        raise UsageError("activations need --layers, --d-model, --seq-len and --micro-batch")

    total = weights + grads + opt + (activations or 0.0)
    notes = []
    fits = None
    capacity = None
    verdict: str | None = None
    margin: float | None = None
    if gpu is not None:
        capacity = gpu.memory_bytes
        verdict, margin = fit_verdict(total, capacity)
        fits = margin >= 0
        notes.append(
            f"fit: {CUDA_CONTEXT_BYTES / 1e9:g} GB reserved for the CUDA context and kernels "
            "(Hugging Face, 'Model training anatomy'); 'tight' = under "
            f"{100 * TIGHT_SHARE:g} % of the GPU left, which allocator fragmentation, NCCL "
            "buffers and workspaces (not counted) can take"
        )
    if activations is None:
        notes.append("activations not counted (give --layers, --d-model, --seq-len, --micro-batch)")
    return MemoryEstimate(
        params=params,
        dp=dp,
        tp=tp,
        pp=pp,
        ep=ep,
        zero_stage=zero_stage,
        bytes_per_param={
            "weights": weight_bytes,
            "gradients": grad_bytes,
            "optimizer": k,
            "total": weight_bytes + grad_bytes + k,
        },
        weights_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=opt,
        activations_bytes=activations,
        activations_formula=formula,
        total_bytes=total,
        gpu=gpu.key if gpu else None,
        gpu_memory_bytes=capacity,
        fits=fits,
        notes=notes,
        verdict=verdict,
        margin_bytes=margin,
        reserved_bytes=CUDA_CONTEXT_BYTES if gpu is not None else None,
        activations_counted=activations is not None,
    )
