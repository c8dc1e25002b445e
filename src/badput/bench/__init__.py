"""Benchmarks, A/B regression gate and statistics."""

from __future__ import annotations

from badput.bench.api import benchmark

__all__ = ["benchmark"]
