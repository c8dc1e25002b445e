"""Checks of text from users and traces, shared by every layer (no imports of badput)."""

from __future__ import annotations

__all__ = ["is_ascii_digits"]


def is_ascii_digits(text: str) -> bool:
    """Whether `text` is ASCII digits only, and so what `int` reads as written.

    `str.isdigit` alone also takes `²`, which `int` refuses, and `٣`, which it reads as 3:
    input checked with it alone crashes or means something else.
    """
    return text.isascii() and text.isdigit()
