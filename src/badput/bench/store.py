"""The results store: benchmark runs, their results and round values, in SQLite.

A thin data-access layer over plain, portable SQL (the schema is a reduced form of section 6.4
of the regression-gate design note). One class, `Store`; numbered migrations are recorded in
`schema_migrations`. Only SQLite is supported for now; the DDL keeps the few dialect-specific
types behind placeholders so that a PostgreSQL backend needs only a second type map and a
driver.

Each document is written in ONE transaction: a writer killed part way leaves no partial run.
The database runs in WAL mode with a busy timeout, so that concurrent writers (parallel CI
jobs on one machine) wait for each other instead of failing.

What is stored:

* ``run``: one benchmark run (a side of an A/B verdict, a `badput bench run` document, an
  analyzed trace, a meter summary): commit, branch, purpose, hardware fingerprint
  (``environment``) and software versions as JSON attributes.
* ``result``: one (benchmark, metric) of a run; ``value`` is the median of the rounds.
* ``round_value``: the raw round values.
* ``verdict``: the A/B decisions, with their method and parameters.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sqlite3
import statistics
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from badput.errors import UsageError

__all__ = [
    "DEFAULT_URL",
    "MIGRATIONS",
    "Point",
    "ResultRow",
    "RunRow",
    "Store",
    "StoreInputError",
    "hardware_fingerprint",
    "software_versions",
]

DEFAULT_URL = ".badput/bench.sqlite"
PURPOSES = ("history", "ab_base", "ab_head", "adhoc")
#: Purposes whose runs form a history series by default (design note 6.4).
SERIES_PURPOSES = ("history", "ab_base")

# Dialect-specific types; the DDL below names them by placeholder.
_SQLITE_TYPES = {"pk": "INTEGER PRIMARY KEY", "float": "REAL", "json": "TEXT"}

#: Numbered migrations: (version, statements). Never edit one that has shipped; add another.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE environment (
                id             TEXT PRIMARY KEY,
                label          TEXT NOT NULL,
                identity_json  {json} NOT NULL,
                first_seen     TEXT NOT NULL
            )""",
            """CREATE TABLE run (
                id             {pk},
                uuid           TEXT NOT NULL UNIQUE,
                created_at     TEXT NOT NULL,
                commit_sha     TEXT NOT NULL,
                branch         TEXT,
                purpose        TEXT NOT NULL
                               CHECK (purpose IN ('history','ab_base','ab_head','adhoc')),
                ab_group       TEXT,
                source         TEXT NOT NULL,
                environment_id TEXT NOT NULL REFERENCES environment(id),
                software_json  {json} NOT NULL,
                tool_version   TEXT NOT NULL,
                schema_version INTEGER NOT NULL
            )""",
            "CREATE INDEX run_series ON run (environment_id, purpose, id)",
            """CREATE TABLE result (
                id               {pk},
                run_id           INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
                benchmark        TEXT NOT NULL,
                params_json      {json} NOT NULL,
                metric           TEXT NOT NULL,
                unit             TEXT NOT NULL,
                higher_is_better INTEGER NOT NULL,
                status           TEXT NOT NULL,
                value            {float},
                n_rounds         INTEGER NOT NULL,
                error            TEXT,
                UNIQUE (run_id, benchmark, metric)
            )""",
            "CREATE INDEX result_series ON result (benchmark, metric)",
            """CREATE TABLE round_value (
                result_id  INTEGER NOT NULL REFERENCES result(id) ON DELETE CASCADE,
                round      INTEGER NOT NULL,
                value      {float} NOT NULL,
                t_offset   {float},
                PRIMARY KEY (result_id, round)
            )""",
            """CREATE TABLE verdict (
                id          {pk},
                head_run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
                benchmark   TEXT NOT NULL,
                metric      TEXT NOT NULL,
                method      TEXT NOT NULL,
                params_json {json} NOT NULL,
                effect      {float},
                ci_low      {float},
                ci_high     {float},
                p_value     {float},
                p_adjusted  {float},
                decision    TEXT NOT NULL,
                created_at  TEXT NOT NULL
            )""",
        ],
    ),
]


