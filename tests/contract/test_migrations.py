"""Migration plans planned and applied: live v1 sagas moved to v2, on each backend."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from saga.core import faults
from saga.core.queue.values import Done
from saga.core.sagas.migrations import Migrations, move_in
from saga.exceptions import InvalidInput
from saga.ops import verify
from saga.queue import Queue
from saga.sagas import MIGRATED
from saga.testing import SagaClock, history_problems, run_due
from tests.helpers import engine_on, rows, scalar
from tests.versions_app import HOOKED, V1_TO_V2, Migration, app

pytestmark = pytest.mark.timeout(120)


def conninfo(url):
    """A libpq connection string for the test's schema (its search_path in the options)."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url.replace("postgresql+psycopg://", "postgresql://", 1))
    options = parse_qs(parts.query).get("options", [""])[0]
    return f"postgresql://{parts.netloc}{parts.path}", options


class Crash(Exception):
    """A crash point's exit, raised in this process instead."""


@pytest.fixture
def crashes_raise(monkeypatch):
    def crash(code):
        raise Crash(code)

    monkeypatch.setattr(faults, "_die", crash)
    monkeypatch.delenv("SAGA_CRASH_RATE", raising=False)


def start(engine, n, prefix="op"):
    return [
        engine.sagas.start("leave", operation_id=f"{prefix}-{i}", request={}).saga.id
        for i in range(n)
    ]


@pytest.fixture
def v1(db_url):
    """Seven v1 requests, their manager told; two approved, not yet booked; one rejected."""
    with engine_on(db_url, app(versions=(1,), migrations=())) as engine:
        ids = start(engine, 7)
        run_due(engine)
        for saga_id in ids[:2]:
            engine.sagas.fire(saga_id, "approve", actor="ann")
        engine.sagas.fire(ids[6], "reject", actor="ann")
    return ids


@pytest.fixture
def both(db_url, v1):
    with engine_on(db_url, app()) as engine:
        yield engine


def jobs_of(engine, saga_id, table="jobs"):
    return sorted(
        row["id"] for row in rows(engine, f"SELECT id FROM {table} WHERE saga_id = :s", s=saga_id)
    )


def migrated_rows(engine):
    return scalar(engine, "SELECT count(*) FROM saga_transitions WHERE event = :e", e=MIGRATED)


# -- plan ---------------------------------------------------------------------------------


def test_the_plan_counts_each_live_state_and_says_what_is_re_derived(both):
    plan = both.migrations.plan("leave", 2)
    assert ([], 6) == (list(plan.problems), plan.sagas)
    approved, requested = (row.to_json() for row in plan.states)
    assert {
        "from_version": 1,
        "state": "approved",
        "sagas": 2,
        "to": "approved",
        "timer": None,
        "actions": {"new": ["notify_hr"], "if_pending": ["book"]},
        "hook": True,
    } == approved
    assert ("requested", 4, "escalate after 1800s since entered", False) == (
        requested["to"],
        requested["sagas"],
        requested["timer"],
        requested["hook"],
    )


def test_a_plan_with_no_migration_for_a_version_with_live_sagas_is_refused(db_url, v1):
    with engine_on(db_url, app(migrations=())) as engine:
        plan = engine.migrations.plan("leave", 2)
        assert [
            "6 live saga(s) of 'leave' are on v1 and no Migration('leave', 1, 2, …) is declared"
        ] == list(plan.problems)
        with pytest.raises(InvalidInput, match="refused, 1 problem"):
            engine.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2")
        assert 0 == migrated_rows(engine)


def test_an_unmapped_live_state_refuses_the_plan_with_its_count(both):
    partial = Migration("leave", 1, 2, states={"requested": "requested"})
    plan = Migrations(both.db, both.registry, [partial]).plan("leave", 2)
    assert [
        "migration of 'leave' v1 -> v2: live state 'approved' of v1 is mapped nowhere: map it to "
        "a state of v2 (2 live saga(s) there)"
    ] == list(plan.problems)
    assert [None, "requested"] == [row.target for row in plan.states]


def test_an_unknown_target_version_is_refused(both):
    assert ["unknown target: the application registers 'leave' v1, v2, not v3"] == list(
        both.migrations.plan("leave", 3).problems
    )


# -- apply --------------------------------------------------------------------------------


def test_apply_moves_the_live_sagas_in_batches_and_re_derives_their_work(both, v1):
    HOOKED.clear()
    report = both.migrations.apply("leave", 2, batch=4, actor="ann", reason="v2 is out")
    summary = report.to_json()
    assert (6, 0, 0, 2) == (
        summary["moved"],
        summary["skipped"],
        summary["remaining"],
        summary["batches"],
    )
    assert {"timers": 4, "actions": 4} == summary["re_derived"]
    requested, approved = both.sagas.get(v1[2]), both.sagas.get(v1[0])
    assert (2, "requested", "escalate") == (
        requested.definition_version,
        requested.state,
        requested.deadline_event,
    )
    # The clock of the state it was in keeps running: entered + 30 min under v2.
    assert 1800 == round((requested.deadline_at - requested.entered_at).total_seconds())
    assert [f"timer:{v1[2]}:{requested.version}"] == jobs_of(both, v1[2])
    assert sorted(
        [f"step:{v1[0]}:{approved.version}:book", f"step:{v1[0]}:{approved.version}:notify_hr"]
    ) == jobs_of(both, v1[0])
    assert f"step:{v1[0]}:2:book" in jobs_of(both, v1[0], "job_archive")  # superseded
    assert sorted([(v1[0], "approved", 2), (v1[1], "approved", 2)]) == sorted(HOOKED)
    (audit,) = [h for h in both.sagas.history(v1[0]) if h.event == MIGRATED]
    assert ("ann", "migrated from v1 to v2: v2 is out", 2) == (
        audit.actor,
        audit.cause,
        audit.definition_version,
    )
    assert ("rejected", 1) == (
        both.sagas.get(v1[6]).state,
        both.sagas.get(v1[6]).definition_version,
    )
    assert verify(both).ok
    assert [] == history_problems(both, v1)


