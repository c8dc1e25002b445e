"""Name tables: which kernels are communication, kernel categories, data-loading spans.

Every pattern that classifies an event by its name lives here, so a new library's kernels
need one line in one table. Each function matches only the name's `name_head` (its first
`badput.trace._limits.NAME_MATCH_CHARS` characters), so that a huge name stays cheap.
"""

from __future__ import annotations

import re

from badput.trace.model import name_head

__all__ = [
    "KERNEL_CATEGORIES",
    "is_communication_kernel",
    "is_dataloader_span",
    "kernel_category",
    "profiler_step_number",
]

# Collective and point-to-point communication kernels, matched anywhere in the name,
# case-insensitively. Sources: NCCL kernel names (`ncclKernel_*` before NCCL 2.19,
# `ncclDevKernel_*` after), RCCL (same prefixes on ROCm), DeepEP's dispatch/combine kernels
# (namespace `deep_ep`), NVSHMEM device collectives (`nvshmem*`), PyTorch symmetric-memory
# all-reduce kernels, vLLM's custom all-reduce (`cross_device_reduce`), and MSCCL++.
_COMMUNICATION = re.compile(
    r"""
    nccl(dev)?kernel | \bnccl | rccl | msccl
    | deep_?ep.*(dispatch|combine|notify) | (dispatch|combine).*deep_?ep
    | nvshmem
    | (one|two)_shot_all_reduce | multimem_all_reduce | multimem_all_gather
    | cross_device_reduce | custom_?all_?reduce
    | all_?to_?all_kernel
    """,
    re.IGNORECASE | re.VERBOSE,
)

#: Kernel categories, in the order they are tried; the first pattern that matches wins.
KERNEL_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("communication", _COMMUNICATION),
    (
        "attention",
        re.compile(r"flash|fmha|attention|attn|sdpa|mha_|paged_?attention", re.IGNORECASE),
    ),
    (
        # cuBLAS's split-K reduction finishes a GEMM; it is not a model reduction.
        "gemm",
        re.compile(r"splitKreduce|splitk_?reduce", re.IGNORECASE),
    ),
    (
        # Normalizations before gemm: cuDNN's batch-norm kernels carry "cudnn" in their names.
        "reduction",
        re.compile(
            r"reduce|softmax|norm|\bbn_|bn_fw|bn_bw|batch_?norm|\bsum\b|argmax|argmin|topk"
            r"|scan|cumsum",
            re.IGNORECASE,
        ),
    ),
    (
        # Layout transforms and embedding lookups: memory-bound data movement, even when the
        # library name (cudnn, fbgemm) would suggest a matrix product.
        "elementwise",
        re.compile(
            r"nchwToNhwc|nhwcToNchw|transpose|permute|embedding|bounds_check", re.IGNORECASE
        ),
    ),
    (
        # Matrix products, including convolutions lowered to GEMM by cuDNN (implicit GEMM,
        # dgrad/wgrad engines, winograd) and Hopper cuBLAS kernels (nvjet, sm90_xmma).
        "gemm",
        re.compile(
            r"(?<!fb)gemm|gemv|matmul|cublas|cutlass|xmma|nvjet|wgmma|mma_|_mma|conv|dgrad|wgrad"
            r"|winograd|cudnn|triton_.*mm|scaled_mm|bmm",
            re.IGNORECASE,
        ),
    ),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|unrolled|pointwise|copy|fill|cat_|index|gather|scatter"
            r"|triton_poi|functor|activation|gelu|relu|silu|dropout|add|mul|where|clamp",
            re.IGNORECASE,
        ),
    ),
)


def kernel_category(name: str) -> str:
    """Category of a kernel by name (see `KERNEL_CATEGORIES`), or `other`."""
    head = name_head(name)
    for category, pattern in KERNEL_CATEGORIES:
        if pattern.search(head):
            return category
    return "other"


def is_communication_kernel(name: str) -> bool:
    """Whether a kernel moves data between GPUs (collectives, all-to-all, send/recv)."""
    return _COMMUNICATION.search(name_head(name)) is not None


def is_dataloader_span(name: str) -> bool:
    """Whether a host span is a DataLoader (or DataPipe) fetch, as PyTorch's profiler names it."""
    name = name_head(name)
    return (
        name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")
    ) or name.startswith("enumerate(DataPipe)#")


# At most 18 digits: a step number fits an int64, and int() never meets its 4300-digit limit.
_STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")


def profiler_step_number(name: str) -> int | None:
    """N of a `ProfilerStep#N` annotation, else None."""
    match = _STEP.match(name_head(name))
    return int(match.group(1)) if match else None
