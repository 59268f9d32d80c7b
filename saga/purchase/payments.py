"""
The purchase's money records: what the provider said, never rewritten.

The engine keeps its own record of each payment and refund (``payments``,
``refunds``), written only from the provider's answers read by key, never
from what an event claims.  A settled record takes the very same answer
again and nothing else: an answer that contradicts it is evidence, kept on a
reconciliation item for a human, never a silent rewrite.  ``saga verify``
compares these records with the provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from steps.purchase import payment_evidence

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqlalchemy.engine import RowMapping

    from saga import Tx
    from steps import ProviderPayment, ProviderRefund

SETTLED_PAYMENT: Final = frozenset({"succeeded", "failed", "cancelled"})
SETTLED_REFUND: Final = frozenset({"succeeded", "failed"})


def record_payment(tx: Tx, saga_id: str, payment: ProviderPayment) -> bool:
    """Record the provider's answer about a purchase's payment; ``False`` if it contradicts it."""
    row = tx.one(
        "record_payment_answer",
        saga_id=saga_id,
        status=payment.status,
        provider_ref=payment.payment_id,
        charged_minor=payment.charged_minor,
        charged_currency=payment.currency if payment.charged_minor is not None else None,
        **tx.lease_params,
    )
    return row is not None


def mark_payment_unknown(tx: Tx, saga_id: str) -> bool:
    """Mark a payment whose create call's outcome is unknown (never covers a provider answer)."""
    row = tx.one(
        "record_payment_answer",
        saga_id=saga_id,
        status="unknown",
        provider_ref=None,
        charged_minor=None,
        charged_currency=None,
        **tx.lease_params,
    )
    return row is not None


def record_refund(tx: Tx, saga_id: str, refund: ProviderRefund) -> bool:
    """Record the provider's answer about a purchase's refund; ``False`` if it contradicts it."""
    row = tx.one(
        "record_refund_answer",
        saga_id=saga_id,
        status=refund.status,
        provider_ref=refund.refund_id,
        **tx.lease_params,
    )
    return row is not None


def mark_refund_unknown(tx: Tx, saga_id: str) -> bool:
    """Mark a refund whose call's outcome is unknown (never covers a provider answer)."""
    row = tx.one(
        "record_refund_answer",
        saga_id=saga_id,
        status="unknown",
        provider_ref=None,
        **tx.lease_params,
    )
    return row is not None


def payment_record(row: RowMapping | None) -> dict[str, Any] | None:
    """A ``payments`` row as evidence."""
    if row is None:
        return None
    return {
        "key": row["key"],
        "status": row["status"],
        "payment_id": row["provider_ref"],
        "charged_minor": row["charged_minor"],
        "currency": row["charged_currency"] or row["currency"],
    }


def refund_evidence(refund: ProviderRefund | None) -> Mapping[str, Any]:
    """A provider's answer about a refund, as evidence."""
    if refund is None:
        return {"found": False}
    return {
        "found": True,
        "refund_id": refund.refund_id,
        "payment_id": refund.payment_id,
        "status": refund.status,
        "amount_minor": refund.amount_minor,
    }


__all__ = [
    "SETTLED_PAYMENT",
    "SETTLED_REFUND",
    "mark_payment_unknown",
    "mark_refund_unknown",
    "payment_evidence",
    "payment_record",
    "record_payment",
    "record_refund",
    "refund_evidence",
]
