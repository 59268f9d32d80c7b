"""The payment provider port: what the purchase saga needs from any provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

ChargeStatus = Literal["pending", "succeeded", "failed", "cancelled"]
RefundStatus = Literal["pending", "succeeded", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderPayment:
    """A payment as the provider reports it."""

    payment_id: str
    key: str
    status: ChargeStatus
    amount_minor: int
    charged_minor: int | None
    currency: str

    @property
    def money_taken(self) -> bool:
        """Whether the provider holds money for it."""
        return self.status == "succeeded"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderRefund:
    """A refund as the provider reports it."""

    refund_id: str
    key: str
    payment_id: str
    amount_minor: int
    status: RefundStatus


class PaymentProvider(Protocol):
    """
    A payment provider with idempotency keys, like real ones.

    Every call may raise :class:`~steps.errors.OutcomeUnknown` (a timeout:
    it may or may not have happened), :class:`~steps.errors.TransientError`
    (nothing happened, try later) or :class:`~steps.errors.PermanentError`
    (refused, for instance a key reused with other parameters).
    """

    def create_payment(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderPayment:
        """Charge under ``key``; the same key again returns the same payment."""

    def payment_status(self, *, key: str) -> ProviderPayment | None:
        """The payment made under ``key``, or ``None`` if there is none."""

    def cancel_payment(self, *, key: str) -> ProviderPayment | None:
        """Cancel the payment under ``key`` if it has not succeeded; its status after."""

    def refund(self, *, key: str, payment_id: str, amount_minor: int) -> ProviderRefund:
        """Refund under ``key``; the same key again returns the same refund."""

    def refund_status(self, *, key: str) -> ProviderRefund | None:
        """The refund made under ``key``, or ``None`` if there is none."""
