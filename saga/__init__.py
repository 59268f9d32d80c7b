"""
A saga orchestration engine: persisted state machines in SQL.

Define a saga with :class:`Machine`, :class:`State`, :class:`Transition`,
:class:`Timeout` and :func:`guard`; run it with an :class:`Engine` on SQLite
(embedded, no setup) or PostgreSQL (many workers, many machines).
"""

from __future__ import annotations

from saga import exceptions
from saga._catalogue import Catalogue, Intensive
from saga._db import Database
from saga._engine import Engine, default_registry
from saga._jobs import NewJob
from saga._purchases import Purchase, Purchases
from saga._records import SagaRecord, TransitionRecord
from saga._sagas import Fired, Registry, SagaHook, Sagas, Started
from saga.exceptions import SagaError
from state_machine import Machine, State, Timeout, Transition, guard, to_mermaid

__all__ = [
    "Catalogue",
    "Database",
    "Engine",
    "Fired",
    "Intensive",
    "Machine",
    "NewJob",
    "Purchase",
    "Purchases",
    "Registry",
    "SagaError",
    "SagaHook",
    "SagaRecord",
    "Sagas",
    "Started",
    "State",
    "Timeout",
    "Transition",
    "TransitionRecord",
    "default_registry",
    "exceptions",
    "guard",
    "to_mermaid",
]
