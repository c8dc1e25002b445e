"""Kernel classes from evidence (analysis/classify.py) and communication fixes by context.

Each scenario is a synthetic Kineto trace whose answer is worked out by hand in the comments:
times are whole microseconds, intervals half-open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from badput.analysis import analyze_trace
from badput.analysis.classify import (
    SOURCES,
    ClassRules,
    classify_kernels,
    load_class_rules,
)
from badput.analysis.comm import collective_stats, collectives
from badput.analysis.tree import launch_tree
from badput.diagnose import diagnose
from badput.errors import UsageError
from badput.trace import load_trace
from synth import H100, TraceBuilder, analyze_json, run_cli

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
NOTIFY = "void deep_ep::internode::notify_dispatch<8>(int const*, int*, int, int const*)"
DISPATCH = "void deep_ep::internode::dispatch<true, 8, 4, 16, 32>(int4*, float*, int*, long*)"
COMBINE = "void deep_ep::internode::combine<__nv_bfloat16, 8, 4, 16>(int4*, float*, int*)"
UNKNOWN_ON_COMM = "void ep_kernels::prepare_counts<32>(int*, int*)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
MULTIMEM = (
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 4, 8>"
    "(c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)"
)


def _deepep_step(tmp_path: Path) -> Path:
    """One EP step on an H100: GEMMs on stream 7, DeepEP dispatch/combine on stream 24.

    GPU (us):  GEMM [10,300) [350,600) [700,900) on stream 7;
               prepare_counts [20,40), notify_dispatch [50,80), dispatch [80,400),
               combine [550,800) on stream 24 (all launched with cudaLaunchKernelExC).
    Host: the DeepEP kernels are launched under the Python frames of deep_ep's Buffer
    (dispatch, combine), not under any op; prepare_counts under no frame at all (only the
    stream says it is communication).
    Window: ProfilerStep#1 [0,1000) (the GPU work ends at 900, inside it).
    compute = 290 + 250 + 200 = 740; communication outside compute = [300,350) + [600,700)
    = 150 (prepare_counts and notify lie under the first GEMM); idle = 1000 - 740 - 150 = 110.
    """
    b = TraceBuilder()
    b.device_properties([0], H100)
    b.distributed_info(rank=0, world_size=16)
    b.profiler_step(1, 0, 1000)
    b.cpu_op("aten::mm", 1, 4)
    b.launch(GEMM, cpu=(2, 3), gpu=(10, 300), stream=7)
    b.launch(UNKNOWN_ON_COMM, cpu=(5, 6), gpu=(20, 40), stream=24, api="cudaLaunchKernelExC")
    b.python_frame("deep_ep/buffer.py(512): dispatch", 9, 20)
    b.launch(NOTIFY, cpu=(10, 11), gpu=(50, 80), stream=24, api="cudaLaunchKernelExC")
    b.launch(DISPATCH, cpu=(12, 13), gpu=(80, 400), stream=24, api="cudaLaunchKernelExC")
    b.cpu_op("aten::mm", 21, 24)
    b.launch(GEMM, cpu=(22, 23), gpu=(350, 600), stream=7)
    b.python_frame("deep_ep/buffer.py(700): combine", 25, 30)
    b.launch(COMBINE, cpu=(26, 27), gpu=(550, 800), stream=24, api="cudaLaunchKernelExC")
    b.cpu_op("aten::mm", 31, 34)
    b.launch(GEMM, cpu=(32, 33), gpu=(700, 900), stream=7)
    return b.write(tmp_path / "deepep.pt.trace.json")


def test_deepep_kernels_are_all_to_all_from_their_evidence(tmp_path: Path) -> None:
    trace = load_trace(str(_deepep_step(tmp_path)))
    classes = classify_kernels(trace, launch_tree(trace))
    by_name: dict[str, tuple[str, str | None, str]] = {}
    for i, row in enumerate(classes.row.tolist()):
        by_name[trace.name_of(row)] = (
            classes.category_name(i),
            classes.kind_name(i),
            SOURCES[int(classes.source[i])],
        )
    assert by_name[GEMM] == ("gemm", None, "name")
    # Launched under DeepEP's Python frames: the launching frame decides.
    assert by_name[NOTIFY] == ("communication", "all_to_all", "launching op")
    assert by_name[DISPATCH] == ("communication", "all_to_all", "launching op")
    assert by_name[COMBINE] == ("communication", "all_to_all", "launching op")
    # An unknown kernel on a stream that carries only communication.
    assert by_name[UNKNOWN_ON_COMM] == ("communication", "other", "stream")


def test_deepep_breakdown_and_top_finding(tmp_path: Path) -> None:
    trace = load_trace(str(_deepep_step(tmp_path)))
    [d] = analyze_trace(trace)
    assert d.window_ns == 1000_000
    assert d.breakdown.compute_ns == 740_000
    assert d.breakdown.communication_ns == 150_000
    assert d.breakdown.idle_ns == 110_000
    assert d.comm.total_ns == 20_000 + 30_000 + 320_000 + 250_000
    stats = {s.type: s for s in collective_stats(collectives(trace, d))}
    assert stats["all_to_all"].exposed_ns == 150_000  # [300,350) of dispatch + [600,700) of combine
    assert stats["all_to_all"].count == 3
    assert stats["other"].exposed_ns == 0
    top = diagnose([(trace, [d])]).ranked[0]
    assert top.id == "exposed-communication"
    assert top.savings_ns == pytest.approx(150_000)
    assert "all-to-all (DeepEP)" in top.title
    assert top.fix[0].startswith("Hide the expert-parallel dispatch/combine")
    assert "DeepEP" in top.evidence["decided_by"].value
    assert not any("DDP" in f for f in top.fix)


def test_deepep_by_name_alone_without_frames(tmp_path: Path) -> None:
    """Without the Python frames (with_stack off) the DeepEP family name decides."""
    b = TraceBuilder()
    b.device_properties([0], H100)
    b.launch(GEMM, cpu=(1, 2), gpu=(10, 100), stream=7)
    b.launch(DISPATCH, cpu=(3, 4), gpu=(50, 150), stream=24, api="cudaLaunchKernelExC")
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    classes = classify_kernels(trace, launch_tree(trace))
    i = int(np.flatnonzero([trace.name_of(r) == DISPATCH for r in classes.row.tolist()])[0])
    assert (classes.category_name(i), classes.kind_name(i)) == ("communication", "all_to_all")
    assert classes.evidence(i) == "name: DeepEP"


def _pp_step(tmp_path: Path) -> Path:
    """A pipeline stage (rank 1 of 4) in training: forward GEMM, recv, backward GEMM, send.

    GPU: GEMM [0,200) stream 7; SendRecv [200,300) and [500,600) stream 20 (under
    nccl:recv / nccl:send ops with NCCL metadata "recv"/"send", group size 2); backward GEMM
    [300,500) stream 7. Window [0,600) (no steps): compute 400, communication 200, idle 0.
    """
    b = TraceBuilder()
    b.device_properties([0], H100)
    b.distributed_info(rank=1, world_size=4)
    b.cpu_op("aten::mm", -40, -35)
    b.launch(GEMM, cpu=(-39, -38), gpu=(0, 200))
    op = b.cpu_op("record_param_comms", -34, -28)
    b.nccl_metadata(op, "recv", in_nelems=1 << 20, group_size=2, dtype="BFloat16")
    b.cpu_op("nccl:recv 0<-1", -33, -29)
    b.launch(SENDRECV, cpu=(-32, -31), gpu=(200, 300), stream=20)
    b.cpu_op("autograd::engine::evaluate_function: MmBackward0", -27, -20)
    b.cpu_op("MmBackward0", -26, -21)
    b.cpu_op("aten::mm", -25, -22)
    b.launch(GEMM, cpu=(-24, -23), gpu=(300, 500))
    op = b.cpu_op("record_param_comms", -19, -12)
    b.nccl_metadata(op, "send", in_nelems=1 << 20, group_size=2, dtype="BFloat16")
    b.cpu_op("nccl:send 1->2", -18, -13)
    b.launch(SENDRECV, cpu=(-17, -16), gpu=(500, 600), stream=20)
    return b.write(tmp_path / "pp.pt.trace.json")


def test_pipeline_send_recv_gets_schedule_fixes(tmp_path: Path) -> None:
    trace = load_trace(str(_pp_step(tmp_path)))
    [d] = analyze_trace(trace)
    assert d.window_ns == 600_000
    assert (d.breakdown.compute_ns, d.breakdown.communication_ns) == (400_000, 200_000)
    stats = {s.type: s for s in collective_stats(collectives(trace, d))}
    assert list(stats) == ["send_recv"]
    assert stats["send_recv"].exposed_ns == 200_000
    top = diagnose([(trace, [d])]).ranked[0]
    assert top.id == "exposed-communication"
    assert top.savings_ns == pytest.approx(200_000)
    assert "in the window" in top.title and "per step" not in top.title
    assert "send/recv" in top.title
    assert top.fix[0].startswith("Shrink the pipeline bubble")
    assert not any("DDP" in f for f in top.fix)
    assert top.evidence["workload"].value.startswith("training")
    assert "group size 2 of world 4" in top.evidence["exposed_send_recv"].value


def _tp_inference(tmp_path: Path, kernel: str, op: str) -> Path:
    """Tensor-parallel decode on rank 0 of 8: GEMM [0,100), all-reduce [100,140), GEMM
    [140,240); no backward op, no optimizer. Window [0,240): compute 200, comm 40."""
    b = TraceBuilder()
    b.device_properties(range(8), H100)
    b.distributed_info(rank=0, world_size=8)
    b.cpu_op("aten::mm", -30, -25)
    b.launch(GEMM, cpu=(-29, -28), gpu=(0, 100))
    b.cpu_op(op, -24, -20)
    b.launch(kernel, cpu=(-23, -22), gpu=(100, 140), stream=7)
    b.cpu_op("aten::mm", -19, -15)
    b.launch(GEMM, cpu=(-18, -17), gpu=(140, 240))
    return b.write(tmp_path / "tp.pt.trace.json")


def test_tp_all_reduce_in_inference_gets_fusion_not_ddp(tmp_path: Path) -> None:
    trace = load_trace(str(_tp_inference(tmp_path, MULTIMEM, "symm_mem::multimem_all_reduce_")))
    [d] = analyze_trace(trace)
    assert (d.breakdown.compute_ns, d.breakdown.communication_ns) == (200_000, 40_000)
    top = diagnose([(trace, [d])]).ranked[0]
    assert top.id == "exposed-communication"
    assert top.savings_ns == pytest.approx(40_000)
    assert "all-reduce" in top.title
    assert top.evidence["workload"].value.startswith("inference")
    # Already a symmetric-memory all-reduce: fusion first, no "use a custom all-reduce".
    assert top.fix[0].startswith("Fuse the all-reduce with the residual add")
    assert not any(f.startswith("Use a custom all-reduce") for f in top.fix)
    assert not any("DDP" in f for f in top.fix)


def test_unknown_kernel_of_a_custom_all_reduce_op(tmp_path: Path) -> None:
    """A kernel no family knows, launched by a communication op, is communication."""
    trace = load_trace(str(_tp_inference(tmp_path, "void my_ar::fancy_kernel<8>(float*)",
                                     "_c10d_functional::all_reduce")))  # fmt: skip
    [d] = analyze_trace(trace)
    assert d.breakdown.communication_ns == 40_000
    top = diagnose([(trace, [d])]).ranked[0]
    assert top.fix[0].startswith("Use a custom all-reduce")
    assert "_c10d_functional::all_reduce" in top.evidence["decided_by"].value


def test_copy_inside_a_collective_is_not_communication(tmp_path: Path) -> None:
    """c10d::allgather_ -> aten::copy_ -> copy kernel: an op between says it is a copy."""
    b = TraceBuilder()
    b.device_properties([0], H100)
    copy = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    b.cpu_op("c10d::allgather_", 0, 20)
    b.cpu_op("aten::copy_", 2, 6)
    b.launch(copy, cpu=(3, 4), gpu=(30, 40))
    b.launch("void my_lib::gather_kernel(float*)", cpu=(8, 9), gpu=(40, 60))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    classes = classify_kernels(trace, launch_tree(trace))
    got = {trace.name_of(r): classes.category_name(i) for i, r in enumerate(classes.row.tolist())}
    assert got[copy] == "elementwise"
    assert got["void my_lib::gather_kernel(float*)"] == "communication"


def test_unknown_kernel_of_a_matmul_op_is_gemm(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.device_properties([0], H100)
    b.cpu_op("aten::addmm", 0, 10)
    b.launch("void vendor::k123(float*)", cpu=(2, 3), gpu=(20, 40))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    classes = classify_kernels(trace, launch_tree(trace))
    assert classes.category_name(0) == "gemm"
    assert classes.evidence(0) == "launching op family: aten::addmm"
    # Without the tree (model off) nothing says so.
    assert classify_kernels(trace).category_name(0) == "other"


# ---- user overrides ------------------------------------------------------------------------


def test_overrides_decide_first(tmp_path: Path) -> None:
    rules_file = tmp_path / "classes.toml"
    rules_file.write_text(
        '[kernels]\n"fancy_kernel" = "all_reduce"\n"^sm90_xmma" = "gemm-helper"\n',
        encoding="utf-8",
    )
    rules = load_class_rules(rules_file)
    assert rules.rules == (
        ("fancy_kernel", "communication", "all_reduce"),
        ("^sm90_xmma", "gemm-helper", None),
    )
    trace = load_trace(
        str(_tp_inference(tmp_path, "void my_ar::fancy_kernel<8>(float*)", "foo::bar"))
    )
    classes = classify_kernels(trace, launch_tree(trace), rules)
    got = {
        trace.name_of(r): (classes.category_name(i), classes.kind_name(i), classes.evidence(i))
        for i, r in enumerate(classes.row.tolist())
    }
    assert got["void my_ar::fancy_kernel<8>(float*)"] == (
        "communication",
        "all_reduce",
        f"override: rule 1 of {rules_file}: fancy_kernel",
    )
    assert got[GEMM][0] == "gemm-helper"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('"(" = "gemm"', "is not a regular expression"),
        ('"x" = "matmul"', "unknown class 'matmul'"),
        ('"x" = 3', "the value must be a string"),
        ("x = = 1", "not a TOML file"),
        ("", "no rule in the file"),
        ('"x" = "communication:gossip"', "unknown communication kind 'gossip'"),
    ],
)
def test_bad_override_files(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=problem) as info:
        load_class_rules(path)
    assert str(path) in str(info.value)


def test_override_cli_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    trace = _tp_inference(tmp_path, "void my_ar::fancy_kernel<8>(float*)", "foo::bar")
    rules_file = tmp_path / "classes.toml"
    rules_file.write_text('"fancy_kernel" = "all_reduce"\n', encoding="utf-8")
    report = analyze_json(capsys, trace, "--classify", rules_file)
    [dev] = report["devices"]
    assert dev["breakdown_us"]["communication"] == 40.0
    row = next(k for k in dev["kernels"] if k["name"].startswith("void my_ar"))
    assert row["category"] == "communication"
    assert row["evidence"].startswith("override: rule 1 of")
    missing = tmp_path / "nope.toml"
    code, _, err = run_cli(capsys, "analyze", trace, "--classify", missing)
    assert code == 2
    assert "nope.toml" in err and "Traceback" not in err


def test_explain_classify_lists_the_table(capsys: Any) -> None:
    code, out, _ = run_cli(capsys, "explain", "classify")
    assert code == 0
    for needle in (
        "launching op",
        "NCCL metadata",
        "stream",
        "DeepEP",
        "--classify",
        "gemm-helper",
    ):
        assert needle in out


def test_class_rules_travel_as_plain_data() -> None:
    import pickle

    rules = ClassRules((("a.b", "gemm", None),), "x.toml")
    assert pickle.loads(pickle.dumps(rules)) == rules


# ---- AMD MI250: Tensile GEMMs and HIP wording ----------------------------------------------


def test_mi250_tensile_gemms_and_hip(shared_traces: Path, capsys: Any) -> None:
    [path] = sorted((shared_traces / "hta-amd-mi250").glob("*.json.gz"))
    trace = load_trace(str(path))
    [d] = analyze_trace(trace)
    assert d.runtime_api == "HIP"
    tensile = [k for k in d.kernels if k.name.startswith("Cijk_")]
    assert len(tensile) == 2  # two Tensile solutions, one call each in the window
    assert {k.category for k in tensile} == {"gemm"}
    assert {k.evidence for k in tensile} == {"name: Tensile GEMM"}
    code, out, _ = run_cli(capsys, "analyze", path)
    assert code == 0
    assert "in HIP runtime/driver calls" in " ".join(out.split())
    assert "CUDA graph" not in out and "HIP graph" in out


def test_stream_evidence_not_for_a_kernel_under_a_plain_op(tmp_path: Path) -> None:
    """On a stream of only communication, an unknown kernel that aten::copy_ launched stays
    unknown (the op says it is no collective); one launched outside any op is communication."""
    b = TraceBuilder()
    b.device_properties([0], H100)
    b.launch(DISPATCH, cpu=(1, 2), gpu=(10, 50), stream=24)
    b.cpu_op("aten::copy_", 3, 6)
    b.launch("void vendor::pack(float*)", cpu=(4, 5), gpu=(50, 60), stream=24)
    b.launch("void vendor::prep(float*)", cpu=(7, 8), gpu=(60, 70), stream=24)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    classes = classify_kernels(trace, launch_tree(trace))
    got = {trace.name_of(r): classes.evidence(i) for i, r in enumerate(classes.row.tolist())}
    assert got["void vendor::pack(float*)"] == "nothing: no family, op or stream says"
    assert (
        got["void vendor::prep(float*)"] == "stream: stream 24 of GPU 0 carries only communication"
    )
