"""
A worker's heartbeat: the leases of its jobs in hand renewed, hung attempts timed out.

A thread beside the handlers extends the leases of the jobs a worker holds
every third of their length, and fails an attempt that ran past its kind's
timeout (giving back the rest of its batch); a handler that ignores even
that ends its process.  :class:`Heartbeat` is the part of
:class:`~saga.core.workers.worker.Worker` that does it, apart from the
claim loop and the running of batches for its size; the state it reads is
the worker's, set by ``Worker.__init__``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from saga.core import metrics
from saga.core.queue.kinds import error_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from saga.core.queue.kinds import Handlers
    from saga.core.queue.leases import Queue
    from saga.core.queue.values import Job
    from saga.core.workers.report import WorkerReport

# The exit code of a worker process that ended itself because a handler hung
# past its timeout (EX_TEMPFAIL: the supervisor starts a fresh one).
EXIT_STUCK: Final = 75


class Heartbeat:
    """The heartbeat and the timeouts of a :class:`~saga.core.workers.worker.Worker`."""

    # The worker's state this part reads and writes (``Worker.__init__`` sets it).
    handlers: Handlers
    queue: Queue
    report: WorkerReport
    lease_seconds: float
    exit_when_stuck: bool
    progress: Callable[[bool], None] | None
    _guard: threading.Lock
    _in_hand: dict[str, Job]
    _running: dict[str, float]
    _lost: set[str]
    _log: Any

    def _tell(self, *, exiting: bool = False) -> None:
        if self.progress is not None:
            self.progress(exiting)

    def _lease_lost(self, job: Job, what: str) -> None:
        self.report.lost_leases += 1
        metrics.LEASES_LOST.inc()
        self._log.warning(
            "lease_lost",
            job_id=job.id,
            kind=job.kind,
            attempt=job.attempt,
            detail=f"{what}: the lease expired or passed to another worker",
        )

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
        # Wake often enough to notice an attempt that ran past its timeout;
        # renew leases every third of their length.
        tick = min(self.lease_seconds / 3, 1.0)
        renew_every = self.lease_seconds / 3
        last_renewal = time.monotonic()
        while not done.wait(tick):
            try:
                self._time_out_hung()
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                self._log.warning("timeout_check_failed", error=error_text(exc))
            if time.monotonic() - last_renewal < renew_every:
                continue
            last_renewal = time.monotonic()
            with self._guard:
                jobs = [job for job in self._in_hand.values() if job.id not in self._lost]
            if not jobs:
                continue
            try:
                owned = self.queue.extend(jobs, lease_seconds=self.lease_seconds)
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                self._log.warning("heartbeat_failed", error=error_text(exc))
                continue
            with self._guard:
                # A job settled while the extension ran is not lost: let go of it.
                lost = [job for job in jobs if job.id not in owned and job.id in self._in_hand]
                self._lost.update(job.id for job in lost)
            for job in lost:
                self._lease_lost(job, "lease extension refused")

    def _time_out_hung(self) -> None:
        """Fail attempts that ran past their kind's timeout; give their batch back."""
        now = time.monotonic()
        with self._guard:
            hung = [
                (self._in_hand[job_id], started)
                for job_id, started in self._running.items()
                if job_id in self._in_hand
                and job_id not in self._lost
                and now - started > self.handlers[self._in_hand[job_id].kind].timeout_seconds
            ]
            stuck = [
                job_id
                for job_id, started in self._running.items()
                if job_id in self._lost
                and job_id in self._in_hand
                and now - started > 2 * self.handlers[self._in_hand[job_id].kind].timeout_seconds
            ]
        for job, started in hung:
            self._time_out(job, now - started)
        if hung:
            self._tell()
        if stuck and self.exit_when_stuck:
            # The handler ignores its timeout and holds this process: end it,
            # so that the supervisor starts a fresh one.  Its job was already
            # settled as timed out; nothing it does later can be committed.
            self._log.error("worker_stuck", job_ids=stuck, exit_code=EXIT_STUCK)
            self._tell(exiting=True)
            os._exit(EXIT_STUCK)

    def _time_out(self, job: Job, ran: float) -> None:
        kind = self.handlers[job.kind]
        with self._guard:
            self._lost.add(job.id)
            waiting = [
                other
                for other in self._in_hand.values()
                if other.id not in self._running and other.id not in self._lost
            ]
            self._lost.update(other.id for other in waiting)
        self.report.timed_out += 1
        error = f"timed out: the attempt ran {ran:.1f} s, longer than {kind.timeout_seconds:g} s"
        if kind.last_attempt(job):
            settled = self.queue.fail(job, error=error, error_class="timed_out")
            self.report.dead_lettered += settled
        else:
            delay = kind.backoff.delay(job.attempt)
            settled = self.queue.retry(job, delay=delay, error=error, error_class="timed_out")
            self.report.retried += settled
        self._log.warning(
            "job_timed_out",
            job_id=job.id,
            kind=job.kind,
            attempt=job.attempt,
            seconds=round(ran, 1),
            settled=settled,
        )
        if waiting:
            # The rest of the batch waits behind the hung handler: give it back.
            released = self.queue.release(waiting)
            self.report.released += len(released)
