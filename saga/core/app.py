"""
Applications: the unit of extension the engine runs.

An application declares its saga kinds (a :class:`~saga.Registry` of
machines with their hooks and the job kinds running their actions), the job
kinds of its own (checks, cancellations, anything queued by its code), what
workers poll besides the queue, its invariants for ``saga verify``, and the
services its commands use.  Every command loads one with ``--app
MODULE:NAME`` (or ``$SAGA_APP``); without it, the purchase application.

:meth:`Application.check` lists every problem at once: an action no job kind
runs, a step job kind for an action no state declares, a job kind of two
applications' parts under one name.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.core.handlers import Handlers, JobKind
from saga.core.money import MoneySummary, no_money
from saga.core.recon import ReconPolicy
from saga.core.sagas import Context, Registry
from saga.core.sqlfiles import DIALECTS, ENGINE
from saga.exceptions import ApplicationError, InvalidInput, NotFound

if TYPE_CHECKING:
    from saga.core.consumer import Consumer
    from saga.core.inbox import Route
    from saga.core.invariants import Invariant
    from saga.core.pollers import Poller
    from saga.core.sqlfiles import SqlComponent
    from saga.core.webhooks import Receiver

APP_ENV: Final = "SAGA_APP"
# Loaded by name, like any user's application: the core imports no application.
DEFAULT_APP: Final = "saga.purchase.app:purchase_app"


@dataclass(frozen=True, slots=True)
class Lazy:
    """A service computed on each access (``engine.sandbox`` opens only when asked for)."""

    get: Callable[[], Any]


JobsFactory = Callable[[Context], Iterable[JobKind]]
PollersFactory = Callable[[Context], Iterable["Poller"]]
InvariantsFactory = Callable[[Context], Iterable["Invariant"]]
ServicesFactory = Callable[[Context], Mapping[str, Any]]
FiguresFactory = Callable[[Context], Mapping[str, Any]]
SubscribersFactory = Callable[[Context], Mapping[str, Iterable[Callable[[Any], object]]]]
WebhooksFactory = Callable[[Context], Mapping[str, "Receiver"]]
MessagesOf = Callable[[Context, str], Iterable[Mapping[str, Any]]]
MoneyOf = Callable[[Context, Sequence[str]], Mapping[str, MoneySummary]]


def _no_messages(engine: Context, saga_id: str) -> tuple[()]:
    del engine, saga_id
    return ()


def _nothing(engine: Context) -> tuple[()]:
    del engine
    return ()


def _no_services(engine: Context) -> dict[str, Any]:
    del engine
    return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Application:
    """
    What an application brings to the engine.

    Args:
        name: shown in logs and ``saga stats``.
        registry: its saga kinds; each ``register(..., steps=...)`` returns the
            job kinds running that machine's actions (one per action).
        jobs: job kinds of its own, built for an engine (queued by its code).
        pollers: what workers look at besides the queue, built for an engine.
        invariants: its rules for ``saga verify``, checked for an engine.
        figures: its own figures for ``saga stats`` (under ``"application"``).
        routes: its inbox routes: a message of a source and a type, correlated to
            a saga, becomes a saga event (``engine.messages.deliver``).
        recon: its reconciliation policy: the state meaning "outcome unknown",
            the operators' outcomes and their events, the checker's job kind.
        services: named objects its commands and users reach as attributes of
            the engine (``engine.purchases``); a :class:`Lazy` one is computed
            on each access.
        sql: its tables and named queries (:class:`~saga.SqlComponent`): its
            migrations are applied by ``saga db upgrade`` after the engine's, and
            its queries run in the engine's transactions (``tx.all("my_query")``).
        subscribers: in-process subscribers of its outbox events, by type
            pattern (``{"purchase.*": [notify]}``), called by the relay.
        consumers: its consumers of published events (``saga consume NAME``).
        webhooks: its receivers of signed HTTP webhooks, by provider name, built
            for an engine (``POST /webhooks/<provider>``, see
            :class:`~saga.core.webhooks.WebhookDoor`); each route's source is
            served too.
        messages: the messages its own inbox matched to one saga (``source``,
            ``event_id``, ``type``, ``outcome``, ``detail``, ``received_at``),
            shown with the engine's inbox's in the console's timeline.
        money: for some saga ids, each one's money (:class:`~saga.MoneySummary`:
            expected, charged, refunded, money moved outside the provider, and
            who or what it is about), shown by the console's queue, item and
            saga pages and by ``saga recon show``; sagas it leaves out hold none.

    """

    name: str
    registry: Registry = field(default_factory=Registry)
    jobs: JobsFactory = _nothing
    pollers: PollersFactory = _nothing
    invariants: InvariantsFactory = _nothing
    services: ServicesFactory = _no_services
    recon: ReconPolicy = field(default_factory=ReconPolicy)
    routes: tuple[Route, ...] = ()
    figures: FiguresFactory = _no_services
    sql: SqlComponent | None = None
    subscribers: SubscribersFactory = _no_services
    consumers: tuple[Consumer, ...] = ()
    webhooks: WebhooksFactory = _no_services
    messages: MessagesOf = _no_messages
    money: MoneyOf = no_money

    def route_sources(self) -> set[str]:
        """The sources its inbox routes take messages from."""
        return {route.source for route in self.routes}

    def step_kinds(self, engine: Context) -> list[JobKind]:
        """The job kinds running the actions of its sagas."""
        return [kind for saga_type in self.registry for kind in saga_type.step_kinds(engine)]

    def job_kinds(self, engine: Context) -> list[JobKind]:
        """Every job kind it runs: its sagas' steps and its own jobs."""
        return [*self.step_kinds(engine), *self.jobs(engine)]

    def problems(self, engine: Context) -> list[str]:
        """Everything wrong with it, all at once (empty: it can run)."""
        found: list[str] = []
        seen: dict[str, int] = {}
        for kind in self.job_kinds(engine):
            seen[kind.name] = seen.get(kind.name, 0) + 1
        found += [f"job kind {name!r} is declared {n} times" for name, n in seen.items() if n > 1]
        own = {kind.name for kind in self.jobs(engine)}
        events = {t.event for saga_type in self.registry for t in saga_type.machine.transitions}
        found += [
            f"inbox route {route.source}/{route.type} fires {route.event!r}, which no saga declares"
            for route in self.routes
            if route.event not in events
        ]
        found += self.sql_problems()
        names = [consumer.name for consumer in self.consumers]
        found += sorted({f"consumer {n!r} is declared twice" for n in names if names.count(n) > 1})
        found += [
            f"reconciliation outcome {outcome!r} fires {event!r}, which no saga declares"
            for outcome, event in self.recon.outcomes.items()
            if event not in events
        ]
        for saga_type in self.registry:
            machine = saga_type.machine
            for emit in saga_type.emits:
                found += emit.problems(machine)
            emitted = [(s, e.type) for e in saga_type.emits for s in e.states]
            found += sorted(
                {
                    f"saga {machine.name!r}: event {type_!r} is declared twice on {state!r}"
                    for state, type_ in emitted
                    if emitted.count((state, type_)) > 1
                }
            )
            actions = {f"{machine.name}.{a}" for state in machine.states for a in state.actions}
            steps = {kind.name for kind in saga_type.step_kinds(engine)}
            found += [
                f"saga {machine.name!r}: action {name.partition('.')[2]!r} has no step "
                "(register it with steps=...)"
                for name in sorted(actions - steps - own)
            ]
            found += [
                f"saga {machine.name!r}: step {name!r} runs no action of any state "
                "(declare it as one of its own jobs instead)"
                for name in sorted(steps - actions)
            ]
        return found

    def sql_problems(self) -> list[str]:
        """What is wrong with its SQL component: a reserved name, a query the engine defines."""
        if self.sql is None:
            return []
        if self.sql.name == ENGINE.name:
            return [f"its SQL component may not be named {ENGINE.name!r} (the engine's own)"]
        found = []
        for dialect in DIALECTS:
            try:
                theirs = self.sql.queries(dialect)
                self.sql.migrations(dialect)
            except (OSError, ValueError) as exc:
                found.append(f"its {dialect} SQL cannot be read: {exc}")
                continue
            found += [
                f"its {dialect} query {name!r} has the name of one of the engine's"
                for name in sorted(set(theirs) & set(ENGINE.queries(dialect)))
            ]
        return found

    def consumer(self, name: str) -> Consumer:
        """Its consumer ``name`` (:class:`~saga.exceptions.NotFound` if it has none)."""
        for consumer in self.consumers:
            if consumer.name == name:
                return consumer
        raise NotFound(kind=f"consumer of the {self.name} application", key=name)

    def check(self, engine: Context) -> None:
        """Raise :class:`~saga.exceptions.ApplicationError` listing every problem."""
        found = self.problems(engine)
        if found:
            raise ApplicationError(application=self.name, problems=found)

    def with_jobs(self, extra: JobsFactory) -> Application:
        """The same application with more job kinds (``--app`` naming a job factory)."""
        own = self.jobs

        def both(engine: Context) -> list[JobKind]:
            return [*own(engine), *extra(engine)]

        return dataclasses.replace(self, jobs=both)


def default_app() -> Application:
    """The reference application (:data:`DEFAULT_APP`): the purchase of a paid intensive."""
    return load_app(DEFAULT_APP)


def load_app(spec: str | None = None) -> Application:
    """
    The application ``MODULE:NAME`` (default ``$SAGA_APP``, else the purchase).

    ``NAME`` is an :class:`Application`, or a function returning one; a
    function returning job kinds (:class:`~saga.core.handlers.Handlers`) adds
    them to the purchase application, as ``saga worker --app`` did before
    applications existed.
    """
    spec = spec if spec is not None else os.environ.get(APP_ENV) or None
    if spec is None:
        return default_app()
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(field="app", problem=f"expected MODULE:NAME, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(field="app", problem=f"cannot import {module_name!r}: {exc}") from exc
    found = getattr(module, attribute, None)
    if isinstance(found, Application):
        return found
    if not callable(found):
        raise InvalidInput(
            field="app", problem=f"{spec!r} is not an Application or a function returning one"
        )
    try:
        made = found()
    except TypeError:
        made = None  # a job factory: it takes the engine
    if isinstance(made, Application):
        return made
    factory: Callable[[Context], Handlers | Iterable[JobKind]] = found
    return default_app().with_jobs(lambda engine: list(factory(engine)))
