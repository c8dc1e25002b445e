from __future__ import annotations

import os
from pathlib import Path

import pytest

# The real traces shipped beside the checkout (../shared/traces), read-only.
SHARED_TRACES = Path(
    os.environ.get("BADPUT_SHARED_TRACES", Path(__file__).resolve().parents[2] / "shared/traces")
)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"real traces not found at {SHARED_TRACES}")
        pytest.skip(f"real traces not found at {SHARED_TRACES}")
    return SHARED_TRACES
