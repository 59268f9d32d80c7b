"""Contract: schema creation and forward-only migrations, on every backend."""

from __future__ import annotations

import threading

import pytest

from saga import Engine
from saga.core.migrate import current_version, required_version
from saga.core.sqlfiles import migrations, split_statements, tracking_table
from saga.exceptions import DatabaseError, SchemaOutOfDate
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import catalog, execute


def _migrated_step_by_step(url: str) -> Engine:
    """A database built by running every migration file in order, as old installs did."""
    engine = Engine(url, check_schema=False)

    def work(tx):
        tx.script(split_statements(tracking_table(tx.dialect)))
        for migration in migrations(tx.dialect):
            tx.script(split_statements(migration.sql))
            tx.run(
                "record_migration",
                version=migration.version,
                name=migration.name,
                checksum=migration.checksum,
            )

    engine.db.transaction(work)
    return engine


@pytest.fixture
def second_url(request, tmp_path):
    """Another empty database of the same backend as db_url."""
    if "postgres" in request.node.callspec.params.get("db_url", ""):
        require_postgres()
        schema = PostgresSchema()
        yield schema.url
        schema.drop()
    else:
        yield f"sqlite:///{tmp_path}/second.db"


def test_migrations_yield_the_schema_of_a_fresh_create(db_url, second_url):
    """Applying every migration builds exactly the catalog that schema.sql builds."""
    with Engine(db_url, check_schema=False) as fresh:
        fresh.upgrade()
        expected = catalog(fresh)
    with _migrated_step_by_step(second_url) as migrated:
        assert expected == catalog(migrated)


def test_upgrade_is_idempotent(db_url):
    """A second upgrade applies nothing and changes nothing."""
    with Engine(db_url, check_schema=False) as engine:
        first = engine.upgrade()
        before = catalog(engine)
        second = engine.upgrade()
        assert (first.changed, second.changed) == (True, False)
        assert before == catalog(engine)
        assert required_version(engine.db) == current_version(engine.db)


def test_concurrent_upgrades_apply_once(db_url):
    """Several processes upgrading at once leave one copy of each migration."""
    errors = []

    def upgrade():
        try:
            with Engine(db_url, check_schema=False) as engine:
                engine.upgrade()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=upgrade) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [] == errors
    with Engine(db_url) as engine:
        assert required_version(engine.db) == current_version(engine.db)


def test_edited_migration_is_detected(db_url):
    """A migration changed after it was applied stops the upgrade with a clear error."""
    with Engine(db_url, check_schema=False) as engine:
        engine.upgrade()
        execute(engine, "UPDATE saga_migrations SET checksum = 'edited' WHERE version = 1")
        with pytest.raises(DatabaseError, match="edited after it was applied"):
            engine.upgrade()


def test_sqlite_creates_its_schema_on_first_use(sqlite_url):
    """The embedded default needs no setup: opening it creates the schema."""
    with Engine(sqlite_url) as engine:
        assert required_version(engine.db) == current_version(engine.db)


def test_postgres_needs_an_explicit_upgrade(postgres_url):
    """A shared PostgreSQL schema is never migrated behind the operators' back."""
    with Engine(postgres_url) as engine, pytest.raises(SchemaOutOfDate, match="saga db upgrade"):
        engine.catalogue.list()
