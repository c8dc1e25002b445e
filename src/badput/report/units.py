"""Numbers as people read them, shared by the report formats."""

from __future__ import annotations

__all__ = ["format_bytes", "format_ms"]


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
