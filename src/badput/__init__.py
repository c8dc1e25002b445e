"""badput: where the GPU time of PyTorch training and inference goes, from measured data."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("badput")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+local"

from badput.errors import BadputError, TraceFormatError, UsageError
from badput.meter import Meter, MeterWarning

__all__ = ["BadputError", "Meter", "MeterWarning", "TraceFormatError", "UsageError", "__version__"]
