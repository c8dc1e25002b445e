"""Pieces shared by the command modules."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Format"]


class Format(StrEnum):
    """Output formats of the commands."""

    TEXT = "text"
    JSON = "json"
