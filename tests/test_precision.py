"""Math precision of GEMM/convolution kernels (badput.analysis.precision) and `low-precision-math`.

The launching op's `Input type` decides where the trace records it; the kernel name only where
it does not. Names are parsed per library family, so that an FP32 *accumulator* (trtllm-gen's
`_Fp32_` after the input types, cuBLAS's `s16816gemm`, Tensile's `HHS`) is not read as FP32
math. Synthetic traces: steps of `STEP` us, whole microseconds from the trace base; the
what-if is exact (FP32 GEMM time x (1 - 1/2) per step), so savings are checked to the
nanosecond.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.analysis.patterns import kernel_category
from badput.analysis.precision import (
    FROM_NAME,
    FROM_TYPES,
    MatmulPrecisions,
    matmul_precisions,
    name_precision,
    types_precision,
)
from badput.analysis.tree import launch_tree
from badput.trace import load_trace
from badput.trace.model import EventKind, Trace
from synth import TraceBuilder, analyze_json

A100 = "NVIDIA A100-SXM4-80GB"
B200 = "NVIDIA B200"
MI300X = "AMD Instinct MI300X"
STEP = 1000  # us
BF16, FLOAT = "c10::BFloat16", "float"

# Kernel names as the libraries write them (see each family's comment in analysis/precision.py).
MX_BMM = (
    "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_Ab32_Bb32_Cb32_t128x128x256_s4_et128x32_m256x128x32_c2x1x1_rM"
    "_TN_transOut_schPd2x1x2x3_biasFp32M_fCp_bN_ldgsts_ldgstsSf_rgTma_clmp_swiGlu_dynB_sm100f"
)
SGEMM = "ampere_sgemm_128x64_nn"
BF16_GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
TF32_XMMA = (
    "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8"
)
TF32_CUTLASS = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x3_nn_align4>(P)"
TENSILE_HHS = "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0"
TENSILE_SB = "Cijk_Ailk_Bljk_SB_MT64x64x16_MI16x16x4x1_SN_1LDSB0_APM1_ABV0_ACED0"


# ---- the name deciders ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "precision", "scaling"),
    [
        # TensorRT-LLM trtllm-gen: <Out>_<A><B>_<Acc>; the Fp32 is the accumulator.
        (MX_BMM, "fp8", "mx"),
        ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_Ab32_Bb32_t128x8x512_s3_et128x8", "fp8", "mx"),
        ("bmm_E2m1_E2m1E2m1_Fp32_t128x64x256_s6_et128x64_m128x64x64", "fp4", "nvfp4"),
        ("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32", "fp8", None),
        ("GemmKernel_Bfloat16_E4m3_Fp32_tile128x128x128_epilogueTile128x64", "fp8", None),
        ("bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x64_s5", "bf16", None),
        # cuBLASLt nvjet: <A/B/C><compute><D>, or <A><B><C><compute><D>.
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "bf16", None),
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "fp16", None),
        ("nvjet_sss_tf32_128x256_TNT", "tf32", None),
        ("nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT", "fp8", None),
        (
            "nvjet_sm100_ootst_128x128_256x7_4x1_2cta_v_bx_Avec16UE4M3_Bvec16UE4M3_TNT",
            "fp4",
            "nvfp4",
        ),
        ("nvjet_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT", "fp8", "mx"),
        # cuBLAS / cuDNN xmma: <A><B>_<math><acc>.
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize256x64x8_stage3_ffma_aligna4",
            "fp32",
            None,
        ),
        (TF32_XMMA, "tf32", None),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
            "bf16",
            None,
        ),
        (
            "sm86_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64",
            "tf32",
            None,
        ),
        ("sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f16_f16_nhwckrsc_nhwc", "fp16", None),
        # CUTLASS 3.x: <A>_<B>_<acc>_<C>_<D>, block-scaled <sf>x<type>.
        (
            "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn",
            "bf16",
            None,
        ),
        (
            "cutlass3x_sm100_bstensorop_gemm_ue8m0xe4m3_ue8m0xe2m1_f32_void_bf16_128x128x256",
            "fp8",
            "mx",
        ),
        (
            "cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_f16_f16_256x192",
            "fp4",
            "nvfp4",
        ),
        ("cutlass3x_sm90_tensorop_gemm_f32_f32_f32_f32_f32_128x128x32_1x1x1_0_tnn", "tf32", None),
        # CUTLASS 2.x and cuBLAS/cuDNN: [type_]<acc><inst><kind>[_type].
        (TF32_CUTLASS, "tf32", None),
        ("cutlass_tensorop_s1688tf32gemm_256x128_16x3_nn_align4", "tf32", None),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(P)", "fp32", None),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6>",
            "bf16",
            None,
        ),
        ("cutlass_tensorop_h16816gemm_256x128_32x3_nn_align8", "fp16", None),
        (BF16_GEMM, "bf16", None),
        ("ampere_tf32_s1688gemm_tf32_128x128_16x4_nt", "tf32", None),
        (SGEMM, "fp32", None),
        ("volta_h884gemm_64x64_ldg8_nn", "fp16", None),
        ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "fp16", None),
        ("volta_scudnn_128x128_stridedB_splitK_small_nn_v1", "fp32", None),
        ("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", "fp16", None),
        (
            "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false>(int)",
            "fp32",
            None,
        ),
        # Tensile: Cijk_<A>_<B>_<A/B type>[<C/D type><compute type>_]<flags>.
        (TENSILE_HHS, "fp16", None),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1", "bf16", None),
        (TENSILE_SB, "fp32", None),
        ("Cijk_Alik_Bljk_F8B8BS_BH_MT256x256x128_MI16x16x1", "fp8", None),
        # Type words: templates, DeepGEMM, CK.
        (
            "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, float const*)",
            "fp32",
            None,
        ),
        (
            "void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 128u>(float*, int*)",
            "fp8",
            None,
        ),
        ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::half_t, ck::half_t, float>(P)", "fp16", None),
        ("gemm<cutlass::bfloat16_t, float>(P)", "bf16", None),
    ],
)
def test_name_precision(name: str, precision: str, scaling: str | None) -> None:
    found = name_precision(name)
    assert found is not None
    assert (found.precision, found.scaling) == (precision, scaling)


@pytest.mark.parametrize(
    "name", ["triton_tem_fused_mm_0", "gemm_kernel", "volta_cgemm_32x32_tn", "nvjet_xyz_64x8"]
)
def test_names_without_a_type_give_nothing(name: str) -> None:
    assert name_precision(name) is None


# ---- the Input type decider -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "types", "precision", "scaling"),
    [
        ("aten::mm", [FLOAT, FLOAT], "fp32", None),
        # addmm's bias (argument 0) does not set the math precision.
        ("aten::addmm", [FLOAT, BF16, BF16, "Scalar", "Scalar"], "bf16", None),
        ("aten::addmm", [BF16, FLOAT, FLOAT, "Scalar", "Scalar"], "fp32", None),
        # _scaled_mm: FP8 operands, FP32 scales.
        (
            "aten::_scaled_mm",
            ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", FLOAT, FLOAT],
            "fp8",
            None,
        ),
        # MXFP8 x MXFP4 runs at the FP8 rate; E8M0 scales mark MX.
        (
            "aten::_scaled_mm",
            [
                "c10::Float8_e4m3fn",
                "c10::Float4_e2m1fn_x2",
                "c10::Float8_e8m0fnu",
                "c10::Float8_e8m0fnu",
            ],
            "fp8",
            "mx",
        ),
        (
            "aten::_scaled_mm",
            [
                "c10::Float4_e2m1fn_x2",
                "c10::Float4_e2m1fn_x2",
                "c10::Float8_e4m3fn",
                "c10::Float8_e4m3fn",
            ],
            "fp4",
            "nvfp4",
        ),
        (
            "aten::cudnn_convolution_backward_weight",
            ["GenericList", FLOAT, FLOAT, "Int"],
            "fp32",
            None,
        ),
        # An op badput does not know: the narrowest floating type (the quantized operand).
        (
            "trtllm::fp8_gemm",
            [BF16, "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", FLOAT],
            "fp8",
            None,
        ),
        ("my::gemm", [FLOAT, FLOAT, "Scalar"], "fp32", None),
    ],
)
def test_types_precision(op: str, types: list[str], precision: str, scaling: str | None) -> None:
    found = types_precision(op, types)
    assert found is not None and found.source == FROM_TYPES
    assert (found.precision, found.scaling) == (precision, scaling)
    assert found.evidence == f"Input type of {op}: {', '.join(types)}"


@pytest.mark.parametrize(
    "types", [None, "float", [], ["unsigned char", "unsigned char", "int"], ["Scalar", ""]]
)
def test_types_without_a_floating_tensor_give_nothing(types: Any) -> None:
    assert types_precision("aten::mm", types) is None


# ---- synthetic traces ---------------------------------------------------------------------------


def _typed(op: dict[str, Any], types: list[str]) -> None:
    op.setdefault("args", {}).update({"Input Dims": [[64, 64] for _ in types], "Input type": types})


def gemm_trace(
    gpu: str,
    first: str,
    second: str,
    *,
    types: tuple[list[str] | None, list[str] | None] = (None, None),
    op: str = "aten::mm",
    steps: int = 5,
    extra_ops: tuple[str, ...] = (),
    api: str | None = None,
) -> TraceBuilder:
    """`steps` GPU steps [s, s+1000); in each, `first` runs [s, s+600) and `second`
    [s+600, s+1000), each launched 10 us ahead from inside an op `op` (with `Input type`
    `types[i]`, none if None)."""
    b = TraceBuilder()
    b.device_properties([0], name=gpu)
    for k in range(steps):
        s = 100 + k * STEP
        # The CPU step runs 20 us ahead of the GPU step: it launches exactly that step's work.
        b.profiler_step(k + 1, s - 20, s + STEP - 20)
        b.profiler_step(k + 1, s, s + STEP, gpu=True)
        for g0, g1, name, typ in (
            (s, s + 600, first, types[0]),
            (s + 600, s + 1000, second, types[1]),
        ):
            host = b.cpu_op(op, g0 - 12, g0 - 6)
            if typ is not None:
                _typed(host, typ)
            b.launch(name, cpu=(g0 - 10, g0 - 8), gpu=(g0, g1), api=api)
        for i, extra in enumerate(extra_ops):
            b.cpu_op(extra, s + 900 + 10 * i, s + 905 + 10 * i)
    return b


def _report(b: TraceBuilder, tmp_path: Path, capsys: Any) -> dict[str, Any]:
    return analyze_json(capsys, b.write(tmp_path / "t.json"))


def _finding(report: dict[str, Any]) -> dict[str, Any] | None:
    found = [f for f in report["findings"] if f["id"] == "low-precision-math"]
    assert len(found) <= 1
    return found[0] if found else None


def _ev(f: dict[str, Any], key: str) -> Any:
    return f["evidence"][key]["value"]


def _precisions(b: TraceBuilder, tmp_path: Path) -> tuple[Trace, MatmulPrecisions]:
    trace = load_trace(str(b.write(tmp_path / "p.json")))
    return trace, matmul_precisions(trace, launch_tree(trace))


def test_mx_fp8_gemm_with_an_fp32_accumulator_name_is_no_finding(
    tmp_path: Path, capsys: Any
) -> None:
    # No Input type: the name decides, and its Fp32 comes after the input types.
    b = gemm_trace(B200, MX_BMM, MX_BMM)
    assert _finding(_report(b, tmp_path, capsys)) is None
    _, pre = _precisions(b, tmp_path)
    assert len(pre) == 10 and len(pre.decisions) == 1  # one decision per distinct pair
    (d,) = pre.decisions
    assert (d.precision, d.source, d.scaling) == ("fp8", FROM_NAME, "mx")
    assert d.evidence == "kernel name `MxE2m1/MxE4m3` (trtllm-gen)"


def test_types_decide_over_the_name(tmp_path: Path, capsys: Any) -> None:
    # The same kernel, its op recorded with bf16 inputs: no finding, decided by the types.
    b = gemm_trace(B200, MX_BMM, MX_BMM, types=([BF16, BF16], [BF16, BF16]))
    assert _finding(_report(b, tmp_path, capsys)) is None
    _, pre = _precisions(b, tmp_path)
    (d,) = pre.decisions
    assert (d.precision, d.source, d.op) == ("bf16", FROM_TYPES, "aten::mm")
    assert d.evidence == "Input type of aten::mm: c10::BFloat16, c10::BFloat16"
    # And an FP32-looking name (sgemm) under a bf16-typed op is no FP32 math either.
    b = gemm_trace(A100, SGEMM, SGEMM, types=([BF16, BF16], [BF16, BF16]))
    assert _finding(_report(b, tmp_path, capsys)) is None


def test_fp32_sgemm_typed_float_on_an_a100(tmp_path: Path, capsys: Any) -> None:
    # 600 us of FP32 sgemm per step (aten::mm on float tensors), 400 us of bf16 GEMM.
    # A100: fp32 19.5, tf32 156, bf16 312 TFLOP/s; speed-up min(2, 312/19.5) = 2.
    # Savings = 600 x (1 - 1/2) = 300 us per step, 30 % of the 1000 us step: high.
    b = gemm_trace(A100, SGEMM, BF16_GEMM, types=([FLOAT, FLOAT], [BF16, BF16]))
    report = _report(b, tmp_path, capsys)
    f = _finding(report)
    assert f is not None
    assert f["savings_us"] == pytest.approx(300.0, abs=0.001)
    assert f["severity"] == "high"
    assert f["title"] == (
        "0.6 ms per step of GEMM/convolution in FP32 on a A100-SXM-80GB with tensor cores"
    )
    assert _ev(f, "fp32_matmul_time_per_step") == 0.6
    assert _ev(f, "share_of_compute") == 60.0
    assert _ev(f, "assumed_speedup") == 2.0
    assert _ev(f, "decided_by") == "Input type: 3.000 ms in 5 kernels"
    assert _ev(f, "ops") == "Input type of aten::mm: float, float"
    assert _ev(f, "top_kernels") == SGEMM
    assert "name_evidence" not in f["evidence"]
    # No backward or optimizer op: inference, so bf16 weights come first.
    assert _ev(f, "workload").startswith("inference: ")
    assert f["fix"][0].startswith("Run inference in bf16: model.to(torch.bfloat16)")
    assert "set_float32_matmul_precision('high')" in f["fix"][1]


def test_training_gets_tf32_and_autocast(tmp_path: Path, capsys: Any) -> None:
    b = gemm_trace(
        A100,
        SGEMM,
        BF16_GEMM,
        types=([FLOAT, FLOAT], [BF16, BF16]),
        extra_ops=("autograd::engine::evaluate_function: MmBackward0", "Optimizer.step#SGD.step"),
    )
    f = _finding(_report(b, tmp_path, capsys))
    assert f is not None and f["savings_us"] == pytest.approx(300.0, abs=0.001)
    assert _ev(f, "workload") == (
        "training: 5 backward ops (e.g. autograd::engine::evaluate_function: MmBackward0); "
        "5 optimizer ops (e.g. Optimizer.step#SGD.step)"
    )
    assert f["fix"][0].startswith("Allow TF32 for matmuls")
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in f["fix"][1]


@pytest.mark.parametrize("kernel", [TF32_XMMA, TF32_CUTLASS])
def test_float_op_on_tf32_tensor_cores_is_no_finding(
    kernel: str, tmp_path: Path, capsys: Any
) -> None:
    b = gemm_trace(A100, kernel, kernel, types=([FLOAT, FLOAT], [FLOAT, FLOAT]))
    assert _finding(_report(b, tmp_path, capsys)) is None
    _, pre = _precisions(b, tmp_path)
    (d,) = pre.decisions
    assert (d.precision, d.source) == ("tf32", FROM_TYPES)
    assert d.evidence.startswith("Input type of aten::mm: float, float; kernel name `")
    assert d.evidence.endswith("runs them on TF32 tensor cores")


def test_without_types_the_name_decides_both_ways(tmp_path: Path, capsys: Any) -> None:
    b = gemm_trace(A100, SGEMM, BF16_GEMM)  # ops, but no Input type
    f = _finding(_report(b, tmp_path, capsys))
    assert f is not None and f["savings_us"] == pytest.approx(300.0, abs=0.001)
    assert _ev(f, "decided_by") == "kernel name (no usable Input type): 3.000 ms in 5 kernels"
    assert _ev(f, "name_evidence") == "kernel name `sgemm` (cuBLAS/cuDNN)"
    assert "ops" not in f["evidence"]
    b = gemm_trace(A100, BF16_GEMM, "bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8")
    assert _finding(_report(b, tmp_path, capsys)) is None


def test_a_graph_launch_takes_no_op_types(tmp_path: Path, capsys: Any) -> None:
    # The op around a cudaGraphLaunch is not the op of the kernels the graph runs.
    b = gemm_trace(A100, SGEMM, SGEMM, types=([BF16, BF16], [BF16, BF16]), api="cudaGraphLaunch")
    _, pre = _precisions(b, tmp_path)
    (d,) = pre.decisions
    assert (d.precision, d.source) == ("fp32", FROM_NAME)
    f = _finding(_report(b, tmp_path, capsys))
    assert f is not None and f["savings_us"] == pytest.approx(500.0, abs=0.001)


@pytest.mark.parametrize(
    ("kernel", "fires"),
    [
        (TENSILE_HHS, False),
        pytest.param(
            TENSILE_SB,
            True,
            # Tensile GEMMs join the "gemm" category with issue 18's kernel classes
            # (analysis/patterns.py); until then the rule does not look at them.
            marks=pytest.mark.xfail(
                kernel_category(TENSILE_SB) != "gemm", reason="Cijk_ not gemm yet", strict=True
            ),
        ),
    ],
)
def test_tensile_names(kernel: str, fires: bool, tmp_path: Path, capsys: Any) -> None:
    # MI300X: fp32 163.4, bf16 1307.4 TFLOP/s. Tensile HHS: fp16 inputs, FP32 compute.
    b = gemm_trace(MI300X, kernel, kernel)
    f = _finding(_report(b, tmp_path, capsys))
    if not fires:
        assert f is None
        return
    # 1000 us of FP32 Tensile GEMM per step: 500 us saved per step.
    assert f is not None and f["savings_us"] == pytest.approx(500.0, abs=0.001)
    assert _ev(f, "name_evidence") == "kernel name `Cijk_Ailk_Bljk_S` (Tensile)"


def test_title_says_in_the_window_without_steps(tmp_path: Path, capsys: Any) -> None:
    b = TraceBuilder()
    b.device_properties([0], name=A100)
    op = b.cpu_op("aten::mm", 0, 8)
    _typed(op, [FLOAT, FLOAT])
    b.launch(SGEMM, cpu=(2, 4), gpu=(10, 1010))
    f = _finding(_report(b, tmp_path, capsys))
    assert f is not None
    assert f["title"] == (
        "1.0 ms in the window of GEMM/convolution in FP32 on a A100-SXM-80GB with tensor cores"
    )
    assert f["savings_us"] == pytest.approx(500.0, abs=0.001)


# ---- real traces ------------------------------------------------------------------------------


def test_tracelens_qwen_types_decide(shared_traces: Path, capsys: Any) -> None:
    """Qwen1.5-0.5B on an H100, recorded with shapes: every GEMM with an op is bf16 by its
    Input type, except one FP32 `aten::bmm` (float, float; CUTLASS simt sgemm, 3.52 us).
    GEMMs launched outside any op fall back to their names (sm90 xmma bf16). The FP32 bmm
    would save 1.76 us of a ~36 ms step: far below the 1 % floor, no finding."""
    path = shared_traces / "tracelens-h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    trace = load_trace(str(path))
    pre = matmul_precisions(trace, launch_tree(trace))
    ns: dict[tuple[str | None, str | None], int] = {}
    for r, d in zip(pre.row.tolist(), pre.decision.tolist(), strict=True):
        key = (pre.decisions[d].precision, pre.decisions[d].source)
        ns[key] = ns.get(key, 0) + int(trace.dur_ns[r])
    assert ns == {
        ("bf16", FROM_TYPES): 8_854_707,
        ("bf16", FROM_NAME): 3_935_211,
        ("fp32", FROM_TYPES): 3_520,
    }
    fp32 = [d for d in pre.decisions if d.precision == "fp32"]
    assert [d.evidence for d in fp32] == ["Input type of aten::bmm: float, float"]
    report = analyze_json(capsys, path)
    assert _finding(report) is None


@pytest.mark.parametrize(
    "name",
    [
        "Falconsai_nsfw_image_detection__1016002.json.gz",
        "gaunernst_bert-small-uncased__1016001.json.gz",
    ],
)
def test_tracelens_bf16_models(name: str, shared_traces: Path) -> None:
    trace = load_trace(str(shared_traces / "tracelens-h100" / name))
    pre = matmul_precisions(trace, launch_tree(trace))
    assert len(pre) > 0
    assert {(d.precision, d.source) for d in pre.decisions} == {("bf16", FROM_TYPES)}


def test_resnet50_fp32_convolutions(shared_traces: Path, capsys: Any) -> None:
    """ResNet50 training on a V100 (2021, FP32): every GEMM/convolution kernel's op records
    `float` inputs, so the types decide all of them and the finding stays. Its time is the
    union of the window's GEMM-category kernels on GPU 0, summed here directly; the savings
    are half of it per step (V100: min(2, 125 / 15.7) = 2)."""
    from badput.analysis.device import analyze_trace
    from badput.analysis.intervals import IntervalSet

    path = shared_traces / "kineto-resnet50" / "worker0.1623143089861.pt.trace.json.gz"
    trace = load_trace(str(path))
    pre = matmul_precisions(trace, launch_tree(trace))
    assert {(d.precision, d.source) for d in pre.decisions} == {("fp32", FROM_TYPES)}
    d0 = analyze_trace(trace)[0]
    w0, w1 = d0.window_start_ns, d0.window_start_ns + d0.window_ns
    rows = np.flatnonzero(
        (trace.kind == EventKind.KERNEL)
        & (trace.device == 0)
        & (trace.ts_ns >= w0)
        & (trace.ts_ns < w1)
        & trace.name_mask(lambda n: kernel_category(n) == "gemm")[trace.name_id]
    )
    union_ns = IntervalSet.from_spans(trace.ts_ns[rows], trace.end_ns[rows]).total_ns()
    n_steps = len(d0.steps)
    assert n_steps == 6

    f = _finding(analyze_json(capsys, path))
    assert f is not None and f["severity"] == "high"
    assert _ev(f, "fp32_matmul_time_per_step") == round(union_ns / n_steps / 1e6, 3)
    assert f["savings_us"] == pytest.approx(union_ns / n_steps / 2 / 1e3, abs=0.001)
    assert _ev(f, "decided_by") == (
        f"Input type: {trace.dur_ns[rows].sum() / 1e6:,.3f} ms in {rows.shape[0]} kernels"
    )
    ops = [text.split(": ")[0] for text in _ev(f, "ops").split("; ")]
    assert ops == [
        "Input type of aten::cudnn_convolution_backward_weight",
        "Input type of aten::cudnn_convolution_backward_input",
        "Input type of aten::cudnn_convolution",
    ]
    assert _ev(f, "workload") == (
        "training: 2034 backward ops (e.g. NllLossBackward); "
        "12 optimizer ops (e.g. Optimizer.zero_grad#SGD.zero_grad)"
    )
    assert "torch.float16" in f["fix"][0] and "GradScaler" in f["fix"][0]  # no bf16 or TF32


def test_hta_mi250(shared_traces: Path, capsys: Any) -> None:
    """MI250 (ROCm 6.2): its Tensile GEMMs (`Cijk_..._SB_...`) are FP32 by name and by their
    ops' Input type (aten::addmm / aten::mm on float); the GPU ("AMD Radeon Graphics") is not in
    the hardware table, so no peaks to compare and no finding."""
    path = shared_traces / "hta-amd-mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    trace = load_trace(str(path))
    tensile = [n for n in trace.names if n.startswith("Cijk_")]
    assert len(tensile) == 2
    for n in tensile:
        found = name_precision(n)
        assert found is not None and (found.precision, found.family) == ("fp32", "Tensile")
    pre = matmul_precisions(trace, launch_tree(trace))
    for r, d in zip(pre.row.tolist(), pre.decision.tolist(), strict=True):
        if trace.name_of(r).startswith("Cijk_"):
            assert (pre.decisions[d].precision, pre.decisions[d].source) == ("fp32", FROM_TYPES)
    assert _finding(analyze_json(capsys, path)) is None


def test_name_mask_of_rows_tests_only_their_names() -> None:
    # `Trace.name_mask(predicate, rows)`: the names those rows use, tested once each, the same
    # answer as over every name there; names no such row uses stay False, untested.
    dlrm = "param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz"
    trace = load_trace(str(Path(__file__).parent / "data" / "traces" / dlrm))
    kernels = np.flatnonzero(trace.kind == EventKind.KERNEL)
    seen: list[str] = []

    def gemm(n: str) -> bool:
        seen.append(n)
        return kernel_category(n) == "gemm"

    mask = trace.name_mask(gemm, kernels)
    used = np.unique(trace.name_id[kernels])
    assert len(seen) == used.shape[0] < len(trace.names) // 2  # each kernel name once
    whole = trace.name_mask(lambda n: kernel_category(n) == "gemm")
    np.testing.assert_array_equal(mask[used], whole[used])
    assert int(whole[used].sum()) > 0 and not mask[np.setdiff1d(np.arange(len(mask)), used)].any()
    rows = trace.rows_named(kernels, lambda n: kernel_category(n) == "gemm")
    np.testing.assert_array_equal(rows, kernels[whole[trace.name_id[kernels]]])
