"""
The purchase of a seat of a paid intensive, as an application of the engine.

It brings the purchase saga with its hooks (seats, reconciliation items,
late payment checks, expiry answers) and the steps running its actions; job
kinds of its own (payment checks, the reconciliation checker); the sandbox
provider's webhooks for the workers to deliver; its invariants; and the
services its commands use (``engine.catalogue``, ``engine.purchases``,
``engine.inbox``, ``engine.payments`` with the provider).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from saga._app import Application
from saga._catalogue import Catalogue
from saga._inbox import Inbox
from saga._purchase_recon import Checker, PaymentJudge
from saga._purchase_steps import (
    ExpiryAnswerHook,
    LatePaymentHook,
    PurchaseSteps,
    hold_expiry_payload,
)
from saga._purchases import Purchases, SeatHook
from saga._recon import ReconHook, ReconPolicy
from saga._sagas import Registry
from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from saga._engine import Engine
    from saga._handlers import JobKind
    from saga._invariants import Invariant
    from saga._pollers import Poller
    from saga._records import SagaRecord
    from saga._sandbox import Sandbox
    from steps import PaymentProvider

SANDBOX_URL_ENV: Final = "SAGA_SANDBOX_DATABASE_URL"
# Steps queued by the purchase's own code, not by entering a state.
_OWN_STEPS: Final = frozenset({"purchase.check_payment"})


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
        self, engine: Engine, *, sandbox_url: str | None, provider: PaymentProvider | None
    ) -> None:
        self._engine = engine
        self._sandbox_url = sandbox_url
        self._provider = provider
        self._sandbox: Sandbox | None = None

    @property
    def custom(self) -> bool:
        """Whether a provider other than the sandbox was given."""
        return self._provider is not None

    @property
    def sandbox_url(self) -> str:
        """The sandbox provider's database URL."""
        from saga._sandbox import sandbox_url_for  # noqa: PLC0415 - the sandbox loads lazily

        return (
            self._sandbox_url
            or os.environ.get(SANDBOX_URL_ENV)
            or sandbox_url_for(self._engine.db.url.render_as_string(hide_password=False))
        )

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox payment provider, opened on first use."""
        if self._sandbox is None:
            from saga._sandbox import Sandbox  # noqa: PLC0415 - opened only when needed

            if not self._engine.create:
                self._engine.db.require_file()  # the engine's own file is missing: name it
            self._sandbox = Sandbox(self.sandbox_url, create=self._engine.create)
        return self._sandbox

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider: the one given, else the sandbox."""
        return self._provider if self._provider is not None else self.sandbox

    def provider_getter(self) -> PaymentProvider:
        """The payment provider, looked up when needed."""
        return self.provider

    def close(self) -> None:
        """Release the sandbox's connections."""
        if self._sandbox is not None:
            self._sandbox.close()


def _payments(engine: Engine) -> Payments:
    payments: Payments = engine.payments
    return payments


def purchase_app() -> Application:
    """The purchase application, with its saga registered afresh."""
    policy = ReconPolicy()
    registry = Registry()

    def steps(engine: Engine) -> list[JobKind]:
        kinds = PurchaseSteps(engine.db, engine.registry, _payments(engine).provider_getter)
        return [kind for kind in kinds.kinds() if kind.name not in _OWN_STEPS]

    def own_jobs(engine: Engine) -> list[JobKind]:
        provider = _payments(engine).provider_getter
        kinds = PurchaseSteps(engine.db, engine.registry, provider).kinds()
        return [
            *(kind for kind in kinds if kind.name in _OWN_STEPS),
            Checker(engine.db, engine.registry, provider, policy).kind(),
        ]

    def expiry(engine: Engine, saga: SagaRecord, event: str) -> dict[str, Any]:
        return hold_expiry_payload(engine.db, _payments(engine).provider, saga, event)

    def pollers(engine: Engine) -> list[Poller]:
        from saga._webhooks import SandboxWebhooks  # noqa: PLC0415 - only workers poll

        return [] if _payments(engine).custom else [SandboxWebhooks(engine)]

    def invariants(engine: Engine) -> list[Invariant]:
        from saga._verify_purchase import purchase_invariants  # noqa: PLC0415 - verify only

        return purchase_invariants(engine)

    def services(engine: Engine) -> dict[str, Any]:
        payments = Payments(
            engine,
            sandbox_url=engine.options.get("sandbox_url"),
            provider=engine.options.get("provider"),
        )
        return {
            "payments": payments,
            "catalogue": Catalogue(engine.db),
            "purchases": Purchases(engine.db, engine.sagas),
            "inbox": Inbox(engine.db, engine.registry, payments.provider_getter),
            "judge": PaymentJudge(engine.db, payments.provider_getter),
        }

    registry.register(
        PURCHASE,
        hooks=[
            SeatHook(),
            ExpiryAnswerHook(),
            ReconHook(policy),
            LatePaymentHook(2 * policy.first_check_seconds),
        ],
        timeout_payload=expiry,
        steps=steps,
    )
    return Application(
        name="purchase",
        registry=registry,
        jobs=own_jobs,
        pollers=pollers,
        invariants=invariants,
        services=services,
    )
