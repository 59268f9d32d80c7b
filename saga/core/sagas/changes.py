"""
A saga's changes as values: what moved it, who hears of it, what a call did.

:class:`Change` is what a transition hands the kind's hooks
(:class:`SagaHook`) in its transaction; :class:`Started` and :class:`Fired`
are what starting a saga and firing an event did.  Apart from the kinds
(:mod:`saga.core.sagas.registry`) and the transitions
(:mod:`saga.core.sagas.transitions`), which both build on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord, TransitionRecord
    from state_machine import Transition


@dataclass(frozen=True, slots=True)
class Change:
    """What moved a saga: the transition taken, the event's payload, who and why."""

    transition: Transition
    payload: Mapping[str, Any]
    actor: str
    cause: str | None


class SagaHook(Protocol):
    """Domain writes that belong in the same transaction as a saga's changes."""

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Call after the saga row is inserted in its initial state."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Call after the compare-and-set moved the saga from ``before`` to ``after``."""


@dataclass(frozen=True, slots=True)
class Started:
    """What :meth:`Sagas.start` did: the saga, and whether this call created it."""

    saga: SagaRecord
    created: bool
    #: The audit rows this call wrote (the "start" row when it created the
    #: saga; none when it found it again): a reply needs not read them back.
    history: tuple[TransitionRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class Fired:
    """What :meth:`Sagas.fire` did: the saga after the event, and the transition taken."""

    saga: SagaRecord
    transition: Transition | None = field(default=None)

    @property
    def absorbed(self) -> bool:
        """Whether a terminal state absorbed the event (nothing changed)."""
        return self.transition is None
