"""
Sagas at run time, beyond the top level.

What moving a saga returns, the hooks and starters a kind registers, reads
and locks inside a transaction, the money an application shows, and the rest
of the definition language: the origins ``fired_by`` names, Mermaid diagrams;
and moving live sagas to a new definition version (a :class:`~saga.Migration`
planned and applied).  docs/sagas.md and docs/versioning.md explain them;
docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.sagas.changes import Change, Fired, SagaHook, Started
from saga.core.sagas.migrations import Migrations
from saga.core.sagas.money import MoneySummary, Movement
from saga.core.sagas.plans import (
    MIGRATED,
    MigrationHook,
    MigrationPlan,
    MigrationReport,
    PlannedState,
)
from saga.core.sagas.registry import Starter
from saga.core.sagas.runtime import Sagas
from saga.core.sagas.transitions import get_in, history_in, lock_in
from saga.core.store.records import TransitionRecord
from state_machine import OPERATOR, RECONCILIATION, ROUTE, STEP, TIMER, to_mermaid

__all__ = [
    "MIGRATED",
    "OPERATOR",
    "RECONCILIATION",
    "ROUTE",
    "STEP",
    "TIMER",
    "Change",
    "Fired",
    "MigrationHook",
    "MigrationPlan",
    "MigrationReport",
    "Migrations",
    "MoneySummary",
    "Movement",
    "PlannedState",
    "SagaHook",
    "Sagas",
    "Started",
    "Starter",
    "TransitionRecord",
    "get_in",
    "history_in",
    "lock_in",
    "to_mermaid",
]
