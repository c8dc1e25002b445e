"""Each kernel of an Nsight Compute export placed against its GPU's roofline.

The roofline model (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009): a kernel of arithmetic
intensity ``I`` (FLOP per DRAM byte) can reach at most ``min(peak_flops, I x peak_bw)``. The
ridge ``peak_flops / peak_bw`` splits memory-bound kernels (``I`` below it) from compute-bound
ones. The share of that attainable rate a kernel reaches is its ``roof_share``; its distance to
the roof is the inverse (``2.0`` = the roof is twice as high as what the kernel achieved).

Peaks come from badput's hardware table (:mod:`badput.estimate.hardware`), chosen by ncu's
device name when the CSV carries one, else by compute capability when exactly one GPU of the
table has it, or given by the user (``gpu``, ``peak_tflops``, ``peak_gbps``). Nothing falls back
to a default GPU: an unknown device is a :class:`~badput.errors.UsageError` unless both peaks
are given.

Which compute roof applies follows from the kernel's precision, decided by the first of these
that can tell (the result records which did): the tensor-path op counters
(``sm__ops_path_tensor_src_fp8.sum``, ...: their dominant type, and their ops join the FLOP
count); the tensor-pipe instruction counters (an MMA kind, else the name for the type, else
``tensor``: the FP16 tensor peak); the kernel's name (``e4m3``, ``bf16``, ...) when the CSV has
no tensor metric at all; the SASS FP counters' dominant class (fp64, fp32, fp16); else fp32.
A kernel without FLOP counters, or with tensor work the counters leave out, is placed by ncu's
own SOL percentages; a kernel with zero FLOPs is memory-bound, and its share of the roof is its
share of peak DRAM bandwidth. Whatever the roofline says, a kernel whose compute and memory SOL
are both below 60 % is latency-bound, as ncu's SOLBottleneck rule has it.

Rule results (ncu's guided analysis) that carry an estimated speedup become findings, ranked by
``estimated speedup x kernel duration``: the time ncu expects a fix to save.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from badput.errors import UsageError
from badput.estimate.hardware import GpuSpec, all_gpus, lookup_gpu
from badput.trace.ncu import NcuKernel, NcuReport, NcuRule

__all__ = [
    "CC_GPUS",
    "LATENCY_SOL_PCT",
    "KernelRoofline",
    "Roof",
    "RooflineAnalysis",
    "RuleFinding",
    "analyze_roofline",
    "resolve_roof",
]

#: Compute capability to the hardware-table keys of that architecture (NVIDIA's "CUDA GPUs -
#: Compute Capability" list, https://developer.nvidia.com/cuda-gpus). A CC names a GPU only when
#: one entry of the table has it; otherwise the variants differ in peaks and the user must say.
CC_GPUS: dict[str, tuple[str, ...]] = {
    "7.0": ("V100",),
    "7.5": ("T4",),
    "8.0": ("A100",),
    "8.9": ("L4", "L40S"),
    "9.0": ("H100", "H800", "H200"),
    "10.0": ("B200", "GB200"),
    "10.3": ("B300",),
}

#: Roof precision to the hardware table's precision. The table's fp16 is the tensor-core FP16
#: rate on every GPU (there is no CUDA-core FP16 entry), so both map to it, as does ``tensor``
#: (tensor-pipe work of a type the CSV does not tell).
_TABLE_PRECISION = {
    "fp64": "fp64",
    "fp32": "fp32",
    "fp16": "fp16",
    "tensor": "fp16",
    "fp64_tensor": "fp64_tensor",
    "tf32": "tf32",
    "bf16": "bf16",
    "fp8": "fp8",
    "fp4": "fp4",
    "int8": "int8",
}

#: ncu's SOLBottleneck rule (GPU Speed Of Light section): "This workload exhibits low compute
#: throughput and memory bandwidth utilization relative to the peak performance of this device.
#: Achieved compute throughput and/or memory bandwidth below 60.0% of peak typically indicate
#: latency issues." A kernel with both SOL percentages below this is latency-bound.
LATENCY_SOL_PCT = 60.0

# Kernel-name tokens of a matrix precision, the last decider (library naming: cuBLAS/cuBLASLt
# `sm90_xmma_gemm_e4m3e4m3_...`, CUTLASS `cutlass_..._bf16_...`, `hgemm`/`sgemm`/`dgemm`).
# First match wins, so `bf16` is tried before `f16` and `e4m3` before `f32`.
_NAME_PRECISION = (
    ("fp4", re.compile(r"nvfp4|mxfp4|e2m1|fp4")),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|float8")),
    ("bf16", re.compile(r"bf16|bfloat16")),
    ("tf32", re.compile(r"tf32")),
    ("fp16", re.compile(r"fp16|f16|half|hgemm|h1688|h16816")),
    ("int8", re.compile(r"int8|imma|i8816|s8s8")),
)
# Names of matrix kernels (GEMMs, convolutions, attention): the ones whose type in the name says
# what their tensor cores ran. An elementwise kernel's `Half` says nothing about its math unit.
_MATRIX_NAME = re.compile(r"gemm|mma|cutlass|cublas|cudnn|matmul|conv|fmha|flash|attn|attention")
#: Precisions whose math runs on the tensor cores (the SASS FP counters do not count it).
_TENSOR_PRECISIONS = frozenset(
    {"tensor", "fp64_tensor", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"}
)
# MMA kinds that fix the type: dmma = FP64, imma/igmma = integer.
_KIND_PRECISION = {"dmma": "fp64_tensor", "imma": "int8", "igmma": "int8"}


@dataclass(frozen=True)
class Roof:
    """The peaks a kernel is measured against.

    Attributes:
        label: The GPU's table key (``"T4"``) or ``"custom"`` for user-given peaks.
        spec: The hardware-table entry, ``None`` for custom peaks.
        how: How the GPU was chosen, in words (``"by compute capability 7.5, the table's
            only CC 7.5 GPU"``, ``"--gpu T4"``, ...).
        peak_gbps: Peak DRAM bandwidth, GB/s (1e9 B/s).
        peak_tflops_override: A user-given compute peak, TFLOP/s, used for every precision.
    """

    label: str
    spec: GpuSpec | None
    how: str
    peak_gbps: float
    peak_tflops_override: float | None = None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak TFLOP/s of a roof precision (fp32, fp8, bf16, tensor...), or ``None``."""
        if self.peak_tflops_override is not None:
            return self.peak_tflops_override
        if self.spec is None:
            return None
        return self.spec.peak(_TABLE_PRECISION[precision])


@dataclass(frozen=True)
class KernelRoofline:
    """One kernel on its roofline.

    Attributes:
        kernel: The kernel as read from the CSV.
        roof: The peaks it is measured against.
        precision: Roof precision: ``"fp64"``, ``"fp32"``, ``"fp16"``, a tensor-core type of
            the hardware table (``"fp8"``, ``"bf16"``, ``"tf32"``, ``"fp64_tensor"``,
            ``"int8"``, ``"fp4"``) or ``"tensor"`` (tensor-pipe work of an unknown type).
        precision_note: Why that precision, and what it leaves out.
        precision_basis: Which evidence decided the precision: ``"tensor op counters"``,
            ``"tensor pipe"``, ``"kernel name"``, ``"FLOP counters"`` or ``"default"``.
        peak_tflops: Compute roof, TFLOP/s; ``None`` when the table has none for the precision.
        ridge_flop_per_byte: ``peak_flops / peak_bw``; ``None`` without a compute roof.
        achieved_tflops: Counted FLOPs per second, TFLOP/s; ``None`` without FLOP counters.
        dram_gbps: Achieved DRAM bandwidth, GB/s.
        arithmetic_intensity: FLOP per DRAM byte.
        bound: ``"memory-bound"``, ``"compute-bound"``, ``"latency-bound"`` (both SOL
            percentages below :data:`LATENCY_SOL_PCT`, ncu's own rule) or ``"unknown"``.
        bound_basis: ``"roofline"``, ``"no FLOPs"`` (zero counted) or ``"SOL"`` (no FLOP
            counters, or tensor-core work they do not count: ncu's compute and memory SOL
            percentages decide).
        attainable_tflops: The roof at the kernel's intensity, TFLOP/s.
        roof_share: Achieved share of the roof (of peak DRAM bandwidth for memory-bound kernels
            without FLOPs), 0..1.
        dram_share: Achieved DRAM bandwidth over peak.
        bound_note: The evidence of ``bound`` in words (SOL percentages, ncu's rule).
        roof_side: Which side of the ridge the kernel's intensity puts it (``"memory"`` or
            ``"compute"``), ``None`` without a FLOP count or a ridge.
    """

    kernel: NcuKernel
    roof: Roof
    precision: str
    precision_note: str
    peak_tflops: float | None
    ridge_flop_per_byte: float | None
    achieved_tflops: float | None
    dram_gbps: float | None
    arithmetic_intensity: float | None
    bound: str
    bound_basis: str
    attainable_tflops: float | None
    roof_share: float | None
    dram_share: float | None
    precision_basis: str = "default"
    bound_note: str = ""
    roof_side: str | None = None

    @property
    def distance_to_roof(self) -> float | None:
        """How many times higher the roof is than the kernel (``1 / roof_share``)."""
        return 1.0 / self.roof_share if self.roof_share else None


@dataclass(frozen=True)
class RuleFinding:
    """An ncu rule result with an estimated speedup, and the time it stands for.

    Attributes:
        kernel_id: ncu's ID of the kernel.
        kernel_name: The kernel's name.
        rule: The rule result.
        dur_ns: The kernel's duration, nanoseconds.
        savings_ns: ``dur_ns x estimated_speedup_pct / 100``; for a ``local`` estimate this is
            an upper bound (the estimate is for the part of the kernel the rule looks at).
    """

    kernel_id: int
    kernel_name: str
    rule: NcuRule
    dur_ns: float
    savings_ns: float


@dataclass(frozen=True)
class RooflineAnalysis:
    """Every kernel of an ncu export on its roofline, and ncu's findings ranked by time.

    Attributes:
        path: The CSV file.
        page: ``"details"`` or ``"raw"``.
        kernels: In file order.
        findings: Ranked by ``savings_ns``, largest first.
        warnings: What the reader or the analysis could not use, in words.
        skipped_lines: Lines of the file outside the CSV table (``==PROF==``, program output).
    """

    path: str
    page: str
    kernels: tuple[KernelRoofline, ...]
    findings: tuple[RuleFinding, ...]
    warnings: tuple[str, ...]
    skipped_lines: int = 0

    @property
    def roofs(self) -> tuple[Roof, ...]:
        """The distinct roofs, in order of first use."""
        return tuple(dict.fromkeys(k.roof for k in self.kernels))


def _cc_candidates(cc: str) -> list[GpuSpec]:
    prefixes = CC_GPUS.get(cc.strip(), ())
    return [s for s in all_gpus() if any(s.key == p or s.key.startswith(p + "-") for p in prefixes)]


def resolve_roof(
    kernel: NcuKernel,
    path: str,
    gpu: str | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> Roof:
    """The peaks for a kernel: ``gpu``, else ncu's device name, else a unique compute capability.

    Args:
        kernel: The kernel (its device name and CC are used).
        path: The CSV file, for messages.
        gpu: A GPU name the hardware table knows (``"T4"``, ``"NVIDIA A100-SXM4-80GB"``).
        peak_tflops: A compute peak, TFLOP/s, that replaces the table's for every precision.
        peak_gbps: A DRAM bandwidth peak, GB/s, that replaces the table's.

    Raises:
        UsageError: ``gpu`` is unknown, a peak is not positive, or the GPU cannot be told and
            the two peaks are not both given.
    """
    for name, value in (("--peak-tflops", peak_tflops), ("--peak-gbps", peak_gbps)):
        if value is not None and not value > 0:
            raise UsageError(f"{name} must be positive, got {value}")
    known = ", ".join(s.key for s in all_gpus())
    spec: GpuSpec | None = None
    how = ""
    if gpu is not None:
        spec = lookup_gpu(gpu, warn=False)
        if spec is None:
            raise UsageError(f"--gpu {gpu!r}: not in badput's hardware table (known: {known})")
        how = f"--gpu {gpu}"
    names = [n for n in (kernel.device_name, kernel.device) if n and not n.isdigit()]
    for name in names if spec is None else ():
        spec = lookup_gpu(name, warn=False)
        if spec is not None:
            how = f"by device name {name!r}"
            break
    candidates: list[GpuSpec] = []
    if spec is None and kernel.cc:
        candidates = _cc_candidates(kernel.cc)
        if len(candidates) == 1:
            spec = candidates[0]
            how = f"by compute capability {kernel.cc}, the table's only CC {kernel.cc} GPU"
    if spec is None:
        if peak_tflops is not None and peak_gbps is not None:
            return Roof("custom", None, "--peak-tflops/--peak-gbps", peak_gbps, peak_tflops)
        device = names[0] if names else f"device {kernel.device or '?'}"
        cc = f", compute capability {kernel.cc}" if kernel.cc else ""
        if len(candidates) > 1:
            why = f"several GPUs of the table have CC {kernel.cc}: " + ", ".join(
                s.key for s in candidates
            )
        else:
            why = "not in badput's hardware table"
        raise UsageError(
            f"{path}: unknown GPU ({device}{cc}; {why}); pass --gpu NAME (known: {known}) "
            "or both --peak-tflops and --peak-gbps"
        )
    if peak_tflops is not None or peak_gbps is not None:
        how += " with " + " and ".join(
            n for n, v in (("--peak-tflops", peak_tflops), ("--peak-gbps", peak_gbps)) if v
        )
    return Roof(
        spec.key, spec, how, peak_gbps if peak_gbps is not None else spec.memory_bw_gbs, peak_tflops
    )


def _name_precision(name: str) -> tuple[str, str] | None:
    low = name.lower()
    for precision, pattern in _NAME_PRECISION:
        if (m := pattern.search(low)) is not None:
            return precision, m.group(0)
    return None


def _precision(kernel: NcuKernel, roof: Roof) -> tuple[str, str, str]:
    """The roof precision of a kernel, why (in words), and which decider chose it.

    Deciders, first confident one wins: the tensor-path op counters (their dominant source
    type); the tensor-pipe instruction counters (an MMA kind that fixes the type, else the
    kernel's name for it); the kernel's name, when the CSV has no tensor metric at all and the
    kernel is a matrix kernel or has no FLOPs counted; the SASS FP counters' dominant class;
    else fp32.
    """
    ops = {p: v for p, v in (kernel.tensor_ops or {}).items() if v > 0}
    if ops:
        top = max(ops, key=lambda p: ops[p])
        total = sum(ops.values())
        source = kernel.sources.get("tensor_ops", "sm__ops_path_tensor_src_*")
        return (
            top,
            f"tensor-core ops {100 * ops[top] / total:.1f} % {top} ({source})",
            "tensor op counters",
        )
    named = _name_precision(kernel.name)
    if kernel.tensor_pipe_used:
        kinds = kernel.tensor_kinds
        for kind in kinds:
            if kind in _KIND_PRECISION:
                return (
                    _KIND_PRECISION[kind],
                    f"tensor-pipe {kind} instructions executed",
                    "tensor pipe",
                )
        pipe = f"tensor-pipe {'/'.join(kinds)} instructions" if kinds else "tensor-pipe work"
        if named is not None and named[0] in _TENSOR_PRECISIONS:
            return named[0], f"{pipe}; type {named[0]} from the name ('{named[1]}')", "tensor pipe"
        return (
            "tensor",
            (f"{pipe} of a type the CSV does not tell: drawn against the FP16 tensor-core peak"),
            "tensor pipe",
        )
    counted = sum((kernel.flops or {}).values()) > 0
    matrix = _MATRIX_NAME.search(kernel.name.lower()) is not None
    if named is not None and kernel.tensor_pipe_used is None and (matrix or not counted):
        return (
            named[0],
            f"kernel name ('{named[1]}'); the CSV has no tensor-pipe metric to confirm it",
            "kernel name",
        )
    flops = kernel.flops or {}
    total = sum(flops.values())
    if total > 0:
        dominant = max(flops, key=lambda c: flops[c])
        note = f"dominant FLOP type {dominant} ({100 * flops[dominant] / total:.1f} % of FLOPs)"
        if dominant == "fp16" and roof.peak_tflops_override is None:
            note += "; the table's fp16 peak is the tensor-core rate (CUDA-core FP16 is lower)"
        return dominant, note, "FLOP counters"
    if kernel.flops is None:
        return "fp32", "no FLOP counters and no type in the name: fp32 assumed", "default"
    return "fp32", "no FLOPs counted: drawn against the fp32 roof", "default"


def _latency(kernel: NcuKernel) -> str | None:
    """The latency-bound verdict in words when both SOL percentages are below ncu's 60 %."""
    compute, memory = kernel.sol_compute_pct, kernel.sol_memory_pct
    if compute is None or memory is None:
        return None
    if compute >= LATENCY_SOL_PCT or memory >= LATENCY_SOL_PCT:
        return None
    said = any(
        r.name == "SOLBottleneck" and "latency" in r.description.lower() for r in kernel.rules
    )
    return (
        f"SOL compute {compute:.1f} % and memory {memory:.1f} % are both below "
        f"{LATENCY_SOL_PCT:.0f} % of peak (ncu's SOLBottleneck rule"
        + (", which says so for this kernel" if said else "")
        + "): latency-bound, neither roof is near"
    )


def _place(kernel: NcuKernel, roof: Roof) -> KernelRoofline:
    precision, note, decider = _precision(kernel, roof)
    peak_tflops = roof.peak_tflops(precision)
    if peak_tflops is None and roof.spec is not None:
        note += f"; the hardware table has no {_TABLE_PRECISION[precision]} peak for {roof.label}"
    peak_flop_s = None if peak_tflops is None else peak_tflops * 1e12
    peak_bw = roof.peak_gbps * 1e9
    ridge = None if peak_flop_s is None else peak_flop_s / peak_bw
    bw = kernel.dram_bytes_per_s
    dram_share = None if bw is None else bw / peak_bw
    tensor_ops = sum((kernel.tensor_ops or {}).values())
    total = kernel.total_flops
    counted = tensor_ops > 0  # tensor math counted: the FLOP count is complete
    if counted:
        total = (total or 0.0) + tensor_ops
    achieved = kernel.flop_per_s
    if counted:
        achieved = total / (kernel.dur_ns * 1e-9) if kernel.dur_ns and total else None
    intensity = total / kernel.dram_bytes if total is not None and kernel.dram_bytes else None
    bound, basis = "unknown", "roofline"
    attainable: float | None = None
    share: float | None = None
    side: str | None = None
    bound_note = ""
    tensor_uncounted = not counted and (
        bool(kernel.tensor_pipe_used)
        or (decider == "kernel name" and precision in _TENSOR_PRECISIONS)
    )
    if tensor_uncounted and kernel.flops is not None:
        note += "; the counted FLOP/s are CUDA-core only (the SASS counters leave tensor math out)"
    if total is None or tensor_uncounted:
        # No FLOP count, or one that leaves the tensor-core math out: ncu's SOL decides.
        basis = "SOL"
        compute, memory = kernel.sol_compute_pct, kernel.sol_memory_pct
        if compute is not None and memory is not None:
            bound = "memory-bound" if memory >= compute else "compute-bound"
            share = dram_share if bound == "memory-bound" else None
            bound_note = f"SOL memory {memory:.1f} % vs compute {compute:.1f} %"
    elif total == 0:
        bound, basis, share = "memory-bound", "no FLOPs", dram_share
        bound_note = "no FLOPs counted"
    elif achieved is not None and peak_flop_s is not None and ridge is not None:
        if intensity is None and kernel.dram_bytes == 0:
            bound, attainable = "compute-bound", peak_flop_s  # no DRAM traffic at all
            bound_note = "no DRAM traffic"
        elif intensity is not None:
            bound = "memory-bound" if intensity < ridge else "compute-bound"
            attainable = min(peak_flop_s, intensity * peak_bw)
            bound_note = f"intensity {intensity:.3g} FLOP/B vs ridge {ridge:.3g}"
        if attainable:
            share = achieved / attainable
    if bound in ("memory-bound", "compute-bound") and basis != "SOL":
        side = bound.split("-")[0]
    if (latency := _latency(kernel)) is not None:
        bound, bound_note = "latency-bound", latency
    return KernelRoofline(
        kernel=kernel,
        roof=roof,
        precision=precision,
        precision_note=note,
        peak_tflops=peak_tflops,
        ridge_flop_per_byte=ridge,
        achieved_tflops=None if achieved is None else achieved / 1e12,
        dram_gbps=None if bw is None else bw / 1e9,
        arithmetic_intensity=intensity,
        bound=bound,
        bound_basis=basis,
        attainable_tflops=None if attainable is None else attainable / 1e12,
        roof_share=share,
        dram_share=dram_share,
        precision_basis=decider,
        bound_note=bound_note,
        roof_side=side,
    )


def analyze_roofline(
    report: NcuReport,
    gpu: str | None = None,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> RooflineAnalysis:
    """Place every kernel of an ncu export on its GPU's roofline; rank ncu's rule findings.

    Args:
        report: The export, from :func:`badput.trace.ncu.read_ncu_csv`.
        gpu: Override the GPU (a name the hardware table knows).
        peak_tflops: Override the compute peak, TFLOP/s (every precision).
        peak_gbps: Override the DRAM bandwidth peak, GB/s.

    Returns:
        The kernels on their rooflines and the findings, largest saving first.

    Raises:
        UsageError: a kernel's GPU cannot be told and the peaks are not both given.

    Example:
        >>> from badput.trace.ncu import read_ncu_csv
        >>> a = analyze_roofline(read_ncu_csv("copy_blocked.csv"))  # doctest: +SKIP
        >>> a.kernels[0].bound
        'memory-bound'
    """
    roofs: dict[tuple[str | None, str, str | None], Roof] = {}
    placed = []
    for kernel in report.kernels:
        key = (kernel.device_name, kernel.device, kernel.cc)
        if key not in roofs:
            roofs[key] = resolve_roof(kernel, report.path, gpu, peak_tflops, peak_gbps)
        placed.append(_place(kernel, roofs[key]))
    findings = [
        RuleFinding(
            kernel_id=k.id,
            kernel_name=k.name,
            rule=rule,
            dur_ns=k.dur_ns,
            savings_ns=k.dur_ns * rule.estimated_speedup_pct / 100,
        )
        for k in report.kernels
        if k.dur_ns is not None
        for rule in k.rules
        if rule.estimated_speedup_pct is not None and rule.estimated_speedup_pct > 0
    ]
    findings.sort(key=lambda f: (-f.savings_ns, -(f.rule.estimated_speedup_pct or 0.0)))
    warnings = list(report.warnings)
    missing = [k.id for k in report.kernels if k.dur_ns is None]
    if missing:
        warnings.append(
            f"{len(missing)} kernel(s) without a duration (IDs {missing[:5]}): "
            "collect the SpeedOfLight section or gpu__time_duration.sum"
        )
    return RooflineAnalysis(
        path=report.path,
        page=report.page,
        kernels=tuple(placed),
        findings=tuple(findings),
        warnings=tuple(warnings),
        skipped_lines=report.skipped_lines,
    )
