"""The model view (badput.analysis.ops): op rows, modules, roofline, MFU waterfall, by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import badput.analysis.ops as ops_module
from badput.analysis.device import analyze_trace
from badput.analysis.ops import NO_MODULE, STAGES, ModelAnalysis, OpRow
from badput.analysis.tree import LaunchTree, launch_tree
from badput.estimate.hardware import lookup_gpu
from badput.trace import load_trace
from badput.trace.model import Trace
from conftest import SHARED_TRACES
from synth import H100, US, TraceBuilder, run_cli

BF16 = "c10::BFloat16"
H100_SPEC = lookup_gpu(H100)
assert H100_SPEC is not None
PEAK_BF16 = H100_SPEC.peak("bf16")
assert PEAK_BF16 is not None


def _shapes(event: dict[str, Any], dims: Any, types: Any, concrete: Any = None) -> None:
    args = event.setdefault("args", {})
    args["Input Dims"] = dims
    args["Input type"] = types
    args["Input Strides"] = [[] for _ in dims] if isinstance(dims, list) else []
    if concrete is None and isinstance(dims, list):
        concrete = ["" for _ in dims]
    args["Concrete Inputs"] = concrete


def _model(b: TraceBuilder, tmp_path: Path, name: str = "t.json") -> ModelAnalysis:
    b.device_properties([0])
    trace = load_trace(str(b.write(tmp_path / name)))
    model = analyze_trace(trace)[0].model
    assert model is not None
    return model


def _op(m: ModelAnalysis, name: str) -> OpRow:
    rows = [r for r in m.ops if r.op == name]
    assert len(rows) == 1, [r.op for r in m.ops]
    return rows[0]


def _mm(
    b: TraceBuilder,
    at: int,
    m: int,
    k: int,
    n: int,
    gpu: tuple[int, int],
    *,
    types: tuple[str, str] = (BF16, BF16),
    kernel: str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
    linear: bool = True,
) -> None:
    if linear:
        _shapes(b.cpu_op("aten::linear", at, at + 40), [[m, k], [n, k]], list(types))
    _shapes(b.cpu_op("aten::mm", at + 5, at + 35), [[m, k], [k, n]], list(types))
    b.launch(kernel, cpu=(at + 10, at + 20), gpu=gpu)


# ---- which op the GPU time belongs to -----------------------------------------------------------


def test_gpu_time_goes_to_the_outermost_modelled_op_composites_last(tmp_path: Path) -> None:
    b = TraceBuilder()
    _mm(b, 0, 64, 128, 256, (100, 110))
    # SDPA: the public op, the flash wrapper (modelled) and the launching op (also modelled).
    q = [[2, 4, 32, 64], [2, 4, 32, 64], [2, 4, 32, 64], [], [], [], [], []]
    types = [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", "", ""]
    conc = ["", "", "", "0.0", "True", "False", "", ""]
    _shapes(b.cpu_op("aten::scaled_dot_product_attention", 200, 300), q[:3], types[:3])
    _shapes(
        b.cpu_op("aten::_scaled_dot_product_flash_attention", 205, 295), q[:6], types[:6], conc[:6]
    )
    _shapes(b.cpu_op("aten::_flash_attention_forward", 210, 290), q[:3], types[:3])
    b.launch("flash_fwd_kernel", cpu=(220, 230), gpu=(300, 340))
    b.cpu_op("aten::_flash_attention_forward", 250, 260)  # (no launch: not a call row)
    # An op nobody models: the innermost op launching it.
    b.cpu_op("aten::index", 400, 450)
    b.cpu_op("aten::nonzero", 410, 440)
    b.launch("nonzero_kernel", cpu=(420, 425), gpu=(450, 455))
    m = _model(b, tmp_path)
    assert [r.op for r in m.ops] == [
        "aten::_scaled_dot_product_flash_attention",
        "aten::mm",
        "aten::nonzero",
    ]
    sdpa, mm, nz = m.ops
    assert sdpa.kernel_ns == 40 * US and sdpa.count == 1 and sdpa.category == "SDPA_fwd"
    # FLOPs of causal attention: 4 * B * H * N_q * N_kv * d / 2 (see docs/opmodel.md).
    assert sdpa.flops == 4 * 2 * 4 * 32 * 32 * 64 / 2
    assert mm.flops == 2 * 64 * 128 * 256 and mm.input_dims == [[64, 128], [128, 256]]
    assert mm.input_types == [BF16, BF16] and mm.precision == "bf16"
    assert nz.flops is None and nz.reason == "unknown op" and nz.kernels == ["nonzero_kernel"]
    assert m.unmodelled == {"unknown op": 5 * US}
    assert m.attributed_ns == (10 + 40 + 5) * US and m.unattributed_ns == 0


def test_perf_ops_found_once_per_tree_for_any_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = TraceBuilder()
    _mm(b, 0, 64, 128, 256, (100, 110))
    b.cpu_op("aten::index", 400, 450)
    b.cpu_op("aten::nonzero", 410, 440)
    b.launch("nonzero_kernel", cpu=(420, 425), gpu=(450, 455))
    b.device_properties([0])
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    tree = launch_tree(trace)
    calls: list[int] = []
    real = ops_module._perf_ops_of_all

    def spy(t: Trace, tr: LaunchTree) -> Any:
        calls.append(1)
        return real(t, tr)

    monkeypatch.setattr(ops_module, "_perf_ops_of_all", spy)
    every = ops_module.perf_ops(trace, tree, np.arange(len(tree)))
    names = [trace.names[int(trace.name_id[r])] for r in every.tolist()]
    assert names == ["aten::mm", "aten::nonzero"]
    assert ops_module.perf_ops(trace, tree, np.array([1])).tolist() == [every[1]]
    assert len(calls) == 1  # the second ask is served from the first
    again = load_trace(str(tmp_path / "t.json"))  # another trace: found anew
    assert ops_module.perf_ops(again, tree, np.array([0, 1])).tolist() == every.tolist()
    assert len(calls) == 2


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_an_ops_kernels_with_equal_time_go_by_name(tmp_path: Path, seed: int | None) -> None:
    # One op's kernels, most time first; equal times by name (the file's order of first
    # appearance, which interned ids follow, decides nothing).
    b = TraceBuilder()
    b.cpu_op("aten::nonzero", 0, 100)
    b.launch("z_kernel", cpu=(10, 20), gpu=(200, 210))
    b.launch("a_kernel", cpu=(30, 40), gpu=(220, 230))
    b.launch("m_kernel", cpu=(50, 60), gpu=(240, 260))
    b.device_properties([0])
    trace = load_trace(str(b.write(tmp_path / f"t{seed}.json", shuffle=seed)))
    model = analyze_trace(trace)[0].model
    assert model is not None
    assert _op(model, "aten::nonzero").kernels == ["m_kernel", "a_kernel", "z_kernel"]


def test_rows_group_calls_by_op_dims_and_types(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        _mm(b, 100 * i, 64, 128, 256, (1000 + 20 * i, 1010 + 20 * i))
    _mm(b, 300, 64, 128, 512, (1100, 1130))  # other shapes: other row
    _mm(b, 400, 64, 128, 256, (1200, 1205), types=("float", "float"))  # other dtype
    m = _model(b, tmp_path)
    rows = {(r.op, str(r.input_dims), tuple(r.input_types)): r for r in m.ops}
    assert len(rows) == 3
    three = rows[("aten::mm", "[[64, 128], [128, 256]]", (BF16, BF16))]
    assert three.count == 3 and three.kernel_ns == 30 * US
    # TFLOP/s = FLOPs x calls / kernel time.
    assert three.tflops_per_s == pytest.approx(2 * 64 * 128 * 256 * 3 / (30 * US) / 1e3)
    assert rows[("aten::mm", "[[64, 128], [128, 256]]", ("float", "float"))].precision == "fp32"
    assert [r.kernel_ns for r in m.ops] == sorted((r.kernel_ns for r in m.ops), reverse=True)


# ---- precision from Input type, not the kernel name ---------------------------------------------


@pytest.mark.parametrize(
    ("types", "precision"),
    [
        ((BF16, BF16), "bf16"),
        (("c10::Half", "c10::Half"), "fp16"),
        (("c10::Float8_e4m3fn", "c10::Float8_e4m3fn"), "fp8"),
    ],
)
def test_precision_comes_from_input_type(
    tmp_path: Path, types: tuple[str, str], precision: str
) -> None:
    b = TraceBuilder()
    # The name says f32 (the accumulator): the recorded input types decide.
    _mm(b, 0, 256, 256, 256, (100, 110), types=types, kernel="gemm_f32_f32_f32_tn_128x128")
    m = _model(b, tmp_path)
    row = _op(m, "aten::mm")
    assert row.precision == precision
    assert m.efficiency.precision == precision
    assert row.bound in ("compute", "memory")
    peak = H100_SPEC.peak(precision)
    assert peak is not None and m.efficiency.peak_tflops == peak


def test_scaled_mm_fp8_precision(tmp_path: Path) -> None:
    b = TraceBuilder()
    fp8 = "c10::Float8_e4m3fn"
    op = b.cpu_op("aten::_scaled_mm", 0, 40)
    _shapes(
        op,
        [[128, 256], [256, 512], [], [], [], [], [], []],
        [fp8, fp8, "float", "float", "", "", "", "Scalar"],
    )
    b.launch("sm90_xmma_gemm_e4m3e4m3_f32_f32_bf16", cpu=(10, 20), gpu=(100, 104))
    row = _op(_model(b, tmp_path), "aten::_scaled_mm")
    assert row.precision == "fp8" and row.flops == 2 * 128 * 256 * 512


# ---- CUDA graphs and backward -------------------------------------------------------------------


def test_graph_replay_is_attributed_to_the_op_around_the_launch_and_counted_in_steps(
    tmp_path: Path,
) -> None:
    b = TraceBuilder()
    for step in range(3):  # the last step is left out as incompletely captured
        t0 = 1000 * step
        b.profiler_step(step + 1, t0, t0 + 1000)
        b.cpu_op("CUDAGraph::replay", t0 + 10, t0 + 60)
        corr = b.runtime("cudaGraphLaunch", t0 + 20, t0 + 50)
        for k in range(5):
            b.kernel(f"graph_kernel_{k}", t0 + 100 + 10 * k, t0 + 105 + 10 * k, correlation=corr)
        b.cpu_op("aten::add", t0 + 110, t0 + 130)
        b.launch("add_kernel", cpu=(t0 + 112, t0 + 118), gpu=(t0 + 200, t0 + 210))
    b.device_properties([0])
    trace = load_trace(str(b.write(tmp_path / "g.json")))
    d = analyze_trace(trace)[0]
    m = d.model
    assert m is not None
    replay = _op(m, "CUDAGraph::replay")
    steps = len(d.steps)
    assert steps >= 2
    assert replay.count == steps and replay.kernel_ns == 25 * US * steps
    assert sorted(set(replay.kernels)) == [f"graph_kernel_{k}" for k in range(5)]
    assert m.attributed_ns == 35 * US * steps and m.unattributed_ns == 0
    assert [s.breakdown.compute_ns for s in d.steps] == [35 * US] * steps


def test_backward_kernels_take_the_forward_module_through_fwdbwd(tmp_path: Path) -> None:
    b = TraceBuilder()
    autograd = 5000
    b.python_frame("nn.Module: Model_0", 0, 100)
    b.python_frame("nn.Module: Linear_0", 10, 90)
    _shapes(b.cpu_op("aten::linear", 20, 80), [[8, 16], [32, 16], [32]], [BF16] * 3)
    _shapes(
        b.cpu_op("aten::addmm", 30, 70),
        [[32], [8, 16], [16, 32], [], []],
        [BF16, BF16, BF16, "Scalar", "Scalar"],
        ["", "", "", "1", "1"],
    )
    b.launch("fwd_gemm", cpu=(40, 50), gpu=(100, 150))
    b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 200, 300, tid=autograd)
    b.cpu_op("AddmmBackward0", 210, 290, tid=autograd)
    _shapes(b.cpu_op("aten::mm", 220, 260, tid=autograd), [[8, 32], [32, 16]], [BF16, BF16])
    b.launch("bwd_gemm", cpu=(230, 240), gpu=(400, 450), tid=autograd)
    for ph, at, tid in (("s", 20, b.tid), ("f", 210, autograd)):
        b.raw_event(
            {
                "ph": ph,
                "id": 1,
                "pid": b.pid,
                "tid": tid,
                "ts": b.t(at),
                "cat": "fwdbwd",
                "name": "fwdbwd",
                **({"bp": "e"} if ph == "f" else {}),
            }
        )
    m = _model(b, tmp_path)
    assert _op(m, "aten::addmm").module == "Model_0/Linear_0"
    assert _op(m, "aten::mm").module == "Model_0/Linear_0"
    assert _op(m, "aten::mm").flops == 2 * 8 * 32 * 16
    modules = {r.path: r.kernel_ns for r in m.modules}
    assert modules == {"Model_0": 100 * US, "Model_0/Linear_0": 100 * US}
    roots = sum(r.kernel_ns for r in m.modules if r.depth == 1)
    assert roots == m.attributed_ns


def test_attributed_time_outside_modules_is_its_own_root(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.python_frame("nn.Module: Net_0", 0, 50)
    b.cpu_op("aten::relu", 10, 40)
    b.launch("relu_kernel", cpu=(15, 20), gpu=(100, 130))
    b.cpu_op("aten::add", 60, 70)
    b.launch("add_kernel", cpu=(62, 64), gpu=(140, 150))
    b.kernel("orphan", 160, 170)  # no launch call at all
    m = _model(b, tmp_path)
    assert [(r.path, r.kernel_ns) for r in m.modules] == [("Net_0", 30 * US), (NO_MODULE, 10 * US)]
    assert m.reasons == {"no launch call": 10 * US}
    assert m.attributed_share == pytest.approx(40 / 50)


# ---- the waterfall ------------------------------------------------------------------------------


def test_waterfall_adds_up_to_the_peak_and_mfu_is_exact(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.profiler_step(1, 0, 1000, gpu=True)
    b.profiler_step(1, 0, 1000)
    _mm(b, 0, 4096, 4096, 4096, (0, 400))  # GEMM: 400 us
    _shapes(b.cpu_op("aten::add", 50, 60), [[4096, 4096], [4096, 4096], []], [BF16, BF16, "Scalar"])
    b.launch("add_kernel", cpu=(52, 55), gpu=(400, 500))  # elementwise: 100 us
    b.cpu_op("aten::nonzero", 70, 80)
    b.launch("nonzero_kernel", cpu=(72, 75), gpu=(500, 550))  # unmodelled: 50 us
    b.memcpy(600, 700)  # exposed memory: 100 us, no launch
    # idle: 550-600 and 700-1000 = 350 us
    m = _model(b, tmp_path)
    e = m.efficiency
    window_s = 1000e-6
    gemm_flops = 2 * 4096**3
    add_flops = 4096 * 4096
    assert e.modelled_flops == gemm_flops + add_flops
    assert e.precision == "bf16" and e.peak_tflops == PEAK_BF16
    assert e.mfu == pytest.approx(
        (gemm_flops + add_flops) / (window_s * PEAK_BF16 * 1e12), rel=1e-12
    )
    stages = {s.stage: s.tflops for s in e.waterfall}
    assert list(stages) == list(STAGES)
    assert sum(stages.values()) == pytest.approx(PEAK_BF16, rel=1e-12)
    assert sum(s.share_of_peak for s in e.waterfall) == pytest.approx(1.0, rel=1e-12)
    assert stages["idle"] == pytest.approx(0.35 * PEAK_BF16)
    assert stages["exposed memory copies"] == pytest.approx(0.10 * PEAK_BF16)
    assert stages["exposed communication"] == 0
    assert stages["unmodelled kernels"] == pytest.approx(0.05 * PEAK_BF16)
    assert stages["memory-bound ops"] == pytest.approx(
        0.10 * PEAK_BF16 - add_flops / window_s / 1e12
    )
    assert stages["matmul and attention below roof"] == pytest.approx(
        0.40 * PEAK_BF16 - gemm_flops / window_s / 1e12
    )
    assert stages["achieved"] == pytest.approx(e.mfu * PEAK_BF16, rel=1e-12)
    assert e.modelled_kernel_share == pytest.approx(500 / 550)
    assert not e.notes


def test_unknown_gpu_has_ops_but_no_roof_or_mfu(tmp_path: Path) -> None:
    b = TraceBuilder()
    _mm(b, 0, 64, 64, 64, (100, 110))
    b.device_properties([0], name="Some Future GPU 9000")
    trace = load_trace(str(b.write(tmp_path / "u.json")))
    m = analyze_trace(trace)[0].model
    assert m is not None and m.gpu_spec is None
    row = _op(m, "aten::mm")
    assert row.tflops_per_s is not None and row.bound is None and row.roof_share is None
    assert m.efficiency.mfu is None and m.efficiency.waterfall == []


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "types", "reason"),
    [
        ("[[64, 64], [64, 64]]", [BF16, BF16], "missing Input Dims"),  # a string, not a list
        ([[64, -1], [64, 64]], [BF16, BF16], "negative size"),
        ([[2**41, 64], [64, 64]], [BF16, BF16], "absurd size"),
        ([[64, 64], [64, 64]], ["c10::Mystery", BF16], "unknown dtype"),
        ([[64, "x"], [64, 64]], [BF16, BF16], "malformed Input Dims"),
        ([[64, 64]], [BF16, BF16], "malformed Input Dims"),
        (None, None, "missing Input Dims"),
        (7, 7, "missing Input Dims"),
    ],
)
def test_bad_shapes_give_no_model_and_count_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dims: Any, types: Any, reason: str
) -> None:
    b = TraceBuilder()
    op = b.cpu_op("aten::mm", 0, 40)
    op.setdefault("args", {}).update({"Input Dims": dims, "Input type": types})
    b.launch("gemm", cpu=(10, 20), gpu=(100, 110))
    m = _model(b, tmp_path)
    row = _op(m, "aten::mm")
    assert row.flops is None and row.bytes is None and row.tflops_per_s is None
    assert row.reason == reason and m.unmodelled == {reason: 10 * US}
    assert m.efficiency.mfu is None or m.efficiency.modelled_flops == 0
    code, _, err = run_cli(capsys, "analyze", "--format", "json", tmp_path / "t.json")
    assert code == 0 and "Traceback" not in err


def test_a_trace_without_shapes_still_has_ops_and_modules(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.cpu_op("aten::mm", 0, 40)
    b.launch("gemm", cpu=(10, 20), gpu=(100, 110))
    m = _model(b, tmp_path)
    assert not m.has_shapes
    row = _op(m, "aten::mm")
    assert row.input_dims is None and row.reason == "missing Input Dims"
    assert m.efficiency.modelled_flops == 0 and m.efficiency.precision is None


def test_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    b = TraceBuilder()
    b.profiler_step(1, 0, 1000, gpu=True)
    _mm(b, 0, 1024, 1024, 1024, (0, 100))
    b.device_properties([0])
    path = b.write(tmp_path / "j.json")
    code, out, _ = run_cli(capsys, "analyze", "--format", "json", path)
    assert code == 0
    dev = json.loads(out)["devices"][0]
    (op,) = dev["ops"]
    assert set(op) >= {
        "op",
        "category",
        "input_dims",
        "input_types",
        "count",
        "kernel_time_us",
        "gflops",
        "bytes",
        "tflops_per_s",
        "tb_per_s",
        "intensity",
        "bound",
        "roof_share",
        "module",
        "kernels",
    }
    assert op["op"] == "aten::mm" and op["count"] == 1 and op["kernel_time_us"] == 100
    assert op["gflops"] == pytest.approx(2 * 1024**3 / 1e9)
    assert op["tflops_per_s"] == pytest.approx(2 * 1024**3 / 100e-6 / 1e12)
    assert op["input_dims"] == [[1024, 1024], [1024, 1024]] and op["input_types"] == [BF16, BF16]
    eff = dev["efficiency"]
    assert set(eff) >= {
        "modelled_flops",
        "modelled_kernel_share",
        "precision",
        "peak_tflops",
        "mfu",
        "waterfall",
    }
    assert math.isclose(sum(s["tflops"] for s in eff["waterfall"]), eff["peak_tflops"])
    assert eff["mfu"] == pytest.approx(2 * 1024**3 / (1000e-6 * PEAK_BF16 * 1e12))
    att = dev["attribution"]
    assert att["attributed_us"] == 100 and att["unattributed_us"] == 0 and att["reasons"] == {}
    assert dev["modules"] == []


# ---- real traces --------------------------------------------------------------------------------


REAL = [
    "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens-h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
    "hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta-critical-path/alexnet_trace.json.gz",
    "param-dlrm-8rank/worker1_step_12.1694128201556.pt.trace.json.gz",
    "kineto-edge/before_fix_trace.json",
]


@pytest.mark.parametrize("rel", REAL)
def test_real_traces_attribute_99_percent_of_window_gpu_time_to_ops(rel: str) -> None:
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"no {path}")
    for d in analyze_trace(load_trace(str(path))):
        m = d.model
        assert m is not None
        share = m.attributed_share
        assert share is not None and share >= 0.99, (d.device, m.reasons)
        assert sum(m.reasons.values()) == m.unattributed_ns
        # Every attributed ns is in exactly one op row.
        assert sum(r.kernel_ns for r in m.ops) == m.attributed_ns
        if m.modules:
            roots = sum(r.kernel_ns for r in m.modules if r.depth == 1)
            assert roots == m.attributed_ns


def test_launch_inside_a_record_function_range_belongs_to_the_range(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("## Call CompiledFxGraph fx1 ##", 0, 100)
    b.launch("triton_poi_fused_add_0", cpu=(10, 20), gpu=(100, 120), driver=True)
    b.runtime("cudaLaunchKernel", 200, 210)  # outside every op and range
    b.kernel("spin_kernel", 300, 310, correlation=b._next_corr)
    m = _model(b, tmp_path)
    assert [(r.op, r.kernel_ns) for r in m.ops] == [("## Call CompiledFxGraph fx1 ##", 20 * US)]
    assert m.reasons == {"launch outside any op": 10 * US}


@pytest.mark.parametrize("topic", ["ops", "modules", "mfu", "attribution"])
def test_explain_covers_the_new_tables(capsys: pytest.CaptureFixture[str], topic: str) -> None:
    from badput.diagnose import RULES
    from badput.report.topics import TOPICS

    assert not set(TOPICS) & set(RULES)
    code, out, _ = run_cli(capsys, "explain", topic)
    assert code == 0 and out.startswith(f"{topic}: ") and "Limits" in out


@pytest.mark.parametrize("link", ["sequence", "none"])
def test_backward_module_through_sequence_numbers_without_fwdbwd_flows(
    tmp_path: Path, link: str
) -> None:
    b = TraceBuilder()
    autograd = 5000
    b.python_frame("nn.Module: Model_0", 0, 100)
    b.python_frame("nn.Module: Linear_0", 10, 90)
    fwd = b.cpu_op("aten::linear", 20, 80)
    b.cpu_op("aten::addmm", 30, 70)["args"]["Sequence number"] = 7  # nested: same number
    b.launch("fwd_gemm", cpu=(40, 50), gpu=(100, 150))
    other = b.cpu_op("aten::relu", 85, 88)
    other["args"]["Sequence number"] = 8
    b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 200, 300, tid=autograd)
    bwd = b.cpu_op("AddmmBackward0", 210, 290, tid=autograd)
    _shapes(b.cpu_op("aten::mm", 220, 260, tid=autograd), [[8, 32], [32, 16]], [BF16, BF16])
    b.launch("bwd_gemm", cpu=(230, 240), gpu=(400, 450), tid=autograd)
    if link == "sequence":
        fwd["args"]["Sequence number"] = 7
        bwd["args"].update({"Sequence number": 7, "Fwd thread id": b.tid})
    m = _model(b, tmp_path)
    want = "Model_0/Linear_0" if link == "sequence" else None
    assert _op(m, "aten::mm").module == want
