"""The precision rule: matrix math in a precision slower than the GPU offers."""

from __future__ import annotations

import re

import numpy as np

from badput.analysis.patterns import kernel_category
from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import register as _register
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import Evidence, Finding, Rule
from badput.trace.model import EventKind

__all__ = ["is_fp32_matmul", "low_precision_math"]


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
