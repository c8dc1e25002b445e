"""The `Store` class: writes runs, their results and round values; reads series back.

A thin data-access layer over plain SQL written once (``?`` placeholders) and run through a
`Dialect` (SQLite by default, PostgreSQL for teams). Each document is written in ONE
transaction: a writer killed part way leaves no partial run. SQLite runs in WAL mode with a
busy timeout, so that concurrent writers (parallel CI jobs on one machine) wait for each other
instead of failing; on PostgreSQL the server does that, and an advisory lock serializes
concurrent migrations.
"""

from __future__ import annotations

import json
import os
import statistics
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from badput.bench.store.dialect import Connection, Cursor, connect, parse_url
from badput.bench.store.documents import ab_runs, analysis_run, bench_run, floats, meter_run
from badput.bench.store.fingerprint import (
    environment_id,
    environment_label,
    hardware_fingerprint,
    software_versions,
)
from badput.bench.store.model import (
    PURPOSES,
    SERIES_PURPOSES,
    Point,
    ResultRow,
    RunRow,
    StoreError,
    StoreInputError,
    StoreNotFoundError,
    canonical,
    now,
)
from badput.bench.store.schema import MIGRATIONS, SCHEMA_VERSION, render

__all__ = ["Store"]

_TABLES = ("environment", "run", "result", "round_value", "verdict")
_KNOWN = {v for v, _ in MIGRATIONS}
#: The version the write probe inserts (and rolls back): no migration is ever numbered so.
_PROBE_VERSION = -1
# What failed, as messages say it: "PATH: cannot <this> (<the driver's reason>)".
_OPEN = "open as a results store"
_READ = "read the results store"
_WRITE = "write the results store"
#: Rows whose parent is missing: none, where foreign keys hold (checked on both engines).
_ORPHANS = (
    "SELECT COUNT(*) FROM run WHERE environment_id NOT IN (SELECT id FROM environment)",
    "SELECT COUNT(*) FROM result WHERE run_id NOT IN (SELECT id FROM run)",
    "SELECT COUNT(*) FROM round_value WHERE result_id NOT IN (SELECT id FROM result)",
    "SELECT COUNT(*) FROM verdict WHERE head_run_id NOT IN (SELECT id FROM run)",
)


