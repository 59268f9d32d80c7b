"""
The sandbox payment provider: a stand-in for a real one, failing like real ones do.

Its test payment methods (DESIGN.md §4) behave like test cards, for
charges and for card holds (:mod:`saga.purchase.sandbox_holds`).  It keeps
its ledger in its own database (a sibling SQLite file, or a schema of its
own on PostgreSQL) through its own connection, never inside an engine
transaction, and honours idempotency keys like real providers: the same key
replays the first answer; the same key with other parameters is refused.
Its webhooks wait in its ledger until a worker delivers them to the
engine's inbox.  What each test payment method does to a charge and its
webhooks is :mod:`saga.purchase.sandbox_methods`'s.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga.codec import digest, load_json
from saga.exceptions import DatabaseMissing
from saga.purchase._sandbox_rows import must, payment_of, refund_of, same_params
from saga.purchase.sandbox_holds import SandboxHolds
from saga.purchase.sandbox_methods import (
    announce_charge,
    charge_outcome,
    payment_body,
    queue_webhook,
    settle_due,
)
from saga.store import Database, SqlComponent, normalize_url
from steps import OutcomeUnknown, PaymentMethod, PermanentError, ProviderPayment, ProviderRefund

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

    from saga import Tx

_SCHEMA: Final = re.compile(r"search_path=([A-Za-z_][A-Za-z0-9_]*)")
_SETUP_LOCK: Final = 0x5A6A_0002
# The sandbox's ledger lives in a database of its own, with its own SQL.
SANDBOX_SQL: Final = SqlComponent.bundled("sandbox")
DEFAULT_SCHEMA: Final = "saga_sandbox"


def sandbox_url_for(engine_url: str) -> str:
    """
    The sandbox's database, derived from the engine's.

    SQLite: a sibling file (``saga.db`` → ``saga.sandbox.db``).  PostgreSQL:
    the same database, in a schema of its own (``<engine schema>_sandbox``,
    or ``saga_sandbox``).
    """
    url = normalize_url(engine_url)
    if url.get_backend_name() == "sqlite":
        path = url.database or "saga.db"
        stem, dot, suffix = path.rpartition(".")
        sandbox = f"{stem}.sandbox.{suffix}" if dot and "/" not in suffix else f"{path}.sandbox"
        return url.set(database=sandbox).render_as_string(hide_password=False)
    options = str(url.query.get("options", ""))
    match = _SCHEMA.search(options)
    schema = f"{match.group(1)}_sandbox" if match else DEFAULT_SCHEMA
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook waiting for delivery."""

    id: int
    event_id: str
    type: str
    body: dict[str, Any]


