"""
The purchase's reconciliation: the checker, and the operators' judge.

Both ask the payment provider by key, outside any transaction, and record
what it said before deciding.  The checker settles what the provider answers
plainly (paid, not paid, refunded) and escalates the rest.  An operator's
decision is checked against a fresh answer: ``paid`` needs a payment of the
price at the provider or money received outside it (``--external-ref``),
``not_paid`` needs no money taken, ``refund`` needs money to give back, and
``refunded`` a refund at the provider or money given back outside it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga import ReconPolicy
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.purchase.money import format_minor, parse_amount
from saga.purchase.payments import record_payment, record_refund, refund_evidence
from saga.queue import error_text
from saga.recon import (
    Checker,
    ContradictedDecision,
    Decision,
    ReconItem,
    Verdict,
    record_observation,
)
from saga.sagas import get_in
from steps.purchase import payment_evidence, payment_key, read_payment, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Registry, SagaRecord, Tx
    from saga.purchase.services import PurchaseContext
    from saga.sagas import Change
    from saga.store import Database
    from steps import PaymentProvider, ProviderPayment, ProviderRefund

# What an automatic check may settle on its own, by subject and reading.
_CHECKER_OUTCOMES: Final = {
    ("payment", "paid"): "paid",
    ("payment", "not_paid"): "not_paid",
    ("refund", "refunded"): "refunded",
    ("refund", "none"): "refund",
}
_REFUND_READING: Final = {"succeeded": "refunded", "failed": "refund_failed"}
_FIXED_REASONS: Final = {
    "refund_failed": "refund_declined",
    "refund_outcome_unknown": "refund_outcome_unknown",
    "payment_outcome_unknown": "payment_outcome_unknown",
    "refund_overdue": "refund_overdue",
}


def _subject(before: SagaRecord) -> str:
    """A refund went unknown in refund_pending; anything before was about the payment."""
    return "refund" if before.state == "refund_pending" else "payment"


def _reason(change: Change, after: SagaRecord) -> str:
    """Why the purchase entered reconciliation, from the event that took it there."""
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


def _payment_judge(engine: PurchaseContext) -> PaymentJudge:
    return PaymentJudge(engine.db, engine.services.provider_getter)


PURCHASE_RECON: Final = ReconPolicy(
    check_kind="purchase.reconcile",
    # An operator's decision is checked against the provider's fresh answer.
    judge=_payment_judge,
    outcomes={
        "paid": "resolve_paid",
        "not_paid": "resolve_not_paid",
        "refund": "resolve_refund",
        "refunded": "resolve_refunded",
    },
    subject=_subject,
    reason=_reason,
    # No automatic check can settle these: a human decides from the start.
    human_reasons=frozenset({"amount_mismatch", "refund_declined"}),
    amount=lambda saga, text: parse_amount(text, str(saga.data["currency"]), field="amount"),
    hints={
        "paid": "the provider shows a charge of the price, or the price arrived by bank "
        "transfer (give its reference): the purchase is confirmed",
        "paid:amount_mismatch": "does not fit: the charge is not the price; refund it instead",
        "paid:refund_declined": "does not fit: the item is about a refund",
        "not_paid": "the provider took no money (a pending payment is cancelled first): "
        "the seat is released",
        "not_paid:amount_mismatch": "does not fit: money was taken; refund it instead",
        "refund": "the provider holds money the purchase must not keep: it is given back",
        "refund:amount_mismatch": "fits: the provider charged another amount or currency "
        "than the price; it is given back",
        "refunded": "a refund item: the provider shows the refund done, or the money went "
        "back by bank transfer (give its reference)",
        "refunded:refund_declined": "fits once you gave the money back outside the provider: "
        "give the transfer's reference",
    },
)
_MONEY_TAKEN: Final = ("paid", "mismatch")


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """What the provider said about a purchase's payment (and refund) when asked by key."""

    by: str
    key: str
    amount_minor: int
    currency: str
    payment: ProviderPayment | None = None
    refund: ProviderRefund | None = None
    asked_refund: bool = False
    error: str | None = None

    @property
    def reading(self) -> str:
        """The payment: ``paid``, ``mismatch``, ``pending``, ``not_paid`` or ``unknown``."""
        if self.error is not None:
            return "unknown"
        return read_payment(self.payment, amount_minor=self.amount_minor, currency=self.currency)

    @property
    def refund_reading(self) -> str:
        """The refund: ``refunded``, ``refund_failed``, ``pending``, ``none`` or ``unknown``."""
        if self.error is not None:
            return "unknown"
        if self.refund is None:
            return "none"
        return _REFUND_READING.get(self.refund.status, "pending")

    @property
    def charged_minor(self) -> int:
        """Money the provider holds for the payment (0 unless it succeeded)."""
        if self.payment is None or not self.payment.money_taken:
            return 0
        return int(self.payment.charged_minor or 0)

    def to_json(self) -> dict[str, Any]:
        """The observation as evidence."""
        out: dict[str, Any] = {
            "by": self.by,
            "key": self.key,
            "reading": self.reading,
            "payment": dict(payment_evidence(self.payment)),
        }
        if self.asked_refund:
            out["refund_reading"] = self.refund_reading
            out["refund"] = dict(refund_evidence(self.refund))
        if self.error is not None:
            out["error"] = self.error
        return out


