"""
The provider's events, through the engine's inbox: however often and late they come, apply once.

They arrive at least once, late, duplicated or out of order, and they may
lie (a forged or premature event).  Each event type is an inbox route of
source :data:`SOURCE` that observes before it applies (:class:`PaymentObserver`):
the provider is asked for the payment's (or refund's) status by key, outside
any transaction, and that answer is what is applied.  The engine's inbox
claims the event id in the transaction of the effect (a duplicate changes
nothing; the same id with other content is a recorded conflict) and keeps
what the event said beside what the provider said; an event that claims
money the provider does not confirm puts that evidence in front of a human
(a review item); :class:`Inbox` (``engine.services.inbox``) is its door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga import Message, Route
from saga import validation as _validation
from saga.codec import digest
from saga.events import Applied, Observed
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.purchase import money as _money
from saga.purchase.answers import apply_payment, apply_refund
from saga.recon import open_review
from steps.purchase import PROVIDER_EVENTS, payment_evidence, payment_key, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqlalchemy.engine import RowMapping

    from saga import Context, Registry, Tx
    from saga.events import Delivery as Delivered
    from steps import PaymentProvider, ProviderPayment, ProviderRefund

EVENTS: Final = PROVIDER_EVENTS
SOURCE: Final = "provider"
"""The payment provider, as the engine's inbox knows it: its events are deduplicated by id."""
_CONFLICT: Final = "the same event id arrived before with other content; recorded, not applied"


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
        """The event's content: what the digest covers (the reference is only an echo)."""
        return {
            "type": self.type,
            "payment_id": self.payment_id,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "refund_id": self.refund_id,
        }

    def message(self) -> Message:
        """The event as a message of the engine's inbox."""
        content = {k: v for k, v in self.payload().items() if k != "type"}
        return Message(
            source=SOURCE,
            event_id=self.event_id,
            type=self.type,
            payload={**content, "reference": self.reference},
        )


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


def event_from_body(body: Mapping[str, Any]) -> ProviderEvent:
    """
    A provider event from a webhook's JSON body (the sandbox's format).

    ``{"event_id", "type", "payment_id", "amount_minor", "currency",
    "refund_id", "reference"}``; a missing or mistyped field is
    :class:`~saga.exceptions.InvalidInput` naming it.
    """
    return ProviderEvent(
        event_id=_field(body, "event_id", str, required=True),
        type=_field(body, "type", str, required=True),
        payment_id=_field(body, "payment_id", str, required=True),
        amount_minor=_field(body, "amount_minor", int),
        currency=_field(body, "currency", str),
        refund_id=_field(body, "refund_id", str),
        reference=_field(body, "reference", str),
    )


def event_of(message: Message) -> ProviderEvent:
    """The provider event a message of :data:`SOURCE` carries."""
    return event_from_body({**message.payload, "event_id": message.event_id, "type": message.type})


