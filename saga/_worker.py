"""
One worker: claim due jobs, run them, settle them under their lease.

A heartbeat thread extends the leases of the jobs in hand while handlers
run.  On PostgreSQL the worker sleeps on ``LISTEN saga_jobs`` between claims
(with a polling fallback); on SQLite it polls.  ``stop()`` (SIGTERM/SIGINT)
lets the running handler finish, releases the claimed jobs that never
started, and returns.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import psycopg
import structlog
from psycopg import sql

from saga._handlers import Apply, Handlers, JobKind, error_text
from saga._queue import DEFAULT_LEASE_SECONDS, Done, Job, Queue

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from saga._db import Database, Tx
    from saga._pollers import Poller

log = structlog.get_logger(__name__)

CHANNEL: Final = "saga_jobs"


@dataclass(slots=True)
class WorkerReport:
    """What one worker did before it stopped."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead_lettered: int = 0
    unknown: int = 0
    lost_leases: int = 0
    released: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        return {
            "claimed": self.claimed,
            "done": self.done,
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "unknown": self.unknown,
            "lost_leases": self.lost_leases,
            "released": self.released,
            "seconds": round(time.monotonic() - self.started_at, 3),
        }

    def add(self, other: dict[str, Any]) -> None:
        """Add another worker's counters (the supervisor sums its children)."""
        for name in (
            "claimed",
            "done",
            "retried",
            "dead_lettered",
            "unknown",
            "lost_leases",
            "released",
        ):
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))


