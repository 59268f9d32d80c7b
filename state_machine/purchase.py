"""
The reference saga: the purchase of one seat of a paid intensive.

It is defined with the public API only; the engine knows nothing of seats or
payments.  ``meta["seat"]`` says what each state does with the student's seat
(``held``, ``taken``, ``free``; ``None`` keeps whatever the previous state
had), and the purchase runtime turns that into seat counters in SQL.

Events carry a payload.  The payment events carry what the provider reported:
``amount_minor`` and ``currency`` for a success; the hold timeout carries
``provider_status`` (``paid``, ``not_paid`` or ``unknown``), because expiring a
purchase whose payment is pending first asks the provider (DESIGN.md §1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from state_machine._definition import (
    OPERATOR,
    PREVIOUS_STATE,
    RECONCILIATION,
    ROUTE,
    STEP,
    TIMER,
    State,
    Timeout,
    Transition,
    guard,
)
from state_machine._machine import Machine

if TYPE_CHECKING:
    from collections.abc import Mapping

SEAT_HELD: Final = "held"
SEAT_TAKEN: Final = "taken"
SEAT_FREE: Final = "free"


@guard
def amount_matches(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The provider charged exactly the saga's amount, in the saga's currency."""
    return bool(
        payload.get("amount_minor") == data.get("amount_minor")
        and payload.get("currency") == data.get("currency")
    )


@guard
def provider_not_paid(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The provider says no money was taken (and the intent, if any, is cancelled)."""
    return payload.get("provider_status") == "not_paid"


@guard
def provider_paid_in_full(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The provider says the payment succeeded, for the right amount and currency."""
    return payload.get("provider_status") == "paid" and amount_matches(data, payload)


@guard
def unknown_payment(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The open item is about a payment (reconciliation began before any refund)."""
    return data.get(PREVIOUS_STATE) in ("reserved", "payment_pending")


@guard
def unknown_refund(data: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    """The open item is about a refund (reconciliation began in refund_pending)."""
    return data.get(PREVIOUS_STATE) == "refund_pending"


_HOLD = Timeout("hold_expired", seconds_from="hold_seconds", since="created")
_OPEN = ("reserved", "payment_pending")

STATES: Final = (
    State(
        "reserved",
        initial=True,
        timeout=_HOLD,
        actions=("request_payment",),
        meta={"seat": SEAT_HELD},
        description="seat held until the hold expires; payment not yet requested",
    ),
    State(
        "payment_pending",
        timeout=_HOLD,
        meta={"seat": SEAT_HELD},
        description="payment intent created at the provider; waiting for its outcome",
    ),
    State(
        "confirmed",
        terminal=True,
        # Access is granted in the confirming transaction (a hook of the
        # application): a row in the same database needs no step of its own.
        meta={"seat": SEAT_TAKEN},
        description="paid, amount and currency verified; access granted",
    ),
    State(
        "expired",
        terminal=True,
        meta={"seat": SEAT_FREE},
        description="the hold ran out with no payment",
    ),
    State(
        "cancelled",
        terminal=True,
        actions=("cancel_payment",),
        meta={"seat": SEAT_FREE},
        description="payment declined or abandoned before success",
    ),
    State(
        "refund_pending",
        timeout=Timeout("refund_overdue", seconds=600),
        actions=("refund", "revoke_access"),
        meta={"seat": SEAT_FREE},
        description="money must go back; the refund has a stable key",
    ),
    State(
        "refunded",
        terminal=True,
        meta={"seat": SEAT_FREE},
        description="refund confirmed by the provider",
    ),
    State(
        "needs_reconciliation",
        meta={"seat": None},
        description="outcome unknown; an open reconciliation item exists",
    ),
)

TRANSITIONS: Final = (
    Transition("payment_requested", source="reserved", target="payment_pending"),
    Transition("payment_succeeded", source=_OPEN, target="confirmed", guard=amount_matches),
    Transition(
        "payment_succeeded",
        source=_OPEN,
        target="needs_reconciliation",
        description="charged another amount or currency: evidence goes to reconciliation",
    ),
    Transition(
        "payment_succeeded",
        source=("expired", "cancelled"),
        target="refund_pending",
        compensation=True,
        description="late payment after the hold ended: the money goes back",
    ),
    Transition("payment_failed", source=_OPEN, target="cancelled"),
    Transition("payment_outcome_unknown", source=_OPEN, target="needs_reconciliation"),
    Transition("hold_expired", source=_OPEN, target="expired", guard=provider_not_paid),
    Transition("hold_expired", source=_OPEN, target="confirmed", guard=provider_paid_in_full),
    Transition(
        "hold_expired",
        source=_OPEN,
        target="needs_reconciliation",
        description="the provider could not say, or charged another amount",
    ),
    Transition("cancel", source=_OPEN, target="cancelled"),
    Transition(
        "cancel",
        source="confirmed",
        target="refund_pending",
        compensation=True,
        description="cancellation after confirmation refunds and frees the seat",
    ),
    Transition("refund_succeeded", source="refund_pending", target="refunded"),
    Transition("refund_failed", source="refund_pending", target="needs_reconciliation"),
    Transition("refund_outcome_unknown", source="refund_pending", target="needs_reconciliation"),
    Transition(
        "refund_overdue",
        source="refund_pending",
        target="needs_reconciliation",
        description="no refund settled in time (its job died or keeps failing): find out",
    ),
    # An open item is either about a payment (the seat is still held) or about
    # a refund (the seat is already free, the money is going back): each
    # resolution only makes sense for one of them.
    Transition(
        "resolve_paid", source="needs_reconciliation", target="confirmed", guard=unknown_payment
    ),
    Transition(
        "resolve_not_paid",
        source="needs_reconciliation",
        target="cancelled",
        guard=unknown_payment,
    ),
    Transition("resolve_refund", source="needs_reconciliation", target="refund_pending"),
    Transition(
        "resolve_refunded", source="needs_reconciliation", target="refunded", guard=unknown_refund
    ),
)

_PROVIDER = (STEP, ROUTE)
# Who may fire what.  The provider's answers come through the steps and the
# webhooks, deadlines through timers; money decisions on an unknown outcome
# only through reconciliation (the checker, or an operator's decision its
# judge checked): an operator's `saga instances fire` cannot confirm a
# purchase the provider never charged.
FIRED_BY: Final = {
    "payment_requested": STEP,
    "payment_succeeded": _PROVIDER,
    "payment_failed": _PROVIDER,
    "payment_outcome_unknown": _PROVIDER,
    "hold_expired": TIMER,
    "cancel": (OPERATOR, STEP, ROUTE),
    "refund_succeeded": _PROVIDER,
    "refund_failed": _PROVIDER,
    "refund_outcome_unknown": _PROVIDER,
    "refund_overdue": TIMER,
    "resolve_paid": RECONCILIATION,
    "resolve_not_paid": RECONCILIATION,
    "resolve_refund": RECONCILIATION,
    "resolve_refunded": RECONCILIATION,
}

PURCHASE: Final = Machine(
    "purchase", version=1, states=STATES, transitions=TRANSITIONS, fired_by=FIRED_BY
)
"""The purchase saga, version 1."""
