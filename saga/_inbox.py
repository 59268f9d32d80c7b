"""
The inbox: provider events, however often and late they come, apply once.

They arrive at least once, late, duplicated or out of order.
The event id is claimed under a unique key in the same transaction as the
event's effect on the saga, so a duplicate finds its id taken and changes
nothing; the same id with other content is recorded as a conflict and never
applied.  The state machine makes late and out-of-order events harmless:
terminal states absorb them, and no declared transition goes backwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga import _money, _validation
from saga._codec import digest, dump_json
from saga._sagas import fire_in
from saga.exceptions import InvalidInput, TransitionNotAllowed

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

    from saga._db import Database, Tx
    from saga._sagas import Registry

EVENTS: Final = {
    "payment.succeeded": "payment_succeeded",
    "payment.failed": "payment_failed",
    "refund.succeeded": "refund_succeeded",
    "refund.failed": "refund_failed",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderEvent:
    """One event from the payment provider."""

    event_id: str
    type: str
    payment_id: str
    amount_minor: int | None = None
    currency: str | None = None
    refund_id: str | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        _validation.operation_id(self.event_id, field="event_id")
        _validation.one_of("type", self.type, EVENTS)
        _validation.identifier("payment_id", self.payment_id)
        if self.type == "payment.succeeded" and (self.amount_minor is None or not self.currency):
            raise InvalidInput(
                field="amount", problem="payment.succeeded needs --amount and --currency"
            )
        if self.currency is not None:
            _money.currency(self.currency)

    def payload(self) -> dict[str, Any]:
        """The event's content: what the digest covers."""
        return {
            "type": self.type,
            "payment_id": self.payment_id,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "refund_id": self.refund_id,
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """What delivering one event did."""

    event_id: str
    outcome: str
    saga_id: str | None = None
    state: str | None = None
    duplicate: bool = False
    conflict: bool = False
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The delivery as plain data."""
        return {
            "event_id": self.event_id,
            "outcome": "conflict" if self.conflict else self.outcome,
            "saga_id": self.saga_id,
            "state": self.state,
            "duplicate": self.duplicate,
            "conflict": self.conflict,
            "detail": self.detail,
        }


class Inbox:
    """Deliver provider events to the purchases they concern."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self.db = db
        self.registry = registry

    def deliver(self, event: ProviderEvent, *, source: str = "cli") -> Delivery:
        """Apply ``event`` at most once; see :class:`Delivery` for what happened."""
        return self.db.transaction(lambda tx: deliver_in(tx, self.registry, event, source=source))


def deliver_in(tx: Tx, registry: Registry, event: ProviderEvent, *, source: str) -> Delivery:
    """:meth:`Inbox.deliver` inside ``tx``."""
    payload = event.payload()
    fingerprint = digest(payload)
    claimed = tx.one(
        "insert_inbox_event",
        event_id=event.event_id,
        source=source,
        type=event.type,
        payment_ref=event.payment_id,
        digest=fingerprint,
        payload=dump_json(payload),
    )
    if claimed is None:
        seen = tx.one("get_inbox_event", event_id=event.event_id)
        if seen is None or seen["digest"] != fingerprint:
            tx.run(
                "insert_inbox_conflict",
                event_id=event.event_id,
                digest=fingerprint,
                payload=dump_json(payload),
            )
            return Delivery(
                event.event_id,
                "conflict",
                None if seen is None else seen["saga_id"],
                conflict=True,
                detail="the same event id arrived before with other content; recorded, not applied",
            )
        if seen["outcome"] != "unmatched":
            return Delivery(
                event.event_id,
                seen["outcome"],
                seen["saga_id"],
                duplicate=True,
                detail=seen["detail"],
            )
        # Seen before, but no purchase knew the payment then (the event
        # overtook the provider's answer): match it again now.
    saga_id = _find_purchase(tx, event)
    if saga_id is None:
        unmatched = f"no purchase knows payment {event.payment_id}"
        tx.run(
            "settle_inbox_event",
            event_id=event.event_id,
            saga_id=None,
            outcome="unmatched",
            detail=unmatched,
        )
        return Delivery(event.event_id, "unmatched", detail=unmatched)
    _record_answer(tx, saga_id, event)
    outcome, state, detail = _apply(tx, registry, saga_id, event)
    tx.run(
        "settle_inbox_event",
        event_id=event.event_id,
        saga_id=saga_id,
        outcome=outcome,
        detail=detail,
    )
    return Delivery(event.event_id, outcome, saga_id, state=state, detail=detail)


def _find_purchase(tx: Tx, event: ProviderEvent) -> str | None:
    if event.type.startswith("refund.") and event.refund_id:
        refund = tx.one("refund_by_ref", provider_ref=event.refund_id)
        if refund is not None:
            return str(refund["saga_id"])
    payment = tx.one("payment_by_ref", provider_ref=event.payment_id)
    if payment is not None:
        return str(payment["saga_id"])
    # The provider's id may be unknown to the engine (the create call timed
    # out); real providers echo the merchant's reference, and so does the sandbox.
    if event.reference:
        row: RowMapping | None = tx.one("get_payment", saga_id=event.reference)
        if row is not None:
            return str(row["saga_id"])
    return None


def _record_answer(tx: Tx, saga_id: str, event: ProviderEvent) -> None:
    if event.type.startswith("payment."):
        status = "succeeded" if event.type == "payment.succeeded" else "failed"
        tx.run(
            "record_payment_answer",
            saga_id=saga_id,
            status=status,
            provider_ref=event.payment_id,
            charged_minor=event.amount_minor,
            charged_currency=event.currency,
        )
    else:
        status = "succeeded" if event.type == "refund.succeeded" else "failed"
        tx.run("record_refund_answer", saga_id=saga_id, status=status, provider_ref=event.refund_id)


def _apply(
    tx: Tx, registry: Registry, saga_id: str, event: ProviderEvent
) -> tuple[str, str | None, str | None]:
    payload: dict[str, Any] = {"event_id": event.event_id}
    if event.amount_minor is not None:
        payload["amount_minor"] = event.amount_minor
    if event.currency is not None:
        payload["currency"] = event.currency
    try:
        fired = fire_in(
            tx,
            registry,
            saga_id,
            EVENTS[event.type],
            payload=payload,
            actor="provider",
            cause=f"webhook {event.event_id}",
        )
    except TransitionNotAllowed as exc:
        return "not_applicable", exc.state, exc.message
    if fired.absorbed:
        return "absorbed", fired.saga.state, f"{fired.saga.state} absorbs {event.type}"
    return "applied", fired.saga.state, None