class Store:
    """A results store (SQLite or PostgreSQL). Open with `Store.open`; close with `close`/`with`.

    Attributes:
        path: How messages name the store: its SQLite path, or its URL without a password.
        dialect: "sqlite" or "postgresql".
    """

    def __init__(self, conn: Connection, path: str) -> None:
        """Wrap an open connection; use `Store.open` instead."""
        self._conn = conn
        self.path = path
        self.dialect = conn.dialect.name

    # ---- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        timeout_s: float = 60.0,
        read_only: bool = False,
    ) -> Store:
        """Open (creating and migrating as needed) the store at `url`.

        Args:
            url: A path, ``sqlite:///PATH``, None for `DEFAULT_URL`, or a PostgreSQL URL
                (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE``; needs the ``postgres``
                extra). The database must exist; its tables are created on first use.
            timeout_s: How long a writer waits for a lock another one holds (SQLite busy
                timeout, PostgreSQL lock_timeout).
            read_only: Only to read. Nothing is created or written (a store older than this
                badput is still migrated, as a writer would); a SQLite store that cannot be
                written is read all the same. Otherwise the store is checked writable now, so
                that a store that cannot take a write fails before the work whose results it
                would record.

        Raises:
            StoreError: an unsupported URL, a database that cannot be opened, reached or (not
                `read_only`) written, a store whose schema is newer than this badput knows
                (nothing is written to it then), or PostgreSQL without psycopg installed.
                Never shows a password.
            StoreNotFoundError: `read_only` and no store there yet.
        """
        target = parse_url(url)
        conn = connect(target, timeout_s=timeout_s, read_only=read_only)
        store = cls(conn, target.shown)
        try:
            store._prepare(read_only=read_only)
        except BaseException:
            conn.close()
            raise
        return store

    def _prepare(self, *, read_only: bool) -> None:
        """Check the schema version; migrate, or make the connection refuse writes."""
        dialect = self._conn.dialect
        with self._errors(_OPEN):
            applied = self._applied()
        # Before anything that writes (even SQLite's journal mode, kept in the file): a newer
        # badput's store may have changed in ways this code would write wrongly.
        self._refuse_newer(applied)
        if read_only and not applied:
            raise StoreNotFoundError(f"{self.path}: no results store there (no badput tables)")
        if not read_only or not applied >= _KNOWN:
            with self._errors(_WRITE):
                for statement in dialect.write_setup:
                    self._conn.execute(statement).fetchall()
            self.migrate()
        if read_only:
            if dialect.read_only_setup:
                with self._errors(_OPEN):
                    self._conn.execute(dialect.read_only_setup)
        else:
            self._probe_write()

    def _probe_write(self) -> None:
        """Raise StoreError unless a write would go through; writes nothing.

        The database itself is asked, with a write that is rolled back: file permissions,
        chattr +i, a read-only mount, a read-only PostgreSQL role or a hot standby all show
        here, which os.access cannot tell (root passes it; the server is elsewhere).
        """
        with self._errors(_WRITE):
            cur = self._conn.cursor()
            cur.execute(self._conn.dialect.begin)
            try:
                cur.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (_PROBE_VERSION, now()),
                )
            finally:
                self._rollback(cur)

    def _refuse_newer(self, applied: set[int]) -> None:
        newest = max(applied, default=0)
        if newest > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {newest} is newer than this badput knows "
                f"({SCHEMA_VERSION}); upgrade badput"
            )

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Turn the driver's errors into a one-line StoreError naming the store.

        Args:
            doing: What failed, as the message says it: "cannot <doing> ..." .
        """
        try:
            yield
        except self._conn.errors as e:
            raise StoreError(f"{self.path}: cannot {doing} ({self._conn.reason(e)})") from e

    def _rollback(self, cur: Cursor) -> None:
        """Roll back, quietly: the error that led here says more than a failed ROLLBACK would.

        A failed ROLLBACK (no transaction left, a connection gone) has committed nothing.
        """
        with suppress(*self._conn.errors):
            cur.execute("ROLLBACK")

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
    def transaction(self) -> Iterator[Cursor]:
        """One write transaction (taken at once, so that writers queue instead of deadlock).

        Commits on success, rolls back on any exception.

        Raises:
            StoreError: the database refused the write (read-only, locked, gone away); the
                driver's error is its ``__cause__``.
        """
        with self._errors(_WRITE):
            cur = self._conn.cursor()
            cur.execute(self._conn.dialect.begin)
        try:
            yield cur
        except self._conn.errors as e:
            self._rollback(cur)
            raise StoreError(f"{self.path}: cannot {_WRITE} ({self._conn.reason(e)})") from e
        except BaseException:
            self._rollback(cur)
            raise
        try:
            cur.execute("COMMIT")
        except self._conn.errors as e:
            self._rollback(cur)
            raise StoreError(f"{self.path}: cannot {_WRITE} ({self._conn.reason(e)})") from e

    def _applied(self) -> set[int]:
        if not self._conn.execute(self._conn.dialect.has_table, ("schema_migrations",)).fetchall():
            return set()
        rows = self._conn.execute("SELECT version FROM schema_migrations").fetchall()
        return {int(r[0]) for r in rows}

    def migrate(self) -> list[int]:
        """Apply the migrations not yet applied; return their versions (idempotent).

        Safe to run from several processes at once: the migration transaction takes the
        write lock (SQLite) or an advisory lock (PostgreSQL) before it looks.

        Raises:
            StoreError: the store's schema is newer than this badput knows (nothing is
                written), or the database refused the migration.
        """
        with self._errors(_OPEN):
            applied = self._applied()
        self._refuse_newer(applied)
        if applied >= _KNOWN:
            return []
        dialect = self._conn.dialect
        done: list[int] = []
        with self.transaction() as cur:
            if dialect.migration_lock:
                cur.execute(dialect.migration_lock)
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            applied = {int(r[0]) for r in cur.execute("SELECT version FROM schema_migrations")}
            # Looked at again under the lock: a newer badput may have migrated meanwhile.
            self._refuse_newer(applied)
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                for sql in statements:
                    cur.execute(render(sql, dialect.types))
                cur.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, now()),
                )
                done.append(version)
        return done

    def schema_version(self) -> int:
        """The highest applied migration."""
        with self._errors(_READ):
            return max(self._applied(), default=0)

    def integrity_ok(self) -> bool:
        """Whether no row lacks its parent and, on SQLite, the integrity checks pass."""
        if self._conn.dialect.name == "sqlite":
            if self._fetch("PRAGMA integrity_check")[0][0] != "ok":
                return False
            if self._fetch("PRAGMA foreign_key_check"):
                return False
        return all(int(self._fetch(q)[0][0]) == 0 for q in _ORPHANS)

    # ---- writing -------------------------------------------------------------------------

    def _environment(self, cur: Cursor, identity: Mapping[str, Any]) -> str:
        env = environment_id(identity)
        cur.execute(
            "INSERT INTO environment (id, label, identity_json, first_seen) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            (env, environment_label(identity), canonical(identity), now()),
        )
        return env

    def _insert_run(
        self,
        cur: Cursor,
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
                now(),
                run.commit,
                run.branch,
                run.purpose,
                run.ab_group,
                run.source,
                env,
                canonical(dict(software)),
                __version__,
                SCHEMA_VERSION,
            ),
        )
        return int(cur.fetchone()[0]), run_uuid

    def _insert_result(self, cur: Cursor, run_id: int, r: ResultRow) -> int:
        value = statistics.median(r.values) if r.values else None
        cur.execute(
            "INSERT INTO result (run_id, benchmark, params_json, metric, unit, higher_is_better, "
            "status, value, n_rounds, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                run_id,
                r.benchmark,
                canonical(r.params),
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

    def _insert_verdicts(self, cur: Cursor, run_id: int, run: RunRow) -> None:
        created = now()
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
                    canonical(run.verdict_params),
                    v.get("effect"),
                    ci[0],
                    ci[1],
                    v.get("p_value"),
                    v.get("p_adjusted"),
                    str(v["decision"]),
                    created,
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
            # Under the write lock: a newer badput may have migrated since this store opened.
            self._refuse_newer(self._applied())
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
        vals = floats(values, f"{benchmark} {metric}")
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

    def _fetch(self, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        """Every row of one query; the driver's errors (a damaged file, say) as StoreError."""
        with self._errors(_READ):
            return self._conn.execute(sql, params).fetchall()

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
        rows = self._fetch(sql + " ORDER BY run.id", args)
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
        rows = self._fetch(
            "SELECT DISTINCT metric FROM result WHERE benchmark = ? ORDER BY metric", (benchmark,)
        )
        return [r[0] for r in rows]

    def environments(self) -> dict[str, str]:
        """Environment id -> human label."""
        rows = self._fetch("SELECT id, label FROM environment ORDER BY first_seen")
        return {r[0]: r[1] for r in rows}

    def count(self, table: str) -> int:
        """Rows in one of the store's tables."""
        if table not in _TABLES:
            raise ValueError(f"no table {table!r}")
        return int(self._fetch(f"SELECT COUNT(*) FROM {table}")[0][0])

    def rounds(self, run_id: str, benchmark: str, metric: str) -> list[float]:
        """The round values of one result of a run (by the run's uuid)."""
        rows = self._fetch(
            "SELECT round_value.value FROM round_value "
            "JOIN result ON result.id = round_value.result_id "
            "JOIN run ON run.id = result.run_id "
            "WHERE run.uuid = ? AND result.benchmark = ? AND result.metric = ? "
            "ORDER BY round_value.round",
            (run_id, benchmark, metric),
        )
        return [float(r[0]) for r in rows]

    def verdicts(self) -> list[dict[str, Any]]:
        """Every stored A/B verdict, oldest first."""
        with self._errors(_READ):
            cur = self._conn.execute(
                "SELECT run.uuid, verdict.benchmark, verdict.metric, verdict.method, "
                "verdict.params_json, verdict.effect, verdict.ci_low, verdict.ci_high, "
                "verdict.p_value, verdict.p_adjusted, verdict.decision FROM verdict "
                "JOIN run ON run.id = verdict.head_run_id ORDER BY verdict.id"
            )
            names = cur.columns
            out = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        for v in out:
            v["head_run"] = v.pop("uuid")
            v["params"] = json.loads(v.pop("params_json"))
        return out
