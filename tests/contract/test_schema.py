"""Contract: schema creation and forward-only migrations, on every backend."""

from __future__ import annotations

import threading

import pytest

from saga import Engine
from saga.core.store.migrate import (
    current_version,
    current_versions,
    required_version,
    required_versions,
)
from saga.core.store.sqlfiles import migrations, split_statements, tracking_table
from saga.examples.approvals import app as approval_app
from saga.exceptions import DatabaseError, SchemaOutOfDate
from saga.purchase.app import PURCHASE_SQL
from tests import schemas
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import catalog, dump, execute, rows, scalar


def _engine_migrations_only(url: str, upto: int | None = None) -> Engine:
    """
    A database built by running the engine's migration files in order, as old installs did.

    Before applications had SQL components of their own, the engine's
    migrations 0001-0004 created the purchase's tables too.
    """
    engine = Engine(url, check_schema=False)

    def work(tx):
        tx.script(split_statements(tracking_table(tx.dialect)))
        for migration in migrations(tx.dialect)[:upto]:
            tx.script(split_statements(migration.sql))
            tx.run(
                "record_migration",
                version=migration.version,
                name=migration.name,
                checksum=migration.checksum,
            )

    engine.db.transaction(work)
    return engine


def _migrated_step_by_step(url: str) -> Engine:
    """Every engine migration in order, then every migration of the purchase's component."""
    engine = _engine_migrations_only(url)

    def work(tx):
        for migration in PURCHASE_SQL.migrations(tx.dialect):
            tx.script(split_statements(migration.sql))
            tx.run(
                "record_component_migration",
                component="purchase",
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


def test_a_database_from_before_components_upgrades_in_place(db_url):
    """An old database (purchase tables made by the engine's migrations) keeps its rows."""
    with _engine_migrations_only(db_url, upto=4) as old:
        old.services.catalogue.add("old-1", seats=3, price="10.00", currency="EUR")
        assert {"engine": 4, "purchase": 0} == current_versions(old.db)
        result = old.upgrade()
        assert "purchase/0001_initial" in result.applied
        assert required_versions(old.db) == current_versions(old.db)
        assert ["old-1"] == [i.id for i in old.services.catalogue.list()]


def test_an_application_without_sql_gets_only_the_engines_tables(db_url):
    """The purchase's tables belong to the purchase: another application does not get them."""
    with Engine(db_url, app=approval_app, check_schema=False) as engine:
        engine.upgrade()
        tables = {key.split(":")[1] for key in catalog(engine) if key.startswith("table:")}
        if engine.db.dialect == "postgres":
            tables = {row[0] for row in catalog(engine)["columns"]}
        assert "sagas" in tables
        assert not tables & {"intensives", "purchases", "payments", "refunds"}
        assert {"engine": required_version(engine.db)} == current_versions(engine.db)


def test_an_edited_component_migration_is_detected(db_url):
    """An application's applied migration is checked like the engine's own."""
    with Engine(db_url, check_schema=False) as engine:
        engine.upgrade()
        execute(
            engine,
            "UPDATE saga_component_migrations SET checksum = 'edited' WHERE component = 'purchase'",
        )
        with pytest.raises(DatabaseError, match="purchase migration 0001_initial was edited"):
            engine.upgrade()


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


def test_postgres_names_the_component_that_is_behind(postgres_url):
    """An engine current but an application's tables behind is refused, naming them."""
    with _engine_migrations_only(postgres_url) as old:
        pass
    with Engine(postgres_url) as engine, pytest.raises(SchemaOutOfDate) as caught:
        engine.services.catalogue.list()
    assert ("purchase", 0, required_versions(engine.db)["purchase"]) == (
        caught.value.component,
        caught.value.current,
        caught.value.required,
    )
    assert "the purchase tables are at version 0" in str(caught.value)
    del old


def test_postgres_needs_an_explicit_upgrade(postgres_url):
    """A shared PostgreSQL schema is never migrated behind the operators' back."""
    with Engine(postgres_url) as engine, pytest.raises(SchemaOutOfDate, match="saga db upgrade"):
        engine.services.catalogue.list()


def test_a_database_before_the_sign_in_throttle_upgrades_and_throttles(db_url):
    """0012 on a database of the last round: the table appears, operators stay, sign-in counts."""
    from saga.core.ops.operators import Operators

    with _engine_migrations_only(db_url, upto=11) as old:
        Operators(old.db).add("ann", role="viewer", password="correct-horse-battery")
        result = old.upgrade()
        assert "0012_sign_in_throttle" in result.applied
        assert required_versions(old.db) == current_versions(old.db)
        assert Operators(old.db).sign_in("ann", "wrong-password-1", address="192.0.2.1") is None
        (attempt,) = Operators(old.db).attempts()
        assert ("ann", "refused") == (attempt["operator"], attempt["outcome"])


def test_a_database_before_definition_versions_upgrades_with_its_audit_backfilled(db_url):
    """0016 on a database of the last round: each audit row gets its saga's definition version."""
    from saga.examples.approvals import app as approvals

    with _engine_migrations_only(db_url, upto=15) as old:
        for saga_id, state, version in (("a-1", "submitted", 1), ("a-2", "approved", 2)):
            execute(
                old,
                "INSERT INTO sagas (id, kind, definition_version, state, version) "
                "VALUES (:id, 'approval', 1, :state, :version)",
                id=saga_id,
                state=state,
                version=version,
            )
        execute(
            old,
            "INSERT INTO saga_transitions (saga_id, version, from_state, to_state, event, actor) "
            "VALUES ('a-1', 1, NULL, 'submitted', 'start', 'api'), "
            "('a-2', 1, NULL, 'submitted', 'start', 'api'), "
            "('a-2', 2, 'submitted', 'approved', 'approve', 'ann')",
        )
        assert "0016_definition_versions" in old.upgrade().applied
        assert [1, 1, 1] == [
            row["definition_version"]
            for row in rows(old, "SELECT definition_version FROM saga_transitions ORDER BY id")
        ]
    with Engine(db_url, app=approvals) as engine:
        # Opening an application that registers approval v1 marks its finished sagas.
        assert "approved" == engine.sagas.get("a-2").state
        finished = rows(engine, "SELECT id FROM sagas WHERE finished_at IS NOT NULL")
        assert ["a-2"] == [row["id"] for row in finished]


# What an upgrade takes from the clock, and tests/schemas.py sets anew at each copy.
CLOCK_COLUMNS = {"saga_migrations": 3, "saga_component_migrations": 4, "prune_horizons": 1}


def _contents(engine):
    """The catalog, every row (the clock's values apart) and, on PostgreSQL, the sequences."""
    rows_by_table = {
        table: sorted(
            tuple(row[:column] + row[column + 1 :]) if table in CLOCK_COLUMNS else tuple(row)
            for row in found
            for column in [CLOCK_COLUMNS.get(table, 0)]
        )
        for table, found in dump(engine).items()
    }
    sequences = (
        rows(
            engine,
            "SELECT sequencename, data_type, start_value, increment_by, last_value, cycle "
            "FROM pg_sequences WHERE schemaname = current_schema() ORDER BY 1",
        )
        if engine.db.dialect == "postgres"
        else []
    )
    return catalog(engine), rows_by_table, sequences


def _clock_values(engine):
    return [
        scalar(engine, f"SELECT min({column}) FROM {table}")
        for table, column in (
            ("saga_migrations", "applied_at"),
            ("saga_component_migrations", "applied_at"),
            ("prune_horizons", "horizon"),
        )
    ]


def _assert_copy_is_migrated(fresh_url, copy_url, copy):
    """An upgrade on ``fresh_url``, ``copy`` on ``copy_url`` (its template made before): equal."""
    with Engine(copy_url, check_schema=False) as setup:
        template = schemas._template_for(setup)  # made before the upgrade below, if not yet
        with Engine(fresh_url, check_schema=False) as fresh:
            fresh.upgrade()
        copy(setup, template)
    with Engine(fresh_url) as migrated, Engine(copy_url) as copied:
        assert _contents(migrated) == _contents(copied)
        pairs = zip(_clock_values(migrated), _clock_values(copied), strict=True)
        assert all(made <= at for made, at in pairs), "the clock's values are the copy's"
        assert required_versions(copied.db) == current_versions(copied.db)


def test_the_tests_copy_of_a_migrated_database_is_one(db_url, second_url):
    """What most tests start from (tests/schemas.py) is what an upgrade builds."""
    _assert_copy_is_migrated(db_url, second_url, lambda setup, _: schemas.migrate(setup))


def _stocked(setup, template):
    template.stock.put(template.stock.get(timeout=60))  # one is ready
    schemas._take_or_replay(template, setup.db.search_path_schema)


def _replayed(setup, template):
    schemas._replay(template, setup.db.search_path_schema, create=False)


@pytest.mark.parametrize("copy", [_stocked, _replayed], ids=["stocked", "replayed"])
def test_either_postgresql_copy_is_a_migrated_schema(postgres_url, copy):
    """A schema replayed ahead and renamed, or replayed in place: what an upgrade builds."""
    schema = PostgresSchema()
    try:
        _assert_copy_is_migrated(postgres_url, schema.url, copy)
    finally:
        schema.drop()
