"""
The generic saga runtime: create sagas and move them through their machine.

Every change is one transaction holding the compare-and-set on state and
version, the audit row, the next deadline and its timer, the jobs the new
state queues, the outbox events its kind declares for the new state, and
whatever the saga kind's hooks write (an application's counters, say).
Either all of it commits or none of it does.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from typing_extensions import TypeVar

from saga.codec import digest, dump_json
from saga.core import metrics
from saga.core.faults import crash_point
from saga.core.messages.outbox import emit_in
from saga.core.queue.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    TIMER_KIND,
    NewJob,
    enqueue_many_in,
    timer_job,
)
from saga.core.sagas.refusals import check_origin, record_refusal
from saga.core.store.records import SagaRecord, TransitionRecord
from saga.exceptions import (
    EventRefused,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    VersionConflict,
)
from saga.validation import identifier as check_identifier
from saga.validation import operation_id as check_operation_id
from state_machine import ORIGINS, PREVIOUS_STATE, RECONCILIATION, STEP

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from saga.core.messages.outbox import Emit
    from saga.core.queue.kinds import JobKind, Step
    from saga.core.store.db import Database, Tx
    from state_machine import Machine, State, Transition


@dataclass(frozen=True, slots=True)
class Change:
    """What moved a saga: the transition taken, the event's payload, who and why."""

    transition: Transition
    payload: Mapping[str, Any]
    actor: str
    cause: str | None


class SagaHook(Protocol):
    """Domain writes that belong in the same transaction as a saga's changes."""

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Call after the saga row is inserted in its initial state."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Call after the compare-and-set moved the saga from ``before`` to ``after``."""


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


T = TypeVar("T")
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


def _nothing_more(tx: Tx, started: Started) -> None:
    del tx, started


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


