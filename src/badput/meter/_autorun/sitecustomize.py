"""Loaded by every Python started under `badput run` (its folder leads PYTHONPATH).

Attaches the meter to the first process only: the variable is removed, so DataLoader workers
and other children run unmetered. Then runs any sitecustomize that this one shadows.
"""

import importlib.util
import os
import sys

if os.environ.pop("BADPUT_RUN", None):
    try:
        from badput.meter.auto import install

        install()
    except Exception as e:  # fail open: the script runs without the meter
        sys.stderr.write(f"badput run: meter not attached ({type(e).__name__}: {e})\n")

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    if os.path.abspath(_entry or ".") == _here:
        continue
    _candidate = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.isfile(_candidate):
        _spec = importlib.util.spec_from_file_location("_badput_chained_sitecustomize", _candidate)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
