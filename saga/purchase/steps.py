"""
The purchase saga's steps as job handlers.

Each step writes its intent (with a key derived from the saga) in one short
fenced transaction, calls the provider outside any transaction, and records
the answer and the saga's transition in the fenced completion transaction
of its job.  Writing the payment intent is also what moves the purchase from
``reserved`` ("payment not yet requested") to ``payment_pending``.  A timeout
is never read as a failure: it moves the saga to ``needs_reconciliation``,
where the checker finds out what happened.

Every effect rests on the provider's answer read by key; the engine's money
records take that answer and are never rewritten (see :mod:`saga.purchase.payments`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from saga import Apply, JobKind, SagaRecord, fire_in
from saga.codec import as_utc
from saga.exceptions import LeaseLost, TransitionNotAllowed
from saga.faults import crash_point
from saga.ops import get_logger
from saga.purchase.payments import (
    mark_payment_unknown,
    mark_refund_unknown,
    payment_record,
    record_payment,
    record_refund,
    refund_evidence,
)
from saga.queue import NewJob, classify_error, enqueue_in, error_text, fenced
from saga.recon import open_review
from saga.sagas import lock_in
from steps import OutcomeUnknown, ProviderPayment, StepError, TransientError
from steps.purchase import payment_evidence, payment_key, read_payment, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqlalchemy.engine import RowMapping

    from saga import Job, Registry, Tx
    from saga.sagas import Change
    from saga.store import Database
    from steps import PaymentProvider, ProviderRefund
    from steps.errors import ErrorClass

log = get_logger(__name__)

QUEUE: Final = "purchase"
OPEN: Final = ("reserved", "payment_pending")
# Which saga event a provider's reading of a payment is.  "pending" is none:
# the purchase already waits in payment_pending.
PAYMENT_EVENT: Final = {
    "paid": "payment_succeeded",
    "mismatch": "payment_succeeded",
    "not_paid": "payment_failed",
}
REFUND_EVENT: Final = {"succeeded": "refund_succeeded", "failed": "refund_failed"}


class PurchaseSteps:
    """The job kinds of the purchase saga, bound to a database, its sagas and a provider."""

    def __init__(
        self, db: Database, registry: Registry, provider: Callable[[], PaymentProvider]
    ) -> None:
        self.db = db
        self.registry = registry
        self._provider = provider

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider."""
        return self._provider()

    def kinds(self) -> list[JobKind]:
        """One job kind per step."""

        def kind(name: str, handler: Callable[[Job], Any], **options: Any) -> JobKind:
            return JobKind(f"purchase.{name}", handler, queue=QUEUE, **options)

        return [
            kind("request_payment", self.request_payment, on_unknown=self.payment_unknown),
            kind("check_payment", self.check_payment, classify=_asking_again_is_safe),
            kind("cancel_payment", self.cancel_payment, classify=_asking_again_is_safe),
            kind("grant_access", self.grant_access),
            kind("revoke_access", self.revoke_access),
            kind("refund", self.refund, on_unknown=self.refund_unknown),
        ]

    # -- payment -----------------------------------------------------------------------

    def request_payment(self, job: Job) -> Any:
        """Write the intent, ask the provider to charge under its key, record the answer."""
        saga_id = str(job.payload["saga_id"])
        try:
            intent = fenced(self.db, job, lambda tx: _record_intent(tx, self.registry, saga_id))
        except LeaseLost:
            return {"skipped": "the lease ran out before the intent committed; nothing was kept"}
        if intent is None:
            return {"skipped": "the purchase no longer waits for a payment request"}
        crash_point("request_payment.before_call")
        payment = self.provider.create_payment(
            key=intent["key"],
            amount_minor=int(intent["amount_minor"]),
            currency=intent["currency"],
            method=intent["method"],
            reference=saga_id,
        )
        crash_point("request_payment.after_call")
        return Apply(
            lambda tx: apply_payment(
                tx, self.registry, saga_id, payment, actor="worker", cause="provider create answer"
            )
        )

    def payment_unknown(self, tx: Tx, job: Job, error: StepError) -> None:
        """The create call's outcome is unknown: reconciliation, never a blind retry."""
        saga_id = str(job.payload["saga_id"])
        mark_payment_unknown(tx, saga_id)
        payload = {"error": error.message, "evidence": error.evidence}
        fired = fire_quietly(
            tx, self.registry, saga_id, "payment_outcome_unknown", payload, cause=error.message
        )
        if fired != "applied":
            # The purchase moved on meanwhile; if money was taken after all, a
            # later look at the provider turns it into a refund.
            queue_step(tx, saga_id, "check_payment", delay=2.0)

    def check_payment(self, job: Job) -> Any:
        """Ask the provider about the payment and act on a late success or a stuck intent."""
        saga_id = str(job.payload["saga_id"])
        intent = self.db.transaction(lambda tx: tx.one("get_payment", saga_id=saga_id), write=False)
        if intent is None:
            return {"skipped": "no payment was requested"}
        payment = self.provider.payment_status(key=intent["key"])
        if payment is not None and payment.status == "pending":
            payment = self.provider.cancel_payment(key=intent["key"]) or payment
        if payment is None:
            return {"reading": "not_paid", "found": False}
        if payment.status == "pending" and job.payload.get("late"):
            # Still in flight after a cancellation request: look again later.
            msg = f"payment {payment.payment_id} is still pending"
            raise TransientError(msg)
        return Apply(
            lambda tx: apply_payment(
                tx, self.registry, saga_id, payment, actor="worker", cause="provider status check"
            )
        )

    def cancel_payment(self, job: Job) -> Any:
        """Cancel an intent the purchase no longer wants; a late success becomes a refund."""
        saga_id = str(job.payload["saga_id"])
        intent = self.db.transaction(lambda tx: tx.one("get_payment", saga_id=saga_id), write=False)
        if intent is None or intent["status"] in ("succeeded", "failed", "cancelled"):
            return {"skipped": "nothing to cancel"}
        payment = self.provider.cancel_payment(key=intent["key"])
        if payment is None:
            return {"skipped": "the provider has no such payment"}
        crash_point("cancel_payment.after_call")
        return Apply(
            lambda tx: apply_payment(
                tx, self.registry, saga_id, payment, actor="worker", cause="provider cancellation"
            )
        )

    # -- access ------------------------------------------------------------------------

    def grant_access(self, job: Job) -> Apply[dict[str, Any]]:
        """
        Give the student access (a grant job queued before :class:`AccessHook` took over).

        Confirmed purchases get their access in the confirming transaction
        now; the kind stays for grant jobs a database still holds from
        before, and behaves as it always did.
        """
        saga_id = str(job.payload["saga_id"])

        def grant(tx: Tx) -> dict[str, Any]:
            saga = _locked(tx, saga_id)
            if saga.state != "confirmed":  # late: the money is already going back
                return {"skipped": f"purchase is {saga.state}"}
            tx.run("grant_access", saga_id=saga_id, student_id=saga.data["student_id"])
            return {"granted": saga_id}

        return Apply(grant)

    def revoke_access(self, job: Job) -> Apply[dict[str, Any]]:
        """Take access back from a purchase whose money goes back."""
        saga_id = str(job.payload["saga_id"])
        return Apply(lambda tx: {"revoked": tx.run("revoke_access", saga_id=saga_id)})

    # -- refund ------------------------------------------------------------------------

    def refund(self, job: Job) -> Any:
        """Write the refund intent (one per payment), refund under its key, record the answer."""
        saga_id = str(job.payload["saga_id"])
        payment = self.db.transaction(
            lambda tx: tx.one("get_payment", saga_id=saga_id), write=False
        )
        if payment is None:
            return Apply(lambda tx: self._refund_impossible(tx, saga_id, "no payment was made"))
        charge = self.provider.payment_status(key=payment["key"])
        if charge is None or not charge.money_taken:
            return Apply(
                lambda tx: self._refund_impossible(
                    tx, saga_id, f"the provider holds no money for {payment['key']}"
                )
            )
        amount = int(charge.charged_minor or 0)
        try:
            intent = fenced(
                self.db,
                job,
                lambda tx: _record_refund_intent(
                    tx, payment, amount=amount, currency=charge.currency
                ),
            )
        except LeaseLost:
            return {"skipped": "the lease ran out before the intent committed; nothing was kept"}
        if intent is None:
            return {"skipped": "the purchase no longer waits for a refund"}
        crash_point("refund.before_call")
        refund = self.provider.refund(
            key=intent["key"], payment_id=charge.payment_id, amount_minor=amount
        )
        crash_point("refund.after_call")
        return Apply(
            lambda tx: apply_refund(
                tx, self.registry, saga_id, refund, actor="worker", cause="provider refund answer"
            )
        )

    def refund_unknown(self, tx: Tx, job: Job, error: StepError) -> None:
        """The refund call's outcome is unknown: reconciliation, never a silent refunded."""
        saga_id = str(job.payload["saga_id"])
        mark_refund_unknown(tx, saga_id)
        fire_quietly(
            tx,
            self.registry,
            saga_id,
            "refund_outcome_unknown",
            {"error": error.message, "evidence": error.evidence},
            cause=error.message,
        )

    def _refund_impossible(self, tx: Tx, saga_id: str, why: str) -> dict[str, Any]:
        fire_quietly(tx, self.registry, saga_id, "refund_failed", {"error": why}, cause=why)
        return {"refund": "impossible", "why": why}


