"""`python -m badput` runs the command line."""

from __future__ import annotations

import sys

from badput.cli import main

sys.exit(main())
