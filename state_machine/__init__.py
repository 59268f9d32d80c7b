"""
Pure, declarative saga definitions: states, transitions, guards, timeouts.

Nothing in this package does I/O or reads a clock; the runtime (``saga``)
persists what these objects decide.
"""

from __future__ import annotations

from state_machine._definition import (
    OPERATOR,
    ORIGINS,
    PREVIOUS_STATE,
    RECONCILIATION,
    ROUTE,
    STEP,
    TIMER,
    Guard,
    State,
    Timeout,
    Transition,
    guard,
)
from state_machine._machine import Machine
from state_machine._mermaid import to_mermaid
from state_machine.errors import ConflictError, DefinitionError, SagaError, TransitionNotAllowed

__all__ = [
    "OPERATOR",
    "ORIGINS",
    "PREVIOUS_STATE",
    "RECONCILIATION",
    "ROUTE",
    "STEP",
    "TIMER",
    "ConflictError",
    "DefinitionError",
    "Guard",
    "Machine",
    "SagaError",
    "State",
    "Timeout",
    "Transition",
    "TransitionNotAllowed",
    "guard",
    "to_mermaid",
]
