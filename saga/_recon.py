"""
The reconciliation queue: unknown outcomes, owned, checked, escalated, resolved.

"Unknown" is not "failed".  When a purchase enters ``needs_reconciliation``
an item opens in the same transaction, owned by the automatic checker, with
the evidence of what was sent and what came back.  The checker asks the
provider again with backoff; when its attempts run out the item escalates to
the operators.  A resolution, automatic or by an operator with a reason,
moves the saga through a declared transition only, is refused when the item
changed since it was read or when the evidence contradicts it, and is
audited either way.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from saga import _validation
from saga._codec import as_utc, dump_json, iso, load_json, maybe_utc
from saga._jobs import NewJob, enqueue_in
from saga._sagas import Change, fire_in
from saga.exceptions import ConflictError, InvalidInput, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga._db import Database, Tx
    from saga._records import SagaRecord
    from saga._sagas import Registry

CHECKER: Final = "checker"
OPERATORS: Final = "operators"
RECON_STATE: Final = "needs_reconciliation"
RECONCILE_KIND: Final = "purchase.reconcile"
Outcome = Literal["paid", "not_paid", "refund", "refunded"]
OPERATOR_OUTCOMES: Final = ("paid", "not_paid", "refund", "refunded")
_EVENT_OF: Final = {
    "paid": "resolve_paid",
    "not_paid": "resolve_not_paid",
    "refund": "resolve_refund",
    "refunded": "resolve_refunded",
}
_OUTCOME_OF: Final = {event: outcome for outcome, event in _EVENT_OF.items()}
# Reasons no automatic check can settle: a human decides from the start.
_HUMAN_REASONS: Final = frozenset({"amount_mismatch", "refund_declined"})


class StaleDecision(ConflictError):
    """The item changed since the decision was made on it; nothing was applied."""

    def __init__(self, *, item_id: str, expected: int, actual: int | None, status: str) -> None:
        self.item_id = item_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"reconciliation item {item_id} is {status} at version {actual}, "
            f"not {expected}: it changed since it was read; nothing was applied"
        )
        self._kwargs = {
            "item_id": item_id,
            "expected": expected,
            "actual": actual,
            "status": status,
        }


class ContradictedDecision(ConflictError):
    """The evidence on the item contradicts the decision; nothing was applied."""

    def __init__(self, *, item_id: str, outcome: str, why: str) -> None:
        self.item_id = item_id
        self.outcome = outcome
        self.why = why
        super().__init__(f"refusing {outcome!r} for item {item_id}: {why}")
        self._kwargs = {"item_id": item_id, "outcome": outcome, "why": why}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconPolicy:
    """How the automatic checker works an item."""

    first_check_seconds: float = 2.0
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_cap: float = 60.0
    review_seconds: float = 3600.0
    deadline_seconds: float = 24 * 3600.0

    def next_check(self, attempts: int) -> float:
        """Seconds until the check after ``attempts`` checks (exponential, capped)."""
        return min(self.backoff_cap, self.backoff_base * 2.0 ** max(0, attempts - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconItem:
    """One reconciliation item."""

    id: str
    saga_id: str
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
            version=int(row["version"]),
            opened_at=as_utc(row["opened_at"]),
            resolved_at=maybe_utc(row["resolved_at"]),
            resolution=row["resolution"],
            resolved_by=row["resolved_by"],
            resolution_reason=row["resolution_reason"],
        )

    @property
    def latest_reading(self) -> str | None:
        """What the provider said last (``paid``, ``not_paid``, ``refunded``…), if asked."""
        observations = self.evidence.get("observations") or []
        for observation in reversed(observations):
            reading = observation.get("reading")
            if reading not in (None, "unknown"):
                return str(reading)
        return None

    def to_json(self) -> dict[str, Any]:
        """The contract's reconciliation item, plus its subject, version and resolution."""
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
            "subject": self.subject,
            "max_attempts": self.max_attempts,
            "escalated_at": iso(self.escalated_at),
            "version": self.version,
            "opened_at": iso(self.opened_at),
            "resolved_at": iso(self.resolved_at),
            "resolution": self.resolution,
            "resolved_by": self.resolved_by,
            "resolution_reason": self.resolution_reason,
        }


def event_log(tx: Tx, item_id: str, actor: str, action: str, **detail: Any) -> None:
    """Append one audit row for an item."""
    tx.run(
        "insert_recon_event", item_id=item_id, actor=actor, action=action, detail=dump_json(detail)
    )


