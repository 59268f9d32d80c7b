"""
The reconciliation items' life in SQL: opened, checked, escalated, closed.

:class:`ReconHook` opens a saga's outcome item in the transaction that
enters its policy's state and closes it in the one that leaves it;
:func:`open_review` puts evidence before a human without holding a saga;
a job due at each item's deadline escalates it (:func:`deadline_kind`).
Every change is audited (:func:`event_log`).  Apart from
:mod:`saga.core.recon.items`, the values these write and read.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from saga.codec import as_utc, dump_json, iso
from saga.core.logs import get_logger
from saga.core.queue.jobs import NewJob, enqueue_in
from saga.core.queue.kinds import Apply, JobKind
from saga.core.recon.items import (
    CHECKER,
    DEADLINE_KIND,
    OPERATORS,
    RECON_QUEUE,
    ReconItem,
    ReconPolicy,
    StaleDecision,
)
from saga.exceptions import NotFound

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga.core.queue.values import Job
    from saga.core.sagas.changes import Change
    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord

log = get_logger(__name__)


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
