"""
The inbox: provider events, however often and late they come, apply once.

They arrive at least once, late, duplicated or out of order, and they may
lie (a forged or premature event).  An event is a hint: before it changes
anything the provider is asked for the payment's (or refund's) status by
key, outside any transaction, and that answer is what is applied.  The event
id is claimed under a unique key in the same transaction as the effect, so a
duplicate finds its id taken and changes nothing; the same id with other
content is recorded as a conflict and never applied.  What the event said is
kept beside what the provider said; an event that claims money the provider
does not confirm puts that evidence in front of a human (a review item).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga import open_review
from saga import validation as _validation
from saga.codec import digest, dump_json, iso, maybe_utc
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.purchase import money as _money
from saga.purchase.steps import apply_payment, apply_refund
from steps.purchase import PROVIDER_EVENTS, payment_evidence, payment_key, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import RowMapping

    from saga import Context, Database, Registry, Tx
    from steps import PaymentProvider, ProviderPayment, ProviderRefund

EVENTS: Final = PROVIDER_EVENTS


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
    provider: dict[str, Any] | None = None
    contradictions: tuple[str, ...] = field(default=())
    review_item: str | None = None

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
            "provider": self.provider,
            "contradicts_provider": bool(self.contradictions),
            "contradictions": list(self.contradictions),
            "review_item": self.review_item,
        }


@dataclass(frozen=True, slots=True)
class _Truth:
    """What the provider said about the payment (or refund) an event is about."""

    payment: ProviderPayment | None
    refund: ProviderRefund | None
    asked_refund: bool

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"payment": dict(payment_evidence(self.payment))}
        if self.asked_refund:
            out["refund"] = (
                {"found": False}
                if self.refund is None
                else {
                    "found": True,
                    "refund_id": self.refund.refund_id,
                    "status": self.refund.status,
                    "amount_minor": self.refund.amount_minor,
                }
            )
        return out


class Inbox:
    """Deliver provider events to the purchases they concern."""

    def __init__(
        self, db: Database, registry: Registry, provider: Callable[[], PaymentProvider]
    ) -> None:
        self.db = db
        self.registry = registry
        self.provider = provider

    def deliver(self, event: ProviderEvent, *, source: str = "cli") -> Delivery:
        """
        Apply ``event`` at most once; see :class:`Delivery` for what happened.

        The provider is asked first; if it gives no answer nothing is recorded
        and :class:`~saga.exceptions.ProviderUnavailable` is raised, so the
        sender delivers the event again later.
        """
        fingerprint = digest(event.payload())
        saga_id, ask = self.db.transaction(lambda tx: _prepare(tx, event, fingerprint), write=False)
        truth = self._ask(saga_id, event) if ask and saga_id is not None else None
        return self.db.transaction(
            lambda tx: deliver_in(tx, self.registry, event, source=source, truth=truth)
        )

    def _ask(self, saga_id: str, event: ProviderEvent) -> _Truth:
        provider = self.provider()
        key = payment_key(saga_id)
        try:
            payment = provider.payment_status(key=key)
            if event.type.startswith("refund."):
                return _Truth(payment, provider.refund_status(key=refund_key(key)), True)
        except Exception as exc:
            raise ProviderUnavailable(operation=f"status of {key}", error=str(exc)) from exc
        return _Truth(payment, None, False)


def _prepare(tx: Tx, event: ProviderEvent, fingerprint: str) -> tuple[str | None, bool]:
    """The purchase the event is about, and whether the provider must be asked."""
    seen = tx.one("get_inbox_event", event_id=event.event_id)
    if seen is not None and (seen["digest"] != fingerprint or seen["outcome"] != "unmatched"):
        return seen["saga_id"], False  # a conflict or a duplicate: nothing to apply
    return _find_purchase(tx, event), True


def deliver_in(
    tx: Tx,
    registry: Registry,
    event: ProviderEvent,
    *,
    source: str,
    truth: _Truth | None = None,
) -> Delivery:
    """:meth:`Inbox.deliver` inside ``tx``, with the provider's answer already in hand."""
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
            saga_id = None if seen is None else seen["saga_id"]
            return Delivery(
                event.event_id,
                "conflict",
                saga_id,
                state=_state_of(tx, saga_id),
                conflict=True,
                detail="the same event id arrived before with other content; recorded, not applied",
            )
        if seen["outcome"] != "unmatched":
            return Delivery(
                event.event_id,
                seen["outcome"],
                seen["saga_id"],
                state=_state_of(tx, seen["saga_id"]),
                duplicate=True,
                detail=seen["detail"],
            )
        # Seen before, but no purchase knew the payment then (the event
        # overtook the provider's answer): match it again now.
    saga_id = _find_purchase(tx, event)
    if saga_id is None or truth is None:
        unmatched = f"no purchase knows payment {event.payment_id}"
        tx.run(
            "settle_inbox_event",
            event_id=event.event_id,
            saga_id=None,
            outcome="unmatched",
            detail=unmatched,
            evidence=None,
        )
        return Delivery(event.event_id, "unmatched", detail=unmatched)
    contradictions, money_claim = _contradictions(event, truth)
    review = None
    if money_claim:
        review = open_review(
            tx,
            saga_id,
            subject="refund" if event.type.startswith("refund.") else "payment",
            reason="event_contradicts_provider",
            evidence={
                "what": f"event {event.event_id} ({event.type}) claims money the provider "
                "does not confirm",
                "event_id": event.event_id,
                "event": payload,
                "provider": truth.to_json(),
                "contradictions": contradictions,
            },
            actor="provider",
        )
    extra = {"event_id": event.event_id}
    cause = f"webhook {event.event_id}: provider status"
    if event.type.startswith("refund."):
        result = (
            apply_refund(
                tx, registry, saga_id, truth.refund, actor="provider", cause=cause, extra=extra
            )
            if truth.refund is not None
            else {"outcome": "absorbed"}
        )
    else:
        result = (
            apply_payment(
                tx, registry, saga_id, truth.payment, actor="provider", cause=cause, extra=extra
            )
            if truth.payment is not None
            else {"outcome": "absorbed"}
        )
    outcome = str(result["outcome"])
    review = review or result.get("review_item")
    detail = "; ".join(contradictions) or None
    tx.run(
        "settle_inbox_event",
        event_id=event.event_id,
        saga_id=saga_id,
        outcome=outcome,
        detail=detail,
        evidence=dump_json(
            {"provider": truth.to_json(), "contradictions": contradictions, "review_item": review}
        ),
    )
    return Delivery(
        event.event_id,
        outcome,
        saga_id,
        state=_state_of(tx, saga_id),
        detail=detail,
        provider=truth.to_json(),
        contradictions=tuple(contradictions),
        review_item=review,
    )


