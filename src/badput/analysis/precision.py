"""The math precision of GEMM and convolution kernels: from the launching op's types, else the name.

Deciders, in order; the first that answers wins and the answer records which one spoke:

1. **Input type.** The launching op's `Input type` (PyTorch profiles recorded with
   `record_shapes=True`; `badput.trace.model.OpArgs`), read for the op that launched the kernel
   (the launch tree's innermost op: under autocast an outer `aten::linear` still shows `float`,
   the `aten::addmm` inside it the cast `c10::BFloat16`), else the op that models it
   (`badput.analysis.ops.perf_ops`). For the ops whose operands are known (`aten::mm`, `addmm`,
   `bmm`, `_scaled_mm`, the convolutions, ...), the precision is that of the wider of A and B: a
   mixed MXFP8 x MXFP4 product runs at the FP8 rate (PTX ISA, `tcgen05.mma` `kind::f8f6f4`).
   For any other op (custom GEMM ops of vLLM, TensorRT-LLM, ...), it is the narrowest floating
   tensor type among its arguments: quantized operands are the narrowest, outputs, biases and
   scales wider. Types decide only when they name a floating tensor type; a list of
   `unsigned char`, `int` or `Scalar` (packed FP4 held in a uint8 tensor) says nothing about the
   math, and the name decides. A float op whose kernel name says TF32 (`tf32`, cuBLAS
   `xmma_gemm_f32f32_tf32f32`, a CUTLASS `tensorop` kernel with an FP32 accumulator and no
   narrower type) ran on TF32 tensor cores: precision `tf32`, both pieces of evidence kept.
   Kernels launched by a CUDA graph take no op types: the op around a graph launch is not the
   kernel's.
2. **Kernel name**, when the op records no types (or there is no op): the parsers of
   `name_precision`, one per library family, each knowing where that family writes its input
   types and where its accumulator (an `Fp32` after the input types of TensorRT-LLM's
   trtllm-gen kernels, the `s` of cuBLAS `s16816gemm` and of nvjet `tst`, Tensile's `HHS`: inputs
   H, compute S).

The answer per kernel row is a `KernelPrecision`: the precision (a name of
`badput.estimate.hardware.PRECISIONS`, or None: unknown), the decider, and the evidence in
words. Everything runs once per distinct (kernel name, launching op, its types, modelling op, its
types), never per row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import dense_pairs, take
from badput.analysis.opmodel.dtypes import lookup_dtype
from badput.analysis.ops import perf_ops
from badput.analysis.patterns import kernel_category
from badput.analysis.tree import LaunchTree
from badput.trace.model import NO_ID, EventKind, OpArgs, Trace, name_head

__all__ = [
    "FROM_NAME",
    "FROM_TYPES",
    "KernelPrecision",
    "MatmulPrecisions",
    "NamePrecision",
    "matmul_precisions",
    "name_precision",
    "types_precision",
]

I64 = npt.NDArray[np.int64]

#: `KernelPrecision.source` of a precision decided by the op's `Input type`.
FROM_TYPES = "input type"
#: `KernelPrecision.source` of a precision decided by the kernel name.
FROM_NAME = "kernel name"

# Bits per element of each precision: "wider" and "narrower" below compare these.
_BITS = {"fp64": 64, "fp32": 32, "tf32": 19, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "fp4": 4}


def _widest(precisions: Sequence[str]) -> str:
    return max(precisions, key=lambda p: _BITS[p])


def _narrowest(precisions: Sequence[str]) -> str:
    return min(precisions, key=lambda p: _BITS[p])


@dataclass(frozen=True)
class NamePrecision:
    """What a kernel name says about its math precision.

    Attributes:
        precision: a name of `badput.estimate.hardware.PRECISIONS`.
        token: the part of the name that says so (`"sgemm"`, `"MxE4m3/MxE2m1"`).
        family: the library family whose naming was parsed (`"cuBLAS"`, `"trtllm-gen"`, ...).
        scaling: block scaling of the inputs: `"mx"` (32-element blocks, UE8M0 scales),
            `"nvfp4"` (16-element blocks, UE4M3 scales), None for none or unknown.
    """

    precision: str
    token: str
    family: str
    scaling: str | None = None


@dataclass(frozen=True)
class KernelPrecision:
    """The math precision of one kind of GEMM/convolution kernel call, with its evidence.

    Attributes:
        precision: a name of `badput.estimate.hardware.PRECISIONS` (`"fp32"`, `"tf32"`,
            `"bf16"`, `"fp8"`, ...), None where no decider knows.
        source: `FROM_TYPES`, `FROM_NAME`, or None (unknown).
        evidence: the deciding evidence in words (`"Input type of aten::mm: float, float"`).
        op: the op whose `Input type` decided (None when the name decided).
        input_types: that op's `Input type` as recorded; empty without it.
        scaling: `"mx"`, `"nvfp4"` or None (see `NamePrecision.scaling`).
        name_token: what the name said, where a name parser spoke (with types too: the TF32
            refinement, or agreement); None otherwise.
    """

    precision: str | None
    source: str | None
    evidence: str
    op: str | None = None
    input_types: tuple[str, ...] = ()
    scaling: str | None = None
    name_token: str | None = None


@dataclass(frozen=True, eq=False)
class MatmulPrecisions:
    """Precision of every GEMM/convolution kernel row of a trace (`kernel_category` "gemm").

    Attributes:
        row: the kernel rows, ascending.
        decision: index into `decisions` of each row.
        decisions: the distinct answers.
    """

    row: I64
    decision: I64
    decisions: list[KernelPrecision]

    def __len__(self) -> int:
        """Number of GEMM/convolution kernel rows."""
        return int(self.row.shape[0])

    def decisions_of(self, rows: npt.NDArray[np.integer]) -> I64:
        """Index into `decisions` of each of `rows` (Trace rows), `NO_ID` for other rows."""
        rows64 = rows.astype(np.int64, copy=False)
        if not len(self):
            return np.full(rows64.shape, NO_ID, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.row, rows64), len(self) - 1)
        found: I64 = np.where(self.row[at] == rows64, self.decision[at], NO_ID)
        return found


# ---- decider 1: the op's Input type -----------------------------------------------------------

# Positions of the A and B operands in the ops' schemas (native_functions.yaml); the rest of
# the arguments (bias, scales, sizes) do not set the math precision.
_OPERANDS: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(
        (
            "aten::mm",
            "aten::bmm",
            "aten::matmul",
            "aten::linear",
            "aten::mv",
            "aten::_scaled_mm",
            "aten::_scaled_grouped_mm",
            "aten::_grouped_mm",
            "aten::_int_mm",
        ),
        (0, 1),
    ),
    **dict.fromkeys(("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"), (1, 2)),
    # (input, weight, ...) forward; the backward ops carry grad_output, input and weight.
    **dict.fromkeys(
        (
            "aten::convolution",
            "aten::_convolution",
            "aten::conv1d",
            "aten::conv2d",
            "aten::conv3d",
            "aten::conv_transpose1d",
            "aten::conv_transpose2d",
            "aten::conv_transpose3d",
            "aten::cudnn_convolution",
            "aten::cudnn_convolution_transpose",
            "aten::miopen_convolution",
        ),
        (0, 1),
    ),
    "aten::convolution_backward": (0, 1, 2),
    "aten::cudnn_convolution_backward": (0, 1, 2),
    # (self_size or weight_size: a list, grad_output, weight or self)
    "aten::cudnn_convolution_backward_input": (1, 2),
    "aten::cudnn_convolution_backward_weight": (1, 2),
}


def types_precision(op: str, types: object) -> KernelPrecision | None:
    """The precision an op's recorded `Input type` gives its GEMM/convolution kernels.

    Args:
        op: the op name (`"aten::addmm"`).
        types: its decoded `Input type` (a list of dtype strings), anything else for none.

    Returns:
        The precision with its evidence (module docstring), or None where the types name no
        floating tensor type (no types, only integers, scalars, packed FP4 in uint8).
    """
    if not isinstance(types, list):
        return None
    shown = tuple(t if isinstance(t, str) else str(t) for t in types)
    known = _OPERANDS.get(op)
    picks = [i for i in known if i < len(types)] if known is not None else range(len(types))
    found: list[str] = []
    for i in picks:
        dt = lookup_dtype(types[i])
        if dt is not None and dt.precision is not None and dt.precision != "int8":
            found.append(dt.precision)
    if not found:
        return None
    precision = _widest(found) if known is not None else _narrowest(found)
    # MX scales are exponent-only E8M0 (`c10::Float8_e8m0fnu`); NVFP4 blocks carry E4M3 scales.
    lowered = [t.lower() for t in shown]
    scaling = None
    if any(t == "c10::float8_e8m0fnu" for t in lowered):
        scaling = "mx"
    elif precision == "fp4" and "c10::float8_e4m3fn" in lowered:
        scaling = "nvfp4"
    listed = ", ".join(t or "''" for t in shown)
    return KernelPrecision(
        precision=precision,
        source=FROM_TYPES,
        evidence=f"Input type of {op}: {listed}",
        op=op,
        input_types=shown,
        scaling=scaling,
    )


# ---- decider 2: the kernel name ---------------------------------------------------------------

# TensorRT-LLM's trtllm-gen kernels name `<Out>_<A><B>_<Acc>` (batched GEMM, `bmm_...`) or
# `<Out>_<Elt>_<Acc>` (`GemmKernel_...`, `GemmGatedActKernel_...`): the accumulator comes after
# the input types (TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/*/KernelMetaInfo.h).
_TRT_TYPE = r"(?:Mx)?(?:Fp32|Fp16|Bfloat16|E4m3|E5m2|E2m1|E2m3|E3m2|Int8|Int4|UInt8)"
_TRTLLM_GEN = re.compile(
    rf"(?:^|_)(?:bmm|gemm|GemmKernel|GemmGatedActKernel|BatchedGemmKernel\w*?)"
    rf"_(?P<out>{_TRT_TYPE})_(?P<inputs>(?:{_TRT_TYPE}){{1,2}})_(?P<acc>Fp32|Fp16)_"
)
_TRT_ONE = re.compile(_TRT_TYPE)
_TRT_PRECISION = {
    "fp32": "fp32",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "e2m1": "fp4",
    # FP6 formats run at the FP8 rate on Blackwell (`kind::f8f6f4`).
    "e2m3": "fp8",
    "e3m2": "fp8",
}


def _trtllm_gen(name: str) -> NamePrecision | None:
    m = _TRTLLM_GEN.search(name)
    if m is None:
        return None
    kinds = _TRT_ONE.findall(m["inputs"])
    found = [_TRT_PRECISION[k.lower().removeprefix("mx")] for k in kinds if _known_trt(k)]
    if not found:
        return None
    # `E2m1` without `Mx` is NVFP4 (16-element blocks with E4M3 scales) in trtllm-gen.
    mx = any(k.startswith("Mx") for k in kinds)
    nvfp4 = any(k == "E2m1" for k in kinds)
    scaling = "mx" if mx else "nvfp4" if nvfp4 else None
    return NamePrecision(_widest(found), "/".join(kinds), "trtllm-gen", scaling)


def _known_trt(kind: str) -> bool:
    return kind.lower().removeprefix("mx") in _TRT_PRECISION


# cuBLASLt's nvjet kernels (Hopper and later): `nvjet_[smNN_]<code>_...` where a 3-letter code is
# <A/B/C type><compute type><D type> (`tst`: bf16 in and out, FP32 accumulate) and a 5-letter
# code prefixes the A and B types (`qqtst`: FP8 inputs). Letters as they appear with the
# recorded Input types: s FP32, t bf16, h fp16, q FP8, o FP4. `_tf32` marks TF32 math on FP32
# inputs; `Avec16UE4M3` NVFP4 block scales, `Avec32UE8M0` MX block scales.
_NVJET = re.compile(r"^nvjet_(?:sm\d+[a-z]?_)?(?P<code>[a-z]{3}|[a-z]{5})_")
_NVJET_LETTER = {"s": "fp32", "t": "bf16", "h": "fp16", "q": "fp8", "o": "fp4"}


def _nvjet(name: str) -> NamePrecision | None:
    m = _NVJET.match(name)
    if m is None:
        return None
    code = m["code"]
    letters = code[:2] if len(code) == 5 else code[:1]
    found = [_NVJET_LETTER.get(c) for c in letters]
    if None in found:
        return None
    inputs = [p for p in found if p is not None]
    precision = _widest(inputs)
    lowered = name.lower()
    if precision == "fp32" and "_tf32" in lowered:
        return NamePrecision("tf32", f"nvjet_{code}_tf32", "nvjet")
    scaling = "nvfp4" if "vec16ue4m3" in lowered else "mx" if "vec32ue8m0" in lowered else None
    return NamePrecision(precision, f"nvjet_{code}", "nvjet", scaling)


# cuBLAS and cuDNN xmma kernels (Ampere and later):
# `sm80_xmma_gemm_<A><B>_<math><acc>_...` and `..._fprop_implicit_gemm_...` / `dgrad` / `wgrad`:
# `f32f32_tf32f32` is FP32 storage with TF32 math; `f32f32_f32f32` (with `ffma`) FP32 math on
# CUDA cores; `bf16bf16_bf16f32` bf16 math with an FP32 accumulator.
_XMMA_T = r"(?:bf16|tf32|f16|f32|f64|e4m3|e5m2|s8|u8|i8|s32)"
_XMMA = re.compile(
    rf"xmma_(?:gemm|fprop|dgrad|wgrad|conv)[a-z0-9_]*?_(?P<ab>{_XMMA_T}{_XMMA_T})_"
    rf"(?P<cd>{_XMMA_T}{_XMMA_T})_"
)
_XMMA_ONE = re.compile(_XMMA_T)
_WORD_PRECISION = {
    "bf16": "bf16",
    "tf32": "tf32",
    "f16": "fp16",
    "f32": "fp32",
    "f64": "fp64",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "e2m1": "fp4",
    "s8": "int8",
    "i8": "int8",
}


def _xmma(name: str) -> NamePrecision | None:
    m = _XMMA.search(name.lower())
    if m is None:
        return None
    ab = [_WORD_PRECISION.get(t) for t in _XMMA_ONE.findall(m["ab"])]
    math = _WORD_PRECISION.get(_XMMA_ONE.findall(m["cd"])[0])
    inputs = [p for p in ab if p is not None]
    if not inputs:
        return None
    token = f"{m['ab']}_{m['cd']}"
    # TF32 named for the operands (cuDNN's `tf32f32_tf32f32`) or for the math (cuBLAS's
    # `f32f32_tf32f32`) of FP32 storage: TF32 tensor cores.
    if set(inputs) <= {"fp32", "tf32"} and "tf32" in (*inputs, math):
        return NamePrecision("tf32", token, "cuBLAS/cuDNN xmma")
    return NamePrecision(_widest(inputs), token, "cuBLAS/cuDNN xmma")


# CUTLASS 3.x procedural names (python/cutlass_library/gemm_operation.py):
# `cutlass3x_smNN_<opclass>_<core>_<A>_<B>_<acc>_<C>_<D>_...`, block-scaled inputs written
# `<sf>x<type>` (`ue8m0xe4m3`: MX; `ue4m3xe2m1`: NVFP4).
_CUTLASS3 = re.compile(
    r"cutlass3x_sm\d+[a-z]?_(?P<op>[a-z]*tensorop|simt)_[a-z0-9]*?(?:gemm|fprop|dgrad|wgrad)"
    r"[a-z0-9]*_(?P<a>[a-z0-9]+)_(?P<b>[a-z0-9]+)_(?P<acc>f32|f16|s32|f64)_"
)


def _cutlass3x(name: str) -> NamePrecision | None:
    m = _CUTLASS3.search(name.lower())
    if m is None:
        return None
    scaling = None
    found = []
    for t in (m["a"], m["b"]):
        if "x" in t:
            sf, _, t = t.partition("x")
            scaling = "mx" if sf == "ue8m0" else "nvfp4" if sf == "ue4m3" else scaling
        p = _WORD_PRECISION.get(t)
        if p is not None:
            found.append(p)
    if not found:
        return None
    precision = _widest(found)
    token = f"{m['a']}_{m['b']}_{m['acc']}"
    if precision == "fp32" and "tensorop" in m["op"]:
        precision = "tf32"  # FP32 operands on tensor cores are read as TF32
    return NamePrecision(precision, token, "CUTLASS 3.x", scaling)


# The core of cuBLAS's own names, of CUTLASS 2.x names and of cuDNN's: `[type_]<acc><inst>
# [mid]<kind>` with <acc> the accumulator (s FP32, h fp16, d fp64, c/z complex), <inst> the
# tensor-core instruction shape (884 Volta, 1688 Turing/TF32, 16816 Ampere, ...), <mid> the
# math type CUTLASS writes when it differs from the operand's (`s1688tf32gemm`). Without an
# instruction shape it is the CUDA-core kernel (`volta_sgemm`, `volta_scudnn`, CUTLASS `simt_
# sgemm`, cuDNN's `implicit_convolve_sgemm`). The input type, where the accumulator is not it,
# is a word of its own (`ampere_bf16_s16816gemm_bf16_...`, `cutlass_80_tensorop_bf16_s16816gemm_
# relu_bf16_...`).
_CORE = re.compile(
    r"(?:^|[_:\s])(?P<acc>[shdcz])(?P<inst>\d{3,6})?(?P<mid>tf32|bf16|f16)?"
    r"(?P<kind>gemm|cudnn|fprop|dgrad|wgrad)(?![a-z])"
)
_CORE_ACC = {"s": "fp32", "h": "fp16", "d": "fp64"}
_WORDS = re.compile(r"(?:^|_)(bf16|fp16|f16|tf32|e4m3|e5m2|int8|i8)(?=_|$)")
_WORD_EXTRA = {"fp16": "fp16", "int8": "int8"}


def _core(name: str) -> NamePrecision | None:
    lowered = name.lower()
    m = _CORE.search(lowered)
    if m is None:
        return None
    acc = m["acc"]
    if acc not in _CORE_ACC:
        return None  # complex GEMMs: no tensor-core alternative to suggest
    family = "CUTLASS 2.x" if "cutlass" in lowered else "cuBLAS/cuDNN"
    core = m.group(0).lstrip("_: ")
    if m["mid"]:
        return NamePrecision(_WORD_PRECISION[m["mid"]], core, family)
    words = [_WORD_PRECISION.get(w) or _WORD_EXTRA[w] for w in _WORDS.findall(lowered)]
    narrow = list(dict.fromkeys(w for w in words if w not in ("fp32", "fp64")))
    if narrow:
        return NamePrecision(_widest(narrow), f"{core} ({'/'.join(narrow)})", family)
    if m["inst"]:
        # A tensor-core instruction with an FP32 accumulator and no narrower input type: FP32
        # operands read as TF32 (Volta's 884 and Turing's 1688 HMMA take only fp16, and such
        # names carry it); an fp16 accumulator is an fp16 kernel.
        return NamePrecision("tf32" if acc == "s" else _CORE_ACC[acc], core, family)
    if "tensorop" in lowered and acc == "s":
        return NamePrecision("tf32", core, family)
    return NamePrecision(_CORE_ACC[acc], core, family)


# Tensile (rocBLAS, hipBLASLt): `Cijk_<A idx>_<B idx>_<types>[_]<flags>`, where <types> is the
# A/B data type, then, for the high-precision-accumulate types, the C/D type and the compute
# type (`HHS_BH`: fp16 in and out, FP32 compute; `SB`: FP32 with beta; `F8B8BS`: FP8 E4M3 x E5M2
# into bf16). Tensile's character codes: D fp64, S fp32, H fp16, B bf16, X xf32, F8 E4M3,
# B8 E5M2 (F8N/B8N the FNUZ forms), I8 int8, I int32, C/Z complex.
_TENSILE = re.compile(r"^Cijk_A[a-zA-Z]*_B[a-zA-Z]*_(?P<t>F8N|B8N|F8|B8|I8|4xi8|[DSHBXIZC])")
_TENSILE_TYPE = {
    "D": "fp64",
    "S": "fp32",
    "H": "fp16",
    "B": "bf16",
    "X": "tf32",
    "F8": "fp8",
    "B8": "fp8",
    "F8N": "fp8",
    "B8N": "fp8",
    "I8": "int8",
    "4xi8": "int8",
}


def _tensile(name: str) -> NamePrecision | None:
    m = _TENSILE.match(name)
    if m is None:
        return None
    precision = _TENSILE_TYPE.get(m["t"])
    if precision is None:
        return None
    return NamePrecision(precision, m.group(0), "Tensile")


# Last: type words anywhere (template arguments `<float, ...>`, `c10::BFloat16`, CUTLASS's
# `cutlass::float_e4m3_t`, CK's `ck::half_t`, DeepGEMM's `sm90_fp8_gemm_...`, `mxf8`, `nvfp4`,
# `ue8m0` scale factors). An FP32 word beside a narrower type is the accumulator, a scale or the
# output; a name with an 8- or 4-bit type is a quantized GEMM, whatever 16-bit output it names.
_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp4", re.compile(r"(?<![a-z])(?:nvfp4|mxfp4|mxf4|fp4|e2m1|float_e2m1|float4_e2m1)")),
    (
        "fp8",
        re.compile(
            r"(?<![a-z])(?:mxfp8|mxf8|fp8|f8(?![a-z0-9])|e4m3|e5m2|float8|float_e4m3|float_e5m2)"
        ),
    ),
    ("bf16", re.compile(r"(?<![a-z])(?:bf16|bfloat16|bhalf)")),
    ("fp16", re.compile(r"(?<![a-z])(?:fp16|f16|half|float16|hgemm)(?![a-z])|(?:^|_)half_t")),
    ("tf32", re.compile(r"(?<![a-z])(?:tf32|tfloat32|xf32)")),
    ("fp32", re.compile(r"(?<![a-z])(?:fp32|f32|float(?![a-z0-9_])|sgemm|sgemv|scudnn)")),
)


def _tokens(name: str) -> NamePrecision | None:
    lowered = name.lower()
    found: dict[str, str] = {}
    for precision, pattern in _TOKENS:
        m = pattern.search(lowered)
        if m is not None:
            found[precision] = m.group(0).lstrip("_")
    if not found:
        return None
    scaling = "mx" if ("ue8m0" in lowered or "mxf" in lowered) else None
    if scaling is None and "nvfp4" in lowered:
        scaling = "nvfp4"
    low = [p for p in ("fp8", "fp4") if p in found]
    if low:
        precision = _widest(low)  # mixed FP8 x FP4 runs at the FP8 rate
        return NamePrecision(precision, "/".join(found[p] for p in low), "type words", scaling)
    for p in ("bf16", "fp16", "tf32", "fp32"):
        if p in found:
            return NamePrecision(p, found[p], "type words", scaling)
    return None  # pragma: no cover - every pattern is one of the precisions above


_NAME_DECIDERS = (_trtllm_gen, _nvjet, _xmma, _cutlass3x, _tensile, _core, _tokens)


def name_precision(name: str) -> NamePrecision | None:
    """What a GEMM/convolution kernel's name says about its math precision; None if nothing.

    The family parsers are tried in order (trtllm-gen, nvjet, cuBLAS/cuDNN xmma, CUTLASS 3.x,
    Tensile, the cuBLAS/CUTLASS 2.x/cuDNN core, type words); the first that recognises the
    name answers. Only the name's `name_head` is read.

    Example:
        >>> name_precision("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x8x512_s3").precision
        'fp8'
    """
    head = name_head(name)
    for decide in _NAME_DECIDERS:
        found = decide(head)
        if found is not None:
            return found
    return None


# ---- per trace ----------------------------------------------------------------------------------


def _types_index(args: OpArgs | None, ops: I64) -> I64:
    """Index into `args.values` of each op row's `Input type`, `NO_ID` without one."""
    if args is None or ops.shape[0] == 0:
        return np.full(ops.shape, NO_ID, dtype=np.int64)
    entry = args.entries_of(np.maximum(ops, 0))
    ok = (entry >= 0) & (ops >= 0)
    out: I64 = np.where(ok, args.types[np.maximum(entry, 0)], NO_ID).astype(np.int64)
    return out


