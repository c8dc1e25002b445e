"""badput: where the GPU time of PyTorch training and inference goes, from measured data."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("badput")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+local"

from badput.errors import BadputError, TraceFormatError, UsageError
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
