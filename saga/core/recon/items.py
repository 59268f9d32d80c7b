"""
The reconciliation queue: unknown outcomes, owned, checked, escalated, resolved.

"Unknown" is not "failed".  When a saga enters ``needs_reconciliation`` an
*outcome* item opens in the same transaction, owned by the automatic checker,
with the evidence of what was sent and what came back; the saga stays there
until the item is resolved.  A *review* item holds no saga: it is evidence
for a human (an event that contradicts the provider).

Every item has a deadline: when it passes unresolved, the item is escalated
to the operators and marked overdue (a job due at the deadline does it, and
``saga verify`` reports an overdue item nobody escalated).  A resolution,
automatic or by an operator with a reason, moves the saga through a
declared transition only; an operator's decision is first checked against
fresh evidence by the application's :class:`Judge`, and is refused when the
item changed since it was read or when the evidence contradicts it, audited
either way.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from saga.codec import as_utc, dump_json, iso, load_json, maybe_utc
from saga.core.logs import get_logger
from saga.core.queue.jobs import NewJob, enqueue_in
from saga.core.queue.kinds import Apply, JobKind
from saga.exceptions import ConflictError, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga.core.queue.values import Job
    from saga.core.sagas.transitions import Change, Context
    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord

log = get_logger(__name__)

CHECKER: Final = "checker"
OPERATORS: Final = "operators"
RECON_STATE: Final = "needs_reconciliation"
RECON_QUEUE: Final = "reconciliation"
DEADLINE_KIND: Final = "recon.deadline"
REVIEWED: Final = "reviewed"


class StaleDecision(ConflictError):
    """The item changed since the decision was made on it; nothing was applied."""

    def __init__(self, *, item_id: str, expected: int, actual: int | None, status: str) -> None:
        self.item_id = item_id
        self.expected = expected
        self.actual = actual
        self.status = status
        if status != "open":
            message = (
                f"reconciliation item {item_id} is already {status} (version {actual}); "
                "nothing was applied"
            )
        else:
            message = (
                f"reconciliation item {item_id} is at version {actual}, not {expected}: "
                "it changed since it was read; nothing was applied"
            )
        super().__init__(message)
        self._kwargs = {
            "item_id": item_id,
            "expected": expected,
            "actual": actual,
            "status": status,
        }


class ContradictedDecision(ConflictError):
    """The evidence contradicts the decision; nothing was applied."""

    def __init__(self, *, item_id: str, outcome: str, why: str) -> None:
        self.item_id = item_id
        self.outcome = outcome
        self.why = why
        super().__init__(f"refusing {outcome!r} for item {item_id}: {why}")
        self._kwargs = {"item_id": item_id, "outcome": outcome, "why": why}


def _one_subject(before: SagaRecord) -> str:
    del before
    return "outcome"


def _event_is_the_reason(change: Change, after: SagaRecord) -> str:
    del after
    return change.transition.event


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconPolicy:
    """
    An application's reconciliation: what an unknown outcome is, how it is worked.

    Args:
        state: the saga state that means "outcome unknown"; entering it opens
            an outcome item, leaving it resolves the item.
        check_kind: the job kind of the automatic checker (the application's).
        outcomes: the operators' outcomes and the saga event each fires.
        subject: what the item is about, from the saga before it entered ``state``.
        reason: why, from the transition that entered ``state``.
        human_reasons: reasons no automatic check can settle (the operators own
            those items from the start).
        first_check_seconds, max_attempts, backoff_base, backoff_cap: the checker's
            schedule; review_seconds: the next look of a human-owned item;
            deadline_seconds: when an unresolved item becomes overdue.
        amount: how an operator's amount of money moved outside the provider
            (``--amount``, the console's field) becomes minor units, from the
            saga (its currency); ``None``: the application takes no amounts.
        judge: builds, for an engine, the :class:`Judge` that checks operators'
            decisions against fresh evidence (``judge=EnvelopeJudge``).  A
            policy with outcomes names its judge, or says ``unchecked=True``.
        unchecked: operators' decisions are applied as given, unchecked
            (``saga recon resolve`` says so, and the audit records it).
        hints: when each outcome fits, shown beside it to operators: by outcome,
            or by ``"outcome:reason"`` for an item's reason of its own.

    An application with several saga kinds gives one policy per kind
    (``Application(recon={"order": …, "payout": …})``).

    """

    state: str = RECON_STATE
    check_kind: str = "recon.check"
    outcomes: Mapping[str, str] = field(default_factory=dict)
    subject: Callable[[SagaRecord], str] = _one_subject
    reason: Callable[[Change, SagaRecord], str] = _event_is_the_reason
    human_reasons: frozenset[str] = frozenset()
    first_check_seconds: float = 2.0
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_cap: float = 60.0
    review_seconds: float = 3600.0
    deadline_seconds: float = 24 * 3600.0
    amount: Callable[[SagaRecord, str], int] | None = None
    judge: Callable[[Context], Judge] | None = None
    unchecked: bool = False
    hints: Mapping[str, str] = field(default_factory=dict)

    def hint(self, outcome: str, reason: str) -> str:
        """When ``outcome`` fits an item of ``reason`` (``""`` if the policy does not say)."""
        found = self.hints.get(f"{outcome}:{reason}") or self.hints.get(outcome)
        if found is None and outcome == REVIEWED:
            return "only for review items (evidence put before you, no saga held): you have read it"
        return found or ""

    def next_check(self, attempts: int) -> float:
        """Seconds until the check after ``attempts`` checks (exponential, capped)."""
        return min(self.backoff_cap, self.backoff_base * 2.0 ** max(0, attempts - 1))

    def outcome_of(self, event: str) -> str:
        """The operators' outcome a saga event stands for (the event itself if none)."""
        return next((o for o, e in self.outcomes.items() if e == event), event)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconItem:
    """One reconciliation item."""

    id: str
    saga_id: str
    kind: str
    status: str
    subject: str
    reason: str
    evidence: dict[str, Any]
    owner: str
    next_check_at: datetime | None
    attempts: int
    max_attempts: int
    deadline: datetime
    escalated_at: datetime | None
    overdue_at: datetime | None
    version: int
    opened_at: datetime
    resolved_at: datetime | None
    resolution: str | None
    resolved_by: str | None
    resolution_reason: str | None

    @classmethod
    def from_row(cls, row: RowMapping) -> ReconItem:
        """Build it from a ``recon_items`` row."""
        return cls(
            id=row["id"],
            saga_id=row["saga_id"],
            kind=row["kind"],
            status=row["status"],
            subject=row["subject"],
            reason=row["reason"],
            evidence=load_json(row["evidence"]),
            owner=row["owner"],
            next_check_at=maybe_utc(row["next_check_at"]),
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            deadline=as_utc(row["deadline"]),
            escalated_at=maybe_utc(row["escalated_at"]),
            overdue_at=maybe_utc(row["overdue_at"]),
            version=int(row["version"]),
            opened_at=as_utc(row["opened_at"]),
            resolved_at=maybe_utc(row["resolved_at"]),
            resolution=row["resolution"],
            resolved_by=row["resolved_by"],
            resolution_reason=row["resolution_reason"],
        )

    @property
    def latest_reading(self) -> str | None:
        """What the outside world said last (``paid``, ``not_paid``, ``refunded``…), if asked."""
        observations = self.evidence.get("observations") or []
        for observation in reversed(observations):
            reading = observation.get("reading")
            if reading not in (None, "unknown"):
                return str(reading)
        return None

    def to_json(self) -> dict[str, Any]:
        """The contract's reconciliation item, plus its kind, subject, version and resolution."""
        return {
            "id": self.id,
            "saga_id": self.saga_id,
            "status": self.status,
            "reason": self.reason,
            "evidence": self.evidence,
            "owner": self.owner,
            "next_check_at": iso(self.next_check_at),
            "attempts": self.attempts,
            "deadline": iso(self.deadline),
            "kind": self.kind,
            "subject": self.subject,
            "max_attempts": self.max_attempts,
            "escalated_at": iso(self.escalated_at),
            "overdue": self.overdue_at is not None,
            "overdue_at": iso(self.overdue_at),
            "version": self.version,
            "opened_at": iso(self.opened_at),
            "resolved_at": iso(self.resolved_at),
            "resolution": self.resolution,
            "resolved_by": self.resolved_by,
            "resolution_reason": self.resolution_reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """An operator's decision about an outcome item, as given on the command line."""

    item: ReconItem
    outcome: str
    operator: str
    reason: str
    external_ref: str | None = None
    amount_minor: int | None = None

    @property
    def actor(self) -> str:
        """Who decides, as the audit trail names them."""
        return f"operator:{self.operator}"


@runtime_checkable
class Observation(Protocol):
    """
    What a :class:`Judge` saw when it asked the outside world again.

    ``to_json()`` is recorded with the decision (the resolving event's
    ``observation``) and shown to operators; a judge's ``observe`` returns
    an object that has it (checked when an engine opens the application).
    """

    def to_json(self) -> dict[str, Any]:
        """The observation as evidence (plain data)."""


class Judge(Protocol):
    """
    How an application checks operators' decisions against fresh evidence.

    ``observe`` runs outside any transaction and asks the outside world (the
    provider) again; ``check`` runs in the decision's transaction,
    records what was seen, and raises :class:`ContradictedDecision` when the
    evidence contradicts the decision.
    """

    def observe(self, decision: Decision) -> Observation:
        """Ask the outside world about the item (no transaction is open)."""

    def check(self, tx: Tx, decision: Decision, observation: Observation) -> None:
        """Record what was seen; refuse a decision the evidence contradicts."""


def event_log(tx: Tx, item_id: str, actor: str, action: str, **detail: Any) -> None:
    """Append one audit row for an item."""
    tx.run(
        "insert_recon_event", item_id=item_id, actor=actor, action=action, detail=dump_json(detail)
    )


class ReconHook:
    """Opens an item when a saga enters reconciliation, closes it when it leaves."""

    def __init__(self, policy: ReconPolicy | None = None) -> None:
        self.policy = policy or ReconPolicy()

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do: a new saga is not in reconciliation."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Open or close the saga's item in the transition's own transaction."""
        state = self.policy.state
        if after.state == state and before.state != state:
            self._open(tx, before, after, change)
        elif before.state == state and after.state != state:
            self._close(tx, after, change)

    def _open(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        subject = self.policy.subject(before)
        reason = self.policy.reason(change, after)
        human = reason in self.policy.human_reasons
        evidence = {
            "opened_by": {
                "event": change.transition.event,
                "actor": change.actor,
                "cause": change.cause,
                "payload": dict(change.payload),
                "from_state": before.state,
            },
            "expected": {
                "amount_minor": after.data.get("amount_minor"),
                "currency": after.data.get("currency"),
            },
            "observations": [],
        }
        item = insert_item(
            tx,
            saga_id=after.id,
            kind="outcome",
            subject=subject,
            reason=reason,
            evidence=evidence,
            owner=OPERATORS if human else CHECKER,
            policy=self.policy,
            actor=change.actor,
        )
        if not human:
            schedule_check(tx, item, self.policy)

    def _close(self, tx: Tx, after: SagaRecord, change: Change) -> None:
        row = tx.one("open_recon_item_of_saga", saga_id=after.id)
        if row is None:
            return
        item = ReconItem.from_row(row)
        expected = change.payload.get("item_version", item.version)
        outcome = self.policy.outcome_of(change.transition.event)
        reason = str(change.payload.get("reason") or change.cause or outcome)
        close_item(
            tx, item, expected=int(expected), outcome=outcome, actor=change.actor, reason=reason
        )
        event_log(
            tx,
            item.id,
            change.actor,
            "resolved",
            outcome=outcome,
            reason=reason,
            saga_state=after.state,
        )


def insert_item(
    tx: Tx,
    *,
    saga_id: str,
    kind: str,
    subject: str,
    reason: str,
    evidence: Mapping[str, Any],
    owner: str,
    policy: ReconPolicy,
    actor: str,
) -> ReconItem:
    """Open an item, audited, with its deadline job; a human-owned one is escalated at once."""
    human = owner != CHECKER
    row = tx.one(
        "insert_recon_item",
        id=f"rec_{uuid.uuid4().hex[:20]}",
        saga_id=saga_id,
        kind=kind,
        subject=subject,
        reason=reason,
        evidence=dump_json(dict(evidence)),
        owner=owner,
        next_check_seconds=policy.review_seconds if human else policy.first_check_seconds,
        max_attempts=policy.max_attempts,
        deadline_seconds=policy.deadline_seconds,
        escalated=human,
    )
    if row is None:  # pragma: no cover - INSERT … RETURNING returns the row
        raise NotFound(kind="reconciliation item", key=saga_id)
    item = ReconItem.from_row(row)
    event_log(tx, item.id, actor, "opened", reason=reason, subject=subject, owner=owner, kind=kind)
    enqueue_in(
        tx,
        NewJob(
            id=f"recon-deadline:{item.id}",
            queue=RECON_QUEUE,
            kind=DEADLINE_KIND,
            payload={"item_id": item.id},
            saga_id=saga_id,
            available_at=item.deadline,
            max_attempts=5,
        ),
    )
    return item


def close_item(
    tx: Tx, item: ReconItem, *, expected: int, outcome: str, actor: str, reason: str
) -> None:
    """Compare-and-set ``item`` to resolved; :class:`StaleDecision` if it moved on."""
    if (
        tx.one(
            "resolve_recon_item",
            id=item.id,
            version=expected,
            resolution=outcome,
            resolved_by=actor,
            resolution_reason=reason,
        )
        is None
    ):
        raise StaleDecision(
            item_id=item.id, expected=expected, actual=item.version, status=item.status
        )
    # Its deadline no longer matters: forget the job that would escalate it.
    tx.run("drop_pending_job", id=f"recon-deadline:{item.id}")


def open_review(
    tx: Tx,
    saga_id: str,
    *,
    subject: str,
    reason: str,
    evidence: Mapping[str, Any],
    actor: str,
    policy: ReconPolicy | None = None,
) -> str:
    """
    Put evidence in front of a human without holding the saga; the item's id.

    If the saga already has an open item, the evidence joins it (one place
    to look); otherwise a review item opens, owned by the operators.
    """
    row = tx.one("any_open_recon_item_of_saga", saga_id=saga_id)
    if row is not None:
        item = ReconItem.from_row(row)
        merged = dict(item.evidence)
        merged["contradictions"] = [*merged.get("contradictions", []), dict(evidence)]
        tx.run("set_recon_evidence", id=item.id, evidence=json.dumps(merged, sort_keys=True))
        event_log(tx, item.id, actor, "evidence_added", reason=reason)
        return item.id
    item = insert_item(
        tx,
        saga_id=saga_id,
        kind="review",
        subject=subject,
        reason=reason,
        evidence={"contradictions": [dict(evidence)], "observations": []},
        owner=OPERATORS,
        policy=policy or ReconPolicy(),
        actor=actor,
    )
    return item.id


def schedule_check(tx: Tx, item: ReconItem, policy: ReconPolicy) -> None:
    """Queue the checker's next look at ``item``, due at its ``next_check_at``."""
    enqueue_in(
        tx,
        NewJob(
            id=f"recon:{item.id}:{item.attempts}",
            queue=RECON_QUEUE,
            kind=policy.check_kind,
            payload={"item_id": item.id, "attempts": item.attempts},
            saga_id=item.saga_id,
            available_at=item.next_check_at,
            max_attempts=5,
        ),
    )


def get_item_in(tx: Tx, item_id: str, *, lock: bool = False) -> ReconItem:
    """One item, read (or locked) inside ``tx``."""
    row = tx.one("lock_recon_item" if lock else "get_recon_item", id=item_id)
    if row is None:
        raise NotFound(kind="reconciliation item", key=item_id)
    return ReconItem.from_row(row)


def escalate_if_overdue(tx: Tx, item_id: str) -> dict[str, Any]:
    """Escalate an item whose deadline passed unresolved (once); what happened."""
    row = tx.one("escalate_overdue_item", id=item_id)
    if row is None:
        return {"skipped": "resolved, already overdue, or not yet due"}
    event_log(tx, item_id, "engine", "overdue", deadline=iso(as_utc(row["deadline"])))
    log.warning(
        "recon_item_overdue",
        item_id=item_id,
        saga_id=row["saga_id"],
        reason=row["reason"],
        deadline=iso(as_utc(row["deadline"])),
        owner=OPERATORS,
    )
    return {"overdue": item_id}


def deadline_kind() -> JobKind:
    """The job kind that escalates items whose deadline passed unresolved."""

    def handle(job: Job) -> Apply[dict[str, Any]]:
        item_id = str(job.payload["item_id"])
        return Apply(lambda tx: escalate_if_overdue(tx, item_id))

    return JobKind(DEADLINE_KIND, handle, queue=RECON_QUEUE, max_attempts=5)


def record_observation(item: ReconItem, observation: Mapping[str, Any]) -> str:
    """The item's evidence with one more observation, as JSON."""
    evidence = dict(item.evidence)
    evidence["observations"] = [*evidence.get("observations", []), dict(observation)]
    return json.dumps(evidence, sort_keys=True)