def _decide(
    name: str,
    ops: list[tuple[str, object]],
) -> KernelPrecision:
    """The answer for one kernel name and its candidate ops (launching op first)."""
    from_name = name_precision(name)
    for op, types in ops:
        typed = types_precision(op, types)
        if typed is None:
            continue
        if from_name is None:
            return typed
        token = f"`{from_name.token}` ({from_name.family})"
        if typed.precision == "fp32" and from_name.precision == "tf32":
            return KernelPrecision(
                "tf32",
                FROM_TYPES,
                f"{typed.evidence}; kernel name {token} runs them on TF32 tensor cores",
                typed.op,
                typed.input_types,
                typed.scaling,
                from_name.token,
            )
        scaling = typed.scaling or (
            from_name.scaling if from_name.precision == typed.precision else None
        )
        return KernelPrecision(
            typed.precision,
            FROM_TYPES,
            typed.evidence,
            typed.op,
            typed.input_types,
            scaling,
            from_name.token,
        )
    if from_name is None:
        return KernelPrecision(None, None, "no Input type recorded and the name names no type")
    why = "" if not ops else " (its op's Input type names no floating tensor type)"
    return KernelPrecision(
        from_name.precision,
        FROM_NAME,
        f"kernel name `{from_name.token}` ({from_name.family}){why}",
        scaling=from_name.scaling,
        name_token=from_name.token,
    )