@dataclass(frozen=True, slots=True)
class Started:
    """What :meth:`Sagas.start` did: the saga, and whether this call created it."""

    saga: SagaRecord
    created: bool
    #: The audit rows this call wrote (the "start" row when it created the
    #: saga; none when it found it again): a reply needs not read them back.
    history: tuple[TransitionRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class Fired:
    """What :meth:`Sagas.fire` did: the saga after the event, and the transition taken."""

    saga: SagaRecord
    transition: Transition | None = field(default=None)

    @property
    def absorbed(self) -> bool:
        """Whether a terminal state absorbed the event (nothing changed)."""
        return self.transition is None


class Sagas:
    """
    Create and move sagas in one database.

    Args:
        db: the database.
        registry: the saga kinds this runtime knows.

    """

    def __init__(self, db: Database, registry: Registry) -> None:
        self.db = db
        self.registry = registry

    # -- reading ---------------------------------------------------------------

    def get(self, saga_id: str) -> SagaRecord:
        """The saga ``saga_id``; :class:`NotFound` if there is none."""
        check_identifier("saga_id", saga_id)
        return self.db.transaction(lambda tx: get_in(tx, saga_id), write=False)

    def history(self, saga_id: str) -> list[TransitionRecord]:
        """The saga's audit trail, oldest first."""
        return self.db.transaction(lambda tx: history_in(tx, saga_id), write=False)

    # -- writing ---------------------------------------------------------------

    def start(
        self,
        kind: str,
        *,
        operation_id: str,
        request: Mapping[str, Any],
        prepare: Callable[[Tx], Mapping[str, Any]] | None = None,
        actor: str = "api",
    ) -> Started:
        """
        Accept a new saga under a client-chosen ``operation_id``.

        ``request`` is what the client asked for: the same id with an equal
        request returns the saga it created (``created=False``); with another
        request it raises :class:`IdempotencyConflict` and changes nothing.
        ``prepare`` runs in the transaction to turn the request into the
        saga's data (and may raise to refuse it).
        """
        started, _ = self.start_then(
            kind,
            operation_id=operation_id,
            request=request,
            prepare=prepare,
            actor=actor,
            then=_nothing_more,
        )
        return started

    def start_then(
        self,
        kind: str,
        *,
        operation_id: str,
        request: Mapping[str, Any],
        then: Callable[[Tx, Started], T],
        prepare: Callable[[Tx], Mapping[str, Any]] | None = None,
        actor: str = "api",
    ) -> tuple[Started, T]:
        """
        :meth:`start`, then ``then`` in the same transaction (the reply's read-back).

        One transaction instead of two for a caller that answers with more
        than the saga (an application answering with its own records).
        """
        check_operation_id(operation_id)
        saga_type = self.registry.get(kind)

        def work(tx: Tx) -> tuple[Started, T]:
            started = start_in(
                tx,
                saga_type,
                operation_id=operation_id,
                request=request,
                prepare=prepare,
                actor=actor,
            )
            return started, then(tx, started)

        done = self.db.transaction(work)
        # Committed, not yet acknowledged: a client that never hears back
        # retries with the same operation id and gets this saga.
        crash_point("accept.after_commit")
        return done

    def fire(
        self,
        saga_id: str,
        event: str,
        *,
        payload: Mapping[str, Any] | None = None,
        actor: str,
        cause: str | None = None,
        expected_version: int | None = None,
        kind: str | None = None,
        origin: str = STEP,
    ) -> Fired:
        """
        Deliver ``event`` to a saga and take the transition its machine decides.

        ``origin``: the door it comes through (default ``step``, the application's
        code); an event its machine keeps to other doors is refused and the
        refusal recorded (:class:`~saga.exceptions.EventRefused`).  Reconciliation
        outcomes go through ``engine.recon.resolve``, which asks the judge first.

        With ``expected_version``, a saga that moved on since the caller read
        it raises :class:`VersionConflict`.  With ``kind``, a saga of another
        kind is :class:`NotFound` (named after ``kind``), so an API for one
        kind of saga cannot move another.  A terminal state absorbs events
        that are not declared compensations (``Fired.absorbed``); a
        non-terminal state refuses undeclared events with
        :class:`~saga.exceptions.TransitionNotAllowed`.
        """
        check_identifier("saga_id", saga_id)
        if origin not in ORIGINS or origin == RECONCILIATION:
            raise InvalidInput(
                field="origin",
                problem=f"must be one of {', '.join(o for o in ORIGINS if o != RECONCILIATION)}"
                " (reconciliation outcomes go through engine.recon.resolve and its judge)",
            )
        try:
            return self.db.transaction(
                lambda tx: fire_in(
                    tx,
                    self.registry,
                    saga_id,
                    event,
                    payload=payload or {},
                    actor=actor,
                    cause=cause,
                    expected_version=expected_version,
                    kind=kind,
                    origin=origin,
                )
            )
        except EventRefused as refused:
            # The refused transaction rolled back; its record commits on its own.
            self.db.transaction(
                functools.partial(
                    record_refusal, refused=refused, actor=actor, cause=cause, payload=payload or {}
                )
            )
            raise


def get_in(tx: Tx, saga_id: str) -> SagaRecord:
    """The saga ``saga_id``, read inside ``tx``."""
    row = tx.one("get_saga", id=saga_id)
    if row is None:
        raise NotFound(kind="saga", key=saga_id)
    return SagaRecord.from_row(row)


def lock_in(tx: Tx, saga_id: str) -> SagaRecord:
    """
    The saga ``saga_id``, locked until ``tx`` ends; :class:`NotFound` if there is none.

    Read once per transaction: the lock keeps other writers out, and this
    transaction's own transitions (:func:`fire_in`) keep the copy current.
    """
    held = tx.locked.get(("sagas", saga_id))
    if held is not None:
        return cast("SagaRecord", held)
    row = tx.one("lock_saga", id=saga_id)
    if row is None:
        raise NotFound(kind="saga", key=saga_id)
    saga = SagaRecord.from_row(row)
    tx.locked[("sagas", saga_id)] = saga
    return saga


def history_in(tx: Tx, saga_id: str) -> list[TransitionRecord]:
    """The saga's audit trail, read inside ``tx``."""
    return [TransitionRecord.from_row(row) for row in tx.all("list_transitions", saga_id=saga_id)]


def start_in(
    tx: Tx,
    saga_type: SagaType,
    *,
    operation_id: str,
    request: Mapping[str, Any],
    prepare: Callable[[Tx], Mapping[str, Any]] | None,
    actor: str,
) -> Started:
    """:meth:`Sagas.start` inside ``tx``."""
    machine = saga_type.machine
    saga_id = str(uuid.uuid4())
    fingerprint = digest({"kind": machine.name, "request": dict(request)})
    claimed = tx.one(
        "claim_operation",
        operation_id=operation_id,
        kind=machine.name,
        digest=fingerprint,
        saga_id=saga_id,
    )
    if claimed is None:
        existing = tx.one("get_operation", operation_id=operation_id)
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish
            raise NotFound(kind="operation", key=operation_id)
        if existing["kind"] != machine.name or existing["digest"] != fingerprint:
            raise IdempotencyConflict(operation_id=operation_id, saga_id=existing["saga_id"])
        return Started(saga=get_in(tx, existing["saga_id"]), created=False)

    data = dict(prepare(tx) if prepare is not None else request)
    initial = machine.initial
    deadline = _deadline(initial, data)
    # One statement on PostgreSQL: the saga and its first audit row.
    start_cause = f"operation {operation_id}"
    row = tx.one(
        "insert_saga",
        id=saga_id,
        kind=machine.name,
        definition_version=machine.version,
        state=initial.name,
        data=dump_json(data),
        deadline_event=deadline[0],
        deadline_seconds=deadline[1],
        actor=actor,
        cause=start_cause,
        **tx.lease_params,
    )
    if row is None:  # pragma: no cover - INSERT … RETURNING always returns the row
        raise NotFound(kind="saga", key=saga_id)
    saga = SagaRecord.from_row(row)
    tx.after_commit(metrics.TRANSITIONS.labels(saga.kind, "start").inc)
    start = TransitionRecord(
        version=saga.version,
        from_state=None,
        to_state=saga.state,
        event="start",
        actor=actor,
        cause=start_cause,
        payload={},
        at=saga.created_at,
    )
    for hook in saga_type.hooks:
        hook.on_create(tx, saga)
    _enter(tx, saga_type, saga, initial)
    emit_in(tx, saga_type.emits, saga)
    return Started(saga=saga, created=True, history=(start,))


def fire_in(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    event: str,
    *,
    payload: Mapping[str, Any],
    actor: str,
    cause: str | None,
    expected_version: int | None = None,
    data_update: Mapping[str, Any] | None = None,
    kind: str | None = None,
    origin: str = STEP,
) -> Fired:
    """
    :meth:`Sagas.fire` inside ``tx``, from ``origin``.

    The door says which it is: ``step`` (the default: an application's
    steps and hooks), ``operator``, ``route``, ``timer``, ``reconciliation``
    (the checker and ``recon resolve``).  An event the saga's machine (or its
    reconciliation policy) keeps to other doors raises
    :class:`~saga.exceptions.EventRefused` before anything is written; the
    caller records the refusal (:func:`~saga.core.sagas.refusals.record_refusal`).
    ``data_update`` is merged into the saga's data in the same compare-and-set
    (the chaos tally's read-then-write add, whose lost updates it counts).
    """
    if not actor:
        raise InvalidInput(field="actor", problem="must not be empty")
    try:
        before = lock_in(tx, saga_id)
    except NotFound:
        raise NotFound(kind=kind or "saga", key=saga_id) from None
    if kind is not None and before.kind != kind:
        raise NotFound(kind=kind, key=saga_id)
    if expected_version is not None and before.version != expected_version:
        raise VersionConflict(
            saga_id=saga_id, expected_version=expected_version, actual_version=before.version
        )
    saga_type = registry.get(before.kind, before.definition_version)
    machine = saga_type.machine
    transition = machine.decide(before.state, event, before.data, payload)
    if transition is None:
        return Fired(saga=before, transition=None)
    check_origin(
        tx, saga_type.machine, saga_type.recon_outcomes, saga_id, event=event, origin=origin
    )
    target = machine.state(transition.target)
    # The engine's own key, so that guards can ask where a saga came from.
    data = {**before.data, **(data_update or {}), PREVIOUS_STATE: before.state}
    deadline = _deadline(target, data)
    # One statement: the compare-and-set, the audit row, the old timers.
    moved = tx.one(
        "transition_saga",
        id=saga_id,
        from_state=before.state,
        version=before.version,
        to_state=target.name,
        data=dump_json(data),
        deadline_event=deadline[0],
        deadline_seconds=deadline[1],
        deadline_since_created=bool(target.timeout and target.timeout.since == "created"),
        event=event,
        actor=actor,
        cause=cause,
        payload=dump_json(payload),
        timer_kind=TIMER_KIND,
        **tx.lease_params,
    )
    if moved is None:
        # Unreachable while lock_saga holds the row, but the compare-and-set
        # is the guarantee, not the lock: never overwrite a state blindly.
        current = tx.one("get_saga", id=saga_id)
        raise VersionConflict(
            saga_id=saga_id,
            expected_version=before.version,
            actual_version=None if current is None else int(current["version"]),
        )
    after = SagaRecord.from_row(moved)
    tx.locked[("sagas", saga_id)] = after
    tx.after_commit(metrics.TRANSITIONS.labels(after.kind, event).inc)
    for hook in saga_type.hooks:
        hook.on_transition(
            tx,
            before,
            after,
            Change(transition=transition, payload=payload, actor=actor, cause=cause),
        )
    _enter(tx, saga_type, after, target)
    emit_in(tx, saga_type.emits, after)
    return Fired(saga=after, transition=transition)


def _deadline(state: State, data: Mapping[str, Any]) -> tuple[str | None, float | None]:
    if state.timeout is None:
        return None, None
    try:
        seconds = state.timeout.duration(data)
    except ValueError as exc:
        raise InvalidInput(field=state.timeout.seconds_from or "timeout", problem=str(exc)) from exc
    return state.timeout.event, seconds


def _enter(tx: Tx, saga_type: SagaType, saga: SagaRecord, state: State) -> None:
    """Queue what entering ``state`` starts: its timer and its actions (one batch)."""
    jobs = [
        NewJob(
            id=f"step:{saga.id}:{saga.version}:{action}",
            queue=saga_type.queue,
            kind=f"{saga.kind}.{action}",
            payload={"saga_id": saga.id, "version": saga.version, "action": action},
            saga_id=saga.id,
            max_attempts=saga_type.attempts(action),
        )
        for action in state.actions
    ]
    if saga.deadline_event is not None and saga.deadline_at is not None:
        jobs.append(
            timer_job(
                saga_id=saga.id,
                version=saga.version,
                event=saga.deadline_event,
                due=saga.deadline_at,
            )
        )
    # Their ids name this saga version, which this transaction just made:
    # no job can have had them before (enqueue_many_in's fresh).
    enqueue_many_in(tx, jobs, fresh=True)
