"""
One database, two dialects: engines, transactions, retries and error mapping.

Every unit of work is a function of a :class:`Tx`, run by
:meth:`Database.transaction` in one transaction and retried as a whole on
transient failures (serialization failures, deadlocks, a busy SQLite file).
Nothing here ever sleeps inside a transaction.

On PostgreSQL transactions run on SQLAlchemy's engine (psycopg, a pool
sized to the process).  On SQLite they run on the stdlib driver
(:mod:`saga.core.store.sqlite_driver`, which says why): SQLAlchemy is loaded only
for PostgreSQL or when a tool asks for :attr:`Database.engine`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from saga.core.logs import get_logger
from saga.core.store.errors import is_database_error, is_transient, translate
from saga.core.store.sqlfiles import ENGINE, Dialect, SqlComponent, merged_queries, split_statements
from saga.core.store.sqlite_driver import PlainConnection, Rows, SqlitePool, plain_sqlite_file
from saga.exceptions import (
    DatabaseBusy,
    DatabaseError,
    DatabaseMissing,
    DatabaseUnavailable,
    InvalidInput,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    import sqlalchemy as sa
    from sqlalchemy.engine import URL, Connection, Engine, RowMapping

T = TypeVar("T")

log = get_logger(__name__)

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


class StaleConnection(Exception):
    """A pooled connection was dead on a transaction's first statement: nothing ran."""


