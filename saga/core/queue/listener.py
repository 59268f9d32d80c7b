"""
A worker's wake-up on PostgreSQL: ``LISTEN saga_jobs``, with polling as the fallback.

A transaction that queues due jobs sends one notification per queue when it
commits (``notify_jobs``); an idle worker sleeps on its listening connection
until one comes or its poll interval ends.  Only PostgreSQL has it (SQLite's
workers poll), so this module, and psycopg with it, is imported only there.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    import threading

CHANNEL: Final = "saga_jobs"


class JobListener:
    """
    ``LISTEN saga_jobs`` on a connection of its own, with polling as the fallback.

    A dropped connection (a restarted server, ``pg_terminate_backend``) is
    logged and reconnected on the next wait; until then the worker polls, so
    it never dies for want of a notification.
    """

    def __init__(
        self, conninfo: str, *, stopping: threading.Event, log: Any, application_name: str
    ) -> None:
        self.conninfo = conninfo
        self.application_name = application_name
        self.stopping = stopping
        self.log = log
        self.conn: psycopg.Connection[Any] | None = None
        self._connect()

    def _connect(self) -> None:
        try:
            conn = psycopg.connect(
                self.conninfo,
                autocommit=True,
                connect_timeout=10,
                application_name=self.application_name,
            )
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        except psycopg.Error as exc:
            self.log.warning("listen_unavailable", error=str(exc).strip(), fallback="polling")
            self.conn = None
            return
        self.conn = conn

    def wait(self, timeout: float) -> None:
        """Wake on the first notification, or after ``timeout``; a stop is seen within 1 s."""
        if self.conn is None:
            self._connect()
        deadline = time.monotonic() + timeout
        while not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self.conn is None:
                self.stopping.wait(min(1.0, remaining))
                continue
            try:
                notified = any(
                    True for _ in self.conn.notifies(timeout=min(1.0, remaining), stop_after=1)
                )
            except psycopg.Error as exc:
                self.log.warning("listen_lost", error=str(exc).strip(), fallback="polling")
                self.close()
                return  # poll now: work may have come while the connection was down
            if notified:
                return

    def close(self) -> None:
        """Close the listening connection, if any."""
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
            self.conn = None
