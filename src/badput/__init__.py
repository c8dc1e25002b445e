"""badput: where the GPU time of PyTorch training and inference goes, from measured data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from badput._version import __version__
from badput.errors import BadputError, TraceFormatError, UsageError

if TYPE_CHECKING:
    from badput.meter import Meter, MeterWarning
    from badput.telemetry.pinning import pin_to_gpu_numa, worker_init_fn

__all__ = [
    "BadputError",
    "Meter",
    "MeterWarning",
    "TraceFormatError",
    "UsageError",
    "__version__",
    "pin_to_gpu_numa",
    "worker_init_fn",
]

# Imported on first use: every `badput` command imports this package, and the meter and the
# telemetry (some 30 ms) serve only some of them.
_LAZY = {
    "Meter": "badput.meter",
    "MeterWarning": "badput.meter",
    "pin_to_gpu_numa": "badput.telemetry.pinning",
    "worker_init_fn": "badput.telemetry.pinning",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'badput' has no attribute {name!r}")
