"""
An expense paid out through a payout provider: a user's application, for the testing kit.

An employee's expense is approved (a signed approval), then paid out through
a provider port (here a file sandbox).  The provider answers ``paid``,
``processing`` (it settles later) or nothing at all (the call timed out: the
outcome is unknown, and reconciliation asks the provider).  A payout still
processing after a day goes to reconciliation too.  The application's
invariant: an expense is ``paid`` only if the provider says so, and no
expense that ended otherwise has money paid out.

``expense_app(processing_counts_as_paid=True)`` plants a checker bug found
by hand once: a payout the provider reports ``processing`` is taken as
``paid``.  The kit's own tests (tests/kit/) and bench/kit_examples.py must
find it.

Payees drive the sandbox: ``slow-…`` payouts stay processing; ``ghost-…``
time out after the provider took the payout (it stays processing there);
``late-…`` time out after the provider paid; ``down-…`` time out before the
provider saw anything; anyone else is paid at once.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from saga import (
    Application,
    Apply,
    JobKind,
    Machine,
    OutcomeUnknown,
    ReconPolicy,
    Registry,
    SagaRecord,
    State,
    Step,
    Timeout,
    Transition,
    fire_in,
    guard,
)
from saga.exceptions import VersionConflict
from saga.ops import Invariant
from saga.recon import Checker, ContradictedDecision, Decision, ReconHook, ReconItem, Verdict

PAYEES = ("ann", "slow-ben", "ghost-cyd", "late-dan", "down-eve")


@guard
def signed(data: Any, payload: Any) -> bool:
    """The approver signed."""
    return bool(payload.get("signature"))


@guard
def from_the_provider(data: Any, payload: Any) -> bool:
    """The provider's answer about the payout came with it."""
    return bool(payload.get("payout"))


@guard
def on_an_item(data: Any, payload: Any) -> bool:
    """A decision on an open reconciliation item (the checker's or an operator's)."""
    return bool(payload.get("item_id"))


@guard
def after_a_call(data: Any, payload: Any) -> bool:
    """The step's call ended without an answer."""
    return bool(payload.get("error"))


EXPENSE = Machine(
    "expense",
    states=[
        State("submitted", initial=True),
        State("approved", actions=("send_payout",)),
        State("processing", timeout=Timeout("settlement_overdue", seconds=86400)),
        State("needs_reconciliation"),
        State("paid", terminal=True),
        State("failed", terminal=True),
        State("rejected", terminal=True),
        State("cancelled", terminal=True),
    ],
    transitions=[
        Transition("approve", source="submitted", target="approved", guard=signed),
        Transition("reject", source="submitted", target="rejected"),
        Transition("cancel", source="submitted", target="cancelled"),
        Transition("payout_paid", source="approved", target="paid", guard=from_the_provider),
        Transition(
            "payout_processing", source="approved", target="processing", guard=from_the_provider
        ),
        Transition(
            "payout_unknown", source="approved", target="needs_reconciliation", guard=after_a_call
        ),
        Transition("settlement_overdue", source="processing", target="needs_reconciliation"),
        Transition("resolve_paid", source="needs_reconciliation", target="paid", guard=on_an_item),
        Transition(
            "resolve_failed", source="needs_reconciliation", target="failed", guard=on_an_item
        ),
    ],
)


# -- the payout provider's sandbox ---------------------------------------------------------


@dataclass(frozen=True)
class Payout:
    """A payout at the provider."""

    id: str
    key: str
    payee: str
    status: str  # paid, processing

    def to_json(self) -> dict[str, Any]:
        """The evidence a decision keeps."""
        return asdict(self)