def look(
    provider: PaymentProvider,
    saga: SagaRecord,
    *,
    by: str,
    cancel_pending: bool,
    ask_refund: bool,
) -> Seen:
    """
    Ask the provider about ``saga``'s payment by key (and its refund).

    With ``cancel_pending`` a payment still pending is cancelled first, so
    that "not paid" stays true.  No answer is ``unknown``, never "not paid".
    """
    key = payment_key(saga.id)
    seen = functools.partial(
        Seen,
        by=by,
        key=key,
        amount_minor=int(saga.data["amount_minor"]),
        currency=str(saga.data["currency"]),
        asked_refund=ask_refund,
    )
    try:
        payment = provider.payment_status(key=key)
        if cancel_pending and payment is not None and payment.status == "pending":
            payment = provider.cancel_payment(key=key) or payment
        refund = provider.refund_status(key=refund_key(key)) if ask_refund else None
    except Exception as exc:  # noqa: BLE001 - no answer is "unknown": never "not paid"
        return seen(error=error_text(exc))
    return seen(payment=payment, refund=refund)


def record_seen(tx: Tx, saga_id: str, seen: Seen) -> bool:
    """Write what the provider said to the purchase's records; ``False`` on a contradiction."""
    agrees = True
    if seen.payment is not None:
        agrees = record_payment(tx, saga_id, seen.payment)
    if seen.refund is not None:
        agrees = record_refund(tx, saga_id, seen.refund) and agrees
    return agrees


class PaymentJudge:
    """Checks operators' decisions on purchase items against the provider's fresh answer."""

    def __init__(self, db: Database, provider: Callable[[], PaymentProvider]) -> None:
        self.db = db
        self.provider = provider

    def observe(self, decision: Decision) -> Seen:
        """Ask the provider again; no answer refuses the decision (it cannot be checked)."""
        if decision.external_ref is not None and decision.outcome not in ("paid", "refunded"):
            raise InvalidInput(
                field="external_ref",
                problem="goes with --outcome paid (money received outside the provider) or "
                "refunded (money given back outside it)",
            )
        saga = self.db.transaction(lambda tx: get_in(tx, decision.item.saga_id), write=False)
        seen = look(
            self.provider(),
            saga,
            by=decision.actor,
            cancel_pending=decision.outcome == "not_paid",
            ask_refund=decision.item.subject == "refund" or decision.outcome == "refunded",
        )
        if seen.error is not None:
            raise ProviderUnavailable(operation=f"payment status of {seen.key}", error=seen.error)
        return seen

    def check(self, tx: Tx, decision: Decision, observation: Any) -> None:
        """Record what was seen, refuse a contradicted decision, record external money."""
        seen: Seen = observation
        item = decision.item
        saga = get_in(tx, item.saga_id)
        if not record_seen(tx, saga.id, seen):
            raise ContradictedDecision(
                item_id=item.id,
                outcome=decision.outcome,
                why="the provider's answer contradicts the engine's records "
                f"({seen.to_json()['payment']}); look at the evidence before deciding",
            )
        tx.run("set_recon_evidence", id=item.id, evidence=record_observation(item, seen.to_json()))
        held = _held_outside(tx, saga.id)
        why = _refusal(decision, seen, held)
        if why is not None:
            raise ContradictedDecision(item_id=item.id, outcome=decision.outcome, why=why)
        if decision.external_ref is not None:
            self._external(tx, decision, seen, saga, held)

    @staticmethod
    def _external(
        tx: Tx, decision: Decision, seen: Seen, saga: SagaRecord, held: tuple[int, int]
    ) -> None:
        received, given_back = held
        direction = "in" if decision.outcome == "paid" else "out"
        due = seen.amount_minor if direction == "in" else seen.charged_minor + received - given_back
        amount = due if decision.amount_minor is None else decision.amount_minor
        if amount != due:
            raise ContradictedDecision(
                item_id=decision.item.id,
                outcome=decision.outcome,
                why=f"the external movement must be {format_minor(due, seen.currency)} "
                f"{seen.currency} (the {'price' if direction == 'in' else 'money held'}), "
                f"not {format_minor(amount, seen.currency)}",
            )
        if tx.one("external_movement_by_reference", reference=decision.external_ref) is not None:
            raise ContradictedDecision(
                item_id=decision.item.id,
                outcome=decision.outcome,
                why=f"external reference {decision.external_ref!r} is already recorded",
            )
        tx.run(
            "insert_external_movement",
            saga_id=saga.id,
            item_id=decision.item.id,
            direction=direction,
            reference=decision.external_ref,
            amount_minor=amount,
            currency=seen.currency,
            operator=decision.operator,
            reason=decision.reason,
        )


