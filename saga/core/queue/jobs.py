"""Accepting jobs: idempotent by id, with the content compared."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.codec import digest
from saga.exceptions import JobConflict

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from saga.core.store.db import Tx

TIMER_KIND: Final = "saga.timeout"
TIMER_QUEUE: Final = "timers"
DEFAULT_MAX_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """
    A job to accept; its id is chosen once per logical request by the caller.

    It is due ``delay_seconds`` after acceptance, or at ``available_at`` (a
    time read from the database clock, such as a saga's deadline).
    """

    id: str
    queue: str
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    saga_id: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    delay_seconds: float = 0.0
    available_at: datetime | None = None

    @property
    def digest(self) -> str:
        """Fingerprint of what the job is: kind and payload."""
        return digest({"kind": self.kind, "payload": dict(self.payload)})

    @property
    def due_now(self) -> bool:
        """Whether workers should be woken for it."""
        return self.available_at is None and self.delay_seconds <= 0

    def row(self) -> dict[str, Any]:
        """The job as one item of ``enqueue_jobs``."""
        return {
            "id": self.id,
            "queue": self.queue,
            "kind": self.kind,
            "digest": self.digest,
            "saga_id": self.saga_id,
            "max_attempts": self.max_attempts,
            "delay_seconds": max(0.0, float(self.delay_seconds)),
            "available_at": None if self.available_at is None else self.available_at.isoformat(),
            "payload": dict(self.payload),
        }


def enqueue_in(tx: Tx, job: NewJob) -> bool:
    """Accept ``job`` inside ``tx``; ``True`` if it is new (see :func:`enqueue_many_in`)."""
    return enqueue_many_in(tx, [job])[0]


def enqueue_many_in(tx: Tx, jobs: Sequence[NewJob], *, fresh: bool = False) -> list[bool]:
    """
    Accept ``jobs`` inside ``tx``, in a few statements whatever their number.

    Returns, per job, whether it is new.  The same id with the same kind and
    payload is the same job (``False``), even after it finished; with other
    content it raises :class:`JobConflict` and the caller's transaction rolls
    back, so nothing is accepted.  ``fresh`` says the ids cannot have been
    used before (they name something this transaction created, such as a saga
    version): the look into the finished jobs is skipped.
    """
    if not jobs:
        return []
    rows = [job.row() for job in jobs]
    inserted = {row["id"] for row in tx.all("enqueue_jobs", items=json.dumps(rows))}
    if inserted and not fresh:
        # A finished job left the hot table for job_archive: if one of these
        # ids is there, the insert only succeeded because the old row moved
        # (maybe while this transaction waited on it).  Undo that insert and
        # answer from the archive.
        finished = tx.all("archived_digests", ids=json.dumps(sorted(inserted)))
        if finished:
            tx.run("forget_new_jobs", ids=json.dumps([row["id"] for row in finished]))
            inserted -= {row["id"] for row in finished}
    for job in jobs:
        if job.id in inserted and job.due_now:
            tx.wake(job.queue, [job.id])
    _check_repeats(tx, [job for job in jobs if job.id not in inserted])
    created: list[bool] = []
    seen: set[str] = set()
    for job in jobs:
        created.append(job.id in inserted and job.id not in seen)
        seen.add(job.id)
    _check_repeats(tx, _repeated_within(jobs))
    return created


def _check_repeats(tx: Tx, jobs: Sequence[NewJob]) -> None:
    if not jobs:
        return
    stored = {
        row["id"]: row["digest"]
        for row in tx.all("job_digests", ids=json.dumps(sorted({job.id for job in jobs})))
    }
    for job in jobs:
        if stored.get(job.id) != job.digest:
            raise JobConflict(job_id=job.id)


def _repeated_within(jobs: Sequence[NewJob]) -> list[NewJob]:
    """Jobs whose id appeared earlier in the same call (compared with what was stored)."""
    seen: set[str] = set()
    repeats = []
    for job in jobs:
        if job.id in seen:
            repeats.append(job)
        seen.add(job.id)
    return repeats


def timer_job(*, saga_id: str, version: int, event: str, due: datetime) -> NewJob:
    """The timer of a saga's deadline ``due`` (read from the database), as a job."""
    return NewJob(
        id=f"timer:{saga_id}:{version}",
        queue=TIMER_QUEUE,
        kind=TIMER_KIND,
        payload={"saga_id": saga_id, "version": version, "event": event},
        saga_id=saga_id,
        available_at=due,
    )


def enqueue_timer_in(tx: Tx, *, saga_id: str, version: int, event: str, due: datetime) -> bool:
    """Queue the timer of a saga's deadline ``due`` (read from the database) inside ``tx``."""
    return enqueue_in(tx, timer_job(saga_id=saga_id, version=version, event=event, due=due))
