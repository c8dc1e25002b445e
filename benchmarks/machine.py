"""The machine a benchmark ran on, for the results files (Linux /proc)."""

from __future__ import annotations


def cpu_model() -> str:
    """The CPU's model name, or "unknown"."""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def mem_gib() -> float:
    """Total memory in GiB."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    return 0.0
