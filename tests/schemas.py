"""
Migrated databases for tests, copied from a template that a real upgrade built once.

A real upgrade runs the engine's ``schema.sql`` and every migration of each
application component statement by statement, on PostgreSQL under an advisory
lock that every test run on the server shares.  A test that only needs a
migrated database gets a copy instead, from a template migrated once per
session (per pytest-xdist worker) for each set of SQL components:

- SQLite: the template file, copied byte for byte into the test's new file;
- PostgreSQL: the template schema as ``pg_dump`` writes it (tables, constraints,
  indexes, sequences, functions, triggers, and the rows: the migrations with
  their checksums), replayed in one round trip.  On PostgreSQL the cost is the
  server's (each new table and index is a file created and synced), so a thread
  replays the dump ahead into schemas kept in stock: a test's empty schema is
  dropped and a stocked one takes its name.

Then what a migration takes from the clock (when each migration was applied, the
outbox's prune horizon) is set to the time of the copy, as an upgrade run then
would have set it.  ``tests/contract/test_schema.py`` proves a copy has the
catalog and the rows of a migrated database; tests of migrations run real ones.
Without ``pg_dump`` on the PATH a PostgreSQL copy is a real upgrade.
"""

from __future__ import annotations

import queue
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from saga import Engine

if TYPE_CHECKING:
    from saga.core.store.db import Database
    from tests.conftest import PostgresSchema

# The template's schema name in a dump, where the copy's own goes.
_PLACEHOLDER = "saga_test_copy_target"
# Schemas each PostgreSQL template keeps ready: the test after this one's, and the next.
_STOCK = 2

# What a migration takes from the clock, set anew at each copy (see the docstring).
_CLOCK_ROWS = {
    "postgres": (
        "UPDATE saga_migrations SET applied_at = clock_timestamp()",
        "UPDATE saga_component_migrations SET applied_at = clock_timestamp()",
        "UPDATE prune_horizons SET horizon = clock_timestamp()",
    ),
    "sqlite": (
        "UPDATE saga_migrations SET applied_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        "UPDATE saga_component_migrations SET applied_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        "UPDATE prune_horizons SET horizon = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    ),
}


@dataclass(frozen=True, slots=True)
class _Template:
    """
    A migrated database to copy.

    SQLite: its file.  PostgreSQL: its dump, on the server ``conninfo`` names,
    and the schemas made from it ahead (``dump`` ``None``: no pg_dump here).
    """

    sqlite_file: Path | None = None
    dump: str | None = None
    conninfo: str = ""
    stock: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)


