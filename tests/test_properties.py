"""Property tests of `badput analyze` over random small synthetic traces.

Whatever the trace: the breakdown partitions the window, the idle causes partition idle, no
value is negative, communication splits into exposed + overlapped, steps are ordered, disjoint
and inside the window, and shuffling the events changes nothing.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import (
    DATALOADER_NEXT,
    DATAPIPE_NEXT,
    NCCL_ALLREDUCE,
    NCCL_ALLREDUCE_OLD,
    NCCL_SENDRECV_OLD,
    TraceBuilder,
)

#: A modern-trace-like base (1419247336955.316 us): float64 spacing there is ~0.0002 us.
PROP_BASE_NS = 1_419_247_336_955_316
TOL = 0.001  # us per term

KERNELS = [
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps<float> > >",
]
NCCL = [NCCL_ALLREDUCE, NCCL_ALLREDUCE_OLD, NCCL_SENDRECV_OLD]
COPIES = {
    "memcpy": ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)"],
    "memset": ["Memset (Device)"],
}
HOST_KINDS = ["cpu_op", "annotation", "dataloader", "datapipe", "python", "runtime", "instant"]

BREAKDOWN = ("compute", "communication", "memory", "idle")
CAUSES = ("runtime", "dataloader", "cpu", "other")

PROPS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Case:
    builder: TraceBuilder
    seed: int
    n_steps: int
    #: device -> list of (start, end) ns of its GPU activity
    gpu: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: device -> kernel name -> (count, total ns)
    kernels: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    schema = draw(st.sampled_from(["modern", "legacy"]))
    b = TraceBuilder(schema, unit_ns=1, base_ns=PROP_BASE_NS)
    streams = draw(st.lists(st.sampled_from([7, 20, 21]), min_size=1, max_size=3, unique=True))
    devices = draw(st.sampled_from([[0], [0], [0, 1]]))
    case = Case(b, seed=draw(st.integers(0, 2**32 - 1)), n_steps=0)

    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["kernel", "kernel", "kernel", "nccl", "memcpy", "memset"]))
        if kind == "kernel":
            name = draw(st.sampled_from(KERNELS))
        elif kind == "nccl":
            name = draw(st.sampled_from(NCCL))
        else:
            name = draw(st.sampled_from(COPIES[kind]))
        gpu_kind = "kernel" if kind == "nccl" else kind
        start = draw(st.integers(0, 200_000))
        end = start + draw(st.integers(1, 60_000))
        stream = draw(st.sampled_from(streams))
        device = draw(st.sampled_from(devices))
        if draw(st.booleans()):
            lag = draw(st.integers(0, 20_000))
            length = draw(st.integers(0, 8_000))
            cpu = (start - lag - length, start - lag)
            b.launch(name, kind=gpu_kind, cpu=cpu, gpu=(start, end), stream=stream, device=device)
        else:
            b.gpu(gpu_kind, name, start, end, stream=stream, device=device)
        case.gpu.setdefault(device, []).append((start, end))
        if gpu_kind == "kernel":
            table = case.kernels.setdefault(device, {})
            count, total = table.get(name, (0, 0))
            table[name] = (count + 1, total + end - start)

    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(HOST_KINDS))
        start = draw(st.integers(-30_000, 260_000))
        end = start + draw(st.integers(0, 80_000))
        if kind == "cpu_op":
            b.cpu_op(
                draw(st.sampled_from(["aten::mm", "aten::nonzero", "aten::copy_"])), start, end
            )
        elif kind == "annotation":
            b.annotation("## forward ##", start, end)
        elif kind == "dataloader":
            b.dataloader(start, end, name=DATALOADER_NEXT)
        elif kind == "datapipe":
            b.annotation(DATAPIPE_NEXT, start, end)
        elif kind == "python":
            b.python_frame("train.py(42): train_step", start, end)
        elif kind == "runtime":
            b.runtime(
                draw(st.sampled_from(["cudaStreamSynchronize", "cudaEventQuery"])), start, end
            )
        else:
            b.instant("[memory]", start)

    modes = ["none", "cpu", "cpu", "gpu"] if b.schema == "modern" else ["none", "cpu"]
    step_mode = draw(st.sampled_from(modes))
    if step_mode != "none":
        n = draw(st.integers(1, 4))
        bounds = st.lists(
            st.integers(-20_000, 270_000), min_size=n + 1, max_size=n + 1, unique=True
        )
        points = sorted(draw(bounds))
        for k in range(n):
            b.profiler_step(k + 1, points[k], points[k + 1], gpu=step_mode == "gpu")
        case.n_steps = n
    return case


def analyze_to_file(trace: Path, out: Path) -> dict[str, Any]:
    from badput.cli.app import main

    code = main(["analyze", str(trace), "--format", "json", "--out", str(out)])
    assert code == 0, f"exit {code}"
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def check_partition(
    parts: dict[str, float], keys: tuple[str, ...], whole: float, what: str
) -> None:
    assert set(parts) == set(keys), what
    for key in keys:
        assert parts[key] >= 0, f"{what}.{key} = {parts[key]} < 0"
    total = sum(parts[k] for k in keys)
    assert abs(total - whole) <= TOL * len(keys), f"{what}: sum {total} != {whole} ({parts})"


def check_device(dev: dict[str, Any], case: Case) -> None:
    d = dev["device"]
    window = dev["window_us"]
    assert window >= 0
    bd, causes = dev["breakdown_us"], dev["idle_causes_us"]
    check_partition(bd, BREAKDOWN, window, f"device {d} breakdown")
    check_partition(causes, CAUSES, bd["idle"], f"device {d} idle causes")
    comm = dev["comm"]
    assert comm["total_us"] >= 0 and comm["overlapped_us"] >= 0
    assert comm["overlapped_us"] <= comm["total_us"] + TOL
    # communication in the window = exposed (breakdown) + under compute (overlapped)
    exposed_plus_hidden = bd["communication"] + comm["overlapped_us"]
    assert abs(comm["total_us"] - exposed_plus_hidden) <= 2 * TOL, comm
    if window > 0:
        assert dev["goodput"] is not None
        assert abs(dev["goodput"] - bd["compute"] / window) <= 1e-6
        assert -1e-9 <= dev["goodput"] <= 1 + 1e-9

    steps = dev["steps"]
    for s in steps:
        assert s["dur_us"] >= 0
        check_partition(s["breakdown_us"], BREAKDOWN, s["dur_us"], f"{s['name']} breakdown")
        check_partition(s["idle_causes_us"], CAUSES, s["breakdown_us"]["idle"], f"{s['name']} idle")
    if steps:
        assert len(steps) <= case.n_steps
        slack = TOL + 2 * math.ulp(steps[-1]["start_us"])
        for prev, nxt in itertools.pairwise(steps):
            assert prev["start_us"] + prev["dur_us"] <= nxt["start_us"] + slack, "steps overlap"
        hull = steps[-1]["start_us"] + steps[-1]["dur_us"] - steps[0]["start_us"]
        assert abs(hull - window) <= slack, f"window {window} != hull of steps {hull}"
        for key in BREAKDOWN:
            in_steps = sum(s["breakdown_us"][key] for s in steps)
            assert in_steps <= bd[key] + TOL * (len(steps) + 1), f"steps' {key} exceeds window's"
    else:
        # no steps: the window is the hull of the device's GPU activity, and it holds all kernels
        spans = case.gpu[d]
        hull_ns = max(e for _, e in spans) - min(s for s, _ in spans)
        assert abs(window - hull_ns / 1000) <= TOL, f"window {window} != GPU hull {hull_ns} ns"
        table = {k["name"]: k for k in dev["kernels"]}
        for name, (count, total_ns) in case.kernels.get(d, {}).items():
            assert table[name]["count"] == count, name
            assert abs(table[name]["total_us"] - total_ns / 1000) <= TOL, name


def _strip_paths(report: dict[str, Any]) -> list[dict[str, Any]]:
    def strip(entry: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in entry.items() if k != "trace"}
        if "findings" in out:
            out["findings"] = [strip(f) for f in out["findings"]]
        return out

    return [strip(dev) for dev in report["devices"]]


@PROPS
@given(case=cases())
def test_invariants_and_shuffle(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    plain = analyze_to_file(case.builder.write(tmp / "plain.pt.trace.json"), tmp / "plain.out")
    assert plain["schema"] == "badput.analysis/1"
    devices = plain["devices"]
    assert sorted(dev["device"] for dev in devices) == sorted(case.gpu)
    for dev in devices:
        check_device(dev, case)

    shuffled_path = case.builder.write(tmp / "shuffled.pt.trace.json.gz", shuffle=case.seed)
    shuffled = analyze_to_file(shuffled_path, tmp / "shuffled.out")
    assert _strip_paths(shuffled) == _strip_paths(plain)
