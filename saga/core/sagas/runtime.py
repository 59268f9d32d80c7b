"""
The saga runtime's front door: each call one transaction.

:class:`Sagas` checks what it is given, opens the transaction and runs the
in-transaction function of :mod:`saga.core.sagas.transitions` in it (a
refused event's record commits on its own).  Apart from those functions,
which the engine's other parts call inside transactions of their own.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from typing_extensions import TypeVar

from saga.core.faults import crash_point
from saga.core.sagas.refusals import record_refusal
from saga.core.sagas.transitions import fire_in, get_in, history_in, start_in
from saga.exceptions import EventRefused, InvalidInput
from saga.validation import identifier as check_identifier
from saga.validation import operation_id as check_operation_id
from state_machine import ORIGINS, RECONCILIATION, STEP

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga.core.sagas.changes import Fired, Started
    from saga.core.sagas.transitions import Kinds
    from saga.core.store.db import Database, Tx
    from saga.core.store.records import SagaRecord, TransitionRecord

T = TypeVar("T")


def _nothing_more(tx: Tx, started: Started) -> None:
    del tx, started


class Sagas:
    """
    Create and move sagas in one database.

    Args:
        db: the database.
        registry: the saga kinds this runtime knows (a
            :class:`~saga.core.sagas.registry.Registry`).

    """

    def __init__(self, db: Database, registry: Kinds) -> None:
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