def matmul_precisions(trace: Trace, tree: LaunchTree) -> MatmulPrecisions:
    """The precision of every GEMM/convolution kernel of `trace` (module docstring).

    Args:
        trace: the trace.
        tree: `launch_tree(trace)`.

    Returns:
        One decision per kernel row whose `kernel_category` is "gemm".
    """
    kernel_row = tree.row
    gemm_name = trace.name_mask(lambda n: kernel_category(n) == "gemm", kernel_row)
    is_gemm = (trace.kind[kernel_row] == EventKind.KERNEL) & gemm_name[trace.name_id[kernel_row]]
    entries = np.flatnonzero(is_gemm)
    rows = kernel_row[entries]
    if entries.shape[0] == 0:
        empty = np.zeros(0, dtype=np.int64)
        return MatmulPrecisions(empty, empty, [])
    graph = tree.graph_launch[entries] >= 0
    inner = np.where(graph, NO_ID, tree.inner_op[entries])
    modelled = np.where(graph, NO_ID, perf_ops(trace, tree, entries))
    args = trace.op_args
    cols = [
        trace.name_id[rows].astype(np.int64),
        take(trace.name_id, inner),
        _types_index(args, inner),
        take(trace.name_id, modelled),
        _types_index(args, modelled),
    ]
    key = cols[0]
    for col in cols[1:]:
        key = dense_pairs(key, col)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    decisions: list[KernelPrecision] = []
    for at in first.tolist():
        name_id, in_name, in_types, mo_name, mo_types = (int(c[at]) for c in cols)
        ops: list[tuple[str, object]] = []
        for op_name, types in ((in_name, in_types), (mo_name, mo_types)):
            if op_name >= 0 and types >= 0 and args is not None:
                ops.append((trace.names[op_name], args.value(types)))
        decisions.append(_decide(trace.names[name_id], ops))
    order = np.argsort(rows, kind="stable")
    return MatmulPrecisions(
        rows[order].astype(np.int64),
        inverse.reshape(-1)[order].astype(np.int64),
        decisions,
    )
