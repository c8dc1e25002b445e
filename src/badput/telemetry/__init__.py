"""System telemetry: the doctor's checks, the background sampler and NUMA pinning.

A low layer like `badput.trace`: it reads hardware (NVML, /proc, /sys) behind interfaces with
fakes, and never prints.
"""

from __future__ import annotations

from badput.telemetry.doctor import Check, Status, run_doctor
from badput.telemetry.pinning import pin_to_gpu_numa, worker_init_fn
from badput.telemetry.sampler import Sampler, TelemetryData, TelemetryWarning, read_telemetry
from badput.telemetry.sources import (
    FakeNvml,
    GpuInfo,
    Host,
    Nvml,
    NvmlUnavailable,
    RealNvml,
    TelemetryError,
)

__all__ = [
    "Check",
    "FakeNvml",
    "GpuInfo",
    "Host",
    "Nvml",
    "NvmlUnavailable",
    "RealNvml",
    "Sampler",
    "Status",
    "TelemetryData",
    "TelemetryError",
    "TelemetryWarning",
    "pin_to_gpu_numa",
    "read_telemetry",
    "run_doctor",
    "worker_init_fn",
]
