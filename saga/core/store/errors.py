"""
The drivers' errors, seen the same way whether SQLAlchemy wrapped them or not.

SQLite's transactions (:mod:`saga.core.store.sqlite_driver`) raise the stdlib
driver's errors as they are; PostgreSQL's raise SQLAlchemy's wrappers.
Either is retried when transient and otherwise translated into the
engine's :class:`~saga.exceptions.DatabaseError`.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any, Final

from saga.exceptions import DatabaseError, DatabaseUnavailable

# SQLSTATEs after which rerunning the whole transaction is safe and useful.
TRANSIENT_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
    }
)
# SQLSTATEs of a session the server ended (an administrator, a crash, a
# restart): the database is unavailable, whatever the statement was.
ENDED_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03"})


def is_database_error(exc: BaseException) -> bool:
    """An error of a driver's, raw (SQLite's) or wrapped by SQLAlchemy (PostgreSQL's)."""
    if isinstance(exc, sqlite3.Error):
        return True
    sa = sys.modules.get("sqlalchemy")
    return sa is not None and isinstance(exc, sa.exc.DBAPIError)


def is_transient(exc: BaseException) -> bool:
    """A failure after which running the whole transaction again is safe and useful."""
    if not is_database_error(exc):
        return False
    orig = getattr(exc, "orig", exc)
    if isinstance(orig, sqlite3.OperationalError):
        text = str(orig).lower()
        return "locked" in text or "busy" in text
    psycopg = _psycopg()
    if psycopg is not None and isinstance(orig, psycopg.Error):
        return orig.sqlstate in TRANSIENT_SQLSTATES
    return False


def _psycopg() -> Any:
    """The PostgreSQL driver if something loaded it (an error of it can exist only then)."""
    return sys.modules.get("psycopg")


def translate(exc: Exception) -> DatabaseError:
    """The engine's error for a driver's: the message, SQLSTATE and constraint it names."""
    orig = getattr(exc, "orig", exc)
    psycopg = _psycopg()
    if psycopg is not None and isinstance(orig, psycopg.Error):
        diag = orig.diag
        if isinstance(orig, psycopg.OperationalError) and orig.sqlstate is None:
            return DatabaseUnavailable(f"cannot reach PostgreSQL: {str(orig).strip()}")
        sqlstate = orig.sqlstate or ""
        if sqlstate in ENDED_SQLSTATES or sqlstate.startswith("08"):  # 08: connection exception
            return DatabaseUnavailable(
                f"PostgreSQL ended the session: {str(orig).strip().splitlines()[0]}",
                sqlstate=sqlstate,
            )
        return DatabaseError(
            str(orig).strip().splitlines()[0],
            sqlstate=orig.sqlstate,
            constraint=diag.constraint_name,
        )
    if isinstance(orig, sqlite3.Error):
        text = str(orig)
        if "unable to open database" in text:
            return DatabaseUnavailable(f"cannot open the SQLite file: {text}")
        return DatabaseError(text, sqlstate=None, constraint=_sqlite_constraint(text))
    return DatabaseError(str(exc))


def _sqlite_constraint(text: str) -> str | None:
    # SQLite says: CHECK constraint failed: <table>_<column>_in_range
    _, sep, tail = text.partition("constraint failed: ")
    return tail.strip() or None if sep else None
