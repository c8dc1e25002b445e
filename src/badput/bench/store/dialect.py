"""Where a store lives: store URLs, and the two SQL dialects (SQLite, PostgreSQL).

The store writes its SQL once, with ``?`` placeholders; a `Dialect` says what differs:
placeholders, column types, how a write transaction starts, how concurrent migrations are
serialized, and what an integrity check is. `connect` turns a store URL into a `Connection`
whose cursors translate the SQL on the way through.

PostgreSQL goes through psycopg 3, an optional extra (``pip install 'badput[postgres]'``),
imported only when a PostgreSQL URL is opened. A server URL can hold a password: it is never
shown; messages name the URL with the password taken out (`redact`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from badput.bench.store.model import StoreError, StoreNotFoundError
from badput.bench.store.schema import POSTGRES_TYPES, SQLITE_TYPES
from badput.errors import UsageError

__all__ = [
    "DEFAULT_URL",
    "POSTGRES",
    "SQLITE",
    "Connection",
    "Cursor",
    "Dialect",
    "Target",
    "connect",
    "parse_url",
    "redact",
]

DEFAULT_URL = ".badput/bench.sqlite"
POSTGRES_SCHEMES = ("postgresql", "postgres")
INSTALL_HINT = "pip install 'badput[postgres]'"
#: Key of the advisory lock that serializes migrations on a PostgreSQL server ("badput").
_MIGRATION_LOCK = 0x626164707574


@dataclass(frozen=True)
class Dialect:
    """What differs between the SQL of two database engines.

    Attributes:
        name: "sqlite" or "postgresql".
        types: Column types of the migrations' placeholders.
        paramstyle: The driver's placeholder ("?" or "%s").
        begin: Starts a write transaction (SQLite takes its write lock at once).
        has_table: Returns a row when the table named by its one parameter exists.
        migration_lock: Run first in the migration transaction to serialize migrators ("" none).
        write_setup: Run on a connection before its first write (SQLite's WAL mode, which is
            written into the file, so never on a store opened only to read).
        read_only_setup: Makes a connection refuse writes ("" none): a store opened to read
            is never written, not even by mistake.
    """

    name: str
    types: dict[str, str]
    paramstyle: str
    begin: str
    has_table: str
    migration_lock: str = ""
    write_setup: tuple[str, ...] = ()
    read_only_setup: str = ""

    def sql(self, statement: str, *, with_params: bool) -> str:
        """`statement` (written with ``?`` placeholders) in this dialect's paramstyle."""
        if self.paramstyle == "?":
            return statement
        if with_params:
            statement = statement.replace("%", "%%")
        return statement.replace("?", self.paramstyle)


SQLITE = Dialect(
    "sqlite",
    SQLITE_TYPES,
    "?",
    "BEGIN IMMEDIATE",
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
    write_setup=("PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL"),
    read_only_setup="PRAGMA query_only = ON",
)
POSTGRES = Dialect(
    "postgresql",
    POSTGRES_TYPES,
    "%s",
    "BEGIN",
    "SELECT 1 WHERE to_regclass(?) IS NOT NULL",
    migration_lock=f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})",
    read_only_setup="SET default_transaction_read_only = on",
)


