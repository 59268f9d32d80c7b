"""The purchase saga's definition: the states of DESIGN.md §1 and its rules."""

from __future__ import annotations

import re

import pytest

from state_machine import TransitionNotAllowed, to_mermaid
from state_machine.purchase import PURCHASE

DESIGN_STATES = {
    "reserved",
    "payment_pending",
    "confirmed",
    "expired",
    "cancelled",
    "refund_pending",
    "refunded",
    "needs_reconciliation",
}
PAID = {"amount_minor": 4900, "currency": "EUR"}
DATA = {"amount_minor": 4900, "currency": "EUR", "hold_seconds": 900}


def test_has_exactly_the_states_of_the_design():
    """Every state of DESIGN.md §1, and no other."""
    assert DESIGN_STATES == set(PURCHASE.state_names)


def test_seat_meta_matches_the_design_table():
    """Which states hold, take or free the seat is declared as data."""
    seats = {state.name: state.meta["seat"] for state in PURCHASE.states}
    assert {
        "reserved": "held",
        "payment_pending": "held",
        "confirmed": "taken",
        "expired": "free",
        "cancelled": "free",
        "refund_pending": "free",
        "refunded": "free",
        "needs_reconciliation": None,
    } == seats


def test_mermaid_shows_every_state_and_every_transition():
    """The diagram has one edge per (transition, source) and every state."""
    text = to_mermaid(PURCHASE)
    assert text.startswith("---\ntitle: purchase")
    edges = set(re.findall(r"^    (\w+) --> (\w+): (\w+)", text, re.MULTILINE))
    expected = {(source, t.target, t.event) for t in PURCHASE.transitions for source in t.source}
    assert expected == edges
    for state in DESIGN_STATES:
        assert re.search(rf"^    state {state}$", text, re.MULTILINE)


def test_mermaid_has_no_statement_separators_in_labels():
    """Mermaid ends statements at ';': notes and labels must not contain one."""
    assert ";" not in to_mermaid(PURCHASE)


@pytest.mark.parametrize("state", ["reserved", "payment_pending"])
def test_payment_with_matching_amount_confirms(state):
    """Success for the saga's amount and currency confirms."""
    assert "confirmed" == PURCHASE.decide(state, "payment_succeeded", DATA, PAID).target


@pytest.mark.parametrize(
    "payload",
    [{"amount_minor": 4800, "currency": "EUR"}, {"amount_minor": 4900, "currency": "USD"}, {}],
)
def test_payment_with_other_amount_goes_to_reconciliation(payload):
    """A mismatched amount or currency is never accepted as payment."""
    target = PURCHASE.decide("payment_pending", "payment_succeeded", DATA, payload).target
    assert "needs_reconciliation" == target


@pytest.mark.parametrize("state", ["expired", "cancelled"])
def test_late_payment_on_released_purchase_is_refunded(state):
    """A late payment after the hold ended is a declared compensation: refund."""
    transition = PURCHASE.decide(state, "payment_succeeded", DATA, PAID)
    assert transition.compensation
    assert "refund_pending" == transition.target


@pytest.mark.parametrize(
    ("status", "target"),
    [
        ("not_paid", "expired"),
        ("paid", "confirmed"),
        ("unknown", "needs_reconciliation"),
    ],
)
def test_hold_expiry_follows_what_the_provider_says(status, target):
    """Expiry on payment_pending asks the provider first (DESIGN.md §1)."""
    payload = {"provider_status": status, **PAID}
    assert target == PURCHASE.decide("payment_pending", "hold_expired", DATA, payload).target


def test_hold_expiry_paid_with_wrong_amount_is_reconciliation():
    """Paid, but not the right amount: evidence goes to reconciliation."""
    payload = {"provider_status": "paid", "amount_minor": 1, "currency": "EUR"}
    target = PURCHASE.decide("payment_pending", "hold_expired", DATA, payload).target
    assert "needs_reconciliation" == target


def test_confirmed_purchase_cancel_refunds():
    """Cancelling a confirmed purchase is a compensation that refunds."""
    transition = PURCHASE.decide("confirmed", "cancel", DATA, {})
    assert ("refund_pending", True) == (transition.target, transition.compensation)


def test_confirmed_absorbs_duplicate_payment_events():
    """A duplicate success webhook on a confirmed purchase changes nothing."""
    assert PURCHASE.decide("confirmed", "payment_succeeded", DATA, PAID) is None


def test_refunded_absorbs_everything():
    """refunded is final: no event moves it."""
    for event in PURCHASE.events:
        assert PURCHASE.decide("refunded", event, DATA, PAID) is None


def test_reserved_cannot_refund():
    """A purchase that took no money cannot be refunded."""
    with pytest.raises(TransitionNotAllowed):
        PURCHASE.decide("reserved", "refund_succeeded", DATA, {})


def test_reservation_times_out_on_the_hold_measured_from_creation():
    """Both open states time out at the same hold deadline, counted from creation."""
    for name in ("reserved", "payment_pending"):
        timeout = PURCHASE.state(name).timeout
        assert timeout is not None
        assert ("hold_expired", "created") == (timeout.event, timeout.since)
        assert 900.0 == timeout.duration(DATA)


def test_reservation_queues_the_payment_request():
    """Entering reserved queues the request_payment step."""
    assert ("request_payment",) == PURCHASE.initial.actions
