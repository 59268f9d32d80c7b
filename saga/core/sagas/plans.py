"""
Migration plans as data: what an application declares, and what a plan and an apply report.

An application declares each move of live sagas from an older definition
version to a newer one as data (:class:`Migration`): for one kind, from one
version to another, the state each live state of the old version becomes,
and the hooks that do what the new state holds that the old did not.  The
check (:meth:`Migration.problems`, run when an engine opens its application)
wants every state on both sides, every non-terminal old state mapped, and a
hook wherever the mapping changes what entering the state does or holds:

- its entry actions differ (as sets of action names): re-deriving the new
  state queues work the old one never asked for, or drops work it did;
- its ``meta`` differs: meta is the domain's account of what a state holds
  (the purchase's seats, money), which the engine compares without reading.

Finished sagas stay on the version they finished on: a plan maps live
states only.  The engine side, which reads and moves the sagas, is
:mod:`saga.core.sagas.migrations`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from saga.core.store.records import SagaRecord
from saga.exceptions import InvalidInput, NotFound

if TYPE_CHECKING:
    from saga.core.sagas.registry import Registry
    from saga.core.store.db import Tx
    from state_machine import State

MIGRATED: Final = "saga.migrated"
"""The audit row's event of a migration (no machine's event has a dot)."""

MigrationHook = Callable[["Tx", SagaRecord, SagaRecord], object]
"""``hook(tx, before, after)``: what the new state holds, written with the move."""


@dataclass(frozen=True, slots=True)
class Migration:
    """
    How live sagas of ``kind`` move from ``from_version`` to ``to_version``.

    Args:
        kind: the saga kind.
        from_version: the older definition version; its sagas move.
        to_version: the newer one, registered beside it.
        states: each non-terminal state of the old version and the state of
            the new it becomes (``{"payment_pending": "authorizing"}``).
        hooks: by old state, ``hook(tx, before, after)`` run in the move's
            transaction (a seat held becomes a seat taken, an authorization
            is recorded): required where the mapping changes the state's
            entry actions or its meta.

    """

    kind: str
    from_version: int
    to_version: int
    states: Mapping[str, str]
    hooks: Mapping[str, MigrationHook] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "states", MappingProxyType(dict(self.states)))
        object.__setattr__(self, "hooks", MappingProxyType(dict(self.hooks)))

    @property
    def where(self) -> str:
        """How messages name it."""
        return f"migration of {self.kind!r} v{self.from_version} -> v{self.to_version}"

    def problems(self, registry: Registry) -> list[str]:
        """Everything wrong with it for ``registry``'s machines (empty: it can run)."""
        return [message for _, message in self.findings(registry)]

    def findings(self, registry: Registry) -> list[tuple[str | None, str]]:
        """Its problems, each with the old state it is about (``None``: the whole plan)."""
        if self.from_version >= self.to_version:
            return [(None, f"{self.where}: a migration goes to a newer version")]
        missing: list[tuple[str | None, str]] = [
            (None, f"{self.where}: the application registers no {self.kind!r} v{version}")
            for version in (self.from_version, self.to_version)
            if not registers(registry, self.kind, version)
        ]
        if missing:
            return missing
        old = registry.get(self.kind, self.from_version).machine
        new = registry.get(self.kind, self.to_version).machine
        found: list[tuple[str | None, str]] = []
        for state, target in self.states.items():
            if not old.has_state(state):
                found.append((state, f"{self.where}: v{self.from_version} has no state {state!r}"))
            elif old.state(state).terminal:
                found.append(
                    (
                        state,
                        f"{self.where}: {state!r} is final in v{self.from_version}; finished "
                        "sagas stay on the version they finished on: leave it out",
                    )
                )
            if not new.has_state(target):
                found.append(
                    (
                        state,
                        f"{self.where}: maps {state!r} to {target!r}, which v{self.to_version} "
                        f"does not have (its states: {', '.join(new.state_names)})",
                    )
                )
            elif old.has_state(state) and state not in self.hooks:
                why = hook_reason(old.state(state), new.state(target))
                if why:
                    found.append((state, f"{self.where}: {state!r} -> {target!r} {why}"))
        found += [
            (
                state.name,
                f"{self.where}: live state {state.name!r} of v{self.from_version} is mapped "
                f"nowhere: map it to a state of v{self.to_version}",
            )
            for state in old.states
            if not state.terminal and state.name not in self.states
        ]
        found += [
            (None, f"{self.where}: a hook for {state!r}, which it does not map")
            for state in self.hooks
            if state not in self.states
        ]
        return found


