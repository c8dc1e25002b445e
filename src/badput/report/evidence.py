"""A finding's evidence as people read it: labels in words, values with their units.

Every report format shows evidence through these functions, so a value reads the same in
the terminal, Markdown and HTML. Rules store evidence as `Evidence(value, unit)` under a
snake_case key, most telling first; the reports keep that order.
"""

from __future__ import annotations

from badput.diagnose import Finding
from badput.diagnose.findings import Evidence
from badput.report.units import format_bytes, plural

__all__ = ["evidence_items", "evidence_label", "evidence_line", "evidence_value"]

# Words a key spells short, and their long form in a label.
_WORDS = {
    "p90": "p90",
    "fp32": "FP32",
    "us": "us",
    "mb": "MB",
    "gpu": "GPU",
    "gpus": "GPUs",
    "cpu": "CPU",
    "10us": "10 us",
}


def evidence_label(key: str) -> str:
    """A snake_case evidence key in words.

    Example:
        >>> evidence_label("kernels_per_step"), evidence_label("fp32_peak")
        ('kernels per step', 'FP32 peak')
    """
    return " ".join(_WORDS.get(w, w) for w in key.split("_") if w)


def _number(v: float | int) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    a = abs(v)
    digits = 3 if a < 1 else 2 if a < 100 else 1
    return f"{v:,.{digits}f}"


def evidence_value(ev: Evidence) -> str:
    """An evidence value with its unit: bytes in binary units, numbers with separators.

    Example:
        >>> evidence_value(Evidence(3 * 2**20, "B")), evidence_value(Evidence(1216.0))
        ('3.00 MiB', '1,216')
    """
    v = ev.value
    if isinstance(v, str):
        return f"{v} {ev.unit}".strip()
    if ev.unit == "B":
        return format_bytes(float(v))
    if ev.unit == "%":  # a share: one decimal, as every report prints shares
        return f"{float(v):,.1f} %"
    text = _number(v)
    if not ev.unit:
        return text
    if ev.unit == "x":
        return f"{text}x"
    return f"{text} {ev.unit}"


def evidence_items(f: Finding, limit: int | None = None) -> list[tuple[str, str]]:
    """(label, value with unit) for each piece of a finding's evidence, in the rule's order."""
    items = [(evidence_label(k), evidence_value(v)) for k, v in f.evidence.items()]
    return items if limit is None else items[:limit]


def evidence_line(f: Finding, limit: int = 4) -> str | None:
    """`evidence: label value · label value ...`, the first `limit` pieces; None without any."""
    items = evidence_items(f)
    if not items:
        return None
    shown = " · ".join(f"{label} {value}" for label, value in items[:limit])
    more = len(items) - limit
    tail = f" · {plural(more, 'more item')} in --format json" if more > 0 else ""
    return "evidence: " + shown + tail
