"""
A transition and its outbox event commit together, or neither does.

The outbox write is made to fail between the saga's change and the event
(a trigger refuses every insert into ``outbox``, on each backend): the
change must roll back with it.  An engine that wrote the event in a
transaction of its own after the change committed would leave the saga
moved and its event missing; the last test runs these ones on such an
engine (the ``outbox_after_commit`` mutant) and sees them fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga.exceptions import DatabaseError
from tests.contract.test_outbox import outbox, place
from tests.helpers import engine_on, execute, rows
from tests.outbox_app import app

pytestmark = pytest.mark.timeout(120)

BROKEN = Path(__file__).parents[1] / "chaos" / "broken"

REFUSE = {
    "sqlite": [
        "CREATE TRIGGER test_refuse_outbox BEFORE INSERT ON outbox "
        "BEGIN SELECT RAISE(ABORT, 'test: outbox write refused'); END"
    ],
    "postgres": [
        "CREATE FUNCTION test_refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'test: outbox write refused'; END $$",
        "CREATE TRIGGER test_refuse_outbox BEFORE INSERT ON outbox "
        "FOR EACH ROW EXECUTE FUNCTION test_refuse_outbox()",
    ],
}
ALLOW = {
    "sqlite": ["DROP TRIGGER test_refuse_outbox"],
    "postgres": [
        "DROP TRIGGER test_refuse_outbox ON outbox",
        "DROP FUNCTION test_refuse_outbox()",
    ],
}


@pytest.fixture
def orders(db_url):
    with engine_on(db_url, app()) as engine:
        yield engine


def refuse_outbox_writes(engine, refuse=True):
    for sql in (REFUSE if refuse else ALLOW)[engine.db.dialect]:
        execute(engine, sql)


def events_of(engine, saga_id, type_):
    return [row for row in outbox(engine) if row["saga_id"] == saga_id and row["type"] == type_]


def test_a_failed_outbox_write_undoes_the_transition(orders):
    """Neither the state change nor its event; once the outbox takes writes, both."""
    (saga_id,) = place(orders)
    refuse_outbox_writes(orders)
    with pytest.raises(DatabaseError, match="outbox write refused"):
        orders.sagas.fire(saga_id, "pay", actor="test")
    saga = orders.sagas.get(saga_id)
    assert ("placed", 1, []) == (saga.state, saga.version, events_of(orders, saga_id, "order.paid"))
    assert [1] == [t.version for t in orders.sagas.history(saga_id)]

    refuse_outbox_writes(orders, refuse=False)
    orders.sagas.fire(saga_id, "pay", actor="test")
    saga = orders.sagas.get(saga_id)
    paid = events_of(orders, saga_id, "order.paid")
    assert ("paid", 2, [2]) == (saga.state, saga.version, [row["saga_version"] for row in paid])


def test_a_failed_outbox_write_undoes_the_start(orders):
    """No saga, no claimed operation id: the same request starts it once the outbox is back."""
    refuse_outbox_writes(orders)
    with pytest.raises(DatabaseError, match="outbox write refused"):
        place(orders)
    assert [] == rows(orders, "SELECT id FROM sagas")
    assert [] == rows(orders, "SELECT operation_id FROM saga_operations")

    refuse_outbox_writes(orders, refuse=False)
    (saga_id,) = place(orders)
    assert [1] == [row["saga_version"] for row in events_of(orders, saga_id, "order.placed")]


@pytest.mark.slow
def test_the_tests_above_fail_on_an_engine_that_writes_the_event_after_the_commit():
    """
    The mutant self-test: the outbox written in its own transaction is caught.

    Runs this module's two tests (SQLite, for speed: the mutant is the same
    Python on both backends) with ``outbox_after_commit`` applied, in a
    process of its own, and expects both to fail where the change survived.
    """
    if os.environ.get("SAGA_BROKEN_VARIANT"):
        pytest.skip("already running under a mutant")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BROKEN), os.environ.get("PYTHONPATH", "")]),
        "SAGA_BROKEN_VARIANT": "outbox_after_commit",
    }
    here = Path(__file__)
    tests = [
        f"{here}::test_a_failed_outbox_write_undoes_the_transition[sqlite]",
        f"{here}::test_a_failed_outbox_write_undoes_the_start[sqlite]",
    ]
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"),
            # sitecustomize imported saga before pytest could rewrite its plugin's asserts.
            *("-W", "ignore::pytest.PytestAssertRewriteWarning"),
            *tests,
        ],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        cwd=here.parents[2],
        check=False,
    )
    assert 1 == done.returncode, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 failed" in done.stdout, done.stdout[-3000:]
    # One summary line per test (-ra), each failing for the change that survived.
    assert done.stdout.count("- Failed: DID NOT RAISE") == 2, done.stdout[-3000:]
