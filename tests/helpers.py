"""Test helpers: read whole databases to prove that nothing changed."""

from __future__ import annotations

import contextlib
import re
import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event

from saga.codec import as_utc
from saga.core.store.db import Database
from saga.core.store.sqlite_driver import PlainConnection

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from datetime import datetime

    import pytest

    from saga import Engine
    from saga.core.store.db import Tx

# Every table of the engine and of the purchase; dump reads those that exist
# (an application without the purchase's SQL has none of its tables).
TABLES = (
    "intensives",
    "sagas",
    "saga_transitions",
    "saga_operations",
    "purchases",
    "jobs",
    "job_payloads",
    "job_archive",
    "job_results",
    "job_replays",
    "payments",
    "refunds",
    "access_grants",
    "inbox",
    "inbox_conflicts",
    "recon_items",
    "recon_events",
    "saga_migrations",
    "saga_component_migrations",
    "inbox_messages",
    "inbox_message_conflicts",
    "outbox",
    "prune_horizons",
    "external_movements",
    "sales_projection",
)


def dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every engine table, sorted: equal dumps mean nothing changed."""
    out = {}
    with engine.db.engine.connect() as conn:
        present = set(sa.inspect(conn).get_table_names())
        for table in TABLES:
            if table not in present:
                continue
            rows = conn.execute(sa.select(sa.text("*")).select_from(sa.table(table))).all()
            out[table] = sorted(tuple(map(str, row)) for row in rows)
    return out


def count_rows(engine: Engine, table: str) -> int:
    """How many rows ``table`` holds (the statement built with SQLAlchemy Core, no formatting)."""
    with engine.db.engine.connect() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(sa.table(table))).scalar_one()
        )


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    """One value from an ad-hoc query (tests only)."""
    with engine.db.engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def rows(engine: Engine, sql: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of an ad-hoc query as dicts (tests only)."""
    with engine.db.engine.connect() as conn:
        return [dict(row) for row in conn.execute(sa.text(sql), params).mappings()]


def saga_jobs(engine: Engine, saga_id: str) -> list[dict[str, Any]]:
    """The jobs of one saga, live and finished, oldest first (tests only)."""
    return rows(
        engine,
        "SELECT id, queue, kind, state, attempts, created_at FROM jobs WHERE saga_id = :saga_id "
        "UNION ALL SELECT id, queue, kind, state, attempts, created_at FROM job_archive "
        "WHERE saga_id = :saga_id ORDER BY created_at, id",
        saga_id=saga_id,
    )


def execute(engine: Engine, sql: str, **params: Any) -> None:
    """Run an ad-hoc statement and commit (tests only)."""
    with engine.db.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def catalog(engine: Engine) -> dict[str, Any]:
    """The schema as the database sees it, normalized so that two databases compare."""
    with engine.db.engine.connect() as conn:
        if engine.db.dialect == "sqlite":
            return _sqlite_catalog(conn)
        return _postgres_catalog(conn)


