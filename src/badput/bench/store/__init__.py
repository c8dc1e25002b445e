"""The results store: benchmark runs, their results and round values, in SQLite or PostgreSQL.

SQLite by default (`DEFAULT_URL`, ``.badput/bench.sqlite``, or a path / ``sqlite:///PATH``),
PostgreSQL for teams (``postgresql://...``; ``pip install 'badput[postgres]'``). One schema
with numbered migrations (`MIGRATIONS`), recorded in ``schema_migrations``. A store whose
schema is newer than this badput knows (`SCHEMA_VERSION`) is refused, for reading and for
writing, and never touched; every failure of the database comes out as one `StoreError` line
that names the store.

What is stored:

* ``run``: one benchmark run (a side of an A/B verdict, a `badput bench run` document, an
  analyzed trace, a meter summary): commit, branch, purpose, hardware fingerprint
  (``environment``) and software versions as JSON attributes.
* ``result``: one (benchmark, metric) of a run; ``value`` is the median of the rounds.
* ``round_value``: the raw round values.
* ``verdict``: the A/B decisions, with their method and parameters.

Modules: `model` (rows and points), `fingerprint` (hardware and software identity),
`documents` (documents -> rows), `schema` (migrations), `dialect` (URLs, SQLite/PostgreSQL
differences), `db` (the `Store`).
"""

from __future__ import annotations

from badput.bench.store.db import Store
from badput.bench.store.dialect import DEFAULT_URL, redact
from badput.bench.store.documents import ab_runs, analysis_run, bench_run, meter_run
from badput.bench.store.fingerprint import environment_id, hardware_fingerprint, software_versions
from badput.bench.store.model import (
    PURPOSES,
    SERIES_PURPOSES,
    Point,
    ResultRow,
    RunRow,
    StoreError,
    StoreInputError,
    StoreNotFoundError,
)
from badput.bench.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "DEFAULT_URL",
    "MIGRATIONS",
    "PURPOSES",
    "SCHEMA_VERSION",
    "SERIES_PURPOSES",
    "Point",
    "ResultRow",
    "RunRow",
    "Store",
    "StoreError",
    "StoreInputError",
    "StoreNotFoundError",
    "ab_runs",
    "analysis_run",
    "bench_run",
    "environment_id",
    "hardware_fingerprint",
    "meter_run",
    "redact",
    "software_versions",
]
