"""
Create sagas and move them through their machine, inside a transaction.

Every change is one transaction holding the compare-and-set on state and
version, the audit row, the next deadline and its timer, the jobs the new
state queues, the outbox events its kind declares for the new state, and
whatever the saga kind's hooks write (an application's counters, say).
Either all of it commits or none of it does.  These functions run in the
caller's transaction: :class:`~saga.core.sagas.runtime.Sagas` opens one for
each, the timers, the inbox, the checker and the operators' desk call them
in their own.  They read a saga kind through :class:`Kind` and :class:`Kinds`,
the little they need of :mod:`saga.core.sagas.registry`, which builds on the
runtime (its :class:`~saga.core.sagas.registry.Context` holds one).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Protocol, cast

from saga.codec import digest, dump_json
from saga.core import metrics
from saga.core.messages.outbox import emit_in
from saga.core.queue.jobs import TIMER_KIND, NewJob, enqueue_many_in, timer_job
from saga.core.sagas.changes import Change, Fired, Started
from saga.core.sagas.refusals import check_origin
from saga.core.store.records import SagaRecord, TransitionRecord
from saga.exceptions import IdempotencyConflict, InvalidInput, NotFound, VersionConflict
from state_machine import PREVIOUS_STATE, STEP

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from saga.core.messages.outbox import Emit
    from saga.core.sagas.changes import SagaHook
    from saga.core.store.db import Tx
    from state_machine import Machine, State


class Kind(Protocol):
    """What moving a saga reads of its kind (:class:`~saga.core.sagas.registry.SagaType`)."""

    @property
    def machine(self) -> Machine:
        """The kind's state machine."""

    @property
    def hooks(self) -> tuple[SagaHook, ...]:
        """Its hooks, told of each change in its transaction."""

    @property
    def emits(self) -> tuple[Emit, ...]:
        """The outbox events its states emit."""

    @property
    def recon_outcomes(self) -> Mapping[str, str]:
        """Its reconciliation policy's outcomes and their events."""

    @property
    def queue(self) -> str:
        """The queue of the jobs its states queue."""

    def attempts(self, action: str) -> int:
        """The attempts a job running ``action`` is accepted with."""


class Kinds(Protocol):
    """What moving a saga reads of its registry (:class:`~saga.core.sagas.registry.Registry`)."""

    def get(self, kind: str, version: int | None = None) -> Kind:
        """The kind ``kind`` (its newest version when ``version`` is ``None``)."""


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
    saga_type: Kind,
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
    deadline = deadline_of(initial, data)
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
        definition_version=saga.definition_version,
    )
    for hook in saga_type.hooks:
        hook.on_create(tx, saga)
    _enter(tx, saga_type, saga, initial)
    emit_in(tx, saga_type.emits, saga)
    return Started(saga=saga, created=True, history=(start,))


def fire_in(
    tx: Tx,
    registry: Kinds,
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
    deadline = deadline_of(target, data)
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
        finished=target.terminal,
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


def deadline_of(state: State, data: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """The event and seconds of ``state``'s timeout for a saga holding ``data`` (or none)."""
    if state.timeout is None:
        return None, None
    try:
        seconds = state.timeout.duration(data)
    except ValueError as exc:
        raise InvalidInput(field=state.timeout.seconds_from or "timeout", problem=str(exc)) from exc
    return state.timeout.event, seconds


def entry_jobs(
    saga_type: Kind, saga: SagaRecord, state: State, actions: Sequence[str] | None = None
) -> list[NewJob]:
    """
    What entering ``state`` starts, as jobs: its actions (or ``actions`` of them) and its timer.

    The saga is as the entering transaction left it (its new version, its
    deadline read from the database clock).  A migration queues through
    here too (:mod:`saga.core.sagas.migrations`), with the actions still due.
    """
    jobs = [
        NewJob(
            id=f"step:{saga.id}:{saga.version}:{action}",
            queue=saga_type.queue,
            kind=f"{saga.kind}.{action}",
            payload={"saga_id": saga.id, "version": saga.version, "action": action},
            saga_id=saga.id,
            max_attempts=saga_type.attempts(action),
        )
        for action in (state.actions if actions is None else actions)
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
    return jobs


def _enter(tx: Tx, saga_type: Kind, saga: SagaRecord, state: State) -> None:
    """Queue what entering ``state`` starts: its timer and its actions (one batch)."""
    # Their ids name this saga version, which this transaction just made:
    # no job can have had them before (enqueue_many_in's fresh).
    enqueue_many_in(tx, entry_jobs(saga_type, saga, state), fresh=True)
