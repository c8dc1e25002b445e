from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest

#: The reference traces, part of the repository (tests/data/traces: every file with its
#: LICENSE, listed in its MANIFEST.md); `BADPUT_SHARED_TRACES` points elsewhere.
DATA_TRACES = Path(__file__).resolve().parent / "data" / "traces"
SHARED_TRACES = Path(os.environ.get("BADPUT_SHARED_TRACES", DATA_TRACES))


def reference(path: Path) -> Path:
    """`path`, a reference trace file or folder; a test that needs one fails without it.

    The reference traces are part of the repository: a missing one is a broken checkout (or a
    wrong `BADPUT_SHARED_TRACES`), never a reason to skip the check quietly.
    """
    if not path.exists():
        pytest.fail(
            f"reference trace not found: {path} (tests/data/traces, or BADPUT_SHARED_TRACES)"
        )
    return path


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    return reference(SHARED_TRACES)


# A PostgreSQL server for the results-store tests: `.ci/postgres.sh` starts one on loopback and
# prints this URL (a role that may create databases); each test gets a fresh database on it.
PG_URL = os.environ.get("BADPUT_TEST_PG_URL", "")


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    def missing(why: str) -> NoReturn:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)

    if not PG_URL:
        missing("BADPUT_TEST_PG_URL is not set (.ci/postgres.sh starts a server and prints it)")
    try:
        import psycopg
    except ImportError:
        missing("psycopg is not installed: pip install -e '.[postgres]'")
    from badput.bench.store import redact

    try:
        psycopg.connect(PG_URL, connect_timeout=10).close()
    except psycopg.Error as e:
        pytest.fail(f"cannot connect to BADPUT_TEST_PG_URL={redact(PG_URL)}: {e}")
    return PG_URL


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty results store: a SQLite path, or a new database on the test server."""
    if request.param == "sqlite":
        yield str(tmp_path / "s.sqlite")
        return
    admin: str = request.getfixturevalue("pg_admin_url")
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _nvidia_gpu_present() -> bool:
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


@pytest.fixture(scope="session", name="torch")
def _torch_with_cuda() -> Any:
    """torch with a usable CUDA device, for tests marked `gpu`.

    Skips without an NVIDIA GPU; fails with one but no CUDA build of torch, so that a GPU
    machine cannot pass `make gpu-check` by skipping.
    """
    try:
        import torch
    except ImportError:
        if _nvidia_gpu_present():
            pytest.fail("an NVIDIA GPU is present but torch is not installed")
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        if _nvidia_gpu_present():
            pytest.fail(
                f"an NVIDIA GPU is present but torch.cuda is not available (torch "
                f"{torch.__version__}, built for CUDA {torch.version.cuda})"
            )
        pytest.skip("no CUDA device")
    return torch
