"""Numbers as people read them, shared by the report formats."""

from __future__ import annotations

__all__ = ["NOT_AVAILABLE", "format_bytes", "format_ms", "format_share"]

#: What a report shows for a share the trace leaves undefined (JSON: null).
NOT_AVAILABLE = "n/a"


def format_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1.

    Example:
        >>> format_bytes(3 * 2**20), format_bytes(512)
        ('3.00 MiB', '512 B')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def format_ms(ns: float) -> str:
    """Nanoseconds as milliseconds with two decimals and thousands separators.

    Example:
        >>> format_ms(1_234_567_890)
        '1,234.57'
    """
    return f"{ns / 1e6:,.2f}"


def format_share(share: float | None) -> str:
    """A share (goodput, a part of a window) as a percentage with one decimal.

    None, a share the trace leaves undefined (a zero-length window), is `n/a`: never 0 %,
    which would claim a measurement.

    Example:
        >>> format_share(0.5551), format_share(None)
        ('55.5 %', 'n/a')
    """
    return NOT_AVAILABLE if share is None else f"{100 * share:.1f} %"
