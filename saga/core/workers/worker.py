"""
One worker: claim due jobs, run them, settle them under their lease.

A heartbeat thread extends the leases of the jobs in hand while handlers
run.  On PostgreSQL the worker sleeps on ``LISTEN saga_jobs`` between claims
(with a polling fallback); on SQLite it polls.  ``stop()`` (SIGTERM/SIGINT)
lets the running handler finish, releases the claimed jobs that never
started, and returns.

This module holds the worker's state and its loop (claim, run, poll,
sleep); it runs each batch as :class:`~saga.core.workers.batches.BatchRunner`
says, with the heartbeat and timeouts of
:class:`~saga.core.workers.heartbeat.Heartbeat`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from saga.core import metrics
from saga.core.logs import get_logger
from saga.core.queue.kinds import Handlers, error_text
from saga.core.queue.leases import DEFAULT_LEASE_SECONDS, Queue, claim_in
from saga.core.workers.batches import BatchRunner
from saga.core.workers.report import WorkerReport
from saga.exceptions import DatabaseUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from saga.core.queue.values import Claimed, Job
    from saga.core.store.db import Database
    from saga.core.workers.pollers import Poller

log = get_logger(__name__)


class Worker(BatchRunner):
    """
    Run jobs of the kinds in ``handlers`` from ``db``.

    Args:
        batch: jobs claimed per transaction (completions are batched too).
        lease_seconds: lease length; the heartbeat renews it every third.
        poll_interval: longest sleep between claims when idle.
        queues: only jobs of these queues (default: every queue of ``handlers``).
        listen: wake up on PostgreSQL notifications.
        exit_when_stuck: end the process when a handler still runs long after
            its attempt timed out (a supervised worker process is restarted;
            in-process callers leave it ``False``).
        progress: called after each batch and each timed-out attempt, and with
            ``True`` just before the worker ends its own process, so that a
            supervisor hears the counters of a process that will not report.

    """

    def __init__(
        self,
        db: Database,
        handlers: Handlers,
        *,
        batch: int = 50,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_interval: float = 1.0,
        queues: Sequence[str] | None = None,
        listen: bool = True,
        name: str | None = None,
        pollers: Sequence[Poller] = (),
        exit_when_stuck: bool = False,
        progress: Callable[[bool], None] | None = None,
    ) -> None:
        if batch < 1 or lease_seconds <= 0 or poll_interval <= 0:
            msg = "batch, lease_seconds and poll_interval must be positive"
            raise ValueError(msg)
        self.db = db
        self.queue = Queue(db)
        self.handlers = handlers
        self.kinds = handlers.names(queues)
        if not self.kinds:
            msg = f"no job kinds to run (queues={list(queues or [])})"
            raise ValueError(msg)
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.listen = listen and db.dialect == "postgres"
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.pollers = tuple(pollers)
        self.report = WorkerReport()
        # Expired leases appear a lease after a crash: looking for them on
        # every claim would cost two statements per batch for nothing.
        self._rescue_interval = min(5.0, lease_seconds / 4)
        self._next_rescue = 0.0
        # Outside run()'s loop (a test stepping the worker, burst mode) a claim
        # that finds nothing also looks for expired leases; the loop of a
        # long-running worker leaves that to the rescue interval.
        self._idle_rescue = True
        # The next batch, claimed in the transaction that settled the last one.
        self._ahead: Claimed | None = None
        self._fold = False  # only run()'s loop claims ahead: a stepping caller sees pending jobs
        self._next_due: float | None = None
        self.exit_when_stuck = exit_when_stuck
        self.progress = progress
        self._stopping = threading.Event()
        self._in_hand: dict[str, Job] = {}
        self._running: dict[str, float] = {}  # job id -> when its handler started
        self._lost: set[str] = set()
        self._unavailable = 0  # claims the database dropped in a row
        self._guard = threading.Lock()
        self._log = log.bind(worker=self.name)

    # -- the loop ----------------------------------------------------------------

    def run(self, *, burst: bool = False) -> WorkerReport:
        """Work until :meth:`stop`, or with ``burst`` until nothing is due."""
        self._log.info("worker_started", kinds=self.kinds, burst=burst, batch=self.batch)
        self._idle_rescue = burst
        self._fold = True
        try:
            with self._heartbeat(), self._listener() as wait:
                while not self.stopping:
                    try:
                        claimed = self.run_once()
                    except DatabaseUnavailable as exc:
                        if burst:  # asked to finish what is due: say it could not
                            raise
                        self._database_lost(exc, wait)
                        continue
                    self._unavailable = 0
                    busy = claimed + self._poll()
                    self._tell()
                    if busy:
                        continue
                    if burst:
                        break
                    wait(self._idle_timeout())
                self._give_back_ahead()
        finally:
            # Left by a failure: its leases expire and the jobs come back.
            self._forget_ahead()
            self._idle_rescue = True
            self._fold = False
        self._log.info("worker_stopped", **self.report.as_dict())
        return self.report

    def _database_lost(self, exc: DatabaseUnavailable, wait: Callable[[float], None]) -> None:
        """
        A claim the database dropped: wait (backing off) and claim again.

        Its outcome is unknown: if it committed, the jobs' leases run out and
        the next rescue hands them back, so nothing is lost by going on, and
        a worker that died instead would only be started again.
        """
        self._unavailable += 1
        pause = min(30.0, self.poll_interval * 2 ** min(self._unavailable, 10))
        self._log.warning(
            "database_unavailable", error=str(exc), attempt=self._unavailable, retry_in_s=pause
        )
        wait(pause)

    def run_once(self) -> int:
        """Claim one batch and run it; the number of jobs claimed."""
        started = time.monotonic()
        claimed, self._ahead = self._ahead, None
        if claimed is None:
            claimed = self.db.transaction(lambda tx: claim_in(tx, self._claim_spec()))
            metrics.CLAIM_SECONDS.observe(time.monotonic() - started)
        self._next_due = claimed.next_due_in
        jobs = claimed.jobs
        self.report.dead_lettered += claimed.dead_lettered
        if jobs:
            self.report.claimed += len(jobs)
            for job in jobs:
                metrics.JOBS_CLAIMED.labels(job.kind).inc()
            self._process(jobs)
        return len(jobs)

    def _give_back_ahead(self) -> None:
        """Release a batch claimed ahead that will not run (the worker stops)."""
        claimed = self._ahead
        self._forget_ahead()
        if claimed is not None and claimed.jobs:
            self.report.claimed += len(claimed.jobs)
            self._release(claimed.jobs)

    def _poll(self) -> int:
        done = 0
        for poller in self.pollers:
            try:
                done += poller.poll()
            except Exception as exc:  # noqa: BLE001 - a poller's failure must not stop the jobs
                self._log.warning(
                    "poller_failed", poller=type(poller).__name__, error=error_text(exc)
                )
        return done

    def _idle_timeout(self) -> float:
        waits = [self._next_due]
        for poller in self.pollers:
            try:
                waits.append(poller.next_due_in())
            except Exception as exc:  # noqa: BLE001 - the poll interval is the fallback
                self._log.debug(
                    "poller_unavailable", poller=type(poller).__name__, error=error_text(exc)
                )
        due = [wait for wait in waits if wait is not None]
        return max(0.0, min([self.poll_interval, *due]))

    # -- wake-ups ----------------------------------------------------------------

    @contextlib.contextmanager
    def _listener(self) -> Iterator[Any]:
        if not self.listen:
            yield self._stopping.wait
            return
        from saga.core.queue.listener import JobListener  # noqa: PLC0415 - PostgreSQL only

        listener = JobListener(
            self.db.url.set(drivername="postgresql").render_as_string(hide_password=False),
            stopping=self._stopping,
            log=self._log,
            application_name=f"{self.db.application_name}:listen",
        )
        try:
            yield listener.wait
        finally:
            listener.close()
