"""Benchmarks, A/B regression gate and statistics."""
