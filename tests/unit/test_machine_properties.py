"""
Property tests on the purchase machine: random event sequences, with
duplicates and reorders, through the pure decide() function.  The same
sequences against the real store are in tests/contract/test_store_model.py.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from state_machine import TransitionNotAllowed
from state_machine.purchase import PURCHASE

DATA = {"amount_minor": 4900, "currency": "EUR", "hold_seconds": 60}

payloads = st.fixed_dictionaries(
    {},
    optional={
        "amount_minor": st.sampled_from([4900, 4899, 0]),
        "currency": st.sampled_from(["EUR", "USD"]),
        "provider_status": st.sampled_from(["paid", "not_paid", "unknown"]),
    },
)
events = st.tuples(st.sampled_from(PURCHASE.events), payloads)


@st.composite
def sequences(draw):
    """Event sequences where some events repeat (duplicate webhooks) or come back late."""
    base = draw(st.lists(events, max_size=30))
    repeated = list(base)
    for index in draw(st.lists(st.integers(0, max(len(base) - 1, 0)), max_size=10)):
        if base:
            position = draw(st.integers(0, len(repeated)))
            repeated.insert(position, base[index])
    return repeated


def run(sequence):
    """Apply a sequence; yield (state, event, payload, transition-or-None, error)."""
    state = PURCHASE.initial.name
    seat = PURCHASE.initial.meta["seat"]
    for event, payload in sequence:
        try:
            transition = PURCHASE.decide(state, event, DATA, payload)
        except TransitionNotAllowed as exc:
            yield state, seat, event, None, exc, state, seat
            continue
        before, before_seat = state, seat
        if transition is not None:
            state = transition.target
            declared = PURCHASE.state(state).meta["seat"]
            seat = before_seat if declared is None else declared
        yield before, before_seat, event, transition, None, state, seat


@given(sequences())
def test_terminal_states_absorb_all_but_compensations(sequence):
    """From a terminal state, the only way out is a declared compensation."""
    for before, _, _, transition, error, after, _ in run(sequence):
        if PURCHASE.state(before).terminal:
            if transition is None:
                assert after == before
                assert error is None or "unknown" in str(error)
            else:
                assert transition.compensation


@given(sequences())
def test_reconciliation_never_holds_a_taken_seat(sequence):
    """Unknown outcomes come from open or refunding purchases, never from a taken seat."""
    for _, _, _, _, _, after, seat in run(sequence):
        if after == "needs_reconciliation":
            assert seat in ("held", "free")


@given(sequences())
def test_confirmation_requires_matching_money(sequence):
    """A purchase is confirmed only by a matching payment or an explicit resolution."""
    for _, _, event, transition, _, after, _ in run(sequence):
        if transition is not None and after == "confirmed" and event != "resolve_paid":
            assert event in ("payment_succeeded", "hold_expired")
            assert transition.guard is not None


@given(st.sampled_from(PURCHASE.state_names), events)
def test_decide_is_deterministic(state, event):
    """decide() is pure: the same inputs give the same answer."""
    name, payload = event

    def attempt():
        try:
            return PURCHASE.decide(state, name, DATA, payload)
        except TransitionNotAllowed as exc:
            return str(exc)

    assert attempt() == attempt()
