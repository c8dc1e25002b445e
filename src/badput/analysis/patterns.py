"""Name tables: kernel classes, communication kinds, host ops that communicate, data loading.

Every pattern that classifies an event by its name lives here, so a new library's kernels
need one line in one table. Each function reads only the name's `name_head` (its first
`badput.trace._limits.NAME_MATCH_CHARS` characters), so that a huge name stays cheap.

A kernel is classified by its *callee* (`kernel_callee`): the function path of its demangled
name without return type, template arguments and parameter list, with generic launchers
(`cutlass::device_kernel<K>`, `ck_tile::kentry<.., K>`, ...) unwrapped to the kernel they run.
Template arguments name the element types and tile shapes, and they mention whichever library
the types come from (`cutlass::bfloat16_t` in a MoE finalize kernel), so they never decide a
category; the few families whose library shows only in the parameter types say so in their
table entry. The name is the last decider: evidence the trace carries (the launching op, NCCL
metadata, the stream) comes first, elsewhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from badput.trace.model import name_head

__all__ = [
    "CATEGORIES",
    "COMM_KINDS",
    "COMM_OP_FAMILIES",
    "NameClass",
    "classify_name",
    "comm_kind_from_letters",
    "comm_op",
    "is_communication_kernel",
    "is_dataloader_span",
    "kernel_callee",
    "kernel_category",
    "name_table",
    "profiler_step_number",
]

#: Kernel categories in report order.
CATEGORIES = (
    "communication",
    "attention",
    "gemm",
    "gemm-helper",
    "reduction",
    "elementwise",
    "other",
)
#: Communication kinds, in report order (`badput.analysis.comm.COLLECTIVE_TYPES` re-exports it).
COMM_KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "send_recv",
    "broadcast",
    "reduce",
    "other",
)


@dataclass(frozen=True)
class NameClass:
    """What a kernel's name says about it.

    Attributes:
        category: one of `CATEGORIES`.
        kind: one of `COMM_KINDS` when `category` is "communication", else None.
        family: short label of the table entry that matched ("NCCL", "DeepEP", "cuBLAS GEMM",
            "MoE finalize", ...); "" when nothing matched (then the category is "other").
    """

    category: str
    kind: str | None
    family: str


# ---------------------------------------------------------------------------------------------
# Communication kinds from letters
# ---------------------------------------------------------------------------------------------

# Matched in order against the text's letters only, lower-cased ("_reduce_scatter_base" ->
# "reducescatterbase", "ncclDevKernel_AllGather_RING_LL" -> "nccldevkernelallgatherringll").
# Names: NCCL/RCCL kernels (`ncclKernel_<Coll>_*`, `ncclDevKernel_<Coll>_*`; NCCL runs
# all-to-all as grouped SendRecv kernels), c10d's "Collective name" values (`allreduce`,
# `_allgather_base`, `reduce_scatter_tensor_coalesced`, `alltoall_base`, `send`, `recv`,
# `_broadcast_oop`, `_reduce_oop`, ...), vLLM's custom all-reduce (`cross_device_reduce`) and
# NVSHMEM's `fcollect` (its all-gather, NVSHMEM API "nvshmem_fcollect"). A barrier, gather,
# scatter or unknown name is "other".
_TYPE_BY_LETTERS = (
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("fcollect", "all_gather"),
    ("alltoall", "all_to_all"),
    ("allreduce", "all_reduce"),
    ("crossdevicereduce", "all_reduce"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
)
# Digit spellings of all-to-all, which the letters-only form would lose: TensorRT-LLM's
# `moeA2ADispatchKernel`, PyTorch's `_make_a2a_exchange_plan`, vLLM's `All2AllManager`.
_A2A = re.compile(r"a2a|all2all", re.IGNORECASE)
_NOT_LETTERS = re.compile(r"[^a-z]")


def comm_kind_from_letters(text: str) -> str:
    """The communication kind (one of `COMM_KINDS`) a kernel or collective name spells.

    Only letters count, lower-cased, so `AllReduce`, `all_reduce` and `allreduce` agree.

    Args:
        text: a kernel callee (`ncclDevKernel_AllGather_RING_LL`) or a c10d "Collective name"
            (`_reduce_scatter_base`).

    Returns:
        The kind; "other" when the name spells none.

    Example:
        >>> comm_kind_from_letters("_allgather_base")
        'all_gather'
    """
    text = _A2A.sub("alltoall", name_head(text))
    letters = _NOT_LETTERS.sub("", text.lower())
    for key, kind in _TYPE_BY_LETTERS:
        if key in letters:
            return kind
    return "other"


# ---------------------------------------------------------------------------------------------
# The callee of a demangled kernel name
# ---------------------------------------------------------------------------------------------

_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {">", ")", "]", "}"}
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.")

# Launchers that run the kernel named by a template argument. CUTLASS 2.x `cutlass::Kernel`
# and `Kernel2` and CUTLASS 3.x `cutlass::device_kernel` (cutlass/device_kernel.h), also under
# the namespaces libraries give their copy of CUTLASS (`cutlass__5x_cudnn::Kernel` in cuDNN,
# seen in the TraceLens H100 traces); FlashAttention-3's and vLLM's `enable_sm90_or_later`,
# `enable_sm80_to_sm89` and `enable_sm90_only` wrappers (hopper/utils.h,
# csrc/cutlass_extensions); Composable Kernel's `ck_tile::kentry<block, occupancy, Kernel>`,
# whose leading arguments are numbers (ck_tile/host/kernel_launch.hpp).
_LAUNCHER = re.compile(
    r"(?:.*::)?(?:cutlass\w*::(?:Kernel2?|device_kernel)|enable_sm\d+\w*|ck_tile::kentry)"
)
_NUMBER = re.compile(r"\(?\s*(?:\(\w+\)\s*)?-?\d[\w.]*\)?|true|false")
_ENABLE_IF_TYPE = "::type "


def kernel_callee(name: str) -> str:
    """The kernel's function path, without return type, template arguments and parameters.

    Generic launchers (`cutlass::Kernel`, `cutlass::Kernel2`, `cutlass::device_kernel`,
    FlashAttention's `enable_sm90_or_later`, `ck_tile::kentry`) unwrap to the callee of the
    kernel type they launch. Template arguments of enclosing classes are dropped too
    (`Foo<int>::run` -> `Foo::run`). Itanium-mangled names (`_ZN5aiter3fooEv`) give their
    nested source names. One pass over `name_head(name)`, so a 1 MB name costs what a 4 KB one
    does; a name cut short inside its template arguments still gives its callee.

    Args:
        name: a kernel name as the trace has it.

    Returns:
        The callee ("" for an empty name).

    Example:
        >>> kernel_callee("void moe::dev::finalize::finalizeKernelVecLoad<float, 4>(int*)")
        'moe::dev::finalize::finalizeKernelVecLoad'
        >>> kernel_callee("void cutlass::device_kernel<flash::FlashAttnFwdSm90<X> >(P)")
        'flash::FlashAttnFwdSm90'
        >>> kernel_callee("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<8>)")
        'ncclDevKernel_AllReduce_Sum_f32_RING_LL'
    """
    return _callee(name_head(name))


@functools.lru_cache(maxsize=8192)
def _callee(head: str) -> str:
    text = head.strip()
    if text.startswith("_Z"):
        return _demangled_path(text) or text
    callee, args = _scan_callee(text, 0)
    if callee.startswith("std::enable_if"):
        # A return type that a profiler printed with its template arguments simplified
        # (nsys: "std::enable_if<T2>(int)0&&...::exists, void>::type vllm::kernel<...>(...)"):
        # the callee follows the first "::type ".
        at = text.find(_ENABLE_IF_TYPE)
        if at >= 0:
            callee, args = _scan_callee(text, at + len(_ENABLE_IF_TYPE))
    for _ in range(4):  # launchers nest: device_kernel<enable_sm90_or_later<Kernel>>
        if args is None or not _LAUNCHER.fullmatch(callee):
            break
        inner = _launched_argument(text, args, skip_numbers=callee.endswith("kentry"))
        if inner is None:
            break
        inner_callee, inner_args = _scan_callee(text[: inner[1]], inner[0])
        if not inner_callee:
            break
        callee, args = inner_callee, inner_args
    return callee


def _match_forward(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at `start`, or len(text) if none does.

    Angle brackets count only outside parentheses (a `(N > 0)` argument holds a comparison),
    and `->` is no bracket.
    """
    n = len(text)
    stack = [_OPEN[text[start]]]
    i = start + 1
    while i < n:
        c = text[i]
        top = stack[-1]
        if c == ">" and text[i - 1] == "-":
            pass
        elif c == top:
            stack.pop()
            if not stack:
                return i + 1
        elif c in "([{" or (c == "<" and top != ")"):
            stack.append(_OPEN[c])
        elif c in _CLOSE and c != ">":
            # A stray closer: the name is malformed here; close the groups it closes.
            while stack and stack[-1] != c:
                stack.pop()
            if stack:
                stack.pop()
            if not stack:
                return i + 1
        i += 1
    return n


def _scan_callee(text: str, start: int) -> tuple[str, tuple[int, int] | None]:
    """Callee starting at `start`, and the span of its last template argument list, if any.

    Reads left to right: a space at depth 0 ends a return type, `<...>` is skipped (its span
    kept when it follows the last path component), `(anonymous namespace)`, `{lambda()#1}` and
    `operator()` are parts of the path, and any other `(` starts the parameter list.
    """
    n = len(text)
    parts: list[str] = []
    args: tuple[int, int] | None = None
    i = seg = start
    while i < n:
        c = text[i]
        if c == "<":
            parts.append(text[seg:i])
            end = _match_forward(text, i)
            args = (i + 1, end - 1 if end <= n and text[end - 1] == ">" else end)
            i = seg = end
            if text.startswith("::", i):
                args = None  # template arguments of an enclosing class
                continue
            if i + 1 < n and text[i] == " " and text[i + 1] not in "(,)":
                parts, args = [], None  # it was the return type
                i = seg = i + 1
                continue
            break
        if c == "(" or c == "{" or c == "[":
            if (
                c == "("
                and i != seg
                and text[i - 1] != ":"
                and not text.endswith("operator", seg, i)
            ):
                break  # the parameter list
            i = _match_forward(text, i)
            continue
        if c == " ":
            parts, args = [], None  # a return type ("void", "unsigned int")
            i = seg = i + 1
            continue
        if c not in _IDENT and c != ":" and c != "~" and not text.endswith("operator", seg, i):
            break
        i += 1
    parts.append(text[seg:i])
    return "".join(parts).strip(), args


def _launched_argument(
    text: str, args: tuple[int, int], *, skip_numbers: bool
) -> tuple[int, int] | None:
    """Span of the first (with `skip_numbers`: the first non-numeric) template argument."""
    i, end = args
    while i < end:
        j = i
        while j < end and text[j] != ",":
            if text[j] in "<([{":
                j = min(_match_forward(text, j), end)
            else:
                j += 1
        while i < j and text[i] == " ":
            i += 1
        if not (skip_numbers and _NUMBER.fullmatch(text, i, j)):
            return (i, j) if i < j else None
        i = j + 1
    return None


def _demangled_path(text: str) -> str:
    """Source names of an Itanium-mangled function: `_ZN5aiter3fooEv` -> `aiter::foo`.

    Only `<length><identifier>` names and the `N...E` nesting are read; anything else ends the
    path. Enough to see the library and function of kernels some ROCm profilers leave mangled.
    """
    i = 2
    if text.startswith("N", i):
        i += 1
    names: list[str] = []
    n = len(text)
    while i < n and text[i].isdigit():
        j = i
        while j < n and text[j].isdigit() and j - i < 6:
            j += 1
        length = int(text[i:j])
        if length == 0 or j + length > n:
            break
        names.append(text[j : j + length])
        i = j + length
        if i < n and text[i] == "I":  # template arguments: the path ends at them
            break
    return "::".join(names)


# ---------------------------------------------------------------------------------------------
# The kernel name table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    category: str
    family: str
    pattern: re.Pattern[str]
    # Where the pattern looks: the callee, its last path component, or (where the type string
    # is the only carrier of the family) the whole name head.
    target: str = "callee"
    # A second pattern that must also match the callee.
    also: re.Pattern[str] | None = None
    # The communication kind: fixed, or "letters" (from the last path component's letters),
    # or "ep" (dispatch/combine/notify are all-to-all, else letters).
    kind: str | None = None


def _re(pattern: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# A collective spelled as a word of a kernel or op name: `all_reduce`, `AllReduce`,
# `allgather6`, `reduce_scatter`, `allToAllV`, `moeAllToAllKernel`, never inside another word
# (`small_gather`). Case-sensitive so that camelCase boundaries count.
_COLLECTIVE_WORD = re.compile(
    r"(?:(?<![A-Za-z])all|(?<![A-Z])All|ALL)_?(?:reduce|Reduce|REDUCE|gather|Gather|GATHER"
    r"|to_?all|To_?All|TO_?ALL|2all)"
    r"|(?:(?<![A-Za-z])reduce|(?<![A-Z])Reduce|REDUCE)_?(?:scatter|Scatter|SCATTER)"
)
# EP all-to-all stages of DeepEP and its forks.
_EP_ALL_TO_ALL = re.compile(r"dispatch|combine|notify", re.IGNORECASE)

_RULES: tuple[_Rule, ...] = (
    # --- communication ----------------------------------------------------------------------
    # NCCL kernels: `ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<type>` before NCCL 2.19,
    # `ncclDevKernel_<Coll>_*` / `ncclDevKernel_Generic` after (src/device/generate.py); RCCL
    # keeps the same names on ROCm (ROCm/roctracer#101 shows `ncclDevKernel_Generic` on
    # MI300X), and Meta's ctran names its kernels `ncclKernel<Coll>`. A kernel may run other
    # collectives than its name says (NVIDIA/nccl#739): metadata decides when present.
    _Rule("communication", "NCCL", _re(r"^nccl\w*Kernel"), "last", kind="letters"),
    # MSCCL kernels in RCCL (`mscclKernel_*`, src/device/msccl_kernel_impl.h).
    _Rule("communication", "MSCCL", _re(r"^msccl(?!pp)"), "last", kind="letters"),
    # MSCCL++ kernels are free functions (`allgather6`, `allreduce7`) whose parameters are
    # `mscclpp::DeviceHandle<...>`: the type string is the only carrier of the family.
    _Rule("communication", "MSCCL++", _re(r"mscclpp::"), "head", kind="letters"),
    # DeepEP (deepseek-ai/DeepEP csrc/kernels: `deep_ep::intranode::{notify_dispatch,
    # cached_notify_dispatch, dispatch, cached_notify_combine, combine}`, `deep_ep::internode::
    # {notify_dispatch, dispatch, cached_notify, combine}`, `deep_ep::internode_ll::{dispatch,
    # combine, clean_low_latency_buffer}`; v2 `deep_ep::ep::dispatch_impl`, `hybrid_dispatch_impl`,
    # `dispatch_copy_epilogue_impl`, `deep_ep::pp::pp_send_impl`, `deep_ep::bucket::
    # hybrid_all_reduce`, ...) and its ports (`primus_turbo::deep_ep::intranode::*` on ROCm).
    # `deep_ep::layout::get_dispatch_layout` counts tokens locally: not communication.
    _Rule("other", "DeepEP layout", _re(r"(?:^|::)\w*deep_?ep::layout::"), "callee"),
    _Rule("communication", "DeepEP", _re(r"(?:^|::)\w*deep_?ep::"), "callee", kind="ep"),
    # NCCL's EP library (`nccl_ep::internode_ll::*`) and other forks of DeepEP's layout:
    # `<x>ep::intranode|internode|internode_ll::dispatch|combine|notify*`.
    _Rule("communication", "NCCL EP", _re(r"(?:^|::)nccl_ep::"), "callee", kind="ep"),
    _Rule(
        "communication",
        "EP all-to-all",
        _re(r"ep::(?:intranode|internode(?:_ll)?)::\w{0,40}(?:dispatch|combine|notify)"),
        "callee",
        kind="all_to_all",
    ),
    # MORI-EP on ROCm (ROCm/mori src/ops/dispatch_combine: `mori::moe::EpDispatchIntraNodeKernel`,
    # `EpCombineInterNodeKernel`, ...).
    _Rule(
        "communication",
        "MORI-EP",
        _re(r"(?:^|::)mori::\w{0,40}::Ep(?:Dispatch|Combine)"),
        "callee",
        kind="all_to_all",
    ),
    # TensorRT-LLM's MoE all-to-all (`moe_comm::moeA2ADispatchKernel`, `moeA2ACombineKernel`,
    # `moeA2APrepareDispatchKernel`, `moeAllToAllKernel`; names from its layer-wise benchmark
    # parser, examples/layer_wise_benchmarks/parse.py).
    _Rule(
        "communication",
        "TensorRT-LLM MoE all-to-all",
        re.compile(r"(?:^|::)moe_comm::|moeA2A|moeAllToAll"),
        "callee",
        kind="all_to_all",
    ),
    # NVSHMEM and rocSHMEM device-side collectives and their helper kernels (`nvshmemi_*`,
    # `nvshmemx_*`).
    _Rule("communication", "NVSHMEM", _re(r"^nvshmem"), "last", kind="letters"),
    _Rule("communication", "rocSHMEM", _re(r"^rocshmem"), "last", kind="letters"),
    # vLLM's custom all-reduce (csrc/custom_all_reduce.cuh: `vllm::cross_device_reduce_1stage`,
    # `cross_device_reduce_2stage`).
    _Rule(
        "communication",
        "vLLM custom all-reduce",
        _re(r"cross_device_reduce"),
        "last",
        kind="all_reduce",
    ),
    # Kernels named for the collective they run: PyTorch symmetric memory
    # (`one_shot_all_reduce_kernel`, `two_shot_all_reduce_kernel`, `multimem_all_reduce_kernel`,
    # `multimem_all_gather_kernel`, NVSHMEM `allToAllV`, `allToAllV_2d`), TensorRT-LLM and
    # SGLang (`oneShotAllReduceKernel`, `twoShotAllReduceKernel`,
    # `allreduce_fusion_kernel_oneshot_lamport`, `allreduce_fusion_kernel_twoshot_sync`),
    # FlashInfer's ports of them, DeepEP v2 buckets (`rdma_all_gather`, `hybrid_reduce_scatter`).
    _Rule(
        "communication",
        "custom collective",
        _COLLECTIVE_WORD,
        "last",
        kind="letters",
    ),
    # --- Triton kernels generated by TorchInductor: the prefix says the kind ----------------
    # (torch/_inductor/codegen: triton_poi_ pointwise, triton_red_ reduction, triton_per_
    # persistent reduction, triton_tem_ template: mm/addmm/bmm, or flex attention).
    _Rule("elementwise", "Triton pointwise", _re(r"^triton_poi_"), "last"),
    _Rule("reduction", "Triton reduction", _re(r"^triton_(?:red|per)_"), "last"),
    _Rule("attention", "Triton flex attention", _re(r"^triton_tem_\w*attention"), "last"),
    _Rule("gemm", "Triton GEMM template", _re(r"^triton_tem_\w*mm"), "last"),
    # --- attention --------------------------------------------------------------------------
    # RoPE kernels first: their names mention the attention they feed (`applyMLARope`,
    # FlashInfer `BatchQKApplyRotaryPosIdsCosSinCacheKernel`, vLLM `rotary_embedding_kernel`).
    _Rule(
        "elementwise",
        "RoPE",
        re.compile(r"(?<![a-z])rope|Rope|ROPE|rotary|Rotary"),
        "last",
    ),
    # FlashAttention 2 (`flash_fwd_kernel`, `flash_fwd_splitkv_kernel`, `flash_bwd_*`, in
    # PyTorch `pytorch_flash::`), FlashAttention 3 (`flash::FlashAttnFwdSm90`,
    # `flash::prepare_varlen_num_blocks_kernel`), FlashMLA, PyTorch mem-efficient attention
    # (`fmha_cutlassF_*`, `PyTorchMemEffAttention::AttentionKernel`), TensorRT-LLM and
    # trtllm-gen (`fmha_v2_*`, `fmhaSm100fKernel_*`, `fmhaReductionKernel`,
    # `mmha::masked_multihead_attention_kernel`, XQA `kernel_mha`), cuDNN SDPA
    # (`cudnn_generated_fort_native_sdpa_*`), FlashInfer (`BatchPrefillWithPagedKVCacheKernel`,
    # `BatchDecodeWithPagedKVCacheKernel`, `MergeStates`, `BatchMLAPagedAttention*`), CK
    # (`ck_tile::FmhaFwdKernel`, `UnifiedAttentionKernel`), DeepGEMM's MQA logits
    # (`deep_gemm::sm90_fp8_mqa_logits`, `paged_mqa_logits`), vLLM `paged_attention_v1_kernel`,
    # Triton `kernel_unified_attention_2d`, linear attention (FLA `*gated_delta_rule*`).
    _Rule(
        "attention",
        "flash attention",
        _re(r"flash_?attn|flash_(?:fwd|bwd)|flash_?mla|(?:^|::)(?:pytorch_)?flash::"),
        "callee",
    ),
    _Rule(
        "attention",
        "attention",
        _re(
            r"attention|attn|fmha|sdpa|(?<![a-z])mha|(?<![a-z])mqa|(?<![a-z])mla(?![a-z])"
            r"|(?:prefill|decode)\w{0,40}kv_?cache|merge_?states?|delta_rule"
        ),
        "last",
    ),
    # --- helpers around matrix products that carry GEMM words -------------------------------
    # cuDNN's non-fused Winograd runs its data/filter/output transforms as separate kernels
    # around a batched GEMM (`cudnn::winograd_nonfused::winogradForwardData4x4`, `...Filter4x4`,
    # `...Output4x4`, `cudnn::winograd::generateWinogradTilesKernel`), and its FFT convolution
    # transforms around a complex GEMM (`fft2d_r2c_32x32`, `fft2d_c2r_32x32`, with
    # `ampere_gcgemm_*`): ResNet50 V100 and HTA alexnet traces. MIOpen's GEMM convolution runs
    # `miopenIm2Col` and `transpose_packed_MN2NM` around its GEMM (ROCm/MIOpen#1554 log).
    _Rule(
        "gemm-helper",
        "cuDNN Winograd transform",
        _re(r"winograd_nonfused::|generateWinogradTiles"),
        "callee",
    ),
    _Rule("gemm-helper", "cuDNN FFT transform", _re(r"^fft\dd_(?:r2c|c2r|c2c)"), "last"),
    _Rule("gemm-helper", "im2col", _re(r"im2col|col2im|im2d2col|vol2col|col2vol"), "last"),
    # cuDNN: `cudnn::ops::scalePackedTensor_kernel`, `cask_cudnn::computeOffsetsKernel`,
    # `computeBOffsetsKernel`, `computeWgradBOffsetsKernel`, `computeWgradSplitKOffsetsKernel`
    # (ResNet50 V100 trace): before the convolution rules, since "Wgrad" is in their names.
    _Rule("gemm-helper", "cuDNN helper", _re(r"scalePackedTensor"), "last"),
    _Rule(
        "gemm-helper",
        "cuDNN helper",
        _re(r"^cask_\w*::|^compute\w{0,40}Offsets\w{0,40}Kernel"),
        "callee",
    ),
    # --- matrix products --------------------------------------------------------------------
    # Convolutions cuDNN, MIOpen and CK run as implicit or explicit GEMMs:
    # `implicit_convolve_sgemm`, `explicit_convolve_sgemm`, `cudnn::cnn::wgrad_alg0_engine`,
    # `cudnn::detail::dgrad_engine`,
    # `sm80_xmma_fprop_implicit_gemm_*`, `cutlass_tensorop_*fprop*`, fused Winograd
    # (`volta_scudnn_winograd_*`), `*_scudnn_*`; MIOpen `naive_conv_fwd_*`, `igemm_*`,
    # `gridwise_convolution_*`; CK `kernel_grouped_conv_fwd_*`. Depthwise and causal 1-D
    # convolutions (`conv_depthwise2d_*`, `causal_conv1d_*`) are stencils, not matrix products,
    # and fall through to "other".
    _Rule(
        "gemm",
        "cuDNN convolution",
        _re(r"[sdhc]cudnn|fprop|dgrad|wgrad|winograd|convolve"),
        "last",
    ),
    _Rule(
        "gemm",
        "convolution",
        _re(
            r"naive_conv|grouped_conv|gridwise_conv|conv\w{0,40}xdlops|miopen\w{0,40}conv|(?<![a-z])igemm"
        ),
        "last",
    ),
    # cuBLAS / cuBLASLt: `nvjet_*` (Hopper/Blackwell cuBLASLt), `sm90_xmma_gemm_*_cublas`,
    # `ampere_sgemm_*`, `volta_sgemm_*`, `ampere_bf16_s16816gemm_*`, `gemmSN_*`, `gemmk1_kernel`,
    # `gemvNSP_kernel`, `gemv2T_kernel`, `dot_kernel`, `splitKreduce_kernel` (the split-K sum of a
    # GEMM, part of the product); CUTLASS (`cutlass_80_tensorop_*gemm*`,
    # `cutlass::gemm::kernel::GemmUniversal`); DeepGEMM (`deep_gemm::fp8_gemm_kernel`,
    # `sm100_fp8_gemm_1d1d_impl`); trtllm-gen batched GEMMs (`bmm_E2m1_E2m1E2m1_Fp32_t...`);
    # TensorRT-LLM `fp8_blockscale_gemm`, `fused_a_gemm_kernel`; CuTe DSL
    # `blockscaled_gemm_persistent`, `..._grouped_gemm_*`; rocBLAS/CK (`ck::kernel_gemm_*`,
    # `ck_tile::GroupedGemmKernel`, `FlatmmKernel`); Triton `matmul_kernel`, `_scaled_mm`.
    _Rule(
        "gemm",
        "cuBLAS GEMM",
        _re(r"^nvjet|xmma_gemm|cublas|^(?:sm\d+|ampere|volta|turing|maxwell|hopper)_\w*gemm"),
        "callee",
    ),
    _Rule("gemm", "cuBLAS GEMM", _re(r"splitk_?reduce|^dot_kernel|^gemv|^gemm[kS]"), "last"),
    _Rule("gemm", "DeepGEMM", _re(r"^deep_gemm::\w*gemm"), "callee"),
    # AMD Tensile and hipBLASLt solutions: `Cijk_Ailk_Bljk_...`, `Custom_Cijk_...` (the free
    # indices of C and the summation index of A and B; hta-amd-mi250 trace, ROCm/hipBLASLt#932).
    _Rule("gemm", "Tensile GEMM", re.compile(r"^(?:Custom_)?Cijk_"), "last"),
    # MoE expert GEMMs: Triton `fused_moe_kernel` (vLLM, SGLang), AITER `fmoe_*` asm kernels,
    # `moe_wna16_gemm`: grouped GEMMs over the experts.
    _Rule("gemm", "fused MoE GEMM", _re(r"fused_moe|^fmoe_"), "last"),
    _Rule(
        "gemm",
        "GEMM",
        _re(r"(?<!fb)gemm|gemv|matmul|flatmm|(?<![a-z])bmm|scaled_mm|(?<![a-z])mm_kernel"),
        "last",
    ),
    # --- helpers around matrix products ------------------------------------------------------
    # Layout conversions cuDNN runs around its convolutions (`nchwToNhwcKernel`,
    # `nhwcToNchwKernel`, in `cudnn::ops::` and `cudnn::engines_precompiled::`).
    _Rule(
        "gemm-helper",
        "layout transform",
        _re(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw"),
        "last",
    ),
    # Transposes inside GEMM libraries (MIOpen `transpose_packed_MN2NM`, `transpose_NCHW2CNHW`;
    # cuBLAS/cuBLASLt, cuDNN, CUTLASS, CK, DeepGEMM namespaces) prepare an operand. A transpose
    # elsewhere is data movement for whatever reads it: elementwise, below.
    _Rule(
        "gemm-helper",
        "layout transform",
        _re(r"transpose"),
        "last",
        also=_re(r"^(?:cublas\w*|cudnn\w*|cask\w*|cutlass\w*|ck|ck_tile|deep_gemm|miopen\w*)::"),
    ),
    _Rule("gemm-helper", "layout transform", _re(r"^transpose_(?:packed|NCHW|CNHW|NHWC)"), "last"),
    # cuBLASLt's separate epilogue (`epilogue::impl::globalKernel<...>(..., cublasLtEpilogue_t,
    # ...)`, HTA alexnet trace): bias and activation after the product.
    _Rule("gemm-helper", "cuBLASLt epilogue", _re(r"^epilogue::"), "callee"),
    # MoE: the kernels that route tokens to experts, permute them into the grouped GEMM's layout
    # and back, and combine the expert outputs. TensorRT-LLM / trtllm-gen
    # (`moe::dev::finalize::finalizeKernel`, `finalizeKernelVecLoad`, `moe::dev::routing::*`,
    # `expandInputRowsKernel`, `finalizeMoeRoutingKernel`, `computeStridesTmaWarpSpecializedKernel`,
    # `blockExpertPrefixSumKernel`, `fusedBuildExpertMapsSortFirstTokenKernel`,
    # `routingIndicesClusterKernel`, `cute_dsl::moePermuteKernel`), vLLM/SGLang
    # (`moe_align_block_size_kernel`, `count_and_sort_expert_tokens_kernel`, `moe_permute`,
    # `moe_unpermute`), CK/AITER (`MoeSortingMultiPhaseKernel_P23`, `opus_moe_sorting_entry`).
    _Rule("gemm-helper", "MoE finalize", _re(r"(?:^|::)finalize::|finalizeMoe"), "callee"),
    _Rule(
        "gemm-helper",
        "MoE routing",
        _re(
            r"(?:^|::)moe::dev::(?:routing|permute|convertsf)|expandInputRows|unpermute"
            r"|moe_?align|moe_?permute|moe_?sort|count_and_sort_expert|Expert\w{0,40}PrefixSum"
            r"|ExpertMaps|ExpertCounts|routingIndices|routingMain|computeStridesTmaWarpSpecialized"
        ),
        "callee",
    ),
    # FP8 / FP4 / MX quantization of GEMM operands and their scale factors: TensorRT-LLM
    # `quantize_with_block_size`, SGLang/vLLM `per_token_group_quant_8bit`,
    # `_per_token_quant_and_transform_kernel`, `scaled_fp8_quant_kernel`,
    # `SiluAndMulFp4QuantKernel`, `_silu_and_mul_post_quant_kernel`, dequantization before a
    # GEMM (`awq_dequantize`). After the GEMM rules, so quantized GEMMs stay GEMMs.
    _Rule("gemm-helper", "quantize", _re(r"quant"), "last"),
    # --- reductions -------------------------------------------------------------------------
    # PyTorch (`at::native::reduce_kernel`, `softmax_warp_forward`, `cunn_SoftMaxForward`,
    # `vectorized_layer_norm_kernel`, `batch_norm_collect_statistics_kernel`, `sbtopk::gatherTopK`),
    # cuDNN batch norm (`cudnn::bn_fw_tr_1C11_kernel_NCHW`, `bn_bw_1C11_singleread`), cuBLAS's
    # GEMV reduction (`reduce_1Block_kernel`), CUB (`DeviceReduceByKeyKernel`,
    # `DeviceScanKernel`, `DeviceScanInitKernel`, `DeviceCompactInitKernel`), MIOpen
    # (`MIOpenBatchNormFwdTrainSpatial`), CK (`Rmsnorm2dFwd`), TensorRT-LLM (`RMSNormKernel`,
    # `deepseek_v3_topk_kernel`, `topKPerRowDecode`), vLLM (`rms_norm_kernel`,
    # `fused_add_rms_norm_kernel`, `topkGatingSoftmax`).
    _Rule(
        "reduction",
        "reduction",
        _re(
            r"reduc|softmax|norm(?!al)|(?<![a-z])bn_|batch_?norm|(?<![a-z])sum(?![a-z])|argm[ai][xn]"
            r"|topk|welford|scan|cumsum|DeviceCompactInit"
        ),
        "last",
    ),
    # --- elementwise ------------------------------------------------------------------------
    # PyTorch (`at::native::elementwise_kernel`, `vectorized_elementwise_kernel`,
    # `unrolled_elementwise_kernel`, `elementwise_kernel_with_index`, `index_elementwise_kernel`,
    # `distribution_elementwise_grid_stride_kernel`, `CatArrayBatchedCopy`, `indexSelectLargeIndex`,
    # `indexing_backward_kernel`, `fused_dropout_kernel_vec`, `multi_tensor_apply_kernel` (foreach
    # optimizer steps)), FBGEMM embeddings (`split_embedding_codegen_forward_unweighted_kernel`,
    # `bounds_check_indices_kernel`, `linearize_index_kernel`,
    # `fbgemm_gpu::permute_2D_data_kernel`),
    # activations (`silu_and_mul_kernel`, `act_and_mul_kernel`, `doActivationKernel`,
    # `moe::dev::activation::*`), KV-cache writes (`reshape_and_cache_flash_kernel`,
    # `indexerKCacheScatterUnifiedKernel`), transposes outside GEMM libraries.
    _Rule(
        "elementwise",
        "elementwise",
        _re(
            r"elementwise|vectorized|unrolled|pointwise|copy|fill|(?<![a-z])cat_|index|gather"
            r"|scatter|embedding|bounds_check|functor|activation|gelu|relu|silu|swiglu|dropout"
            r"|multi_tensor_apply|foreach|kv_?cache|reshape_and_cache|transpose|permute|arange"
        ),
        "last",
    ),
)

_UNWRAPPED_LAUNCHER = _re(r"(?:^|::)(?:device_kernel|Kernel2?|kentry)$")
# What a launcher's name head says when its kernel argument could not be read (a name cut
# short): the type string is then the only carrier of the family.
_LAUNCHED_ATTENTION = re.compile(r"Flash|flash|Fmha|fmha|Attention|attention")
_LAUNCHED_GEMM = re.compile(r"Gemm|gemm|GEMM|Conv|conv|Mma|mma")
_NOTHING = NameClass("other", None, "")


def classify_name(name: str) -> NameClass:
    """Category, communication kind and family of a kernel, from its name (see `_RULES`).

    The rules look at the callee (`kernel_callee`), so template arguments never decide, except
    where a table entry says the type string is the only carrier of its family.

    Args:
        name: a kernel name as the trace has it.

    Returns:
        The class; `NameClass("other", None, "")` when no rule matches.

    Example:
        >>> classify_name("void deep_ep::internode::dispatch<8, 4, 512>(int4*, float*)")
        NameClass(category='communication', kind='all_to_all', family='DeepEP')
    """
    return _classify_head(name_head(name))


# Characters of a callee the rules read. Real callees are far shorter (the longest in the
# shared traces, a Tensile solution name, has 375); the bound keeps a hostile 4 KB callee at a
# few milliseconds against the ~25 rules' alternations.
_CALLEE_MATCH_CHARS = 512


@functools.lru_cache(maxsize=8192)
def _classify_head(head: str) -> NameClass:
    callee = _callee(head)[:_CALLEE_MATCH_CHARS]
    last = callee.rsplit("::", 1)[-1]
    for rule in _RULES:
        text = callee if rule.target == "callee" else last if rule.target == "last" else head
        if not rule.pattern.search(text):
            continue
        if rule.also is not None and not rule.also.search(callee):
            continue
        kind = _comm_kind(rule.kind, last) if rule.category == "communication" else None
        return NameClass(rule.category, kind, rule.family)
    if _UNWRAPPED_LAUNCHER.search(callee):
        if _LAUNCHED_ATTENTION.search(head):
            return NameClass("attention", None, "launcher (attention by type)")
        if _LAUNCHED_GEMM.search(head):
            return NameClass("gemm", None, "launcher (GEMM by type)")
    return _NOTHING


def _comm_kind(rule_kind: str | None, last: str) -> str:
    if rule_kind == "ep":
        return "all_to_all" if _EP_ALL_TO_ALL.search(last) else comm_kind_from_letters(last)
    if rule_kind == "letters" or rule_kind is None:
        return comm_kind_from_letters(last)
    return rule_kind


def kernel_category(name: str) -> str:
    """Category of a kernel by name (one of `CATEGORIES`): `classify_name(name).category`."""
    return classify_name(name).category


def is_communication_kernel(name: str) -> bool:
    """Whether a kernel moves data between GPUs (collectives, all-to-all, send/recv)."""
    return classify_name(name).category == "communication"


# ---------------------------------------------------------------------------------------------
# Host ops that launch communication
# ---------------------------------------------------------------------------------------------

# Process-group op prefixes of PyTorch's profiler: ProcessGroupNCCL records `nccl:<coll>`
# (`nccl:all_reduce`, `nccl:_all_gather_base`, `nccl:all_to_all`, `nccl:send`, `nccl:recv`, ...),
# ProcessGroupGloo `gloo:<coll>`.
_PG_PREFIX = re.compile(r"^(nccl|gloo|ucc|mpi|xccl):(\w+)")
_PG_FAMILY = {"nccl": "NCCL", "gloo": "Gloo", "ucc": "UCC", "mpi": "MPI", "xccl": "XCCL"}
# c10d dispatcher ops (torch/csrc/distributed/c10d/Ops.cpp: allreduce_, allgather_,
# _allgather_base_, reduce_scatter_, _reduce_scatter_base_, alltoall_base_, send, recv_,
# broadcast_, barrier, ...) and functional collectives
# (torch/csrc/distributed/c10d/Functional.cpp: `_c10d_functional::all_reduce`,
# `all_gather_into_tensor`, `reduce_scatter_tensor`, `all_to_all_single`, `broadcast`, ...;
# `wait_tensor` waits, it launches nothing).
_C10D = re.compile(r"^(?:c10d|_?c10d_functional(?:_autograd)?)::(\w+)")
# Symmetric-memory ops (torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp:
# one_shot_all_reduce, two_shot_all_reduce_, multimem_all_reduce_, multimem_all_gather_out,
# all_to_all_vdev, nvshmem_broadcast, fused_all_gather_matmul, fused_matmul_reduce_scatter, ...).
# `_async_input_mm` is a GEMM and `stream_write_value32_` / `memset32_` write signal words.
_SYMM_MEM = re.compile(r"^symm_mem::(\w+)")
_SYMM_MEM_LOCAL = frozenset({"_async_input_mm", "stream_write_value32_", "memset32_"})
# Inference libraries' custom collectives, counted when the op name spells a collective:
# vLLM (`_C_custom_ar::all_reduce`, `vllm::all_reduce`, `vllm::outplace_all_reduce`), SGLang
# (`sgl_kernel::all_reduce`, `sgl_kernel::custom_reduce`), TensorRT-LLM (`trtllm::allreduce`,
# `trtllm::moe_allreduce`, `trtllm::allgather`, `trtllm::reducescatter`, `trtllm::alltoall`),
# FlashInfer (`flashinfer::trtllm_allreduce_fusion`).
_CUSTOM_OPS = (
    (re.compile(r"^_C_custom_ar::(\w+)"), "vLLM custom all-reduce"),
    (re.compile(r"^vllm::(\w+)"), "vLLM"),
    (re.compile(r"^sgl_kernel::(\w+)"), "SGLang"),
    (re.compile(r"^trtllm::(\w+)"), "TensorRT-LLM"),
    (re.compile(r"^flashinfer::(\w+)"), "FlashInfer"),
)
_OP_COLLECTIVE = re.compile(
    r"all_?reduce|allgather|all_gather|reduce_?scatter|all_?to_?all|alltoall|a2a|custom_reduce",
    re.IGNORECASE,
)
# Python frames (`path/file.py(line): function` in PyTorch's profiler, or `Class.method`) of
# expert-parallel libraries: DeepEP's Buffer (deep_ep/buffer.py: dispatch, combine,
# internode_dispatch, internode_combine, low_latency_dispatch, low_latency_combine; not
# get_dispatch_layout), pplx-kernels (pplx_kernels/all_to_all.py: AllToAll.dispatch, combine)
# and MORI-EP (mori/ops/dispatch_combine.py: EpDispatchCombineOp.dispatch, combine).
_EP_FRAME = re.compile(
    r"(?:[\s.:]|^)(?:(?:internode|intranode|low_latency)_)?(?:dispatch|combine)$"
)
_EP_LIBRARIES = (
    (re.compile(r"deep_?ep|(?:^|[\s.])Buffer\.", re.IGNORECASE), "DeepEP"),
    (re.compile(r"pplx", re.IGNORECASE), "pplx-kernels"),
    (re.compile(r"(?:^|[/\\\s.])mori[/\\.]", re.IGNORECASE), "MORI-EP"),
)
# pplx-kernels' torch ops (csrc/bindings/all_to_all_ops.cpp, library `pplx_kernels`):
# all_to_all_internode_dispatch, all_to_all_internode_combine, all_to_all_intranode_dispatch,
# all_to_all_intranode_combine (and _create / all_to_all_destroy, which move nothing).
_PPLX_OP = re.compile(r"^pplx_kernels::all_to_all_\w*(?:dispatch|combine)$")
# NVSHMEM host API calls on a stream (`nvshmemx_alltoallmem_on_stream`,
# `nvshmemx_barrier_all_on_stream`, `nvshmem_broadcast`, ...).
_NVSHMEM_CALL = re.compile(r"^(?:nvshmemx?|rocshmem)_\w+")


def comm_op(name: str) -> tuple[str, str] | None:
    """The communication a host op, python frame or annotation launches: (kind, family).

    Args:
        name: the host event's name (`nccl:all_reduce`, `c10d::allreduce_`,
            `_c10d_functional::all_gather_into_tensor`, `symm_mem::two_shot_all_reduce_`,
            `deep_ep/buffer.py(312): dispatch`, ...).

    Returns:
        The kind (one of `COMM_KINDS`; "other" where the op communicates but its name does not
        say how: `record_param_comms`, whose metadata tells, or a barrier) and the family;
        None when the name is no communication op.

    Example:
        >>> comm_op("nccl:_reduce_scatter_base")
        ('reduce_scatter', 'NCCL')
        >>> comm_op("aten::mm") is None
        True
    """
    return _comm_op_head(name_head(name).strip())


@functools.lru_cache(maxsize=8192)
def _comm_op_head(name: str) -> tuple[str, str] | None:
    if name == "record_param_comms":
        return "other", "c10d"
    match = _PG_PREFIX.match(name)
    if match:
        return comm_kind_from_letters(match.group(2)), _PG_FAMILY[match.group(1)]
    match = _C10D.match(name)
    if match:
        if match.group(1) == "wait_tensor":
            return None
        return comm_kind_from_letters(match.group(1)), (
            "c10d" if name.startswith("c10d::") else "c10d functional"
        )
    match = _SYMM_MEM.match(name)
    if match:
        if match.group(1) in _SYMM_MEM_LOCAL:
            return None
        return comm_kind_from_letters(match.group(1)), "PyTorch symmetric memory"
    if _PPLX_OP.match(name):
        return "all_to_all", "pplx-kernels"
    for pattern, family in _CUSTOM_OPS:
        match = pattern.match(name)
        if match:
            op = match.group(1)
            if not _OP_COLLECTIVE.search(op):
                return None
            kind = comm_kind_from_letters(op)
            return ("all_reduce" if kind in ("other", "reduce") else kind), family
    if _NVSHMEM_CALL.match(name):
        return comm_kind_from_letters(name), "NVSHMEM"
    if _EP_FRAME.search(name):
        for pattern, family in _EP_LIBRARIES:
            if pattern.search(name):
                return "all_to_all", family
    return None


_WHERE = {"callee": "callee", "last": "last part of the callee", "head": "whole name"}


def name_table() -> list[tuple[str, str, str]]:
    """The kernel name table, in the order it is tried: (category, family, what it matches).

    For `badput explain classify`: the regex and where it looks (the callee, the last part
    of its path, or the whole name where the type string is the only carrier).
    """
    out = []
    for rule in _RULES:
        where = _WHERE.get(rule.target, rule.target)
        also = f" and /{rule.also.pattern}/ in the callee" if rule.also is not None else ""
        out.append((rule.category, rule.family, f"/{rule.pattern.pattern}/ in the {where}{also}"))
    return out


#: Host ops and frames that launch communication, in words, for `badput explain classify`.
COMM_OP_FAMILIES = (
    "record_param_comms (its NCCL metadata gives the kind)",
    "ProcessGroup ops nccl:<collective>, gloo:, ucc:, mpi:, xccl:",
    "c10d::<collective> (allreduce_, _allgather_base_, alltoall_base_, send, recv_, ...)",
    "_c10d_functional::<collective> (all_reduce, all_gather_into_tensor, ...; not wait_tensor)",
    "symm_mem::<op> (one_shot_all_reduce, two_shot_all_reduce_, multimem_all_reduce_, ...)",
    "pplx_kernels::all_to_all_*dispatch|combine",
    "custom collectives of vLLM (_C_custom_ar::, vllm::), SGLang (sgl_kernel::), TensorRT-LLM "
    "(trtllm::), FlashInfer (flashinfer::) whose name spells a collective",
    "NVSHMEM host calls (nvshmemx_*_on_stream, ...)",
    "Python frames of DeepEP (deep_ep/buffer.py: dispatch, combine, low_latency_*), "
    "pplx-kernels and MORI-EP",
)


# ---------------------------------------------------------------------------------------------
# Host spans
# ---------------------------------------------------------------------------------------------


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