class StoreInputError(UsageError):
    """A document to record is malformed (missing keys, wrong types): nothing was written."""


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


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _memory_gib() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // (1 << 20)  # kB -> GiB, rounded down
    try:
        return (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 30
    except (ValueError, OSError, AttributeError):
        return None


def _gpu_names() -> list[str]:
    """GPU models the NVIDIA driver lists under /proc (no NVML, no subprocess)."""
    root = Path("/proc/driver/nvidia/gpus")
    names: list[str] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return names
    for entry in entries:
        for line in _read(str(entry / "information")).splitlines():
            if line.startswith("Model:"):
                names.append(line.partition(":")[2].strip())
    return names


def hardware_fingerprint() -> dict[str, Any]:
    """The stable hardware identity of this machine (design note 6.2), bucketed.

    CPU architecture, vendor and model, logical CPU count, memory rounded down to whole GiB,
    OS and kernel major.minor, and GPU models with counts. Never hostnames, clocks, bogomips
    or anything else that drifts between runs on the same machine type.
    """
    cpu = _cpuinfo()
    kernel = ".".join(platform.release().split(".")[:2])
    gpus: dict[str, int] = {}
    for name in _gpu_names():
        gpus[name] = gpus.get(name, 0) + 1
    return {
        "cpu": {
            "arch": platform.machine(),
            "vendor": cpu.get("vendor_id", ""),
            "model": cpu.get("model name", "") or platform.processor(),
            "logical_cpus": os.cpu_count() or 0,
        },
        "memory_gib": _memory_gib(),
        "os": {"system": platform.system(), "kernel": kernel},
        "gpus": [{"name": n, "count": c} for n, c in sorted(gpus.items())],
    }


def environment_id(identity: Mapping[str, Any]) -> str:
    """'sha256:' and the hash of the canonical JSON of a fingerprint."""
    return "sha256:" + hashlib.sha256(_canonical(identity).encode()).hexdigest()


def _label(identity: Mapping[str, Any]) -> str:
    cpu = identity.get("cpu") or {}
    parts = [f"{cpu.get('logical_cpus', '?')}cpu", str(cpu.get("model") or cpu.get("arch") or "")]
    if identity.get("memory_gib") is not None:
        parts.append(f"{identity['memory_gib']}G")
    parts += [f"{g['count']}x{g['name']}" for g in identity.get("gpus") or []]
    return " ".join(p for p in parts if p)


def software_versions() -> dict[str, str]:
    """Versions of python, badput and the numeric stack, from package metadata (no imports)."""
    from badput import __version__

    out = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "badput": __version__,
    }
    for dist in ("numpy", "torch", "triton"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _parse_url(url: str | os.PathLike[str] | None) -> str:
    """The SQLite path of a store URL.

    Raises:
        UsageError: a PostgreSQL URL (not supported yet) or an unknown scheme.
    """
    text = os.fspath(url) if url is not None else DEFAULT_URL
    if not text:
        text = DEFAULT_URL
    if "://" not in text:
        return text
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative/path, sqlite:////absolute/path (the SQLAlchemy convention).
        if not rest.startswith("/") or rest == "/":
            raise UsageError("a sqlite store URL is sqlite:///PATH (three slashes, then a path)")
        return rest[1:]
    # Never echo the URL: a server URL can hold a password.
    if scheme.split("+")[0] in ("postgres", "postgresql"):
        raise UsageError("postgresql:// stores are not supported yet; use a path or sqlite:///PATH")
    raise UsageError(f"unknown store URL scheme {scheme!r}; use a path or sqlite:///PATH")


class Store:
    """A results store (SQLite). Open with `Store.open`; close with `close` or `with`."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        """Wrap an open connection; use `Store.open` instead."""
        self._conn = conn
        self.path = path

    # ---- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | os.PathLike[str] | None = None, *, timeout_s: float = 60.0) -> Store:
        """Open (creating and migrating as needed) the store at `url`.

        Args:
            url: A path, ``sqlite:///PATH``, or None for `DEFAULT_URL`.
            timeout_s: How long a writer waits for another one (SQLite busy timeout).

        Raises:
            UsageError: an unsupported URL, or a path that cannot be opened as a store.
        """
        path = _parse_url(url)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            store = cls(conn, path)
            store.migrate()
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{path}: cannot open as a results store ({e})") from None
        return store

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Store:
        """Use as a context manager: closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the store."""
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction (taken at once, so that writers queue instead of deadlock).

        Commits on success, rolls back on any exception.
        """
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    def _applied(self) -> set[int]:
        try:
            rows = self._conn.execute("SELECT version FROM schema_migrations").fetchall()
        except sqlite3.OperationalError:
            return set()
        return {int(r[0]) for r in rows}

    def migrate(self) -> list[int]:
        """Apply the migrations not yet applied; return their versions (idempotent)."""
        if self._applied() >= {v for v, _ in MIGRATIONS}:
            return []
        done: list[int] = []
        with self.transaction() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            applied = {int(r[0]) for r in cur.execute("SELECT version FROM schema_migrations")}
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                for sql in statements:
                    cur.execute(sql.format(**_SQLITE_TYPES))
                cur.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, _now()),
                )
                done.append(version)
        return done

    def schema_version(self) -> int:
        """The highest applied migration."""
        return max(self._applied(), default=0)

    def integrity_ok(self) -> bool:
        """Whether SQLite's integrity check and foreign-key check pass."""
        ok = self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return ok and not self._conn.execute("PRAGMA foreign_key_check").fetchall()

    # ---- writing -------------------------------------------------------------------------

    def _environment(self, cur: sqlite3.Cursor, identity: Mapping[str, Any]) -> str:
        env = environment_id(identity)
        cur.execute(
            "INSERT INTO environment (id, label, identity_json, first_seen) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            (env, _label(identity), _canonical(identity), _now()),
        )
        return env

    def _insert_run(
        self,
        cur: sqlite3.Cursor,
        run: RunRow,
        env: str,
        software: Mapping[str, Any],
    ) -> tuple[int, str]:
        from badput import __version__

        if run.purpose not in PURPOSES:
            raise StoreInputError(f"purpose must be one of {', '.join(PURPOSES)}")
        run_uuid = str(uuid.uuid4())
        cur.execute(
            "INSERT INTO run (uuid, created_at, commit_sha, branch, purpose, ab_group, source, "
            "environment_id, software_json, tool_version, schema_version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                run_uuid,
                _now(),
                run.commit,
                run.branch,
                run.purpose,
                run.ab_group,
                run.source,
                env,
                _canonical(dict(software)),
                __version__,
                MIGRATIONS[-1][0],
            ),
        )
        return int(cur.fetchone()[0]), run_uuid

    def _insert_result(self, cur: sqlite3.Cursor, run_id: int, r: ResultRow) -> int:
        value = statistics.median(r.values) if r.values else None
        cur.execute(
            "INSERT INTO result (run_id, benchmark, params_json, metric, unit, higher_is_better, "
            "status, value, n_rounds, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                run_id,
                r.benchmark,
                _canonical(r.params),
                r.metric,
                r.unit,
                int(r.higher_is_better),
                r.status,
                value,
                len(r.values),
                r.error,
            ),
        )
        result_id = int(cur.fetchone()[0])
        offsets: Sequence[float | None] = r.t_offsets or [None] * len(r.values)
        cur.executemany(
            "INSERT INTO round_value (result_id, round, value, t_offset) VALUES (?, ?, ?, ?)",
            [(result_id, i, v, t) for i, (v, t) in enumerate(zip(r.values, offsets, strict=True))],
        )
        return result_id

    def _insert_verdicts(self, cur: sqlite3.Cursor, run_id: int, run: RunRow) -> None:
        now = _now()
        for v in run.verdicts:
            ci = v.get("ci") or [None, None]
            cur.execute(
                "INSERT INTO verdict (head_run_id, benchmark, metric, method, params_json, "
                "effect, ci_low, ci_high, p_value, p_adjusted, decision, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    v["benchmark"],
                    v["metric"],
                    "ab-wilcoxon-paired",
                    _canonical(run.verdict_params),
                    v.get("effect"),
                    ci[0],
                    ci[1],
                    v.get("p_value"),
                    v.get("p_adjusted"),
                    str(v["decision"]),
                    now,
                ),
            )

    def write_runs(
        self,
        runs: Sequence[RunRow],
        *,
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Write runs, all in one transaction; return their uuids.

        Args:
            runs: The runs.
            hardware: Hardware fingerprint (default: this machine's, `hardware_fingerprint`).
            software: Software versions (default: this process's, `software_versions`).
        """
        identity = dict(hardware) if hardware is not None else hardware_fingerprint()
        soft = dict(software) if software is not None else software_versions()
        ids: list[str] = []
        with self.transaction() as cur:
            env = self._environment(cur, identity)
            for run in runs:
                run_id, run_uuid = self._insert_run(cur, run, env, soft)
                for r in run.results:
                    self._insert_result(cur, run_id, r)
                self._insert_verdicts(cur, run_id, run)
                ids.append(run_uuid)
        return ids

    def record_ab(
        self,
        doc: Mapping[str, Any],
        *,
        commit: str = "",
        base_commit: str = "",
        branch: str | None = None,
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Record an A/B verdict (`ABResult.as_dict()`): a base run, a head run, the verdicts.

        Args:
            doc: The verdict document (schema ``badput.bench.ab/1``).
            commit: Commit of the head side.
            base_commit: Commit of the base side.
            branch: Branch of the head side.
            hardware: Hardware fingerprint override.
            software: Software versions override.

        Returns:
            The uuids of the base and head runs.

        Raises:
            StoreInputError: the document is malformed (nothing is written).
        """
        runs = ab_runs(doc, commit=commit, base_commit=base_commit, branch=branch)
        return self.write_runs(runs, hardware=hardware, software=software)

    def record_run(
        self,
        doc: Mapping[str, Any],
        *,
        commit: str = "",
        branch: str | None = None,
        purpose: str = "history",
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a `badput bench run` document (``badput.bench.run/1``) as one run.

        Raises:
            StoreInputError: the document is malformed (nothing is written).
        """
        run = bench_run(doc, commit=commit, branch=branch, purpose=purpose)
        return self.write_runs([run], hardware=hardware, software=software)[0]

    def record_values(
        self,
        benchmark: str,
        metric: str,
        values: Sequence[float],
        *,
        unit: str = "",
        higher_is_better: bool = False,
        params: Mapping[str, Any] | None = None,
        commit: str = "",
        branch: str | None = None,
        purpose: str = "history",
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> str:
        """Record one run of one metric from its round values (goodput as a metric, say).

        Raises:
            StoreInputError: no values, or a value that is not a finite number.
        """
        vals = _floats(values, f"{benchmark} {metric}")
        if not vals:
            raise StoreInputError(f"{benchmark} {metric}: no values")
        row = ResultRow(benchmark, metric, vals, unit, higher_is_better, dict(params or {}))
        run = RunRow("values", [row], commit=commit, branch=branch, purpose=purpose)
        return self.write_runs([run], hardware=hardware, software=software)[0]

    def record_analysis(
        self,
        doc: Mapping[str, Any],
        *,
        benchmark: str = "analyze",
        commit: str = "",
        branch: str | None = None,
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a `badput analyze --format json` document: per device goodput, step time, idle.

        Raises:
            StoreInputError: the document is malformed (nothing is written).
        """
        run = analysis_run(doc, benchmark=benchmark, commit=commit, branch=branch)
        return self.write_runs([run], hardware=hardware, software=software)[0]

    def record_meter(
        self,
        summary: Mapping[str, Any],
        *,
        benchmark: str = "meter",
        commit: str = "",
        branch: str | None = None,
        hardware: Mapping[str, Any] | None = None,
        software: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a meter summary (`Meter.summary()`): goodput, step times, throughput.

        Raises:
            StoreInputError: the summary is malformed (nothing is written).
        """
        run = meter_run(summary, benchmark=benchmark, commit=commit, branch=branch)
        return self.write_runs([run], hardware=hardware, software=software)[0]

    # ---- reading -------------------------------------------------------------------------

    def series(
        self,
        benchmark: str,
        metric: str,
        fingerprint: str | None = None,
        *,
        purposes: Sequence[str] = SERIES_PURPOSES,
    ) -> list[Point]:
        """Run-level values of one (benchmark, metric), in insertion order.

        Args:
            benchmark: Benchmark id.
            metric: Metric name.
            fingerprint: Only runs on this environment id (default: every environment).
            purposes: Only runs of these purposes (default: history and A/B base sides).
        """
        marks = ", ".join("?" for _ in purposes)
        sql = (
            "SELECT run.uuid, run.id, run.created_at, run.commit_sha, run.branch, run.purpose, "
            "run.environment_id, run.software_json, result.value, result.n_rounds, result.unit, "
            "result.higher_is_better FROM result JOIN run ON run.id = result.run_id "
            f"WHERE result.benchmark = ? AND result.metric = ? AND result.status = 'ok' "
            f"AND result.value IS NOT NULL AND run.purpose IN ({marks})"
        )
        args: list[Any] = [benchmark, metric, *purposes]
        if fingerprint is not None:
            sql += " AND run.environment_id = ?"
            args.append(fingerprint)
        rows = self._conn.execute(sql + " ORDER BY run.id", args).fetchall()
        return [
            Point(
                run_id=r[0],
                seq=int(r[1]),
                created_at=r[2],
                commit=r[3],
                branch=r[4],
                purpose=r[5],
                environment_id=r[6],
                software=json.loads(r[7]),
                value=float(r[8]),
                n_rounds=int(r[9]),
                unit=r[10],
                higher_is_better=bool(r[11]),
            )
            for r in rows
        ]

    def metrics(self, benchmark: str) -> list[str]:
        """The metrics stored for a benchmark, by name."""
        rows = self._conn.execute(
            "SELECT DISTINCT metric FROM result WHERE benchmark = ? ORDER BY metric", (benchmark,)
        ).fetchall()
        return [r[0] for r in rows]

    def environments(self) -> dict[str, str]:
        """Environment id -> human label."""
        rows = self._conn.execute("SELECT id, label FROM environment ORDER BY first_seen")
        return {r[0]: r[1] for r in rows}

    def count(self, table: str) -> int:
        """Rows in one of the store's tables."""
        if table not in ("environment", "run", "result", "round_value", "verdict"):
            raise ValueError(f"no table {table!r}")
        return int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def rounds(self, run_id: str, benchmark: str, metric: str) -> list[float]:
        """The round values of one result of a run (by the run's uuid)."""
        rows = self._conn.execute(
            "SELECT round_value.value FROM round_value "
            "JOIN result ON result.id = round_value.result_id "
            "JOIN run ON run.id = result.run_id "
            "WHERE run.uuid = ? AND result.benchmark = ? AND result.metric = ? "
            "ORDER BY round_value.round",
            (run_id, benchmark, metric),
        ).fetchall()
        return [float(r[0]) for r in rows]

    def verdicts(self) -> list[dict[str, Any]]:
        """Every stored A/B verdict, oldest first."""
        cur = self._conn.execute(
            "SELECT run.uuid, verdict.benchmark, verdict.metric, verdict.method, "
            "verdict.params_json, verdict.effect, verdict.ci_low, verdict.ci_high, "
            "verdict.p_value, verdict.p_adjusted, verdict.decision FROM verdict "
            "JOIN run ON run.id = verdict.head_run_id ORDER BY verdict.id"
        )
        names = [d[0] for d in cur.description]
        out = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        for v in out:
            v["head_run"] = v.pop("uuid")
            v["params"] = json.loads(v.pop("params_json"))
        return out


# ---- documents -> rows (pure; every check happens before anything is written) ------------


def _floats(values: Any, what: str) -> list[float]:
    if not isinstance(values, list | tuple):
        raise StoreInputError(f"{what}: values must be a list of numbers")
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise StoreInputError(f"{what}: {v!r} is not a finite number")
        out.append(float(v))
    return out


def _field(doc: Any, key: str, kind: Any, what: str) -> Any:
    if not isinstance(doc, Mapping):
        raise StoreInputError(f"{what}: expected a JSON object")
    if key not in doc:
        raise StoreInputError(f"{what}: missing {key!r}")
    value = doc[key]
    if not isinstance(value, kind):
        raise StoreInputError(f"{what}: {key!r} has the wrong type")
    return value


def ab_runs(
    doc: Mapping[str, Any], *, commit: str = "", base_commit: str = "", branch: str | None = None
) -> list[RunRow]:
    """The base and head runs of an A/B verdict document.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "A/B verdict"
    entries = _field(doc, "results", list, what)
    group = str(uuid.uuid4())
    base = RunRow("ab", [], commit=base_commit, purpose="ab_base", ab_group=group)
    head = RunRow("ab", [], commit=commit, branch=branch, purpose="ab_head", ab_group=group)
    head.verdict_params = dict(doc.get("policy") or {})
    for i, e in enumerate(entries):
        w = f"{what} results[{i}]"
        name = str(_field(e, "benchmark", str, w))
        metric = str(_field(e, "metric", str, w))
        _field(e, "decision", str, w)
        better = bool(_field(e, "higher_is_better", bool, w))
        unit = "s" if metric.endswith("_s") else ""
        for side, key in ((base, "base"), (head, "head")):
            vals = _floats(_field(e, key, list, w), f"{w} {key}")
            if vals:
                side.results.append(ResultRow(name, metric, vals, unit, better))
        head.verdicts.append(dict(e))
    return [base, head]


def bench_run(
    doc: Mapping[str, Any], *, commit: str = "", branch: str | None = None, purpose: str = "history"
) -> RunRow:
    """The run of a `badput.bench.run/1` document.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "bench run"
    run = RunRow("run", [], commit=commit, branch=branch, purpose=purpose)
    for i, e in enumerate(_field(doc, "results", list, what)):
        w = f"{what} results[{i}]"
        case_id = str(_field(e, "id", str, w))
        bench = _field(e, "benchmark", Mapping, w)
        metric = _field(e, "metric", Mapping, w)
        rounds = _field(e, "rounds", list, w)
        vals = _floats([_field(r, "value", int | float, f"{w} rounds") for r in rounds], w)
        times = [r.get("t") for r in rounds]
        status = str(e.get("status", "ok"))
        run.results.append(
            ResultRow(
                benchmark=case_id,
                metric=str(_field(metric, "name", str, w)),
                values=vals if status == "ok" else [],
                unit=str(metric.get("unit") or ""),
                higher_is_better=bool(metric.get("higher_is_better", False)),
                params=dict(bench.get("params") or {}),
                status=status,
                error=e.get("error"),
                t_offsets=(
                    [float(t) for t in times]
                    if status == "ok" and all(isinstance(t, int | float) for t in times)
                    else None
                ),
            )
        )
    return run


def _scalar(value: Any, what: str) -> float | None:
    if value is None:
        return None
    return _floats([value], what)[0]


def analysis_run(
    doc: Mapping[str, Any],
    *,
    benchmark: str = "analyze",
    commit: str = "",
    branch: str | None = None,
) -> RunRow:
    """The run of a `badput.analysis/1` document: each device's goodput, step time, idle share.

    One device is stored under `benchmark`; several under ``benchmark[rank=R,device=D]``.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "analysis"
    devices = _field(doc, "devices", list, what)
    run = RunRow("analysis", [], commit=commit, branch=branch)
    for i, d in enumerate(devices):
        w = f"{what} devices[{i}]"
        if not isinstance(d, Mapping):
            raise StoreInputError(f"{w}: expected a JSON object")
        rank, device = d.get("rank"), d.get("device")
        name = benchmark if len(devices) == 1 else f"{benchmark}[rank={rank},device={device}]"
        params = {"rank": rank, "device": device, "gpu": d.get("gpu")}
        goodput = _scalar(_field(d, "goodput", int | float, w), w)
        window = _scalar(_field(d, "window_us", int | float, w), w)
        idle = _scalar(_field(_field(d, "breakdown_us", Mapping, w), "idle", int | float, w), w)
        step = d.get("step_time_us")
        mean = _scalar(step.get("mean"), w) if isinstance(step, Mapping) else None
        rows = [("goodput", goodput, "ratio", True)]
        if window and idle is not None:
            rows.append(("idle_share", idle / window, "ratio", False))
        if mean is not None:
            rows.append(("step_time_mean_s", mean / 1e6, "s", False))
        for metric, value, unit, better in rows:
            if value is not None:
                run.results.append(ResultRow(name, metric, [value], unit, better, params))
    return run


def meter_run(
    summary: Mapping[str, Any],
    *,
    benchmark: str = "meter",
    commit: str = "",
    branch: str | None = None,
) -> RunRow:
    """The run of a meter summary: goodput, step time (median, mean), throughput, MFU.

    Raises:
        StoreInputError: the summary is malformed.
    """
    what = "meter summary"
    goodput = _scalar(_field(summary, "goodput", (int, float, type(None)), what), what)
    steps = _field(summary, "step_time_s", Mapping, what)
    rows: list[tuple[str, float | None, str, bool]] = [
        ("goodput", goodput, "ratio", True),
        ("step_time_s", _scalar(steps.get("median"), what), "s", False),
        ("step_time_mean_s", _scalar(steps.get("mean"), what), "s", False),
    ]
    for key, unit in (("samples_per_s", "1/s"), ("tokens_per_s", "1/s"), ("mfu", "ratio")):
        rows.append((key, _scalar(summary.get(key), what), unit, True))
    params = {"rank": summary.get("rank"), "gpu": summary.get("gpu")}
    results = [
        ResultRow(benchmark, metric, [value], unit, better, params)
        for metric, value, unit, better in rows
        if value is not None
    ]
    return RunRow("meter", results, commit=commit, branch=branch)
