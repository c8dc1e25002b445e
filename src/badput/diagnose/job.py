"""Rules over several ranks of one job."""

from __future__ import annotations

import numpy as np

from badput.analysis.ranks import CrossRank
from badput.diagnose.context import ms
from badput.diagnose.findings import JOB_RULES, RULES, Evidence, Finding, Rule, severity_of

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
        "Needs traces of several ranks of the same job (distributedInfo.rank; traces are "
        "grouped into jobs first, see badput.diagnose.jobs). A named straggler's finding ranks "
        "first: the other ranks' waiting is its doing, so their exposed-communication findings "
        "leave out their wait for it (evidence waiting_for_straggler_per_step) and go when "
        "what is left is below the reporting floor."
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
JOB_RULES.add("straggler")

_PARTS = {
    "compute": "compute",
    "memory": "memory",
    "idle_dataloader": "idle: dataloader",
    "idle_cpu": "idle: cpu ops",
    "idle_runtime": "idle: runtime",
    "idle_other": "idle: other",
}


def straggler(ranks: CrossRank) -> Finding | None:
    """The worst straggler of the cross-rank view, with what the job loses waiting for it.

    Args:
        ranks: the cross-rank view of one job (`badput.analysis.cross_rank`).

    Returns:
        The finding, or None without a named straggler.

    Example:
        >>> straggler(cross_rank(summaries)).rank  # doctest: +SKIP
        7
    """
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
            # Most telling first (reports show the first few): the fix points at the second.
            "straggler_rank": Evidence(s.rank),
            "straggler_spends_more_on": Evidence(f"{what} +{by / 1e6:,.2f} ms per step"),
            "arrives_last_at": Evidence(last, "collectives"),
            "collectives_matched": Evidence(matched, "collectives"),
            "lateness_per_step": ms(savings),
            "wait_caused": ms(s.wait_caused_ns),
            "compute_score": Evidence(round(s.score, 3), "x median rank"),
            "ranks": Evidence(len(ranks.ranks)),
            "max_clock_offset": ms(max(abs(v) for v in ranks.clock_offset_ns.values())),
        },
        savings_ns=savings,
        savings_share=share,
        fix=list(RULES["straggler"].fix),
        refs=list(RULES["straggler"].refs),
        trace=trace,
        rank=s.rank,
        device=device,
    )
