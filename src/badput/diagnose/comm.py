"""The communication rule: collective time not hidden under compute, and its fix by context.

The fix depends on what the exposed communication is, decided from evidence: its kind (from
NCCL metadata, the launching op or the kernel family: `analysis.classify`), its library
(NCCL, DeepEP, a custom all-reduce ...), the group it runs in (NCCL metadata `Group size`
against the world size) and whether the trace is training or inference
(`analysis.workload`). A data-parallel gradient all-reduce gets bucketing and overlap with
backward; pipeline send/recv gets the schedule and micro-batches; an expert-parallel
all-to-all gets micro-batch overlap and DeepEP; a tensor-parallel all-reduce in inference gets
custom or symmetric-memory all-reduce and fusion.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.analysis.comm import COLLECTIVE_TYPES, collectives
from badput.analysis.critical_path import GraphChange
from badput.analysis.patterns import CATEGORIES
from badput.analysis.workload import Workload, workload_of
from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import pct as _pct
from badput.diagnose._rule import register as _register
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import Evidence, Finding, Rule

__all__ = ["CONTEXT_FIXES", "exposed_communication"]

_LINK = (
    "Check the link: NCCL_DEBUG=INFO for the transport, nccl-tests busbw against the "
    "hardware's NVLink/InfiniBand bandwidth."
)

#: Fixes by (kind, workload): what to do about exposed communication of that kind. The
#: workload key is "training", "inference" or "any".
CONTEXT_FIXES: dict[tuple[str, str], list[str]] = {
    ("all_reduce", "training"): [
        "Overlap the gradient all-reduce with backward: DDP buckets (bucket_cap_mb, "
        "gradient_as_bucket_view=True); no blocking collective inside the step.",
        "Fewer, larger collectives: bucket small gradients together; with gradient "
        "accumulation, all-reduce only on the last micro-batch (DDP no_sync()).",
        "Shard instead of replicating: FSDP/ZeRO turn one all-reduce into reduce-scatter + "
        "all-gather that overlap with compute.",
    ],
    ("all_gather", "training"): [
        "Prefetch the parameter all-gather: FSDP forward_prefetch=True, "
        "backward_prefetch=BACKWARD_PRE (FSDP2: explicit prefetching, "
        "reshard_after_forward=False for the last layers).",
        "Larger FSDP units (wrap bigger modules) so each all-gather hides under more compute.",
    ],
    ("reduce_scatter", "training"): [
        "Overlap the gradient reduce-scatter with backward: FSDP backward_prefetch="
        "BACKWARD_PRE; do not reduce in a blocking call after backward.",
        "Larger FSDP units so each reduce-scatter hides under more compute.",
    ],
    ("all_reduce", "inference"): [
        "Use a custom all-reduce for tensor parallelism: one-shot/two-shot kernels over "
        "NVLink (vLLM/SGLang custom all-reduce, TensorRT-LLM AllReduce) or PyTorch symmetric "
        "memory (torch.distributed._symmetric_memory: one_shot_all_reduce, "
        "multimem_all_reduce_ on NVSwitch systems).",
        "Fuse the all-reduce with the residual add and RMSNorm that follow it "
        "(allreduce + rmsnorm fusion in TensorRT-LLM/FlashInfer/SGLang).",
        "Overlap it with compute: split the batch into two micro-batches and run one's "
        "all-reduce under the other's GEMMs; or trade TP degree for data/expert parallelism.",
    ],
    ("all_gather", "inference"): [
        "Overlap the all-gather with the GEMM that consumes it (async tensor parallelism: "
        "torch._inductor.config._micro_pipeline_tp, fused all-gather-matmul).",
        "Fewer gathers: keep activations sharded across layers (sequence parallelism).",
    ],
    ("reduce_scatter", "inference"): [
        "Overlap the reduce-scatter with the GEMM that produces it (fused matmul-reduce-"
        "scatter, async tensor parallelism).",
    ],
    ("all_to_all", "any"): [
        "Hide the expert-parallel dispatch/combine under compute of another micro-batch: "
        "two-micro-batch overlap (one batch's all-to-all under the other's attention and "
        "experts) or a DualPipe-style schedule that pairs forward and backward chunks.",
        "Use DeepEP (or pplx-kernels) for dispatch/combine instead of a plain NCCL "
        "all-to-all; with DeepEP, the low-latency kernels with return_recv_hook=True receive "
        "without occupying SMs, and Buffer.set_num_sms leaves SMs to overlapping compute.",
        "Cut the traffic: node-limited routing (each token to experts on few nodes), FP8 "
        "dispatch, and balanced expert load (redundant experts for hot ones) so no rank "
        "waits for the busiest.",
    ],
    ("send_recv", "training"): [
        "Shrink the pipeline bubble: more micro-batches per step (the bubble is "
        "(stages - 1) / (micro-batches + stages - 1) of the step), an interleaved 1F1B "
        "schedule (virtual stages), or zero-bubble / DualPipe schedules.",
        "Overlap the stage-to-stage send/recv with compute (batch_isend_irecv on a side "
        "stream; Megatron overlap_p2p_comm).",
        "Balance the stages: the slowest stage sets every stage's pace.",
    ],
    ("send_recv", "inference"): [
        "Overlap the stage-to-stage send/recv with compute: keep several micro-batches in "
        "flight through the pipeline.",
        "Balance the stages, or trade pipeline for tensor parallelism inside a node.",
    ],
    ("broadcast", "any"): [
        "Broadcast once, outside the step (parameters and buffers at start-up); DDP "
        "broadcast_buffers=False when the buffers do not change.",
    ],
    ("other", "any"): [
        "Overlap the collectives with compute on a separate stream, and issue fewer, larger ones.",
    ],
}

_LABEL = {
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
    "send_recv": "send/recv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "other": "communication",
}


def fixes_for(kind: str, workload: Workload) -> list[str]:
    """The fixes for exposed communication of `kind` in this workload."""
    wl = "inference" if workload.kind == "inference" else "training"
    for key in ((kind, wl), (kind, "any"), (kind, "training"), ("other", "any")):
        if key in CONTEXT_FIXES:
            return list(CONTEXT_FIXES[key])
    return []


@dataclass(frozen=True)
class _Kind:
    kind: str
    exposed_ns: int
    total_ns: int
    count: int
    evidence: str  # the most common evidence of its kernels (launching op, family)
    group_sizes: str


@_register(
    Rule(
        id="exposed-communication",
        title="Collective communication not hidden under compute",
        explanation=(
            "Communication kernels (NCCL/RCCL collectives, DeepEP or other expert-parallel "
            "dispatch/combine, custom all-reduce, send/recv) run while no compute kernel "
            "runs: the step waits on the network. Which kernels are communication, and of "
            "which kind, is decided from the trace's evidence: NCCL metadata, the launching "
            "op (c10d, record_param_comms, functional collectives, DeepEP, custom all-reduce "
            "ops), the kernel's family, the stream (see `badput explain classify`). The fix "
            "depends on the kind, the group and the workload: a data-parallel gradient "
            "all-reduce in training, pipeline send/recv, an expert-parallel all-to-all, a "
            "tensor-parallel all-reduce in inference."
        ),
        savings=(
            "What-if: communication fully overlapped with compute. Savings per step = "
            "communication time not under compute / steps (the exposed part). Where a named "
            "straggler makes this rank wait, that wait is the straggler's (see 'straggler')."
        ),
        fix=[
            *CONTEXT_FIXES[("all_reduce", "training")],
            *CONTEXT_FIXES[("all_to_all", "any")][:1],
            *CONTEXT_FIXES[("send_recv", "training")][:1],
            *CONTEXT_FIXES[("all_reduce", "inference")][:1],
            _LINK,
        ],
        refs=[f"{_PT}/notes/ddp.html", f"{_PT}/fsdp.html", "https://github.com/deepseek-ai/DeepEP"],
    )
)
def exposed_communication(ctx: DeviceContext) -> Finding | None:
    """Communication time outside compute, with the fix for its kind, group and workload."""
    tl = ctx.timeline
    exposed = tl.exposed_communication.total_ns()
    if exposed == 0:
        return None
    savings = ctx.per_step(exposed)
    comm = ctx.analysis.comm
    kinds = _by_kind(ctx)
    workload = workload_of(ctx.trace)
    per = ctx.per_step_text
    # Evidence keys say "per_step" also without steps (the window is then the one step);
    # the titles say which.
    evidence: dict[str, Evidence] = {
        "exposed_communication_per_step": ms(savings),
        "communication_per_step": ms(ctx.per_step(comm.total_ns)),
        "hidden_under_compute": Evidence(
            round(100 * comm.overlapped_ns / comm.total_ns, 1) if comm.total_ns else 0.0, "%"
        ),
        "workload": Evidence(f"{workload.kind} ({workload.evidence})"),
    }
    fix: list[str] = []
    if kinds:
        top = kinds[0]
        for k in kinds[:3]:
            evidence[f"exposed_{k.kind}"] = Evidence(
                f"{ctx.per_step(k.exposed_ns) / 1e6:,.3f} ms {per} of "
                f"{ctx.per_step(k.total_ns) / 1e6:,.3f} ms; {k.count} kernels; {k.evidence}"
                + (f"; group size {k.group_sizes}" if k.group_sizes else "")
            )
        evidence["decided_by"] = Evidence(top.evidence)
        fix = fixes_for(top.kind, workload)
        if (
            top.kind == "all_reduce"
            and workload.kind == "inference"
            and _already_custom(top.evidence)
        ):
            # Already a custom/symmetric-memory all-reduce: fusion and overlap are what is left.
            fix = [f for f in fix if not f.startswith("Use a custom all-reduce")]
        for k in kinds[1:3]:
            if k.exposed_ns * 4 >= exposed:  # a second kind with a quarter of the exposed time
                extra = [f for f in fixes_for(k.kind, workload) if f not in fix]
                fix += extra[:1]
        what = _LABEL.get(top.kind, top.kind)
        lib = _library(top.evidence)
        what_text = f"{what} ({lib})" if lib else what
    else:
        what_text = "communication"
    fix.append(_LINK)
    evidence["collective_kernels_per_step"] = Evidence(
        round(sum(k.count for k in kinds) / ctx.n_steps, 1)
    )
    largest = [k for k in ctx.analysis.kernels if k.category == "communication"]
    if largest:
        evidence["largest_collective"] = Evidence(largest[0].name[:120])
    return ctx.finding(
        "exposed-communication",
        f"{savings / 1e6:,.2f} ms {per} ({_pct(ctx.share(savings))}) of {what_text} "
        "is not hidden under compute",
        savings,
        evidence,
        fix,
        # Hidden entirely: the communication kernels leave the path.
        change=GraphChange(gpu_rows=_comm_rows(ctx)),
    )


def _comm_rows(ctx: DeviceContext) -> npt.NDArray[np.int64]:
    """The device's communication kernels (Trace rows), by their classes."""
    classes = ctx.timeline.classes
    if classes is None:
        return np.zeros(0, dtype=np.int64)
    rows: npt.NDArray[np.int64] = classes.row[
        classes.category == CATEGORIES.index("communication")
    ].astype(np.int64)
    on_device: npt.NDArray[np.int64] = rows[ctx.trace.device[rows] == ctx.analysis.device]
    return on_device


