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
import sqlalchemy as sa

from saga import Engine, NewJob, enqueue_in
from saga.core.queue import ClaimSpec, Queue, claim_in

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


def test_a_job_claimed_by_the_transaction_that_queued_it_wakes_nobody(postgres_url):
    queue = f"q-{uuid.uuid4().hex}"
    with Engine(postgres_url, check_schema=False) as engine:
        engine.upgrade()
        conn = listener(postgres_url)
        try:

            def queue_and_take(tx):
                enqueue_in(tx, NewJob(id="next-step", queue=queue, kind="k"))
                return claim_in(tx, ClaimSpec.of(["k"], batch=10, lease_seconds=30)).jobs

            (job,) = engine.db.transaction(queue_and_take)
            assert "next-step" == job.id
            assert [] == received(conn, queue)
        finally:
            conn.close()


def test_a_job_given_back_wakes_the_workers(postgres_url):
    """Claimed without a word (its own transaction took it), then released: now they hear of it."""
    queue = f"q-{uuid.uuid4().hex}"
    with Engine(postgres_url, check_schema=False) as engine:
        engine.upgrade()
        conn = listener(postgres_url)
        try:

            def queue_and_take(tx):
                enqueue_in(tx, NewJob(id="next-step", queue=queue, kind="k"))
                return claim_in(tx, ClaimSpec.of(["k"], batch=10, lease_seconds=30)).jobs

            jobs = engine.db.transaction(queue_and_take)
            assert [] == received(conn, queue)
            assert {"next-step"} == Queue(engine.db).release(jobs)
            assert 1 == len(received(conn, queue))
        finally:
            conn.close()


def test_a_job_left_for_others_still_wakes_them(postgres_url):
    """Two queued, one claimed in the same transaction: the other one is announced."""
    queue = f"q-{uuid.uuid4().hex}"
    with Engine(postgres_url, check_schema=False) as engine:
        engine.upgrade()
        conn = listener(postgres_url)
        try:

            def queue_two_take_one(tx):
                enqueue_in(tx, NewJob(id="a", queue=queue, kind="k"))
                enqueue_in(tx, NewJob(id="b", queue=queue, kind="k"))
                return claim_in(tx, ClaimSpec.of(["k"], batch=1, lease_seconds=30)).jobs

            assert 1 == len(engine.db.transaction(queue_two_take_one))
            assert 1 == len(received(conn, queue))
        finally:
            conn.close()


def test_a_new_saga_wakes_the_workers_of_its_queue(postgres_url):
    """A purchase accepted: its first step is due now, the purchase queue's workers hear of it."""
    with Engine(postgres_url, check_schema=False) as setup:
        setup.upgrade()
    with Engine(postgres_url) as engine:
        engine.catalogue.add("js", seats=2, price="49.00", currency="EUR")
        conn = listener(postgres_url)
        try:
            engine.purchases.start(operation_id="op-1", intensive_id="js", student_id="s-1")
            # At least one: the channel is the database's, other tests may use it too.
            assert received(conn, "purchase")
        finally:
            conn.close()
