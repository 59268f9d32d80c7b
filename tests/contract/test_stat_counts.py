"""
The counts `saga stats` keeps instead of scanning the history, on each backend.

Triggers keep them in the writing transaction (sagas per kind and state with
their entry times, archived jobs per queue, published events and broker
errors); `saga verify` compares them with the rows, and each test that breaks
them on purpose sees it caught.  On PostgreSQL the writers append deltas that
workers fold into totals: folding changes no figure, and two folds at once
count nothing twice.
"""

from __future__ import annotations

import threading

import pytest

from saga.core.ops import stats
from saga.core.ops.prune import Pruner
from saga.core.ops.stats import CountsRollUp
from saga.core.workers.worker import Worker
from saga.ops import verify
from saga.queue import NewJob, Queue
from tests.contract.test_outbox import Collect, relay_to
from tests.contract.test_prune import KINDS, ROUTES, history
from tests.helpers import engine_on, execute, rows, scalar
from tests.outbox_app import app

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def shop(db_url):
    with engine_on(db_url, app(routes=ROUTES)) as engine:
        yield engine


def kept_counts(engine):
    return next(i for i in verify(engine).invariants if i.name == "stat_counts")


def figures(engine):
    """What `saga stats` says about the counted things."""
    got = stats.collect(engine.db)
    return {
        "sagas": got["sagas"],
        "done": {name: queue["done"] for name, queue in got["queues"].items()},
        "published": got["outbox"]["published"],
        "broker_errors": got["outbox"]["broker_errors"],
    }


def counted(engine):
    """The same figures, counted over the rows."""
    sagas = {
        row["state"]: row["n"]
        for row in rows(engine, "SELECT state, count(*) AS n FROM sagas GROUP BY state")
    }
    done = {
        row["queue"]: row["n"]
        for row in rows(engine, "SELECT queue, count(*) AS n FROM job_archive GROUP BY queue")
    }
    return {
        "sagas": sagas,
        "done": {name: done.get(name, 0) for name in _queues(engine)},
        "published": scalar(engine, "SELECT count(published_at) FROM outbox"),
        "broker_errors": scalar(engine, "SELECT coalesce(sum(errors), 0) FROM outbox"),
    }


def _queues(engine):
    return stats.collect(engine.db)["queues"].keys()


def roll_up(engine):
    """Fold the deltas now (a worker does it about once a second)."""
    if engine.db.dialect == "postgres":
        return CountsRollUp(engine.db, every=0).poll()
    return 0


def test_stats_figures_equal_a_count_of_the_rows(shop):
    history(shop)
    broken = Collect()
    broken.failing = True
    shop.sagas.start("order", operation_id="o-err", request={"customer_id": "e", "total": 1})
    relay_to(shop, broken).poll()  # a broker error on the new saga's event
    assert counted(shop) == figures(shop)
    assert 0 < counted(shop)["broker_errors"]
    rule = kept_counts(shop)
    assert ([], True) == (rule.problems, rule.checked >= 4)


def test_pruning_the_archive_and_the_outbox_takes_their_counts_down(shop):
    history(shop)
    before = figures(shop)
    Pruner(shop.db, older_than_s=0, batch=1).run()
    after = figures(shop)
    assert (2, 4) == (before["done"]["t"], before["published"])
    assert (0, 0) == (after["done"]["t"], after["published"])
    assert counted(shop) == after
    assert [] == kept_counts(shop).problems