def _held_outside(tx: Tx, saga_id: str) -> tuple[int, int]:
    """Money received and given back outside the provider for a purchase."""
    received = given_back = 0
    for row in tx.all("external_movements_of_saga", saga_id=saga_id):
        if row["direction"] == "in":
            received += int(row["amount_minor"])
        else:
            given_back += int(row["amount_minor"])
    return received, given_back


def _refusal(decision: Decision, seen: Seen, held: tuple[int, int]) -> str | None:  # noqa: PLR0911, PLR0912 - one rule per outcome and reading
    """Why the fresh evidence contradicts the decision, or ``None``."""
    item, outcome, external = decision.item, decision.outcome, decision.external_ref
    reading, refund = seen.reading, seen.refund_reading
    said = f"the provider says {reading} for {seen.key}"
    if item.subject == "refund" and outcome in ("paid", "not_paid"):
        return "the item is about a refund: the payment was already settled"
    if outcome == "refunded" and item.subject != "refund":
        return "the item is about a payment: there is no refund to settle"
    if outcome == "paid":
        if external is not None:
            if reading in _MONEY_TAKEN or held[0]:
                return f"{said}: money is already recorded, an external payment would count twice"
            return None
        if reading == "paid":
            return None
        if reading == "mismatch":
            return f"{said} (another amount or currency than the price): refund it instead"
        return f"{said}; money received outside the provider needs --external-ref"
    if outcome == "not_paid":
        if reading == "pending":
            return f"{said}: the payment is in flight and could not be cancelled"
        return f"{said}: money was taken" if reading in _MONEY_TAKEN else None
    if outcome == "refund":
        if reading not in _MONEY_TAKEN:
            return f"{said}: it holds no money, there is nothing to refund"
        return f"the provider already refunded {seen.key}" if refund == "refunded" else None
    # refunded
    if refund == "refunded":
        return (
            "the provider refunded it already: an external refund pays twice" if external else None
        )
    if external is None:
        return (
            f"the provider says {refund} for the refund of {seen.key}; money given back "
            "outside the provider needs --external-ref"
        )
    return None


def payment_checker(
    db: Database,
    registry: Registry,
    provider: Callable[[], PaymentProvider],
    policy: ReconPolicy = PURCHASE_RECON,
) -> Checker[Seen]:
    """The engine's checker, looking at the payment provider for purchase items."""

    def look_again(item: ReconItem, saga: SagaRecord) -> Seen:
        return look(
            provider(),
            saga,
            by=Checker.ACTOR,
            cancel_pending=item.subject == "payment",
            ask_refund=item.subject == "refund",
        )

    def decide(tx: Tx, item: ReconItem, seen: Seen) -> Verdict:
        agrees = record_seen(tx, item.saga_id, seen)
        reading = seen.refund_reading if item.subject == "refund" else seen.reading
        if not agrees:
            reading = "contradicts the engine's records"
        return Verdict(
            reading=reading,
            observation=seen.to_json(),
            outcome=_CHECKER_OUTCOMES.get((item.subject, reading)),
            # What no later look can settle: another amount, a declined refund.
            escalate=not agrees or reading in ("mismatch", "refund_failed"),
        )

    return Checker(db, registry, policy, look=look_again, decide=decide)
