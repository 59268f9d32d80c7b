"""
Transactions on the embedded database run on the stdlib driver.

They must behave as the SQLAlchemy path did: reads see a snapshot of what
was committed (WAL: a writer in flight is invisible and does not block
them), writes are durable and checked as configured, failures are the
engine's typed errors, connections are released by ``dispose``.  (That a
writer takes the lock at BEGIN is in ``test_db_faults``.)
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from saga import Engine
from saga.core.ops import stats
from saga.core.store.db import Database
from saga.exceptions import DatabaseBusy, DatabaseError, DatabaseUnavailable
from tests import schemas


@pytest.fixture
def db(sqlite_url):
    with Engine(sqlite_url, check_schema=False) as setup:
        schemas.migrate(setup)
    database = Database(sqlite_url)
    yield database
    database.dispose()


def test_a_read_sees_what_was_committed_and_not_a_writer_in_flight(db):
    writer = sqlite3.connect(db.sqlite_path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO stat_counts VALUES ('sagas', 'k', 'waiting', 3, 0)")
        assert {} == stats.collect(db)["sagas"]  # and it did not wait for the writer
        writer.execute("COMMIT")
        assert {"waiting": 3} == stats.collect(db)["sagas"]
    finally:
        writer.close()


def test_a_failing_read_raises_the_engines_database_error(sqlite_url):
    bare = Database(sqlite_url)  # no schema: the tables are missing
    try:
        with pytest.raises(DatabaseError, match="no such table") as caught:
            bare.transaction(lambda tx: tx.all("queue_stats"), write=False)
        assert not isinstance(caught.value, sqlite3.Error)
    finally:
        bare.dispose()


def test_a_failed_read_leaves_no_transaction_open(db):
    def fail(tx):
        tx.all("queue_stats")
        raise RuntimeError("the caller's own failure")

    with pytest.raises(RuntimeError):
        db.transaction(fail, write=False)
    assert "queues" in stats.collect(db)


def test_dispose_closes_the_read_connections_and_reads_go_on(db):
    stats.collect(db)
    opened = [conn.raw for conn in db._pool._idle]
    db.dispose()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")
    assert "queues" in stats.collect(db)


def test_reads_from_many_threads_share_a_few_connections(db):
    """Threads come and go (heartbeats, requests): their reads leave no connection behind."""
    for _ in range(20):
        thread = threading.Thread(target=stats.collect, args=(db,))
        thread.start()
        thread.join()
    assert 1 == len(db._pool._idle)


def test_no_transaction_builds_a_sqlalchemy_engine(db):
    stats.collect(db)
    db.transaction(lambda tx: tx.scalar("db_now"))
    assert db._engine is None


@pytest.mark.parametrize("write", [True, False])
def test_every_connection_is_durable_and_checks_foreign_keys(db, write):
    """synchronous = FULL (an acknowledged commit survives power loss) and foreign keys on."""

    def settings(tx):
        return [
            tx.execute_sql(f"PRAGMA {name}").scalar() for name in ("synchronous", "foreign_keys")
        ]

    assert [2, 1] == db.transaction(settings, write=write)


def test_a_failed_write_is_rolled_back_whole_as_the_engines_error(db):
    def work(tx):
        tx.execute_sql("INSERT INTO stat_counts VALUES ('sagas', 'k', 'waiting', 3, 0)")
        tx.execute_sql("INSERT INTO saga_audit (saga_id) VALUES ('no such saga')")

    with pytest.raises(DatabaseError) as caught:
        db.transaction(work)
    assert not isinstance(caught.value, sqlite3.Error)
    assert {} == stats.collect(db)["sagas"]  # the first insert went with the rest


@pytest.mark.parametrize("write", [True, False])
def test_a_connection_that_keeps_dropping_ends_in_database_unavailable(sqlite_url, write):
    """Retried until the lock wait is spent, then the engine's typed error, on either path."""
    from saga.core.store.retries import StaleConnection
    from saga.exceptions import DatabaseUnavailable

    flaky = Database(sqlite_url, lock_wait=0.2)

    def work(tx):
        raise StaleConnection

    try:
        with pytest.raises(DatabaseUnavailable, match="keeps dropping connections"):
            flaky.transaction(work, write=write)
    finally:
        flaky.dispose()


@pytest.mark.parametrize("write", [True, False])
def test_a_file_that_cannot_be_opened_is_unavailable_not_busy(tmp_path, write):
    missing = Database(f"sqlite:///{tmp_path}/no/such/dir/saga.db", lock_wait=5)
    try:
        with pytest.raises(DatabaseUnavailable, match="cannot open the SQLite file"):
            missing.transaction(lambda tx: tx.scalar("db_now"), write=write)
    finally:
        missing.dispose()


@pytest.mark.parametrize("write", [True, False])
def test_a_file_that_is_not_a_database_is_said_so_at_once(tmp_path, write):
    (tmp_path / "notes.db").write_text("not a database, " * 512)
    other = Database(f"sqlite:///{tmp_path}/notes.db", lock_wait=5)
    try:
        with pytest.raises(DatabaseError, match="not a database") as caught:
            other.transaction(lambda tx: tx.scalar("db_now"), write=write)
        assert not isinstance(caught.value, DatabaseBusy)
    finally:
        other.dispose()


def test_a_percent_encoded_file_name_is_the_decoded_file(tmp_path):
    """As SQLAlchemy reads the URL: the engine and a tool on `db.engine` see one file."""
    encoded = Database(f"sqlite:///{tmp_path}/my%20saga.db")
    try:
        encoded.transaction(lambda tx: tx.scalar("db_now"))
        assert ["my saga.db"] == sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db")
        assert encoded.sqlite_path == tmp_path / "my saga.db"
    finally:
        encoded.dispose()
