"""The payment provider port: what the purchase saga needs from any provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from steps.errors import OutcomeUnknown, PermanentError, TransientError

if TYPE_CHECKING:
    from collections.abc import Callable

_T = TypeVar("_T")

ChargeStatus = Literal["pending", "succeeded", "failed", "cancelled"]
RefundStatus = Literal["pending", "succeeded", "failed"]
AuthorizationStatus = Literal["pending", "authorized", "failed", "captured", "voided", "expired"]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderAuthorization:
    """
    An authorization as the provider reports it: money held on the buyer's card.

    It ends captured (the capture is a payment, made under its own key),
    voided (under the void's key), failed (declined) or expired (the
    provider let it lapse); never both captured and voided.
    """

    authorization_id: str
    key: str
    status: AuthorizationStatus
    amount_minor: int
    authorized_minor: int | None
    currency: str

    @property
    def alive(self) -> bool:
        """Whether it may still be captured (or voided): pending or authorized."""
        return self.status in ("pending", "authorized")


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

    def authorize(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderAuthorization:
        """Hold the amount on the buyer's card under ``key``; the same key again, the same one."""

    def authorization_status(self, *, key: str) -> ProviderAuthorization | None:
        """The authorization made under ``key``, or ``None`` if there is none."""

    def capture(self, *, key: str, authorization_id: str, amount_minor: int) -> ProviderPayment:
        """
        Take held money under ``key``: a payment, read by that key like any other.

        It succeeded, or failed when the authorization can no longer be
        captured (voided, expired, declined); the same key again returns it.
        """

    def void(self, *, key: str, authorization_id: str) -> ProviderAuthorization:
        """Release an authorization under ``key`` unless it was captured; its status after."""


class ObservedProvider:
    """
    A payment provider whose every call is reported: its operation and outcome.

    Outcomes: ``ok``, ``unknown`` (:class:`~steps.errors.OutcomeUnknown`),
    ``refused`` (:class:`~steps.errors.PermanentError`), ``transient``
    (:class:`~steps.errors.TransientError`), ``error`` (anything else).  The
    call's result or exception passes through unchanged.
    """

    def __init__(self, provider: PaymentProvider, record: Callable[[str, str], None]) -> None:
        self.provider = provider
        self._record = record

    def __getattr__(self, name: str) -> object:
        # What the provider offers beyond the port (the sandbox's ledger, which
        # `saga verify` compares the records with) stays reachable, uncounted.
        return getattr(self.provider, name)

    def create_payment(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderPayment:
        """See :meth:`PaymentProvider.create_payment`."""
        return self._call(
            "create_payment",
            lambda: self.provider.create_payment(
                key=key,
                amount_minor=amount_minor,
                currency=currency,
                method=method,
                reference=reference,
            ),
        )

    def payment_status(self, *, key: str) -> ProviderPayment | None:
        """See :meth:`PaymentProvider.payment_status`."""
        return self._call("payment_status", lambda: self.provider.payment_status(key=key))

    def cancel_payment(self, *, key: str) -> ProviderPayment | None:
        """See :meth:`PaymentProvider.cancel_payment`."""
        return self._call("cancel_payment", lambda: self.provider.cancel_payment(key=key))

    def refund(self, *, key: str, payment_id: str, amount_minor: int) -> ProviderRefund:
        """See :meth:`PaymentProvider.refund`."""
        return self._call(
            "refund",
            lambda: self.provider.refund(key=key, payment_id=payment_id, amount_minor=amount_minor),
        )

    def refund_status(self, *, key: str) -> ProviderRefund | None:
        """See :meth:`PaymentProvider.refund_status`."""
        return self._call("refund_status", lambda: self.provider.refund_status(key=key))

    def authorize(
        self, *, key: str, amount_minor: int, currency: str, method: str, reference: str
    ) -> ProviderAuthorization:
        """See :meth:`PaymentProvider.authorize`."""
        return self._call(
            "authorize",
            lambda: self.provider.authorize(
                key=key,
                amount_minor=amount_minor,
                currency=currency,
                method=method,
                reference=reference,
            ),
        )

    def authorization_status(self, *, key: str) -> ProviderAuthorization | None:
        """See :meth:`PaymentProvider.authorization_status`."""
        return self._call(
            "authorization_status", lambda: self.provider.authorization_status(key=key)
        )

    def capture(self, *, key: str, authorization_id: str, amount_minor: int) -> ProviderPayment:
        """See :meth:`PaymentProvider.capture`."""
        return self._call(
            "capture",
            lambda: self.provider.capture(
                key=key, authorization_id=authorization_id, amount_minor=amount_minor
            ),
        )

    def void(self, *, key: str, authorization_id: str) -> ProviderAuthorization:
        """See :meth:`PaymentProvider.void`."""
        return self._call(
            "void", lambda: self.provider.void(key=key, authorization_id=authorization_id)
        )

    def _call(self, operation: str, call: Callable[[], _T]) -> _T:
        try:
            result = call()
        except OutcomeUnknown:
            self._record(operation, "unknown")
            raise
        except PermanentError:
            self._record(operation, "refused")
            raise
        except TransientError:
            self._record(operation, "transient")
            raise
        except Exception:
            self._record(operation, "error")
            raise
        self._record(operation, "ok")
        return result
