"""
How a transaction is retried, and what giving up says.

Transient failures (serialization failures, deadlocks, a busy SQLite file,
a pooled connection found dead) rerun the whole transaction, with jittered
backoff, for as long as the lock wait allows; nothing ever sleeps inside a
transaction.  Apart from :mod:`saga.core.store.db`, which runs each attempt.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

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
from saga.core.store.backend import LOCK_WAIT_ENV
from saga.core.store.errors import is_database_error, is_transient, translate
from saga.exceptions import DatabaseBusy, DatabaseError, DatabaseUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga.core.store.backend import Backend

T = TypeVar("T")

log = get_logger(__name__)


class StaleConnection(Exception):
    """A pooled connection was dead on a transaction's first statement: nothing ran."""


def retried(db: Backend, once: Callable[[], T]) -> T:
    """
    Run ``once`` (one whole transaction) until it commits, and return its result.

    Transient failures run it again; the rest are translated to the
    engine's errors, and so is a transient one still failing when the lock
    wait is over.
    """
    retrying = Retrying(
        retry=retry_if_exception(is_transient) | retry_if_exception_type(StaleConnection),
        wait=wait_random_exponential(multiplier=0.005, max=0.5),
        stop=stop_after_delay(db.lock_wait) | stop_after_attempt(200),
        before_sleep=_log_retry,
        reraise=True,
    )
    started = time.monotonic()
    try:
        for attempt in retrying:
            with attempt:
                return once()
    except StaleConnection as exc:
        cause = exc.__cause__
        raise DatabaseUnavailable(f"the database keeps dropping connections: {cause}") from exc
    except Exception as exc:
        if not is_database_error(exc):
            raise
        if not is_transient(exc):
            raise translate(exc) from exc
        # Still locked (or still conflicting) after the whole wait.
        raise _gave_up(db, exc, time.monotonic() - started) from exc
    raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover


def _gave_up(db: Backend, exc: Exception, waited: float) -> DatabaseError:
    if db.dialect == "sqlite":
        return DatabaseBusy(
            f"the SQLite database {db.sqlite_path} stayed locked by another writer for "
            f"{waited:.0f} s (the lock wait is {db.lock_wait:g} s, "
            f"${LOCK_WAIT_ENV}); nothing was changed",
        )
    translated = translate(exc)
    return DatabaseBusy(
        f"gave up after {waited:.0f} s of conflicting transactions "
        f"({translated.message}); nothing was changed",
        sqlstate=translated.sqlstate,
    )


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    log.debug("db_transient_retry", attempt=state.attempt_number, error=str(error)[:200])
