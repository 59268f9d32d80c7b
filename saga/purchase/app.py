"""
The purchase of a seat of a paid intensive, as an application of the engine.

It brings the purchase saga with its hooks (seats, reconciliation items,
late payment checks, expiry answers) and the steps running its actions; job
kinds of its own (payment checks, the reconciliation checker); the sandbox
provider's webhooks for the workers to deliver; its invariants; and the
services its commands use, one
:class:`~saga.purchase.services.PurchaseServices` reached as ``engine.services``
(``engine.services.catalogue``, ``.purchases``, ``.inbox``, ``.payments`` with
the provider).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Final

from saga import Application, Registry
from saga.cli import Commands, Option
from saga.exceptions import InvalidInput
from saga.purchase.cli import COMMANDS
from saga.purchase.events import PURCHASE_EVENTS, SALES
from saga.purchase.hooks import (
    AccessHook,
    ExpiryAnswerHook,
    LatePaymentHook,
    hold_expiry_payload,
)
from saga.purchase.inbox import ROUTES
from saga.purchase.purchases import SeatHook
from saga.purchase.recon import PURCHASE_RECON, payment_checker
from saga.purchase.services import SANDBOX_URL_ENV, Payments, PurchaseContext, PurchaseServices
from saga.purchase.steps import PurchaseSteps
from saga.purchase.summary import money_of
from saga.recon import ReconHook
from saga.sagas import Started
from saga.store import SqlComponent, normalize_url
from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga import Context, JobKind, SagaRecord
    from saga.ops import Invariant
    from saga.queue import Poller
    from steps import PaymentProvider

# Its tables (catalogue, purchases, money, access) and their queries, in
# sql/purchase/: shipped with the engine, versioned apart.
PURCHASE_SQL: Final = SqlComponent.bundled("purchase")
# Steps queued by the purchase's own code, not by entering a state (and the
# grant jobs of databases from before access came with the confirmation).
_OWN_STEPS: Final = frozenset({"purchase.check_payment", "purchase.grant_access"})


# What `saga instances start purchase --request JSON` takes: `saga purchase
# start`'s options, nothing more (the price is the catalogue's, never the caller's).
_REQUEST_FIELDS: Final = ("intensive_id", "student_id", "payment_method", "hold_seconds")


def start_purchase(
    engine: PurchaseContext, *, operation_id: str, request: Mapping[str, Any], actor: str
) -> Started:
    """The purchase's starter: ``saga purchase start``, from a request object."""
    takes = f"a purchase request takes {', '.join(_REQUEST_FIELDS)} (the first two required)"
    for name in request:
        if name not in _REQUEST_FIELDS:
            raise InvalidInput(field="request", problem=f"{name!r}: {takes}", value=name)
    for name in _REQUEST_FIELDS[:2]:
        if name not in request:
            raise InvalidInput(field="request", problem=f"{name} is missing: {takes}")
    options = {k: request[k] for k in _REQUEST_FIELDS[2:] if k in request}
    result = engine.services.purchases.start(
        operation_id=operation_id,
        intensive_id=request["intensive_id"],
        student_id=request["student_id"],
        actor=actor,
        **options,
    )
    return Started(saga=engine.sagas.get(result.purchase.id), created=result.created)


def _payments(engine: PurchaseContext) -> Payments:
    return engine.services.payments


def payment_services(
    *, sandbox_url: str | None = None, provider: PaymentProvider | None = None
) -> Callable[[Context], PurchaseServices]:
    """
    The purchase's services for an engine, its payments on ``provider`` or the sandbox.

    ``sandbox_url``: the sandbox's own database (default
    ``$SAGA_SANDBOX_DATABASE_URL``, else derived from the engine's).
    """

    def services(engine: Context) -> PurchaseServices:
        return PurchaseServices(engine, sandbox_url=sandbox_url, provider=provider)

    return services


