"""Rules over several ranks of one job."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from badput.analysis.results import DeviceAnalysis
from badput.diagnose.context import ms
from badput.diagnose.findings import RULES, Evidence, Finding, Rule, severity_of

__all__ = ["straggler"]

RULES["straggler"] = Rule(
    id="straggler",
    title="One rank holds the others back",
    explanation=(
        "In synchronous data-parallel training every rank waits in each collective for the "
        "slowest one. The rank that arrives last waits least: its exposed communication is the "
        "shortest, while the others' collectives stretch by the time they wait for it. "
        "Needs traces of several ranks of the same job (distributedInfo.rank)."
    ),
    savings=(
        "What-if: the straggler arrives with the others. Savings per step = the median, over "
        "the other ranks, of (their exposed communication - the straggler's) per step."
    ),
    fix=[
        "Find why the slow rank is slow; the evidence shows what it spends more time on.",
        "Uneven work: balance sequence lengths or tokens per rank (bucketing, packing), and "
        "expert load in mixture-of-experts models.",
        "Uneven hardware: a throttled GPU or a worse link (check clocks, power and topology).",
        "Host interference on that node: other processes, CPU affinity, data-loading workers.",
    ],
    refs=["https://pytorch.org/docs/stable/notes/ddp.html"],
)


def straggler(devices: list[DeviceAnalysis]) -> Finding | None:
    """The rank with the least exposed communication, and what the others lose waiting.

    Args:
        devices: analyses of several ranks (one device each) of one job.
    """
    ranked = [d for d in devices if d.rank is not None and d.goodput is not None]
    if len({d.rank for d in ranked}) < 2:
        return None

    def per_step(d: DeviceAnalysis, ns: int) -> float:
        return ns / max(1, len(d.steps))

    exposed = np.array([per_step(d, d.breakdown.communication_ns) for d in ranked])
    slow = int(np.argmin(exposed))
    others = np.delete(exposed, slow)
    waits = others - exposed[slow]
    savings = float(np.median(waits))
    steps = [d.step_time_stats_ns() for d in ranked]
    step_ns = float(
        np.median([s[0] if s else d.window_ns for s, d in zip(steps, ranked, strict=True)])
    )
    share = savings / step_ns if step_ns > 0 else 0.0
    severity = severity_of(share)
    if severity is None:
        return None
    s = ranked[slow]
    parts: dict[str, Callable[[DeviceAnalysis], int]] = {
        "compute": lambda d: d.breakdown.compute_ns,
        "memory": lambda d: d.breakdown.memory_ns,
        "idle: dataloader": lambda d: d.idle_causes.dataloader_ns,
        "idle: cpu ops": lambda d: d.idle_causes.cpu_ns,
        "idle: runtime": lambda d: d.idle_causes.runtime_ns,
        "idle: other": lambda d: d.idle_causes.other_ns,
    }
    rest = [d for i, d in enumerate(ranked) if i != slow]
    more = {
        k: per_step(s, f(s)) - float(np.median([per_step(d, f(d)) for d in rest]))
        for k, f in parts.items()
    }
    what, by = max(more.items(), key=lambda kv: kv[1])
    return Finding(
        id="straggler",
        title=(
            f"Rank {s.rank} is the straggler: the other ranks wait a median "
            f"{savings / 1e6:,.2f} ms per step ({100 * share:.1f} %) for it in collectives"
        ),
        severity=severity,
        evidence={
            "straggler_rank": Evidence(int(s.rank or 0)),
            "straggler_exposed_comm_per_step": ms(float(exposed[slow])),
            "median_exposed_comm_of_others": ms(float(np.median(others))),
            "max_wait_per_step": ms(float(waits.max())),
            "ranks": Evidence(len(ranked)),
            "straggler_spends_more_on": Evidence(f"{what} +{by / 1e6:,.2f} ms per step"),
        },
        savings_ns=savings,
        savings_share=share,
        fix=list(RULES["straggler"].fix),
        refs=list(RULES["straggler"].refs),
        trace=s.trace,
        rank=s.rank,
        device=s.device,
    )