class SandboxPayouts:
    """A sandbox payout provider keeping its payouts as files in a folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key.replace(':', '_')}.json"

    def pay(self, *, key: str, payee: str) -> Payout:
        """Pay under ``key``; the same key again returns the same payout."""
        if payee.startswith("down-"):
            raise OutcomeUnknown("payout sandbox: timed out before anything happened")
        existing = self.status(key=key)
        if existing is not None:
            return existing
        status = "processing" if payee.startswith(("slow-", "ghost-")) else "paid"
        payout = Payout(f"po_{uuid.uuid4().hex[:12]}", key, payee, status)
        scratch = self.folder / f".{uuid.uuid4().hex}"
        scratch.write_text(json.dumps(asdict(payout)))
        scratch.replace(self._path(key))
        if payee.startswith(("ghost-", "late-")):
            raise OutcomeUnknown("payout sandbox: timed out after the provider took the payout")
        return payout

    def status(self, *, key: str) -> Payout | None:
        """The payout made under ``key``, if any."""
        path = self._path(key)
        return Payout(**json.loads(path.read_text())) if path.exists() else None


def sandbox_for(ctx: Any) -> SandboxPayouts:
    """The sandbox's folder, derived from the engine's database."""
    if ctx.db.dialect == "sqlite":
        return SandboxPayouts(Path(f"{ctx.db.url.database}.payouts"))
    where = ctx.db.search_path_schema or ctx.db.url.database
    return SandboxPayouts(Path(tempfile.gettempdir()) / f"saga-payouts-{where}")


def payout_key(saga_id: str) -> str:
    """One payout per expense."""
    return f"payout:{saga_id}"


def _reading(payout: Payout | None) -> str:
    return "none" if payout is None else payout.status


# -- the step ------------------------------------------------------------------------------


def steps(ctx: Any) -> list[JobKind]:
    """The job kind paying an approved expense out."""
    provider = sandbox_for(ctx)

    def send_payout(job: Any) -> Apply[dict[str, Any]]:
        saga = ctx.sagas.get(job.payload["saga_id"])
        payout = provider.pay(key=payout_key(saga.id), payee=saga.data["payee"])
        event = "payout_paid" if payout.status == "paid" else "payout_processing"

        def record(tx: Any) -> dict[str, Any]:
            try:
                fire_in(
                    tx,
                    ctx.registry,
                    saga.id,
                    event,
                    payload={"payout": payout.id, "provider_status": payout.status},
                    actor="worker",
                    cause=f"the provider says {payout.status}",
                    expected_version=job.payload["version"],
                )
            except VersionConflict:
                return {"skipped": "the expense moved on"}
            return {"payout": payout.id}

        return Apply(record)

    def payout_unknown(tx: Any, job: Any, error: Any) -> None:
        fire_in(
            tx,
            ctx.registry,
            job.payload["saga_id"],
            "payout_unknown",
            payload={"error": error.message},
            actor="worker",
            cause=error.message,
        )

    return [
        Step(send_payout, on_unknown=payout_unknown, timeout_seconds=30).kind(
            "expense", "send_payout"
        )
    ]


# -- reconciliation: was it paid? ----------------------------------------------------------


def _judge(ctx: Any) -> PayoutJudge:
    return PayoutJudge(ctx)


RECON = ReconPolicy(
    check_kind="expense.check_payout",
    outcomes={"paid": "resolve_paid", "failed": "resolve_failed"},
    subject=lambda before: "payout",
    first_check_seconds=30.0,
    # An operator's decision is checked against the provider's answer.
    judge=_judge,
)


def checker_of(*, processing_counts_as_paid: bool) -> Any:
    """The automatic check: ask the provider about the payout (with the planted bug, or not)."""
    outcomes = {"paid": "paid", "none": "failed"}
    if processing_counts_as_paid:
        outcomes["processing"] = "paid"  # the planted bug: processing is not paid yet

    def checker(ctx: Any) -> list[JobKind]:
        provider = sandbox_for(ctx)

        def look(item: ReconItem, saga: SagaRecord) -> Payout | None:
            return provider.status(key=payout_key(saga.id))

        def decide(tx: Any, item: ReconItem, payout: Payout | None) -> Verdict:
            reading = _reading(payout)
            observation = {"payout": None if payout is None else payout.to_json()}
            return Verdict(reading=reading, observation=observation, outcome=outcomes.get(reading))

        return [Checker(ctx.db, ctx.registry, RECON, look=look, decide=decide).kind()]

    return checker


@dataclass(frozen=True)
class Seen:
    """What the provider said when an operator decided."""

    payout: Payout | None

    def to_json(self) -> dict[str, Any]:
        return {"payout": None if self.payout is None else self.payout.to_json()}


class PayoutJudge:
    """An operator's decision is checked against the provider's answer."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def observe(self, decision: Decision) -> Seen:
        return Seen(sandbox_for(self.ctx).status(key=payout_key(decision.item.saga_id)))

    def check(self, tx: Any, decision: Decision, observation: Any) -> None:
        reading = _reading(observation.payout)
        if reading != {"paid": "paid", "failed": "none"}[decision.outcome]:
            raise ContradictedDecision(
                item_id=decision.item.id,
                outcome=decision.outcome,
                why=f"the payout provider says {reading}",
            )


# -- the invariant -------------------------------------------------------------------------


def invariants(ctx: Any) -> list[Invariant]:
    """Paid means the provider paid; an expense that ended otherwise had nothing paid out."""
    provider = sandbox_for(ctx)
    rule = Invariant(
        "money_matches_state",
        "an expense is paid only if the provider paid it; no other ended expense was paid",
    )
    for saga in ctx.instances.list(kind="expense", limit=10_000):
        reading = _reading(provider.status(key=payout_key(saga.id)))
        if saga.state == "paid":
            rule.check(reading == "paid", f"expense {saga.id} is paid; the provider says {reading}")
        elif saga.state in ("failed", "rejected", "cancelled"):
            rule.check(
                reading == "none", f"expense {saga.id} is {saga.state}; the provider says {reading}"
            )
    return [rule]


# -- the application -----------------------------------------------------------------------


def expense_app(
    *, processing_counts_as_paid: bool = False, machine: Machine = EXPENSE
) -> Application:
    """The expense application (with the planted checker bug, if asked; another machine)."""
    registry = Registry()
    registry.register(machine, hooks=[ReconHook(RECON)], steps=steps)
    return Application(
        name="expenses",
        registry=registry,
        jobs=checker_of(processing_counts_as_paid=processing_counts_as_paid),
        invariants=invariants,
        services=sandbox_for,
        recon=RECON,
    )


app = expense_app()