def _library(evidence: str) -> str:
    """The library or op of an evidence text, for the title (`DeepEP`, `c10d::send`)."""
    _, _, what = evidence.partition(": ")
    if what.endswith(")") and " (" in what:
        return what.rsplit(" (", 1)[1][:-1][:60]  # "op (family)" -> the family
    return what[:60]


_CUSTOM_AR = ("custom", "symmetric", "multimem", "one_shot", "two_shot", "cross_device", "trtllm")


def _already_custom(evidence: str) -> bool:
    """Whether an all-reduce already runs in a custom or symmetric-memory kernel."""
    low = evidence.lower()
    return any(k in low for k in _CUSTOM_AR)


def _groups(sizes: list[int], world: int | None) -> str:
    """The group sizes seen, against the world size: `2 of world 4`."""
    if not sizes:
        return ""
    text = ", ".join(map(str, sizes))
    return f"{text} of world {world}" if world else text


def _by_kind(ctx: DeviceContext) -> list[_Kind]:
    """Exposed and total time per communication kind, most exposed first."""
    c = collectives(ctx.trace, ctx.analysis)
    if len(c) == 0:
        return []
    classes = ctx.timeline.classes
    # Each kernel's evidence as an index into the distinct ones (tens of thousands of
    # kernels, a few kinds of evidence: each in words once, from one kernel that has it).
    if classes is not None:
        entry = classes.index_of(c.row)
        detail = classes.detail[entry].astype(np.int64)
        pair = classes.source[entry].astype(np.int64) * (int(detail.max()) + 1) + detail
        _, first, evidence_at = np.unique(pair, return_index=True, return_inverse=True)
        evidence = [classes.evidence(int(entry[i])) for i in first.tolist()]
    else:
        evidence_at, evidence = np.zeros(len(c), dtype=np.intp), ["name"]
    length = c.end_ns - c.start_ns
    out: list[_Kind] = []
    for code in sorted(set(c.type_code.tolist())):
        ix = np.flatnonzero(c.type_code == code)
        # Time per evidence (the words, which entries may share), among its kernels' own.
        per_entry = np.zeros(len(evidence), dtype=np.int64)
        np.add.at(per_entry, evidence_at[ix], length[ix])
        counts: dict[str, int] = defaultdict(int)
        for e in sorted(set(evidence_at[ix].tolist())):
            counts[evidence[e]] += int(per_entry[e])
        ev = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        sizes = sorted({int(g) for g in c.group_size[ix].tolist() if g >= 0})
        out.append(
            _Kind(
                kind=COLLECTIVE_TYPES[code],
                exposed_ns=int(c.exposed_ns[ix].sum()),
                total_ns=int(c.inside_ns[ix].sum()),
                count=int(ix.shape[0]),
                evidence=ev,
                group_sizes=_groups(sizes, ctx.analysis.world_size),
            )
        )
    out.sort(key=lambda k: (-k.exposed_ns, -k.total_ns, k.kind))
    return out
