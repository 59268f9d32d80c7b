"""
A second application, written only with the public API: course enrollment.

A student asks to enroll; the school sends a contract for e-signature through
a provider port (here a sandbox); the student has a deadline to sign; the
e-signature service calls back when the contract is signed or declined.  A
contract whose sending timed out is an unknown outcome: reconciliation asks
the provider whether it exists, and an operator's decision is checked
against it.  Withdrawing voids the contract (the compensation).

The e-signature provider's port and its sandbox are
:mod:`saga.examples.enrollment_esign`'s.

Run it: ``saga worker --app saga.examples.enrollment:app``; the service's
callbacks arrive with ``saga messages deliver --source esign …``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from saga import (
    Application,
    Apply,
    Context,
    JobKind,
    Machine,
    ReconPolicy,
    Registry,
    Route,
    SagaRecord,
    State,
    Step,
    Timeout,
    Transition,
    Tx,
    by_saga_id,
    fire_in,
)
from saga.examples.enrollment_esign import Envelope, sandbox_for
from saga.exceptions import VersionConflict
from saga.ops import Invariant
from saga.recon import Checker, ContradictedDecision, Decision, ReconHook, ReconItem, Verdict
from saga.store import SqlComponent

if TYPE_CHECKING:
    from saga.sagas import Change

_SIGNING = Timeout("signature_overdue", seconds_from="sign_seconds", since="created")

ENROLLMENT = Machine(
    "enrollment",
    states=[
        State("requested", initial=True, timeout=_SIGNING, actions=("send_contract",)),
        State("contract_sent", timeout=_SIGNING),
        State("enrolled", terminal=True),
        State("withdrawn", terminal=True, actions=("void_contract",)),
        State("needs_reconciliation"),
    ],
    transitions=[
        Transition("contract_sent", source="requested", target="contract_sent"),
        Transition("send_unknown", source="requested", target="needs_reconciliation"),
        Transition("signed", source="contract_sent", target="enrolled"),
        Transition("declined", source="contract_sent", target="withdrawn"),
        Transition("signature_overdue", source=("requested", "contract_sent"), target="withdrawn"),
        Transition("cancel", source=("requested", "contract_sent"), target="withdrawn"),
        Transition("resolve_sent", source="needs_reconciliation", target="contract_sent"),
        Transition("resolve_not_sent", source="needs_reconciliation", target="withdrawn"),
    ],
)


def contract_key(saga_id: str) -> str:
    """The contract's idempotency key, from the saga: one contract per enrollment."""
    return f"contract:{saga_id}"


# -- steps ---------------------------------------------------------------------------------


def steps(ctx: Any) -> list[JobKind]:
    """The job kinds running the enrollment's actions."""
    signatures = sandbox_for(ctx)

    def send_contract(job: Any) -> Apply[dict[str, Any]]:
        saga = ctx.sagas.get(job.payload["saga_id"])
        if saga.version != job.payload["version"]:
            # Withdrawn (its deadline passed) while this step waited for a retry:
            # a contract sent now could be signed by a student who is not enrolling.
            return Apply(lambda tx: {"skipped": "the enrollment moved on"})
        envelope = signatures.send(key=contract_key(saga.id), signer=saga.data["student"])

        def record(tx: Any) -> dict[str, Any]:
            try:
                fire_in(
                    tx,
                    ctx.registry,
                    saga.id,
                    "contract_sent",
                    payload={"envelope": envelope.id},
                    actor="worker",
                    cause="contract sent for signature",
                    expected_version=job.payload["version"],
                )
            except VersionConflict:
                # It moved on while the contract left: take the contract back.
                signatures.void(key=contract_key(saga.id))
                return {"skipped": "the enrollment moved on", "voided": envelope.id}
            return {"envelope": envelope.id}

        return Apply(record)

    def send_unknown(tx: Any, job: Any, error: Any) -> None:
        fire_in(
            tx,
            ctx.registry,
            job.payload["saga_id"],
            "send_unknown",
            payload={"error": error.message},
            actor="worker",
            cause=error.message,
        )

    def void_contract(job: Any) -> dict[str, Any]:
        voided = signatures.void(key=contract_key(job.payload["saga_id"]))
        return {"envelope": None if voided is None else voided.status}

    return [
        Step(send_contract, on_unknown=send_unknown, timeout_seconds=30).kind(
            "enrollment", "send_contract"
        ),
        Step(void_contract).kind("enrollment", "void_contract"),
    ]


# -- reconciliation: did the contract leave? -------------------------------------------------


def _reading(envelope: Envelope | None) -> str:
    return "none" if envelope is None else envelope.status


def checker(ctx: Any) -> list[JobKind]:
    """The automatic check: ask the provider whether the contract exists."""
    signatures = sandbox_for(ctx)

    def look(item: ReconItem, saga: SagaRecord) -> Envelope | None:
        return signatures.status(key=contract_key(saga.id))

    def decide(tx: Any, item: ReconItem, envelope: Envelope | None) -> Verdict:
        reading = _reading(envelope)
        outcome = {"none": "not_sent", "sent": "sent"}.get(reading)
        observation = {"envelope": None if envelope is None else asdict(envelope)}
        return Verdict(reading=reading, observation=observation, outcome=outcome)

    return [Checker(ctx.db, ctx.registry, RECON, look=look, decide=decide).kind()]


