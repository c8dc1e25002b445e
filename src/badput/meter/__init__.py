"""Live goodput meter for training loops."""

from badput.meter.core import BUILTIN_CATEGORIES, Meter, MeterWarning

__all__ = ["BUILTIN_CATEGORIES", "Meter", "MeterWarning"]
