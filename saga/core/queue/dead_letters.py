"""
Dead letters and their replay: an operator procedure, not a button.

A replay picks dead letters by filter, in batches, at a bounded rate; each
replay gives the job a fresh set of attempts and writes an audit row (who,
why, what it had failed with).  A job that is no longer a dead letter (it was
replayed and finished already) is skipped: replaying is idempotent.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga import validation as _validation
from saga.codec import iso
from saga.core.logs import get_logger
from saga.core.queue.values import JobInfo
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from saga.core.store.db import Database, Tx

log = get_logger(__name__)

MAX_BATCH: Final = 1000


def dead_letter_json(job: JobInfo) -> dict[str, Any]:
    """A dead letter as plain data: why it failed (``reason``) and when (``failed_at``)."""
    return {
        "id": job.id,
        "queue": job.queue,
        "kind": job.kind,
        "saga_id": job.saga_id,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "reason": job.error_class,
        "last_error": job.last_error,
        "created_at": iso(job.created_at),
        "failed_at": iso(job.finished_at),
    }


@dataclass(frozen=True, slots=True)
class Filter:
    """Which dead letters: one job, or all of a queue and/or kind."""

    job_id: str | None = None
    queue: str | None = None
    kind: str | None = None


@dataclass(slots=True)
class ReplayReport:
    """What a replay did."""

    replayed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dry_run: bool = False
    stopped: bool = False

    def to_json(self) -> dict[str, Any]:
        """The report as plain data."""
        return {
            "replayed": len(self.replayed),
            "skipped": len(self.skipped),
            "dry_run": self.dry_run,
            "stopped": self.stopped,
            "jobs": self.replayed,
        }


class DeadLetters:
    """List and replay dead letters."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def find(self, where: Filter | None = None, *, limit: int = 100) -> list[JobInfo]:
        """Dead letters, oldest first."""
        where = where or Filter()
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=100_000)
        rows = self.db.transaction(
            lambda tx: tx.all(
                "list_dead_letters",
                queue=where.queue,
                kind=where.kind,
                job_id=where.job_id,
                limit=limit,
            ),
            write=False,
        )
        return [JobInfo.from_row(row) for row in rows]

    def replay(
        self,
        where: Filter,
        *,
        actor: str,
        reason: str | None = None,
        batch: int = 100,
        rate: float | None = None,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> ReplayReport:
        """
        Replay the dead letters matching ``where``.

        ``batch`` are read per round, at most ``rate`` replayed per second.

        ``should_stop`` is asked between jobs: the replay stops cleanly there
        (each batch already committed stays committed).  ``dry_run`` lists
        what would be replayed and changes nothing.
        """
        actor = _validation.identifier("actor", actor)
        batch = _validation.whole_number("batch", batch, minimum=1, maximum=MAX_BATCH)
        if rate is not None and not rate > 0:
            raise InvalidInput(field="rate", problem=f"must be a positive number, got {rate}")
        if reason is not None:
            reason = _validation.text("reason", reason)
        report = ReplayReport(dry_run=dry_run)
        if dry_run:
            report.replayed = [letter.id for letter in self.find(where, limit=100_000)]
            return report
        pacer = _Pacer(rate)
        seen: set[str] = set()
        for ids in self._batches(where, batch, seen):
            for job_id in ids:
                if should_stop():
                    report.stopped = True
                    return report
                pacer.wait()
                replay = functools.partial(_replay_in, job_id=job_id, actor=actor, reason=reason)
                if self.db.transaction(replay):
                    report.replayed.append(job_id)
                    log.info("job_replayed", job_id=job_id, actor=actor)
                else:
                    report.skipped.append(job_id)
                if progress is not None:
                    progress(1)
        return report

    def _batches(self, where: Filter, batch: int, seen: set[str]) -> Iterator[list[str]]:
        while True:
            letters = [letter.id for letter in self.find(where, limit=batch + len(seen))]
            fresh = [job_id for job_id in letters if job_id not in seen][:batch]
            if not fresh:
                return
            seen.update(fresh)
            yield fresh


def _replay_in(tx: Tx, *, job_id: str, actor: str, reason: str | None) -> bool:
    letter = tx.one("list_dead_letters", queue=None, kind=None, job_id=job_id, limit=1)
    if letter is None:
        return False  # replayed already, or never a dead letter: nothing to do
    if tx.one("replay_job", id=job_id) is None:
        return False
    tx.run(
        "record_replay",
        job_id=job_id,
        actor=actor,
        reason=reason,
        previous_error=letter["last_error"],
        previous_class=letter["error_class"],
        attempts=letter["attempts"],
    )
    tx.wake(letter["queue"], [job_id])
    return True


class _Pacer:
    """At most ``rate`` calls of :meth:`wait` per second."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 0.0 if rate is None else 1.0 / rate
        self.next_at = time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        if self.next_at > now:
            time.sleep(self.next_at - now)
        self.next_at = max(now, self.next_at) + self.interval
