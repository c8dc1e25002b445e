"""What the results store holds, as plain data: runs and results to write, points read back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from badput.errors import UsageError

PURPOSES = ("history", "ab_base", "ab_head", "adhoc")
#: Purposes whose runs form a history series by default (design note 6.4).
SERIES_PURPOSES = ("history", "ab_base")


class StoreInputError(UsageError):
    """A document to record is malformed (missing keys, wrong types): nothing was written."""


class StoreError(UsageError):
    """The store cannot be used: unreachable, unwritable, damaged, or from a newer badput.

    The message is one line that names the store (its path, or its URL without a password).
    """


class StoreNotFoundError(StoreError):
    """A store opened only to read does not exist yet (reading never creates one)."""


@dataclass
class ResultRow:
    """One (benchmark, metric) of a run, before it is written.

    Attributes:
        benchmark: Benchmark id (a `bench run` case id, an A/B benchmark name, ...).
        metric: Metric name.
        values: Round values; the stored value is their median. Empty for a failed result.
        unit: Unit of the values ("" when unknown).
        higher_is_better: Direction of the metric.
        params: Benchmark parameters (stored as canonical JSON).
        status: "ok" or "error".
        error: What went wrong, for a failed result.
        t_offsets: Seconds since the run start of each round, when known.
    """

    benchmark: str
    metric: str
    values: list[float]
    unit: str = ""
    higher_is_better: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    error: str | None = None
    t_offsets: list[float] | None = None


@dataclass
class RunRow:
    """One run, before it is written.

    Attributes:
        source: What kind of document it came from ("ab", "run", "analysis", "meter", "values").
        results: Its results.
        commit: Commit sha ("" when unknown).
        branch: Branch, when known.
        purpose: One of `PURPOSES`.
        ab_group: Links the two sides of one A/B verdict.
        verdicts: A/B decisions (head run only): dicts of `ABResult.as_dict()` `results` shape.
        verdict_params: The A/B policy the verdicts were reached under.
    """

    source: str
    results: list[ResultRow]
    commit: str = ""
    branch: str | None = None
    purpose: str = "history"
    ab_group: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    verdict_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    """One run-level value of a series.

    Attributes:
        run_id: The run's uuid.
        seq: The run's insertion number (series order).
        created_at: When the run was recorded (UTC, ISO 8601).
        commit: Commit sha ("" when unknown).
        branch: Branch, when known.
        purpose: The run's purpose.
        environment_id: Hardware fingerprint of the run.
        software: Software versions of the run.
        value: Median of the rounds.
        n_rounds: Number of rounds.
        unit: Unit of the value.
        higher_is_better: Direction of the metric.
    """

    run_id: str
    seq: int
    created_at: str
    commit: str
    branch: str | None
    purpose: str
    environment_id: str
    software: dict[str, Any]
    value: float
    n_rounds: int
    unit: str
    higher_is_better: bool


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces (what identities are hashed from)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def now() -> str:
    """The current UTC time, ISO 8601 with microseconds and a Z."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
