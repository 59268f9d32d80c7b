"""
The embedded database's transactions, on the stdlib driver alone.

The engine's named queries are plain SQL with ``:name`` parameters, which
:mod:`sqlite3` binds itself (SQLAlchemy would pass the values through to it
untouched), so SQLAlchemy adds nothing to a SQLite transaction but its cost:
about as much Python per statement as SQLite's own work, and on SQLite that
cost is paid while holding the file's one write lock, which every other
process waits for.  So :class:`~saga.core.store.db.Database` runs its SQLite
transactions here, reads and writes, on a small pool of connections
configured once (WAL, ``synchronous = FULL``, foreign keys, the busy wait),
and a command on the embedded database never loads SQLAlchemy.  The rows
are plain dicts, which offer everything a row mapping does.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# sqlite:///relative/path or sqlite:////absolute/path, nothing after it: the
# form that needs no URL parser.  Anything else goes to the full one.
_PLAIN: Final = re.compile(r"sqlite(?:\+pysqlite)?:///(?P<path>[^?#\x00]+)")


def plain_sqlite_file(url: str) -> str | None:
    """The file a plain ``sqlite:///FILE`` URL names; ``None`` for anything else."""
    match = _PLAIN.fullmatch(url.strip())
    if match is None:
        return None
    path = match["path"]
    if path == ":memory:" or path.startswith("file:"):
        return None  # refused, with its reason, by the full parser
    if "%" in path:
        return None  # percent-encoded: the full parser decodes it
    return path


class Rows:
    """
    A statement's rows and row count, read at once.

    What a SQLite statement returns here, and what a query of several
    statements keeps of its first one while the others run.
    """

    __slots__ = ("_rows", "returns_rows", "rowcount")

    def __init__(
        self, rows: Sequence[Mapping[str, Any]], rowcount: int, *, returns_rows: bool
    ) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self.returns_rows = returns_rows

    @classmethod
    def of_cursor(cls, cursor: sqlite3.Cursor) -> Rows:
        """Everything ``cursor`` has, as dicts; the cursor is closed."""
        if cursor.description is None:
            rows: list[dict[str, Any]] = []
        else:
            names = [column[0] for column in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        # After the fetch: SQLite counts a RETURNING statement's rows as they come.
        found = cls(rows, cursor.rowcount, returns_rows=cursor.description is not None)
        cursor.close()
        return found

    def mappings(self) -> Rows:
        """The rows as mappings: they already are."""
        return self

    def first(self) -> Mapping[str, Any] | None:
        """The first row, or ``None``."""
        return self._rows[0] if self._rows else None

    def all(self) -> Sequence[Mapping[str, Any]]:
        """Every row."""
        return self._rows

    def scalar(self) -> Any:
        """The first column of the first row, or ``None``."""
        return next(iter(self._rows[0].values())) if self._rows else None

    def close(self) -> None:
        """Nothing to release: the rows were read at once."""


class PlainConnection:
    """One transaction's connection: runs plain SQL, returns :class:`Rows`."""

    __slots__ = ("raw",)

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Mapping[str, Any]) -> Rows:
        """Run one statement with its parameters bound by the driver."""
        return Rows.of_cursor(self.raw.execute(sql, dict(params)))


class SqlitePool:
    """
    The connections of one embedded database: a small pool.

    A transaction takes an idle connection (or opens one) and gives it back;
    threads come and go (a worker's heartbeats, a server's requests) without
    leaving connections behind.
    """

    def __init__(self, path: str, busy_ms: int, *, keep: int = 4) -> None:
        self.path = path
        self.busy_ms = busy_ms
        self.keep = keep
        self._idle: list[PlainConnection] = []
        self._lock = threading.Lock()

    def acquire(self) -> PlainConnection:
        """An idle connection, or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        raw = sqlite3.connect(
            self.path,
            timeout=self.busy_ms / 1000,
            isolation_level=None,  # BEGIN and COMMIT are said explicitly
            check_same_thread=False,  # pooled: used by one thread at a time, any thread
        )
        try:
            raw.execute(f"PRAGMA busy_timeout = {self.busy_ms:d}")
            # WAL: readers never block the writer nor wait for it (it stays
            # set in the file; saying it again is free).
            raw.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed (acknowledged) transaction survives power loss too.
            raw.execute("PRAGMA synchronous = FULL")
            raw.execute("PRAGMA foreign_keys = ON")
        except BaseException:  # not a database, or locked while turning WAL on
            raw.close()
            raise
        return PlainConnection(raw)

    def release(self, conn: PlainConnection) -> None:
        """Give ``conn`` back (closed if enough are idle, or if it is still in a transaction)."""
        if not conn.raw.in_transaction:
            with self._lock:
                if len(self._idle) < self.keep:
                    self._idle.append(conn)
                    return
        conn.raw.close()

    def close(self) -> None:
        """Close the idle connections (after a fork, or when the database is disposed)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.raw.close()