# -- applying the provider's answers --------------------------------------------------


def apply_payment(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    payment: ProviderPayment,
    *,
    actor: str,
    cause: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """
    Act on what the provider said about a purchase's payment, in ``tx``.

    The answer is recorded first; one that contradicts a settled record goes
    to a human as evidence and moves nothing.  Then the reading moves the
    saga: paid (or another amount: reconciliation) or not paid.  A payment
    still pending for a purchase that is over is cancelled.
    """
    saga = _locked(tx, saga_id)
    if not record_payment(tx, saga_id, payment):
        item = open_review(
            tx,
            saga_id,
            subject="payment",
            reason="provider_contradicts_record",
            evidence={
                "what": f"the provider's answer ({cause}) differs from the settled record",
                "provider": dict(payment_evidence(payment)),
                "record": payment_record(tx.one("get_payment", saga_id=saga_id)),
            },
            actor=actor,
        )
        return {"reading": "contradiction", "review_item": item, "outcome": "absorbed"}
    reading = read_payment(
        payment, amount_minor=int(saga.data["amount_minor"]), currency=str(saga.data["currency"])
    )
    event = PAYMENT_EVENT.get(reading)
    outcome = "absorbed"
    if event is not None:
        payload = {
            "provider_status": payment.status,
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
            **(extra or {}),
        }
        outcome = fire_quietly(tx, registry, saga_id, event, payload, cause=cause, actor=actor)
    elif saga.state not in OPEN:
        # The purchase is over but the intent is alive: cancel it.
        queue_step(tx, saga_id, "cancel_payment", delay=0)
    return {"reading": reading, "event": event, "outcome": outcome}


def apply_refund(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    refund: ProviderRefund,
    *,
    actor: str,
    cause: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Act on what the provider said about a purchase's refund, in ``tx`` (like payments)."""
    _locked(tx, saga_id)
    if not record_refund(tx, saga_id, refund):
        item = open_review(
            tx,
            saga_id,
            subject="refund",
            reason="provider_contradicts_record",
            evidence={
                "what": f"the provider's answer ({cause}) differs from the settled refund",
                "provider": dict(refund_evidence(refund)),
            },
            actor=actor,
        )
        return {"refund": "contradiction", "review_item": item, "outcome": "absorbed"}
    event = REFUND_EVENT.get(refund.status)
    outcome = "absorbed"
    if event is not None:
        payload = {
            "refund_id": refund.refund_id,
            "status": refund.status,
            "amount_minor": refund.amount_minor,
            **(extra or {}),
        }
        outcome = fire_quietly(tx, registry, saga_id, event, payload, cause=cause, actor=actor)
    return {"refund": refund.status, "event": event, "outcome": outcome}


def fire_quietly(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    event: str,
    payload: Mapping[str, Any],
    *,
    cause: str,
    actor: str = "worker",
) -> str:
    """
    Fire ``event``: ``applied``, ``absorbed`` (a final state ignored it) or ``not_applicable``.

    A step's event may come after the purchase moved on; that is an answer,
    not an error.
    """
    try:
        fired = fire_in(tx, registry, saga_id, event, payload=payload, actor=actor, cause=cause)
    except TransitionNotAllowed as exc:
        log.info("event_not_applicable", saga_id=saga_id, saga_event=event, state=exc.state)
        return "not_applicable"
    return "absorbed" if fired.absorbed else "applied"


def queue_step(tx: Tx, saga_id: str, action: str, *, delay: float) -> None:
    """Queue one more run of a purchase step, outside its state's own actions."""
    saga = _locked(tx, saga_id)
    enqueue_in(
        tx,
        NewJob(
            id=f"step:{saga_id}:{saga.version}:{action}:late",
            queue=QUEUE,
            kind=f"purchase.{action}",
            payload={"saga_id": saga_id, "action": action},
            saga_id=saga_id,
            delay_seconds=delay,
        ),
    )


def _asking_again_is_safe(exc: BaseException) -> ErrorClass:
    """A status question or a cancellation may be repeated: its unknown is transient."""
    return "transient" if isinstance(exc, OutcomeUnknown) else classify_error(exc)


class LatePaymentHook:
    """
    Look at the provider again after a purchase ended without a known payment.

    A purchase can expire or be cancelled while its payment is pending or its
    outcome unknown; if money arrives and no webhook says so, this check turns
    it into a refund.  Queued in the transition's own transaction.
    """

    def __init__(self, delay_seconds: float) -> None:
        self.delay_seconds = delay_seconds

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Queue a late check when a purchase ends with its payment unsettled."""
        if after.state not in ("expired", "cancelled"):
            return
        payment = tx.one("get_payment", saga_id=after.id)
        if payment is None or payment["status"] not in ("intent", "pending", "unknown"):
            return
        enqueue_in(
            tx,
            NewJob(
                id=f"step:{after.id}:{after.version}:check_payment:late",
                queue=QUEUE,
                kind="purchase.check_payment",
                payload={"saga_id": after.id, "late": True},
                saga_id=after.id,
                delay_seconds=self.delay_seconds,
            ),
        )


class AccessHook:
    """
    Give the student access in the transaction that confirms the purchase.

    Access is a row in this database, not a call to the outside: granted with
    the confirmation, "confirmed" and "has access" are one fact (DESIGN.md:
    confirmed means paid, verified, access granted) and the purchase needs no
    job, claim and completion for it.  Taking access back stays a step of
    ``refund_pending`` (``revoke_access``).
    """

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Grant access when the purchase becomes confirmed."""
        if after.state == "confirmed" and before.state != "confirmed":
            tx.run("grant_access", saga_id=after.id, student_id=after.data["student_id"])


class ExpiryAnswerHook:
    """
    Record what the provider said when a hold expired, with the transition it decided.

    The timer asks the provider before it fires (:func:`hold_expiry_payload`);
    what it heard is money evidence like any other answer, so it is written
    to the payment record in the transition's own transaction.
    """

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Record the payment the expiry check saw, if it saw one."""
        seen = change.payload.get("provider_payment")
        if change.transition.event != "hold_expired" or not seen or not seen.get("found"):
            return
        record_payment(
            tx,
            after.id,
            ProviderPayment(
                payment_id=str(seen["payment_id"]),
                key=payment_key(after.id),
                status=seen["status"],
                amount_minor=int(seen["amount_minor"]),
                charged_minor=None if seen["charged_minor"] is None else int(seen["charged_minor"]),
                currency=str(seen["currency"]),
            ),
        )


def _locked(tx: Tx, saga_id: str) -> SagaRecord:
    """The saga, locked first and read second (a read before the lock may be stale)."""
    return lock_in(tx, saga_id)


def _record_intent(tx: Tx, registry: Registry, saga_id: str) -> RowMapping | None:
    """
    Write the payment intent and move the purchase to ``payment_pending``.

    Run :func:`fenced`: kept only if this worker still owns the job at the
    end, and only while the hold still runs.  A purchase already in
    ``payment_pending`` with an unanswered intent is a retry after a crash:
    the same key goes to the provider again.
    """
    saga = _locked(tx, saga_id)
    if saga.state not in OPEN:
        return None
    # The hold ran out: the timer is about to expire the purchase (it may have
    # read "no payment requested" already), so no payment may start now.  The
    # database clock decides: in the intent's own insert (a purchase in
    # reserved has no intent yet, so nothing written means just that), or
    # here for a retry.
    key = payment_key(saga_id)
    written = None
    if saga.state == "reserved":
        written = tx.one(
            "record_payment_intent",
            saga_id=saga_id,
            key=key,
            amount_minor=saga.data["amount_minor"],
            currency=saga.data["currency"],
            method=saga.data["payment_method"],
            **tx.lease_params,
        )
        if written is None:
            return None
        fire_in(
            tx,
            registry,
            saga_id,
            "payment_requested",
            payload={"key": key},
            actor="worker",
            cause="payment intent written",
        )
    elif saga.deadline_at is not None and saga.deadline_at <= as_utc(tx.scalar("db_now")):
        return None
    row = written or tx.one("get_payment", saga_id=saga_id)
    if row is None or row["status"] != "intent":
        return None
    return row


def _record_refund_intent(
    tx: Tx, payment: RowMapping, *, amount: int, currency: str
) -> RowMapping | None:
    """Write the refund intent under its stable key (run :func:`fenced`)."""
    saga_id = str(payment["saga_id"])
    saga = _locked(tx, saga_id)
    if saga.state != "refund_pending":
        return None
    tx.run(
        "record_refund_intent",
        saga_id=saga_id,
        payment_key=payment["key"],
        key=refund_key(payment["key"]),
        amount_minor=amount,
        currency=currency,
        reason=saga.data.get("_previous_state"),
        **tx.lease_params,
    )
    return tx.one("get_refund", saga_id=saga_id)


def hold_expiry_payload(
    db: Database, provider: PaymentProvider, saga: SagaRecord, event: str
) -> dict[str, Any]:
    """
    Ask the provider before a hold expires (DESIGN.md §1).

    Paid: the payload says so, with the amount (the purchase confirms, or goes
    to reconciliation if the amount is wrong).  Not paid, or still pending:
    the intent is cancelled first and the purchase expires; a success that
    still comes later is a late payment, refunded.  No answer: unknown, and
    the purchase goes to reconciliation.  What the provider said travels in
    the payload, and :class:`ExpiryAnswerHook` records it.
    """
    if event != "hold_expired":
        return {}
    intent = db.transaction(lambda tx: tx.one("get_payment", saga_id=saga.id), write=False)
    if intent is None:
        return {"provider_status": "not_paid", "checked": "no payment was requested"}
    try:
        payment = provider.payment_status(key=intent["key"])
        if payment is not None and payment.status == "pending":
            payment = provider.cancel_payment(key=intent["key"]) or payment
    except Exception as exc:  # noqa: BLE001 - no answer is an unknown outcome, never "not paid"
        return {"provider_status": "unknown", "error": error_text(exc)}
    reading = read_payment(
        payment, amount_minor=int(saga.data["amount_minor"]), currency=str(saga.data["currency"])
    )
    evidence = dict(payment_evidence(payment))
    if reading in ("paid", "mismatch") and payment is not None:
        return {
            "provider_status": "paid",
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
            "provider_payment": evidence,
        }
    return {"provider_status": "not_paid", "checked": evidence, "provider_payment": evidence}
