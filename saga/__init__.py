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

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # what type checkers and readers see; at run time, on first use
    from saga import codec, exceptions, validation  # public modules of helpers
    from saga.core.app import Application
    from saga.core.app_loading import load_app
    from saga.core.engine import Engine, default_registry
    from saga.core.faults import CRASH_POINTS, crash_point
    from saga.core.logs import get_logger
    from saga.core.messages.consumer import Consumer
    from saga.core.messages.inbox import (
        Applied,
        Delivery,
        Message,
        Observed,
        Observer,
        Route,
        by_saga_id,
    )
    from saga.core.messages.netfault import Outage
    from saga.core.messages.outbox import Emit, Event
    from saga.core.messages.rabbitmq import consume as consume_events
    from saga.core.messages.rabbitmq import declare as declare_events_queue
    from saga.core.messages.rabbitmq import remove as remove_exchange
    from saga.core.messages.relay import Publisher, Relay, Subscribers
    from saga.core.messages.signatures import SignatureRefused
    from saga.core.messages.signatures import check as check_signature
    from saga.core.messages.signatures import sign as sign_webhook
    from saga.core.messages.webhooks import WebhookDoor
    from saga.core.metrics import record_provider_call
    from saga.core.ops.invariants import Invariant, Report
    from saga.core.ops.stats import collect as collect_stats
    from saga.core.ops.verify import verify
    from saga.core.queue.backoff import Backoff
    from saga.core.queue.dead_letters import DeadLetters
    from saga.core.queue.dead_letters import Filter as DeadLetterFilter
    from saga.core.queue.fencing import fence_in, fenced
    from saga.core.queue.jobs import NewJob, enqueue_in
    from saga.core.queue.kinds import Apply, Handlers, JobKind, Step, classify_error, error_text
    from saga.core.queue.leases import Queue
    from saga.core.queue.values import Job
    from saga.core.recon.checker import Checker, Verdict
    from saga.core.recon.items import (
        ContradictedDecision,
        Decision,
        Judge,
        Observation,
        ReconItem,
        ReconPolicy,
        record_observation,
    )
    from saga.core.recon.lifecycle import ReconHook, open_review
    from saga.core.sagas.changes import Change, Fired, SagaHook, Started
    from saga.core.sagas.money import MoneySummary, Movement
    from saga.core.sagas.registry import Context, Registry, Starter
    from saga.core.sagas.runtime import Sagas
    from saga.core.sagas.transitions import fire_in, get_in, history_in, lock_in
    from saga.core.store.backend import normalize_url
    from saga.core.store.db import Database, Tx
    from saga.core.store.records import SagaRecord, TransitionRecord
    from saga.core.store.sqlfiles import SqlComponent
    from saga.core.workers.fleet import FleetReport, WorkerFleet
    from saga.core.workers.pollers import Poller
    from saga.core.workers.supervisor import WorkerOptions
    from saga.core.workers.worker import Worker
    from saga.exceptions import SagaError
    from state_machine import (
        OPERATOR,
        RECONCILIATION,
        ROUTE,
        STEP,
        TIMER,
        Machine,
        State,
        Timeout,
        Transition,
        guard,
        to_mermaid,
    )
    from steps import OutcomeUnknown, PermanentError, StepError, TransientError

