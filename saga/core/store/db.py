"""
One database, two dialects: transactions and the named queries run in them.

Every unit of work is a function of a :class:`Tx`, run by
:meth:`Database.transaction` in one transaction and retried as a whole on
transient failures (:mod:`saga.core.store.retries`).  Nothing here ever
sleeps inside a transaction.

On PostgreSQL transactions run on SQLAlchemy's engine (psycopg, a pool
sized to the process).  On SQLite they run on the stdlib driver
(:mod:`saga.core.store.sqlite_driver`, which says why): SQLAlchemy is loaded only
for PostgreSQL or when a tool asks for :attr:`Database.engine`.  The URL,
the connections and the dialect's named queries are the database's setup
(:mod:`saga.core.store.backend`), apart from this module, which runs work on it.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, TypeVar, cast

from saga.core.logs import get_logger
from saga.core.store.backend import Backend
from saga.core.store.errors import is_transient, translate
from saga.core.store.retries import StaleConnection, retried
from saga.core.store.sqlfiles import Dialect, split_statements
from saga.core.store.sqlite_driver import PlainConnection, Rows

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    import sqlalchemy as sa
    from sqlalchemy.engine import Connection, RowMapping

T = TypeVar("T")

log = get_logger(__name__)


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


class Database(Backend):
    """
    The engine's handle on one database: its named queries, run in transactions.

    Built with :class:`~saga.core.store.backend.Backend`'s arguments (the URL,
    the pool size, the SQL components, the lock wait); :meth:`transaction`
    runs a unit of work.
    """

    def __repr__(self) -> str:
        return f"<Database {self.url.render_as_string(hide_password=True)}>"

    def transaction(self, work: Callable[[Tx], T], *, write: bool = True) -> T:
        """
        Run ``work`` in one transaction and return its result.

        The transaction commits when ``work`` returns and rolls back when it
        raises.  Transient failures rerun ``work`` from the start, so ``work``
        must not have effects outside the database.
        """
        self._ensure_ready()
        return retried(self, lambda: self._once(work, write=write))

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