def with_sandbox_db(
    app: Application[PurchaseServices], values: Mapping[str, str | None]
) -> Application[PurchaseServices]:
    """
    The purchase application given ``--sandbox-db`` (``saga --sandbox-db URL …``).

    Checked before any command runs (exit 2 naming it): the sandbox opens
    lazily, when a command first asks the provider, and a bad URL would
    otherwise pass unseen through the commands that never do (a listing), or
    surface as a broken invariant (``verify``, exit 1).
    """
    url = values.get("sandbox_db")
    if url is None:
        return app
    normalize_url(url, field="sandbox_db")
    return dataclasses.replace(app, services=payment_services(sandbox_url=url))


# Its commands (`saga intensive|purchase|sandbox|demo|chaos`) and its option
# every command takes: they exist only when the purchase is the application.
PURCHASE_COMMANDS: Final = Commands(
    commands=COMMANDS,
    options=(
        Option(
            flag="--sandbox-db",
            metavar="URL",
            help="the sandbox payment provider's database (default: "
            f"${SANDBOX_URL_ENV}, else derived from --db)",
        ),
    ),
    configure=with_sandbox_db,
)


def purchase_app(
    *, sandbox_url: str | None = None, provider: PaymentProvider | None = None
) -> Application[PurchaseServices]:
    """
    The purchase application, with its saga registered afresh.

    Its payments go to ``provider``, else to the sandbox on ``sandbox_url``
    (default ``$SAGA_SANDBOX_DATABASE_URL``, else derived from the engine's
    database; ``saga --sandbox-db URL`` on the command line).
    """
    # Operators' decisions are checked against the provider's fresh answer
    # (the policy's judge).
    policy = PURCHASE_RECON
    registry = Registry()

    def steps(engine: PurchaseContext) -> list[JobKind]:
        kinds = PurchaseSteps(engine.db, engine.registry, _payments(engine).provider_getter)
        return [kind for kind in kinds.kinds() if kind.name not in _OWN_STEPS]

    def own_jobs(engine: PurchaseContext) -> list[JobKind]:
        provider = _payments(engine).provider_getter
        kinds = PurchaseSteps(engine.db, engine.registry, provider).kinds()
        return [
            *(kind for kind in kinds if kind.name in _OWN_STEPS),
            payment_checker(engine.db, engine.registry, provider, policy).kind(),
        ]

    def expiry(engine: PurchaseContext, saga: SagaRecord, event: str) -> dict[str, Any]:
        return hold_expiry_payload(engine.db, _payments(engine).provider, saga, event)

    def pollers(engine: PurchaseContext) -> list[Poller]:
        from saga.purchase.webhooks import (  # noqa: PLC0415 - only workers poll
            HttpSender,
            SandboxWebhooks,
        )

        if _payments(engine).custom:
            return []
        # $SAGA_SANDBOX_WEBHOOK_URL: sent signed over HTTP, as a real provider does.
        return [SandboxWebhooks(engine, sender=HttpSender.from_env(os.environ))]

    def webhooks(engine: PurchaseContext) -> Mapping[str, Any]:
        from saga.purchase.webhooks import http_receivers  # noqa: PLC0415 - the web server only

        return {} if _payments(engine).custom else http_receivers(engine)

    def invariants(engine: PurchaseContext) -> list[Invariant]:
        from saga.purchase.verify import purchase_invariants  # noqa: PLC0415 - verify only

        return purchase_invariants(engine)

    def figures(engine: PurchaseContext) -> dict[str, Any]:
        seats = [i.to_json() for i in engine.services.catalogue.list(limit=10_000)]
        return {"intensives": {i["id"]: i["seats"] for i in seats}}

    registry.register(
        PURCHASE,
        hooks=[
            SeatHook(),
            AccessHook(),
            ExpiryAnswerHook(),
            ReconHook(policy),
            LatePaymentHook(2 * policy.first_check_seconds),
        ],
        timeout_payload=expiry,
        steps=steps,
        emits=PURCHASE_EVENTS,
        starter=start_purchase,
    )
    return Application(
        name="purchase",
        registry=registry,
        jobs=own_jobs,
        pollers=pollers,
        invariants=invariants,
        services=payment_services(sandbox_url=sandbox_url, provider=provider),
        recon=policy,
        figures=figures,
        sql=PURCHASE_SQL,
        consumers=(SALES,),
        webhooks=webhooks,
        routes=ROUTES,
        money=money_of,
        commands=PURCHASE_COMMANDS,
    )
