"""Who may fire an event: the machine's declaration, checked when built, and its defaults."""

from __future__ import annotations

import pytest

from saga.core.sagas.refusals import allowed_origins
from state_machine import (
    ORIGINS,
    RECONCILIATION,
    DefinitionError,
    Machine,
    State,
    Timeout,
    Transition,
)
from state_machine.purchase import PURCHASE

STATES = [
    State("open", initial=True, timeout=Timeout("late", seconds=5)),
    State("unknown"),
    State("done", terminal=True),
]
TRANSITIONS = [
    Transition("late", source="open", target="done"),
    Transition("lost", source="open", target="unknown"),
    Transition("resolve_done", source="unknown", target="done"),
]


def build(fired_by):
    return Machine("m", states=STATES, transitions=TRANSITIONS, fired_by=fired_by)


@pytest.mark.parametrize(
    ("fired_by", "problem"),
    [
        ({"nope": "operator"}, "fired_by names 'nope', which no transition accepts"),
        ({"lost": "oprator"}, "unknown origin 'oprator'"),
        ({"lost": ()}, "gives 'lost' no origin"),
        ({"late": "operator"}, "timeout event 'late' of state 'open' must be fireable by 'timer'"),
    ],
)
def test_a_wrong_declaration_is_refused_when_built(fired_by, problem):
    with pytest.raises(DefinitionError) as refused:
        build(fired_by)
    assert any(problem in found for found in refused.value.problems)


def test_undeclared_events_come_from_anywhere_but_policy_outcomes_from_reconciliation():
    machine = build({"late": ("timer",)})
    assert frozenset({"timer"}) == allowed_origins(machine, {}, "late")
    assert frozenset(ORIGINS) == allowed_origins(machine, {}, "lost")
    outcomes = {"done": "resolve_done"}
    assert frozenset({RECONCILIATION}) == allowed_origins(machine, outcomes, "resolve_done")


def test_the_purchase_keeps_money_decisions_to_their_doors():
    for event in ("resolve_paid", "resolve_not_paid", "resolve_refund", "resolve_refunded"):
        assert frozenset({RECONCILIATION}) == PURCHASE.origins(event)
    assert frozenset({"timer"}) == PURCHASE.origins("hold_expired")
    assert "operator" not in PURCHASE.origins("payment_succeeded")
    assert "operator" in PURCHASE.origins("cancel")
    assert set(PURCHASE.events) == set(PURCHASE.fired_by)
