"""Model FLOPs of training and inference, and MFU with its denominator always attached."""

from __future__ import annotations

from dataclasses import dataclass

from badput.errors import UsageError
from badput.estimate.hardware import GpuSpec

__all__ = [
    "FLOPS_PER_PARAM_TOKEN",
    "Mfu",
    "TrainingFlops",
    "explain_flops",
    "mfu",
    "require_peak",
    "training_flops",
]

#: FLOPs per parameter per token under common conventions (Kaplan et al. 2020, "Scaling Laws
#: for Neural Language Models", sec. 2.1: forward 2N, training 6N = forward + 2x backward;
#: full activation recomputation adds one more forward, 8N).
FLOPS_PER_PARAM_TOKEN = {
    2.0: "forward pass only (inference): 2·N·D",
    6.0: "training, forward + backward: 6·N·D",
    8.0: "training with full activation recomputation (hardware FLOPs): 8·N·D",
}


def require_peak(gpu: GpuSpec, precision: str) -> float:
    """The GPU's dense peak TFLOP/s for `precision`.

    Raises:
        UsageError: the table has no such peak for this GPU (bf16 on a V100, say).
    """
    peak = gpu.peak(precision)
    if peak is None:
        have = ", ".join(sorted(gpu.peak_tflops))
        raise UsageError(f"{gpu.name} has no {precision} peak in the table (it has: {have})")
    return peak


@dataclass(frozen=True)
class TrainingFlops:
    """Training FLOPs split into the dense 6·N·D term and the attention term."""

    dense_flops: float
    attention_flops: float
    formula: str

    @property
    def total(self) -> float:
        """All model FLOPs."""
        return self.dense_flops + self.attention_flops


def training_flops(
    active_params: float,
    tokens: float,
    layers: int | None = None,
    seq_len: int | None = None,
    d_model: int | None = None,
) -> TrainingFlops:
    """Model FLOPs of training: 6·N·D, plus attention when its shape is given.

    The attention term is PaLM's (Chowdhery et al. 2022, appendix B): 12·L·H·Q·T FLOPs per
    token, with H·Q = d_model, T the sequence length; the causal mask is not discounted.

    Args:
        active_params: parameters used per token (N; for a mixture of experts, the active ones).
        tokens: training tokens (D).
        layers: transformer layers (L), for the attention term.
        seq_len: sequence length (T), for the attention term.
        d_model: model width (H·Q), for the attention term.
    """
    dense = 6.0 * active_params * tokens
    shape = (layers, seq_len, d_model)
    if all(v is None for v in shape):
        return TrainingFlops(dense, 0.0, "6·N·D")
    if any(v is None for v in shape):
        raise UsageError("the attention term needs --layers, --seq-len and --d-model together")
    assert layers is not None and seq_len is not None and d_model is not None
    attention = 12.0 * layers * d_model * seq_len * tokens
    return TrainingFlops(dense, attention, "6·N·D + 12·L·d_model·T·D (PaLM, appendix B)")


def explain_flops(flops: float, params: float, tokens: float) -> dict[str, object]:
    """What a FLOPs figure implies for N params and D tokens.

    Returns FLOPs per parameter-token, the convention it matches (if any), and the N or D it
    would take at 6·N·D.
    """
    k = flops / (params * tokens)
    nearest = min(FLOPS_PER_PARAM_TOKEN, key=lambda c: abs(c - k))
    matches = abs(nearest - k) <= 0.05 * nearest
    return {
        "flops": flops,
        "flops_per_param_token": k,
        "matches": FLOPS_PER_PARAM_TOKEN[nearest] if matches else None,
        "params_at_6nd": flops / (6.0 * tokens),
        "tokens_at_6nd": flops / (6.0 * params),
    }


@dataclass(frozen=True)
class Mfu:
    """Model FLOPs utilization with its denominator."""

    mfu: float
    model_flops: float
    seconds: float
    gpus: float
    precision: str
    gpu: str
    peak_tflops_per_gpu: float
    hfu: float | None = None

    @property
    def denominator_flops(self) -> float:
        """Dense peak FLOP/s of all GPUs times the time."""
        return self.peak_tflops_per_gpu * 1e12 * self.gpus * self.seconds


def mfu(
    model_flops: float,
    seconds: float,
    gpu: GpuSpec,
    precision: str,
    gpus: float = 1,
    hardware_flops: float | None = None,
) -> Mfu:
    """Model FLOPs utilization against the DENSE peak of the precision actually used.

    Args:
        model_flops: useful FLOPs of the model (no recomputation).
        seconds: wall time (or GPU-seconds / gpus).
        gpu: the hardware.
        precision: the precision of the matrix math (bf16, fp8, ...).
        gpus: number of GPUs.
        hardware_flops: FLOPs executed including recomputation, for HFU.

    Raises:
        UsageError: the GPU has no such precision in the table, or a non-positive input.
    """
    peak = require_peak(gpu, precision)
    if seconds <= 0 or gpus <= 0 or model_flops <= 0:
        raise UsageError("model FLOPs, time and GPU count must be positive")
    denominator = peak * 1e12 * gpus * seconds
    hfu = hardware_flops / denominator if hardware_flops is not None else None
    return Mfu(model_flops / denominator, model_flops, seconds, gpus, precision, gpu.key, peak, hfu)
