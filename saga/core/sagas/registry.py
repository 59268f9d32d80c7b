"""
The saga kinds a runtime knows, and what their code is given.

A kind is a machine registered with its hooks, the steps running its
actions, the events it emits and its own way of starting (:class:`SagaType`,
kept by a :class:`Registry`); its code is built with a :class:`Context` (the
engine, seen narrowly).  Apart from the runtime that moves sagas of these
kinds (:mod:`saga.core.sagas.runtime`, :mod:`saga.core.sagas.transitions`):
a context holds that runtime, so the runtime reads a kind through the little
it needs of one (:class:`~saga.core.sagas.transitions.Kind`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from typing_extensions import TypeVar

from saga.core.queue.jobs import DEFAULT_MAX_ATTEMPTS
from saga.core.store.records import SagaRecord
from saga.exceptions import NotFound

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from saga.core.messages.outbox import Emit
    from saga.core.queue.kinds import JobKind, Step
    from saga.core.sagas.changes import SagaHook, Started
    from saga.core.sagas.runtime import Sagas
    from saga.core.store.db import Database
    from state_machine import Machine


# The type of an application's services (its own class); unsaid, ``Any``: the
# core never looks inside them, an application's code names its own.
Services_co = TypeVar("Services_co", covariant=True, default=Any)


class Messages(Protocol):
    """
    The engine's inbox as an application's parts see it (:class:`~saga.core.messages.inbox.Inbox`).

    Typed loosely here: the inbox module builds on this one.
    """

    def deliver(self, message: Any, *, via: str | None = None) -> Any:
        """Apply ``message`` at most once (:meth:`saga.core.messages.inbox.Inbox.deliver`)."""


class Context(Protocol[Services_co]):
    """
    What an application's parts are built with: the engine, seen narrowly.

    The database, the saga kinds and the runtime over them (the inbox
    included), and the application's services: the object its ``services``
    factory built, of its own class (``Context[MyServices]``).
    :class:`~saga.Engine` is one.
    """

    db: Database
    registry: Registry
    sagas: Sagas
    create: bool

    @property
    def messages(self) -> Messages:
        """The engine's inbox (``engine.messages.deliver``)."""

    @property
    def services(self) -> Services_co:
        """The application's services, built once for the engine."""


TimeoutPayload = Callable[[Context, SagaRecord, str], Mapping[str, Any]]
StepKinds = Callable[[Context], "Sequence[JobKind]"]


class Starter(Protocol):
    """
    A kind's own way of starting a saga from a client's request.

    For kinds whose data is more than the request (a price taken from a
    catalogue, a held resource): ``saga instances start``
    calls it instead of starting the saga with the request as its data.  It
    refuses a request it does not take with :class:`~saga.exceptions.InvalidInput`.
    """

    def __call__(
        self, engine: Context, *, operation_id: str, request: Mapping[str, Any], actor: str
    ) -> Started:
        """Start (or find again) the saga of ``operation_id``."""


def _no_payload(engine: Context, saga: SagaRecord, event: str) -> Mapping[str, Any]:
    del engine, saga, event
    return {}