def hook_reason(old: State, new: State) -> str | None:
    """Why mapping ``old`` onto ``new`` needs a declared hook, or ``None`` if it does not."""
    changes = []
    if set(old.actions) != set(new.actions):
        changes.append(
            f"enters with actions {sorted(new.actions) or 'none'} where the old state had "
            f"{sorted(old.actions) or 'none'}"
        )
    if dict(old.meta) != dict(new.meta):
        changes.append(f"changes what the state holds (meta {dict(old.meta)} -> {dict(new.meta)})")
    if not changes:
        return None
    return f"{' and '.join(changes)}: declare hooks={{{old.name!r}: …}} to do that in the move"


def registers(registry: Registry, kind: str, version: int) -> bool:
    """Whether ``registry`` has ``kind`` at ``version``."""
    try:
        registry.get(kind, version)
    except NotFound:
        return False
    return True


@dataclass(frozen=True, slots=True)
class PlannedState:
    """One live state of an older version: where its sagas go and what is re-derived there."""

    from_version: int
    state: str
    sagas: int
    target: str | None
    #: The new state's timeout, re-derived for each saga (``None``: no timer).
    timer: str | None = None
    #: Actions the new state has and the old did not: queued for every saga.
    new_actions: tuple[str, ...] = ()
    #: Actions both have: queued again only where the old job had not finished.
    pending_actions: tuple[str, ...] = ()
    hook: bool = False

    def to_json(self) -> dict[str, Any]:
        """The row as plain data."""
        return {
            "from_version": self.from_version,
            "state": self.state,
            "sagas": self.sagas,
            "to": self.target,
            "timer": self.timer,
            "actions": {"new": list(self.new_actions), "if_pending": list(self.pending_actions)},
            "hook": self.hook,
        }


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What ``saga migrate plan`` shows: each live state of every older version, and problems."""

    kind: str
    to_version: int
    states: tuple[PlannedState, ...]
    problems: tuple[str, ...]

    @property
    def sagas(self) -> int:
        """How many live sagas would move."""
        return sum(row.sagas for row in self.states)

    def to_json(self) -> dict[str, Any]:
        """The plan as plain data."""
        return {
            "kind": self.kind,
            "to_version": self.to_version,
            "ok": not self.problems,
            "sagas": self.sagas,
            "states": [row.to_json() for row in self.states],
            "problems": list(self.problems),
        }

    def refuse_if_wrong(self) -> None:
        """Raise :class:`~saga.exceptions.InvalidInput` naming every problem, if it has any."""
        if self.problems:
            listing = "".join(f"\n  - {problem}" for problem in self.problems)
            raise InvalidInput(
                field="plan", problem=f"refused, {len(self.problems)} problem(s):{listing}"
            )


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What an apply did: sagas moved, skipped (moved meanwhile), left, and what was re-derived."""

    kind: str
    to_version: int
    moved: int = 0
    skipped: int = 0
    remaining: int = 0
    batches: int = 0
    seconds: float = 0.0
    timers: int = 0
    actions: int = 0
    superseded: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data."""
        return {
            "kind": self.kind,
            "to_version": self.to_version,
            "moved": self.moved,
            "skipped": self.skipped,
            "remaining": self.remaining,
            "batches": self.batches,
            "seconds": round(self.seconds, 3),
            "re_derived": {"timers": self.timers, "actions": self.actions},
            "superseded_jobs": self.superseded,
            "dry_run": self.dry_run,
        }


def declared_problems(migrations: Sequence[Migration], registry: Registry) -> list[str]:
    """What is wrong with an application's migrations: each one's problems, and repeats."""
    found = [problem for migration in migrations for problem in migration.problems(registry)]
    keys = [(m.kind, m.from_version, m.to_version) for m in migrations]
    found += sorted(
        {
            f"migration of {kind!r} v{old} -> v{new} is declared {n} times"
            for kind, old, new in keys
            if (n := keys.count((kind, old, new))) > 1
        }
    )
    return found
