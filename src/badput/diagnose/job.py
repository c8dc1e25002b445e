"""Rules over several ranks of one job."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from badput.analysis.ranks import CrossRank
from badput.analysis.results import DeviceAnalysis
from badput.diagnose.context import ms
from badput.diagnose.findings import RULES, Evidence, Finding, Rule, severity_of

__all__ = ["straggler"]

RULES["straggler"] = Rule(
    id="straggler",
    title="One rank holds the others back",
    explanation=(
        "In synchronous data-parallel training every rank waits in each collective for the "
        "slowest one. badput lines up the ranks' clocks on the ends of matching collectives "
        "(a collective completes at nearly the same instant on every rank), takes each rank's "
        "collective kernel start as its arrival, and names a rank the straggler when it "
        "arrives last at more than half of the collectives and its lateness (its arrival - "
        "the second-latest arrival) adds up to at least 5 % of the median step. Its score "
        "compares its compute per step with the median rank's: near 1.0, the rank is slow "
        "for another reason (its host, data loading, a link). "
        "Needs traces of several ranks of the same job (distributedInfo.rank)."
    ),
    savings=(
        "What-if: the straggler arrives with the others (with the median rank), so each "
        "collective it was last at starts when the second-latest rank arrives. Savings per "
        "step = its lateness summed over those collectives, per step; every rank's step "
        "shortens by that much. The evidence also gives the wait it causes in all: (ranks - "
        "1) x that lateness, summed."
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

_PARTS = {
    "compute": "compute",
    "memory": "memory",
    "idle_dataloader": "idle: dataloader",
    "idle_cpu": "idle: cpu ops",
    "idle_runtime": "idle: runtime",
    "idle_other": "idle: other",
}


def straggler(ranks: CrossRank | Sequence[DeviceAnalysis]) -> Finding | None:
    """The worst straggler of the cross-rank view, with what the job loses waiting for it.

    Args:
        ranks: the cross-rank view of one job (`badput.analysis.cross_rank`). A list of
            device analyses is still taken, for callers that have no summaries: it names the
            rank with the least exposed communication (no clock alignment); to be removed.

    Returns:
        The finding, or None without a named straggler.

    Example:
        >>> straggler(cross_rank(summaries)).rank  # doctest: +SKIP
        7
    """
    if not isinstance(ranks, CrossRank):
        return _least_exposed(list(ranks))
    if not ranks.stragglers or not ranks.step_ns:
        return None
    s = ranks.stragglers[0]
    savings = s.wait_per_step_ns
    share = savings / ranks.step_ns
    severity = severity_of(share)
    if severity is None:
        return None
    others = [r for r in ranks.ranks if r != s.rank]
    mine = ranks.per_step_ns[s.rank]
    more = {
        label: mine[k] - float(np.median([ranks.per_step_ns[r][k] for r in others]))
        for k, label in _PARTS.items()
    }
    what, by = max(more.items(), key=lambda kv: kv[1])
    trace, device = ranks.sources[s.rank]
    matched = len(ranks.waits)
    last = ranks.last_count[s.rank]
    return Finding(
        id="straggler",
        title=(
            f"Rank {s.rank} is the straggler: it arrives last at {last} of {matched} "
            f"collectives, and every rank waits {savings / 1e6:,.2f} ms per step "
            f"({100 * share:.1f} %) for it"
        ),
        severity=severity,
        evidence={
            "straggler_rank": Evidence(s.rank),
            "arrives_last_at": Evidence(last, "collectives"),
            "collectives_matched": Evidence(matched, "collectives"),
            "lateness_per_step": ms(savings),
            "wait_caused": ms(s.wait_caused_ns),
            "compute_score": Evidence(round(s.score, 3), "x median rank"),
            "ranks": Evidence(len(ranks.ranks)),
            "max_clock_offset": ms(max(abs(v) for v in ranks.clock_offset_ns.values())),
            "straggler_spends_more_on": Evidence(f"{what} +{by / 1e6:,.2f} ms per step"),
        },
        savings_ns=savings,
        savings_share=share,
        fix=list(RULES["straggler"].fix),
        refs=list(RULES["straggler"].refs),
        trace=trace,
        rank=s.rank,
        device=device,
    )


def _least_exposed(devices: list[DeviceAnalysis]) -> Finding | None:
    """The rank with the least exposed communication, and what the others lose waiting."""
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
