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
The answers are applied by :mod:`saga.purchase.answers`; what the purchase's
transitions do themselves is :mod:`saga.purchase.hooks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga import Apply, JobKind, fire_in
from saga.codec import as_utc
from saga.exceptions import LeaseLost
from saga.faults import crash_point
from saga.purchase.answers import (
    OPEN,
    QUEUE,
    _locked,
    apply_payment,
    apply_refund,
    fire_quietly,
    queue_step,
)
from saga.purchase.payments import mark_payment_unknown, mark_refund_unknown
from saga.queue import classify_error, fenced
from steps import OutcomeUnknown, StepError, TransientError
from steps.purchase import payment_key, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import RowMapping

    from saga import Job, Registry, Tx
    from saga.store import Database
    from steps import PaymentProvider
    from steps.errors import ErrorClass


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
        Give the student access (a grant job queued before ``AccessHook`` took over).

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


def _asking_again_is_safe(exc: BaseException) -> ErrorClass:
    """A status question or a cancellation may be repeated: its unknown is transient."""
    return "transient" if isinstance(exc, OutcomeUnknown) else classify_error(exc)


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