class Sandbox(SandboxHolds):
    """
    The sandbox provider; implements :class:`steps.PaymentProvider`.

    Args:
        url: its own database (see :func:`sandbox_url_for`).

    """

    def __init__(self, url: str, *, pool_size: int = 3, create: bool = True) -> None:
        self.url = url
        self.db = Database(
            url,
            pool_size=pool_size,
            application_name="saga-sandbox",
            components=(SANDBOX_SQL,),
            field="sandbox_db",
        )
        self.db.before_first_use(self._create if create else self._require)

    def close(self) -> None:
        """Release its connections."""
        self.db.dispose()

    def _create(self) -> None:
        self.db.create_schema()

        def work(tx: Tx) -> None:
            tx.run("lock_setup", key=_SETUP_LOCK)
            tx.script(SANDBOX_SQL.schema(tx.dialect) or "")

        self.db.transaction(work)

    def _require(self) -> None:
        """Refuse a sandbox ledger that does not exist (reads never create one)."""
        self.db.require_file()
        if not self.db.transaction(lambda tx: tx.scalar("ledger_exists"), write=False):
            where = self.db.search_path_schema or self.url
            raise DatabaseMissing(path=f"{where} (no sandbox ledger there)", field="sandbox_db")

    # -- payments ---------------------------------------------------------------------

    def create_payment(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderPayment:
        """Charge under ``key``, the way ``method`` tells the sandbox to."""
        params = digest(
            {
                "amount_minor": amount_minor,
                "currency": currency,
                "method": method,
                "reference": reference,
            }
        )
        if method == PaymentMethod.TIMEOUT_BEFORE_CHARGE:
            raise OutcomeUnknown(
                "sandbox: the create call timed out before anything happened",
                evidence={"sent": {"key": key, "amount_minor": amount_minor, "currency": currency}},
            )

        def work(tx: Tx) -> tuple[ProviderPayment, bool]:
            existing = tx.one("charge_by_key", key=key)
            if existing is not None:
                return payment_of(same_params(existing, params, key)), False
            status, charged = charge_outcome(method, amount_minor)
            payment_id = f"pay_{uuid.uuid4().hex[:20]}"
            inserted = tx.one(
                "insert_charge",
                payment_id=payment_id,
                key=key,
                params_digest=params,
                reference=reference,
                method=method,
                amount_minor=amount_minor,
                charged_minor=charged,
                currency=currency,
                status=status,
            )
            if inserted is None:  # a concurrent call with the same key won
                row = tx.one("charge_by_key", key=key)
                row = must(row)
                return payment_of(same_params(row, params, key)), False
            row = tx.one("charge_by_key", key=key)
            row = must(row)
            payment = payment_of(row)
            announce_charge(tx, payment, method, reference)
            return payment, True

        payment, created = self.db.transaction(work)
        if created and method == PaymentMethod.TIMEOUT_AFTER_CHARGE:
            raise OutcomeUnknown(
                "sandbox: the create call timed out after the charge",
                evidence={"sent": {"key": key, "amount_minor": amount_minor, "currency": currency}},
            )
        return payment

    def payment_status(self, *, key: str) -> ProviderPayment | None:
        """The payment made under ``key``, or ``None``."""

        def work(tx: Tx) -> RowMapping | None:
            settle_due(tx)
            return tx.one("charge_by_key", key=key)

        row = self.db.transaction(work)
        return None if row is None else payment_of(row)

    def cancel_payment(self, *, key: str) -> ProviderPayment | None:
        """
        Cancel a payment that has not succeeded.

        A ``pm_late`` payment cannot be stopped any more: the cancellation is
        accepted as a request (the answer still says ``pending``), and the
        transfer completes right after, with its success webhook.
        """

        def work(tx: Tx) -> ProviderPayment | None:
            settle_due(tx)
            row = tx.one("lock_charge", key=key)
            if row is None or row["status"] != "pending":
                return None if row is None else payment_of(row)
            payment = payment_of(row)
            if row["method"] == PaymentMethod.LATE:
                tx.run(
                    "set_charge_status",
                    payment_id=payment.payment_id,
                    from_status="pending",
                    to_status="succeeded",
                    charged_minor=payment.amount_minor,
                )
                done = tx.one("charge_by_id", payment_id=payment.payment_id)
                done = must(done)
                queue_webhook(
                    tx,
                    f"evt_{uuid.uuid4().hex[:20]}",
                    "payment.succeeded",
                    payment_body(payment_of(done), row["reference"]),
                    delay=0.2,
                )
                return payment
            tx.run(
                "set_charge_status",
                payment_id=payment.payment_id,
                from_status="pending",
                to_status="cancelled",
                charged_minor=None,
            )
            cancelled = tx.one("charge_by_id", payment_id=payment.payment_id)
            return None if cancelled is None else payment_of(cancelled)

        return self.db.transaction(work)

    # -- refunds ----------------------------------------------------------------------

    def refund(self, *, key: str, payment_id: str, amount_minor: int) -> ProviderRefund:
        """Refund under ``key``; ``pm_refund_fails`` declines, ``pm_refund_timeout`` times out."""
        params = digest({"payment_id": payment_id, "amount_minor": amount_minor})

        def work(tx: Tx) -> tuple[ProviderRefund, bool, str]:
            settle_due(tx)
            existing = tx.one("refund_by_key", key=key)
            if existing is not None:
                if existing["params_digest"] != params:
                    raise PermanentError(
                        f"sandbox: refund key {key!r} reused with other parameters"
                    )
                charge = tx.one("charge_by_id", payment_id=payment_id)
                return refund_of(existing), False, "" if charge is None else charge["method"]
            charge = tx.one("charge_by_id", payment_id=payment_id)
            if charge is None or charge["status"] != "succeeded":
                raise PermanentError(f"sandbox: payment {payment_id} has no money to refund")
            already = int(tx.scalar("refunded_minor", payment_id=payment_id) or 0)
            if already + amount_minor > int(charge["charged_minor"] or 0):
                raise PermanentError(f"sandbox: refund of {amount_minor} exceeds what is left")
            method = charge["method"]
            status = "failed" if method == PaymentMethod.REFUND_FAILS else "succeeded"
            refund_id = f"re_{uuid.uuid4().hex[:20]}"
            if (
                tx.one(
                    "insert_refund",
                    refund_id=refund_id,
                    key=key,
                    params_digest=params,
                    payment_id=payment_id,
                    amount_minor=amount_minor,
                    status=status,
                )
                is None
            ):
                row = tx.one("refund_by_key", key=key)
                row = must(row)
                return refund_of(row), False, method
            row = tx.one("refund_by_key", key=key)
            row = must(row)
            refund = refund_of(row)
            kind = "refund.succeeded" if status == "succeeded" else "refund.failed"
            queue_webhook(
                tx,
                f"evt_{uuid.uuid4().hex[:20]}",
                kind,
                {
                    "payment_id": payment_id,
                    "refund_id": refund_id,
                    "amount_minor": amount_minor,
                    "currency": charge["currency"],
                    "reference": charge["reference"],
                },
                delay=0.0,
            )
            return refund, True, method

        refund, created, method = self.db.transaction(work)
        if created and method == PaymentMethod.REFUND_TIMEOUT:
            raise OutcomeUnknown(
                "sandbox: the refund call timed out after the refund was made",
                evidence={
                    "sent": {"key": key, "payment_id": payment_id, "amount_minor": amount_minor}
                },
            )
        return refund

    def refund_status(self, *, key: str) -> ProviderRefund | None:
        """The refund made under ``key``, or ``None``."""
        row = self.db.transaction(lambda tx: tx.one("refund_by_key", key=key), write=False)
        return None if row is None else refund_of(row)

    # -- webhooks and ledger ----------------------------------------------------------

    def take_webhooks(self, *, limit: int = 50, lease_seconds: float = 30.0) -> list[Webhook]:
        """Due webhooks, leased to the caller until it marks them delivered."""
        rows = self.db.transaction(
            lambda tx: tx.all("claim_webhooks", limit=limit, lease_seconds=lease_seconds)
        )
        return [
            Webhook(
                id=int(r["id"]), event_id=r["event_id"], type=r["type"], body=load_json(r["body"])
            )
            for r in rows
        ]

    def delivered(self, webhook: Webhook) -> None:
        """The engine's inbox has ``webhook``."""
        self.db.transaction(lambda tx: tx.run("mark_webhook_delivered", id=webhook.id))

    def next_webhook_in(self) -> float | None:
        """Seconds until the next webhook is due; ``None`` if none waits."""
        value = self.db.transaction(lambda tx: tx.scalar("next_webhook_in"), write=False)
        return None if value is None else float(value)

    def ledger(self) -> dict[str, list[dict[str, Any]]]:
        """
        Every charge and refund, as the contract's ``saga sandbox ledger`` shows them.

        And every authorization (version 2's card holds): a capture is a charge
        its authorization names (``capture_id``), a void is its ``void_key``.
        """

        def work(tx: Tx) -> dict[str, list[dict[str, Any]]]:
            settle_due(tx)
            return {
                "charges": [dict(row) for row in tx.all("ledger_charges")],
                "refunds": [dict(row) for row in tx.all("ledger_refunds")],
                "authorizations": [dict(row) for row in tx.all("ledger_authorizations")],
            }

        return self.db.transaction(work)
