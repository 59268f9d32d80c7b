"""
Guards that issue 7 found uncaught: each test fails when its guard is removed.

- the saga row lock in `fire`: many processes firing at one saga all apply,
  one per version, versions contiguous (PostgreSQL: without the lock, the
  compare-and-set refuses the losers instead of serializing them);
- the version in the compare-and-set: a stale decision matching the state is
  still refused;
- a timer set for an older version of the saga never fires;
- a payment request after the hold deadline never reaches the provider;
- a hold expiry asks the provider first, on both backends;
- a completion without its fence is a `verify` violation (the witness works).
"""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from saga import Engine
from saga.core.ops.verify import verify
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.sagas.timers import timer_kind
from saga.core.workers.worker import Worker
from saga.purchase import steps as purchase_steps
from saga.purchase.steps import PurchaseSteps
from tests import schemas
from tests.counter_app import app
from tests.helpers import execute, expire_lease, expire_lease_in, make_due, scalar
from tests.parallel import race

FIRES = 6


def fire_ticks(url, saga_id, n, *, prepare=False, prepared=None):
    """One process: fire `tick` FIRES times at the saga, without an expected version."""
    with Engine(url, app=app()) as engine:
        if prepare:
            engine.sagas.get(saga_id)  # connect and check the schema before the barrier
            return None
        return [
            engine.sagas.fire(saga_id, "tick", actor=f"p{n}").saga.version for _ in range(FIRES)
        ]


@pytest.mark.slow
def test_concurrent_events_at_one_saga_all_apply_one_per_version(db_url):
    """8 processes fire at one saga at once: every event applies, versions 1..n contiguous."""
    with Engine(db_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(db_url, app=app()) as engine:
        saga_id = engine.sagas.start("counter", operation_id="c-1", request={}).saga.id
        versions = race(fire_ticks, [(db_url, saga_id, n) for n in range(8)])
        seen = sorted(v for mine in versions for v in mine)
        assert list(range(2, 2 + 8 * FIRES)) == seen
        assert [h.version for h in engine.sagas.history(saga_id)] == list(range(1, 2 + 8 * FIRES))


def test_a_stale_decision_is_refused_even_when_the_state_matches(engine):
    """The compare-and-set names the version: a decision on v1 cannot land on v2."""
    with Engine(engine.db.url.render_as_string(False), app=app()) as counters:
        saga = counters.sagas.start("counter", operation_id="c-1", request={}).saga
        counters.sagas.fire(saga.id, "tick", actor="a")  # still "open", now version 2

        def stale_update(tx):
            return tx.one(
                "transition_saga",
                id=saga.id,
                from_state="open",
                version=1,
                to_state="closed",
                data="{}",
                deadline_event=None,
                deadline_seconds=None,
                deadline_since_created=False,
                finished=True,
                event="close",
                actor="a",
                cause=None,
                payload="{}",
                timer_kind="saga.timeout",
                job_id=None,
                lease_token=None,
            )

        assert counters.db.transaction(stale_update) is None
        assert [1, 2] == [h.version for h in counters.sagas.history(saga.id)]  # no audit row
        assert ("open", 2) == (
            counters.sagas.get(saga.id).state,
            counters.sagas.get(saga.id).version,
        )


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def start(engine, method="pm_ok", hold=600):
    return engine.services.purchases.start(
        operation_id=f"op-{method}",
        intensive_id="js",
        student_id=f"s-{method}",
        payment_method=method,
        hold_seconds=hold,
    ).purchase


def steps(engine, name):
    kinds = PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter).kinds()
    return Worker(engine.db, Handlers([k for k in kinds if k.name == name]), listen=False)


def test_a_timer_set_for_an_older_version_does_not_fire(shop):
    """The v1 hold timer, already running when the saga moved to v2, changes nothing."""
    purchase = start(shop, "pm_late")  # v2 keeps the same deadline event: hold_expired
    make_due(shop, f"timer:{purchase.id}:1")
    (job,) = Queue(shop.db).claim(["saga.timeout"], batch=1)
    pending = timer_kind(shop).handler(job)  # read v1: "no payment requested yet"
    steps(shop, "purchase.request_payment").run(burst=True)  # meanwhile: v2, then paid
    state = shop.services.purchases.get(purchase.id).state
    owned, result = Queue(shop.db).complete_with(job, pending.apply)
    assert owned
    assert "skipped" in result
    assert state == shop.services.purchases.get(purchase.id).state


def test_no_payment_is_requested_after_the_hold_deadline(shop):
    """The database clock says the hold ran out: no intent, nothing at the provider."""
    purchase = start(shop)
    past = "2000-01-01T00:00:00.000Z" if shop.db.dialect == "sqlite" else "2000-01-01T00:00:00Z"
    execute(shop, "UPDATE sagas SET deadline_at = :past WHERE id = :id", past=past, id=purchase.id)
    steps(shop, "purchase.request_payment").run(burst=True)
    assert "reserved" == shop.services.purchases.get(purchase.id).state
    assert 0 == scalar(shop, "SELECT count(*) FROM payments")
    assert [] == shop.services.sandbox.ledger()["charges"]


