"""
Database faults and the guards that only the database can show.

A dropped LISTEN session, a stalled SQLite writer, serialization failures and
deadlocks; and the guards issue 7 found untested: claims skip locked rows,
leases come from the database clock, SQLite writers take the write lock at
BEGIN.  Each test fails when its guard is removed.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import uuid
from datetime import datetime

import psycopg
import pytest
import sqlalchemy as sa

from saga import Engine
from saga.cli import main
from saga.core.queue.kinds import Handlers, JobKind
from saga.core.queue.leases import Queue
from saga.core.store.db import Database
from saga.core.workers.worker import Worker
from saga.exceptions import DatabaseBusy
from saga.queue import NewJob
from tests import schemas
from tests.conftest import IN_CI, _libpq_url
from tests.helpers import db_now, rows, scalar, wait_until

LISTENERS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND application_name = :name
  AND query = 'LISTEN "saga_jobs"' AND pid <> pg_backend_pid()
"""


@pytest.fixture
def pg(postgres_url, monkeypatch):
    # Sessions named for this test alone: other workers on the server (another
    # test run, a chaos run) listen on the same channel.
    monkeypatch.setenv("SAGA_APPLICATION_NAME", f"saga-test-{uuid.uuid4().hex[:12]}")
    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(postgres_url) as engine:
        yield engine


def listeners(pg):
    """This test's LISTEN sessions."""
    name = f"{pg.db.application_name}:listen"
    return [r["pid"] for r in rows(pg, LISTENERS, name=name)]


