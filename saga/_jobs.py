"""Accepting jobs: idempotent by id, with the content compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga._codec import digest, dump_json
from saga.exceptions import JobConflict

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqlalchemy.engine import RowMapping

    from saga._db import Tx

TIMER_KIND: Final = "saga.timeout"
TIMER_QUEUE: Final = "timers"
DEFAULT_MAX_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job to accept: its id is chosen once per logical request by the caller."""

    id: str
    queue: str
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    saga_id: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    delay_seconds: float = 0.0

    @property
    def digest(self) -> str:
        """Fingerprint of what the job is: kind and payload."""
        return digest({"kind": self.kind, "payload": dict(self.payload)})


def enqueue_in(tx: Tx, job: NewJob) -> bool:
    """Accept ``job`` inside ``tx``; ``True`` if it is new.

    The same id with the same kind and payload is the same job (``False``);
    with other content it raises :class:`JobConflict`.
    """
    inserted = tx.one(
        "enqueue_job",
        id=job.id,
        queue=job.queue,
        kind=job.kind,
        digest=job.digest,
        saga_id=job.saga_id,
        max_attempts=job.max_attempts,
        delay_seconds=job.delay_seconds,
    )
    return _store_payload(tx, job, inserted is not None)


def enqueue_timer_in(tx: Tx, *, saga_id: str, version: int, event: str) -> bool:
    """Queue the timer of the saga's current deadline (read from its row) inside ``tx``."""
    job = NewJob(
        id=f"timer:{saga_id}:{version}",
        queue=TIMER_QUEUE,
        kind=TIMER_KIND,
        payload={"saga_id": saga_id, "version": version, "event": event},
        saga_id=saga_id,
    )
    inserted = tx.one(
        "enqueue_saga_timer",
        id=job.id,
        queue=job.queue,
        kind=job.kind,
        digest=job.digest,
        saga_id=saga_id,
        max_attempts=job.max_attempts,
    )
    return _store_payload(tx, job, inserted is not None)


def _store_payload(tx: Tx, job: NewJob, inserted: bool) -> bool:
    existing: RowMapping | None
    if inserted:
        # A finished job left the hot table for job_archive; if this id is
        # there, the insert above only succeeded because the old row moved
        # (possibly while we waited on it): undo it and answer from the archive.
        archived = tx.one("archived_digest", id=job.id)
        if archived is None:
            tx.run("insert_job_payload", job_id=job.id, payload=dump_json(job.payload))
            if job.delay_seconds <= 0:
                tx.run("notify_jobs", queue=job.queue)
            return True
        tx.run("forget_new_job", id=job.id)
        existing = archived
    else:
        existing = tx.one("get_job_digest", id=job.id)
    if existing is None or existing["digest"] != job.digest:
        raise JobConflict(job_id=job.id)
    return False
