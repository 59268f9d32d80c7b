"""
The purchase saga's steps as job handlers.

Each step writes its intent (with a key derived from the saga) in one short
transaction, calls the provider outside any transaction, and records the
answer and the saga's transition in the fenced completion transaction of its
job.  A timeout is never read as a failure: it moves the saga to
``needs_reconciliation``, where the checker finds out what happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import structlog

from saga._codec import as_utc
from saga._faults import crash_point
from saga._handlers import Apply, JobKind, classify_error, error_text
from saga._jobs import NewJob, enqueue_in
from saga._queue import fence_in
from saga._recon import (
    CHECKER,
    OPERATORS,
    RECONCILE_KIND,
    ReconItem,
    ReconPolicy,
    event_log,
    get_item_in,
    record_observation,
    schedule_check,
)
from saga._records import SagaRecord
from saga._sagas import fire_in, get_in
from saga.exceptions import NotFound, TransitionNotAllowed
from steps import OutcomeUnknown, ProviderPayment, StepError, TransientError
from steps.purchase import payment_evidence, payment_key, read_payment, refund_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sqlalchemy.engine import RowMapping

    from saga._db import Tx
    from saga._engine import Engine
    from saga._queue import Job
    from steps import PaymentProvider, ProviderRefund
    from steps.errors import ErrorClass

log = structlog.get_logger(__name__)

QUEUE: Final = "purchase"
_OPEN: Final = ("reserved", "payment_pending")
_READING_EVENT: Final = {
    "paid": "payment_succeeded",
    "mismatch": "payment_succeeded",
    "pending": "payment_requested",
    "not_paid": "payment_failed",
}


class PurchaseSteps:
    """The job kinds of the purchase saga, bound to one engine and its provider."""

    def __init__(self, engine: Engine, policy: ReconPolicy | None = None) -> None:
        self.engine = engine
        self.db = engine.db
        self.registry = engine.registry
        self.policy = policy or ReconPolicy()

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider (the sandbox, unless the engine was given another)."""
        return self.engine.provider

    def kinds(self) -> list[JobKind]:
        """One job kind per step, plus the reconciliation checker."""

        def kind(name: str, handler: Callable[[Job], Any], **options: Any) -> JobKind:
            return JobKind(f"purchase.{name}", handler, queue=QUEUE, **options)

        return [
            kind("request_payment", self.request_payment, on_unknown=self.payment_unknown),
            kind("check_payment", self.check_payment, classify=_asking_again_is_safe),
            kind("cancel_payment", self.cancel_payment, classify=_asking_again_is_safe),
            kind("grant_access", self.grant_access),
            kind("revoke_access", self.revoke_access),
            kind("refund", self.refund, on_unknown=self.refund_unknown),
            JobKind(RECONCILE_KIND, self.reconcile, queue="reconciliation", max_attempts=5),
        ]

    # -- payment -----------------------------------------------------------------------

    def request_payment(self, job: Job) -> Any:
        """Write the intent, ask the provider to charge under its key, record the answer."""
        saga_id = str(job.payload["saga_id"])
        intent = self.db.transaction(lambda tx: _record_intent(tx, saga_id, job))
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
        return Apply(lambda tx: self._payment_answer(tx, saga_id, payment, cause="create answer"))

    def payment_unknown(self, tx: Tx, job: Job, error: StepError) -> None:
        """The create call's outcome is unknown: reconciliation, never a blind retry."""
        saga_id = str(job.payload["saga_id"])
        tx.run(
            "record_payment_answer",
            saga_id=saga_id,
            status="unknown",
            provider_ref=None,
            charged_minor=None,
            charged_currency=None,
        )
        payload = {"error": error.message, "evidence": error.evidence}
        if not self._fire(tx, saga_id, "payment_outcome_unknown", payload, cause=error.message):
            # The purchase moved on meanwhile; if money was taken after all, a
            # later look at the provider turns it into a refund.
            self._queue_step(tx, saga_id, "check_payment", delay=self.policy.first_check_seconds)

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
        return Apply(lambda tx: self._payment_answer(tx, saga_id, payment, cause="status check"))

    def cancel_payment(self, job: Job) -> Any:
        """Cancel an intent the purchase no longer wants; a late success becomes a refund."""
        saga_id = str(job.payload["saga_id"])
        intent = self.db.transaction(lambda tx: tx.one("get_payment", saga_id=saga_id), write=False)
        if intent is None or intent["status"] in ("succeeded", "failed", "cancelled"):
            return {"skipped": "nothing to cancel"}
        payment = self.provider.cancel_payment(key=intent["key"])
        if payment is None:
            return {"skipped": "the provider has no such payment"}
        return Apply(lambda tx: self._payment_answer(tx, saga_id, payment, cause="cancellation"))

    def _payment_answer(
        self, tx: Tx, saga_id: str, payment: ProviderPayment, *, cause: str
    ) -> dict[str, Any]:
        tx.run(
            "record_payment_answer",
            saga_id=saga_id,
            status=payment.status,
            provider_ref=payment.payment_id,
            charged_minor=payment.charged_minor,
            charged_currency=payment.currency,
        )
        saga = get_in(tx, saga_id)
        reading = read_payment(
            payment,
            amount_minor=int(saga.data["amount_minor"]),
            currency=str(saga.data["currency"]),
        )
        payload = {
            "provider_status": payment.status,
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
        }
        event = _READING_EVENT[reading]
        moved = self._fire(tx, saga_id, event, payload, cause=f"provider {cause}")
        if not moved and reading == "pending":
            # The purchase is over but the intent is alive: cancel it.
            self._queue_step(tx, saga_id, "cancel_payment", delay=0)
        return {"reading": reading, "event": event, "moved": moved}

    # -- access ------------------------------------------------------------------------

    def grant_access(self, job: Job) -> Apply[dict[str, Any]]:
        """Give the student access, in the completion transaction (an effect in this database)."""
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
        intent = self.db.transaction(
            lambda tx: _record_refund_intent(
                tx, job, payment, amount=amount, currency=charge.currency
            )
        )
        if intent is None:
            return {"skipped": "the purchase no longer waits for a refund"}
        refund = self.provider.refund(
            key=intent["key"], payment_id=charge.payment_id, amount_minor=amount
        )
        crash_point("refund.after_call")
        return Apply(lambda tx: self._refund_answer(tx, saga_id, refund))

    def refund_unknown(self, tx: Tx, job: Job, error: StepError) -> None:
        """The refund call's outcome is unknown: reconciliation, never a silent refunded."""
        saga_id = str(job.payload["saga_id"])
        tx.run("record_refund_answer", saga_id=saga_id, status="unknown", provider_ref=None)
        self._fire(
            tx,
            saga_id,
            "refund_outcome_unknown",
            {"error": error.message, "evidence": error.evidence},
            cause=error.message,
        )

    def _refund_answer(self, tx: Tx, saga_id: str, refund: ProviderRefund) -> dict[str, Any]:
        tx.run(
            "record_refund_answer",
            saga_id=saga_id,
            status=refund.status,
            provider_ref=refund.refund_id,
        )
        payload = {
            "refund_id": refund.refund_id,
            "status": refund.status,
            "amount_minor": refund.amount_minor,
        }
        if refund.status == "succeeded":
            self._fire(tx, saga_id, "refund_succeeded", payload, cause="provider refunded")
        elif refund.status == "failed":
            self._fire(tx, saga_id, "refund_failed", payload, cause="provider declined the refund")
        return {"refund": refund.status}

    def _refund_impossible(self, tx: Tx, saga_id: str, why: str) -> dict[str, Any]:
        self._fire(tx, saga_id, "refund_failed", {"error": why}, cause=why)
        return {"refund": "impossible", "why": why}

    # -- reconciliation checker --------------------------------------------------------

    def reconcile(self, job: Job) -> Any:
        """One automatic check of a reconciliation item: ask the provider, decide or wait."""
        item_id = str(job.payload["item_id"])
        item = self.db.transaction(lambda tx: get_item_in(tx, item_id), write=False)
        if (
            item.status != "open"
            or item.owner != CHECKER
            or item.attempts != job.payload["attempts"]
        ):
            return {"skipped": f"item is {item.status}, owned by {item.owner}"}
        saga = self.engine.sagas.get(item.saga_id)
        observation = self._observe(item, saga)
        return Apply(lambda tx: self._settle_check(tx, item, observation))

    def _observe(self, item: ReconItem, saga: SagaRecord) -> dict[str, Any]:
        key = payment_key(saga.id)
        try:
            if item.subject == "refund":
                refund = self.provider.refund_status(key=refund_key(key))
                reading = (
                    "none"
                    if refund is None
                    else {"succeeded": "refunded", "failed": "refund_failed"}.get(
                        refund.status, "pending"
                    )
                )
                found = (
                    None
                    if refund is None
                    else {"refund_id": refund.refund_id, "status": refund.status}
                )
                return {"by": CHECKER, "reading": reading, "refund": found}
            payment = self.provider.payment_status(key=key)
            if payment is not None and payment.status == "pending":
                payment = self.provider.cancel_payment(key=key) or payment
            reading = read_payment(
                payment,
                amount_minor=int(saga.data["amount_minor"]),
                currency=str(saga.data["currency"]),
            )
            return {"by": CHECKER, "reading": reading, "payment": dict(payment_evidence(payment))}
        except Exception as exc:  # noqa: BLE001 - no answer is "unknown": check again later
            return {"by": CHECKER, "reading": "unknown", "error": error_text(exc)}

    def _settle_check(self, tx: Tx, seen: ReconItem, observation: dict[str, Any]) -> dict[str, Any]:
        item = get_item_in(tx, seen.id, lock=True)
        if item.status != "open" or item.version != seen.version or item.owner != CHECKER:
            # An operator (or another check) acted first: this check loses, on the record.
            event_log(
                tx,
                item.id,
                CHECKER,
                "check_discarded",
                observation=observation,
                why=f"item is {item.status} at version {item.version}",
            )
            return {"discarded": True}
        reading = observation["reading"]
        outcome = _CHECKER_OUTCOMES.get((item.subject, reading))
        if outcome is not None:
            event = {
                "paid": "resolve_paid",
                "not_paid": "resolve_not_paid",
                "refund": "resolve_refund",
                "refunded": "resolve_refunded",
            }[outcome]
            tx.run("set_recon_evidence", id=item.id, evidence=record_observation(item, observation))
            fire_in(
                tx,
                self.registry,
                item.saga_id,
                event,
                payload={
                    "item_id": item.id,
                    "item_version": item.version,
                    "outcome": outcome,
                    "reason": f"provider says {reading}",
                },
                actor=CHECKER,
                cause=f"automatic check: provider says {reading}",
            )
            return {"resolved": outcome}
        attempts = item.attempts + 1
        escalate = attempts >= item.max_attempts or reading in ("mismatch", "refund_failed")
        row = tx.one(
            "record_recon_check",
            id=item.id,
            version=item.version,
            evidence=record_observation(item, observation),
            owner=OPERATORS if escalate else CHECKER,
            next_check_seconds=(
                self.policy.review_seconds if escalate else self.policy.next_check(attempts)
            ),
            escalated=escalate,
        )
        if row is None:  # pragma: no cover - the row is locked above
            return {"discarded": True}
        event_log(
            tx,
            item.id,
            CHECKER,
            "escalated" if escalate else "checked",
            reading=reading,
            attempts=attempts,
        )
        if not escalate:
            schedule_check(tx, get_item_in(tx, item.id))
        return {"reading": reading, "escalated": escalate}

    # -- plumbing ----------------------------------------------------------------------

    def _fire(
        self, tx: Tx, saga_id: str, event: str, payload: Mapping[str, Any], *, cause: str
    ) -> bool:
        """Fire ``event``; whether the saga moved (absorbed or refused: it had moved on)."""
        try:
            fired = fire_in(
                tx, self.registry, saga_id, event, payload=payload, actor="worker", cause=cause
            )
        except TransitionNotAllowed as exc:
            log.info("event_not_applicable", saga_id=saga_id, event=event, state=exc.state)
            return False
        return not fired.absorbed

    def _queue_step(self, tx: Tx, saga_id: str, action: str, *, delay: float) -> None:
        saga = get_in(tx, saga_id)
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

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Any) -> None:
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


