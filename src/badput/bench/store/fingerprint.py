"""What identifies a run's machine and software (design note 6.2).

The hardware fingerprint keys a series: two runs are comparable only on the same fingerprint.
Software versions are attributes of a run, shown when a series shifts.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from badput.bench.store.model import canonical

__all__ = ["environment_id", "environment_label", "hardware_fingerprint", "software_versions"]


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _memory_gib() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // (1 << 20)  # kB -> GiB, rounded down
    try:
        return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 30
    except (ValueError, OSError, AttributeError):
        return None


def _gpu_names() -> list[str]:
    """GPU models the NVIDIA driver lists under /proc (no NVML, no subprocess)."""
    root = Path("/proc/driver/nvidia/gpus")
    names: list[str] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return names
    for entry in entries:
        for line in _read(str(entry / "information")).splitlines():
            if line.startswith("Model:"):
                names.append(line.partition(":")[2].strip())
    return names


def hardware_fingerprint() -> dict[str, Any]:
    """The stable hardware identity of this machine (design note 6.2), bucketed.

    CPU architecture, vendor and model, logical CPU count, memory rounded down to whole GiB,
    OS and kernel major.minor, and GPU models with counts. Never hostnames, clocks, bogomips
    or anything else that drifts between runs on the same machine type.
    """
    cpu = _cpuinfo()
    kernel = ".".join(platform.release().split(".")[:2])
    gpus: dict[str, int] = {}
    for name in _gpu_names():
        gpus[name] = gpus.get(name, 0) + 1
    return {
        "cpu": {
            "arch": platform.machine(),
            "vendor": cpu.get("vendor_id", ""),
            "model": cpu.get("model name", "") or platform.processor(),
            "logical_cpus": os.cpu_count() or 0,
        },
        "memory_gib": _memory_gib(),
        "os": {"system": platform.system(), "kernel": kernel},
        "gpus": [{"name": n, "count": c} for n, c in sorted(gpus.items())],
    }


def environment_id(identity: Mapping[str, Any]) -> str:
    """'sha256:' and the hash of the canonical JSON of a fingerprint."""
    return "sha256:" + hashlib.sha256(canonical(identity).encode()).hexdigest()


def environment_label(identity: Mapping[str, Any]) -> str:
    """A short human label of a fingerprint: CPUs, CPU model, memory, GPUs."""
    cpu = identity.get("cpu") or {}
    parts = [f"{cpu.get('logical_cpus', '?')}cpu", str(cpu.get("model") or cpu.get("arch") or "")]
    if identity.get("memory_gib") is not None:
        parts.append(f"{identity['memory_gib']}G")
    parts += [f"{g['count']}x{g['name']}" for g in identity.get("gpus") or []]
    return " ".join(p for p in parts if p)


def software_versions() -> dict[str, str]:
    """Versions of python, badput and the numeric stack, from package metadata (no imports)."""
    from badput import __version__

    out = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "badput": __version__,
    }
    for dist in ("numpy", "torch", "triton"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out
