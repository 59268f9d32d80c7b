"""
A saga orchestration engine: persisted state machines in SQL.

Define a saga with :class:`Machine`, :class:`State`, :class:`Transition`,
:class:`Timeout` and :func:`guard`; declare the :class:`Step` running each
action it lists; put them in an :class:`Application` and run it with an
:class:`Engine` on SQLite (embedded, no setup) or PostgreSQL (many workers,
many machines).  ``saga worker --app MODULE:NAME`` runs it under workers.

Everything an application needs is a name of this package (the purchase of
a paid intensive, the engine's reference application, imports nothing
else of the engine); its own types live in its own modules, not here.
``saga.codec`` (JSON and UTC times as the engine stores them) and
``saga.validation`` (checks raising :class:`~saga.exceptions.InvalidInput`)
are the helpers the engine's own commands use.
"""

from __future__ import annotations

from saga import codec, exceptions, validation  # public modules of helpers
from saga.core.app import Application, Lazy, load_app
from saga.core.backoff import Backoff
from saga.core.checker import Checker, Verdict
from saga.core.consumer import Consumer
from saga.core.db import Database, Tx, normalize_url
from saga.core.engine import Engine, default_registry
from saga.core.faults import crash_point
from saga.core.handlers import Apply, Handlers, JobKind, Step, classify_error, error_text
from saga.core.inbox import Message, Route, by_saga_id
from saga.core.invariants import Invariant, Report
from saga.core.jobs import NewJob, enqueue_in
from saga.core.outbox import Emit, Event
from saga.core.pollers import Poller
from saga.core.queue import Job, Queue, fence_in
from saga.core.recon import (
    ContradictedDecision,
    Decision,
    Judge,
    ReconHook,
    ReconItem,
    ReconPolicy,
    open_review,
    record_observation,
)
from saga.core.records import SagaRecord, TransitionRecord
from saga.core.relay import Publisher, Relay, Subscribers
from saga.core.sagas import (
    Change,
    Context,
    Fired,
    Registry,
    SagaHook,
    Sagas,
    Started,
    fire_in,
    get_in,
    history_in,
)
from saga.core.sqlfiles import SqlComponent
from saga.core.stats import collect as collect_stats
from saga.core.verify import verify
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
    "Consumer",
    "Context",
    "ContradictedDecision",
    "Database",
    "Decision",
    "Emit",
    "Engine",
    "Event",
    "Fired",
    "Handlers",
    "Invariant",
    "Job",
    "JobKind",
    "Judge",
    "Lazy",
    "Machine",
    "Message",
    "NewJob",
    "OutcomeUnknown",
    "PermanentError",
    "Poller",
    "Publisher",
    "Queue",
    "ReconHook",
    "ReconItem",
    "ReconPolicy",
    "Registry",
    "Relay",
    "Report",
    "Route",
    "SagaError",
    "SagaHook",
    "SagaRecord",
    "Sagas",
    "SqlComponent",
    "Started",
    "State",
    "Step",
    "StepError",
    "Subscribers",
    "Timeout",
    "TransientError",
    "Transition",
    "TransitionRecord",
    "Tx",
    "Verdict",
    "Worker",
    "by_saga_id",
    "classify_error",
    "codec",
    "collect_stats",
    "crash_point",
    "default_registry",
    "enqueue_in",
    "error_text",
    "exceptions",
    "fence_in",
    "fire_in",
    "get_in",
    "guard",
    "history_in",
    "load_app",
    "normalize_url",
    "open_review",
    "record_observation",
    "to_mermaid",
    "validation",
    "verify",
]