class Cursor:
    """A driver cursor that takes the store's ``?`` SQL and returns plain tuples."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        """Wrap a DB-API cursor."""
        self._raw = raw
        self._dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        """Run one statement; returns this cursor (to fetch from)."""
        if params is None:
            self._raw.execute(self._dialect.sql(sql, with_params=False))
        else:
            self._raw.execute(self._dialect.sql(sql, with_params=True), tuple(params))
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        if rows:
            self._raw.executemany(self._dialect.sql(sql, with_params=True), rows)

    def fetchone(self) -> Any:
        """The next row, or None."""
        return self._raw.fetchone()

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        return list(self._raw.fetchall())

    @property
    def columns(self) -> list[str]:
        """Names of the result columns of the last query."""
        return [d[0] for d in self._raw.description or ()]

    def __iter__(self) -> Iterator[Any]:
        """Iterate over the remaining rows."""
        return iter(self.fetchall())


class Connection:
    """An open database connection (autocommit; transactions are begun explicitly)."""

    def __init__(
        self,
        raw: Any,
        dialect: Dialect,
        errors: tuple[type[Exception], ...],
        secrets: Sequence[str] = (),
    ) -> None:
        """Wrap a DB-API connection of `dialect`, whose driver raises `errors`.

        Args:
            raw: The DB-API connection.
            dialect: Its SQL dialect.
            errors: The driver's exception classes.
            secrets: Strings never to show in a message (the password of the store's URL).
        """
        self.raw = raw
        self.dialect = dialect
        #: The driver's exception classes (for callers that turn them into messages).
        self.errors = errors
        self._secrets = tuple(secrets)

    def reason(self, error: BaseException) -> str:
        """A driver error as one line, without the password of the store's URL."""
        return _one_line(error, self._secrets)

    def cursor(self) -> Cursor:
        """A new cursor."""
        return Cursor(self.raw.cursor(), self.dialect)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        """Run one statement on a new cursor."""
        return self.cursor().execute(sql, params)

    def close(self) -> None:
        """Close the connection."""
        self.raw.close()


@dataclass(frozen=True)
class Target:
    """A parsed store URL.

    Attributes:
        dialect: Which engine.
        location: What the driver opens: a SQLite path, or a libpq connection URL.
        shown: How messages name it (a path, or the URL without its password).
    """

    dialect: Dialect
    location: str
    shown: str


def redact(url: str) -> str:
    """A server URL without its password (in the user part or a ``password=`` parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}@{hostport}" if user else hostport
    query = "&".join(
        p for p in parts.query.split("&") if p and p.partition("=")[0].lower() != "password"
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _secrets(url: str) -> list[str]:
    """The password of a server URL, as written and decoded (to scrub from messages)."""
    parts = urlsplit(url)
    found = [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    return [f for f in found if f]


def parse_url(url: str | os.PathLike[str] | None) -> Target:
    """Which engine and what location a store URL names.

    A path, ``sqlite:///PATH`` or None (for `DEFAULT_URL`) is a SQLite store;
    ``postgresql://...`` or ``postgres://...`` (libpq URLs; a SQLAlchemy-style driver suffix
    such as ``postgresql+psycopg://`` is accepted) a PostgreSQL one.

    Raises:
        UsageError: an unknown scheme or a malformed sqlite URL.
    """
    text = os.fspath(url) if url is not None else DEFAULT_URL
    if not text:
        text = DEFAULT_URL
    if "://" not in text:
        return Target(SQLITE, text, text)
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative/path, sqlite:////absolute/path (the SQLAlchemy convention).
        if not rest.startswith("/") or rest == "/":
            raise UsageError("a sqlite store URL is sqlite:///PATH (three slashes, then a path)")
        return Target(SQLITE, rest[1:], rest[1:])
    base = scheme.partition("+")[0]
    if base in POSTGRES_SCHEMES:
        try:
            shown = redact(text)
        except ValueError:  # an unbalanced [ in the host, say
            raise UsageError(
                f"malformed {base}:// store URL; the form is {base}://USER@HOST:PORT/DATABASE"
            ) from None
        return Target(POSTGRES, f"{base}://{rest}", shown)
    # Only the scheme is echoed: the rest of a server URL can hold a password.
    raise UsageError(
        f"unknown store URL scheme {scheme!r}; use a path, sqlite:///PATH or postgresql://..."
    )


def _one_line(error: BaseException, secrets: Sequence[str] = ()) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _sqlite_open(database: str, timeout_s: float, *, uri: bool = False) -> sqlite3.Connection:
    """A SQLite connection with the store's per-connection settings, its file opened."""
    raw = sqlite3.connect(database, timeout=timeout_s, isolation_level=None, uri=uri)
    try:
        raw.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        raw.execute("PRAGMA foreign_keys = ON")
        # SQLite opens the file lazily: read once, so that a file that cannot be opened or is
        # not a database fails here, with its name, rather than in the first query.
        raw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except BaseException:
        raw.close()
        raise
    return raw


def _sqlite_read_only(path: str, timeout_s: float) -> sqlite3.Connection:
    """A read-only connection to a store SQLite could not open read-write.

    The usual cause is a read-only directory: a WAL-mode reader needs the ``-shm`` file beside
    the store, and cannot create it there. ``mode=ro`` works when the journal files are already
    there; ``immutable=1`` (no journal, no locks) when they are not, which is safe only while
    nothing is left in a ``-wal`` file: it would be ignored, so then there is no fallback.
    """
    uri = Path(path).resolve().as_uri()
    tries = [f"{uri}?mode=ro"]
    wal = Path(f"{path}-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        tries.append(f"{uri}?immutable=1")
    error: sqlite3.Error | None = None
    for database in tries:
        try:
            return _sqlite_open(database, timeout_s, uri=True)
        except sqlite3.Error as e:
            error = e
    assert error is not None
    raise error


def _sqlite_problem(path: str, error: sqlite3.Error, *, read_only: bool) -> str:
    """Why a SQLite store cannot be opened, in one line that names it."""
    folder = os.path.dirname(path) or "."
    if not read_only and not os.access(folder, os.W_OK):
        # A store is written with a journal beside it (-wal, -shm): its directory must be
        # writable too, which SQLite's own message ("unable to open database file") hides.
        return (
            f"{path}: cannot write the results store: its directory {folder} is read-only, "
            "and SQLite keeps the store's journal there"
        )
    return f"{path}: cannot open as a results store ({_one_line(error)})"


def _connect_sqlite(target: Target, timeout_s: float, read_only: bool) -> Connection:
    path = target.location
    memory = path == ":memory:"
    if not memory:
        if os.path.isdir(path):
            raise StoreError(f"{path}: is a directory, not a results store")
        if read_only and not os.path.exists(path):
            # Reading never creates a store (nor its directory): a mistyped path says so.
            raise StoreNotFoundError(f"{path}: no results store there (no such file)")
        if not read_only:
            if os.path.exists(path) and not os.access(path, os.W_OK):
                # Said before SQLite opens it: SQLite would open it read-only without a word
                # and leave its -wal and -shm files beside it. (os.access sees chattr +i and
                # read-only mounts even for root; the write probe catches the rest.)
                raise StoreError(f"{path}: cannot write the results store (the file is read-only)")
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"{path}: cannot create the store's directory ({e})") from None
    try:
        raw = _sqlite_open(path, timeout_s)
    except sqlite3.Error as e:
        if not read_only or memory:
            raise StoreError(_sqlite_problem(path, e, read_only=read_only)) from e
        try:
            raw = _sqlite_read_only(path, timeout_s)
        except sqlite3.Error:
            raise StoreError(_sqlite_problem(path, e, read_only=True)) from e
    return Connection(raw, SQLITE, (sqlite3.Error,))


def _connect_postgres(target: Target, timeout_s: float) -> Connection:
    try:
        import psycopg
        from psycopg.types.string import TextLoader
    except ImportError:
        raise StoreError(
            f"{target.shown}: a PostgreSQL store needs psycopg 3: {INSTALL_HINT}"
        ) from None
    extra: dict[str, Any] = {}
    if "connect_timeout" not in target.location:
        extra["connect_timeout"] = 10
    try:
        raw = psycopg.connect(target.location, autocommit=True, **extra)
    except psycopg.Error as e:
        reason = _one_line(e, _secrets(target.location))
        raise StoreError(
            f"{target.shown}: cannot connect to the results store ({reason})"
        ) from None
    # JSON columns come back as their text, as they do from SQLite.
    raw.adapters.register_loader("jsonb", TextLoader)
    raw.adapters.register_loader("json", TextLoader)
    try:
        # Like SQLite's busy timeout: how long a writer waits for a lock another one holds.
        raw.execute(f"SET lock_timeout = {int(timeout_s * 1000)}")
    except psycopg.Error as e:
        raw.close()
        reason = _one_line(e, _secrets(target.location))
        raise StoreError(f"{target.shown}: cannot open as a results store ({reason})") from None
    return Connection(raw, POSTGRES, (psycopg.Error,), _secrets(target.location))


def connect(target: Target, *, timeout_s: float = 60.0, read_only: bool = False) -> Connection:
    """Open a connection to the store at `target`.

    Args:
        target: The store.
        timeout_s: How long a writer waits for a lock another one holds.
        read_only: Only to read: a missing SQLite store is not created, and one that cannot
            be opened read-write (a read-only directory) is opened read-only.

    Raises:
        StoreError: the database cannot be opened or reached, or its driver is not installed.
        StoreNotFoundError: `read_only` and no SQLite store at that path.
    """
    if target.dialect is POSTGRES:
        return _connect_postgres(target, timeout_s)
    return _connect_sqlite(target, timeout_s, read_only)