class _Stocker:
    """One thread that replays dumps into new schemas ahead of the tests that take them."""

    def __init__(self) -> None:
        self.orders: queue.SimpleQueue[_Template | None] = queue.SimpleQueue()
        self.errors: list[psycopg.Error] = []
        self.thread = threading.Thread(target=self._run, name="schema-stock", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (template := self.orders.get()) is not None:
            name = f"t_{uuid.uuid4().hex[:16]}"
            try:
                _replay(template, name, create=True)
            except psycopg.Error as exc:  # a test then replays the dump itself; discard() raises
                self.errors.append(exc)
                continue
            template.stock.put(name)

    def stop(self) -> None:
        self.orders.put(None)
        self.thread.join()


_templates: dict[tuple[object, ...], _Template] = {}
_folders: list[Path] = []
_schemas: list[PostgresSchema] = []
_stocker: _Stocker | None = None


def _shape(db: Database) -> tuple[object, ...]:
    """What decides a migrated schema: the dialect and each component's migrations."""
    return (
        db.dialect,
        *(
            (c.name, str(c.root), tuple(m.checksum for m in c.migrations(db.dialect)))
            for c in db.components
        ),
    )


def migrate(setup: Engine) -> None:
    """
    Leave ``setup``'s empty database as ``setup.upgrade()`` would, copied from a template.

    ``setup`` must not have touched its database yet (opened with
    ``check_schema=False``, nothing run): a SQLite file must not exist, a
    PostgreSQL schema must be empty.
    """
    db = setup.db
    if _in_use(db):
        # A test opening a second engine on its database (another version of
        # its application): the schema is there; upgrading it is what happens.
        setup.upgrade()
        return
    template = _template_for(setup)
    if db.dialect == "sqlite":
        _copy_file(template, db)
    elif template.dump is None:
        setup.upgrade()
    else:
        schema = db.search_path_schema
        assert schema is not None, "a test's PostgreSQL URL names its schema"
        _take_or_replay(template, schema)


def _in_use(db: Database) -> bool:
    """Whether the database already holds tables (a copy goes to an empty one only)."""
    if db.dialect == "sqlite":
        return db.sqlite_path is not None and db.sqlite_path.exists()
    schema = db.search_path_schema
    server = db.url.set(drivername="postgresql").difference_update_query(["options"])
    with psycopg.connect(server.render_as_string(hide_password=False)) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchone()
    return bool(found and found[0])


def _copy_file(template: _Template, db: Database) -> None:
    target = db.sqlite_path
    assert target is not None
    assert template.sqlite_file is not None
    if target.exists():
        msg = f"{target} exists: a copy goes to a new file only"
        raise AssertionError(msg)
    shutil.copyfile(template.sqlite_file, target)
    with sqlite3.connect(target) as conn:
        for statement in _CLOCK_ROWS["sqlite"]:
            conn.execute(statement)
    conn.close()


def _take_or_replay(template: _Template, schema: str) -> None:
    """A stocked schema renamed ``schema`` (its empty one dropped), else the dump replayed there."""
    _the_stocker().orders.put(template)  # the replacement of what this test takes
    try:
        stocked = template.stock.get_nowait()
    except queue.Empty:
        _replay(template, schema, create=False)
        return
    with psycopg.connect(template.conninfo) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {}").format(sql.Identifier(schema)))
        rename = sql.SQL("ALTER SCHEMA {} RENAME TO {}")
        conn.execute(rename.format(sql.Identifier(stocked), sql.Identifier(schema)))
        _set_clock_rows(conn, schema)


def _replay(template: _Template, schema: str, *, create: bool) -> None:
    assert template.dump is not None
    script = template.dump.replace(_PLACEHOLDER, schema)
    with psycopg.connect(template.conninfo) as conn:
        if create:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(script)
        _set_clock_rows(conn, schema)


def _set_clock_rows(conn: psycopg.Connection[object], schema: str) -> None:
    conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
    conn.execute(";\n".join(_CLOCK_ROWS["postgres"]))


def _template_for(setup: Engine) -> _Template:
    shape = _shape(setup.db)
    if shape not in _templates:
        make = _sqlite_template if setup.db.dialect == "sqlite" else _postgres_template
        _templates[shape] = template = make(setup)
        if template.dump is not None:
            for _ in range(_STOCK - 1):  # and one more with each copy taken
                _the_stocker().orders.put(template)
    return _templates[shape]


def _sqlite_template(setup: Engine) -> _Template:
    folder = Path(tempfile.mkdtemp(prefix="saga-test-templates-"))
    _folders.append(folder)
    path = folder / "template.db"
    with Engine(f"sqlite:///{path}", app=setup.app, check_schema=False) as template:
        template.upgrade()
    # Everything into the main file (the engine runs in WAL mode): it alone is copied.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return _Template(sqlite_file=path)


def _postgres_template(setup: Engine) -> _Template:
    # Imported here: conftest imports this module.
    from tests.conftest import PostgresSchema

    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        return _Template()
    schema = PostgresSchema()
    _schemas.append(schema)
    with Engine(schema.url, app=setup.app, check_schema=False) as template:
        template.upgrade()
        server = template.db.url.set(drivername="postgresql").difference_update_query(["options"])
        conninfo = server.render_as_string(hide_password=False)
    dumped = subprocess.run(
        [pg_dump, "--schema", schema.name, "--inserts", "--no-owner", "--no-privileges", conninfo],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return _Template(dump=_replayable(dumped, schema.name), conninfo=conninfo)


def _replayable(dump: str, schema: str) -> str:
    """The dump as one script for an existing schema, its name a placeholder."""
    lines = [
        line
        for line in dump.splitlines()
        # psql's own commands (\restrict …) are not SQL; the schema exists already.
        if not line.startswith("\\") and line != f"CREATE SCHEMA {schema};"
    ]
    return re.sub(rf"\b{re.escape(schema)}\b", _PLACEHOLDER, "\n".join(lines))


def _the_stocker() -> _Stocker:
    global _stocker  # noqa: PLW0603 - one thread for the whole session
    if _stocker is None:
        _stocker = _Stocker()
    return _stocker


def discard() -> None:
    """Remove every template and every stocked schema no test took (the end of the session)."""
    global _stocker  # noqa: PLW0603 - one thread for the whole session
    errors: list[psycopg.Error] = []
    if _stocker is not None:
        _stocker.stop()
        errors = _stocker.errors
        _stocker = None
    for template in _templates.values():
        if template.dump is not None:
            _drop_all(template.conninfo, _drain(template.stock))
    for folder in _folders:
        shutil.rmtree(folder, ignore_errors=True)
    for schema in _schemas:
        schema.drop()
    _folders.clear()
    _schemas.clear()
    _templates.clear()
    if errors:
        msg = f"the schema stock's thread failed {len(errors)} time(s), first: {errors[0]!r}"
        raise RuntimeError(msg) from errors[0]


def _drain(stock: queue.SimpleQueue[str]) -> list[str]:
    names = []
    while True:
        try:
            names.append(stock.get_nowait())
        except queue.Empty:
            return names


def _drop_all(conninfo: str, names: list[str]) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
