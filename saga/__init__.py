"""
A saga orchestration engine: persisted state machines in SQL.

Define a saga with :class:`Machine`, :class:`State`, :class:`Transition`,
:class:`Timeout` and :func:`guard`; declare the :class:`Step` running each
action it lists; put them in an :class:`Application` (with the
:class:`Migration` of its live sagas when a machine gets a new version) and
run it with an
:class:`Engine` on SQLite (embedded, no setup) or PostgreSQL (many workers,
many machines).  ``saga worker --app MODULE:NAME`` runs it under workers.

The names here are what an application touches first; the rest of the
public API is in namespaces, each imported by what it is about:
``saga.sagas``, ``saga.queue``, ``saga.events``, ``saga.recon``,
``saga.store``, ``saga.ops``, ``saga.faults``, ``saga.exceptions``,
``saga.cli``, ``saga.testing``, ``saga.codec`` and ``saga.validation``.
docs/api.md lists every public name; ``saga.core`` is the engine's inside,
which the purchase (the reference application) and the examples never import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

# Each top-level name and the module it lives in: importing ``saga`` costs
# nothing until a name is used, so ``saga --help`` and light commands never
# load the engine.  Type checkers read the same names in the block below
# (tests/test_api.py keeps the two alike).
_HOMES: Final[dict[str, str]] = {
    "Application": "saga.core.app",
    "Apply": "saga.core.queue.kinds",
    "Context": "saga.core.sagas.registry",
    "Engine": "saga.core.engine",
    "Job": "saga.core.queue.values",
    "JobKind": "saga.core.queue.kinds",
    "Machine": "state_machine",
    "Message": "saga.core.messages.inbox",
    "Migration": "saga.core.sagas.plans",
    "OutcomeUnknown": "steps",
    "PermanentError": "steps",
    "ReconPolicy": "saga.core.recon.items",
    "Registry": "saga.core.sagas.registry",
    "Route": "saga.core.messages.inbox",
    "SagaError": "saga.exceptions",
    "SagaRecord": "saga.core.store.records",
    "State": "state_machine",
    "Step": "saga.core.queue.kinds",
    "StepError": "steps",
    "Timeout": "state_machine",
    "TransientError": "steps",
    "Transition": "state_machine",
    "Tx": "saga.core.store.db",
    "by_saga_id": "saga.core.messages.inbox",
    "fire_in": "saga.core.sagas.transitions",
    "guard": "state_machine",
}

if TYPE_CHECKING:
    from saga.core.app import Application as Application
    from saga.core.engine import Engine as Engine
    from saga.core.messages.inbox import Message as Message
    from saga.core.messages.inbox import Route as Route
    from saga.core.messages.inbox import by_saga_id as by_saga_id
    from saga.core.queue.kinds import Apply as Apply
    from saga.core.queue.kinds import JobKind as JobKind
    from saga.core.queue.kinds import Step as Step
    from saga.core.queue.values import Job as Job
    from saga.core.recon.items import ReconPolicy as ReconPolicy
    from saga.core.sagas.plans import Migration as Migration
    from saga.core.sagas.registry import Context as Context
    from saga.core.sagas.registry import Registry as Registry
    from saga.core.sagas.transitions import fire_in as fire_in
    from saga.core.store.db import Tx as Tx
    from saga.core.store.records import SagaRecord as SagaRecord
    from saga.exceptions import SagaError as SagaError
    from state_machine import Machine as Machine
    from state_machine import State as State
    from state_machine import Timeout as Timeout
    from state_machine import Transition as Transition
    from state_machine import guard as guard
    from steps import OutcomeUnknown as OutcomeUnknown
    from steps import PermanentError as PermanentError
    from steps import StepError as StepError
    from steps import TransientError as TransientError

__all__ = list(_HOMES)


# Hidden from type checkers, which then refuse a name that is not above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        try:
            module = _HOMES[name]
        except KeyError:
            msg = f"module 'saga' has no attribute {name!r}"
            raise AttributeError(msg) from None
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