def test_the_migrated_sagas_then_run_on_v2(both, v1):
    both.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2 is out")
    SagaClock(both.db).advance(1801)
    run_due(both)
    assert ["booked", "booked", "escalated"] == [both.sagas.get(s).state for s in v1[:3]]
    assert verify(both).ok
    assert [] == history_problems(both, v1)


def test_applying_again_moves_nothing(both):
    both.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2 is out")
    before = migrated_rows(both)
    again = both.migrations.apply("leave", 2, batch=10, actor="ann", reason="again")
    assert (0, 0, before) == (again.moved, again.batches, migrated_rows(both))


def test_a_dry_run_counts_batches_and_moves_nothing(both):
    report = both.migrations.apply("leave", 2, batch=4, actor="ann", reason="v2", dry_run=True)
    assert (True, 2, 6, 0) == (report.dry_run, report.batches, report.remaining, report.moved)
    assert 0 == migrated_rows(both)


def test_a_crash_between_batches_loses_nothing_and_the_rerun_goes_on(
    both, v1, crashes_raise, monkeypatch, tmp_path
):
    monkeypatch.setenv("SAGA_CRASH_POINTS", "migrate.between_batches")
    monkeypatch.setenv("SAGA_CRASH_MARKER", str(tmp_path / "marker"))
    with pytest.raises(Crash):
        both.migrations.apply("leave", 2, batch=2, actor="ann", reason="v2")
    assert 2 == migrated_rows(both)  # the first batch committed, nothing after it
    report = both.migrations.apply("leave", 2, batch=2, actor="ann", reason="v2")
    assert (4, 2) == (report.moved, report.batches)
    assert 6 == migrated_rows(both)  # nobody moved twice
    assert verify(both).ok


def test_a_saga_moved_meanwhile_fails_the_compare_and_set_and_is_skipped(both, v1):
    """Candidates read, then a transition: the move of that saga finds another version."""
    move = both.migrations.resolve("leave", 1, 2, actor="ann", reason="v2")
    stale = [both.sagas.get(saga_id) for saga_id in v1[2:4]]
    both.sagas.fire(v1[2], "approve", actor="bob")  # v1 still: approved, version bumped
    batch = both.db.transaction(lambda tx: move_in(tx, move, stale))
    assert ((v1[3],), (v1[2],)) == (batch.moved, batch.skipped)
    assert (1, "approved") == (both.sagas.get(v1[2]).definition_version, "approved")
    report = both.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2")
    assert 5 == report.moved  # the skipped one among them, in its new state
    assert ("approved", 2) == (
        both.sagas.get(v1[2]).state,
        both.sagas.get(v1[2]).definition_version,
    )
    assert verify(both).ok


def test_a_running_job_of_a_migrated_saga_is_fenced_and_its_work_queued_again(both, v1):
    """book was claimed under v1; the migration archives it: its completion finds nothing."""
    queue = Queue(both.db)
    claimed = queue.claim(["leave.book"], batch=10)
    assert {f"step:{s}:2:book" for s in v1[:2]} == {job.id for job in claimed}
    both.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2")
    assert set() == queue.complete([Done(job, {"booked": True}) for job in claimed])
    owned, _ = queue.complete_with(claimed[0], lambda tx: {"booked": True})
    assert owned is False
    assert f"step:{v1[0]}:3:book" in jobs_of(both, v1[0])  # re-derived under v2
    assert verify(both).ok


def test_a_hook_that_fails_rolls_its_batch_back(db_url, v1):
    def broken(tx, before, after):
        raise RuntimeError("HR is down")

    failing = Migration("leave", 1, 2, states=dict(V1_TO_V2.states), hooks={"approved": broken})
    with engine_on(db_url, app(migrations=(failing,))) as engine:
        with pytest.raises(RuntimeError, match="HR is down"):
            engine.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2")
        assert {1} == {engine.sagas.get(s).definition_version for s in v1}
        assert 0 == migrated_rows(engine)


def test_a_saga_a_worker_holds_is_met_by_a_later_pass(db_url, v1, both):
    """PostgreSQL: a saga locked elsewhere is skipped (SKIP LOCKED), then moved once free."""
    if both.db.dialect != "postgres":
        pytest.skip("SQLite has one writer: nothing holds a saga beside a migration's batch")
    base, options = conninfo(db_url)
    held = psycopg.connect(base, options=options)
    held.execute("SELECT id FROM sagas WHERE id = %s FOR UPDATE", (v1[3],))
    release = threading.Timer(0.5, held.rollback)
    release.start()
    began = time.monotonic()
    report = both.migrations.apply("leave", 2, batch=10, actor="ann", reason="v2")
    release.join()
    held.close()
    assert (6, 0) == (report.moved, report.remaining)
    assert report.batches >= 2  # one without it, one after it was let go
    assert time.monotonic() - began >= 0.4
    assert 2 == both.sagas.get(v1[3]).definition_version