class Tx:
    """
    A transaction in progress: runs the dialect's named queries with bound parameters.

    ``lease`` is the job (id and lease token) whose fenced transaction this
    is, once the queue has fenced it: the writes that witness fencing
    (audit rows, an application's records) name it, and the database records
    whether that lease was still valid when they were made.
    """

    __slots__ = ("_after_commit", "_ran", "_wake", "conn", "db", "lease", "locked")

    def __init__(self, conn: Connection, db: Database) -> None:
        self.conn = conn
        self.db = db
        self.lease: tuple[str, str] | None = None
        # Rows this transaction holds locked, by (table, key), as it last saw
        # or wrote them: the lock keeps every other writer out until the end,
        # so reading one again would only repeat a round trip.
        self.locked: dict[tuple[str, str], Any] = {}
        self._after_commit: list[Callable[[], object]] = []
        self._wake: dict[str, set[str]] = {}
        self._ran = False

    def after_commit(self, action: Callable[[], object]) -> None:
        """
        Run ``action`` once this transaction has committed (never if it rolls back).

        For what must not count a change that did not happen: metrics, not
        effects (an action that fails is logged, the commit stands).
        """
        self._after_commit.append(action)

    def wake(self, queue: str, job_ids: Iterable[str]) -> None:
        """
        Wake the workers of ``queue`` for ``job_ids`` (due now) when this transaction commits.

        One notification per queue per transaction, sent last, and none for
        jobs this transaction claimed itself (:meth:`claimed`): a worker that
        queues its saga's next step and takes it in the same transaction has
        nobody to wake.  Every listening session pays for each notification
        it receives, so the ones that wake nobody are worth not sending.
        """
        self._wake.setdefault(queue, set()).update(job_ids)

    def claimed(self, job_ids: Iterable[str]) -> None:
        """Jobs this transaction claimed: nobody needs waking for them."""
        taken = set(job_ids)
        for queue in list(self._wake):
            self._wake[queue] -= taken
            if not self._wake[queue]:
                del self._wake[queue]

    def send_wakeups(self) -> None:
        """Send the notifications :meth:`wake` asked for (the database calls it before commit)."""
        for queue in sorted(self._wake):
            self.run("notify_jobs", queue=queue)
        self._wake.clear()

    def committed_actions(self) -> list[Callable[[], object]]:
        """What :meth:`after_commit` asked for, in order (the database runs them)."""
        return list(self._after_commit)

    @property
    def lease_params(self) -> dict[str, str | None]:
        """``job_id`` and ``lease_token`` for the fencing witnesses (``None`` outside a job)."""
        if self.lease is None:
            return {"job_id": None, "lease_token": None}
        return {"job_id": self.lease[0], "lease_token": self.lease[1]}

    @property
    def dialect(self) -> Dialect:
        """``postgres`` or ``sqlite``."""
        return self.db.dialect

    def _execute(self, name: str, params: Mapping[str, Any]) -> sa.CursorResult[Any]:
        first, *rest = self.db.statements(name)
        result = self._execute_one(first, params)
        if not rest:
            return result
        # A query of several statements (a dialect without a data-modifying
        # WITH): its rows are the first statement's, read before the next runs.
        rows = _buffered(result)
        for statement in rest:
            self._execute_one(statement, params).close()
        return cast("sa.CursorResult[Any]", rows)

    def _execute_one(
        self, statement: sa.TextClause, params: Mapping[str, Any]
    ) -> sa.CursorResult[Any]:
        try:
            result = self.conn.execute(statement, dict(params))
        except Exception as exc:
            if getattr(exc, "connection_invalidated", False) and not self._ran:
                # The pooled connection was dead before anything ran (the
                # server restarted, the session was ended): safe to run again.
                raise StaleConnection from exc
            raise
        self._ran = True
        return result

    def one(self, query: str, /, **params: Any) -> RowMapping | None:
        """The first row of ``query``, or ``None``."""
        return self._execute(query, params).mappings().first()

    def all(self, query: str, /, **params: Any) -> Sequence[RowMapping]:
        """Every row of ``query``."""
        return self._execute(query, params).mappings().all()

    def scalar(self, query: str, /, **params: Any) -> Any:
        """The first column of the first row of ``query``, or ``None``."""
        return self._execute(query, params).scalar()

    def run(self, query: str, /, **params: Any) -> int:
        """Run ``query``; the number of rows it changed."""
        return self._execute(query, params).rowcount

    def execute_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> Rows:
        """
        Run one statement of this dialect's SQL, with ``:name`` parameters bound.

        For tests and tools that must reach past the named queries (a row
        broken on purpose, a table the engine does not know); the engine's
        own work goes through named queries.  The rows are read at once.
        """
        return _buffered(self._execute_one(_text(sql), params or {}))

    def script(self, statements: str | Sequence[str]) -> None:
        """Run DDL statements (migrations), or a whole script; they carry no parameters."""
        if isinstance(statements, str):
            statements = split_statements(statements)
        # The DBAPI cursor, not exec_driver_sql: with no parameters psycopg
        # leaves "%" alone, which plpgsql's RAISE and strftime formats need.
        cursor = self.conn.connection.cursor()
        try:
            for statement in statements:
                cursor.execute(statement)
        finally:
            cursor.close()


