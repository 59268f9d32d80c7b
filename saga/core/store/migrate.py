"""
Create or upgrade the schema: ``saga db upgrade``.

The engine's tables and each application's (its SQL component) are versioned
apart.  An empty database gets the engine's ``schema.sql`` and every engine
migration is recorded as applied; a database that has some migrations gets
the missing ones, in order; then each application component gets its missing
migrations, in order; all of it in one transaction.  A test builds one database each way and
compares their catalogs, so the two paths cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from saga.core.logs import get_logger
from saga.core.store.sqlfiles import (
    ENGINE,
    Migration,
    SqlComponent,
    schema,
    split_statements,
    tracking_table,
)
from saga.exceptions import DatabaseError, SchemaOutOfDate

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga.core.store.db import Database, Tx

log = get_logger(__name__)

# Serializes concurrent upgrades on PostgreSQL (pg_advisory_xact_lock key).
_LOCK_KEY: Final = 0x5A6A_0001


@dataclass(frozen=True, slots=True)
class UpgradeResult:
    """What an upgrade did: versions per SQL component, before and after."""

    before: Mapping[str, int]
    after: Mapping[str, int]
    applied: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether anything was applied."""
        return bool(self.applied)


def required_versions(db: Database) -> dict[str, int]:
    """The schema version of each SQL component this engine and its application expect."""
    return {c.name: len(c.migrations(db.dialect)) for c in db.components}


def current_versions(db: Database) -> dict[str, int]:
    """The schema version of each SQL component in the database; 0 for one it lacks."""
    return db.transaction(lambda tx: _current(tx, db.components), write=False)


def required_version(db: Database) -> int:
    """The engine's own schema version this engine expects."""
    return required_versions(db)[ENGINE.name]


def current_version(db: Database) -> int:
    """The engine's own schema version in the database; 0 when it has no schema yet."""
    return current_versions(db)[ENGINE.name]


def _current(tx: Tx, components: tuple[SqlComponent, ...]) -> dict[str, int]:
    found = {component.name: 0 for component in components}
    if tx.scalar("migrations_table_exists"):
        found[ENGINE.name] = int(tx.scalar("schema_version") or 0)
    if tx.scalar("component_migrations_table_exists"):
        for component in components:
            if component.name != ENGINE.name:
                found[component.name] = int(
                    tx.scalar("component_version", component=component.name) or 0
                )
    return found


def _check_applied(
    component: SqlComponent, wanted: tuple[Migration, ...], before: int, known: Mapping[int, str]
) -> None:
    for migration in wanted[:before]:
        if known.get(migration.version) != migration.checksum:
            msg = (
                f"{component.name} migration {migration.version:04d}_{migration.name} was "
                "edited after it was applied; migrations are forward-only: add a new one instead"
            )
            raise DatabaseError(msg)
    if before > len(wanted):
        msg = (
            f"the database's {component.name} schema (version {before}) is newer than this "
            f"engine's ({len(wanted)})"
        )
        raise DatabaseError(msg)


def _upgrade_engine(tx: Tx) -> tuple[Migration, ...]:
    before = int(tx.scalar("schema_version") or 0)
    known = {row["version"]: row["checksum"] for row in tx.all("applied_migrations")}
    wanted = ENGINE.migrations(tx.dialect)
    _check_applied(ENGINE, wanted, before, known)
    if before == 0 and not tx.scalar("has_engine_tables"):
        tx.script(split_statements(schema(tx.dialect)))
        pending: tuple[Migration, ...] = wanted
    else:
        pending = wanted[before:]
        for migration in pending:
            tx.script(split_statements(migration.sql))
    for migration in pending:
        tx.run(
            "record_migration",
            version=migration.version,
            name=migration.name,
            checksum=migration.checksum,
        )
    return pending


def _upgrade_component(tx: Tx, component: SqlComponent) -> tuple[Migration, ...]:
    # An application's component is built by its migrations alone, in order.
    before = int(tx.scalar("component_version", component=component.name) or 0)
    known = {
        row["version"]: row["checksum"]
        for row in tx.all("applied_component_migrations", component=component.name)
    }
    wanted = component.migrations(tx.dialect)
    _check_applied(component, wanted, before, known)
    pending = wanted[before:]
    for migration in pending:
        tx.script(split_statements(migration.sql))
        tx.run(
            "record_component_migration",
            component=component.name,
            version=migration.version,
            name=migration.name,
            checksum=migration.checksum,
        )
    return pending


def upgrade(db: Database) -> UpgradeResult:
    """
    Bring every SQL component to its required version; idempotent and safe to race.

    The engine's tables come first (an application's refer to them), then
    each application component's, all in one transaction.
    """

    def work(tx: Tx) -> UpgradeResult:
        if tx.dialect == "postgres":
            tx.run("lock_migrations", key=_LOCK_KEY)
        tx.script(split_statements(tracking_table(tx.dialect)))
        before = _current(tx, db.components)
        applied: list[str] = []
        for component in db.components:
            if component.name == ENGINE.name:
                pending = _upgrade_engine(tx)
                prefix = ""
            else:
                pending = _upgrade_component(tx, component)
                prefix = f"{component.name}/"
            applied += [f"{prefix}{m.version:04d}_{m.name}" for m in pending]
        return UpgradeResult(before=before, after=required_versions(db), applied=tuple(applied))

    result = db.transaction(work)
    if result.changed:
        log.info(
            "schema_upgraded",
            before=dict(result.before),
            after=dict(result.after),
            applied=result.applied,
        )
    return result


def ensure_current(db: Database) -> None:
    """
    Check the schema before a command runs.

    The embedded SQLite file is created or upgraded in place: it needs no
    setup.  A PostgreSQL database is shared by many workers on many machines,
    so its schema changes only on an explicit ``saga db upgrade``; an old one
    raises :class:`SchemaOutOfDate`, naming the first component behind.
    """
    have, need = current_versions(db), required_versions(db)
    if have == need:
        return
    if db.dialect == "sqlite":
        upgrade(db)
        return
    behind = next(name for name in need if have.get(name) != need[name])
    raise SchemaOutOfDate(current=have[behind], required=need[behind], component=behind)
