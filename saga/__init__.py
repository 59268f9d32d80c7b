"""
A saga orchestration engine: persisted state machines in SQL.

Define a saga with :class:`Machine`, :class:`State`, :class:`Transition`,
:class:`Timeout` and :func:`guard`; declare the :class:`Step` running each
action it lists; put them in an :class:`Application` and run it with an
:class:`Engine` on SQLite (embedded, no setup) or PostgreSQL (many workers,
many machines).  ``saga worker --app MODULE:NAME`` runs it under workers.

The purchase of a paid intensive is the engine's reference application; its
types live in its own modules, not here.
"""

from __future__ import annotations

from saga import exceptions
from saga.core.app import Application, load_app
from saga.core.backoff import Backoff
from saga.core.checker import Checker, Verdict
from saga.core.db import Database, Tx
from saga.core.engine import Engine, default_registry
from saga.core.handlers import Apply, Handlers, JobKind, Step
from saga.core.inbox import Message, Route, by_saga_id
from saga.core.invariants import Invariant
from saga.core.jobs import NewJob
from saga.core.queue import Job, Queue
from saga.core.recon import (
    ContradictedDecision,
    Decision,
    Judge,
    ReconHook,
    ReconItem,
    ReconPolicy,
)
from saga.core.records import SagaRecord, TransitionRecord
from saga.core.sagas import Change, Fired, Registry, SagaHook, Sagas, Started, fire_in
from saga.core.worker import Worker
from saga.exceptions import SagaError
from state_machine import Machine, State, Timeout, Transition, guard, to_mermaid
from steps import OutcomeUnknown, PermanentError, StepError, TransientError

__all__ = [
    "Application",
    "Apply",
    "Backoff",
    "Change",
    "Checker",
    "ContradictedDecision",
    "Database",
    "Decision",
    "Engine",
    "Fired",
    "Handlers",
    "Invariant",
    "Job",
    "JobKind",
    "Judge",
    "Machine",
    "Message",
    "NewJob",
    "OutcomeUnknown",
    "PermanentError",
    "Queue",
    "ReconHook",
    "ReconItem",
    "ReconPolicy",
    "Registry",
    "Route",
    "SagaError",
    "SagaHook",
    "SagaRecord",
    "Sagas",
    "Started",
    "State",
    "Step",
    "StepError",
    "Timeout",
    "TransientError",
    "Transition",
    "TransitionRecord",
    "Tx",
    "Verdict",
    "Worker",
    "by_saga_id",
    "default_registry",
    "exceptions",
    "fire_in",
    "guard",
    "load_app",
    "to_mermaid",
]
