"""
The sandbox's card holds: authorize, capture, void (the purchase's version 2).

An authorization holds money on the buyer's card under its key; the capture
takes it, as a charge of the ledger made under the capture's key (read by
that key like any payment, refunded like one); the void releases it under
the void's key.  Each key replays its first answer, and refuses other
parameters, like a real provider's.  One authorization is captured or
voided, never both: a void after the capture changes nothing and says
"captured", a capture after the void fails.  The test payment methods act
here as on charges (:mod:`saga.purchase.sandbox_methods`): a decline at the
authorization, the timeouts at the capture (where the money moves),
``pm_late`` completing the hold right after the engine asks to void it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from saga.codec import digest
from saga.purchase._sandbox_rows import authorization_of, must, payment_of, same_params
from saga.purchase.sandbox_methods import (
    announce_authorization,
    announce_charge,
    authorization_body,
    authorization_outcome,
    queue_webhook,
    settle_due,
)
from steps import OutcomeUnknown, PaymentMethod, PermanentError

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

    from saga import Tx
    from saga.store import Database
    from steps import ProviderAuthorization, ProviderPayment


class SandboxHolds:
    """The card-hold half of the sandbox provider (:class:`~saga.purchase.sandbox.Sandbox`)."""

    db: Database

    def authorize(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderAuthorization:
        """Hold ``amount_minor`` under ``key``, the way ``method`` tells the sandbox to."""
        params = digest(
            {
                "amount_minor": amount_minor,
                "currency": currency,
                "method": method,
                "reference": reference,
            }
        )

        def work(tx: Tx) -> ProviderAuthorization:
            existing = tx.one("authorization_by_key", key=key)
            if existing is not None:
                return authorization_of(same_params(existing, params, key))
            status, held = authorization_outcome(method, amount_minor)
            inserted = tx.one(
                "insert_authorization",
                authorization_id=f"auth_{uuid.uuid4().hex[:20]}",
                key=key,
                params_digest=params,
                reference=reference,
                method=method,
                amount_minor=amount_minor,
                authorized_minor=held,
                currency=currency,
                status=status,
            )
            row = must(tx.one("authorization_by_key", key=key))
            if inserted is None:  # a concurrent call with the same key won
                return authorization_of(same_params(row, params, key))
            authorization = authorization_of(row)
            announce_authorization(tx, authorization, method, reference)
            return authorization

        return self.db.transaction(work)

    def authorization_status(self, *, key: str) -> ProviderAuthorization | None:
        """The authorization made under ``key``, or ``None``."""

        def work(tx: Tx) -> RowMapping | None:
            settle_due(tx)
            return tx.one("authorization_by_key", key=key)

        row = self.db.transaction(work)
        return None if row is None else authorization_of(row)

    def capture(self, *, key: str, authorization_id: str, amount_minor: int) -> ProviderPayment:
        """
        Take ``amount_minor`` of a held authorization under ``key``: a charge of the ledger.

        ``pm_timeout_before_charge`` times out before anything happened,
        ``pm_timeout_after_charge`` after the money was taken.  An
        authorization that is not held any more (voided, lapsed, declined,
        captured under another key) or holds less gives a failed charge.
        """
        params = digest({"authorization_id": authorization_id, "amount_minor": amount_minor})

        def work(tx: Tx) -> tuple[ProviderPayment, bool, str]:
            settle_due(tx)
            held = tx.one("lock_authorization", authorization_id=authorization_id)
            if held is None:
                raise PermanentError(f"sandbox: no authorization {authorization_id}")
            method = str(held["method"])
            existing = tx.one("charge_by_key", key=key)
            if existing is not None:
                return payment_of(same_params(existing, params, key)), False, method
            if method == PaymentMethod.TIMEOUT_BEFORE_CHARGE:
                raise OutcomeUnknown(
                    "sandbox: the capture call timed out before anything happened",
                    evidence={"sent": {"key": key, "authorization_id": authorization_id}},
                )
            takes = held["status"] == "authorized" and amount_minor <= int(
                held["authorized_minor"] or 0
            )
            payment_id = f"pay_{uuid.uuid4().hex[:20]}"
            inserted = tx.one(
                "insert_charge",
                payment_id=payment_id,
                key=key,
                params_digest=params,
                reference=held["reference"],
                method=method,
                amount_minor=amount_minor,
                charged_minor=amount_minor if takes else None,
                currency=held["currency"],
                status="succeeded" if takes else "failed",
            )
            row = must(tx.one("charge_by_key", key=key))
            if inserted is None:  # a concurrent call with the same key won
                return payment_of(same_params(row, params, key)), False, method
            if takes:
                self._move(tx, held, "captured", capture_id=payment_id)
            payment = payment_of(row)
            announce_charge(tx, payment, method, held["reference"])
            return payment, True, method

        payment, created, method = self.db.transaction(work)
        if created and payment.money_taken and method == PaymentMethod.TIMEOUT_AFTER_CHARGE:
            raise OutcomeUnknown(
                "sandbox: the capture call timed out after the money was taken",
                evidence={"sent": {"key": key, "authorization_id": authorization_id}},
            )
        return payment

    def void(self, *, key: str, authorization_id: str) -> ProviderAuthorization:
        """
        Release an authorization under ``key``; a captured one stays captured.

        A ``pm_late`` hold cannot be stopped any more: the void is taken as a
        request (the answer still says ``pending``), the hold completes right
        after with its webhook, and only a later void releases it.
        """

        def work(tx: Tx) -> ProviderAuthorization:
            settle_due(tx)
            done = tx.one("authorization_by_void_key", void_key=key)
            if done is not None:
                if done["authorization_id"] != authorization_id:
                    raise PermanentError(
                        f"sandbox: void key {key!r} was already used for another authorization"
                    )
                return authorization_of(done)
            row = tx.one("lock_authorization", authorization_id=authorization_id)
            if row is None:
                raise PermanentError(f"sandbox: no authorization {authorization_id}")
            if row["status"] == "pending" and row["method"] == PaymentMethod.LATE:
                self._move(tx, row, "authorized", authorized_minor=int(row["amount_minor"]))
                completed = authorization_of(must(tx.one("authorization_by_key", key=row["key"])))
                queue_webhook(
                    tx,
                    f"evt_{uuid.uuid4().hex[:20]}",
                    "authorization.succeeded",
                    authorization_body(completed, row["reference"]),
                    delay=0.2,
                )
                return authorization_of(row)
            if row["status"] in ("pending", "authorized"):
                self._move(tx, row, "voided", void_key=key)
            return authorization_of(must(tx.one("authorization_by_key", key=row["key"])))

        return self.db.transaction(work)

    @staticmethod
    def _move(
        tx: Tx,
        row: RowMapping,
        to: str,
        *,
        authorized_minor: int | None = None,
        capture_id: str | None = None,
        void_key: str | None = None,
    ) -> None:
        """Compare-and-set a locked authorization's status (it cannot have moved meanwhile)."""
        moved = tx.run(
            "set_authorization_status",
            authorization_id=row["authorization_id"],
            from_status=row["status"],
            to_status=to,
            authorized_minor=authorized_minor,
            capture_id=capture_id,
            void_key=void_key,
        )
        if moved != 1:
            msg = f"sandbox authorization {row['authorization_id']} moved under its own lock"
            raise RuntimeError(msg)
