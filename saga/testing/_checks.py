"""
What must hold of any saga's persisted history, whatever its machine.

Each check reads the engine through its public API and returns the problems
found (empty: all is well), worded so that a person can tell what went wrong
without the test's code.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from saga.core.sagas.plans import MIGRATED
from saga.exceptions import NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from datetime import datetime

    from saga.core.engine import Engine
    from saga.core.store.records import SagaRecord, TransitionRecord
    from state_machine import Machine

# Two readings of the database clock in one transaction differ by microseconds;
# a timer may fire only at or after its deadline, give or take this.
_CLOCK_SLACK: Final = timedelta(milliseconds=50)


def history_problems(
    engine: Engine,
    saga_ids: Iterable[str],
    *,
    seen: Callable[[SagaRecord, Sequence[TransitionRecord]], object] | None = None,
) -> list[str]:
    """Every rule of the audit trail, checked for each saga (``seen`` is shown each history)."""
    found: list[str] = []
    for saga_id in saga_ids:
        try:
            saga = engine.sagas.get(saga_id)
        except NotFound:
            found.append(f"saga {saga_id} was accepted and then vanished")
            continue
        history = engine.sagas.history(saga_id)
        if seen is not None:
            seen(saga, history)
        found += _trail(saga, history)
        found += _declared(_machines(engine, saga), saga, history)
        found += _timers(_machines(engine, saga), saga, history)
    return found


def _machines(engine: Engine, saga: SagaRecord) -> Callable[[TransitionRecord], Machine | None]:
    """Each audit row's machine: the definition it was made under (``None``: one retired)."""

    def machine_of(row: TransitionRecord) -> Machine | None:
        try:
            return engine.registry.get(
                saga.kind, row.definition_version or saga.definition_version
            ).machine
        except NotFound:
            return None

    return machine_of


def _trail(saga: SagaRecord, history: Sequence[TransitionRecord]) -> list[str]:
    versions = [row.version for row in history]
    if versions != list(range(1, saga.version + 1)):
        return [f"saga {saga.id}: audit versions {versions} for version {saga.version}"]
    found = []
    for before, after in itertools.pairwise(history):
        if after.from_state != before.to_state:
            found.append(
                f"saga {saga.id} v{after.version}: left {after.from_state} "
                f"but was in {before.to_state}"
            )
    if history and history[-1].to_state != saga.state:
        found.append(f"saga {saga.id}: in {saga.state}, its audit ends in {history[-1].to_state}")
    return found


def _declared(
    machine_of: Callable[[TransitionRecord], Machine | None],
    saga: SagaRecord,
    history: Sequence[TransitionRecord],
) -> list[str]:
    found = []
    for row in history:
        where = f"saga {saga.id} v{row.version}: {row.from_state} --{row.event}--> {row.to_state}"
        machine = machine_of(row)
        if machine is None:
            continue  # made under a definition the application retired: history
        if row.event == MIGRATED:
            if not machine.has_state(row.to_state):
                found.append(f"{where}: migrated to a state v{machine.version} does not have")
            continue
        if row.from_state is None:
            if row.event != "start" or row.to_state != machine.initial.name:
                found.append(f"{where} is not how a {machine.name} starts")
            continue
        taken = [
            t
            for t in machine.transitions
            if t.event == row.event and row.from_state in t.source and t.target == row.to_state
        ]
        if not taken and machine.state(row.from_state).terminal:
            found.append(f"{where} left the terminal state {row.from_state}: it is not declared")
        elif not taken:
            found.append(f"{where} is not declared")
        elif machine.state(row.from_state).terminal and not any(t.compensation for t in taken):
            found.append(
                f"{where} left the terminal state {row.from_state} without a declared compensation"
            )
    return found


def _timers(
    machine_of: Callable[[TransitionRecord], Machine | None],
    saga: SagaRecord,
    history: Sequence[TransitionRecord],
) -> list[str]:
    """A timeout fires once per deadline, and never before it."""
    found = []
    fired: dict[datetime, int] = {}
    entered = history[0].at if history else saga.created_at
    for before, after in itertools.pairwise(history):
        # A migration keeps the time its saga entered the state it moved from.
        if before.event != MIGRATED:
            entered = before.at
        machine = machine_of(before)
        if machine is None:
            continue
        state = machine.state(before.to_state)
        if state.timeout is None or after.event != state.timeout.event or after.actor != "timer":
            continue
        since = saga.created_at if state.timeout.since == "created" else entered
        deadline = since + timedelta(seconds=state.timeout.duration(saga.data))
        if after.at + _CLOCK_SLACK < deadline:
            found.append(
                f"saga {saga.id} v{after.version}: {after.event} fired at {after.at.isoformat()}, "
                f"before its deadline {deadline.isoformat()}"
            )
        key = deadline.replace(microsecond=deadline.microsecond // 10_000 * 10_000)
        if key in fired:
            found.append(
                f"saga {saga.id}: the {after.event} deadline {deadline.isoformat()} fired twice "
                f"(v{fired[key]} and v{after.version})"
            )
        fired[key] = after.version
    return found