def _sqlite_catalog(conn: sa.Connection) -> dict[str, Any]:
    objects = conn.execute(
        sa.text("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
    ).all()
    out: dict[str, Any] = {}
    for kind, name, table, sql in objects:
        text = re.sub(r"--[^\n]*", "", sql or "")
        out[f"{kind}:{name}"] = (table, " ".join(text.split()))
        if kind == "table":
            for pragma in ("table_info", "foreign_key_list"):
                out[f"{pragma}:{name}"] = [
                    tuple(row) for row in conn.execute(sa.text(f"PRAGMA {pragma}('{name}')")).all()
                ]
            # An index's position in the list (its seq) follows the order of
            # creation and drops, which carries no meaning: compare the rest.
            listed = conn.execute(sa.text(f"PRAGMA index_list('{name}')")).all()
            out[f"index_list:{name}"] = sorted(tuple(row)[1:] for row in listed)
    return out


def _postgres_catalog(conn: sa.Connection) -> dict[str, Any]:
    schema = conn.execute(sa.text("SELECT current_schema()")).scalar()
    queries = {
        "columns": """
            SELECT table_name, column_name, data_type, is_nullable, column_default,
                   ordinal_position, is_identity, identity_generation
            FROM information_schema.columns WHERE table_schema = current_schema()
            ORDER BY table_name, ordinal_position""",
        "constraints": """
            SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid, true)
            FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
            WHERE n.nspname = current_schema() ORDER BY 1, 2""",
        "indexes": """
            SELECT tablename, indexname, indexdef FROM pg_indexes
            WHERE schemaname = current_schema() ORDER BY 1, 2""",
        "triggers": """
            SELECT t.tgname, pg_get_triggerdef(t.oid, true)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND NOT t.tgisinternal ORDER BY 1""",
        "functions": """
            SELECT p.proname, pg_get_functiondef(p.oid)
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = current_schema() ORDER BY 1""",
    }
    out: dict[str, Any] = {}
    for name, sql in queries.items():
        out[name] = [
            tuple(str(v).replace(f"{schema}.", "SCHEMA.") for v in row)
            for row in conn.execute(sa.text(sql)).all()
        ]
    return out


def db_now(engine: Engine) -> datetime:
    """The database clock, the one that decides leases and deadlines."""
    return as_utc(engine.db.transaction(lambda tx: tx.scalar("db_now"), write=False))


def _expire_lease_sql(dialect: str) -> str:
    if dialect == "sqlite":
        return (
            "UPDATE jobs SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', "
            "julianday(lease_until) - 1.0) WHERE id = :id"
        )
    return "UPDATE jobs SET lease_until = lease_until - interval '1 day' WHERE id = :id"


def expire_lease(engine: Engine, job_id: str) -> None:
    """Move a job's lease a day into the past: the database clock says it expired."""
    execute(engine, _expire_lease_sql(engine.db.dialect), id=job_id)


def expire_lease_in(tx: Tx, job_id: str) -> None:
    """:func:`expire_lease` inside a transaction (a worker stalled past its lease)."""
    tx.execute_sql(_expire_lease_sql(tx.db.dialect), {"id": job_id})


def make_due(engine: Engine, job_id: str) -> None:
    """Make a pending job due now, as if its delay had passed."""
    if engine.db.dialect == "sqlite":
        sql = (
            "UPDATE jobs SET available_at = strftime('%Y-%m-%dT%H:%M:%fZ', "
            "julianday(available_at) - 1.0) WHERE id = :id"
        )
    else:
        sql = "UPDATE jobs SET available_at = available_at - interval '1 day' WHERE id = :id"
    execute(engine, sql, id=job_id)


def wait_until(predicate, timeout=60.0, interval=0.1):
    """Poll ``predicate`` until it is true (a real signal, never a fixed sleep); its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


@contextlib.contextmanager
def engine_on(url: str, app: Any = None) -> Iterator[Engine]:
    """An engine running ``app`` on ``url``, its schema migrated first (closed afterwards)."""
    from saga import Engine as _Engine
    from tests.schemas import migrate

    with _Engine(url, app=app, check_schema=False) as setup:
        migrate(setup)
    with _Engine(url, app=app) as engine:
        yield engine


def statements_seen(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """
    Every statement ``db`` runs from now on, whitespace folded.

    PostgreSQL's transactions run on SQLAlchemy (its events see them);
    SQLite's on the stdlib driver (its connection's calls are watched).
    """
    seen: list[str] = []
    if db.dialect == "postgres":
        event.listen(
            db.engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *rest: seen.append(" ".join(statement.split())),
        )
        return seen
    execute = PlainConnection.execute

    def watched(conn: PlainConnection, sql: str, params: Mapping[str, Any]) -> Any:
        seen.append(" ".join(sql.split()))
        return execute(conn, sql, params)

    monkeypatch.setattr(PlainConnection, "execute", watched)
    return seen


def commits_seen(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per transaction ``db`` commits from now on (reads included, on both dialects)."""
    seen: list[int] = []
    if db.dialect == "postgres":
        event.listen(db.engine, "commit", lambda conn: seen.append(1))
        return seen
    once = Database._plain_once

    def counted(self: Database, work: Any, *, write: bool) -> Any:
        result = once(self, work, write=write)
        if self is db:
            seen.append(1)
        return result

    monkeypatch.setattr(Database, "_plain_once", counted)
    return seen