def test_the_mean_time_in_state_is_the_mean_of_the_rows(shop):
    history(shop)
    got = stats.collect(shop.db)["saga_kinds"]["order"]
    if shop.db.dialect == "postgres":
        sql = (
            "SELECT state, EXTRACT(EPOCH FROM avg(clock_timestamp() - entered_at)) AS mean, "
            "EXTRACT(EPOCH FROM clock_timestamp() - min(entered_at)) AS oldest "
            "FROM sagas GROUP BY state"
        )
    else:
        sql = (
            "SELECT state, avg((julianday('now') - julianday(entered_at)) * 86400.0) AS mean, "
            "(julianday('now') - julianday(min(entered_at))) * 86400.0 AS oldest "
            "FROM sagas GROUP BY state"
        )
    direct = {row["state"]: row for row in rows(shop, sql)}
    assert set(direct) == set(got)
    for state, figures_ in got.items():
        # Read a moment apart: within a second of each other.
        assert float(direct[state]["mean"]) == pytest.approx(figures_["mean_in_state_s"], abs=1)
        assert float(direct[state]["oldest"]) == pytest.approx(figures_["oldest_in_state_s"], abs=1)


def test_folding_the_deltas_changes_no_figure(shop):
    history(shop)
    before = figures(shop)
    folded = roll_up(shop)
    assert before == figures(shop)
    assert [] == kept_counts(shop).problems
    if shop.db.dialect == "postgres":
        assert 0 < folded
        assert 0 == scalar(shop, "SELECT count(*) FROM stat_deltas")


def test_a_count_out_of_step_is_caught_by_verify(shop):
    history(shop)
    roll_up(shop)
    execute(shop, "UPDATE stat_counts SET n = n + 1 WHERE metric = 'sagas'")
    assert kept_counts(shop).problems


UNSEEN = {
    # a saga's state changed, a job's archive row deleted, an event published,
    # each with its counting trigger gone
    "saga": (
        "sagas",
        "sagas_counted_update",
        "UPDATE sagas SET state = 'tampered' WHERE id = (SELECT min(id) FROM sagas)",
        "sagas:order:tampered",
    ),
    "archive": (
        "job_archive",
        "job_archive_counted_delete",
        "DELETE FROM job_archive WHERE id = 'job-0'",
        "archived:t",
    ),
    "outbox": (
        "outbox",
        "outbox_counted_update",
        "UPDATE outbox SET errors = errors + 1 WHERE id = (SELECT min(id) FROM outbox)",
        "outbox",
    ),
}


@pytest.mark.parametrize("case", sorted(UNSEEN))
def test_a_write_the_triggers_did_not_see_is_caught_by_verify(shop, case):
    table, trigger, statement, named = UNSEEN[case]
    history(shop)
    if shop.db.dialect == "postgres":
        execute(shop, f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
    else:
        execute(shop, f"DROP TRIGGER {trigger}")
    execute(shop, statement)
    assert any(problem.startswith(named) for problem in kept_counts(shop).problems)


def test_a_job_finished_by_a_worker_is_counted_once(shop):
    queue = Queue(shop.db)
    for i in range(5):
        queue.enqueue(NewJob(id=f"j-{i}", queue="t", kind="t.ok"))
    Worker(shop.db, KINDS, listen=False).run(burst=True)
    assert 5 == figures(shop)["done"]["t"]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # SQLite has no deltas
def test_two_folds_at_once_count_nothing_twice(shop):
    history(shop)
    before = figures(shop)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def fold():
        try:
            barrier.wait(timeout=30)
            for _ in range(5):
                CountsRollUp(shop.db, every=0).poll()
                shop.sagas.start(
                    "order",
                    operation_id=f"o-{threading.get_ident()}-{_}",
                    request={"customer_id": "x", "total": 1},
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [] == errors
    after = figures(shop)
    assert sum(before["sagas"].values()) + 20 == sum(after["sagas"].values())
    assert counted(shop) == after
    assert [] == kept_counts(shop).problems


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_an_idle_fold_waits_longer_and_a_busy_one_comes_back_to_every(shop):
    fold = CountsRollUp(shop.db, every=0, idle_every=60)
    fold.poll()  # whatever the fixture's schema setup left
    assert 0 == fold.poll()
    assert 0 == fold.poll()  # too soon after an empty fold: not even tried
    assert fold._wait >= 1
    fold._last = float("-inf")  # its wait has passed
    history(shop)
    assert 0 < fold.poll()
    assert 0 == fold._wait
