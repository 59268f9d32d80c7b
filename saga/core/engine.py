"""Wiring: one database, one application, and the engine's services over them."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Final, Generic

from saga.core.app import Application, S
from saga.core.app_loading import default_app
from saga.core.messages.inbox import Inbox
from saga.core.messages.relay import DEFAULT_LEASE_SECONDS, Publisher, Relay, Subscribers
from saga.core.ops.stats import CountsRollUp
from saga.core.recon.desk import Reconciliation, judge_problems
from saga.core.recon.items import ReconPolicy
from saga.core.sagas.instances import Instances
from saga.core.sagas.migrations import Migrations
from saga.core.sagas.runtime import Sagas
from saga.core.sagas.versions import check_versions
from saga.core.store import migrate as _migrate
from saga.core.store.backend import DEFAULT_URL
from saga.core.store.db import Database
from saga.core.store.sqlfiles import ENGINE
from saga.exceptions import ApplicationError

if TYPE_CHECKING:
    from saga.core.queue.kinds import JobKind
    from saga.core.sagas.registry import Registry
    from saga.core.workers.pollers import Poller

URL_ENV: Final = "SAGA_DATABASE_URL"


def default_url() -> str:
    """``$SAGA_DATABASE_URL``, else the SQLite file ``saga.db`` in the working directory."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def default_registry() -> Registry:
    """The default application's registry (:func:`~saga.core.app_loading.default_app`)."""
    return default_app().registry


class Engine(Generic[S]):
    """
    The engine over one database, running one application.

    Its first transaction checks the schema: the embedded SQLite file is
    created or upgraded in place; a PostgreSQL schema must be upgraded
    explicitly with ``saga db upgrade`` (:class:`~saga.exceptions.SchemaOutOfDate`).
    Nothing touches the database before that first transaction.  The
    application is checked when the engine is built
    (:class:`~saga.exceptions.DefinitionError` lists every problem), and
    against the database on first use: a definition version it no longer
    registers while sagas still run on it is refused, with their count
    (:mod:`saga.core.sagas.versions`).

    The application's services are ``engine.services``: the object its
    ``services`` factory built, of its own class (the purchase application's
    ``engine.services.purchases``, for instance); an engine running an
    ``Application[Shop]`` is an ``Engine[Shop]``.

    Args:
        url: the database; default :func:`default_url`.
        app: the application; default :func:`~saga.core.app_loading.default_app`.  Its
            own settings (a provider, its databases) are its own: the
            application is built with them.
        registry: the saga kinds, for the default application's services
            over another set of machines (``app`` is the general way).
        check_schema: set ``False`` to skip the schema check (``saga db upgrade`` does).
        create: set ``False`` for reads: a missing embedded file (the engine's or
            one of the application's) is then :class:`~saga.exceptions.DatabaseMissing`
            instead of a new empty database.

    """

    def __init__(
        self,
        url: str | None = None,
        *,
        app: Application[S] | None = None,
        registry: Registry | None = None,
        check_schema: bool = True,
        create: bool = True,
        pool_size: int = 5,
    ) -> None:
        app = app or default_app()
        if registry is not None:
            app = dataclasses.replace(app, registry=registry)
        self.app: Application[S] = app
        if problems := app.sql_problems():
            raise ApplicationError(application=app.name, problems=problems)
        components = (ENGINE,) if app.sql is None else (ENGINE, app.sql)
        self.db = Database(
            default_url() if url is None else url, pool_size=pool_size, components=components
        )
        self.create = create
        if check_schema:
            self.db.before_first_use(self._check_schema)
        try:
            self._wire(app)
        except BaseException:
            # A refused application (or a factory that raised) leaves no connection open.
            self.close()
            raise

    def _wire(self, app: Application[S]) -> None:
        """Build the runtime, the application's services and judges; check the application."""
        policies = app.recon_policies()
        # Each kind knows its policy (who may fire its outcomes), and gets its
        # ReconHook if the application did not register one.
        self.registry = app.wired_registry()
        self.sagas = Sagas(self.db, self.registry)
        self.instances = Instances(self.db, self.registry, self.sagas, context=self)
        self.messages = Inbox(self.db, self.registry, app.routes, context=self)
        self.migrations = Migrations(self.db, self.registry, app.migrations)
        self._services: S = app.services(self)
        # Each policy names its judge, or says its decisions go unchecked.
        judges = {
            kind: None if policy.judge is None or policy.unchecked else policy.judge(self)
            for kind, policy in policies.items()
        }
        self.recon = Reconciliation(
            self.db,
            self.registry,
            app.recon if isinstance(app.recon, ReconPolicy) else None,
            policies=policies,
            judges=judges,
        )
        found = app.problems(self) + judge_problems(judges)
        if found:
            raise ApplicationError(application=app.name, problems=found)
        # Jobs are accepted with the attempts of the kind that runs them (a
        # factory's kinds exist only now, for this engine).
        kinds = app.job_kinds(self)
        for saga_type in self.registry:
            saga_type.learn_attempts(kinds)

    def __repr__(self) -> str:
        return f"<Engine {self.app.name} on {self.db!r}>"

    @property
    def services(self) -> S:
        """The application's services: the object its ``services`` factory built."""
        return self._services

    def _check_schema(self) -> None:
        if not self.create:
            self.db.require_file()
        _migrate.ensure_current(self.db)
        check_versions(self.db, self.registry, self.app.name)

    def step_kinds(self) -> list[JobKind]:
        """The job kinds of the application: its sagas' steps and its own jobs."""
        return self.app.job_kinds(self)

    def pollers(self) -> list[Poller]:
        """
        What workers look at besides the queue.

        The application's (webhooks to deliver, for instance) and, on
        PostgreSQL, the folding of the counts ``saga stats`` keeps.
        """
        own: list[Poller] = [CountsRollUp(self.db)] if self.db.dialect == "postgres" else []
        return [*self.app.pollers(self), *own]

    def relay(
        self,
        *,
        broker_url: str | None = None,
        exchange: str | None = None,
        batch: int = 100,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Relay | None:
        """
        The outbox relay: to the application's subscribers, and to RabbitMQ at ``broker_url``.

        ``None`` when there is nowhere to publish (events then wait in the outbox).
        """
        publishers: list[Publisher] = []
        subscriptions = self.app.subscribers(self)
        if subscriptions:
            publishers.append(Subscribers({p: list(s) for p, s in subscriptions.items()}))
        if broker_url:
            from saga.core.messages.rabbitmq import (  # noqa: PLC0415
                DEFAULT_EXCHANGE,
                RabbitPublisher,
                checked_url,
            )

            publishers.append(
                RabbitPublisher(checked_url(broker_url), exchange=exchange or DEFAULT_EXCHANGE)
            )
        if not publishers:
            return None
        return Relay(self.db, publishers, batch=batch, lease_seconds=lease_seconds)

    def upgrade(self) -> _migrate.UpgradeResult:
        """Create or migrate the schema (idempotent); on PostgreSQL, its schema too."""
        self.db.create_schema()
        return _migrate.upgrade(self.db)

    def close(self) -> None:
        """Release the database connections (and those of the application's services)."""
        self.db.dispose()
        close = getattr(self.__dict__.get("_services"), "close", None)
        if callable(close):
            close()

    def __enter__(self) -> Engine[S]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
