"""
Any saga of any registered kind, for operators: list, show, fire, cancel.

``show`` gathers what explains where a saga is: its history, its live jobs
(steps and timers pending or running, dead letters) and its open items.
``--stuck`` finds sagas in a non-terminal state with no work pending or
running and no open outcome item: nothing will ever move them.  An
operator's event is an audited transition like any other, with the actor and
the reason on its audit row; ``cancel`` fires the kind's declared ``cancel``
event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga import validation as _validation
from saga.codec import iso, maybe_utc
from saga.core.queue.values import JobInfo
from saga.core.recon.items import ReconItem
from saga.core.sagas.refusals import refusals_in
from saga.core.sagas.transitions import get_in, history_in
from saga.core.store.records import SagaRecord
from saga.exceptions import InvalidInput, TransitionNotAllowed
from state_machine import OPERATOR

if TYPE_CHECKING:
    from saga.core.sagas.changes import Fired, Started
    from saga.core.sagas.registry import Context, Registry
    from saga.core.sagas.runtime import Sagas
    from saga.core.store.db import Database, Tx
    from saga.core.store.records import TransitionRecord

LIST_MAX: Final = 10_000
CANCEL_EVENT: Final = "cancel"


@dataclass(frozen=True, slots=True)
class Instance:
    """One saga with what explains its state."""

    saga: SagaRecord
    history: tuple[TransitionRecord, ...]
    jobs: tuple[JobInfo, ...]
    items: tuple[ReconItem, ...]
    terminal: bool
    #: Events refused at their door (who may fire them), oldest first.
    refused: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The saga, its history, its live jobs, timers and dead letters, its open items."""
        jobs = [job.to_json() for job in self.jobs]
        return {
            **saga_json(self.saga, terminal=self.terminal),
            "history": [entry.to_json() for entry in self.history],
            "jobs": [j for j in jobs if j["state"] != "failed" and j["kind"] != "saga.timeout"],
            "timers": [j for j in jobs if j["kind"] == "saga.timeout" and j["state"] != "failed"],
            "dead_letters": [j for j in jobs if j["state"] == "failed"],
            "reconciliation": [item.to_json() for item in self.items],
            "refused": list(self.refused),
        }


def saga_json(saga: SagaRecord, *, terminal: bool) -> dict[str, Any]:
    """A saga as plain data."""
    return {
        "id": saga.id,
        "kind": saga.kind,
        "definition_version": saga.definition_version,
        "state": saga.state,
        "terminal": terminal,
        "version": saga.version,
        "data": dict(saga.data),
        "deadline": (
            {"at": iso(saga.deadline_at), "event": saga.deadline_event}
            if saga.deadline_at is not None
            else None
        ),
        "created_at": iso(saga.created_at),
        "entered_at": iso(saga.entered_at),
        "updated_at": iso(saga.updated_at),
    }


