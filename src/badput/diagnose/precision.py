"""The precision rule: matrix math in FP32 on a GPU whose tensor cores run it faster.

The precision of each GEMM/convolution kernel comes from `badput.analysis.precision`: the
launching op's `Input type` where the trace records it, the kernel name only where it does not.
The fix depends on what the trace runs: training (backward or optimizer ops) keeps FP32 weights
and gets TF32 or autocast; inference can hold its weights in bf16/fp16.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.analysis.critical_path import GraphChange
from badput.analysis.precision import FROM_TYPES, MatmulPrecisions, matmul_precisions
from badput.analysis.tree import LaunchTree, launch_tree
from badput.analysis.workload import BACKWARD_OP, OPTIMIZER_OP
from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import register as _register
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import Evidence, Finding, Rule
from badput.trace.model import EventKind, Trace, name_head

__all__ = ["low_precision_math"]

# Speed-up assumed for moving FP32 GEMM/convolution time to tensor cores: the peak ratio is
# 8x (V100 fp16 vs fp32) to 15x (H100 bf16 vs fp32), but real kernels are partly memory-bound;
# NVIDIA reports 1.5x to 3x end to end for mixed precision. 2x is the conservative middle.
_TENSOR_CORE_SPEEDUP = 2.0

# Matrix-vector products are memory-bound: tensor cores (TF32 or bf16) would not speed them up.
_GEMV = re.compile(r"gemv", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class _TraceFacts:
    """What the rule derives once per trace (shared by its GPUs)."""

    tree: LaunchTree
    precisions: MatmulPrecisions
    backward_name: npt.NDArray[np.bool_]
    optimizer_name: npt.NDArray[np.bool_]


# Keyed by the Trace object and dropped with it: the precisions are computed once per trace,
# over the analysis' launch tree (`Timeline.tree`).
_FACTS: weakref.WeakKeyDictionary[Trace, _TraceFacts] = weakref.WeakKeyDictionary()


def _facts(trace: Trace, tree: LaunchTree | None) -> _TraceFacts:
    found = _FACTS.get(trace)
    if found is None:
        if tree is None:  # analysed with model=False: build it here, once per trace
            tree = launch_tree(trace)
        found = _TraceFacts(
            tree,
            matmul_precisions(trace, tree),
            trace.name_mask(lambda n: BACKWARD_OP.search(n) is not None),
            trace.name_mask(lambda n: OPTIMIZER_OP.search(n) is not None),
        )
        _FACTS[trace] = found
    return found


def _workload(ctx: DeviceContext, facts: _TraceFacts) -> tuple[str, str]:
    """("training" | "inference" | "unknown", the evidence in words) of this GPU's window."""
    t = ctx.trace
    host = ctx.rows(EventKind.CPU_OP, EventKind.ANNOTATION)
    if host.shape[0] == 0:
        return "unknown", "the window holds no host ops"
    names = t.name_id[host]
    is_backward, is_optimizer = facts.backward_name[names], facts.optimizer_name[names]
    backward, optimizer = int(is_backward.sum()), int(is_optimizer.sum())
    tree = facts.tree
    ts = t.ts_ns[tree.row]
    w0 = ctx.analysis.window_start_ns
    mine = (t.device[tree.row] == ctx.analysis.device) & (ts >= w0)
    mine &= ts < w0 + ctx.analysis.window_ns
    backward_kernels = int((tree.backward & mine).sum())
    if backward or optimizer or backward_kernels:
        parts = []
        if backward:
            example = t.name_of(int(host[int(np.argmax(is_backward))]))  # the first
            parts.append(f"{backward} backward ops (e.g. {name_head(example)[:60]})")
        if backward_kernels:
            parts.append(f"{backward_kernels} kernels launched by backward ops")
        if optimizer:
            example = t.name_of(int(host[int(np.argmax(is_optimizer))]))
            parts.append(f"{optimizer} optimizer ops (e.g. {name_head(example)[:60]})")
        return "training", "; ".join(parts)
    return "inference", f"{host.shape[0]} host ops, none of them backward or optimizer ops"


def _fixes(mode: str, has_tf32: bool, has_bf16: bool) -> list[str]:
    """The fix for FP32 matmuls, by workload and by what the GPU's tensor cores run."""
    tf32 = (
        "Allow TF32 for matmuls (one line, no model change): "
        "torch.set_float32_matmul_precision('high'); convolutions: "
        "torch.backends.cudnn.allow_tf32 = True."
    )
    if mode == "inference":
        if has_bf16:
            fix = [
                "Run inference in bf16: model.to(torch.bfloat16), or wrap it in "
                "torch.autocast('cuda', dtype=torch.bfloat16); no GradScaler is needed.",
            ]
            if has_tf32:
                fix.append("Or, to keep FP32 weights: " + tf32)
            return fix
        return [
            "Run inference in fp16: model.half(), or wrap it in "
            "torch.autocast('cuda', dtype=torch.float16) (this GPU has no bf16 or TF32 tensor "
            "cores); no GradScaler is needed.",
            "Use channels_last memory format for convolutions so cuDNN picks tensor-core kernels.",
        ]
    if has_tf32:
        return [
            tf32,
            "Or train in bf16 mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16).",
        ]
    if has_bf16:
        return [
            "Train in bf16 mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16) "
            "(this GPU has no TF32 tensor cores).",
        ]
    return [
        "Train in fp16 mixed precision: torch.autocast('cuda', dtype=torch.float16) with "
        "torch.amp.GradScaler (this GPU has no bf16 or TF32 tensor cores).",
        "Use channels_last memory format for convolutions so cuDNN picks tensor-core kernels.",
    ]


