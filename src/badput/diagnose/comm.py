"""The communication rule: collective time not hidden under compute, and its fix by context."""

from __future__ import annotations

from badput.diagnose._rule import PT as _PT
from badput.diagnose._rule import pct as _pct
from badput.diagnose._rule import register as _register
from badput.diagnose.context import DeviceContext, ms
from badput.diagnose.findings import Evidence, Finding, Rule

__all__ = ["exposed_communication"]


# ---- exposed-communication ------------------------------------------------------------------


@_register(
    Rule(
        id="exposed-communication",
        title="Collective communication not hidden under compute",
        explanation=(
            "Collective kernels (NCCL all-reduce, all-gather, reduce-scatter, all-to-all...) "
            "run while no compute kernel runs: the step waits on the network. Either the "
            "collectives are not overlapped with backward/forward compute, or they are too "
            "slow (small messages, a slow link, a straggling rank)."
        ),
        savings=(
            "What-if: communication fully overlapped with compute. Savings per step = "
            "collective time not under compute / steps (the exposed part)."
        ),
        fix=[
            "Overlap gradient all-reduce with backward: DDP buckets (bucket_cap_mb, "
            "gradient_as_bucket_view=True); no blocking collective inside the step.",
            "With FSDP, prefetch: forward_prefetch=True, backward_prefetch=BACKWARD_PRE (or "
            "FSDP2 reshard_after_forward / explicit prefetching).",
            "Fewer, larger collectives: bucket small tensors together.",
            "Check the link: NCCL_DEBUG=INFO for the transport, nccl-tests busbw against the "
            "hardware's NVLink/InfiniBand bandwidth.",
        ],
        refs=[f"{_PT}/notes/ddp.html", f"{_PT}/fsdp.html"],
    )
)
def exposed_communication(ctx: DeviceContext) -> Finding | None:
    """Collective time outside compute."""
    tl = ctx.timeline
    exposed = tl.exposed_communication.total_ns()
    if exposed == 0:
        return None
    savings = ctx.per_step(exposed)
    comm = ctx.analysis.comm
    collectives = [k for k in ctx.analysis.kernels if k.category == "communication"]
    count = sum(k.count for k in collectives)
    evidence = {
        "exposed_communication_per_step": ms(savings),
        "communication_per_step": ms(ctx.per_step(comm.total_ns)),
        "hidden_under_compute": Evidence(
            round(100 * comm.overlapped_ns / comm.total_ns, 1) if comm.total_ns else 0.0, "%"
        ),
        "collective_kernels_per_step": Evidence(round(count / ctx.n_steps, 1)),
    }
    if collectives:
        evidence["largest_collective"] = Evidence(collectives[0].name[:120])
    return ctx.finding(
        "exposed-communication",
        f"{savings / 1e6:,.2f} ms per step ({_pct(ctx.share(savings))}) of communication "
        "is not hidden under compute",
        savings,
        evidence,
    )