@dataclass(frozen=True)
class Seen:
    """What the provider said when an operator decided."""

    envelope: Envelope | None

    def to_json(self) -> dict[str, Any]:
        """The observation as recorded beside the decision."""
        return {"envelope": None if self.envelope is None else asdict(self.envelope)}


class EnvelopeJudge:
    """An operator's decision is checked against the provider's answer."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def observe(self, decision: Decision) -> Seen:
        """Ask the provider about the decision's contract."""
        return Seen(sandbox_for(self.ctx).status(key=contract_key(decision.item.saga_id)))

    def check(self, tx: Any, decision: Decision, observation: Any) -> None:
        """Refuse a decision the provider's answer contradicts."""
        reading = _reading(observation.envelope)
        wants = {"sent": ("sent",), "not_sent": ("none",)}[decision.outcome]
        if reading not in wants:
            raise ContradictedDecision(
                item_id=decision.item.id,
                outcome=decision.outcome,
                why=f"the e-signature provider says {reading} for the contract",
            )


RECON = ReconPolicy(
    check_kind="enrollment.check_contract",
    outcomes={"sent": "resolve_sent", "not_sent": "resolve_not_sent"},
    subject=lambda before: "contract",
    first_check_seconds=30.0,
    # An operator's decision is checked against the provider's answer.
    judge=EnvelopeJudge,
)


# -- its own table: the contract ledger -----------------------------------------------------

# saga/examples/enrollment_sql/<dialect>/: its migrations and its named queries.
SQL = SqlComponent.in_package("enrollment", "saga.examples", "enrollment_sql")


class ContractLedger:
    """Writes the ledger in the transaction that moves the enrollment (a SagaHook)."""

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing is sent yet."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """A contract that left gets its row; an enrollment that ended closes it."""
        del before, change
        if after.state == "contract_sent":
            tx.run(
                "enrollment_contract_sent",
                saga_id=after.id,
                contract_key=contract_key(after.id),
                signer=after.data["student"],
            )
        elif after.state in ("enrolled", "withdrawn"):
            tx.run("enrollment_contract_closed", saga_id=after.id, outcome=after.state)


def figures(ctx: Any) -> dict[str, Any]:
    """``saga stats``: contracts by outcome, from its own table."""
    rows = ctx.db.transaction(lambda tx: tx.all("enrollment_contracts_sent"), write=False)
    return {"contracts": {row["outcome"]: row["contracts"] for row in rows}}


# -- invariants ----------------------------------------------------------------------------


def invariants(ctx: Any) -> list[Invariant]:
    """Enrolled means the provider holds a completed contract; withdrawn, none left to sign."""
    signatures = sandbox_for(ctx)
    rule = Invariant(
        "enrolled_means_signed",
        "every enrolled student signed at the provider; no withdrawn one can still sign",
    )
    ledger = Invariant(
        "contract_ledger", "every contract that left has its ledger row, closed as its saga ended"
    )
    gaps = {
        row["id"]: row["outcome"]
        for row in ctx.db.transaction(lambda tx: tx.all("enrollment_ledger_gaps"), write=False)
    }
    for saga in ctx.instances.list(kind="enrollment", limit=10_000):
        ledger.check(
            saga.id not in gaps,
            f"enrollment {saga.id} is {saga.state}; its ledger row says {gaps.get(saga.id)}",
        )
        envelope = signatures.status(key=contract_key(saga.id))
        if saga.state == "enrolled":
            rule.check(
                envelope is not None and envelope.status == "completed",
                f"enrollment {saga.id} is enrolled; the provider says {_reading(envelope)}",
            )
        elif saga.state == "withdrawn":
            rule.check(
                envelope is None or envelope.status != "sent",
                f"enrollment {saga.id} is withdrawn; its contract can still be signed",
            )
    return [rule, ledger]


# -- the application -----------------------------------------------------------------------


class School:
    """Its services, of its own class: what its users reach as ``engine.services``."""

    def __init__(self, ctx: Context) -> None:
        self.signatures = sandbox_for(ctx)


registry = Registry()
registry.register(ENROLLMENT, hooks=[ReconHook(RECON), ContractLedger()], steps=steps)
app = Application(
    name="enrollment",
    registry=registry,
    jobs=checker,
    invariants=invariants,
    figures=figures,
    sql=SQL,
    services=School,
    recon=RECON,
    routes=(
        Route(
            source="esign",
            type="envelope.completed",
            correlate=by_saga_id("reference"),
            event="signed",
        ),
        Route(
            source="esign",
            type="envelope.declined",
            correlate=by_saga_id("reference"),
            event="declined",
        ),
    ),
)