class Instances:
    """Operators' view of sagas of every kind the application registers."""

    def __init__(
        self, db: Database, registry: Registry, sagas: Sagas, *, context: Context | None = None
    ) -> None:
        self.db = db
        self.registry = registry
        self.sagas = sagas
        # The engine, for the kinds that start their own way (their starter's argument).
        self.context = context

    def start(
        self, kind: str, *, operation_id: str, request: str | None, actor: str = "api"
    ) -> Started:
        """
        Start a saga of ``kind`` from a JSON request, idempotent on ``operation_id``.

        The same id with the same request finds the saga it started
        (``created`` false); with another request it is an
        :class:`~saga.exceptions.IdempotencyConflict` and nothing changes.  A
        kind with a starter is started its own way; otherwise
        the request is the saga's data.
        """
        _validation.one_of("kind", kind, self.registry.kinds)
        _validation.operation_id(operation_id)
        data = _validation.json_object("request", request)
        saga_type = self.registry.get(kind)
        if saga_type.starter is None:
            return self.sagas.start(kind, operation_id=operation_id, request=data, actor=actor)
        if self.context is None:
            # Never around the kind's own checks (a price taken from a catalogue, say).
            raise InvalidInput(field="kind", problem=f"{kind} starts only through its engine")
        return saga_type.starter(self.context, operation_id=operation_id, request=data, actor=actor)

    def states(self, kind: str | None = None) -> dict[str, tuple[str, ...]]:
        """The states of each registered kind (or of ``kind``), every version's, in order."""
        found: dict[str, dict[str, None]] = {}
        for saga_type in self.registry:
            machine = saga_type.machine
            if kind is None or machine.name == kind:
                found.setdefault(machine.name, {}).update(dict.fromkeys(machine.state_names))
        return {name: tuple(states) for name, states in sorted(found.items())}

    def _known_state(self, kind: str | None, state: str) -> str:
        """``state``, if some registered kind (``kind``, if given) declares it."""
        known = self.states(kind)
        if any(state in names for names in known.values()):
            return state
        if kind is not None:
            problem = f"{state!r} is no state of {kind}; its states are {', '.join(known[kind])}"
        else:
            listing = "; ".join(f"{name}: {', '.join(names)}" for name, names in known.items())
            problem = f"{state!r} is no state of any kind; the states are {listing}"
        raise InvalidInput(field="state", problem=problem, value=state)

    def terminal(self, saga: SagaRecord) -> bool:
        """Whether the saga's state is final in its machine (unknown kinds: not final)."""
        try:
            machine = self.registry.get(saga.kind, saga.definition_version).machine
        except LookupError:
            return False
        return machine.has_state(saga.state) and machine.state(saga.state).terminal

    def list(
        self,
        *,
        kind: str | None = None,
        state: str | None = None,
        stuck: bool = False,
        limit: int = 100,
    ) -> list[SagaRecord]:
        """Sagas, newest first; ``stuck``: non-terminal ones nothing will move."""
        if kind is not None:
            _validation.one_of("kind", kind, self.registry.kinds)
        if state is not None:
            self._known_state(kind, _validation.identifier("state", state))
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=LIST_MAX)
        if stuck:
            if state is not None:
                raise InvalidInput(field="state", problem="--stuck lists every stuck state")
            rows = self.db.transaction(
                lambda tx: tx.all("sagas_without_work", kind=kind, limit=LIST_MAX), write=False
            )
            found = [SagaRecord.from_row(row) for row in rows]
            return [saga for saga in found if not self.terminal(saga)][:limit]
        rows = self.db.transaction(
            lambda tx: tx.all("list_sagas", kind=kind, state=state, limit=limit), write=False
        )
        return [SagaRecord.from_row(row) for row in rows]

    def show(self, saga_id: str) -> Instance:
        """One saga with its history, live jobs and open items."""
        _validation.identifier("saga_id", saga_id)

        def work(tx: Tx) -> Instance:
            saga = get_in(tx, saga_id)
            return Instance(
                saga=saga,
                history=tuple(history_in(tx, saga_id)),
                jobs=tuple(
                    JobInfo.from_row(row) for row in tx.all("live_jobs_of_saga", saga_id=saga_id)
                ),
                items=tuple(
                    ReconItem.from_row(row) for row in tx.all("open_items_of_saga", saga_id=saga_id)
                ),
                terminal=self.terminal(saga),
                refused=tuple(refusals_in(tx, saga_id)),
            )

        return self.db.transaction(work, write=False)

    def find(self, text: str) -> str | None:
        """The saga whose id, or whose operation id, is ``text``; ``None`` if none."""
        text = text.strip()
        if not text or len(text) > 200:
            return None

        def work(tx: Tx) -> str | None:
            if tx.one("get_saga", id=text) is not None:
                return text
            operation = tx.one("get_operation", operation_id=text)
            return None if operation is None else str(operation["saga_id"])

        return self.db.transaction(work, write=False)

    def events(self, saga_id: str, *, limit: int = 200) -> dict[str, Any]:
        """The messages the inbox matched to it (in) and the events it emitted (out)."""
        _validation.identifier("saga_id", saga_id)

        def work(tx: Tx) -> dict[str, Any]:
            received = tx.all("messages_of_saga", saga_id=saga_id, limit=limit)
            emitted = tx.all("outbox_of_saga", saga_id=saga_id, limit=limit)
            return {
                "in": [
                    {**dict(row), "received_at": iso(maybe_utc(row["received_at"]))}
                    for row in received
                ],
                "out": [
                    {
                        "event_id": row["event_id"],
                        "type": row["type"],
                        "occurred_at": iso(maybe_utc(row["occurred_at"])),
                        "published_at": iso(maybe_utc(row["published_at"])),
                        "dead": row["dead_at"] is not None,
                    }
                    for row in reversed(emitted)
                ],
            }

        return self.db.transaction(work, write=False)

    def fire(
        self,
        saga_id: str,
        event: str,
        *,
        payload: str | None,
        actor: str,
        reason: str,
        expected_version: int | None = None,
    ) -> Fired:
        """
        An operator's event, audited with who and why; refused if the machine refuses it.

        With ``expected_version``, a saga that moved on since is refused
        (:class:`~saga.exceptions.VersionConflict`, nothing changed).

        An event its machine keeps from operators (a reconciliation outcome:
        ``saga recon resolve`` and its judge) is refused and the refusal
        recorded (:class:`~saga.exceptions.EventRefused`).
        """
        _validation.identifier("saga_id", saga_id)
        _validation.identifier("event", event)
        actor = _validation.identifier("actor", actor)
        reason = _validation.text("reason", reason)
        data = _validation.json_object("payload", payload)
        fired: Fired = self.sagas.fire(
            saga_id,
            event,
            payload=data,
            actor=f"operator:{actor}",
            cause=reason,
            origin=OPERATOR,
            expected_version=expected_version,
        )
        if fired.absorbed:
            raise TransitionNotAllowed(
                state=fired.saga.state, event=event, reason="the saga is final"
            )
        return fired

    def cancel(self, saga_id: str, *, actor: str, reason: str) -> Fired:
        """Fire the kind's declared ``cancel`` event; a kind without one is bad input."""
        _validation.identifier("saga_id", saga_id)
        saga = self.sagas.get(saga_id)
        # A question about the definition, asked before the event: the fire
        # itself still decides in its own transaction (a migration between
        # the two is refused there, as any event the machine refuses).
        machine = self.registry.get(saga.kind, saga.definition_version).machine
        if CANCEL_EVENT not in machine.events:
            raise InvalidInput(
                field="cancel",
                problem=(
                    f"{saga.kind} (definition v{saga.definition_version}) has no {CANCEL_EVENT} "
                    f"event; its events are {', '.join(machine.events)} "
                    "(saga instances fire ID EVENT fires one)"
                ),
                value=saga.kind,
            )
        return self.fire(saga_id, CANCEL_EVENT, payload=None, actor=actor, reason=reason)