class Worker:
    """
    Run jobs of the kinds in ``handlers`` from ``db``.

    Args:
        batch: jobs claimed per transaction (completions are batched too).
        lease_seconds: lease length; the heartbeat renews it every third.
        poll_interval: longest sleep between claims when idle.
        queues: only jobs of these queues (default: every queue of ``handlers``).
        listen: wake up on PostgreSQL notifications.

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
        self._stopping = threading.Event()
        self._in_hand: dict[str, Job] = {}
        self._lost: set[str] = set()
        self._guard = threading.Lock()
        self._log = log.bind(worker=self.name)

    # -- lifecycle ---------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop after the handler that is running (thread- and signal-safe)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    def run(self, *, burst: bool = False) -> WorkerReport:
        """Work until :meth:`stop`, or with ``burst`` until nothing is due."""
        self._log.info("worker_started", kinds=self.kinds, burst=burst, batch=self.batch)
        with self._heartbeat(), self._listener() as wait:
            while not self.stopping:
                if self.run_once() + self._poll():
                    continue
                if burst:
                    break
                wait(self._idle_timeout())
        self._log.info("worker_stopped", **self.report.as_dict())
        return self.report

    def run_once(self) -> int:
        """Claim one batch and run it; the number of jobs claimed."""
        now = time.monotonic()
        rescue = now >= self._next_rescue
        if rescue:
            self._next_rescue = now + self._rescue_interval
        jobs = self.queue.claim(
            self.kinds, batch=self.batch, lease_seconds=self.lease_seconds, rescue=rescue
        )
        if not jobs and not rescue:
            # Idle: make sure no expired lease is waiting before reporting none.
            self._next_rescue = now + self._rescue_interval
            jobs = self.queue.claim(
                self.kinds, batch=self.batch, lease_seconds=self.lease_seconds, rescue=True
            )
        if jobs:
            self.report.claimed += len(jobs)
            self._process(jobs)
        return len(jobs)

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
        waits = [self.queue.next_due_in(self.kinds)]
        for poller in self.pollers:
            try:
                waits.append(poller.next_due_in())
            except Exception as exc:  # noqa: BLE001 - the poll interval is the fallback
                self._log.debug(
                    "poller_unavailable", poller=type(poller).__name__, error=error_text(exc)
                )
        due = [wait for wait in waits if wait is not None]
        return max(0.0, min([self.poll_interval, *due]))

    # -- running jobs ------------------------------------------------------------

    def _process(self, jobs: Sequence[Job]) -> None:
        with self._guard:
            self._in_hand.update({job.id: job for job in jobs})
        done: list[Done] = []
        try:
            for index, job in enumerate(jobs):
                if self.stopping:
                    self._flush(done)
                    done = []
                    self._release(jobs[index:])
                    return
                try:
                    result = self._run_one(self.handlers[job.kind], job)
                except Exception as exc:  # noqa: BLE001 - see _settle_crash
                    self._settle_crash(job, exc)
                    continue
                if isinstance(result, Done):
                    done.append(result)
            self._flush(done)
        finally:
            with self._guard:
                for job in jobs:
                    self._in_hand.pop(job.id, None)
                    self._lost.discard(job.id)

    def _run_one(self, kind: JobKind, job: Job) -> Done | None:
        try:
            value = kind.handler(job)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and settled
            self._settle_failure(kind, job, exc)
            return None
        if self._was_lost(job):
            self._log.warning("result_discarded", job_id=job.id, reason="lease lost while running")
            return None
        if isinstance(value, Apply):
            try:
                owned, _ = self.queue.complete_with(job, value.apply)
            except Exception as exc:  # noqa: BLE001 - the effect failed: classify and settle
                self._settle_failure(kind, job, exc)
                return None
            self._count_completion(job, owned)
            return None
        return Done(job, value)

    def _settle_crash(self, job: Job, exc: Exception) -> None:
        # Settling itself failed (the database went away, an effect raised):
        # the job keeps its lease until it expires and comes back, alone, for
        # another attempt.  The worker lives on for the other jobs.
        self._log.error("job_not_settled", job_id=job.id, kind=job.kind, error=error_text(exc))

    def _flush(self, done: Sequence[Done]) -> None:
        if not done:
            return
        try:
            owned = self.queue.complete(done)
        except Exception as exc:  # noqa: BLE001 - the leases expire and the jobs come back
            for item in done:
                self._settle_crash(item.job, exc)
            return
        for item in done:
            self._count_completion(item.job, item.job.id in owned)

    def _count_completion(self, job: Job, owned: bool) -> None:
        if owned:
            self.report.done += 1
        else:
            self._lease_lost(job, "completion refused")

    def _settle_failure(self, kind: JobKind, job: Job, exc: Exception) -> None:
        error = error_text(exc)
        error_class = kind.classify(exc)
        log_ = self._log.bind(job_id=job.id, kind=job.kind, attempt=job.attempt, error=error)
        if error_class == "unknown":
            self._settle_unknown(kind, job, exc, error)
            return
        if error_class == "permanent" or job.last_attempt:
            reason = (
                error
                if error_class == "permanent"
                else (f"gave up after {job.attempt} attempt(s): {error}")
            )
            if self.queue.fail(job, error=reason, error_class=error_class):
                self.report.dead_lettered += 1
                log_.warning("job_dead_lettered", error_class=error_class)
            else:
                self._lease_lost(job, "dead-lettering refused")
            return
        delay = kind.backoff.delay(job.attempt)
        if self.queue.retry(job, delay=delay, error=error, error_class=error_class):
            self.report.retried += 1
            log_.info("job_retry", delay_s=round(delay, 3), next_attempt=job.attempt + 1)
        else:
            self._lease_lost(job, "retry refused")

    def _settle_unknown(self, kind: JobKind, job: Job, exc: Exception, error: str) -> None:
        self.report.unknown += 1
        if kind.on_unknown is None:
            if self.queue.fail(job, error=f"outcome unknown: {error}", error_class="unknown"):
                self.report.dead_lettered += 1
                self._log.warning("job_outcome_unknown", job_id=job.id, handed_to="dead letters")
            else:
                self._lease_lost(job, "dead-lettering refused")
            return
        handler = kind.on_unknown

        def hand_over(tx: Tx) -> dict[str, Any]:
            from steps.errors import StepError  # noqa: PLC0415 - local to the rare path

            step_error = exc if isinstance(exc, StepError) else StepError(error)
            handler(tx, job, step_error)
            return {"outcome": "unknown", "error": error}

        owned, _ = self.queue.complete_with(job, hand_over)
        if owned:
            self._log.warning("job_outcome_unknown", job_id=job.id, handed_to="saga")
        else:
            self._lease_lost(job, "hand-over refused")

    def _release(self, jobs: Sequence[Job]) -> None:
        released = self.queue.release(jobs)
        self.report.released += len(released)
        self._log.info("jobs_released", count=len(released))

    def _lease_lost(self, job: Job, what: str) -> None:
        self.report.lost_leases += 1
        self._log.warning(
            "lease_lost",
            job_id=job.id,
            kind=job.kind,
            attempt=job.attempt,
            detail=f"{what}: the lease expired or passed to another worker",
        )

    def _was_lost(self, job: Job) -> bool:
        with self._guard:
            return job.id in self._lost

    # -- heartbeat and wake-ups --------------------------------------------------

    @contextlib.contextmanager
    def _heartbeat(self) -> Iterator[None]:
        done = threading.Event()
        thread = threading.Thread(
            target=self._beat, args=(done,), name="saga-heartbeat", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=self.lease_seconds)

    def _beat(self, done: threading.Event) -> None:
        while not done.wait(self.lease_seconds / 3):
            with self._guard:
                jobs = [job for job in self._in_hand.values() if job.id not in self._lost]
            if not jobs:
                continue
            try:
                owned = self.queue.extend(jobs, lease_seconds=self.lease_seconds)
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                self._log.warning("heartbeat_failed", error=error_text(exc))
                continue
            lost = [job for job in jobs if job.id not in owned]
            with self._guard:
                self._lost.update(job.id for job in lost)
            for job in lost:
                self._lease_lost(job, "lease extension refused")

    @contextlib.contextmanager
    def _listener(self) -> Iterator[Any]:
        if not self.listen:
            yield self._stopping.wait
            return
        conninfo = self.db.url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            conn = psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:
            self._log.warning("listen_unavailable", error=str(exc), fallback="polling")
            yield self._stopping.wait
            return
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))

            def wait(timeout: float) -> None:
                # Wake on the first notification, or poll after the timeout; wait in
                # slices so that a stop request (a signal) is seen within a second.
                deadline = time.monotonic() + timeout
                while not self.stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    if any(True for _ in conn.notifies(timeout=min(1.0, remaining), stop_after=1)):
                        return

            yield wait
        finally:
            conn.close()