def test_a_retried_payment_request_after_the_hold_deadline_calls_nobody(shop, monkeypatch):
    """The intent was written, the worker died before the call; the retry comes after the hold."""
    purchase = start(shop)
    worker = steps(shop, "purchase.request_payment")

    def died_before_the_call(name):
        if name == "request_payment.before_call":
            raise RuntimeError("the worker died here")

    monkeypatch.setattr(purchase_steps, "crash_point", died_before_the_call)
    (job,) = Queue(shop.db).claim(["purchase.request_payment"], batch=1)
    with pytest.raises(RuntimeError):
        worker.handlers["purchase.request_payment"].handler(job)
    assert (
        "payment_pending" == shop.services.purchases.get(purchase.id).state
    )  # the intent committed
    monkeypatch.undo()
    past = "2000-01-01T00:00:00.000Z" if shop.db.dialect == "sqlite" else "2000-01-01T00:00:00Z"
    execute(shop, "UPDATE sagas SET deadline_at = :past WHERE id = :id", past=past, id=purchase.id)
    expire_lease(shop, job.id)
    worker.run(burst=True)  # the retry: the hold ran out by the database clock
    assert [] == shop.services.sandbox.ledger()["charges"]
    assert "intent" == scalar(shop, "SELECT status FROM payments")


def test_a_lease_lost_inside_the_intent_transaction_keeps_no_intent(shop, monkeypatch):
    """The worker stalls after its fence would have passed: no intent, no call, no move."""
    purchase = start(shop)
    worker = steps(shop, "purchase.request_payment")
    (job,) = Queue(shop.db).claim(["purchase.request_payment"], batch=1)
    locked = purchase_steps._locked

    def stalled(tx, saga_id):
        saga = locked(tx, saga_id)
        expire_lease_in(tx, job.id)  # paused, or waiting on a lock, past the lease
        return saga

    monkeypatch.setattr(purchase_steps, "_locked", stalled)
    answer = worker.handlers["purchase.request_payment"].handler(job)
    assert "lease ran out" in answer["skipped"]
    assert ("reserved", None) == (
        shop.services.purchases.get(purchase.id).state,
        shop.services.purchases.get(purchase.id).payment,
    )
    assert 0 == scalar(shop, "SELECT count(*) FROM payments")
    assert [] == shop.services.sandbox.ledger()["charges"]


def test_a_hold_expiry_asks_the_provider_first(shop):
    """Money taken, the engine never told: the expiring hold finds it and confirms."""
    purchase = start(shop, "pm_late")
    steps(shop, "purchase.request_payment").run(burst=True)
    with (
        shop.services.sandbox.db.engine.begin() as conn
    ):  # the transfer completes, its webhook is lost
        conn.exec_driver_sql(
            "UPDATE sandbox_charges SET status = 'succeeded', charged_minor = amount_minor"
        )
        conn.exec_driver_sql("DELETE FROM sandbox_webhooks")
    make_due(shop, f"timer:{purchase.id}:2")
    Worker(shop.db, Handlers([timer_kind(shop)]), listen=False).run(burst=True)
    after = shop.services.purchases.get(purchase.id)
    assert ("confirmed", "succeeded") == (after.state, after.payment["status"])


def test_a_completion_without_its_fence_is_caught_by_verify(shop, monkeypatch):
    """If fencing were lost, the audit row's witness says so and verify fails on it."""
    purchase = start(shop, "pm_ok")
    worker = steps(shop, "purchase.request_payment")
    (job,) = Queue(shop.db).claim(["purchase.request_payment"], batch=1)
    answer = worker.handlers["purchase.request_payment"].handler(job)  # intent, then charged
    expire_lease(shop, job.id)  # the worker stalled past its lease
    _fence_checks_nothing(shop, monkeypatch)  # the bug under test
    owned, _ = Queue(shop.db).complete_with(job, answer.apply)
    assert owned  # the broken fence let the stale worker write...
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    broken = {i.name: i.problems for i in verify(shop).invariants if i.problems}
    assert "fencing" in broken  # ...and the witness caught it
    assert "after its lease expired" in broken["fencing"][0]


_LEASE_CHECK = re.compile(
    r"j\.lease_token = (i\.token|json_extract\(i\.value, '\$\.token'\))\s+AND j\.lease_until > "
    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))"
)


def _fence_checks_nothing(shop, monkeypatch):
    """Completion archives a job whatever its lease says (the witnesses still see it)."""
    sql, statements = shop.db.sql, shop.db.statements

    def broken_sql(name):  # SQLite's transactions run the queries as written
        texts = sql(name)
        if name != "archive_owned_jobs":
            return texts
        edited = [_LEASE_CHECK.subn("true", text) for text in texts]
        assert 1 == sum(count for _, count in edited), "the fence moved: the test breaks nothing"
        return tuple(text for text, _ in edited)

    def broken_statements(name):  # PostgreSQL's run them compiled by SQLAlchemy
        if name != "archive_owned_jobs":
            return statements(name)
        return tuple(sa.text(text) for text in broken_sql(name))

    monkeypatch.setattr(shop.db, "sql", broken_sql)
    monkeypatch.setattr(shop.db, "statements", broken_statements)
