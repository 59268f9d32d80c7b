"""The drivers' errors as the engine's: a session the server ended is the database unavailable."""

from __future__ import annotations

import psycopg
import pytest

from saga.core.store.errors import translate
from saga.exceptions import DatabaseError, DatabaseUnavailable


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CrashShutdown("terminating connection because of crash of another server"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
        psycopg.errors.ConnectionFailure("connection failure"),
    ],
)
def test_a_session_the_server_ended_is_the_database_unavailable(error):
    translated = translate(error)
    assert isinstance(translated, DatabaseUnavailable)
    assert error.sqlstate == translated.sqlstate


def test_a_refused_statement_is_not_the_database_unavailable():
    translated = translate(psycopg.errors.UniqueViolation("duplicate key value"))
    assert type(translated) is DatabaseError
    assert "23505" == translated.sqlstate
