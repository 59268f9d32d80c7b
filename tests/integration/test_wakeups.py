"""
PostgreSQL: a transaction never wakes the workers for jobs it claimed itself.

Every listening session pays for each notification it receives (the server
runs a transaction to deliver it), so the ones that would wake nobody are not
sent: a completion that queues its saga's next step and claims it in the same
transaction makes none.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
import sqlalchemy as sa

from saga import Engine
from saga.core.queue.leases import Queue, claim_in
from saga.core.queue.values import ClaimSpec
from saga.queue import NewJob, enqueue_in
from tests import schemas

SENTINEL = "wakeups-test-end"


def listener(url):
    conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute("LISTEN saga_jobs")
    return conn


def received(conn, queue):
    """The notifications for ``queue`` sent before a sentinel that this call sends last."""
    end = f"{SENTINEL}-{uuid.uuid4().hex}"
    conn.execute("SELECT pg_notify('saga_jobs', %s)", (end,))
    seen = []
    for note in conn.notifies(timeout=60):
        if note.payload == end:
            return seen
        if note.payload == queue:
            seen.append(note)
    raise AssertionError("the sentinel notification never came")


@pytest.fixture
def wired(postgres_url):
    """An engine on a fresh schema, a session listening, and a queue name of the test's own."""
    with Engine(postgres_url, check_schema=False) as engine:
        schemas.migrate(engine)
        conn = listener(postgres_url)
        try:
            yield engine, conn, f"q-{uuid.uuid4().hex}"
        finally:
            conn.close()


def queue_and_take(engine, queue, ids, *, batch):
    """One transaction: queue jobs ``ids``, then claim up to ``batch`` of them."""

    def work(tx):
        for job_id in ids:
            enqueue_in(tx, NewJob(id=job_id, queue=queue, kind="k"))
        return claim_in(tx, ClaimSpec.of(["k"], batch=batch, lease_seconds=30)).jobs

    return engine.db.transaction(work)


def test_a_job_claimed_by_the_transaction_that_queued_it_wakes_nobody(wired):
    engine, conn, queue = wired
    (job,) = queue_and_take(engine, queue, ["next-step"], batch=10)
    assert "next-step" == job.id
    assert [] == received(conn, queue)


def test_a_job_given_back_wakes_the_workers(wired):
    """Claimed without a word (its own transaction took it), then released: now they hear of it."""
    engine, conn, queue = wired
    jobs = queue_and_take(engine, queue, ["next-step"], batch=10)
    assert [] == received(conn, queue)
    assert {"next-step"} == Queue(engine.db).release(jobs)
    assert 1 == len(received(conn, queue))


def test_a_job_left_for_others_still_wakes_them(wired):
    """Two queued, one claimed in the same transaction: the other one is announced."""
    engine, conn, queue = wired
    assert 1 == len(queue_and_take(engine, queue, ["a", "b"], batch=1))
    assert 1 == len(received(conn, queue))


def test_a_new_saga_wakes_the_workers_of_its_queue(postgres_url):
    """A purchase accepted: its first step is due now, the purchase queue's workers hear of it."""
    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(postgres_url) as engine:
        engine.services.catalogue.add("js", seats=2, price="49.00", currency="EUR")
        conn = listener(postgres_url)
        try:
            engine.services.purchases.start(
                operation_id="op-1", intensive_id="js", student_id="s-1"
            )
            # At least one: the channel is the database's, other tests may use it too.
            assert received(conn, "purchase")
        finally:
            conn.close()
