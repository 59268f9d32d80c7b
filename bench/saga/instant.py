"""
The purchase with a payment provider that answers at once, for bench/saga.

``saga worker --app instant:app`` (with this folder on ``PYTHONPATH``): the
purchase application unchanged but for its provider, which charges at once
under the key it is given, so that the provider is not what is measured.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from saga.purchase.app import purchase_app
from steps import PermanentError, ProviderAuthorization, ProviderPayment, ProviderRefund

if TYPE_CHECKING:
    from saga import Application


class InstantProvider:
    """Pays at once under the key; remembers what it charged in this process."""

    def __init__(self) -> None:
        self.charges: dict[str, ProviderPayment] = {}
        self.holds: dict[str, ProviderAuthorization] = {}
        self.held_by_id: dict[str, str] = {}

    def create_payment(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderPayment:
        del method, reference
        payment = self.charges.get(key) or ProviderPayment(
            payment_id=f"pay_{key.removeprefix('pay:')}",
            key=key,
            status="succeeded",
            amount_minor=amount_minor,
            charged_minor=amount_minor,
            currency=currency,
        )
        self.charges[key] = payment
        return payment

    def payment_status(self, *, key: str) -> ProviderPayment | None:
        return self.charges.get(key)

    def cancel_payment(self, *, key: str) -> ProviderPayment | None:
        return self.charges.get(key)

    def refund(self, *, key: str, payment_id: str, amount_minor: int) -> ProviderRefund:
        # The bench's happy path never refunds: a refund asked for is refused,
        # as a real provider would refuse one it cannot make.
        msg = f"the instant provider makes no refunds ({key}, {payment_id}, {amount_minor})"
        raise PermanentError(msg)

    def refund_status(self, *, key: str) -> ProviderRefund | None:
        return None

    def authorize(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderAuthorization:
        del method, reference
        held = self.holds.get(key) or ProviderAuthorization(
            authorization_id=f"auth_{len(self.holds)}",
            key=key,
            status="authorized",
            amount_minor=amount_minor,
            authorized_minor=amount_minor,
            currency=currency,
        )
        self.holds[key] = held
        self.held_by_id[held.authorization_id] = key
        return held

    def authorization_status(self, *, key: str) -> ProviderAuthorization | None:
        return self.holds.get(key)

    def capture(self, *, key: str, authorization_id: str, amount_minor: int) -> ProviderPayment:
        if key in self.charges:
            return self.charges[key]
        held_key = self.held_by_id[authorization_id]
        held = self.holds[held_key]
        taken = held.status == "authorized"
        payment = ProviderPayment(
            payment_id=f"pay_{key}",
            key=key,
            status="succeeded" if taken else "failed",
            amount_minor=amount_minor,
            charged_minor=amount_minor if taken else None,
            currency=held.currency,
        )
        if taken:
            self.holds[held_key] = dataclasses.replace(held, status="captured")
        self.charges[key] = payment
        return payment

    def void(self, *, key: str, authorization_id: str) -> ProviderAuthorization:
        del key
        held_key = self.held_by_id[authorization_id]
        held = self.holds[held_key]
        if held.alive:
            held = self.holds[held_key] = dataclasses.replace(held, status="voided")
        return held


def app() -> Application:
    """The purchase application with the instant provider."""
    return purchase_app(provider=InstantProvider())