class Database:
    """
    The engine's handle on one database.

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

    def __repr__(self) -> str:
        return f"<Database {self.url.render_as_string(hide_password=True)}>"

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

    def transaction(self, work: Callable[[Tx], T], *, write: bool = True) -> T:
        """
        Run ``work`` in one transaction and return its result.

        The transaction commits when ``work`` returns and rolls back when it
        raises.  Transient failures rerun ``work`` from the start, so ``work``
        must not have effects outside the database.
        """
        self._ensure_ready()
        retrying = Retrying(
            retry=retry_if_exception(is_transient) | retry_if_exception_type(StaleConnection),
            wait=wait_random_exponential(multiplier=0.005, max=0.5),
            stop=stop_after_delay(self.lock_wait) | stop_after_attempt(200),
            before_sleep=_log_retry,
            reraise=True,
        )
        started = time.monotonic()
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(work, write=write)
        except StaleConnection as exc:
            cause = exc.__cause__
            raise DatabaseUnavailable(f"the database keeps dropping connections: {cause}") from exc
        except Exception as exc:
            if not is_database_error(exc):
                raise
            if not is_transient(exc):
                raise translate(exc) from exc
            # Still locked (or still conflicting) after the whole wait.
            raise self._gave_up(exc, time.monotonic() - started) from exc
        raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover

    def _gave_up(self, exc: Exception, waited: float) -> DatabaseError:
        if self.dialect == "sqlite":
            return DatabaseBusy(
                f"the SQLite database {self.sqlite_path} stayed locked by another writer for "
                f"{waited:.0f} s (the lock wait is {self.lock_wait:g} s, "
                f"${LOCK_WAIT_ENV}); nothing was changed",
            )
        translated = translate(exc)
        return DatabaseBusy(
            f"gave up after {waited:.0f} s of conflicting transactions "
            f"({translated.message}); nothing was changed",
            sqlstate=translated.sqlstate,
        )

    def _once(self, work: Callable[[Tx], T], *, write: bool) -> T:
        if self._pool is not None:
            return self._plain_once(work, write=write)
        import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

        try:
            with self.engine.connect() as conn:
                tx = Tx(conn, self)
                with conn.begin():
                    result = work(tx)
                    tx.send_wakeups()
        except sa.exc.DBAPIError as exc:
            if is_transient(exc):
                raise
            raise translate(exc) from exc
        _after_commit(tx)
        return result

    def _plain_once(self, work: Callable[[Tx], T], *, write: bool) -> T:
        """A transaction on SQLite, on the stdlib driver (see the module's docstring)."""
        assert self._pool is not None  # noqa: S101 - only called on SQLite
        try:
            conn = self._pool.acquire()
        except sqlite3.Error as exc:  # a file that cannot be opened, or is not a database
            if is_transient(exc):
                raise
            raise translate(exc) from exc
        tx = _PlainTx(cast("Connection", conn), self)
        try:
            # A writer takes the write lock up front, waits on the busy
            # timeout, and never fails half-way with SQLITE_BUSY when
            # upgrading a read lock; a reader takes no lock.
            conn.raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = work(tx)  # no wakeups to send: SQLite's workers poll
            except BaseException:
                if conn.raw.in_transaction:
                    conn.raw.execute("ROLLBACK")
                raise
            conn.raw.execute("COMMIT")
        except sqlite3.Error as exc:
            if is_transient(exc):
                raise
            raise translate(exc) from exc
        finally:
            self._pool.release(conn)
        _after_commit(tx)
        return result

    def dispose(self) -> None:
        """Close every pooled connection (call it in a child process after fork)."""
        if self._engine is not None:
            self._engine.dispose()
        if self._pool is not None:
            self._pool.close()


class _PlainTx(Tx):
    """A transaction on SQLite's stdlib driver: the queries as written, rows read at once."""

    __slots__ = ()

    def _execute(self, name: str, params: Mapping[str, Any]) -> sa.CursorResult[Any]:
        conn = cast("PlainConnection", self.conn)
        first, *rest = self.db.sql(name)
        rows = conn.execute(first, params)
        for statement in rest:
            conn.execute(statement, params)
        return cast("sa.CursorResult[Any]", rows)

    def execute_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> Rows:
        return cast("PlainConnection", self.conn).execute(sql, params or {})

    def script(self, statements: str | Sequence[str]) -> None:
        if isinstance(statements, str):
            statements = split_statements(statements)
        raw = cast("PlainConnection", self.conn).raw
        for statement in statements:
            raw.execute(statement)


def _text(sql: str) -> sa.TextClause:
    import sqlalchemy as sa  # noqa: PLC0415 - see the module's docstring

    return sa.text(sql)


def _buffered(result: sa.CursorResult[Any]) -> Rows:
    """A statement's rows and row count, kept while the statements after it run."""
    rows = result.mappings().all() if result.returns_rows else []
    # After the fetch: SQLite counts a RETURNING statement's rows as they come.
    found = Rows(
        cast("Sequence[Mapping[str, Any]]", rows), result.rowcount, returns_rows=result.returns_rows
    )
    result.close()
    return found


def _after_commit(tx: Tx) -> None:
    for action in tx.committed_actions():
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - committed; a metric must not undo that
            log.warning("after_commit_failed", error=repr(exc))


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    log.debug("db_transient_retry", attempt=state.attempt_number, error=str(error)[:200])
