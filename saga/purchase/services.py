"""
The purchase's services: what its commands and users reach as ``engine.services``.

One :class:`PurchaseServices` per engine: the catalogue, the purchases, the
provider's inbox, and the payment provider (the one given, else the sandbox,
opened on first use).  ``PurchaseContext`` is what the purchase's parts are
built with, ``PurchaseEngine`` the engine running it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, TypeAlias

from saga import Context, Engine
from saga.ops import record_provider_call
from saga.purchase.catalogue import Catalogue
from saga.purchase.inbox import Inbox
from saga.purchase.purchases import Purchases
from steps import ObservedProvider

if TYPE_CHECKING:
    from saga.purchase.sandbox import Sandbox
    from steps import PaymentProvider

SANDBOX_URL_ENV: Final = "SAGA_SANDBOX_DATABASE_URL"


class Payments:
    """
    The purchase's payment provider: the one given, else the sandbox, opened on first use.

    Args:
        engine: the engine whose database the sandbox's location derives from.
        sandbox_url: the sandbox's own database (default ``$SAGA_SANDBOX_DATABASE_URL``,
            else derived from the engine's).
        provider: a real provider to use instead of the sandbox.

    """

    def __init__(
        self, engine: Context, *, sandbox_url: str | None, provider: PaymentProvider | None
    ) -> None:
        self._engine = engine
        self._sandbox_url = sandbox_url
        self._provider = provider
        self._sandbox: Sandbox | None = None
        self._observed: PaymentProvider | None = None

    @property
    def custom(self) -> bool:
        """Whether a provider other than the sandbox was given."""
        return self._provider is not None

    @property
    def sandbox_url(self) -> str:
        """The sandbox provider's database URL."""
        from saga.purchase.sandbox import sandbox_url_for  # noqa: PLC0415 - the sandbox loads lazily

        return (
            self._sandbox_url
            or os.environ.get(SANDBOX_URL_ENV)
            or sandbox_url_for(self._engine.db.url.render_as_string(hide_password=False))
        )

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox payment provider, opened on first use."""
        if self._sandbox is None:
            from saga.purchase.sandbox import Sandbox  # noqa: PLC0415 - opened only when needed

            if not self._engine.create:
                self._engine.db.require_file()  # the engine's own file is missing: name it
            self._sandbox = Sandbox(self.sandbox_url, create=self._engine.create)
        return self._sandbox

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider (the one given, else the sandbox), each call counted."""
        if self._observed is None:
            chosen = self._provider if self._provider is not None else self.sandbox
            self._observed = ObservedProvider(chosen, record_provider_call)
        return self._observed

    def provider_getter(self) -> PaymentProvider:
        """The payment provider, looked up when needed."""
        return self.provider

    def close(self) -> None:
        """Release the sandbox's connections."""
        if self._sandbox is not None:
            self._sandbox.close()


class PurchaseServices:
    """
    The purchase's services, built once for an engine: ``engine.services``.

    The catalogue, the purchases, the provider's inbox, and the payment
    provider (the one given, else the sandbox, opened on first use).
    """

    def __init__(
        self,
        engine: Context,
        *,
        sandbox_url: str | None = None,
        provider: PaymentProvider | None = None,
    ) -> None:
        self.payments = Payments(engine, sandbox_url=sandbox_url, provider=provider)
        self.catalogue = Catalogue(engine.db)
        self.purchases = Purchases(engine.db, engine.sagas)
        self.inbox = Inbox(engine, self.payments.provider_getter)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox payment provider, opened on first use."""
        return self.payments.sandbox

    @property
    def sandbox_url(self) -> str:
        """The sandbox provider's database URL."""
        return self.payments.sandbox_url

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider, each call counted."""
        return self.payments.provider

    def provider_getter(self) -> PaymentProvider:
        """The payment provider, looked up when needed."""
        return self.payments.provider

    def close(self) -> None:
        """Release the sandbox's connections."""
        self.payments.close()


# What the purchase's parts are built with, and the engine running it.
PurchaseContext: TypeAlias = Context[PurchaseServices]
PurchaseEngine: TypeAlias = Engine[PurchaseServices]
