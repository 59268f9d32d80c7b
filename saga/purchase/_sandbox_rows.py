"""The sandbox ledger's rows as the provider port's values (its charges, refunds and holds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from steps import PermanentError, ProviderAuthorization, ProviderPayment, ProviderRefund

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping


def must(row: RowMapping | None) -> RowMapping:
    """A row the statement before guarantees (inserted, updated or in conflict)."""
    if row is None:
        msg = "sandbox ledger row vanished inside its own transaction"
        raise RuntimeError(msg)
    return row


def same_params(row: RowMapping, params: str, key: str) -> RowMapping:
    """The row made under ``key``, if it was made with the same parameters (else refused)."""
    if row["params_digest"] != params:
        raise PermanentError(
            f"sandbox: idempotency key {key!r} was already used with other parameters"
        )
    return row


def payment_of(row: RowMapping) -> ProviderPayment:
    """A charge (or a capture) as the port reports it."""
    return ProviderPayment(
        payment_id=row["payment_id"],
        key=row["key"],
        status=row["status"],
        amount_minor=int(row["amount_minor"]),
        charged_minor=None if row["charged_minor"] is None else int(row["charged_minor"]),
        currency=row["currency"],
    )


def refund_of(row: RowMapping) -> ProviderRefund:
    """A refund as the port reports it."""
    return ProviderRefund(
        refund_id=row["refund_id"],
        key=row["key"],
        payment_id=row["payment_id"],
        amount_minor=int(row["amount_minor"]),
        status=row["status"],
    )


def authorization_of(row: RowMapping) -> ProviderAuthorization:
    """An authorization as the port reports it."""
    held = row["authorized_minor"]
    return ProviderAuthorization(
        authorization_id=row["authorization_id"],
        key=row["key"],
        status=row["status"],
        amount_minor=int(row["amount_minor"]),
        authorized_minor=None if held is None else int(held),
        currency=row["currency"],
    )
