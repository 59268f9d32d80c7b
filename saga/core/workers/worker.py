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
from typing import TYPE_CHECKING, Any, Final, TypeVar

from saga.core import metrics
from saga.core.faults import crash_point
from saga.core.logs import get_logger
from saga.core.queue.kinds import Apply, Handlers, JobKind, error_text
from saga.core.queue.leases import DEFAULT_LEASE_SECONDS, Queue, claim_in
from saga.core.queue.values import Claimed, ClaimSpec, Done, Job
from saga.exceptions import DatabaseUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from saga.core.store.db import Database, Tx
    from saga.core.workers.pollers import Poller

T = TypeVar("T")
log = get_logger(__name__)

# The exit code of a worker process that ended itself because a handler hung
# past its timeout (EX_TEMPFAIL: the supervisor starts a fresh one).
EXIT_STUCK: Final = 75
# The counters of a report; a supervisor adds its workers' (or their deltas).
COUNTERS: Final = (
    *("claimed", "done", "retried", "dead_lettered", "unknown"),
    *("lost_leases", "released", "timed_out", "published"),
)


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
    timed_out: int = 0
    published: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        counters: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS}
        return {**counters, "seconds": round(time.monotonic() - self.started_at, 3)}

    def add(self, other: dict[str, Any]) -> None:
        """Add another worker's counters (the supervisor sums its children)."""
        for name in COUNTERS:
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

    def _tell(self, *, exiting: bool = False) -> None:
        if self.progress is not None:
            self.progress(exiting)

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

    def _hold_ahead(self, claimed: Claimed | None) -> None:
        """
        Keep a batch claimed ahead until the next turn, its leases renewed meanwhile.

        The pollers run between two batches and may wait on the network for
        seconds: the heartbeat must renew these leases from the moment they
        are taken, or another worker could rescue the jobs and both run them.
        """
        self._ahead = claimed
        if claimed is not None and claimed.jobs:
            with self._guard:
                self._in_hand.update({job.id: job for job in claimed.jobs})

    def _forget_ahead(self) -> None:
        claimed, self._ahead = self._ahead, None
        if claimed is not None:
            with self._guard:
                for job in claimed.jobs:
                    self._in_hand.pop(job.id, None)

    def _claim_spec(self) -> ClaimSpec:
        """The next claim: expired leases are looked for every few seconds, not every time."""
        now = time.monotonic()
        rescue = now >= self._next_rescue
        if rescue:
            self._next_rescue = now + self._rescue_interval
        return ClaimSpec.of(
            self.kinds,
            batch=self.batch,
            lease_seconds=self.lease_seconds,
            rescue=rescue,
            rescue_if_idle=self._idle_rescue,
        )

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
                if self._was_lost(job):
                    continue  # given back while an earlier job of the batch hung
                # The batch's last transaction claims the next batch: the last
                # job's own completion, unless the flush below comes after it.
                last = index == len(jobs) - 1 and not done
                try:
                    result = self._run_one(self.handlers[job.kind], job, claim_next=last)
                except Exception as exc:  # noqa: BLE001 - see _settle_crash
                    self._settle_crash(job, exc)
                    continue
                if isinstance(result, Done):
                    done.append(result)
            self._flush(done, claim_next=True)
        finally:
            with self._guard:
                for job in jobs:
                    # Only this claim of it: a job retried at once may be in
                    # the batch claimed ahead already, under a new token.
                    if self._in_hand.get(job.id) is job:
                        del self._in_hand[job.id]
                    self._lost.discard(job.id)

    def _run_one(self, kind: JobKind, job: Job, *, claim_next: bool = False) -> Done | None:
        started = time.monotonic()
        try:
            return self._run_and_settle(kind, job, claim_next=claim_next)
        finally:
            metrics.STEP_SECONDS.labels(job.kind).observe(time.monotonic() - started)

    def _run_and_settle(self, kind: JobKind, job: Job, *, claim_next: bool) -> Done | None:
        with self._guard:
            self._running[job.id] = time.monotonic()
        try:
            value = kind.handler(job)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and settled
            if self._was_lost(job):
                self._log.warning("result_discarded", job_id=job.id, reason="lease lost")
                return None
            try:
                self._settle_failure(kind, job, exc)
            finally:
                self._let_go(job)
            return None
        finally:
            with self._guard:
                self._running.pop(job.id, None)
        if self._was_lost(job):
            self._log.warning("result_discarded", job_id=job.id, reason="lease lost while running")
            return None
        if isinstance(value, Apply):
            spec = self._next_claim() if claim_next else None
            apply = value.apply

            def complete_and_claim(claim: ClaimSpec) -> tuple[bool, Claimed | None]:
                owned, _, ahead = self.queue.complete_with_then_claim(job, apply, claim)
                return owned, ahead

            try:
                owned = self._claiming_ahead(
                    spec, complete_and_claim, lambda: self.queue.complete_with(job, apply)[0]
                )
            except Exception as exc:  # noqa: BLE001 - the effect failed: classify and settle
                self._settle_failure(kind, job, exc)
                return None
            finally:
                self._let_go(job)
            self._count_completion(job, owned)
            return None
        return Done(job, value)

    def _claiming_ahead(
        self,
        spec: ClaimSpec | None,
        settle_and_claim: Callable[[ClaimSpec], tuple[T, Claimed | None]],
        settle: Callable[[], T],
    ) -> T:
        """
        Settle with the next claim folded in, or (no spec, or the claim failed) without it.

        A failing claim is never the settled jobs' failure: the transaction
        rolled back whole, and they are settled again alone.
        """
        if spec is not None:
            try:
                result, ahead = settle_and_claim(spec)
            except Exception as exc:  # noqa: BLE001 - settled again below, without the claim
                self._log.warning("claim_ahead_failed", error=error_text(exc))
            else:
                self._hold_ahead(ahead)
                return result
        return settle()

    def _next_claim(self) -> ClaimSpec | None:
        """The claim to fold into a batch's last transaction (none when stopping)."""
        return self._claim_spec() if self._fold and not self.stopping else None

    def _let_go(self, job: Job) -> None:
        """
        Stop renewing the lease of a job that is settled (completed, retried, failed).

        The batch's other jobs still run; the heartbeat would otherwise try to
        extend a lease the job no longer holds and report it lost: a false
        alarm that teaches operators to ignore the real ones.
        """
        with self._guard:
            if self._in_hand.get(job.id) is job:
                del self._in_hand[job.id]

    def _settle_crash(self, job: Job, exc: Exception) -> None:
        # Settling itself failed (the database went away, an effect raised):
        # the job keeps its lease until it expires and comes back, alone, for
        # another attempt.  The worker lives on for the other jobs.
        self._log.error("job_not_settled", job_id=job.id, kind=job.kind, error=error_text(exc))

    def _flush(self, done: Sequence[Done], *, claim_next: bool = False) -> None:
        if not done:
            return
        crash_point("worker.before_complete")
        spec = self._next_claim() if claim_next else None
        try:
            owned = self._claiming_ahead(
                spec,
                lambda claim: self.queue.complete_then_claim(done, claim),
                lambda: self.queue.complete(done),
            )
        except Exception as exc:  # noqa: BLE001 - the leases expire and the jobs come back
            for item in done:
                self._settle_crash(item.job, exc)
            return
        for item in done:
            self._count_completion(item.job, item.job.id in owned)

    def _count_completion(self, job: Job, owned: bool) -> None:
        if owned:
            self.report.done += 1
            metrics.JOBS_COMPLETED.labels(job.kind).inc()
        else:
            self._lease_lost(job, "completion refused")

    def _settle_failure(self, kind: JobKind, job: Job, exc: Exception) -> None:
        error = error_text(exc)
        error_class = kind.classify(exc)
        log_ = self._log.bind(job_id=job.id, kind=job.kind, attempt=job.attempt, error=error)
        if error_class == "unknown":
            self._settle_unknown(kind, job, exc, error)
            return
        if error_class == "permanent" or kind.last_attempt(job):
            reason = (
                error
                if error_class == "permanent"
                else (f"gave up after {job.attempt} attempt(s): {error}")
            )
            if self.queue.fail(job, error=reason, error_class=error_class):
                self.report.dead_lettered += 1
                metrics.JOBS_FAILED.labels(job.kind, error_class, "dead_lettered").inc()
                log_.warning("job_dead_lettered", error_class=error_class)
            else:
                self._lease_lost(job, "dead-lettering refused")
            return
        delay = kind.backoff.delay(job.attempt)
        if self.queue.retry(job, delay=delay, error=error, error_class=error_class):
            self.report.retried += 1
            metrics.JOBS_FAILED.labels(job.kind, error_class, "retried").inc()
            log_.info("job_retry", delay_s=round(delay, 3), next_attempt=job.attempt + 1)
        else:
            self._lease_lost(job, "retry refused")

    def _settle_unknown(self, kind: JobKind, job: Job, exc: Exception, error: str) -> None:
        self.report.unknown += 1
        if kind.on_unknown is None:
            if self.queue.fail(job, error=f"outcome unknown: {error}", error_class="unknown"):
                self.report.dead_lettered += 1
                metrics.JOBS_FAILED.labels(job.kind, "unknown", "dead_lettered").inc()
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
            metrics.JOBS_FAILED.labels(job.kind, "unknown", "handed_over").inc()
            self._log.warning("job_outcome_unknown", job_id=job.id, handed_to="saga")
        else:
            self._lease_lost(job, "hand-over refused")

    def _release(self, jobs: Sequence[Job]) -> None:
        released = self.queue.release(jobs)
        self.report.released += len(released)
        self._log.info("jobs_released", count=len(released))

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
