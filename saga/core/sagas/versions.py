"""
Definition versions: several versions of one saga kind in one application.

A machine is registered with its version (``Machine(name, version=…)``); a
saga starts on the newest and runs on the version it started with until it
ends or is migrated (:mod:`saga.core.sagas.migrations`).  Two things follow:

- The steps of every version of a kind are one set of job kinds,
  ``<kind>.<action>``, whichever versions list the action: versions that
  share an action share its step (the same :class:`~saga.Step`, or one
  factory's job kind, built once per engine).  Two versions running one
  action with different steps are refused: a job names its action, not its
  version; a version that does something else gives the action a new name.
- Retiring a version is refused while it has live sagas.  "Live" is the
  ``finished_at`` column (migration 0016), set by the transition that enters
  a terminal state: the database cannot ask a machine that is gone which of
  its states were final, so the answer is recorded while the machine is
  still registered.  Rows from before 0016 are marked when an engine opens
  an application that registers their definition (:func:`mark_finished_in`,
  cheap through the partial index of unfinished sagas, a no-op once done);
  a saga never marked counts as live, so the check errs on refusing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from saga.exceptions import ApplicationError

if TYPE_CHECKING:
    from saga.core.queue.kinds import JobKind
    from saga.core.sagas.registry import Context, Registry, SagaType
    from saga.core.store.db import Database, Tx


def steps_by_kind(registry: Registry, engine: Context) -> dict[str, dict[str, JobKind]]:
    """
    The job kinds running each saga kind's actions, every version's, one per name.

    A factory registered with several versions is called once; the first
    version declaring a name gives its kind (the others are either the same
    or refused by :func:`step_problems`).
    """
    built: dict[object, list[JobKind]] = {}
    found: dict[str, dict[str, JobKind]] = {}
    for saga_type in registry:
        mine = found.setdefault(saga_type.machine.name, {})
        for kind in _built_steps(saga_type, engine, built):
            mine.setdefault(kind.name, kind)
    return found


def step_problems(registry: Registry, engine: Context) -> list[str]:
    """Actions run by different steps in two versions of one kind (one job kind runs them all)."""
    built: dict[object, list[JobKind]] = {}
    seen: dict[str, tuple[int, JobKind]] = {}
    found: list[str] = []
    for saga_type in sorted(registry, key=lambda t: (t.machine.name, t.machine.version)):
        for kind in _built_steps(saga_type, engine, built):
            first = seen.setdefault(kind.name, (saga_type.machine.version, kind))
            if first[1] != kind:
                found.append(
                    f"saga {saga_type.machine.name!r}: versions {first[0]} and "
                    f"{saga_type.machine.version} run action {kind.name.partition('.')[2]!r} "
                    f"with different steps; one job kind ({kind.name}) runs every version's "
                    "jobs: register the same Step, or give the new version's action a new name"
                )
    return found


def _built_steps(
    saga_type: SagaType, engine: Context, built: dict[object, list[JobKind]]
) -> list[JobKind]:
    steps = saga_type.steps
    if steps is None or isinstance(steps, Mapping):
        return list(saga_type.step_kinds(engine))
    if steps not in built:
        built[steps] = list(steps(engine))
    return built[steps]


# -- against a database ------------------------------------------------------------------


def mark_finished_in(tx: Tx, registry: Registry) -> int:
    """Mark the sagas of each registered definition that sit in one of its terminal states."""
    marked = 0
    for saga_type in registry:
        machine = saga_type.machine
        terminal = [state.name for state in machine.states if state.terminal]
        if terminal:
            marked += tx.run(
                "mark_finished_sagas",
                kind=machine.name,
                definition_version=machine.version,
                states=json.dumps(terminal),
            )
    return marked


def live_counts_in(tx: Tx, kind: str | None = None) -> dict[tuple[str, int], dict[str, int]]:
    """Live sagas (not known to be finished) per kind and definition version, by state."""
    counts: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for row in tx.all("live_sagas_by_version", kind=kind):
        counts[(row["kind"], int(row["definition_version"]))][row["state"]] = int(row["n"])
    return dict(counts)


def retired_problems(
    counts: Mapping[tuple[str, int], Mapping[str, int]], registry: Registry
) -> list[str]:
    """
    The versions with live sagas that the application stopped registering.

    Only versions older than one it registers: a newer one is a fleet in the
    middle of an upgrade (its workers run it), a kind it does not register at
    all is another application's.
    """
    registered: dict[str, set[int]] = defaultdict(set)
    for saga_type in registry:
        registered[saga_type.machine.name].add(saga_type.machine.version)
    found = []
    for (kind, version), states in sorted(counts.items()):
        versions = registered.get(kind)
        if not versions or version in versions or version > max(versions):
            continue
        where = ", ".join(f"{state}: {n}" for state, n in sorted(states.items()))
        found.append(
            f"saga {kind!r} version {version} still has {sum(states.values())} live saga(s) "
            f"({where}) but the application no longer registers it (it registers "
            f"{', '.join(f'v{v}' for v in sorted(versions))}): register it again until "
            f"`saga migrate apply {kind} --to {max(versions)}` has moved them"
        )
    return found


def check_versions(db: Database, registry: Registry, application: str) -> None:
    """
    The application check against the database: no retired version with live sagas.

    Run when an engine first uses its database; raises
    :class:`~saga.exceptions.ApplicationError` with the count per version.
    """

    def work(tx: Tx) -> list[str]:
        mark_finished_in(tx, registry)
        return retired_problems(live_counts_in(tx), registry)

    if found := db.transaction(work):
        raise ApplicationError(application=application, problems=found)
