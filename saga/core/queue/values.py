"""
The queue's values: a claimed job and its lease, any job's status, claims and completions.

Frozen data, built from rows or by a worker, with no operation of their own:
apart from :mod:`saga.core.queue.leases` (the :class:`~saga.core.queue.leases.Queue`
and the fenced writes) so that the many modules that only handle a job
(job kinds, steps, timers, the checker, instances) read it from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga.codec import as_utc, iso, load_json, maybe_utc

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from sqlalchemy.engine import RowMapping


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as claimed by a worker: what to do, and the lease it holds."""

    id: str
    queue: str
    kind: str
    saga_id: str | None
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    token: str
    lease_until: datetime

    @property
    def last_attempt(self) -> bool:
        """Whether a failure now exhausts the job's attempts."""
        return self.attempt >= self.max_attempts

    @classmethod
    def from_claim(cls, row: RowMapping, token: str) -> Job:
        """Build it from a ``claim_jobs`` row."""
        return cls(
            id=row["id"],
            queue=row["queue"],
            kind=row["kind"],
            saga_id=row["saga_id"],
            payload=load_json(row["payload"]),
            attempt=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            token=token,
            lease_until=as_utc(row["lease_until"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    """Any job's status, live or finished."""

    id: str
    queue: str
    kind: str
    saga_id: str | None
    state: str
    attempts: int
    max_attempts: int
    available_at: datetime | None
    lease_until: datetime | None
    last_error: str | None
    error_class: str | None
    created_at: datetime
    finished_at: datetime | None
    payload: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: RowMapping) -> JobInfo:
        """Build it from a ``get_job`` row."""
        return cls(
            id=row["id"],
            queue=row["queue"],
            kind=row["kind"],
            saga_id=row["saga_id"],
            state=row["state"],
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            available_at=maybe_utc(row["available_at"]),
            lease_until=maybe_utc(row["lease_until"]),
            last_error=row["last_error"],
            error_class=row["error_class"],
            created_at=as_utc(row["created_at"]),
            finished_at=maybe_utc(row["finished_at"]),
            payload=None if row["payload"] is None else load_json(row["payload"]),
        )

    def to_json(self) -> dict[str, Any]:
        """The job as plain data."""
        return {
            "id": self.id,
            "queue": self.queue,
            "kind": self.kind,
            "saga_id": self.saga_id,
            "state": self.state,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "available_at": iso(self.available_at),
            "lease_until": iso(self.lease_until),
            "last_error": self.last_error,
            "error_class": self.error_class,
            "created_at": iso(self.created_at),
            "finished_at": iso(self.finished_at),
            "payload": self.payload,
        }


@dataclass(frozen=True, slots=True)
class Accepted:
    """A job accepted (``created``) or found again under the same id."""

    job: JobInfo
    created: bool


@dataclass(frozen=True, slots=True)
class Done:
    """A completion to record: the claimed job and its result (``None``: no result row)."""

    job: Job
    result: Any = field(default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimSpec:
    """What a worker claims: job kinds, how many, for how long, with or without a rescue."""

    kinds_json: str
    batch: int
    lease_seconds: float
    rescue: bool = False
    # Nothing claimed: look for expired leases too before answering "none",
    # in the same transaction (a worker in burst mode must not stop while a
    # dead worker's jobs wait).
    rescue_if_idle: bool = False

    @classmethod
    def of(
        cls,
        kinds: Iterable[str],
        *,
        batch: int,
        lease_seconds: float,
        rescue: bool = False,
        rescue_if_idle: bool = False,
    ) -> ClaimSpec:
        """The spec for ``kinds``."""
        return cls(
            kinds_json=json.dumps(sorted(set(kinds))),
            batch=batch,
            lease_seconds=lease_seconds,
            rescue=rescue,
            rescue_if_idle=rescue_if_idle,
        )


@dataclass(frozen=True, slots=True)
class Claimed:
    """The jobs one claim took; when it took none, how long until one is due."""

    jobs: list[Job]
    next_due_in: float | None = None
    # Jobs whose last attempt's lease ran out, dead-lettered by this claim.
    dead_lettered: int = 0
