"""`badput estimate train`: FLOPs, GPU-hours, days, cost and energy of a training run."""

from __future__ import annotations

from dataclasses import dataclass, field

from badput.errors import UsageError
from badput.estimate.flops import explain_flops, require_peak, training_flops
from badput.estimate.hardware import GpuSpec

__all__ = ["TrainEstimate", "estimate_train"]

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class TrainEstimate:
    """Everything `estimate train` prints; None where the inputs do not determine it."""

    params: float
    active_params: float
    tokens: float
    flops: float
    flops_formula: str
    dense_flops: float
    attention_flops: float
    gpu: str
    gpu_name: str
    precision: str
    mfu_denominator_tflops: float
    gpus: int | None
    mfu: float | None
    mfu_source: str
    implied_mfu: float | None
    gpu_hours: float
    days: float | None
    price_per_gpu_hour: float | None
    cost_usd: float | None
    energy_kwh: float
    energy_assumption: str
    target: dict[str, object] | None = None
    notes: list[str] = field(default_factory=list)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"{name} must be positive (got {value:g})")


def estimate_train(
    *,
    params: float,
    tokens: float,
    gpu: GpuSpec,
    precision: str = "bf16",
    active_params: float | None = None,
    gpus: int | None = None,
    mfu: float | None = None,
    mfu_source: str = "given",
    gpu_hours: float | None = None,
    price: float | None = None,
    layers: int | None = None,
    seq_len: int | None = None,
    d_model: int | None = None,
    power_utilization: float = 1.0,
    target_flops: float | None = None,
) -> TrainEstimate:
    """Estimate a training run from its size and either its efficiency or its GPU-hours.

    Give `mfu` (and `gpus` for days) to get GPU-hours; or give `gpu_hours` to get the implied
    MFU. The MFU denominator is always the GPU's dense peak for `precision`.

    Args:
        params: total parameters.
        tokens: training tokens.
        gpu: the hardware.
        precision: precision of the matrix math; picks the peak.
        active_params: parameters used per token (mixture of experts); default `params`.
        gpus: GPUs in the job.
        mfu: model FLOPs utilization to assume, in (0, 1].
        mfu_source: how `mfu` was obtained, shown with it.
        gpu_hours: GPU-hours the run took (for the implied MFU).
        price: dollars per GPU-hour.
        layers: transformer layers, for the attention term.
        seq_len: sequence length, for the attention term.
        d_model: model width, for the attention term.
        power_utilization: average board power as a share of TDP, for energy.
        target_flops: a published FLOPs figure to explain in terms of N and D.

    Raises:
        UsageError: inconsistent or out-of-range inputs.
    """
    active = params if active_params is None else active_params
    for name, value in (
        ("--params", params),
        ("--tokens", tokens),
        ("--active-params", active),
        ("--gpu-hours", gpu_hours),
        ("--price", price),
        ("--target-flops", target_flops),
    ):
        _positive(name, value)
    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be at least 1 (got {gpus})")
    if active > params:
        raise UsageError("--active-params cannot exceed --params")
    if mfu is not None and not 0 < mfu <= 1:
        raise UsageError(f"MFU must be in (0, 1] (got {mfu:g}); 0.4 means 40 %")
    if not 0 < power_utilization <= 1:
        raise UsageError("--power-util must be in (0, 1]")
    if (mfu is None) == (gpu_hours is None):
        raise UsageError("give either --mfu (with --gpus for days) or --gpu-hours")
    peak = require_peak(gpu, precision)

    flops = training_flops(active, tokens, layers, seq_len, d_model)
    peak_flops = peak * 1e12
    implied = None
    notes: list[str] = []
    if gpu_hours is None:
        assert mfu is not None
        hours = flops.total / (peak_flops * mfu) / SECONDS_PER_HOUR
    else:
        hours = gpu_hours
        implied = flops.total / (peak_flops * hours * SECONDS_PER_HOUR)
        if implied > 1:
            notes.append(
                f"implied MFU {implied:.2f} exceeds 1: the GPU-hours are too few for these "
                "FLOPs at this precision (a lower precision, or fewer FLOPs, would be needed)"
            )
    days = hours / gpus / 24 if gpus else None
    energy = hours * gpu.tdp_w / 1000 * power_utilization
    target = explain_flops(target_flops, active, tokens) if target_flops else None
    return TrainEstimate(
        params=params,
        active_params=active,
        tokens=tokens,
        flops=flops.total,
        flops_formula=flops.formula,
        dense_flops=flops.dense_flops,
        attention_flops=flops.attention_flops,
        gpu=gpu.key,
        gpu_name=gpu.name,
        precision=precision,
        mfu_denominator_tflops=peak,
        gpus=gpus,
        mfu=mfu,
        mfu_source=mfu_source if mfu is not None else "",
        implied_mfu=implied,
        gpu_hours=hours,
        days=days,
        price_per_gpu_hour=price,
        cost_usd=hours * price if price is not None else None,
        energy_kwh=energy,
        energy_assumption=(
            f"GPU-hours x TDP {gpu.tdp_w:g} W x power utilization {power_utilization:g} "
            "(GPUs only: no host, network or cooling)"
        ),
        target=target,
        notes=notes,
    )
