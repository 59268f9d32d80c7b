"""
Migration plans applied: live sagas moved from an older definition version to a newer.

:class:`Migrations` plans (``saga migrate plan``: each live state of every
older version, where it goes, how many sagas, what is re-derived) and
applies (``saga migrate apply``) the application's declared
:class:`~saga.core.sagas.plans.Migration` of a kind, batch by batch, each
batch one transaction.  Moving one saga (:func:`move_in`) is a
compare-and-set on its id, definition version and version that sets the new
definition and state and bumps its version, with an audit row (event
:data:`~saga.core.sagas.plans.MIGRATED`, the actor, the reason and both
versions); its step jobs and timers that have not finished are superseded
(archived: a worker running one finds nothing to complete, extend or fail)
and re-derived from the new definition the way entering a state derives them
(:func:`~saga.core.sagas.transitions.entry_jobs`): its timer, counted from
when it entered the old state, and the actions still due (those the old
state did not have, and those whose old job had not finished).  The state's
hook runs in the same transaction.  Nothing is published: the business state
did not change (a hook writes what must be said).

Batches walk the old version's live sagas in id order, locking them and
skipping those a worker holds (``SKIP LOCKED`` on PostgreSQL; SQLite has
one writer): a pass that leaves some behind is followed by another.  A
crash between batches loses nothing: applying again goes on with the sagas
still on the old version, and a finished migration moves nothing.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from saga import validation as _validation
from saga.codec import dump_json
from saga.core.faults import crash_point
from saga.core.queue.jobs import TIMER_KIND, enqueue_many_in
from saga.core.sagas.plans import (
    MIGRATED,
    Migration,
    MigrationPlan,
    MigrationReport,
    PlannedState,
    registers,
)
from saga.core.sagas.transitions import deadline_of, entry_jobs
from saga.core.sagas.versions import live_counts_in
from saga.core.store.records import SagaRecord
from saga.exceptions import InvalidInput, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from saga.core.queue.jobs import NewJob
    from saga.core.sagas.registry import Registry, SagaType
    from saga.core.store.db import Database, Tx


@dataclass(frozen=True, slots=True)
class Move:
    """One migration resolved against the registry: both kinds, who moves the sagas and why."""

    migration: Migration
    old: SagaType
    new: SagaType
    actor: str
    reason: str

    @property
    def cause(self) -> str:
        """The audit row's cause: both versions and the reason."""
        m = self.migration
        return f"migrated from v{m.from_version} to v{m.to_version}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Batch:
    """What one batch did (the ids moved and skipped; jobs re-derived and superseded)."""

    moved: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    timers: int = 0
    actions: int = 0
    superseded: int = 0
    #: The greatest id of the batch: the next batch of the pass starts after it.
    last: str = ""


def move_in(tx: Tx, move: Move, sagas: Sequence[SagaRecord]) -> Batch:
    """
    Move ``sagas`` (as read: each move is a compare-and-set on that version) inside ``tx``.

    A saga that moved meanwhile (another version, another state) is skipped:
    it is met again by a later batch if it is still on the old version.
    """
    m = move.migration
    live = tx.all(
        "lock_step_jobs_of_sagas",
        ids=json.dumps([saga.id for saga in sagas]),
        timer_kind=TIMER_KIND,
    )
    jobs_of: dict[str, list[str]] = {}
    for job in live:
        jobs_of.setdefault(job["saga_id"], []).append(job["id"])
    moved: list[str] = []
    skipped: list[str] = []
    superseded: list[str] = []
    queued: list[NewJob] = []
    timers = actions = 0
    for before in sagas:
        target_name = m.states.get(before.state)
        if target_name is None or before.definition_version != m.from_version:
            skipped.append(before.id)
            continue
        target = move.new.machine.state(target_name)
        mine = jobs_of.get(before.id, [])
        current = f"step:{before.id}:{before.version}:"
        pending = {job.removeprefix(current) for job in mine if job.startswith(current)}
        old_actions = set(move.old.machine.state(before.state).actions)
        due = [a for a in target.actions if a not in old_actions or a in pending]
        deadline = deadline_of(target, before.data)
        row = tx.one(
            "migrate_saga",
            id=before.id,
            from_version=m.from_version,
            version=before.version,
            to_version=m.to_version,
            to_state=target.name,
            deadline_event=deadline[0],
            deadline_seconds=deadline[1],
            deadline_since_created=bool(target.timeout and target.timeout.since == "created"),
            finished=target.terminal,
            from_state=before.state,
            event=MIGRATED,
            actor=move.actor,
            cause=move.cause,
            payload=dump_json(
                {
                    "from_version": m.from_version,
                    "to_version": m.to_version,
                    "queued": due,
                    "superseded": mine,
                }
            ),
        )
        if row is None:
            skipped.append(before.id)
            continue
        after = SagaRecord.from_row(row)
        tx.locked[("sagas", after.id)] = after
        moved.append(after.id)
        superseded += mine
        hook = m.hooks.get(before.state)
        if hook is not None:
            hook(tx, before, after)
        jobs = entry_jobs(move.new, after, target, due)
        timers += sum(1 for job in jobs if job.kind == TIMER_KIND)
        actions += len(due)
        queued += jobs
    gone = 0
    if superseded:
        result = {"superseded": f"saga migrated from v{m.from_version} to v{m.to_version}"}
        gone = len(tx.all("supersede_jobs", ids=json.dumps(superseded), result=dump_json(result)))
    # Their ids name the saga versions this transaction just made (fresh).
    enqueue_many_in(tx, queued, fresh=True)
    last = max((saga.id for saga in sagas), default="")
    return Batch(tuple(moved), tuple(skipped), timers, actions, gone, last)


