"""
A user's application with two saga kinds reconciled differently, public API only.

A *payout* whose transfer timed out waits in ``payout_unknown`` until an
operator says ``paid`` or ``failed``; its judge asks the bank (here: what
the payout's data says the bank holds) and refuses a decision the bank
contradicts.  An *expense* lost in the approval system waits in
``expense_limbo`` until an operator says ``approved`` or ``rejected``; no
one can check that, and its policy says so (``unchecked=True``).

No kind registers a ``ReconHook``: the engine wires it from each policy.
``bad_judge_app`` is the same application whose payout judge answers with
an object that has no ``to_json()`` (nor says what it returns).

Run it: ``saga … --app tests.recon_kinds_app:app``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from saga import Application, Machine, ReconPolicy, Registry, State, Transition
from saga.recon import ContradictedDecision, Decision

PAYOUT = Machine(
    "payout",
    states=[
        State("requested", initial=True),
        State("payout_unknown"),
        State("sent", terminal=True),
        State("failed", terminal=True),
    ],
    transitions=[
        Transition("transfer_unknown", source="requested", target="payout_unknown"),
        Transition("transfer_done", source="requested", target="sent"),
        Transition("resolve_paid", source="payout_unknown", target="sent"),
        Transition("resolve_failed", source="payout_unknown", target="failed"),
        Transition("cancel", source="requested", target="failed"),
    ],
)

EXPENSE = Machine(
    "expense",
    states=[
        State("submitted", initial=True),
        State("expense_limbo"),
        State("approved", terminal=True),
        State("rejected", terminal=True),
    ],
    transitions=[
        Transition("lost", source="submitted", target="expense_limbo"),
        Transition("reject", source="submitted", target="rejected"),
        Transition("resolve_approved", source="expense_limbo", target="approved"),
        Transition("resolve_rejected", source="expense_limbo", target="rejected"),
    ],
)


@dataclass(frozen=True)
class BankSays:
    """What the bank said about a payout when an operator decided (an Observation)."""

    status: str

    def to_json(self) -> dict[str, Any]:
        return {"bank": self.status}


class BankJudge:
    """A payout decision is checked against the bank's answer."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def observe(self, decision: Decision) -> BankSays:
        saga = self.ctx.sagas.get(decision.item.saga_id)
        return BankSays(str(saga.data.get("bank", "processing")))

    def check(self, tx: Any, decision: Decision, observation: Any) -> None:
        del tx
        if decision.outcome == "paid" and observation.status != "paid":
            raise ContradictedDecision(
                item_id=decision.item.id,
                outcome=decision.outcome,
                why=f"the bank says {observation.status} for the transfer",
            )


PAYOUT_RECON = ReconPolicy(
    state="payout_unknown",
    check_kind="payout.check",
    outcomes={"paid": "resolve_paid", "failed": "resolve_failed"},
    subject=lambda before: "transfer",
    human_reasons=frozenset({"transfer_unknown"}),
    judge=BankJudge,
)
EXPENSE_RECON = ReconPolicy(
    state="expense_limbo",
    check_kind="expense.check",
    outcomes={"approved": "resolve_approved", "rejected": "resolve_rejected"},
    subject=lambda before: "approval",
    human_reasons=frozenset({"lost"}),
    unchecked=True,
)

registry = Registry()
registry.register(PAYOUT)
registry.register(EXPENSE)
app = Application(
    name="money_desk",
    registry=registry,
    recon={"payout": PAYOUT_RECON, "expense": EXPENSE_RECON},
)


class Shrug:
    """An answer with no to_json(): what a judge must not return."""

    status = "paid"


class CarelessJudge(BankJudge):
    """A judge whose observation cannot be recorded (and whose annotation does not say)."""

    def observe(self, decision):
        del decision
        return Shrug()


class BareJudge(BankJudge):
    """A judge that says its observation is a Shrug: refused when an engine opens it."""

    def observe(self, decision: Decision) -> Shrug:  # type: ignore[override]
        del decision
        return Shrug()


bad_judge_app = dataclasses.replace(
    app,
    recon={
        "payout": dataclasses.replace(PAYOUT_RECON, judge=CarelessJudge),
        "expense": EXPENSE_RECON,
    },
)
