"""
A database set up for the engine: URL, dialect, connections, named queries.

Its URL is parsed (with the engine's driver) and its lock wait read; on
PostgreSQL its connections come from SQLAlchemy's engine (psycopg, a pool
sized to the process), on SQLite from the stdlib driver
(:mod:`saga.core.store.sqlite_driver`, which says why): SQLAlchemy is loaded
only for PostgreSQL or when a tool asks for :attr:`Backend.engine`.  Apart
from :mod:`saga.core.store.db`, which runs transactions on it: all of this is
set up once, before any transaction (a named query is compiled once, then kept).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from saga.core.store.sqlfiles import ENGINE, Dialect, SqlComponent, merged_queries
from saga.core.store.sqlite_driver import SqlitePool, plain_sqlite_file
from saga.exceptions import DatabaseMissing, DatabaseUnavailable, InvalidInput

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Sequence

    import sqlalchemy as sa
    from sqlalchemy.engine import URL, Connection, Engine

DEFAULT_URL: Final = "sqlite:///saga.db"
_SEARCH_PATH: Final = re.compile(r"search_path=([A-Za-z_][A-Za-z0-9_]*)")
# How long a transaction may wait for a lock (SQLite's write lock, or retries
# of PostgreSQL's serialization failures) before the command gives up.
LOCK_WAIT_ENV: Final = "SAGA_LOCK_WAIT_SECONDS"
DEFAULT_LOCK_WAIT_S: Final = 60.0


# An engine transaction never waits on anything but the database: one left
# open this long belongs to a process that stopped (PostgreSQL ends it).
IDLE_IN_TRANSACTION_S: Final = 30.0


def lock_wait_from_env() -> float:
    """``$SAGA_LOCK_WAIT_SECONDS`` if set (a positive number), else 60 s."""
    text = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86_400:
        raise InvalidInput(
            field=LOCK_WAIT_ENV, problem=f"must be a positive number of seconds, got {text!r}"
        )
    return value


def normalize_url(url: str, *, field: str = "db") -> URL:
    """
    Parse a database URL and pick the engine's driver for it.

    ``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://``;
    ``sqlite:///FILE`` stays.  Anything else is :class:`InvalidInput` on
    ``field`` (the option that named the URL).
    """
    import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

    if not url.strip():
        raise InvalidInput(field=field, problem="must not be empty")
    try:
        parsed = sa.engine.make_url(url.strip())
        backend = parsed.get_backend_name()
        parsed.port  # noqa: B018 - parsing the port raises on garbage such as "[::1"
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise InvalidInput(field=field, problem=f"not a database URL: {url!r}") from exc
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend != "sqlite":
        raise InvalidInput(
            field=field,
            problem=f"unsupported database {backend!r}: use postgresql://… or sqlite:///FILE",
        )
    if parsed.get_driver_name() not in ("pysqlite", ""):
        raise InvalidInput(field=field, problem="SQLite URLs use the stdlib driver: sqlite:///FILE")
    path = parsed.database or ""
    if not path or path == ":memory:" or path.startswith("file:") or "\x00" in path:
        raise InvalidInput(
            field=field,
            problem="a SQLite URL names a file, sqlite:///FILE (an in-memory database "
            "would forget everything when the command ends)",
        )
    if parsed.query:
        raise InvalidInput(field=field, problem="SQLite URLs take no options: sqlite:///FILE")
    return parsed.set(drivername="sqlite")


class Backend:
    """
    One database set up for the engine: where it is, how it is reached, its SQL.

    Its connections (SQLAlchemy's pool on PostgreSQL, the stdlib driver's on
    SQLite), its components' named queries in its dialect, and the hook run
    once before its first transaction.  :class:`~saga.core.store.db.Database`
    runs transactions on it.

    Args:
        url: ``postgresql://…`` or ``sqlite:///FILE``.
        pool_size: connections kept open per process (PostgreSQL).
        application_name: shown in ``pg_stat_activity`` (default
            ``$SAGA_APPLICATION_NAME``, else ``saga``).
        field: the option that named ``url``, for error messages.
        lock_wait: seconds a transaction waits for a lock before it gives up
            (default ``$SAGA_LOCK_WAIT_SECONDS``, else 60).
        components: the SQL components whose named queries it runs and whose tables
            ``saga db upgrade`` builds (the engine's, then an application's).

    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 5,
        application_name: str | None = None,
        components: Sequence[SqlComponent] = (ENGINE,),
        field: str = "db",
        lock_wait: float | None = None,
    ) -> None:
        self.field = field
        self.lock_wait = lock_wait_from_env() if lock_wait is None else lock_wait
        self._given_url = url
        self._url: URL | None = None
        file = plain_sqlite_file(url)
        if file is None:
            self._url = normalize_url(url, field=field)
            backend = self._url.get_backend_name()
            file = self._url.database if backend == "sqlite" else None
        self.dialect: Dialect = "postgres" if file is None else "sqlite"
        self._file = file
        self.components: tuple[SqlComponent, ...] = tuple(components)
        self._queries = merged_queries(self.dialect, self.components)
        self._sql: dict[str, tuple[str, ...]] = {}
        self._statements: dict[str, tuple[sa.TextClause, ...]] = {}
        self._engine: Engine | None = None
        self._pool = (
            SqlitePool(file, int(min(30.0, self.lock_wait) * 1000)) if file is not None else None
        )
        self._first_use: Callable[[], None] | None = None
        self._ready = True
        self._preparing = False
        self._lock = threading.RLock()
        #: How this engine's sessions are named in ``pg_stat_activity`` (PostgreSQL).
        self.application_name = (
            application_name or os.environ.get("SAGA_APPLICATION_NAME") or "saga"
        )
        if self.dialect == "postgres":
            self._engine = self._postgres_engine(pool_size, self.application_name)

    @property
    def url(self) -> URL:
        """The database's URL (SQLAlchemy's, with the engine's driver)."""
        if self._url is None:
            self._url = normalize_url(self._given_url, field=self.field)
        return self._url

    @property
    def engine(self) -> Engine:
        """
        The SQLAlchemy engine.

        On SQLite the engine's own transactions do not use it: it is built
        on first use, for tools that want SQLAlchemy on the same file.
        """
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = self._sqlite_engine()
        return self._engine

    def _postgres_engine(self, pool_size: int, application_name: str) -> Engine:
        import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

        # A lock wait is bounded like SQLite's busy wait; and a session that
        # sits in an open transaction (its process paused, partitioned or
        # hung) is ended by the server, so its row locks cannot stop every
        # other worker.  JIT compilation is off: the engine's statements are
        # short, and a cost estimate inflated by a set-returning function had
        # it spend 180 ms compiling a 5 ms query (the console's chart).
        # Options the URL already carries (a search_path) stay.
        given = self.url.query.get("options", "")
        given = " ".join(given) if isinstance(given, tuple) else given
        options = (
            f"{given} -c lock_timeout={int(self.lock_wait * 1000)}"
            f" -c idle_in_transaction_session_timeout={int(IDLE_IN_TRANSACTION_S * 1000)}"
            " -c jit=off"
        ).strip()
        return sa.create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=pool_size,
            # No ping before each use (a round trip per transaction): a pooled
            # connection found dead on a transaction's first statement is
            # replaced and the transaction run again (StaleConnection).
            pool_pre_ping=False,
            connect_args={
                "application_name": application_name,
                "connect_timeout": 10,
                "options": options,
            },
        )

    def _sqlite_engine(self) -> Engine:
        import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

        busy_ms = int(min(30.0, self.lock_wait) * 1000)
        engine = sa.create_engine(self.url, connect_args={"timeout": busy_ms / 1000})

        @sa.event.listens_for(engine, "connect")
        def _configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            # Take transactions out of pysqlite's hands so that "begin" below
            # can say BEGIN IMMEDIATE: a writer then takes the write lock up
            # front, waits on the busy timeout, and never fails half-way with
            # SQLITE_BUSY when upgrading a read lock.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms:d}")
            cursor.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed (acknowledged) transaction survives power loss too.
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")

        return engine

    @property
    def sqlite_path(self) -> Path | None:
        """The embedded database's file (``None`` on PostgreSQL)."""
        return Path(self._file) if self._file is not None else None

    @property
    def search_path_schema(self) -> str | None:
        """The schema named by ``options=-csearch_path=…`` in a PostgreSQL URL, if any."""
        match = _SEARCH_PATH.search(str(self.url.query.get("options", "")))
        return None if match is None else match[1]

    def require_file(self) -> None:
        """
        Refuse an embedded database file that does not exist (read commands never create one).

        Raises :class:`~saga.exceptions.DatabaseMissing`; PostgreSQL always passes.
        """
        path = self.sqlite_path
        if path is not None and not path.exists():
            raise DatabaseMissing(path=str(path), field=self.field)

    def create_schema(self) -> None:
        """Create the PostgreSQL schema the URL's search_path names, if it is missing."""
        schema = self.search_path_schema
        if self.dialect != "postgres" or schema is None:
            return
        import psycopg  # noqa: PLC0415 - only PostgreSQL needs the driver loaded
        from psycopg import sql  # noqa: PLC0415

        conninfo = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
                ).fetchone()
                if exists is None:
                    # Another process may create it at the same moment: that is fine.
                    with contextlib.suppress(psycopg.errors.UniqueViolation):
                        conn.execute(
                            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                        )
        except psycopg.OperationalError as exc:
            msg = f"cannot reach PostgreSQL: {str(exc).strip()}"
            raise DatabaseUnavailable(msg) from exc

    def before_first_use(self, hook: Callable[[], None]) -> None:
        """
        Run ``hook`` once, before the first transaction (checking the schema).

        Deferring it means a command refused for bad input never touches the
        database: not even the embedded SQLite file gets created.
        """
        with self._lock:
            self._first_use = hook
            self._ready = False

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        with self._lock:
            self._prepare_locked()

    def _prepare_locked(self) -> None:
        # Checked again under the lock; _preparing: the hook's own
        # transactions re-enter here from the same thread.
        if self._ready or self._preparing or self._first_use is None:
            return
        self._preparing = True
        try:
            self._first_use()
        finally:
            self._preparing = False
        self._ready = True

    def statements(self, name: str) -> tuple[sa.TextClause, ...]:
        """The compiled statements of the named query ``name`` of this dialect (most have one)."""
        compiled = self._statements.get(name)
        if compiled is None:
            import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

            compiled = tuple(sa.text(statement) for statement in self.sql(name))
            self._statements[name] = compiled
        return compiled

    def sql(self, name: str) -> tuple[str, ...]:
        """The statements of the named query ``name`` of this dialect, as written."""
        statements = self._sql.get(name)
        if statements is None:
            query = self._queries.get(name)
            if query is None:
                where = ", ".join(c.name for c in self.components)
                msg = f"no query named {name!r} in the {self.dialect} SQL of: {where}"
                raise KeyError(msg)
            statements = self._sql[name] = tuple(query.statements())
        return statements

    def dispose(self) -> None:
        """Close every pooled connection (call it in a child process after fork)."""
        if self._engine is not None:
            self._engine.dispose()
        if self._pool is not None:
            self._pool.close()