# What an automatic check may settle on its own, by subject and reading.
_CHECKER_OUTCOMES: Final = {
    ("payment", "paid"): "paid",
    ("payment", "not_paid"): "not_paid",
    ("refund", "refunded"): "refunded",
    ("refund", "none"): "refund",
}


def _locked(tx: Tx, saga_id: str) -> SagaRecord:
    """The saga, locked first and read second (a read before the lock may be stale)."""
    row = tx.one("lock_saga", id=saga_id)
    if row is None:
        raise NotFound(kind="saga", key=saga_id)
    return SagaRecord.from_row(row)


def _record_intent(tx: Tx, saga_id: str, job: Job) -> RowMapping | None:
    """Write the payment intent, if this worker still owns the job and the hold still runs."""
    if not fence_in(tx, [job]):
        return None  # a stale worker writes nothing; its completion is refused too
    saga = _locked(tx, saga_id)
    if saga.state != "reserved":
        return None
    # The hold ran out: the timer is about to expire the purchase (it may have
    # read "no payment requested" already), so no payment may start now.
    if saga.deadline_at is not None and saga.deadline_at <= as_utc(tx.scalar("db_now")):
        return None
    tx.run(
        "record_payment_intent",
        saga_id=saga_id,
        key=payment_key(saga_id),
        amount_minor=saga.data["amount_minor"],
        currency=saga.data["currency"],
        method=saga.data["payment_method"],
    )
    row = tx.one("get_payment", saga_id=saga_id)
    if row is None or row["status"] != "intent":
        return None
    return row


