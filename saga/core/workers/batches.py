"""
Running a claimed batch: each handler, its outcome settled under its lease.

A batch's jobs run one after the other; their completions are written
together, fenced, and the batch's last transaction claims the next batch
(held, its leases renewed, until the worker's loop takes it).  A failure is
classified and retried, dead-lettered or handed to the saga; a job whose
lease was lost reports no success.  :class:`BatchRunner` is the part of
:class:`~saga.core.workers.worker.Worker` that does it, apart from the
claim loop for its size; the state it reads is the worker's, set by
``Worker.__init__``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

from saga.core import metrics
from saga.core.faults import crash_point
from saga.core.queue.kinds import Apply, error_text
from saga.core.queue.values import Claimed, ClaimSpec, Done
from saga.core.workers.heartbeat import Heartbeat

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Sequence

    from saga.core.queue.kinds import JobKind
    from saga.core.queue.values import Job
    from saga.core.store.db import Tx

T = TypeVar("T")


class BatchRunner(Heartbeat):
    """The running of batches of a :class:`~saga.core.workers.worker.Worker`."""

    # The worker's state this part reads and writes (``Worker.__init__`` sets it).
    kinds: list[str]
    batch: int
    _stopping: threading.Event
    _rescue_interval: float
    _next_rescue: float
    _idle_rescue: bool
    _ahead: Claimed | None
    _fold: bool

    def stop(self) -> None:
        """Ask the worker to stop after the handler that is running (thread- and signal-safe)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

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

    def _was_lost(self, job: Job) -> bool:
        with self._guard:
            return job.id in self._lost