# Each public name and where it lives: importing ``saga`` costs nothing until a
# name is used, so ``saga --help`` and light commands never load SQLAlchemy.
_EXPORTS: Final[dict[str, tuple[str, str | None]]] = {
    "Application": ("saga.core.app", "Application"),
    "DeadLetterFilter": ("saga.core.queue.dead_letters", "Filter"),
    "DeadLetters": ("saga.core.queue.dead_letters", "DeadLetters"),
    "CRASH_POINTS": ("saga.core.faults", "CRASH_POINTS"),
    "FleetReport": ("saga.core.workers.fleet", "FleetReport"),
    "Outage": ("saga.core.messages.netfault", "Outage"),
    "WorkerFleet": ("saga.core.workers.fleet", "WorkerFleet"),
    "WorkerOptions": ("saga.core.workers.supervisor", "WorkerOptions"),
    "consume_events": ("saga.core.messages.rabbitmq", "consume"),
    "declare_events_queue": ("saga.core.messages.rabbitmq", "declare"),
    "remove_exchange": ("saga.core.messages.rabbitmq", "remove"),
    "Apply": ("saga.core.queue.kinds", "Apply"),
    "Backoff": ("saga.core.queue.backoff", "Backoff"),
    "Change": ("saga.core.sagas.changes", "Change"),
    "Checker": ("saga.core.recon.checker", "Checker"),
    "Consumer": ("saga.core.messages.consumer", "Consumer"),
    "Context": ("saga.core.sagas.registry", "Context"),
    "ContradictedDecision": ("saga.core.recon.items", "ContradictedDecision"),
    "Database": ("saga.core.store.db", "Database"),
    "Decision": ("saga.core.recon.items", "Decision"),
    "Emit": ("saga.core.messages.outbox", "Emit"),
    "Engine": ("saga.core.engine", "Engine"),
    "Event": ("saga.core.messages.outbox", "Event"),
    "Fired": ("saga.core.sagas.changes", "Fired"),
    "Handlers": ("saga.core.queue.kinds", "Handlers"),
    "Invariant": ("saga.core.ops.invariants", "Invariant"),
    "Job": ("saga.core.queue.values", "Job"),
    "JobKind": ("saga.core.queue.kinds", "JobKind"),
    "Judge": ("saga.core.recon.items", "Judge"),
    "Machine": ("state_machine", "Machine"),
    "Message": ("saga.core.messages.inbox", "Message"),
    "MoneySummary": ("saga.core.sagas.money", "MoneySummary"),
    "Movement": ("saga.core.sagas.money", "Movement"),
    "NewJob": ("saga.core.queue.jobs", "NewJob"),
    "OPERATOR": ("state_machine", "OPERATOR"),
    "Observation": ("saga.core.recon.items", "Observation"),
    "RECONCILIATION": ("state_machine", "RECONCILIATION"),
    "ROUTE": ("state_machine", "ROUTE"),
    "STEP": ("state_machine", "STEP"),
    "TIMER": ("state_machine", "TIMER"),
    "OutcomeUnknown": ("steps", "OutcomeUnknown"),
    "PermanentError": ("steps", "PermanentError"),
    "Poller": ("saga.core.workers.pollers", "Poller"),
    "Publisher": ("saga.core.messages.relay", "Publisher"),
    "Queue": ("saga.core.queue.leases", "Queue"),
    "ReconHook": ("saga.core.recon.lifecycle", "ReconHook"),
    "ReconItem": ("saga.core.recon.items", "ReconItem"),
    "ReconPolicy": ("saga.core.recon.items", "ReconPolicy"),
    "Registry": ("saga.core.sagas.registry", "Registry"),
    "Relay": ("saga.core.messages.relay", "Relay"),
    "Report": ("saga.core.ops.invariants", "Report"),
    "Route": ("saga.core.messages.inbox", "Route"),
    "Observed": ("saga.core.messages.inbox", "Observed"),
    "Observer": ("saga.core.messages.inbox", "Observer"),
    "Applied": ("saga.core.messages.inbox", "Applied"),
    "Delivery": ("saga.core.messages.inbox", "Delivery"),
    "SagaError": ("saga.exceptions", "SagaError"),
    "SagaHook": ("saga.core.sagas.changes", "SagaHook"),
    "SagaRecord": ("saga.core.store.records", "SagaRecord"),
    "Sagas": ("saga.core.sagas.runtime", "Sagas"),
    "SqlComponent": ("saga.core.store.sqlfiles", "SqlComponent"),
    "Started": ("saga.core.sagas.changes", "Started"),
    "Starter": ("saga.core.sagas.registry", "Starter"),
    "State": ("state_machine", "State"),
    "Step": ("saga.core.queue.kinds", "Step"),
    "StepError": ("steps", "StepError"),
    "Subscribers": ("saga.core.messages.relay", "Subscribers"),
    "Timeout": ("state_machine", "Timeout"),
    "TransientError": ("steps", "TransientError"),
    "Transition": ("state_machine", "Transition"),
    "TransitionRecord": ("saga.core.store.records", "TransitionRecord"),
    "Tx": ("saga.core.store.db", "Tx"),
    "Verdict": ("saga.core.recon.checker", "Verdict"),
    "Worker": ("saga.core.workers.worker", "Worker"),
    "by_saga_id": ("saga.core.messages.inbox", "by_saga_id"),
    "classify_error": ("saga.core.queue.kinds", "classify_error"),
    "codec": ("saga.codec", None),
    "collect_stats": ("saga.core.ops.stats", "collect"),
    "crash_point": ("saga.core.faults", "crash_point"),
    "default_registry": ("saga.core.engine", "default_registry"),
    "enqueue_in": ("saga.core.queue.jobs", "enqueue_in"),
    "error_text": ("saga.core.queue.kinds", "error_text"),
    "exceptions": ("saga.exceptions", None),
    "fence_in": ("saga.core.queue.fencing", "fence_in"),
    "fenced": ("saga.core.queue.fencing", "fenced"),
    "record_provider_call": ("saga.core.metrics", "record_provider_call"),
    "SignatureRefused": ("saga.core.messages.signatures", "SignatureRefused"),
    "check_signature": ("saga.core.messages.signatures", "check"),
    "sign_webhook": ("saga.core.messages.signatures", "sign"),
    "WebhookDoor": ("saga.core.messages.webhooks", "WebhookDoor"),
    "fire_in": ("saga.core.sagas.transitions", "fire_in"),
    "get_in": ("saga.core.sagas.transitions", "get_in"),
    "guard": ("state_machine", "guard"),
    "history_in": ("saga.core.sagas.transitions", "history_in"),
    "lock_in": ("saga.core.sagas.transitions", "lock_in"),
    "get_logger": ("saga.core.logs", "get_logger"),
    "load_app": ("saga.core.app_loading", "load_app"),
    "normalize_url": ("saga.core.store.backend", "normalize_url"),
    "open_review": ("saga.core.recon.lifecycle", "open_review"),
    "record_observation": ("saga.core.recon.items", "record_observation"),
    "to_mermaid": ("state_machine", "to_mermaid"),
    "validation": ("saga.validation", None),
    "verify": ("saga.core.ops.verify", "verify"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        msg = f"module 'saga' has no attribute {name!r}"
        raise AttributeError(msg) from None
    loaded = importlib.import_module(module)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CRASH_POINTS",
    "OPERATOR",
    "RECONCILIATION",
    "ROUTE",
    "STEP",
    "TIMER",
    "Application",
    "Applied",
    "Apply",
    "Backoff",
    "Change",
    "Checker",
    "Consumer",
    "Context",
    "ContradictedDecision",
    "Database",
    "DeadLetterFilter",
    "DeadLetters",
    "Decision",
    "Delivery",
    "Emit",
    "Engine",
    "Event",
    "Fired",
    "FleetReport",
    "Handlers",
    "Invariant",
    "Job",
    "JobKind",
    "Judge",
    "Machine",
    "Message",
    "MoneySummary",
    "Movement",
    "NewJob",
    "Observation",
    "Observed",
    "Observer",
    "Outage",
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
    "SignatureRefused",
    "SqlComponent",
    "Started",
    "Starter",
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
    "WebhookDoor",
    "Worker",
    "WorkerFleet",
    "WorkerOptions",
    "by_saga_id",
    "check_signature",
    "classify_error",
    "codec",
    "collect_stats",
    "consume_events",
    "crash_point",
    "declare_events_queue",
    "default_registry",
    "enqueue_in",
    "error_text",
    "exceptions",
    "fence_in",
    "fenced",
    "fire_in",
    "get_in",
    "get_logger",
    "guard",
    "history_in",
    "load_app",
    "lock_in",
    "normalize_url",
    "open_review",
    "record_observation",
    "record_provider_call",
    "remove_exchange",
    "sign_webhook",
    "to_mermaid",
    "validation",
    "verify",
]
