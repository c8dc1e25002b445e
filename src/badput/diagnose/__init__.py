"""Rules over analysis results: ranked findings with evidence, savings and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from badput.analysis.results import DeviceAnalysis
from badput.diagnose.context import DeviceContext
from badput.diagnose.findings import RULES, Evidence, Finding, Rule, severity_of
from badput.diagnose.job import straggler
from badput.diagnose.rules import DEVICE_RULES
from badput.trace.model import Trace

__all__ = [
    "RULES",
    "Diagnosis",
    "Evidence",
    "Finding",
    "Rule",
    "diagnose",
    "severity_of",
]


@dataclass(frozen=True)
class Diagnosis:
    """Findings of a set of traces: per device, and all of them ranked."""

    per_device: dict[tuple[str, int], list[Finding]] = field(default_factory=dict)
    ranked: list[Finding] = field(default_factory=list)

    def for_device(self, d: DeviceAnalysis) -> list[Finding]:
        """The findings of one device, ranked."""
        return self.per_device.get((d.trace, d.device), [])


def _rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.savings_ns, f.id, f.trace, f.device))


def diagnose(results: list[tuple[Trace, list[DeviceAnalysis]]]) -> Diagnosis:
    """Run every rule on every GPU, and the job-level rules across ranks.

    Args:
        results: traces with their analyses, as `badput analyze` computes them.

    Returns:
        Findings per device and all findings ranked by savings (largest first).

    Example:
        >>> trace = load_trace("trace.json.gz")  # doctest: +SKIP
        >>> diagnose([(trace, analyze_trace(trace))]).ranked[0].id  # doctest: +SKIP
        'data-loading'
    """
    per_device: dict[tuple[str, int], list[Finding]] = {}
    everything: list[Finding] = []
    for trace, devices in results:
        for d in devices:
            if d.goodput is None or d.timeline is None:
                continue
            ctx = DeviceContext(trace, d)
            found = [f for rule in DEVICE_RULES if rule.check and (f := rule.check(ctx))]
            per_device[(d.trace, d.device)] = _rank(found)
            everything.extend(found)
    by_world: dict[int, list[DeviceAnalysis]] = {}
    for _, devices in results:
        for d in devices:
            if d.world_size and d.world_size > 1:
                by_world.setdefault(d.world_size, []).append(d)
    for ranks in by_world.values():
        job = straggler(ranks)
        if job is not None:
            everything.append(job)
    return Diagnosis(per_device, _rank(everything))
