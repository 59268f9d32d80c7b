"""
The durable job queue: acceptance, claims under leases, fenced writes.

A claim is one short transaction that gives each job a lease from the
database clock under a fresh random token.  Every later write about the job
(extend, complete, retry, fail, release) names that token and succeeds only
while the lease is unexpired, checked after the row is locked; zero rows
means the worker lost its right and must report no success.  Completion
moves the job to ``job_archive`` with its result in the same transaction.
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import TYPE_CHECKING, Any, Final, TypeVar

from saga.core.logs import get_logger
from saga.core.queue.jobs import NewJob, enqueue_in, enqueue_many_in
from saga.core.queue.values import Accepted, Claimed, ClaimSpec, Done, Job, JobInfo
from saga.exceptions import LeaseLost, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from saga.core.store.db import Database, Tx

T = TypeVar("T")
log = get_logger(__name__)

DEFAULT_LEASE_SECONDS: Final = 30.0


class Queue:
    """Accept, claim and settle jobs in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- acceptance --------------------------------------------------------------

    def enqueue(self, job: NewJob) -> Accepted:
        """
        Accept ``job`` under its caller-chosen id.

        The same id with the same kind and payload returns the existing job
        and its state, live or finished (``created=False``); other content
        raises :class:`~saga.exceptions.JobConflict` and changes nothing.
        """

        def work(tx: Tx) -> Accepted:
            created = enqueue_in(tx, job)
            return Accepted(job=get_job_in(tx, job.id), created=created)

        return self.db.transaction(work)

    def enqueue_many(self, jobs: Sequence[NewJob], *, chunk: int = 1000) -> list[bool]:
        """
        Accept many jobs, ``chunk`` per transaction; per job, whether it is new.

        Each chunk is all-or-nothing: a conflicting id in it raises
        :class:`~saga.exceptions.JobConflict` and accepts none of that chunk.
        """
        created: list[bool] = []
        for start in range(0, len(jobs), chunk):
            part = jobs[start : start + chunk]
            created += self.db.transaction(functools.partial(enqueue_many_in, jobs=part))
        return created

    def get(self, job_id: str) -> JobInfo:
        """One job, live or finished; :class:`NotFound` if the id is unknown."""
        return self.db.transaction(lambda tx: get_job_in(tx, job_id), write=False)

    def result(self, job_id: str) -> Any:
        """The result a completed job stored (``None`` if it stored none)."""
        row = self.db.transaction(lambda tx: tx.one("get_job_result", job_id=job_id), write=False)
        return None if row is None else _load_any(row["result"])

    # -- claims ------------------------------------------------------------------

    def claim(
        self,
        kinds: Iterable[str],
        *,
        batch: int,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        rescue: bool = True,
    ) -> list[Job]:
        """
        Claim due jobs of ``kinds`` under one fresh lease token.

        With ``rescue`` (the default), jobs whose worker died holding them
        (expired leases) are taken over first: up to ``batch`` at once the
        first time their lease expires (a killed worker's whole batch comes
        back together), alone after that (so a job that kills its worker
        cannot take a batch down with it); one that expired on its last
        attempt is dead-lettered instead (``crashed``).  Otherwise up to
        ``batch`` due pending jobs are claimed together.  A worker rescues
        every few seconds rather than on every claim: expired leases appear a
        lease after a crash, not sooner.
        """
        spec = ClaimSpec.of(kinds, batch=batch, lease_seconds=lease_seconds, rescue=rescue)
        return self.db.transaction(lambda tx: claim_in(tx, spec).jobs)

    def next_due_in(self, kinds: Iterable[str]) -> float | None:
        """Seconds until the next pending job of ``kinds`` is due; ``None`` if none is pending."""
        value = self.db.transaction(
            lambda tx: tx.scalar("next_due_in", kinds=json.dumps(sorted(set(kinds)))),
            write=False,
        )
        return None if value is None else float(value)

    # -- fenced writes -----------------------------------------------------------

    def complete(self, done: Sequence[Done]) -> set[str]:
        """
        Mark jobs done, with their results, in one transaction.

        Returns the ids that were still owned: a job whose lease expired or
        passed to another worker is left alone (and is not in the set).
        """
        if not done:
            return set()
        return self.db.transaction(lambda tx: complete_in(tx, done))

    def complete_then_claim(
        self, done: Sequence[Done], spec: ClaimSpec
    ) -> tuple[set[str], Claimed]:
        """
        :meth:`complete` ``done`` and claim the next jobs in the same transaction.

        A busy worker pays one transaction per batch instead of two; a job the
        completion queued (the saga's next step) can be the next one claimed.
        """

        def work(tx: Tx) -> tuple[set[str], Claimed]:
            owned = complete_in(tx, done) if done else set()
            return owned, claim_in(tx, spec)

        return self.db.transaction(work)

    def complete_with(self, job: Job, apply: Callable[[Tx], T]) -> tuple[bool, T | None]:
        """
        Run ``apply`` and complete ``job`` in one fenced transaction.

        The lease is checked last, when the job is archived (see
        :func:`~saga.core.queue.fencing.fenced`): if it is no longer owned
        then, the transaction rolls back and ``(False, None)`` comes back, so
        a stale worker changes nothing.  ``apply``'s return value is stored as
        the job's result.
        """
        owned, value, _ = self.complete_with_then_claim(job, apply, None)
        return owned, value

    def complete_with_then_claim(
        self, job: Job, apply: Callable[[Tx], T], spec: ClaimSpec | None
    ) -> tuple[bool, T | None, Claimed | None]:
        """
        :meth:`complete_with`, then (with ``spec``) claim the next jobs in the same transaction.

        The claim comes after the fence: the completed job's row is locked and
        deleted by then, so nothing can reclaim it before the commit, and a
        refused fence rolls the claim back with everything else.
        """

        def work(tx: Tx) -> tuple[T, Claimed | None]:
            tx.lease = (job.id, job.token)
            value = apply(tx)
            if not complete_in(tx, [Done(job, value)]):
                raise LeaseLost(job_id=job.id)
            tx.lease = None
            return value, None if spec is None else claim_in(tx, spec)

        try:
            value, claimed = self.db.transaction(work)
        except LeaseLost:
            return False, None, None
        return True, value, claimed

    def retry(self, job: Job, *, delay: float, error: str, error_class: str) -> bool:
        """
        Give the job back for attempt ``job.attempt + 1`` after ``delay`` seconds (fenced).

        A job on its last attempt cannot be retried: :meth:`fail` it instead.
        """
        if job.last_attempt:
            msg = f"job {job.id} is on its last attempt ({job.attempt}/{job.max_attempts})"
            raise ValueError(msg)
        row = self.db.transaction(
            lambda tx: tx.one(
                "retry_job",
                id=job.id,
                token=job.token,
                delay_seconds=max(0.0, delay),
                error=_clip(error),
                error_class=error_class,
            )
        )
        return row is not None

    def fail(self, job: Job, *, error: str, error_class: str) -> bool:
        """Dead-letter the job with its reason (fenced)."""
        row = self.db.transaction(
            lambda tx: tx.one(
                "fail_job",
                id=job.id,
                token=job.token,
                error=_clip(error),
                error_class=error_class,
            )
        )
        return row is not None

    def extend(self, jobs: Sequence[Job], *, lease_seconds: float) -> set[str]:
        """Push the leases of jobs further (fenced); the ids still owned."""
        return self._by_token("extend_leases", jobs, lease_seconds=lease_seconds)

    def release(self, jobs: Sequence[Job]) -> set[str]:
        """
        Hand claimed jobs that never started back, as if never claimed (fenced).

        They are due again at once: the workers are woken for them (the
        transaction that claimed them may have told nobody about them).
        """
        return self._by_token("release_jobs", jobs, wake=True)

    def _by_token(
        self, query: str, jobs: Sequence[Job], *, wake: bool = False, **params: Any
    ) -> set[str]:
        by_token: dict[str, list[str]] = {}
        for job in jobs:
            by_token.setdefault(job.token, []).append(job.id)
        if not by_token:
            return set()
        queues = {job.id: job.queue for job in jobs}

        def work(tx: Tx) -> set[str]:
            owned: set[str] = set()
            for token, ids in by_token.items():
                rows = tx.all(query, ids=json.dumps(ids), token=token, **params)
                owned.update(row["id"] for row in rows)
            if wake:
                for job_id in owned:
                    tx.wake(queues[job_id], [job_id])
            return owned

        return self.db.transaction(work)