@dataclass(frozen=True, slots=True)
class SagaType:
    """
    A machine registered with the runtime, with its hooks and job settings.

    ``timeout_payload(engine, saga, event)`` builds the payload of a timeout event;
    it runs outside any transaction, so it may ask the outside world first.

    ``max_attempts`` is an optional ceiling over every step of the kind (the
    application check refuses a step asking for more); ``None``, the default,
    lets each step's own figure be the limit.

    ``recon_outcomes`` are its reconciliation policy's outcomes and their
    events, set by the engine from the application's: only reconciliation
    fires those events unless its machine says otherwise.
    """

    machine: Machine
    hooks: tuple[SagaHook, ...] = ()
    max_attempts: int | None = None
    timeout_payload: TimeoutPayload = _no_payload
    steps: Mapping[str, Step] | StepKinds | None = None
    emits: tuple[Emit, ...] = ()
    starter: Starter | None = None
    recon_outcomes: Mapping[str, str] = field(default_factory=dict)
    # The attempts of the job kinds running its actions, by action, learnt
    # from the kinds an engine built (a factory's kinds exist only for an
    # engine): a job is accepted with its kind's figure, not a default.
    _attempts: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def step_kinds(self, engine: Context) -> Sequence[JobKind]:
        """The job kinds running this saga's actions (none if it declares no steps)."""
        if self.steps is None:
            return ()
        if isinstance(self.steps, Mapping):
            return [step.kind(self.machine.name, action) for action, step in self.steps.items()]
        return self.steps(engine)

    def learn_attempts(self, kinds: Iterable[JobKind]) -> None:
        """Keep the attempts of the kinds named ``<saga>.<action>`` (steps or own jobs)."""
        prefix = f"{self.machine.name}."
        self._attempts.update(
            {
                k.name.removeprefix(prefix): k.max_attempts
                for k in kinds
                if k.name.startswith(prefix)
            }
        )

    def attempts(self, action: str) -> int:
        """
        The attempts a job running ``action`` is accepted with: its kind's figure.

        A step given as a :class:`Step` says it directly; a factory's kinds are
        learnt when an engine checks the application (every engine does before
        its first saga).  Capped by the kind's ceiling, if it has one.
        """
        if isinstance(self.steps, Mapping) and action in self.steps:
            figure = self.steps[action].max_attempts
        else:
            figure = self._attempts.get(action, DEFAULT_MAX_ATTEMPTS)
        return figure if self.max_attempts is None else min(figure, self.max_attempts)

    @property
    def queue(self) -> str:
        """The queue of the jobs its states queue: the saga's name."""
        return self.machine.name


class Registry:
    """The saga kinds a runtime knows, by name and definition version."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, int], SagaType] = {}

    def register(
        self,
        machine: Machine,
        *,
        hooks: Sequence[SagaHook] = (),
        max_attempts: int | None = None,
        timeout_payload: TimeoutPayload = _no_payload,
        steps: Mapping[str, Step] | StepKinds | None = None,
        emits: Sequence[Emit] = (),
        starter: Starter | None = None,
    ) -> SagaType:
        """
        Register ``machine`` with the steps running its actions.

        ``steps`` maps each action its states list to a :class:`Step`, or is
        a function of the engine returning the job kinds (one per action).
        ``emits`` are the events its transitions write to the outbox.
        ``starter`` is the kind's own way of starting one from a request
        (``saga instances start``); without it the request is the saga's data.
        Each step's ``max_attempts`` is its limit; ``max_attempts`` here is an
        optional ceiling over all of them, and a step asking for more than it
        is refused by the application check (never capped silently).
        Registering the same name and version twice is an error; an action
        without a step is found when an engine checks its application.
        """
        key = (machine.name, machine.version)
        if key in self._types:
            msg = f"saga {machine.name!r} version {machine.version} is already registered"
            raise ValueError(msg)
        saga_type = SagaType(
            machine=machine,
            hooks=tuple(hooks),
            max_attempts=max_attempts,
            timeout_payload=timeout_payload,
            steps=steps,
            emits=tuple(emits),
            starter=starter,
        )
        self._types[key] = saga_type
        return saga_type

    def mapped(self, change: Callable[[SagaType], SagaType]) -> Registry:
        """A copy with ``change`` applied to every registered type (the engine's wiring)."""
        copy = Registry()
        copy._types = {key: change(saga_type) for key, saga_type in self._types.items()}
        return copy

    def get(self, kind: str, version: int | None = None) -> SagaType:
        """The registered type; the newest version when ``version`` is ``None``."""
        if version is None:
            versions = [v for (name, v) in self._types if name == kind]
            if not versions:
                raise NotFound(kind="saga kind", key=kind)
            version = max(versions)
        try:
            return self._types[(kind, version)]
        except KeyError:
            raise NotFound(kind="saga definition", key=f"{kind} v{version}") from None

    def __iter__(self) -> Iterator[SagaType]:
        return iter(self._types.values())

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every registered saga name."""
        return tuple(sorted({name for name, _ in self._types}))
