"""`badput analyze` on synthetic traces whose answers are worked out by hand.

Every scenario builds a trace with `tests/synth.py` (times in whole microseconds relative to
the trace base unless said otherwise; intervals are half-open `[start, end)`) and states the
expected numbers as literals, with the interval arithmetic in comments. The analysis is exact
integer-nanosecond arithmetic, so everything is compared to within 0.001 us.

Each scenario runs in the modern and (where the schema has the feature) the 2021 schema, and
as a plain `.json`, a shuffled `.json` and a shuffled `.json.gz`.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from synth import (
    BASE_NS,
    DATALOADER_NEXT,
    DATALOADER_NEXT_MP,
    DATAPIPE_NEXT,
    H100,
    NCCL_ALLREDUCE,
    NCCL_ALLREDUCE_OLD,
    TraceBuilder,
    analyze_json,
    run_cli,
)

TOL = 0.001  # us

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
GEMM_B = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
    "::launch_clamp_scalar(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >"
)
ADD = "void at::native::elementwise_kernel<128, 2, AddFunctor<float> >(int, AddFunctor<float>)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >"
ELEMENTWISE = "void at::native::unrolled_elementwise_kernel<MulFunctor<float> >"


# ---- expected results -----------------------------------------------------------------------


def bd(
    compute: float = 0.0, communication: float = 0.0, memory: float = 0.0, idle: float = 0.0
) -> dict[str, float]:
    return {"compute": compute, "communication": communication, "memory": memory, "idle": idle}


def ic(
    runtime: float = 0.0, dataloader: float = 0.0, cpu: float = 0.0, other: float = 0.0
) -> dict[str, float]:
    return {"runtime": runtime, "dataloader": dataloader, "cpu": cpu, "other": other}


@dataclass
class Step:
    name: str
    start: int  # relative, in builder units
    dur: float  # us
    breakdown: dict[str, float]
    idle: dict[str, float]


@dataclass
class Exp:
    window: float
    breakdown: dict[str, float]
    idle: dict[str, float]
    comm: tuple[float, float] = (0.0, 0.0)  # (total, overlapped)
    steps: list[Step] = field(default_factory=list)
    #: name -> (count, total us); None: not checked (some kernels lie outside the window)
    kernels: dict[str, tuple[int, float]] | None = None
    rank: int | None = None
    gpu: str | None = None
    check_identity: bool = False  # check rank and gpu


@dataclass
class Scenario:
    build: Callable[[str], tuple[TraceBuilder, dict[int, Exp]]]
    schemas: tuple[str, ...] = ("modern", "legacy")


SCENARIOS: dict[str, Scenario] = {}


def scenario(*schemas: str) -> Callable[..., Any]:
    def register(fn: Callable[[str], tuple[TraceBuilder, dict[int, Exp]]]) -> Any:
        SCENARIOS[fn.__name__] = Scenario(fn, schemas or ("modern", "legacy"))
        return fn

    return register


# ---- scenarios --------------------------------------------------------------------------------


@scenario()
def multi_stream_overlap(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.cpu_op("aten::mm", -32, -3)
    b.launch(GEMM, cpu=(-30, -25), gpu=(0, 100), stream=7)
    b.launch(GEMM_B, cpu=(-20, -15), gpu=(50, 180), stream=20)
    b.launch(GEMM, cpu=(-10, -5), gpu=(200, 250), stream=7)
    if schema == "modern":
        # GPU-side synchronization records over the gap are not GPU activity
        b.cuda_sync("Event Sync", 180, 200, stream=-1)
        b.cuda_sync("Stream Wait Event", 185, 190, stream=20)
    exp = Exp(
        window=250.0,  # no steps: hull of GPU activity [0, 250)
        # union [0,100) u [50,180) u [200,250) = 180 + 50 = 230 (the sum would be 280)
        breakdown=bd(compute=230.0, idle=20.0),  # idle [180, 200)
        idle=ic(other=20.0),  # the host does nothing in [180, 200)
        kernels={GEMM: (2, 150.0), GEMM_B: (1, 130.0)},  # 100 + 50; 130
    )
    return b, {0: exp}


def _exposed_comm(schema: str, nccl: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema, device=3)
    b.distributed_info(rank=3, world_size=8)
    b.device_properties(range(8))
    b.launch(GEMM, cpu=(-20, -15), gpu=(0, 100), stream=7)
    b.annotation("nccl:all_reduce", -13, -7)
    b.launch(nccl, cpu=(-12, -8), gpu=(60, 160), stream=20, api="cudaLaunchKernelExC")
    b.launch(RELU, cpu=(-6, -2), gpu=(170, 200), stream=7)
    exp = Exp(
        window=200.0,  # hull [0, 200)
        # compute [0,100) + [170,200) = 130
        # communication [60,160) minus compute = [100,160) = 60
        # idle [160,170) = 10;  130 + 60 + 10 = 200
        breakdown=bd(compute=130.0, communication=60.0, idle=10.0),
        idle=ic(other=10.0),
        comm=(100.0, 40.0),  # total [60,160) = 100; under compute [60,100) = 40
        kernels={GEMM: (1, 100.0), nccl: (1, 100.0), RELU: (1, 30.0)},
        rank=3,
        gpu=H100,
        check_identity=True,
    )
    return b, {3: exp}


@scenario()
def exposed_comm(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    return _exposed_comm(schema, NCCL_ALLREDUCE)


@scenario()
def exposed_comm_old_nccl_name(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    return _exposed_comm(schema, NCCL_ALLREDUCE_OLD)


@scenario()
def dataloader_gap(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100, name=DATALOADER_NEXT)
    b.cpu_op("aten::copy_", 20, 40)  # inside the DataLoader span: dataloader wins
    b.cpu_op("aten::mm", 100, 112)  # around the launches: runtime wins
    b.launch(GEMM, cpu=(100, 110), gpu=(115, 200))
    b.launch(RELU, cpu=(110, 120), gpu=(200, 280))
    b.runtime("cudaDeviceSynchronize", 120, 290)
    b.instant("[memory]", 50)
    per = {
        # step: start max(0, 0) = 0, end max(cpu end 300, last GPU end 280) = 300
        # compute [115, 280) = 165; idle [0,115) + [280,300) = 135
        "breakdown": bd(compute=165.0, idle=135.0),
        # [0,100) DataLoader = 100; [100,115) launches = 15; [280,290) sync = 10 -> runtime 25
        # [290,300) only ProfilerStep#1 itself -> other 10
        "idle": ic(runtime=25.0, dataloader=100.0, other=10.0),
    }
    exp = Exp(
        window=300.0,
        steps=[Step("ProfilerStep#1", 0, 300.0, per["breakdown"], per["idle"])],
        kernels={GEMM: (1, 85.0), RELU: (1, 80.0)},
        **per,
    )
    return b, {0: exp}


@scenario()
def datapipe_and_cpu(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.launch(GEMM, cpu=(-10, -5), gpu=(0, 50))
    b.cpu_op("aten::to", 55, 125)
    b.annotation(DATAPIPE_NEXT, 60, 120)
    b.launch(GEMM, cpu=(140, 145), gpu=(150, 200))
    exp = Exp(
        window=200.0,  # hull [0, 200)
        breakdown=bd(compute=100.0, idle=100.0),  # idle [50, 150)
        # cpu [55,60) + [120,125) = 10; DataPipe [60,120) = 60; runtime [140,145) = 5
        # other [50,55) + [125,140) + [145,150) = 5 + 15 + 5 = 25
        idle=ic(runtime=5.0, dataloader=60.0, cpu=10.0, other=25.0),
        kernels={GEMM: (2, 100.0)},
    )
    return b, {0: exp}


@scenario()
def launch_bound(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    for i in range(4):
        # launch [20i, 20i+15), kernel [20i+16, 20i+20); odd ones through the driver API
        b.cpu_op("aten::add", 20 * i, 20 * i + 15)
        b.launch(ADD, cpu=(20 * i, 20 * i + 15), gpu=(20 * i + 16, 20 * i + 20), driver=i % 2 == 1)
    exp = Exp(
        window=64.0,  # hull [16, 80)
        breakdown=bd(compute=16.0, idle=48.0),  # 4 kernels x 4; gaps [20,36) [40,56) [60,76)
        # each gap: runtime [20i, 20i+15) = 15, nothing [20i+15, 20i+16) = 1  (i = 1..3)
        idle=ic(runtime=45.0, other=3.0),
        kernels={ADD: (4, 16.0)},
    )
    return b, {0: exp}


@scenario()
def host_outside_ops(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.launch(GEMM, cpu=(-10, -5), gpu=(0, 50))
    b.launch(GEMM, cpu=(140, 145), gpu=(150, 200))
    b.instant("[memory]", 70)
    exp = Exp(
        window=200.0,  # hull [0, 200)
        breakdown=bd(compute=100.0, idle=100.0),  # idle [50, 150)
        # runtime [140,145) = 5; the host is in no op in [50,140) + [145,150) = 95
        idle=ic(runtime=5.0, other=95.0),
        kernels={GEMM: (2, 100.0)},
    )
    return b, {0: exp}


@scenario()
def python_frames(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    # Same as host_outside_ops plus a Python frame over the whole gap: Python stack frames
    # (`python_function`, and `Python` in the 2021 schema) are not CPU ops; they do not count.
    b = TraceBuilder(schema)
    b.python_frame("train.py(42): train_step", 40, 160)
    b.launch(GEMM, cpu=(-10, -5), gpu=(0, 50))
    b.launch(GEMM, cpu=(140, 145), gpu=(150, 200))
    # as in host_outside_ops: runtime [140,145) = 5, other [50,140) + [145,150) = 95
    exp = Exp(
        window=200.0, breakdown=bd(compute=100.0, idle=100.0), idle=ic(runtime=5.0, other=95.0)
    )
    return b, {0: exp}


@scenario()
def cpu_op_without_runtime(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.launch(GEMM, cpu=(-10, -5), gpu=(0, 50))
    b.cpu_op("aten::nonzero", 60, 120)
    b.annotation("## forward ##", 120, 130)
    b.cpu_op("aten::linear", 135, 146)
    b.launch(GEMM, cpu=(140, 145), gpu=(150, 200))
    exp = Exp(
        window=200.0,
        breakdown=bd(compute=100.0, idle=100.0),  # idle [50, 150)
        # cpu: [60,120) + [120,130) + [135,140) + [145,146) = 60 + 10 + 5 + 1 = 76
        # runtime: [140,145) = 5;  other: [50,60) + [130,135) + [146,150) = 10 + 5 + 4 = 19
        idle=ic(runtime=5.0, cpu=76.0, other=19.0),
        kernels={GEMM: (2, 100.0)},
    )
    return b, {0: exp}


def _three_steps_no_sync(b: TraceBuilder) -> None:
    b.profiler_step(1, 0, 100)
    b.profiler_step(2, 100, 200)
    b.profiler_step(3, 200, 300)
    b.launch(GEMM, cpu=(10, 20), gpu=(20, 150))  # step 1's kernel runs past its CPU end
    b.launch(GEMM, cpu=(110, 120), gpu=(150, 260))  # queued behind it
    b.launch(RELU, cpu=(210, 220), gpu=(260, 290))


@scenario()
def steps_without_final_sync(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    _three_steps_no_sync(b)
    steps = [
        # #1: start max(prev_end 0, 0) = 0, end max(100, 150) = 150
        #     compute [20,150) = 130; idle [0,20): runtime [10,20) = 10, other [0,10) = 10
        Step("ProfilerStep#1", 0, 150.0, bd(compute=130.0, idle=20.0), ic(runtime=10, other=10)),
        # #2: start max(150, 100) = 150, end max(200, 260) = 260; compute [150,260) = 110
        Step("ProfilerStep#2", 150, 110.0, bd(compute=110.0), ic()),
        # #3: start max(260, 200) = 260, end max(300, 290) = 300
        #     compute [260,290) = 30; idle [290,300) = 10, host only in ProfilerStep#3: other
        Step("ProfilerStep#3", 260, 40.0, bd(compute=30.0, idle=10.0), ic(other=10.0)),
    ]
    exp = Exp(
        window=300.0,  # [0, 300)
        breakdown=bd(compute=270.0, idle=30.0),  # 130 + 110 + 30; 20 + 10
        idle=ic(runtime=10.0, other=20.0),
        steps=steps,
        kernels={GEMM: (2, 240.0), RELU: (1, 30.0)},  # 130 + 110
    )
    return b, {0: exp}


@scenario()
def gpu_work_before_first_step(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    _three_steps_no_sync(b)
    # launched by no step; ends (5) before step 1's first GPU activity (20): prev_end = 5
    b.launch(FILL, cpu=(-50, -45), gpu=(-40, 5))
    steps = [
        # #1: start max(5, 0) = 5, end 150; idle [5,20): other [5,10) = 5, runtime [10,20) = 10
        Step("ProfilerStep#1", 5, 145.0, bd(compute=130.0, idle=15.0), ic(runtime=10, other=5)),
        Step("ProfilerStep#2", 150, 110.0, bd(compute=110.0), ic()),
        Step("ProfilerStep#3", 260, 40.0, bd(compute=30.0, idle=10.0), ic(other=10.0)),
    ]
    exp = Exp(
        window=295.0,  # [5, 300)
        breakdown=bd(compute=270.0, idle=25.0),  # 15 + 10
        idle=ic(runtime=10.0, other=15.0),
        steps=steps,
    )
    return b, {0: exp}


@scenario()
def gpu_work_into_first_step(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    _three_steps_no_sync(b)
    # launched by no step but ends (25) after step 1's first GPU activity (20): prev_end stays 0
    b.launch(FILL, cpu=(-50, -45), gpu=(-40, 25), stream=20)
    steps = [
        # #1 [0, 150): compute [0,25) u [20,150) = [0,150) = 150 (the FILL clipped to the window)
        Step("ProfilerStep#1", 0, 150.0, bd(compute=150.0), ic()),
        Step("ProfilerStep#2", 150, 110.0, bd(compute=110.0), ic()),
        Step("ProfilerStep#3", 260, 40.0, bd(compute=30.0, idle=10.0), ic(other=10.0)),
    ]
    exp = Exp(
        window=300.0,
        breakdown=bd(compute=290.0, idle=10.0),  # 150 + 110 + 30
        idle=ic(other=10.0),
        steps=steps,
    )
    return b, {0: exp}


@scenario()
def steps_without_recorded_launches(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    # Kernels whose runtime calls were not recorded: no step launched GPU work, so the CPU
    # steps are not stretched (nor dropped): the steps are the CPU spans as recorded.
    b = TraceBuilder(schema)
    b.profiler_step(1, 0, 100)
    b.profiler_step(2, 100, 200)
    b.kernel(GEMM, 10, 20)
    b.kernel(GEMM, 150, 230)  # runs past step 2's CPU end: not stretched
    b.cpu_op("aten::mm", 30, 60)
    steps = [
        # [0,100): compute [10,20) = 10; idle 90: cpu [30,60) = 30, other 60
        Step("ProfilerStep#1", 0, 100.0, bd(compute=10.0, idle=90.0), ic(cpu=30.0, other=60.0)),
        # [100,200): compute [150,200) = 50 (clipped); idle [100,150) = 50: other
        Step("ProfilerStep#2", 100, 100.0, bd(compute=50.0, idle=50.0), ic(other=50.0)),
    ]
    exp = Exp(
        window=200.0,
        breakdown=bd(compute=60.0, idle=140.0),
        idle=ic(cpu=30.0, other=110.0),
        steps=steps,
    )
    return b, {0: exp}


def _launch_burst(b: TraceBuilder, s: int, n: int) -> None:
    # launch i: runtime [s+10i+5, s+10i+10), kernel [s+10i+10, s+10i+18)
    for i in range(n):
        b.launch(
            ELEMENTWISE,
            cpu=(s + 10 * i + 5, s + 10 * i + 10),
            gpu=(s + 10 * i + 10, s + 10 * i + 18),
        )


# One full step of _launch_burst(s, 5) over the CPU step [s, s+100):
# compute 5 x 8 = 40;
# idle 60 = [s,s+10) [s+18,s+20) [s+28,s+30) [s+38,s+40) [s+48,s+50) [s+58,s+100)
# runtime within idle: [s+5,s+10) = 5 and 4 x [s+10i+8, s+10i+10) = 8 -> 13; other 60 - 13 = 47
FULL_BD = bd(compute=40.0, idle=60.0)
FULL_IC = ic(runtime=13.0, other=47.0)


@scenario()
def incomplete_last_step_dropped(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    for k in range(1, 6):
        b.profiler_step(k, 100 * (k - 1), 100 * k)
    _launch_burst(b, 0, 5)
    _launch_burst(b, 100, 5)
    _launch_burst(b, 200, 3)  # 3 < 0.8 x 5 = 4: incompletely captured
    # steps 4 and 5 launch nothing: dropped as trailing; then step 3 dropped as incomplete
    exp = Exp(
        window=200.0,  # steps 1-2: [0, 200)
        breakdown=bd(compute=80.0, idle=120.0),  # 2 x 40; 2 x 60
        idle=ic(runtime=26.0, other=94.0),  # 2 x 13; 2 x 47
        steps=[
            Step("ProfilerStep#1", 0, 100.0, FULL_BD, FULL_IC),
            Step("ProfilerStep#2", 100, 100.0, FULL_BD, FULL_IC),
        ],
    )
    return b, {0: exp}


@scenario()
def last_step_at_80_percent_kept(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    for k in range(1, 6):
        b.profiler_step(k, 100 * (k - 1), 100 * k)
    _launch_burst(b, 0, 5)
    _launch_burst(b, 100, 5)
    _launch_burst(b, 200, 4)  # 4 = 0.8 x 5: not fewer than 80 %, kept
    # step 3: compute 4 x 8 = 32, idle 68; runtime [205,210) 5 + 3 x 2 = 11, other 57
    exp = Exp(
        window=300.0,  # steps 1-3: [0, 300)
        breakdown=bd(compute=112.0, idle=188.0),  # 40 + 40 + 32; 60 + 60 + 68
        idle=ic(runtime=37.0, other=151.0),  # 13 + 13 + 11; 47 + 47 + 57
        steps=[
            Step("ProfilerStep#1", 0, 100.0, FULL_BD, FULL_IC),
            Step("ProfilerStep#2", 100, 100.0, FULL_BD, FULL_IC),
            Step(
                "ProfilerStep#3", 200, 100.0, bd(compute=32.0, idle=68.0), ic(runtime=11, other=57)
            ),
        ],
        kernels={ELEMENTWISE: (14, 112.0)},  # 5 + 5 + 4 kernels of 8
    )
    return b, {0: exp}


@scenario()
def gpu_side_steps(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    # CPU steps (not used: the device has GPU-side steps, and they hold all the work each CPU
    # step launched)
    b.profiler_step(6, 0, 200)
    b.profiler_step(7, 200, 400)
    # GPU-side steps, as recorded
    b.profiler_step(6, 40, 200, gpu=True)
    b.profiler_step(7, 200, 380, gpu=True)
    b.launch(GEMM, cpu=(30, 35), gpu=(40, 100))
    b.launch(GEMM, cpu=(100, 110), gpu=(120, 300))
    b.launch("Memcpy DtoH (Device -> Pinned)", kind="memcpy", cpu=(110, 125), gpu=(300, 320))
    b.launch(RELU, cpu=(320, 328), gpu=(360, 380))
    b.runtime("cudaDeviceSynchronize", 330, 380)
    steps = [
        # #6 [40,200): compute [40,100) + [120,200) = 60 + 80 = 140; idle [100,120) = 20,
        # host in the GEMM launch [100,110) and the memcpy call [110,125): runtime 20
        Step("ProfilerStep#6", 40, 160.0, bd(compute=140.0, idle=20.0), ic(runtime=20.0)),
        # #7 [200,380): compute [200,300) + [360,380) = 120; memcpy [300,320) = 20; idle
        # [320,360) = 40: runtime [320,328) launch + [330,360) sync = 38, other [328,330) = 2
        Step(
            "ProfilerStep#7",
            200,
            180.0,
            bd(compute=120.0, memory=20.0, idle=40.0),
            ic(runtime=38.0, other=2.0),
        ),
    ]
    exp = Exp(
        window=340.0,  # GPU steps [40, 380)
        breakdown=bd(compute=260.0, memory=20.0, idle=60.0),
        idle=ic(runtime=58.0, other=2.0),
        steps=steps,
    )
    return b, {0: exp}


@scenario()
def gpu_steps_missing_work(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    """GPU-side steps that miss work their CPU steps launched give way to the CPU steps."""
    b = TraceBuilder(schema)
    b.profiler_step(6, 0, 200)
    b.profiler_step(7, 200, 400)
    # GPU-side steps that miss GEMM [40,50) and RELU [360,380)
    b.profiler_step(6, 50, 200, gpu=True)
    b.profiler_step(7, 200, 350, gpu=True)
    b.launch(GEMM, cpu=(30, 35), gpu=(40, 100))
    b.launch(GEMM, cpu=(100, 110), gpu=(120, 300))
    b.launch("Memcpy DtoH (Device -> Pinned)", kind="memcpy", cpu=(110, 125), gpu=(300, 320))
    b.launch(RELU, cpu=(320, 328), gpu=(360, 380))  # after the last GPU step
    b.runtime("cudaDeviceSynchronize", 330, 380)
    # CPU steps stretched over their work: #6 [0,320) (two GEMMs and the memcpy); #7 launched
    # one kernel against #6's three: dropped as incompletely captured.
    # #6: compute [40,100) + [120,300) = 240; memcpy [300,320) = 20; idle [0,40) + [100,120)
    # = 60: runtime [30,35) + [100,110) + [110,120) = 25, other 35.
    steps = [
        Step("ProfilerStep#6", 0, 320.0, bd(compute=240.0, memory=20.0, idle=60.0),
             ic(runtime=25.0, other=35.0)),
    ]  # fmt: skip
    exp = Exp(
        window=320.0,
        breakdown=bd(compute=240.0, memory=20.0, idle=60.0),
        idle=ic(runtime=25.0, other=35.0),
        steps=steps,
    )
    return b, {0: exp}


@scenario()
def no_steps_hull(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.launch("Memcpy HtoD (Pageable -> Device)", kind="memcpy", cpu=(-20, -5), gpu=(0, 30))
    b.launch(GEMM, cpu=(-4, -2), gpu=(40, 100))
    b.launch("Memset (Device)", kind="memset", cpu=(95, 99), gpu=(100, 105))
    b.cpu_op("aten::nonzero", 110, 140)
    b.launch(RELU, cpu=(140, 146), gpu=(150, 170), stream=20)
    exp = Exp(
        window=170.0,  # hull of GPU activity [0, 170) (starts with the memcpy)
        # compute [40,100) + [150,170) = 80; memory [0,30) + [100,105) = 35
        # idle [30,40) + [105,150) = 10 + 45 = 55;  80 + 35 + 55 = 170
        breakdown=bd(compute=80.0, memory=35.0, idle=55.0),
        # cpu [110,140) = 30; runtime [140,146) = 6; other [30,40) + [105,110) + [146,150) = 19
        idle=ic(runtime=6.0, cpu=30.0, other=19.0),
        kernels={GEMM: (1, 60.0), RELU: (1, 20.0)},
    )
    return b, {0: exp}


@scenario()
def memory_under_kernels(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    b = TraceBuilder(schema)
    b.launch(GEMM, cpu=(-30, -25), gpu=(0, 100), stream=7)
    b.launch(
        "Memcpy DtoD (Device -> Device)", kind="memcpy", cpu=(-20, -18), gpu=(20, 50), stream=20
    )
    b.launch("Memset (Device)", kind="memset", cpu=(-16, -14), gpu=(90, 120), stream=21)
    b.launch(NCCL_ALLREDUCE, cpu=(-12, -8), gpu=(120, 160), stream=22)
    b.launch(
        "Memcpy DtoH (Device -> Pinned)", kind="memcpy", cpu=(-6, -4), gpu=(150, 170), stream=20
    )
    exp = Exp(
        window=170.0,  # hull [0, 170)
        # compute [0,100) = 100; communication [120,160) = 40
        # memory: memcpy [20,50) under the kernel: 0; memset [90,120) minus [0,100) = 20;
        # memcpy [150,170) minus communication [120,160) = 10 -> 30;  100 + 40 + 30 = 170
        breakdown=bd(compute=100.0, communication=40.0, memory=30.0),
        idle=ic(),
        comm=(40.0, 0.0),
        kernels={GEMM: (1, 100.0), NCCL_ALLREDUCE: (1, 40.0)},
    )
    return b, {0: exp}


@scenario()
def fractional_ns(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    # Times in ns (unit_ns=1). The base 1712195495519689.047 us cannot be held by a float64
    # (spacing 0.25 us there), so any float parsing of the timestamps shows here.
    b = TraceBuilder(schema, unit_ns=1)
    b.profiler_step(3, 0, 10_001)
    b.launch(GEMM, cpu=(101, 1_046), gpu=(1_047, 3_512), stream=7)
    b.launch(GEMM_B, cpu=(1_100, 1_999), gpu=(2_999, 5_001), stream=20)
    b.launch(NCCL_ALLREDUCE, cpu=(2_000, 2_333), gpu=(4_000, 9_999), stream=21)
    b.runtime("cudaDeviceSynchronize", 2_400, 10_000)
    # step [0, max(10_001, 9_999)) = 10.001 us
    # compute [1_047,3_512) u [2_999,5_001) = [1_047,5_001) = 3_954 ns
    # communication [4_000,9_999) minus compute = [5_001,9_999) = 4_998 ns
    # idle [0,1_047) + [9_999,10_001) = 1_049 ns;  3_954 + 4_998 + 1_049 = 10_001
    # runtime [101,1_046) = 945 + [9_999,10_000) sync = 1 -> 946
    # other [0,101) + [1_046,1_047) + [10_000,10_001) = 101 + 1 + 1 = 103
    per_bd = bd(compute=3.954, communication=4.998, idle=1.049)
    per_ic = ic(runtime=0.946, other=0.103)
    exp = Exp(
        window=10.001,
        breakdown=per_bd,
        idle=per_ic,
        comm=(5.999, 1.001),  # total [4_000,9_999); under compute [4_000,5_001)
        steps=[Step("ProfilerStep#3", 0, 10.001, per_bd, per_ic)],
        kernels={GEMM: (1, 2.465), GEMM_B: (1, 2.002), NCCL_ALLREDUCE: (1, 5.999)},
    )
    return b, {0: exp}


@scenario()
def two_devices(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    # Host events apply to every device of the trace.
    b = TraceBuilder(schema)
    b.launch(GEMM, cpu=(-10, -5), gpu=(0, 100), device=0)
    b.launch(RELU, cpu=(-4, -1), gpu=(20, 60), device=1)
    b.cpu_op("aten::nonzero", 100, 140)
    b.launch(RELU, cpu=(105, 108), gpu=(110, 130), device=1)
    b.launch(GEMM, cpu=(140, 145), gpu=(150, 200), device=0)
    dev0 = Exp(
        window=200.0,  # [0, 200)
        breakdown=bd(compute=150.0, idle=50.0),  # idle [100,150)
        # runtime [105,108) + [140,145) = 8; cpu [100,105) + [108,140) = 37; other [145,150) = 5
        idle=ic(runtime=8.0, cpu=37.0, other=5.0),
        kernels={GEMM: (2, 150.0)},
    )
    dev1 = Exp(
        window=110.0,  # [20, 130)
        breakdown=bd(compute=60.0, idle=50.0),  # 40 + 20; idle [60,110)
        # other [60,100) = 40; cpu [100,105) = 5; runtime [105,108) = 3; cpu [108,110) = 2
        idle=ic(runtime=3.0, cpu=7.0, other=40.0),
        kernels={RELU: (2, 60.0)},
    )
    return b, {0: dev0, 1: dev1}


@scenario("modern")
def multiprocess_dataloader_other_thread(schema: str) -> tuple[TraceBuilder, dict[int, Exp]]:
    # The DataLoader span and a cpu_op on the main thread, a launch from the autograd thread.
    b = TraceBuilder(schema, tid=100)
    b.profiler_step(1, 0, 200)
    b.dataloader(0, 60, name=DATALOADER_NEXT_MP)
    b.launch(GEMM, cpu=(60, 70), gpu=(80, 150), tid=101)
    b.cpu_op("aten::sum", 150, 170)
    b.launch(RELU, cpu=(170, 180), gpu=(180, 190))
    # step [0, max(200, 190)) = [0, 200); compute [80,150) + [180,190) = 80; idle 120
    # dataloader [0,60) = 60; runtime [60,70) + [170,180) = 20; cpu [150,170) = 20;
    # other [70,80) + [190,200) = 20
    per_bd = bd(compute=80.0, idle=120.0)
    per_ic = ic(runtime=20.0, dataloader=60.0, cpu=20.0, other=20.0)
    exp = Exp(
        window=200.0,
        breakdown=per_bd,
        idle=per_ic,
        steps=[Step("ProfilerStep#1", 0, 200.0, per_bd, per_ic)],
        kernels={GEMM: (1, 70.0), RELU: (1, 10.0)},
    )
    return b, {0: exp}


# ---- checking ---------------------------------------------------------------------------------


def close(actual: float, expected: float, what: str, tol: float = TOL) -> None:
    assert actual is not None, f"{what}: null, expected {expected}"
    assert abs(actual - expected) <= tol, f"{what}: got {actual!r}, expected {expected!r}"


def close_abs_time(actual: float, expected: float, what: str) -> None:
    # Absolute timestamps near 1.7e15 us: a float64 holds them only to 0.25 us, so allow one
    # unit in the last place besides the 0.001 us.
    close(actual, expected, what, tol=TOL + math.ulp(expected))


def check_parts(got: dict[str, float], exp: dict[str, float], what: str) -> None:
    assert set(got) == set(exp), f"{what}: keys {sorted(got)}"
    for key, value in exp.items():
        close(got[key], value, f"{what}.{key}")


def check_device(dev: dict[str, Any], exp: Exp, b: TraceBuilder) -> None:
    d = dev["device"]
    close(dev["window_us"], exp.window, f"device {d} window_us")
    check_parts(dev["breakdown_us"], exp.breakdown, f"device {d} breakdown_us")
    check_parts(dev["idle_causes_us"], exp.idle, f"device {d} idle_causes_us")
    close(dev["goodput"], exp.breakdown["compute"] / exp.window, f"device {d} goodput", 1e-6)
    close(dev["comm"]["total_us"], exp.comm[0], f"device {d} comm.total_us")
    close(dev["comm"]["overlapped_us"], exp.comm[1], f"device {d} comm.overlapped_us")
    names = [s["name"] for s in dev["steps"]]
    assert names == [s.name for s in exp.steps], f"device {d} steps"
    for got, want in zip(dev["steps"], exp.steps, strict=True):
        close_abs_time(got["start_us"], b.abs_us(want.start), f"{want.name} start_us")
        close(got["dur_us"], want.dur, f"{want.name} dur_us")
        check_parts(got["breakdown_us"], want.breakdown, f"{want.name} breakdown_us")
        check_parts(got["idle_causes_us"], want.idle, f"{want.name} idle_causes_us")
    if exp.kernels is not None:
        table = {k["name"]: k for k in dev["kernels"]}
        for name, (count, total) in exp.kernels.items():
            assert name in table, f"device {d}: kernel {name!r} missing from {sorted(table)}"
            row = table[name]
            assert row["count"] == count, f"{name}: count {row['count']} != {count}"
            close(row["total_us"], total, f"{name} total_us")
            close(row["mean_us"], total / count, f"{name} mean_us")
    if exp.check_identity:
        assert dev["rank"] == exp.rank
        assert dev["gpu"] == exp.gpu


def check_report(report: dict[str, Any], b: TraceBuilder, expected: dict[int, Exp]) -> None:
    assert report["schema"] == "badput.analysis/1"
    assert isinstance(report["badput_version"], str)
    devices = {dev["device"]: dev for dev in report["devices"]}
    assert len(devices) == len(report["devices"]), "one entry per device"
    assert sorted(devices) == sorted(expected), f"devices {sorted(devices)}"
    for device, exp in expected.items():
        check_device(devices[device], exp, b)


CASES = [
    pytest.param(name, schema, id=f"{name}-{schema}")
    for name, sc in SCENARIOS.items()
    for schema in sc.schemas
]


@pytest.mark.parametrize("variant", ["plain", "shuffled", "shuffled-gz"])
@pytest.mark.parametrize(("name", "schema"), CASES)
def test_scenario(
    name: str, schema: str, variant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b, expected = SCENARIOS[name].build(schema)
    suffix = ".pt.trace.json.gz" if variant.endswith("gz") else ".pt.trace.json"
    shuffle = None if variant == "plain" else 20240404
    path = b.write(tmp_path / f"{name}{suffix}", shuffle=shuffle)
    report = analyze_json(capsys, path)
    check_report(report, b, expected)


def _strip_paths(report: dict[str, Any]) -> list[dict[str, Any]]:
    def strip(entry: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in entry.items() if k != "trace"}
        if "findings" in out:
            out["findings"] = [strip(f) for f in out["findings"]]
        return out

    return [strip(dev) for dev in report["devices"]]


@pytest.mark.parametrize("name", ["exposed_comm", "gpu_side_steps", "fractional_ns", "two_devices"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shuffled_report_identical(
    name: str, seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b, _ = SCENARIOS[name].build("modern")
    plain = analyze_json(capsys, b.write(tmp_path / "plain.json"))
    shuffled = analyze_json(capsys, b.write(tmp_path / "shuffled.json", shuffle=seed))
    assert _strip_paths(shuffled) == _strip_paths(plain)


def test_out_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b, expected = SCENARIOS["steps_without_final_sync"].build("modern")
    path = b.write(tmp_path / "t.pt.trace.json")
    out_file = tmp_path / "report.json"
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", "--out", out_file)
    assert code == 0, err
    assert out_file.exists()
    report = json.loads(out_file.read_text())
    check_report(report, b, expected)
    assert '"badput.analysis/1"' not in out  # the report went to the file, not stdout
    stdout_report = analyze_json(capsys, path)
    assert _strip_paths(stdout_report) == _strip_paths(report)


def test_trace_path_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b, _ = SCENARIOS["multi_stream_overlap"].build("modern")
    path = b.write(tmp_path / "named.pt.trace.json")
    (dev,) = analyze_json(capsys, path)["devices"]
    assert Path(dev["trace"]).name == "named.pt.trace.json"
    assert dev["rank"] is None  # no distributedInfo
    assert dev["gpu"] is None  # no deviceProperties


# ---- the builder itself (no CLI needed) -------------------------------------------------------


@pytest.mark.parametrize("schema", ["modern", "legacy"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_builder_writes_kineto_json(schema: str, suffix: str, tmp_path: Path) -> None:
    b, _ = SCENARIOS["fractional_ns"].build(schema)
    path = b.write(tmp_path / f"t{suffix}", shuffle=7)
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if suffix.endswith(".gz") else raw.decode()
    doc = json.loads(text)
    # ns-exact text: kernel GEMM at 1_047 ns after the base
    assert f'"ts": {(BASE_NS + 1_047) // 1000}.{(BASE_NS + 1_047) % 1000:03d}' in text
    assert '"dur": 2.465' in text
    assert BASE_NS > 2**53
    events = doc["traceEvents"]
    inside = text.split('"traceEvents": [\n', 1)[1].split("\n  ],", 1)[0]
    assert len(inside.splitlines()) == len(events)  # one event per line
    cats = {e.get("cat") for e in events}
    if schema == "modern":
        assert {"kernel", "cuda_runtime", "user_annotation", "ac2g"} <= cats
    else:
        assert {"Kernel", "Runtime", "Operator", "async"} <= cats
        assert "kernel" not in cats and "cuda_runtime" not in cats
    kernels = [e for e in events if e.get("cat") in ("kernel", "Kernel")]
    runtime_corr = {
        e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "Runtime")
    }
    assert kernels and all(k["args"]["correlation"] in runtime_corr for k in kernels)