def _contradictions(event: ProviderEvent, truth: _Truth) -> tuple[list[str], bool]:
    """
    How the event's payload differs from the provider, and whether it claims money.

    A stale failure or a premature success is only a hint that came at the
    wrong time; a success the provider denies, or one of another amount or
    currency, claims money that is not there: a human should look.
    """
    found: list[str] = []
    claim = False
    if event.type.startswith("payment."):
        payment = truth.payment
        status = "none" if payment is None else payment.status
        said = "succeeded" if event.type == "payment.succeeded" else "failed"
        if status != said:
            found.append(f"the event says {said}, the provider says {status}")
            claim = said == "succeeded" and status in ("none", "failed", "cancelled")
        if said == "succeeded" and payment is not None and payment.status == "succeeded":
            charged = (payment.charged_minor, payment.currency)
            if (event.amount_minor, event.currency) != charged:
                found.append(
                    f"the event says {event.amount_minor} {event.currency}, "
                    f"the provider charged {charged[0]} {charged[1]}"
                )
                claim = True
        if payment is not None and payment.payment_id != event.payment_id:
            found.append(
                f"the event names payment {event.payment_id}, the provider {payment.payment_id}"
            )
            claim = claim or said == "succeeded"
        return found, claim
    refund = truth.refund
    status = "none" if refund is None else refund.status
    said = "succeeded" if event.type == "refund.succeeded" else "failed"
    if status != said:
        found.append(f"the event says refund {said}, the provider says {status}")
        claim = said == "succeeded" and status in ("none", "failed")
    if (
        refund is not None
        and event.amount_minor is not None
        and event.amount_minor != refund.amount_minor
    ):
        found.append(
            f"the event says {event.amount_minor} refunded, the provider {refund.amount_minor}"
        )
        claim = True
    return found, claim


def _state_of(tx: Tx, saga_id: str | None) -> str | None:
    if saga_id is None:
        return None
    row = tx.one("get_saga", id=saga_id)
    return None if row is None else str(row["state"])


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


def messages_of(engine: Context, saga_id: str) -> list[dict[str, Any]]:
    """The provider events the purchase's inbox matched to one purchase, oldest first."""
    rows = engine.db.transaction(
        lambda tx: tx.all("inbox_of_saga", saga_id=saga_id, limit=200), write=False
    )
    return [{**dict(row), "received_at": iso(maybe_utc(row["received_at"]))} for row in rows]