def _top(keys: npt.NDArray[np.int64], weights: npt.NDArray[np.int64], n: int) -> list[int]:
    """The `n` keys with the largest summed weights, largest first (ties: smaller key)."""
    ids, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=weights.astype(np.float64))
    order = np.lexsort((ids, -sums))[:n]
    return [int(ids[i]) for i in order.tolist()]


@_register(
    Rule(
        id="low-precision-math",
        title="Matrix math in FP32 on a GPU with tensor cores",
        explanation=(
            "GEMM and convolution kernels run in full FP32 on CUDA cores, although the GPU's "
            "tensor cores run the same math several times faster in TF32 (Ampere and later, "
            "one line of code) or in bf16/fp16 (autocast for training, bf16/fp16 weights for "
            "inference). The precision comes from the launching op's Input type where the "
            "trace records it (record_shapes=True): a float op whose kernel name says TF32 "
            "already runs on tensor cores. Only without types does the kernel name decide "
            "(sgemm, scudnn, f32f32_f32f32, Tensile S, templates on float), reading each "
            "library's naming so that an FP32 accumulator (bmm_E4m3_E4m3E4m3_Fp32, s16816gemm, "
            "HHS) is not taken for FP32 inputs. The GPU's peaks come from the hardware table."
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
    facts = _facts(t, ctx.timeline.tree)
    pre = facts.precisions
    kernels = ctx.rows(EventKind.KERNEL, on_device=True)
    decision = pre.decisions_of(kernels)
    is_fp32 = np.array([d.precision == "fp32" for d in pre.decisions], dtype=np.bool_)
    keep = decision >= 0
    keep[keep] = is_fp32[decision[keep]]
    keep &= ~t.name_mask(lambda n: _GEMV.search(n) is not None)[t.name_id[kernels]]
    rows, decision = kernels[keep], decision[keep]
    if rows.shape[0] == 0:
        return None
    time = ctx.spans(rows).total_ns()
    speedup = min(_TENSOR_CORE_SPEEDUP, best / fp32)
    savings = ctx.per_step(time * (1 - 1 / speedup))
    mode, mode_evidence = _workload(ctx, facts)
    fix = _fixes(mode, fast["tf32"] is not None, fast["bf16"] is not None)

    dur = t.dur_ns[rows]
    typed = np.array([d.source == FROM_TYPES for d in pre.decisions], dtype=np.bool_)[decision]
    by_types, by_name = int(dur[typed].sum()), int(dur[~typed].sum())
    decided = []
    if by_types:
        decided.append(f"Input type: {by_types / 1e6:,.3f} ms in {int(typed.sum())} kernels")
    if by_name:
        decided.append(
            f"kernel name (no usable Input type): {by_name / 1e6:,.3f} ms in "
            f"{int((~typed).sum())} kernels"
        )
    top_kernels = [t.names[k] for k in _top(t.name_id[rows].astype(np.int64), dur, 3)]
    compute = ctx.timeline.compute.total_ns()
    evidence = {
        "fp32_matmul_time_per_step": ms(ctx.per_step(time)),
        "share_of_compute": Evidence(round(100 * time / compute, 1) if compute else 0.0, "%"),
        "fp32_peak": Evidence(fp32, "TFLOP/s"),
        "tensor_core_peak": Evidence(best, "TFLOP/s"),
        "assumed_speedup": Evidence(speedup, "x"),
        "decided_by": Evidence("; ".join(decided)),
        "top_kernels": Evidence("; ".join(name_head(n)[:80] for n in top_kernels)),
        "workload": Evidence(f"{mode}: {mode_evidence}"),
    }
    # The same evidence text (an op and its types) serves many kernel names: rank the texts.
    index = {text: i for i, text in enumerate(dict.fromkeys(d.evidence for d in pre.decisions))}
    texts = list(index)
    text_of = np.array([index[d.evidence] for d in pre.decisions], dtype=np.int64)
    for key, mask in (("ops", typed), ("name_evidence", ~typed)):
        at = np.flatnonzero(mask)
        if at.shape[0]:
            top = _top(text_of[decision[at]], dur[at], 3)
            evidence[key] = Evidence("; ".join(texts[i] for i in top))
    return ctx.finding(
        "low-precision-math",
        f"{time / ctx.n_steps / 1e6:,.1f} ms {ctx.per_step_text} of GEMM/convolution in FP32 "
        f"on a {spec.key} with tensor cores",
        savings,
        evidence,
        fix,
        change=GraphChange(gpu_rows=rows.astype(np.int64), gpu_scale=1 / speedup),
    )
