"""
Applications: the unit of extension the engine runs.

An application declares its saga kinds (a :class:`~saga.Registry` of
machines with their hooks and the job kinds running their actions), the job
kinds of its own (checks, cancellations, anything queued by its code), what
workers poll besides the queue, its invariants for ``saga verify``, and the
services its commands use, as one object of its own class (``engine.services``,
typed ``Engine[MyServices]``), and commands of its own.  Every command loads one
with ``--app MODULE:NAME`` (or ``$SAGA_APP``; :mod:`saga.core.app_loading`);
without it, the one :data:`saga.settings.DEFAULT_APP` names.

:meth:`Application.problems` lists every problem at once: an action no job kind
runs, a step job kind for an action no state declares, a job kind of two
applications' parts under one name (the checks of its reconciliation and its
routes are :mod:`saga.core.app_checks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from saga.core.app_checks import over_ceiling, recon_problems, route_origin_problems
from saga.core.commands import NO_COMMANDS, Commands
from saga.core.queue.kinds import JobKind
from saga.core.recon.items import ReconPolicy
from saga.core.recon.lifecycle import ReconHook
from saga.core.sagas.money import MoneySummary, no_money
from saga.core.sagas.plans import Migration, declared_problems
from saga.core.sagas.registry import Context, Registry, SagaType
from saga.core.sagas.versions import step_problems, steps_by_kind
from saga.core.store.sqlfiles import DIALECTS, ENGINE
from saga.exceptions import NotFound

if TYPE_CHECKING:
    from saga.core.messages.consumer import Consumer
    from saga.core.messages.inbox import Route
    from saga.core.messages.webhooks import Receiver
    from saga.core.ops.invariants import Invariant
    from saga.core.store.sqlfiles import SqlComponent
    from saga.core.workers.pollers import Poller

# The class of an application's services (``Application[MyServices]``).
S = TypeVar("S", default=Any)

JobsFactory = Callable[[Context[S]], Iterable[JobKind]]
PollersFactory = Callable[[Context[S]], Iterable["Poller"]]
InvariantsFactory = Callable[[Context[S]], Iterable["Invariant"]]
ServicesFactory = Callable[[Context], S]
FiguresFactory = Callable[[Context[S]], Mapping[str, Any]]
SubscribersFactory = Callable[[Context[S]], Mapping[str, Iterable[Callable[[Any], object]]]]
WebhooksFactory = Callable[[Context[S]], Mapping[str, "Receiver"]]
MessagesOf = Callable[[Context[S], str], Iterable[Mapping[str, Any]]]
MoneyOf = Callable[[Context[S], Sequence[str]], Mapping[str, MoneySummary]]


def _no_messages(engine: Context, saga_id: str) -> tuple[()]:
    del engine, saga_id
    return ()


def _nothing(engine: Context) -> tuple[()]:
    del engine
    return ()


def _no_services(engine: Context) -> Any:
    del engine


def _no_figures(engine: Context) -> dict[str, Any]:
    del engine
    return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Application(Generic[S]):
    """
    What an application brings to the engine.

    Generic in the class of its services: ``Application(services=Shop)``
    is an ``Application[Shop]``, run by an ``Engine[Shop]`` whose
    ``engine.services`` is a ``Shop``; its factories take a ``Context[Shop]``.

    Args:
        name: shown in logs and ``saga stats``.
        registry: its saga kinds; each ``register(..., steps=...)`` returns the
            job kinds running that machine's actions (one per action).
        jobs: job kinds of its own, built for an engine (queued by its code).
        pollers: what workers look at besides the queue, built for an engine.
        invariants: its rules for ``saga verify``, checked for an engine.
        figures: its own figures for ``saga stats`` (under ``"application"``).
        routes: its inbox routes: a message of a source and a type, correlated to
            a saga, becomes a saga event (``engine.messages.deliver``), or, when
            the route observes, what its observer saw decides the effect.
        recon: its reconciliation: one :class:`~saga.ReconPolicy` (for every
            kind whose machine has the policy's state), or one per saga kind
            (``{"order": …, "payout": …}``): the state meaning "outcome
            unknown", the operators' outcomes and their events, the checker's
            job kind, the judge (``ReconPolicy(judge=…)``).  The engine wires
            each kind's :class:`~saga.recon.ReconHook` itself.
        services: builds, once for an engine, the object of its own class its
            commands and users reach as ``engine.services`` (the purchase's
            ``engine.services.purchases``); typed by the class it returns.
            An object with a ``close()`` is closed with the engine.
        sql: its tables and named queries (:class:`~saga.store.SqlComponent`): its
            migrations are applied by ``saga db upgrade`` after the engine's, and
            its queries run in the engine's transactions (``tx.all("my_query")``).
        subscribers: in-process subscribers of its outbox events, by type
            pattern (``{"order.*": [notify]}``), called by the relay.
        consumers: its consumers of published events (``saga consume NAME``).
        webhooks: its receivers of signed HTTP webhooks, by provider name, built
            for an engine (``POST /webhooks/<provider>``, see
            :class:`~saga.core.messages.webhooks.WebhookDoor`); each route's source is
            served too.
        messages: the messages its own inbox matched to one saga (``source``,
            ``event_id``, ``type``, ``outcome``, ``detail``, ``received_at``),
            shown with the engine's inbox's in the console's timeline.
        money: for some saga ids, each one's money (:class:`~saga.sagas.MoneySummary`:
            expected, charged, refunded, money moved outside the provider, and
            who or what it is about), shown by the console's queue, item and
            saga pages and by ``saga recon show``; sagas it leaves out hold none.
        commands: its own commands and options on the ``saga`` command line
            (:class:`~saga.core.commands.Commands`); they exist only under it.
        migrations: how live sagas move from an older definition version of a
            kind to a newer one (:class:`~saga.Migration`), checked with the
            rest and applied by ``saga migrate apply``.

    """

    name: str
    registry: Registry = field(default_factory=Registry)
    jobs: JobsFactory[S] = _nothing
    pollers: PollersFactory[S] = _nothing
    invariants: InvariantsFactory[S] = _nothing
    services: ServicesFactory[S] = _no_services
    recon: ReconPolicy | Mapping[str, ReconPolicy] = field(default_factory=ReconPolicy)
    routes: tuple[Route, ...] = ()
    figures: FiguresFactory[S] = _no_figures
    sql: SqlComponent | None = None
    subscribers: SubscribersFactory[S] = _no_figures
    consumers: tuple[Consumer, ...] = ()
    webhooks: WebhooksFactory[S] = _no_figures
    messages: MessagesOf[S] = _no_messages
    money: MoneyOf[S] = no_money
    commands: Commands = NO_COMMANDS
    migrations: tuple[Migration, ...] = ()

    def recon_policies(self) -> dict[str, ReconPolicy]:
        """
        Its reconciliation policy of each saga kind that has one.

        The single-policy form covers every kind whose machine declares the
        policy's state; a policy without outcomes is no reconciliation at all.
        """
        if isinstance(self.recon, ReconPolicy):
            policy = self.recon
            if not policy.outcomes:
                return {}
            return {
                saga_type.machine.name: policy
                for saga_type in self.registry
                if saga_type.machine.has_state(policy.state)
            }
        return dict(self.recon)

    def wired_registry(self) -> Registry:
        """
        Its registry as the engine runs it: each kind knows its policy's outcomes.

        A kind with a policy and no :class:`~saga.recon.ReconHook` gets one: an
        application declares its policy once, the engine opens its items.
        """
        policies = self.recon_policies()

        def wire(saga_type: SagaType) -> SagaType:
            policy = policies.get(saga_type.machine.name)
            if policy is None:
                return saga_type
            hooks = saga_type.hooks
            if not any(isinstance(hook, ReconHook) for hook in hooks):
                hooks = (*hooks, ReconHook(policy))
            return dataclasses.replace(
                saga_type, hooks=hooks, recon_outcomes=MappingProxyType(dict(policy.outcomes))
            )

        return self.registry.mapped(wire)

    def route_sources(self) -> set[str]:
        """The sources its inbox routes take messages from."""
        return {route.source for route in self.routes}

    def step_kinds(self, engine: Context) -> list[JobKind]:
        """The job kinds running the actions of its sagas (one per name, whatever the versions)."""
        return [
            kind
            for kinds in steps_by_kind(self.registry, engine).values()
            for kind in kinds.values()
        ]

    def job_kinds(self, engine: Context) -> list[JobKind]:
        """Every job kind it runs: its sagas' steps and its own jobs."""
        return [*self.step_kinds(engine), *self.jobs(engine)]

    def problems(self, engine: Context) -> list[str]:
        """Everything wrong with it, all at once (empty: it can run)."""
        found: list[str] = []
        seen: dict[str, int] = {}
        kinds = self.job_kinds(engine)
        for kind in kinds:
            seen[kind.name] = seen.get(kind.name, 0) + 1
        found += [f"job kind {name!r} is declared {n} times" for name, n in seen.items() if n > 1]
        own = {kind.name for kind in self.jobs(engine)}
        events = {t.event for saga_type in self.registry for t in saga_type.machine.transitions}
        found += [
            f"inbox route {route.source}/{route.type} fires {route.event!r}, which no saga declares"
            for route in self.routes
            # An observed route's event is the observer's to choose.
            if route.observe is None and route.event not in events
        ]
        found += self.sql_problems()
        names = [consumer.name for consumer in self.consumers]
        found += sorted({f"consumer {n!r} is declared twice" for n in names if names.count(n) > 1})
        policies = self.recon_policies()
        found += recon_problems(self.recon, self.registry, policies)
        found += route_origin_problems(self.routes, self.registry, policies)
        found += self._kind_problems(engine, kinds, own)
        found += declared_problems(self.migrations, self.registry)
        return found

    def _kind_problems(self, engine: Context, kinds: list[JobKind], own: set[str]) -> list[str]:
        """Its saga kinds' events and steps; a kind's actions are those of all its versions."""
        found = step_problems(self.registry, engine)
        newest: dict[str, int] = {}
        actions_of: dict[str, set[str]] = {}
        for saga_type in self.registry:
            machine = saga_type.machine
            newest[machine.name] = max(newest.get(machine.name, 0), machine.version)
            actions = {f"{machine.name}.{a}" for state in machine.states for a in state.actions}
            actions_of.setdefault(machine.name, set()).update(actions)
            found += over_ceiling(saga_type.max_attempts, kinds, actions)
        for saga_type in self.registry:
            machine = saga_type.machine
            for emit in saga_type.emits:
                found += emit.problems(machine)
                if emit.since is not None and emit.since > newest[machine.name]:
                    found.append(
                        f"saga {machine.name!r}: event {emit.type!r} is declared since "
                        f"v{emit.since}, a version the application does not register"
                    )
            emitted = [(s, e.type) for e in saga_type.emits for s in e.states]
            found += sorted(
                {
                    f"saga {machine.name!r}: event {type_!r} is declared twice on {state!r}"
                    for state, type_ in emitted
                    if emitted.count((state, type_)) > 1
                }
            )
        steps_of = steps_by_kind(self.registry, engine)
        for name, actions in sorted(actions_of.items()):
            steps = set(steps_of.get(name, {}))
            found += [
                f"saga {name!r}: action {action.partition('.')[2]!r} has no step "
                "(register it with steps=...)"
                for action in sorted(actions - steps - own)
            ]
            found += [
                f"saga {name!r}: step {step!r} runs no action of any state "
                "(declare it as one of its own jobs instead)"
                for step in sorted(steps - actions)
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

    def configured(self, values: Mapping[str, str | None]) -> Application:
        """
        It given the values of its command-line options (those it has; the rest ignored).

        A worker process gets the same values, so it runs the same application.
        """
        options = self.commands.options
        if not options:
            return self
        made: Application = self.commands.configure(
            self, {option.dest: values.get(option.dest) for option in options}
        )
        # Its commands stay: configuring twice is harmless.
        return dataclasses.replace(made, commands=self.commands)