@pytest.mark.slow
def test_a_dropped_listen_session_is_reconnected(pg):
    """pg_terminate_backend on the LISTEN session: the worker lives and listens again."""
    done = []
    kind = JobKind("test.noop", lambda job: done.append(job.id) or {}, queue="test")
    worker = Worker(pg.db, Handlers([kind]), poll_interval=60.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        (first,) = wait_until(lambda: listeners(pg))
        scalar(pg, "SELECT pg_terminate_backend(:pid)", pid=first)
        # A fresh session; with a 60 s poll only a notification can wake the worker now.
        wait_until(lambda: [pid for pid in listeners(pg) if pid != first])
        Queue(pg.db).enqueue(NewJob(id="wake", queue="test", kind="test.noop"))
        wait_until(lambda: done, timeout=30)
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(timeout=30)


def test_a_stalled_sqlite_writer_gives_a_clear_error(sqlite_url, capsys, monkeypatch):
    """Another process holds the write lock: exit 1 naming the lock and the wait, no trace."""
    with Engine(sqlite_url, check_schema=False) as setup:
        schemas.migrate(setup)
        setup.services.catalogue.add("js", seats=3, price="10.00", currency="EUR")
        path = setup.db.sqlite_path
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    monkeypatch.setenv("SAGA_LOCK_WAIT_SECONDS", "1")
    try:
        capsys.readouterr()
        code = main(
            [
                "purchase",
                "start",
                "--operation-id",
                "op-1",
                "--intensive",
                "js",
                "--student",
                "s1",
                "--db",
                sqlite_url,
            ]
        )
        err = capsys.readouterr().err
    finally:
        holder.rollback()
        holder.close()
    assert 1 == code
    assert f"the SQLite database {path} stayed locked by another writer" in err
    assert "SAGA_LOCK_WAIT_SECONDS" in err
    assert "OperationalError" not in err


def test_a_stalled_writer_raises_database_busy_from_the_library(sqlite_url):
    """The same through the library: a typed error, retried no longer than the lock wait."""
    db = Database(sqlite_url, lock_wait=0.5)
    db.transaction(lambda tx: tx.execute_sql("CREATE TABLE t (x)"))
    holder = sqlite3.connect(db.sqlite_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseBusy, match="stayed locked"):
            db.transaction(lambda tx: tx.execute_sql("INSERT INTO t VALUES (1)"))
    finally:
        holder.rollback()
        holder.close()
        db.dispose()


def test_sqlite_writers_take_the_write_lock_at_begin(sqlite_url):
    """
    A write transaction holds the lock from its first statement (BEGIN IMMEDIATE).

    A read-then-write transaction that began DEFERRED would let another
    writer in between its read and its write; here the other writer must
    find the lock taken while the transaction has only read so far.
    """
    db = Database(sqlite_url)
    db.transaction(lambda tx: tx.execute_sql("CREATE TABLE t (x)"))
    other: list[str] = []

    def work(tx):
        tx.execute_sql("SELECT count(*) FROM t").scalar()
        intruder = sqlite3.connect(db.sqlite_path, timeout=0.05, isolation_level=None)
        try:
            intruder.execute("INSERT INTO t VALUES (1)")
            other.append("got in")
        except sqlite3.OperationalError as exc:
            other.append(str(exc))
        finally:
            intruder.close()
        tx.execute_sql("INSERT INTO t VALUES (2)")

    db.transaction(work)
    db.dispose()
    assert ["database is locked"] == other


INJECTED = {
    "serialization": "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$",
    "deadlock": "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40P01'; END $$",
}


@pytest.mark.parametrize("name", sorted(INJECTED))
def test_serialization_failures_and_deadlocks_rerun_the_whole_transaction(pg, name):
    """PostgreSQL's transient refusals are retried as whole transactions, invisibly."""
    attempts: list[int] = []

    def work(tx):
        attempts.append(len(attempts) + 1)
        tx.execute_sql("INSERT INTO job_replays (job_id, actor, attempts) VALUES ('j', 'a', 0)")
        if len(attempts) == 1:
            tx.execute_sql(INJECTED[name])
        return len(attempts)

    assert 2 == pg.db.transaction(work)
    assert 1 == scalar(pg, "SELECT count(*) FROM job_replays")  # the first attempt rolled back


def test_claims_skip_rows_other_transactions_hold(pg):
    """A row locked by another transaction is skipped, never waited for (SKIP LOCKED)."""
    queue = Queue(pg.db)
    for job_id in ("a", "b"):
        queue.enqueue(NewJob(id=job_id, queue="q", kind="k"))
    libpq = pg.db.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as holder:
        holder.execute("SELECT id FROM jobs WHERE id = 'a' FOR UPDATE")
        # Without SKIP LOCKED this claim would wait for the holder: make that an error.
        impatient = Database(
            pg.db.url.update_query_dict(
                {"options": f"{pg.db.url.query['options']} -clock_timeout=2000"}
            ).render_as_string(hide_password=False),
            lock_wait=3,
        )
        try:
            claimed = Queue(impatient).claim(["k"], batch=10)
        finally:
            impatient.dispose()
        holder.rollback()
    assert ["b"] == [job.id for job in claimed]


def _faketime() -> str | None:
    return shutil.which("faketime")


@pytest.mark.slow
def test_leases_and_deadlines_come_from_the_database_clock(pg):
    """
    A worker whose clock runs two hours ahead still gets leases and deadlines by the database.

    The claim and the purchase run in a process under libfaketime; PostgreSQL
    keeps the true time.  A lease or a deadline computed from the worker's
    clock would land two hours late.
    """
    if _faketime() is None:
        if IN_CI:
            pytest.fail("faketime is missing: .ci/run installs it (Debian package faketime)")
        pytest.skip("faketime is not installed")
    pg.services.catalogue.add("js", seats=3, price="10.00", currency="EUR")
    url = pg.db.url.render_as_string(hide_password=False)
    script = (
        "import sys\n"
        "from saga import Engine\n"
        "from saga.core.queue.leases import Queue\n"
        "with Engine(sys.argv[1]) as e:\n"
        "    p = e.services.purchases.start(operation_id='op', intensive_id='js', student_id='s',"
        " hold_seconds=600).purchase\n"
        "    (job,) = Queue(e.db).claim(['purchase.request_payment'], batch=1,"
        " lease_seconds=30)\n"
        "    print(p.deadline_at.isoformat(), job.lease_until.isoformat())\n"
    )
    done = subprocess.run(
        ["faketime", "-f", "+2h", sys.executable, "-c", script, url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    now = db_now(pg)
    deadline, lease = (datetime.fromisoformat(t) for t in done.stdout.split())
    assert 0 < (deadline - now).total_seconds() <= 600
    assert 0 < (lease - now).total_seconds() <= 30


def test_postgres_sessions_bound_lock_waits_and_run_without_jit(postgres_url):
    """The session settings the engine relies on, whatever the server's defaults."""
    database = Database(postgres_url)
    try:
        with database.engine.connect() as conn:
            settings = {
                name: conn.execute(sa.text(f"SHOW {name}")).scalar()
                for name in ("jit", "lock_timeout", "idle_in_transaction_session_timeout")
            }
    finally:
        database.dispose()
    assert "off" == settings["jit"]
    assert "0" not in (settings["lock_timeout"], settings["idle_in_transaction_session_timeout"])


def test_a_pooled_connection_the_server_ended_is_replaced_and_the_work_runs_once(
    postgres_url, monkeypatch
):
    """No ping before each use: a dead pooled connection costs one retry, never a failure."""
    name = f"saga-stale-{os.getpid()}-{id(monkeypatch)}"
    monkeypatch.setenv("SAGA_APPLICATION_NAME", name)
    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(postgres_url) as engine:
        engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")  # pooled now
        with psycopg.connect(_libpq_url(postgres_url), autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchone()[0]
        assert ended >= 1
        engine.services.catalogue.add("py", seats=3, price="49.00", currency="EUR")
        assert ["js", "py"] == sorted(i.id for i in engine.services.catalogue.list())


def test_a_connection_lost_after_the_first_statement_is_never_run_again(postgres_url):
    """
    Something may have run (even committed): the transaction is not repeated, it fails.

    As the database being unavailable (the session was ended), which a worker
    waits out instead of dying.
    """
    from saga.exceptions import DatabaseUnavailable

    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    calls = []

    def work(tx):
        calls.append(1)
        tx.scalar("db_now")
        pid = tx.execute_sql("SELECT pg_backend_pid()").scalar()
        with psycopg.connect(_libpq_url(postgres_url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return tx.scalar("db_now")

    with Engine(postgres_url) as engine, pytest.raises(DatabaseUnavailable):
        engine.db.transaction(work)
    assert 1 == len(calls)
