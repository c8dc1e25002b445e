"""What every rule module shares: registration in the catalogue, and common wording."""

from __future__ import annotations

from collections.abc import Callable

from badput.diagnose.context import DeviceContext
from badput.diagnose.findings import RULES, Finding, Rule

__all__ = ["PT", "TUNING", "pct", "register"]

PT = "https://pytorch.org/docs/stable"
TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


def register(rule: Rule) -> Callable[[Callable[[DeviceContext], Finding | None]], Rule]:
    """Decorator: put `rule`, with the decorated function as its check, into `RULES`."""

    def wrap(check: Callable[[DeviceContext], Finding | None]) -> Rule:
        full = Rule(rule.id, rule.title, rule.explanation, rule.savings, rule.fix, rule.refs, check)
        RULES[rule.id] = full
        return full

    return wrap


def pct(share: float | None) -> str:
    """A share as a percentage with one decimal; "n/a" for None."""
    # None: no step time to take a share of (such a GPU is not diagnosed; this is a backstop).
    return "n/a" if share is None else f"{100 * share:.1f} %"
