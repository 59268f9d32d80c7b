"""
A movable clock for tests: time passes for the engine under test, nobody sleeps.

The engine reads time only from its database (``clock_timestamp()``,
``strftime('now')``), and that clock cannot be set.  What can be moved is
everything the engine wrote against it: shifting every stored time of the
database back by *d* is, for every comparison the engine makes, the same as
the database clock jumping *d* forward.  Deadlines come due, leases expire,
backoffs end, exactly as they would after *d* seconds, in one transaction
and without waiting (Temporal's time skipping, for SQL).

Every timestamp column of every table of the database moves together, the
application's own included, so relative times (a deadline counted from a
saga's creation, an audit row's time) stay consistent.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from saga.core.store.sqlfiles import SqlComponent

if TYPE_CHECKING:
    from saga.core.store.db import Database, Tx

# SQLite stores times as ISO 8601 text: its time columns are known by name.
_SQLITE_TIME: Final = re.compile(r"(.*_at|.*_until|at|deadline|horizon)", re.ASCII)
_BOOKKEEPING: Final = frozenset({"saga_migrations", "saga_component_migrations"})
_SQLITE_NAMED: Final = sqlite.dialect(paramstyle="named")
# Its own queries (sql/testing/): not among the engine's, which production code runs.
_SQL: Final = SqlComponent.bundled("testing")


def _run(tx: Tx, name: str) -> None:
    tx.execute_sql(_SQL.queries(tx.db.dialect)[name].sql)


class SagaClock:
    """
    The clock of the engine under test: :meth:`advance` moves it forward.

    Only for a test's own database: it rewrites every stored time.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.skipped = 0.0
        self._time_columns: dict[str, list[str]] | None = None

    def __repr__(self) -> str:
        return f"<SagaClock +{self.skipped:g} s>"

    def _columns(self) -> dict[str, list[str]]:
        if self._time_columns is None:
            with self.db.engine.connect() as conn:
                # A reader: on SQLite it must not wait for the write lock.
                conn.execution_options(sqlite_begin="DEFERRED")
                self._time_columns = self._read_columns(conn)
        return self._time_columns

    def _read_columns(self, conn: sa.Connection) -> dict[str, list[str]]:
        inspector = sa.inspect(conn)
        found: dict[str, list[str]] = {}
        for table in inspector.get_table_names():
            if table in _BOOKKEEPING or table.startswith("sqlite_"):
                continue
            for column in inspector.get_columns(table):
                name = str(column["name"])
                if self.db.dialect == "postgres":
                    wanted = isinstance(column["type"], sa.DateTime)
                else:
                    wanted = bool(_SQLITE_TIME.fullmatch(name))
                if wanted:
                    found.setdefault(table, []).append(name)
        return found

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the engine (it must be positive)."""
        if not seconds > 0:
            msg = f"the clock only moves forward, not by {seconds}"
            raise ValueError(msg)
        shift: sa.BindParameter[float] = sa.bindparam("seconds", seconds)
        second: sa.ColumnElement[object] = sa.literal_column("interval '1 second'")
        time_columns = self._columns()  # before the transaction: another connection reads them

        def move(tx: Tx) -> None:
            # The audit trail refuses updates; this transaction alone may
            # shift its times, and restores the guard before it commits.
            _run(tx, "suspend_audit_guard")
            for name, columns in time_columns.items():
                table = sa.table(name, *(sa.column(c) for c in columns))
                if self.db.dialect == "postgres":
                    tx.conn.execute(
                        sa.update(table).values({c: c - second * shift for c in table.columns})
                    )
                    continue
                # SQLite's transactions run on the stdlib driver: the statement
                # is compiled to its SQL, the shift bound by name.
                moves = {
                    c: sa.func.strftime(
                        "%Y-%m-%dT%H:%M:%fZ", sa.func.julianday(c) - shift / 86400.0
                    )
                    for c in table.columns
                }
                update = sa.update(table).values(moves).compile(dialect=_SQLITE_NAMED)
                tx.execute_sql(str(update), update.params)
            _run(tx, "restore_audit_guard")

        self.db.transaction(move)
        self.skipped += seconds