class Migrations:
    """The application's migration plans over one database: ``saga migrate plan|apply``."""

    def __init__(self, db: Database, registry: Registry, declared: Sequence[Migration]) -> None:
        self.db = db
        self.registry = registry
        self.declared = tuple(declared)

    def find(self, kind: str, from_version: int, to_version: int) -> Migration | None:
        """The declared migration of ``kind`` between those versions, if any."""
        return next(
            (
                m
                for m in self.declared
                if (m.kind, m.from_version, m.to_version) == (kind, from_version, to_version)
            ),
            None,
        )

    def plan(self, kind: str, to_version: int) -> MigrationPlan:
        """Each live state of every older version of ``kind``: target, count, what is re-derived."""
        _validation.one_of("kind", kind, self.registry.kinds)
        if not registers(self.registry, kind, to_version):
            known = sorted(t.machine.version for t in self.registry if t.machine.name == kind)
            problem = (
                f"unknown target: the application registers {kind!r} "
                f"{', '.join(f'v{v}' for v in known)}, not v{to_version}"
            )
            return MigrationPlan(kind, to_version, (), (problem,))
        counts = self.db.transaction(lambda tx: live_counts_in(tx, kind), write=False)
        rows: list[PlannedState] = []
        problems: list[str] = []
        for (_, version), states in sorted(counts.items()):
            if version >= to_version:
                continue
            migration = self.find(kind, version, to_version)
            if migration is None:
                problems.append(
                    f"{sum(states.values())} live saga(s) of {kind!r} are on v{version} and no "
                    f"Migration({kind!r}, {version}, {to_version}, …) is declared"
                )
                rows += [PlannedState(version, s, n, None) for s, n in sorted(states.items())]
                continue
            old = self.registry.get(kind, version).machine
            for state, message in migration.findings(self.registry):
                if state is None:
                    problems.append(message)
                elif state in states:
                    problems.append(f"{message} ({states[state]} live saga(s) there)")
            problems += [
                f"{n} live saga(s) of {kind!r} v{version} are in {s!r}, which v{version} does "
                "not have"
                for s, n in sorted(states.items())
                if not old.has_state(s)
            ]
            rows += [self._row(migration, s, n) for s, n in sorted(states.items())]
        return MigrationPlan(kind, to_version, tuple(rows), tuple(problems))

    def _row(self, migration: Migration, state: str, count: int) -> PlannedState:
        old = self.registry.get(migration.kind, migration.from_version).machine
        new = self.registry.get(migration.kind, migration.to_version).machine
        target = migration.states.get(state)
        if target is None or not new.has_state(target) or not old.has_state(state):
            return PlannedState(migration.from_version, state, count, target)
        entered = new.state(target)
        before = set(old.state(state).actions)
        return PlannedState(
            migration.from_version,
            state,
            count,
            target,
            timer=None if entered.timeout is None else entered.timeout.describe(),
            new_actions=tuple(a for a in entered.actions if a not in before),
            pending_actions=tuple(a for a in entered.actions if a in before),
            hook=state in migration.hooks,
        )

    def resolve(
        self, kind: str, from_version: int, to_version: int, *, actor: str, reason: str
    ) -> Move:
        """The declared migration between those versions, resolved (:class:`NotFound` if none)."""
        migration = self.find(kind, from_version, to_version)
        if migration is None:
            raise NotFound(kind="migration", key=f"{kind} v{from_version} -> v{to_version}")
        old = self.registry.get(kind, from_version)
        return Move(migration, old, self.registry.get(kind, to_version), actor, reason)

    def apply(
        self,
        kind: str,
        to_version: int,
        *,
        batch: int,
        actor: str,
        reason: str,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
        busy_wait_s: float = 5.0,
    ) -> MigrationReport:
        """
        Move every live saga of ``kind`` on an older version to ``to_version``, ``batch`` at once.

        Refused (:class:`~saga.exceptions.InvalidInput`, nothing moved) if the
        plan has a problem.  Each batch is one transaction; a crash between
        two loses nothing (run it again: it goes on with the sagas still on
        an older version), and a finished migration moves nothing.  Sagas a
        worker holds are met by a later pass; those still held after
        ``busy_wait_s`` are left (``remaining``) for another run.
        """
        _validation.batch(batch)
        _validation.identifier("actor", actor)
        if not reason.strip():
            raise InvalidInput(field="reason", problem="say why the sagas move")
        plan = self.plan(kind, to_version)
        plan.refuse_if_wrong()
        versions = _per_version(plan)
        if dry_run:
            batches = sum(-(-n // batch) for n in versions.values())
            return MigrationReport(
                kind, to_version, batches=batches, remaining=plan.sagas, dry_run=True
            )
        started = time.monotonic()
        done: list[Batch] = []
        for version in sorted(versions):
            move = self.resolve(kind, version, to_version, actor=actor, reason=reason)
            done += self._passes(move, batch, progress, time.monotonic() + busy_wait_s)
        return MigrationReport(
            kind,
            to_version,
            moved=sum(len(b.moved) for b in done),
            skipped=sum(len(b.skipped) for b in done),
            remaining=sum(self._left(kind, version) for version in versions),
            batches=len(done),
            seconds=time.monotonic() - started,
            timers=sum(b.timers for b in done),
            actions=sum(b.actions for b in done),
            superseded=sum(b.superseded for b in done),
        )

    def _passes(
        self, move: Move, batch: int, progress: Callable[[int], object] | None, until: float
    ) -> list[Batch]:
        """Batches in id order, pass after pass, until none is left (or only busy ones)."""
        done: list[Batch] = []
        after = ""
        while True:
            found = self.db.transaction(
                functools.partial(self._batch_in, move=move, batch=batch, after=after)
            )
            if found is None:
                left = self._left(move.migration.kind, move.migration.from_version)
                if not left or time.monotonic() > until:
                    return done
                # Held by a worker's transaction, or moved meanwhile: another pass.
                after = ""
                time.sleep(0.05)
                continue
            done.append(found)
            after = found.last
            if progress is not None:
                progress(len(found.moved))
            # A batch committed, the next not begun: a crash here loses nothing.
            crash_point("migrate.between_batches")

    def _batch_in(self, tx: Tx, move: Move, batch: int, after: str) -> Batch | None:
        m = move.migration
        rows = tx.all(
            "migration_candidates",
            kind=m.kind,
            definition_version=m.from_version,
            after=after,
            limit=batch,
        )
        if not rows:
            return None
        return move_in(tx, move, [SagaRecord.from_row(row) for row in rows])

    def _left(self, kind: str, version: int) -> int:
        counts = self.db.transaction(lambda tx: live_counts_in(tx, kind), write=False)
        return sum(counts.get((kind, version), {}).values())


def _per_version(plan: MigrationPlan) -> dict[int, int]:
    found: dict[int, int] = {}
    for row in plan.states:
        found[row.from_version] = found.get(row.from_version, 0) + row.sagas
    return found