def _field(body: Mapping[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidInput(field=name, problem="is missing")
        return None
    # bool is an int in Python, never an amount.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidInput(field=name, problem=f"must be a JSON {_JSON_NAMES[kind]}")
    return value


_JSON_NAMES = {str: "string", int: "integer"}


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


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the provider said, and what the event claimed (for a review's evidence only)."""

    truth: _Truth
    claimed: dict[str, Any]
    contradictions: tuple[str, ...]
    claims_money: bool


class PaymentObserver:
    """
    The provider's events observe before they apply.

    The provider is asked by the purchase's keys (never by the event's ids);
    the purchase moves on its answer alone.  An event whose words claim money
    the provider does not confirm opens a review item with both sides.
    """

    def observe(self, engine: Context, saga_id: str, message: Message) -> Observed[_Seen]:
        """Ask the provider about the payment (or refund) of purchase ``saga_id``."""
        event = event_of(message)
        inbox: Inbox = engine.services.inbox
        provider = inbox.provider()
        key = payment_key(saga_id)
        refund = event.type.startswith("refund.")
        try:
            payment = provider.payment_status(key=key)
            refunded = provider.refund_status(key=refund_key(key)) if refund else None
        except Exception as exc:
            raise ProviderUnavailable(operation=f"status of {key}", error=str(exc)) from exc
        truth = _Truth(payment, refunded, refund)
        contradictions, claims_money = _contradictions(event, truth)
        seen = _Seen(truth, event.payload(), tuple(contradictions), claims_money)
        return Observed(
            saga_id=saga_id,
            value=seen,
            evidence=truth.to_json(),
            disagreements=tuple(contradictions),
        )

    def apply(
        self, tx: Tx, registry: Registry, observation: Observed[_Seen], *, event_id: str
    ) -> Applied:
        """Move the purchase on what the provider said; a money claim goes to a human."""
        seen, saga_id = observation.value, observation.saga_id
        review = None
        if seen.claims_money:
            review = open_review(
                tx,
                saga_id,
                subject="refund" if seen.truth.asked_refund else "payment",
                reason="event_contradicts_provider",
                evidence={
                    "what": f"event {event_id} ({seen.claimed['type']}) claims money the provider "
                    "does not confirm",
                    "event_id": event_id,
                    "event": seen.claimed,
                    "provider": seen.truth.to_json(),
                    "contradictions": list(seen.contradictions),
                },
                actor="provider",
            )
        extra = {"event_id": event_id}
        cause = f"webhook {event_id}: provider status"
        result: Mapping[str, Any] = {"outcome": "absorbed"}
        if seen.truth.asked_refund and seen.truth.refund is not None:
            result = apply_refund(
                tx, registry, saga_id, seen.truth.refund, actor="provider", cause=cause, extra=extra
            )
        elif not seen.truth.asked_refund and seen.truth.payment is not None:
            result = apply_payment(
                tx,
                registry,
                saga_id,
                seen.truth.payment,
                actor="provider",
                cause=cause,
                extra=extra,
            )
        return Applied(
            str(result["outcome"]),
            evidence={"review_item": review or result.get("review_item")},
        )


def _correlate(tx: Tx, message: Message) -> str | None:
    return _find_purchase(tx, event_of(message))


def _fingerprint(message: Message) -> str:
    # The digest the purchase's own inbox kept: events it took before the
    # move, delivered again, are duplicates, not conflicts.
    return digest(event_of(message).payload())


OBSERVER: Final = PaymentObserver()
ROUTES: Final = tuple(
    Route(
        source=SOURCE,
        type=type_,
        correlate=_correlate,
        observe=OBSERVER,
        fingerprint=_fingerprint,
    )
    for type_ in EVENTS
)
"""The provider's events, one inbox route per type."""


class Inbox:
    """The purchase's door to the engine's inbox: provider events in, what they did out."""

    def __init__(self, engine: Context, provider: Callable[[], PaymentProvider]) -> None:
        self.engine = engine
        # Looked up on each event, so that the provider can be swapped.
        self.provider = provider

    def deliver(self, event: ProviderEvent, *, source: str = "cli") -> Delivery:
        """
        Apply ``event`` at most once; see :class:`Delivery` for what happened.

        ``source`` is the door it came through (``cli``, ``sandbox``).  The
        provider is asked first; if it gives no answer nothing is recorded
        and :class:`~saga.exceptions.ProviderUnavailable` is raised, so the
        sender delivers the event again later.
        """
        delivered: Delivered = self.engine.messages.deliver(event.message(), via=source)
        return _delivery(event, delivered)


def _delivery(event: ProviderEvent, delivered: Delivered) -> Delivery:
    if delivered.conflict:
        saga_id, state = delivered.saga_id, delivered.state
        return Delivery(event.event_id, "conflict", saga_id, state, conflict=True, detail=_CONFLICT)
    if delivered.outcome == "unmatched":
        unmatched = f"no purchase knows payment {event.payment_id}"
        return Delivery(event.event_id, "unmatched", detail=unmatched)
    evidence = delivered.evidence or {}
    return Delivery(
        event.event_id,
        delivered.outcome,
        delivered.saga_id,
        state=delivered.state,
        duplicate=delivered.duplicate,
        detail=delivered.detail,
        provider=evidence.get("observed"),
        contradictions=tuple(evidence.get("disagreements", ())),
        review_item=evidence.get("review_item"),
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
