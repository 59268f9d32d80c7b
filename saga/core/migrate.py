"""
Create or upgrade the schema: ``saga db upgrade``.

An empty database gets ``schema.sql`` in one transaction, and every migration
is recorded as applied; a database that has some migrations gets the missing
ones, in order, in one transaction.  A test builds one database each way and
compares their catalogs, so the two paths cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog

from saga.core.sqlfiles import Migration, migrations, schema, split_statements, tracking_table
from saga.exceptions import DatabaseError, SchemaOutOfDate

if TYPE_CHECKING:
    from saga.core.db import Database, Tx

log = structlog.get_logger(__name__)

# Serializes concurrent upgrades on PostgreSQL (pg_advisory_xact_lock key).
_LOCK_KEY: Final = 0x5A6A_0001


@dataclass(frozen=True, slots=True)
class UpgradeResult:
    """What an upgrade did."""

    before: int
    after: int
    applied: tuple[str, ...]

    @property
    def changed(self) -> bool:
        """Whether anything was applied."""
        return bool(self.applied)


def required_version(db: Database) -> int:
    """The schema version this engine expects."""
    return len(migrations(db.dialect))


def current_version(db: Database) -> int:
    """The schema version of the database; 0 when it has no schema yet."""
    return db.transaction(_current, write=False)


def _current(tx: Tx) -> int:
    if not tx.scalar("migrations_table_exists"):
        return 0
    return int(tx.scalar("schema_version") or 0)


def upgrade(db: Database) -> UpgradeResult:
    """Bring the schema to :func:`required_version`; idempotent and safe to race."""

    def work(tx: Tx) -> UpgradeResult:
        if tx.dialect == "postgres":
            tx.run("lock_migrations", key=_LOCK_KEY)
        tx.script(split_statements(tracking_table(tx.dialect)))
        before = int(tx.scalar("schema_version") or 0)
        known = {row["version"]: row["checksum"] for row in tx.all("applied_migrations")}
        wanted = migrations(tx.dialect)
        for migration in wanted[:before]:
            if known.get(migration.version) != migration.checksum:
                msg = (
                    f"migration {migration.version:04d}_{migration.name} was edited after it "
                    "was applied; migrations are forward-only: add a new one instead"
                )
                raise DatabaseError(msg)
        if before > len(wanted):
            msg = (
                f"the database schema (version {before}) is newer than this engine ({len(wanted)})"
            )
            raise DatabaseError(msg)
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
        return UpgradeResult(
            before=before,
            after=len(wanted),
            applied=tuple(f"{m.version:04d}_{m.name}" for m in pending),
        )

    result = db.transaction(work)
    if result.changed:
        log.info(
            "schema_upgraded", before=result.before, after=result.after, applied=result.applied
        )
    return result


def ensure_current(db: Database) -> None:
    """
    Check the schema before a command runs.

    The embedded SQLite file is created or upgraded in place: it needs no
    setup.  A PostgreSQL database is shared by many workers on many machines,
    so its schema changes only on an explicit ``saga db upgrade``; an old one
    raises :class:`SchemaOutOfDate`.
    """
    have, need = current_version(db), required_version(db)
    if have == need:
        return
    if db.dialect == "sqlite":
        upgrade(db)
        return
    raise SchemaOutOfDate(current=have, required=need)
