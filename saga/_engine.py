"""Wiring: one database, the registered saga kinds and the services over them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from saga import _migrate, _purchases
from saga._catalogue import Catalogue
from saga._db import DEFAULT_URL, Database
from saga._inbox import Inbox
from saga._purchase_recon import PaymentJudge
from saga._purchases import Purchases
from saga._recon_desk import Reconciliation
from saga._sagas import Registry, Sagas

if TYPE_CHECKING:
    from saga._handlers import JobKind
    from saga._pollers import Poller
    from saga._sandbox import Sandbox
    from steps import PaymentProvider

URL_ENV: Final = "SAGA_DATABASE_URL"
SANDBOX_URL_ENV: Final = "SAGA_SANDBOX_DATABASE_URL"


def default_url() -> str:
    """``$SAGA_DATABASE_URL``, else the SQLite file ``saga.db`` in the working directory."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def default_registry() -> Registry:
    """A registry holding the reference purchase saga."""
    registry = Registry()
    _purchases.register(registry)
    return registry


class Engine:
    """
    The engine over one database.

    Its first transaction checks the schema: the embedded SQLite file is
    created or upgraded in place; a PostgreSQL schema must be upgraded
    explicitly with ``saga db upgrade`` (:class:`~saga.exceptions.SchemaOutOfDate`).
    Nothing touches the database before that first transaction.

    Args:
        url: the database; default :func:`default_url`.
        sandbox_url: the sandbox provider's database; default
            ``$SAGA_SANDBOX_DATABASE_URL``, else derived from ``url``.
        provider: a payment provider to use instead of the sandbox.
        registry: the saga kinds; default :func:`default_registry`.
        check_schema: set ``False`` to skip the schema check (``saga db upgrade`` does).
        create: set ``False`` for reads: a missing embedded file (the engine's or
            the sandbox's) is then :class:`~saga.exceptions.DatabaseMissing`
            instead of a new empty database.

    """

    def __init__(
        self,
        url: str | None = None,
        *,
        sandbox_url: str | None = None,
        provider: PaymentProvider | None = None,
        registry: Registry | None = None,
        check_schema: bool = True,
        create: bool = True,
        pool_size: int = 5,
    ) -> None:
        self.db = Database(default_url() if url is None else url, pool_size=pool_size)
        self._create = create
        if check_schema:
            self.db.before_first_use(self._check_schema)
        self.registry = registry or default_registry()
        self.sagas = Sagas(self.db, self.registry)
        self.catalogue = Catalogue(self.db)
        self.purchases = Purchases(self.db, self.sagas)
        self.inbox = Inbox(self.db, self.registry, self.provider_getter)
        self.recon = Reconciliation(
            self.db, self.registry, PaymentJudge(self.db, self.provider_getter)
        )
        self._sandbox_url = sandbox_url
        self._provider = provider
        self._sandbox: Sandbox | None = None

    def __repr__(self) -> str:
        return f"<Engine {self.db!r}>"

    def _check_schema(self) -> None:
        if not self._create:
            self.db.require_file()
        _migrate.ensure_current(self.db)

    @property
    def sandbox_url(self) -> str:
        """The sandbox provider's database URL."""
        from saga._sandbox import sandbox_url_for  # noqa: PLC0415 - the sandbox loads lazily

        return (
            self._sandbox_url
            or os.environ.get(SANDBOX_URL_ENV)
            or sandbox_url_for(self.db.url.render_as_string(hide_password=False))
        )

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox payment provider, opened on first use."""
        if self._sandbox is None:
            from saga._sandbox import Sandbox  # noqa: PLC0415 - opened only when needed

            if not self._create:
                self.db.require_file()  # the engine's own file is missing: name that one

            self._sandbox = Sandbox(self.sandbox_url, create=self._create)
        return self._sandbox

    @property
    def provider(self) -> PaymentProvider:
        """The payment provider: the one given, else the sandbox."""
        return self._provider if self._provider is not None else self.sandbox

    def provider_getter(self) -> PaymentProvider:
        """The payment provider, looked up when needed (the sandbox opens on first use)."""
        return self.provider

    def step_kinds(self) -> list[JobKind]:
        """The job kinds that run the actions of the registered sagas."""
        return [kind for saga_type in self.registry for kind in saga_type.step_kinds(self)]

    def pollers(self) -> list[Poller]:
        """What workers look at besides the queue: the sandbox's webhooks."""
        from saga._pollers import SandboxWebhooks  # noqa: PLC0415 - avoids an import cycle

        return [] if self._provider is not None else [SandboxWebhooks(self)]

    def upgrade(self) -> _migrate.UpgradeResult:
        """Create or migrate the schema (idempotent); on PostgreSQL, its schema too."""
        self.db.create_schema()
        return _migrate.upgrade(self.db)

    def close(self) -> None:
        """Release the database connections."""
        self.db.dispose()
        if self._sandbox is not None:
            self._sandbox.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
