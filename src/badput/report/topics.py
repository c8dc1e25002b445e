"""What `badput explain TOPIC` says about the tables that are no diagnosis rule.

Each topic is plain text (the formulas are those of `badput.analysis.ops`; docs/ops.md is the
long form). Rule ids and topic names never collide: tests check it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from badput.analysis.critical_path import BREAKDOWN_KEYS
from badput.analysis.patterns import CATEGORIES, COMM_KINDS, COMM_OP_FAMILIES, name_table

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["TOPICS", "Topic", "render_index"]


@dataclass(frozen=True)
class Topic:
    """One explained table or number."""

    name: str
    title: str
    text: str
    limits: str
    doc: str = "docs/ops.md"


def _classify_text() -> str:
    lines = [
        "Every kernel gets a category (" + ", ".join(CATEGORIES) + "; memcpy and memset are "
        "memory), a communication kind when it moves data between GPUs ("
        + ", ".join(COMM_KINDS)
        + "), and the evidence that decided it, shown in the kernel table (JSON: 'evidence'). "
        "The evidence is tried in this order; the first that speaks decides:",
        '  1. override: a rule of --classify FILE (TOML lines \'"regex" = "category"\' or '
        '\'"regex" = "kind"\', at the top level or under [kernels]; first match wins; the '
        "regex is searched in the kernel name).",
        "  2. NCCL metadata: the kernel's own 'Collective name' arg.",
        "  3. launching op: the nearest communication op or frame above the kernel's launch call, "
        "with no other op between them (a copy that an all-gather launches through "
        "aten::copy_ stays a copy). Communication ops and frames:",
        *(f"       - {f}" for f in COMM_OP_FAMILIES),
        "  4. name: the family of the kernel's callee (its function path without template "
        "arguments); a name no family knows takes the family of its launching op (launching op "
        "family: aten::mm/addmm/bmm/convolution -> gemm, attention ops -> attention).",
        "  5. stream: an unknown kernel, launched by no plain op, on a stream whose other "
        "kernels are all communication is communication.",
        "The kind comes from NCCL metadata (own or the launching op's), else the launching op's "
        "name, else the kernel name.",
        "",
        "Built-in name table (category | family | what it matches), tried in order:",
    ]
    lines += [f"  {cat} | {family} | {what}" for cat, family, what in name_table()]
    return "\n".join(lines)


TOPICS: dict[str, Topic] = {
    t.name: t
    for t in (
        Topic(
            "classify",
            "kernel classes: category, communication kind, and the evidence that decides them",
            _classify_text(),
            "A kernel launched outside any op and named by no family stays 'other' unless its "
            "stream says otherwise; --classify fixes such cases. Without the launch tree "
            "(analyze_trace(model=False)) the launching-op evidence is skipped.",
            "docs/analysis.md",
        ),
        Topic(
            "ops",
            "top ops: GPU time per op, shapes and dtype, on its roofline",
            "Every kernel, memcpy and memset is linked to the CUDA call that launched it (by "
            "correlation id, CUDA-graph replays included) and to the ops around that call. It "
            "belongs to the outermost op badput has a performance model for (composite ops "
            "such as aten::linear or aten::matmul only when nothing modelled lies inside "
            "them), else to the op that launched it, else to the record_function range around "
            "the launch. A row is one (op, Input Dims, Input type) group: calls, GPU ms (the "
            "summed time of everything the calls launched), FLOPs and bytes of one call from "
            "its shapes and dtypes, TFLOP/s = FLOPs x calls / GPU time, intensity = FLOPs / "
            "bytes, bound = compute when the intensity is at or above the GPU's ridge point "
            "(peak TFLOP/s at the op's precision / peak TB/s), and % of roof = achieved over "
            "min(peak, intensity x bandwidth). The precision comes from the recorded Input "
            "type, never from the kernel name (its f32 is usually the accumulator).",
            "Needs record_shapes=True for FLOPs; ops badput does not model (custom ops, Triton "
            "kernels) show GPU time only. Bytes are the minimal traffic (each operand read "
            "once), not measured DRAM bytes. An unknown GPU gets no roof.",
        ),
        Topic(
            "modules",
            "modules: GPU time per nn.Module path, rolled up",
            "With with_stack=True the profiler records an 'nn.Module: X_N' frame around each "
            "module's forward. The module path of a kernel is the module frames around its "
            "launch, outermost first; backward kernels take the module of their forward op "
            "through the profiler's fwdbwd links. Times are rolled up: a module includes its "
            "children. Attributed time outside every module is '(no module)', so the roots add "
            "up to the attributed GPU time.",
            "Needs with_stack=True; without fwdbwd links (old traces) backward kernels have no "
            "module, and badput says so.",
        ),
        Topic(
            "mfu",
            "MFU and its waterfall",
            "MFU = modelled FLOPs / (window x peak), with the peak of the GPU at the precision "
            "that holds most modelled FLOPs (dense, from badput's hardware table). The "
            "waterfall splits that peak into what was lost and achieved: idle, exposed "
            "communication, exposed memory copies (each its share of the window x peak), "
            "kernels without a model, memory-bound ops (elementwise, norms, reductions: their "
            "time x peak minus their FLOPs), matmul and attention below their roof (their time "
            "x peak minus their FLOPs), and achieved. Compute time is split among the three "
            "kernel classes by their summed kernel time. The stages add up to the peak.",
            "Only modelled ops count FLOPs: 'model covers N % of kernel time' says how much the "
            "MFU can be trusted (a low share makes it a lower bound). No MFU for an unknown "
            "GPU or a trace without shapes.",
        ),
        Topic(
            "attribution",
            "attribution: GPU time linked to an op",
            "The share of the window's GPU time that belongs to an op (see 'ops'). The rest is "
            "listed by reason: 'no launch call' (no recorded CUDA call has the kernel's "
            "correlation id), 'launched before the trace' (its id is older than every recorded "
            "call: work queued before profiling started), 'launch outside any op' (a CUDA call "
            "outside every op and record_function range).",
            "Kernels launched by code the profiler does not see as an op (C++ extensions "
            "without RECORD_FUNCTION, some Triton launches) are unattributed.",
        ),
        Topic(
            "critical-path",
            "critical path: the longest chain of dependent work through the window",
            "A graph of the window: a start and an end node per host op or runtime call and "
            "per GPU activity; edges along each host thread (an op's own time, and the time "
            "annotations or Python frames cover between ops: the loop's own code), along each "
            "stream (an activity's duration, the gap to the next), from each launch call to "
            "its activity (the launch delay, where the stream's queue was empty), from the GPU "
            "work a blocking call waited for to its end (sync), and from cudaEventRecord to "
            "cudaStreamWaitEvent (event waits). The critical path is the longest path; its "
            "length splits into " + ", ".join(BREAKDOWN_KEYS) + " by its edges, and its time "
            "goes to ops (host time to the op around it, GPU time to the op that launched the "
            "work). A finding's critical_path_savings_us is the path's length less its length "
            "after the fix (shrunk edges: the DataLoader's host time, a sync that no longer "
            "waits, no host time or launch delays, hidden communication, faster kernels).",
            "One GPU at a time; no edges between ranks. Without correlation ids or host events "
            "the missing edges are named in the warnings. critical_path(between_ops=False) "
            "gives HTA's graph, where time between top-level ops is idle.",
            "docs/critical_path.md",
        ),
    )
}


def render_index(entries: Sequence[tuple[str, str, str]], console: Console) -> None:
    """What `badput explain` lists: one row per (id, kind, title), then how to read one.

    Ids are never shortened (they are what to type); titles wrap onto more lines when the
    terminal is narrow.
    """
    from badput.report.table import Col, fitted

    cols = [
        Col("id"),
        Col("kind"),
        Col(
            "what it explains",
            elastic=True,
            floor=24,
            shrink=lambda cells, w: [textwrap.fill(c, w) for c in cells],
        ),
    ]
    console.print(fitted(cols, [list(e) for e in entries], console.width).table)
    console.print("\nbadput explain ID prints one in full.")
