"""`badput estimate infer`: prefill and decode token rates per GPU, and the KV cache."""

from __future__ import annotations

from dataclasses import dataclass, field

from badput.errors import UsageError
from badput.estimate.flops import require_peak
from badput.estimate.hardware import GpuSpec
from badput.estimate.memory import CUDA_CONTEXT_BYTES, fit_verdict

__all__ = ["BYTES_PER_VALUE", "InferEstimate", "estimate_infer"]

#: Bytes per stored value of each precision.
BYTES_PER_VALUE = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
}


@dataclass(frozen=True)
class InferEstimate:
    """Roofline token rates; upper bounds at `efficiency` of peak compute and bandwidth."""

    gpu: str
    gpus: int
    precision: str
    batch: int
    context: int
    efficiency: float
    flops_per_token: float
    flops_formula: str
    prefill_tokens_per_s_per_gpu: float
    weights_bytes: float
    weights_read_per_step_bytes: float
    kv_bytes_per_token: float | None
    kv_cache_bytes: float | None
    decode_step_s: float
    decode_bound: str
    decode_tokens_per_s: float
    decode_tokens_per_s_per_gpu: float
    fits: bool
    notes: list[str] = field(default_factory=list)
    verdict: str = ""  # "fits", "tight" or "does not fit" (`badput.estimate.memory.fit_verdict`)
    margin_bytes: float = 0.0  # over all the GPUs: memory - CUDA contexts - weights - KV cache


def estimate_infer(
    *,
    params: float,
    gpu: GpuSpec,
    precision: str = "bf16",
    active_params: float | None = None,
    gpus: int = 1,
    batch: int = 1,
    context: int = 2048,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    heads: int | None = None,
    kv_precision: str = "bf16",
    efficiency: float = 1.0,
) -> InferEstimate:
    """Prefill is compute-bound, decode memory-bandwidth-bound (until the batch is large).

    Prefill: FLOPs per token 2·N_active + 4·L·(a·d_head)·T (forward pass; attention over the
    whole context T, causal mask not discounted, as in PaLM's appendix B), at `efficiency` of
    the dense peak. Decode: each step reads the weights the batch touches (all of a dense
    model; for a mixture of experts at most min(N, N_active·batch)) and the KV cache of every
    sequence, at `efficiency` of the memory bandwidth; a step also needs `batch` tokens of
    FLOPs, and the slower of the two bounds the step. Weights and cache are split over `gpus`
    (tensor parallel; communication not counted).

    Raises:
        UsageError: inputs that are not positive, or a precision the GPU lacks.
    """
    active = params if active_params is None else active_params
    if min(params, active) <= 0 or min(gpus, batch, context) < 1:
        raise UsageError("--params, --gpus, --batch and --context must be positive")
    if active > params:
        raise UsageError("--active-params cannot exceed --params")
    if not 0 < efficiency <= 1:
        raise UsageError("--efficiency must be in (0, 1]")
    peak = require_peak(gpu, precision)
    for name, value in (
        ("--layers", layers),
        ("--kv-heads", kv_heads),
        ("--head-dim", head_dim),
        ("--heads", heads),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1")

    notes: list[str] = []
    flops_per_token = 2.0 * active
    formula = "2·N_active"
    attn_width = (heads or kv_heads or 0) * (head_dim or 0)
    if layers and attn_width:
        flops_per_token += 4.0 * layers * attn_width * context
        formula += " + 4·L·(a·d_head)·T"
    else:
        notes.append("attention FLOPs left out (give --layers, --heads, --head-dim)")
    prefill = peak * 1e12 * efficiency / flops_per_token

    value_bytes = BYTES_PER_VALUE[precision]
    weights = params * value_bytes
    touched = params if active == params else min(params, active * batch)
    weights_read = touched * value_bytes
    kv_token: float | None = None
    kv_total: float | None = None
    if layers and kv_heads and head_dim:
        kv_token = 2.0 * layers * kv_heads * head_dim * BYTES_PER_VALUE[kv_precision]
        kv_total = kv_token * context * batch
    else:
        notes.append("KV cache left out (give --layers, --kv-heads, --head-dim)")
    step_bytes = weights_read + (kv_total or 0.0)
    memory_s = step_bytes / (gpu.memory_bw_gbs * 1e9 * gpus * efficiency)
    compute_s = batch * flops_per_token / (peak * 1e12 * gpus * efficiency)
    step = max(memory_s, compute_s)
    rate = batch / step
    verdict, margin = fit_verdict(weights + (kv_total or 0.0), gpu.memory_bytes, gpus)
    fits = margin >= 0
    if not fits:
        notes.append("weights and KV cache do not fit in the GPUs' memory")
    notes.append(
        f"fit: {CUDA_CONTEXT_BYTES / 1e9:g} GB per GPU reserved for the CUDA context and kernels; "
        "activations and the serving engine's workspaces are not counted"
    )
    return InferEstimate(
        gpu=gpu.key,
        gpus=gpus,
        precision=precision,
        batch=batch,
        context=context,
        efficiency=efficiency,
        flops_per_token=flops_per_token,
        flops_formula=formula,
        prefill_tokens_per_s_per_gpu=prefill,
        weights_bytes=weights,
        weights_read_per_step_bytes=weights_read,
        kv_bytes_per_token=kv_token,
        kv_cache_bytes=kv_total,
        decode_step_s=step,
        decode_bound="memory bandwidth" if memory_s >= compute_s else "compute",
        decode_tokens_per_s=rate,
        decode_tokens_per_s_per_gpu=rate / gpus,
        fits=fits,
        notes=notes,
        verdict=verdict,
        margin_bytes=margin,
    )
