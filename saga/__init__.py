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
    from saga.core.app import Application, load_app
    from saga.core.backoff import Backoff
    from saga.core.checker import Checker, Verdict
    from saga.core.consumer import Consumer
    from saga.core.db import Database, Tx, normalize_url
    from saga.core.dlq import DeadLetters
    from saga.core.dlq import Filter as DeadLetterFilter
    from saga.core.engine import Engine, default_registry
    from saga.core.faults import CRASH_POINTS, crash_point
    from saga.core.fleet import FleetReport, WorkerFleet
    from saga.core.handlers import Apply, Handlers, JobKind, Step, classify_error, error_text
    from saga.core.inbox import Applied, Delivery, Message, Observed, Observer, Route, by_saga_id
    from saga.core.invariants import Invariant, Report
    from saga.core.jobs import NewJob, enqueue_in
    from saga.core.logs import get_logger
    from saga.core.metrics import record_provider_call
    from saga.core.money import MoneySummary, Movement
    from saga.core.netfault import Outage
    from saga.core.outbox import Emit, Event
    from saga.core.pollers import Poller
    from saga.core.queue import Job, Queue, fence_in, fenced
    from saga.core.rabbitmq import consume as consume_events
    from saga.core.rabbitmq import declare as declare_events_queue
    from saga.core.rabbitmq import remove as remove_exchange
    from saga.core.recon import (
        ContradictedDecision,
        Decision,
        Judge,
        Observation,
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
        Starter,
        fire_in,
        get_in,
        history_in,
        lock_in,
    )
    from saga.core.signatures import SignatureRefused
    from saga.core.signatures import check as check_signature
    from saga.core.signatures import sign as sign_webhook
    from saga.core.sqlfiles import SqlComponent
    from saga.core.stats import collect as collect_stats
    from saga.core.supervisor import WorkerOptions
    from saga.core.verify import verify
    from saga.core.webhooks import WebhookDoor
    from saga.core.worker import Worker
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
    "DeadLetterFilter": ("saga.core.dlq", "Filter"),
    "DeadLetters": ("saga.core.dlq", "DeadLetters"),
    "CRASH_POINTS": ("saga.core.faults", "CRASH_POINTS"),
    "FleetReport": ("saga.core.fleet", "FleetReport"),
    "Outage": ("saga.core.netfault", "Outage"),
    "WorkerFleet": ("saga.core.fleet", "WorkerFleet"),
    "WorkerOptions": ("saga.core.supervisor", "WorkerOptions"),
    "consume_events": ("saga.core.rabbitmq", "consume"),
    "declare_events_queue": ("saga.core.rabbitmq", "declare"),
    "remove_exchange": ("saga.core.rabbitmq", "remove"),
    "Apply": ("saga.core.handlers", "Apply"),
    "Backoff": ("saga.core.backoff", "Backoff"),
    "Change": ("saga.core.sagas", "Change"),
    "Checker": ("saga.core.checker", "Checker"),
    "Consumer": ("saga.core.consumer", "Consumer"),
    "Context": ("saga.core.sagas", "Context"),
    "ContradictedDecision": ("saga.core.recon", "ContradictedDecision"),
    "Database": ("saga.core.db", "Database"),
    "Decision": ("saga.core.recon", "Decision"),
    "Emit": ("saga.core.outbox", "Emit"),
    "Engine": ("saga.core.engine", "Engine"),
    "Event": ("saga.core.outbox", "Event"),
    "Fired": ("saga.core.sagas", "Fired"),
    "Handlers": ("saga.core.handlers", "Handlers"),
    "Invariant": ("saga.core.invariants", "Invariant"),
    "Job": ("saga.core.queue", "Job"),
    "JobKind": ("saga.core.handlers", "JobKind"),
    "Judge": ("saga.core.recon", "Judge"),
    "Machine": ("state_machine", "Machine"),
    "Message": ("saga.core.inbox", "Message"),
    "MoneySummary": ("saga.core.money", "MoneySummary"),
    "Movement": ("saga.core.money", "Movement"),
    "NewJob": ("saga.core.jobs", "NewJob"),
    "OPERATOR": ("state_machine", "OPERATOR"),
    "Observation": ("saga.core.recon", "Observation"),
    "RECONCILIATION": ("state_machine", "RECONCILIATION"),
    "ROUTE": ("state_machine", "ROUTE"),
    "STEP": ("state_machine", "STEP"),
    "TIMER": ("state_machine", "TIMER"),
    "OutcomeUnknown": ("steps", "OutcomeUnknown"),
    "PermanentError": ("steps", "PermanentError"),
    "Poller": ("saga.core.pollers", "Poller"),
    "Publisher": ("saga.core.relay", "Publisher"),
    "Queue": ("saga.core.queue", "Queue"),
    "ReconHook": ("saga.core.recon", "ReconHook"),
    "ReconItem": ("saga.core.recon", "ReconItem"),
    "ReconPolicy": ("saga.core.recon", "ReconPolicy"),
    "Registry": ("saga.core.sagas", "Registry"),
    "Relay": ("saga.core.relay", "Relay"),
    "Report": ("saga.core.invariants", "Report"),
    "Route": ("saga.core.inbox", "Route"),
    "Observed": ("saga.core.inbox", "Observed"),
    "Observer": ("saga.core.inbox", "Observer"),
    "Applied": ("saga.core.inbox", "Applied"),
    "Delivery": ("saga.core.inbox", "Delivery"),
    "SagaError": ("saga.exceptions", "SagaError"),
    "SagaHook": ("saga.core.sagas", "SagaHook"),
    "SagaRecord": ("saga.core.records", "SagaRecord"),
    "Sagas": ("saga.core.sagas", "Sagas"),
    "SqlComponent": ("saga.core.sqlfiles", "SqlComponent"),
    "Started": ("saga.core.sagas", "Started"),
    "Starter": ("saga.core.sagas", "Starter"),
    "State": ("state_machine", "State"),
    "Step": ("saga.core.handlers", "Step"),
    "StepError": ("steps", "StepError"),
    "Subscribers": ("saga.core.relay", "Subscribers"),
    "Timeout": ("state_machine", "Timeout"),
    "TransientError": ("steps", "TransientError"),
    "Transition": ("state_machine", "Transition"),
    "TransitionRecord": ("saga.core.records", "TransitionRecord"),
    "Tx": ("saga.core.db", "Tx"),
    "Verdict": ("saga.core.checker", "Verdict"),
    "Worker": ("saga.core.worker", "Worker"),
    "by_saga_id": ("saga.core.inbox", "by_saga_id"),
    "classify_error": ("saga.core.handlers", "classify_error"),
    "codec": ("saga.codec", None),
    "collect_stats": ("saga.core.stats", "collect"),
    "crash_point": ("saga.core.faults", "crash_point"),
    "default_registry": ("saga.core.engine", "default_registry"),
    "enqueue_in": ("saga.core.jobs", "enqueue_in"),
    "error_text": ("saga.core.handlers", "error_text"),
    "exceptions": ("saga.exceptions", None),
    "fence_in": ("saga.core.queue", "fence_in"),
    "fenced": ("saga.core.queue", "fenced"),
    "record_provider_call": ("saga.core.metrics", "record_provider_call"),
    "SignatureRefused": ("saga.core.signatures", "SignatureRefused"),
    "check_signature": ("saga.core.signatures", "check"),
    "sign_webhook": ("saga.core.signatures", "sign"),
    "WebhookDoor": ("saga.core.webhooks", "WebhookDoor"),
    "fire_in": ("saga.core.sagas", "fire_in"),
    "get_in": ("saga.core.sagas", "get_in"),
    "guard": ("state_machine", "guard"),
    "history_in": ("saga.core.sagas", "history_in"),
    "lock_in": ("saga.core.sagas", "lock_in"),
    "get_logger": ("saga.core.logs", "get_logger"),
    "load_app": ("saga.core.app", "load_app"),
    "normalize_url": ("saga.core.db", "normalize_url"),
    "open_review": ("saga.core.recon", "open_review"),
    "record_observation": ("saga.core.recon", "record_observation"),
    "to_mermaid": ("state_machine", "to_mermaid"),
    "validation": ("saga.validation", None),
    "verify": ("saga.core.verify", "verify"),
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