def _record_refund_intent(
    tx: Tx, job: Job, payment: RowMapping, *, amount: int, currency: str
) -> RowMapping | None:
    saga_id = str(payment["saga_id"])
    if not fence_in(tx, [job]):
        return None
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
    )
    return tx.one("get_refund", saga_id=saga_id)


def hold_expiry_payload(engine: Engine, saga: SagaRecord, event: str) -> dict[str, Any]:
    """
    Ask the provider before a hold expires (DESIGN.md §1).

    Paid: the payload says so, with the amount (the purchase confirms, or goes
    to reconciliation if the amount is wrong).  Not paid, or still pending:
    the intent is cancelled first and the purchase expires; a success that
    still comes later is a late payment, refunded.  No answer: unknown, and
    the purchase goes to reconciliation.
    """
    if event != "hold_expired":
        return {}
    intent = engine.db.transaction(lambda tx: tx.one("get_payment", saga_id=saga.id), write=False)
    if intent is None:
        return {"provider_status": "not_paid", "checked": "no payment was requested"}
    try:
        payment = engine.provider.payment_status(key=intent["key"])
        if payment is not None and payment.status == "pending":
            payment = engine.provider.cancel_payment(key=intent["key"]) or payment
    except Exception as exc:  # noqa: BLE001 - no answer is an unknown outcome, never "not paid"
        return {"provider_status": "unknown", "error": error_text(exc)}
    reading = read_payment(
        payment, amount_minor=int(saga.data["amount_minor"]), currency=str(saga.data["currency"])
    )
    if reading in ("paid", "mismatch") and payment is not None:
        return {
            "provider_status": "paid",
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
        }
    return {"provider_status": "not_paid", "checked": dict(payment_evidence(payment))}