def claim_in(tx: Tx, spec: ClaimSpec) -> Claimed:
    """:meth:`Queue.claim` inside ``tx``, with the wait until the next due job when none is."""
    token = uuid.uuid4().hex
    rescued, dead = (
        _rescue(tx, spec.kinds_json, token, spec.lease_seconds, spec.batch)
        if spec.rescue
        else ([], 0)
    )
    if rescued:
        return Claimed(rescued, dead_lettered=dead)
    rows = tx.all(
        "claim_jobs",
        kinds=spec.kinds_json,
        token=token,
        lease_seconds=spec.lease_seconds,
        batch=spec.batch,
    )
    if rows:
        tx.claimed(row["id"] for row in rows)
        return Claimed([Job.from_claim(row, token) for row in rows], dead_lettered=dead)
    if spec.rescue_if_idle and not spec.rescue:
        rescued, dead = _rescue(tx, spec.kinds_json, token, spec.lease_seconds, spec.batch)
    if rescued:
        return Claimed(rescued, dead_lettered=dead)
    due = tx.scalar("next_due_in", kinds=spec.kinds_json)
    return Claimed([], None if due is None else float(due), dead_lettered=dead)


def _rescue(
    tx: Tx, kinds_json: str, token: str, lease_seconds: float, batch: int
) -> tuple[list[Job], int]:
    """
    Dead-letter jobs whose last attempt's lease ran out; take over the other expired ones.

    The jobs taken over, and how many were dead-lettered.
    """
    dead = tx.all("dead_letter_exhausted_leases", kinds=kinds_json, limit=100)
    for row in dead:
        log.warning(
            "job_dead_lettered",
            job_id=row["id"],
            kind=row["kind"],
            attempts=row["attempts"],
            error_class="crashed",
        )
    params = {"kinds": kinds_json, "token": token, "lease_seconds": lease_seconds}
    rows = tx.all("claim_expired_jobs", first_time=True, batch=batch, **params)
    if not rows:
        rows = tx.all("claim_expired_jobs", first_time=False, batch=1, **params)
    if rows:
        log.info("leases_rescued", jobs=len(rows))
    return [Job.from_claim(row, token) for row in rows], len(dead)


def get_job_in(tx: Tx, job_id: str) -> JobInfo:
    """One job read inside ``tx``."""
    row = tx.one("get_job", id=job_id)
    if row is None:
        raise NotFound(kind="job", key=job_id)
    return JobInfo.from_row(row)


def complete_in(tx: Tx, done: Sequence[Done]) -> set[str]:
    """:meth:`Queue.complete` inside ``tx``: fence, archive with the results, delete."""
    items = json.dumps(
        [{"id": item.job.id, "token": item.job.token, "result": item.result} for item in done]
    )
    return {row["id"] for row in tx.all("archive_owned_jobs", items=items)}


def _clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _load_any(value: object) -> Any:
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value
