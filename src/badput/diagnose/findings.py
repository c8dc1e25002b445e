"""Findings and the rule catalogue: what a rule reports and how it explains itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from badput.diagnose.context import DeviceContext

__all__ = [
    "RULES",
    "Evidence",
    "Finding",
    "Rule",
    "severity_of",
]

#: Savings, as a share of the mean step, at or above which a finding is high or medium;
#: below `LOW` nothing is reported (a healthy trace yields no finding worth a change).
HIGH, MEDIUM, LOW = 0.10, 0.03, 0.01


def severity_of(savings_share: float) -> str | None:
    """Severity of a finding by the share of step time it would give back; None: not worth it."""
    if savings_share >= HIGH:
        return "high"
    if savings_share >= MEDIUM:
        return "medium"
    if savings_share >= LOW:
        return "low"
    return None


@dataclass(frozen=True)
class Evidence:
    """A named number from the trace, with its unit."""

    value: float | int | str
    unit: str = ""


@dataclass(frozen=True)
class Finding:
    """Something worth fixing: what, how sure, how much it would give back, and how.

    Attributes:
        id: the rule's id (`badput explain ID` prints its full explanation).
        title: one line, with the key number.
        severity: high, medium or low, by `savings_share`.
        evidence: named numbers from the trace that support it.
        savings_ns: time per step a what-if on the measured timeline gives back.
        savings_share: `savings_ns` over the mean step time (or the window without steps).
        graph_savings_ns: time per step the same fix gives back along the critical path's
            dependencies (`badput.analysis.critical_path.what_if`); None where the fix is
            not a change of graph edges or the GPU has no critical path.
        fix: concrete steps, most effective first.
        refs: documentation links.
        trace: the trace file; empty for a job-level finding.
        rank: distributed rank, if known.
        device: GPU index, -1 for a job-level finding.
    """

    id: str
    title: str
    severity: str
    evidence: dict[str, Evidence]
    savings_ns: float
    savings_share: float
    fix: list[str]
    refs: list[str]
    trace: str = ""
    rank: int | None = None
    device: int = -1
    graph_savings_ns: float | None = None

    @property
    def job_level(self) -> bool:
        """Whether it is about the job rather than one GPU: a job rule's, or `device == -1`.

        Reports print job-level findings first (a straggler's: the other ranks' waiting is
        its doing).
        """
        return self.id in JOB_RULES or self.device == -1


@dataclass(frozen=True)
class Rule:
    """A diagnosis rule: its id, what it looks for, and the fixes it proposes."""

    id: str
    title: str
    explanation: str
    savings: str
    fix: list[str]
    refs: list[str] = field(default_factory=list)
    check: Callable[[DeviceContext], Finding | None] | None = None


#: Every rule, by id; filled by `badput.diagnose.rules` and `badput.diagnose.job`.
RULES: dict[str, Rule] = {}

#: The ids of the rules about a whole job (`badput.diagnose.job`), whose findings name the
#: rank they are about but concern every rank.
JOB_RULES: set[str] = set()