class ReconHook:
    """Opens an item when a purchase enters reconciliation, closes it when it leaves."""

    def __init__(self, policy: ReconPolicy | None = None) -> None:
        self.policy = policy or ReconPolicy()

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do: a new purchase is not in reconciliation."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Open or close the saga's item in the transition's own transaction."""
        if after.state == RECON_STATE and before.state != RECON_STATE:
            self._open(tx, before, after, change)
        elif before.state == RECON_STATE and after.state != RECON_STATE:
            self._close(tx, after, change)

    def _open(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        subject = "refund" if before.state == "refund_pending" else "payment"
        reason = _reason(change, after)
        human = reason in _HUMAN_REASONS
        item_id = f"rec_{uuid.uuid4().hex[:20]}"
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
        first = self.policy.review_seconds if human else self.policy.first_check_seconds
        row = tx.one(
            "insert_recon_item",
            id=item_id,
            saga_id=after.id,
            subject=subject,
            reason=reason,
            evidence=dump_json(evidence),
            owner=OPERATORS if human else CHECKER,
            next_check_seconds=first,
            max_attempts=self.policy.max_attempts,
            deadline_seconds=self.policy.deadline_seconds,
            escalated=human,
        )
        if row is None:  # pragma: no cover - INSERT … RETURNING returns the row
            raise NotFound(kind="reconciliation item", key=item_id)
        item = ReconItem.from_row(row)
        event_log(
            tx, item.id, change.actor, "opened", reason=reason, subject=subject, owner=item.owner
        )
        if not human:
            schedule_check(tx, item)

    def _close(self, tx: Tx, after: SagaRecord, change: Change) -> None:
        row = tx.one("open_recon_item_of_saga", saga_id=after.id)
        if row is None:
            return
        item = ReconItem.from_row(row)
        expected = change.payload.get("item_version", item.version)
        outcome = _OUTCOME_OF.get(change.transition.event, change.transition.event)
        reason = str(change.payload.get("reason") or change.cause or outcome)
        if (
            tx.one(
                "resolve_recon_item",
                id=item.id,
                version=expected,
                resolution=outcome,
                resolved_by=change.actor,
                resolution_reason=reason,
            )
            is None
        ):
            raise StaleDecision(
                item_id=item.id, expected=int(expected), actual=item.version, status=item.status
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
        # The payment's own status keeps what the provider said: a resolution
        # is the operators' decision about the purchase, not a provider answer.


_FIXED_REASONS: Final = {
    "refund_failed": "refund_declined",
    "refund_outcome_unknown": "refund_outcome_unknown",
    "payment_outcome_unknown": "payment_outcome_unknown",
    "refund_overdue": "refund_overdue",
}


def _reason(change: Change, after: SagaRecord) -> str:
    """Why the saga entered reconciliation, from the event that took it there."""
    event = change.transition.event
    payload = change.payload
    if event in _FIXED_REASONS:
        return _FIXED_REASONS[event]
    if event == "hold_expired":
        paid = payload.get("provider_status") == "paid"
        return "amount_mismatch" if paid else "expiry_check_unknown"
    charged = (payload.get("amount_minor"), payload.get("currency"))
    if event == "payment_succeeded" and charged != (
        after.data.get("amount_minor"),
        after.data.get("currency"),
    ):
        return "amount_mismatch"
    return event


def schedule_check(tx: Tx, item: ReconItem) -> None:
    """Queue the checker's next look at ``item``, due at its ``next_check_at``."""
    enqueue_in(
        tx,
        NewJob(
            id=f"recon:{item.id}:{item.attempts}",
            queue="reconciliation",
            kind=RECONCILE_KIND,
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


class Reconciliation:
    """The operators' side of the queue: list, show, assign, resolve."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self.db = db
        self.registry = registry

    def find(
        self, *, status: str | None = "open", owner: str | None = None, limit: int = 100
    ) -> list[ReconItem]:
        """Items, oldest first; ``status=None`` for every item."""
        if status is not None:
            _validation.one_of("status", status, ("open", "resolved"))
        if owner is not None:
            _validation.identifier("owner", owner)
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=10_000)
        rows = self.db.transaction(
            lambda tx: tx.all("list_recon_items", status=status, owner=owner, limit=limit),
            write=False,
        )
        return [ReconItem.from_row(row) for row in rows]

    def show(self, item_id: str) -> tuple[ReconItem, list[dict[str, Any]]]:
        """One item and its audit trail."""
        _validation.identifier("item_id", item_id)

        def work(tx: Tx) -> tuple[ReconItem, list[dict[str, Any]]]:
            item = get_item_in(tx, item_id)
            events = [
                {
                    "actor": r["actor"],
                    "action": r["action"],
                    "detail": load_json(r["detail"]),
                    "at": iso(as_utc(r["at"])),
                }
                for r in tx.all("list_recon_events", item_id=item_id)
            ]
            return item, events

        return self.db.transaction(work, write=False)

    def assign(
        self, item_id: str, *, operator: str, expected_version: int | None = None
    ) -> ReconItem:
        """Give an open item to ``operator``; the checker stops working it."""
        _validation.identifier("item_id", item_id)
        operator = _validation.identifier("operator", operator)

        def work(tx: Tx) -> ReconItem:
            item = get_item_in(tx, item_id, lock=True)
            version = item.version if expected_version is None else expected_version
            if (
                item.status != "open"
                or tx.one("assign_recon_item", id=item_id, version=version, owner=operator) is None
            ):
                raise StaleDecision(
                    item_id=item_id, expected=version, actual=item.version, status=item.status
                )
            event_log(
                tx,
                item_id,
                f"operator:{operator}",
                "assigned",
                owner=operator,
                previous_owner=item.owner,
            )
            return get_item_in(tx, item_id)

        return self._audited(item_id, operator, "assign", work)

    def resolve(
        self,
        item_id: str,
        *,
        outcome: str,
        operator: str,
        reason: str,
        expected_version: int | None = None,
    ) -> ReconItem:
        """
        Resolve an item as ``paid``, ``not_paid`` or ``refund``, for a reason.

        The saga moves through the matching declared transition.  A stale
        ``expected_version``, an item already resolved, or a decision the
        evidence contradicts is refused (:class:`ConflictError`) and audited.
        """
        _validation.identifier("item_id", item_id)
        outcome = _validation.one_of("outcome", outcome, OPERATOR_OUTCOMES)
        operator = _validation.identifier("operator", operator)
        reason = _validation.text("reason", reason)
        actor = f"operator:{operator}"

        def work(tx: Tx) -> ReconItem:
            item = get_item_in(tx, item_id, lock=True)
            version = item.version if expected_version is None else expected_version
            if item.status != "open" or item.version != version:
                raise StaleDecision(
                    item_id=item_id, expected=version, actual=item.version, status=item.status
                )
            payment = tx.one("get_payment", saga_id=item.saga_id)
            contradiction(item, outcome, recorded=None if payment is None else payment["status"])
            fire_in(
                tx,
                self.registry,
                item.saga_id,
                _EVENT_OF[outcome],
                payload={
                    "item_id": item_id,
                    "item_version": version,
                    "outcome": outcome,
                    "reason": reason,
                },
                actor=actor,
                cause=reason,
            )
            return get_item_in(tx, item_id)

        return self._audited(item_id, operator, f"resolve as {outcome}", work)

    def _audited(
        self, item_id: str, operator: str, what: str, work: Callable[[Tx], ReconItem]
    ) -> ReconItem:
        try:
            return self.db.transaction(work)
        except (ConflictError, InvalidInput) as exc:
            # The refused decision rolled back; its audit row commits on its own.
            refusal = functools.partial(
                _log_refusal, item_id=item_id, operator=operator, what=what, why=exc.message
            )
            self.db.transaction(refusal)
            raise


def _log_refusal(tx: Tx, *, item_id: str, operator: str, what: str, why: str) -> None:
    if tx.one("get_recon_item", id=item_id) is not None:
        event_log(tx, item_id, f"operator:{operator}", "refused", decision=what, why=why)


def contradiction(item: ReconItem, outcome: str, *, recorded: str | None = None) -> None:
    """
    Refuse ``outcome`` if what the provider said contradicts it.

    ``recorded`` is the payment status the engine recorded from the provider
    (its answers and webhooks): a success there is evidence of money taken,
    even if the checker has not looked yet.
    """
    reading = item.latest_reading
    if recorded == "succeeded" and reading in (None, "not_paid"):
        reading = "paid"
    opened = item.evidence.get("opened_by", {}).get("payload", {})
    why = None
    if item.subject == "refund" and outcome in ("paid", "not_paid"):
        why = "the item is about a refund: the payment was already settled"
    elif outcome == "refunded" and item.subject != "refund":
        why = "the item is about a payment: there is no refund to settle"
    elif outcome == "paid" and (
        reading in ("not_paid", "mismatch") or item.reason == "amount_mismatch"
    ):
        why = f"the provider reported {reading or 'another amount'}, not a payment of the price"
    elif outcome == "not_paid" and reading in ("paid", "mismatch"):
        why = "the provider reported money taken"
    elif outcome == "refund" and item.subject == "payment":
        taken = reading in ("paid", "mismatch") or opened.get("amount_minor") is not None
        if not taken:
            why = "no evidence that money was taken: there is nothing to refund"
    if why is not None:
        raise ContradictedDecision(item_id=item.id, outcome=outcome, why=why)


def record_observation(item: ReconItem, observation: Mapping[str, Any]) -> str:
    """The item's evidence with one more observation, as JSON."""
    evidence = dict(item.evidence)
    evidence["observations"] = [*evidence.get("observations", []), dict(observation)]
    return json.dumps(evidence, sort_keys=True)
