"""
``saga explain ID``: why a saga is where it is, and what happens next.

An operator's first question about a saga that does not move, answered from
the engine's own rows and the database clock, without reading SQL: the
saga is final; or it waits for an operator (an open reconciliation item,
with its next check and deadline); or work is due or running (a step, with
its attempt, next run, last error and lease); or a timer will fire (when);
or something gave up (a dead letter, a dead-lettered event); or nothing
will ever move it (stuck), with the likely cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga.codec import as_utc, iso, maybe_utc
from saga.core.queue.jobs import TIMER_KIND

if TYPE_CHECKING:
    from datetime import datetime

    from saga.core.queue.values import JobInfo
    from saga.core.sagas.instances import Instance, Instances


@dataclass(frozen=True, slots=True)
class Explanation:
    """A saga's verdict (one word), the reasons behind it, and what comes next, in time order."""

    saga_id: str
    kind: str
    state: str
    verdict: str
    #: The definition version the saga runs on.
    definition_version: int
    reasons: tuple[str, ...]
    upcoming: tuple[tuple[datetime, str], ...] = field(default=())
    events: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The explanation as plain data."""
        return {
            "id": self.saga_id,
            "kind": self.kind,
            "definition_version": self.definition_version,
            "state": self.state,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "next": [{"at": iso(at), "what": what} for at, what in self.upcoming],
            "events": dict(self.events),
        }


def explain(instances: Instances, saga_id: str) -> Explanation:
    """Explain saga ``saga_id`` (:class:`~saga.exceptions.NotFound` if there is none)."""
    instance = instances.show(saga_id)

    def clock_and_events(tx: Any) -> tuple[datetime, dict[str, int]]:
        counts = tx.one("outbox_counts_of_saga", saga_id=saga_id) or {}
        events = {key: int(counts.get(key) or 0) for key in ("unpublished", "published", "dead")}
        return as_utc(tx.scalar("db_now")), events

    now, events = instances.db.transaction(clock_and_events, write=False)
    return _explain(instance, now, events)


def _explain(instance: Instance, now: datetime, events: dict[str, int]) -> Explanation:
    saga = instance.saga
    reasons: list[str] = []
    upcoming: list[tuple[datetime, str]] = []
    dead = [job for job in instance.jobs if job.state == "failed"]
    live = [job for job in instance.jobs if job.state != "failed"]
    for job in dead:
        reasons.append(
            f"dead letter {job.id} ({job.kind}, {job.error_class}) after {job.attempts} "
            f"attempt(s): {(job.last_error or '')[:200]}; replay it with saga dlq replay --job"
        )
    if events["dead"]:
        reasons.append(
            f"{events['dead']} event(s) dead-lettered by the relay; see saga outbox list --dead"
        )
    for item in instance.items:
        reasons.append(
            f"reconciliation item {item.id} ({item.reason}) is open, owned by {item.owner}, "
            f"attempt {item.attempts} of {item.max_attempts}"
        )
        if item.next_check_at is not None and item.owner == "checker":
            upcoming.append((item.next_check_at, f"the checker looks at item {item.id} again"))
        upcoming.append((item.deadline, f"item {item.id} is escalated if still open"))
    for job in live:
        upcoming.append(_job_next(job, now, saga.deadline_event))
        if job.last_error and job.state == "pending":
            reasons.append(
                f"{job.kind} failed attempt {job.attempts} of {job.max_attempts} "
                f"({job.last_error[:200]}); retried with backoff"
            )
    if events["unpublished"]:
        reasons.append(f"{events['unpublished']} event(s) wait in the outbox for the relay")
    verdict = _verdict(instance, live, dead, events)
    if verdict == "stuck":
        reasons.append(
            "no job, timer or open item will move it: its state has no timeout and no action "
            "left to run; only an event (a message, an operator's saga instances fire) can"
        )
    if verdict == "terminal":
        reasons.insert(0, f"{saga.state} is a final state of {saga.kind}")
    return Explanation(
        saga_id=saga.id,
        kind=saga.kind,
        state=saga.state,
        verdict=verdict,
        definition_version=saga.definition_version,
        reasons=tuple(reasons),
        upcoming=tuple(sorted(upcoming, key=lambda entry: entry[0])),
        events=events,
    )


def _verdict(
    instance: Instance, live: list[JobInfo], dead: list[JobInfo], events: dict[str, int]
) -> str:
    # The first that holds, most urgent first.
    rules = (
        (bool(dead or events["dead"]), "gave_up"),
        (bool(instance.items), "reconciliation"),
        (any(job.state == "running" for job in live), "running"),
        (any(job.kind != TIMER_KIND for job in live), "work_pending"),
        (bool(live), "waiting_for_timer"),
        (instance.terminal, "terminal"),
    )
    return next((verdict for holds, verdict in rules if holds), "stuck")


def _job_next(job: JobInfo, now: datetime, deadline_event: str | None) -> tuple[datetime, str]:
    if job.state == "running":
        until = maybe_utc(job.lease_until) or now
        return until, f"{job.kind} is running (attempt {job.attempts}); its lease ends"
    due = maybe_utc(job.available_at) or now
    if job.kind == TIMER_KIND:
        when = "is due now" if due <= now else "fires"
        return due, f"the timer {when}: {deadline_event or 'its deadline event'}"
    if due <= now:
        return due, f"{job.kind} is due now (attempt {job.attempts + 1})"
    return due, f"{job.kind} runs (attempt {job.attempts + 1})"
