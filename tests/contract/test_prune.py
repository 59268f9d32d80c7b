"""Retention: `saga prune` removes what it may and nothing else, on each backend."""

from __future__ import annotations

import json
import random

import pytest

from saga import JobKind, Message, PermanentError, Route, by_saga_id
from saga.cli import main
from saga.core.ops.prune import Pruner, parse_duration
from saga.exceptions import InvalidInput
from saga.ops import verify
from saga.queue import Handlers, NewJob, Queue, Worker
from tests.contract.test_outbox import Collect, outbox, relay_to
from tests.helpers import count_rows, engine_on, execute, rows, scalar
from tests.outbox_app import app

pytestmark = pytest.mark.timeout(180)
ROUTES = (
    Route(source="shop", type="payment.received", correlate=by_saga_id("order"), event="pay"),
)


@pytest.fixture
def shop(db_url):
    with engine_on(db_url, app(routes=ROUTES)) as engine:
        yield engine


def _fail(job):
    raise PermanentError("no")


KINDS = Handlers(
    [JobKind("t.ok", lambda job: {"ok": True}, queue="t"), JobKind("t.fail", _fail, queue="t")]
)


def counts(engine):
    tables = ("sagas", "saga_transitions", "saga_operations", "jobs", "job_archive", "job_results")
    found = {table: count_rows(engine, table) for table in tables}
    found["unpublished"] = scalar(engine, "SELECT count(*) FROM outbox WHERE published_at IS NULL")
    found["published"] = scalar(
        engine, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL"
    )
    for outcome in ("applied", "unmatched"):
        found[outcome] = scalar(
            engine, "SELECT count(*) FROM inbox_messages WHERE outcome = :o", o=outcome
        )
    found["conflicts"] = scalar(engine, "SELECT count(*) FROM inbox_message_conflicts")
    return found


def history(engine):
    """Sagas: two paid and published, one placed and not yet published; jobs; messages."""
    placed = [
        engine.sagas.start(
            "order", operation_id=f"o-{i}", request={"customer_id": f"c{i}", "total": 5}
        ).saga.id
        for i in range(2)
    ]
    for saga_id in placed:
        engine.messages.deliver(
            Message(
                source="shop",
                event_id=f"pay-{saga_id}",
                type="payment.received",
                payload={"order": saga_id},
            )
        )
    relay_to(engine, Collect()).run(burst=True)
    engine.sagas.start("order", operation_id="o-late", request={"customer_id": "z", "total": 1})
    engine.messages.deliver(
        Message(
            source="shop",
            event_id="pay-unknown",
            type="payment.received",
            payload={"order": "no-such-order"},
        )
    )
    queue = Queue(engine.db)
    for i, kind in enumerate(["t.ok", "t.ok", "t.fail"]):
        queue.enqueue(NewJob(id=f"job-{i}", queue="t", kind=kind, max_attempts=1))
    Worker(engine.db, KINDS, listen=False).run(burst=True)
    queue.enqueue(NewJob(id="job-later", queue="t", kind="t.ok"))
    return placed


def test_prune_removes_finished_rows_and_keeps_records_and_open_work(shop):
    """Done jobs and their results, applied messages, published events go; the rest stays."""
    history(shop)
    before = counts(shop)
    assert (before["job_archive"], before["published"], before["applied"]) == (2, 4, 2)
    report = Pruner(shop.db, older_than_s=0, batch=1).run()
    after = counts(shop)
    assert {"jobs": 2, "inbox": 2, "outbox": 4, "refusals": 0, "sign_ins": 0} == report.pruned
    for kept in (
        "sagas",
        "saga_transitions",
        "saga_operations",
        "jobs",
        "unpublished",
        "unmatched",
    ):
        assert before[kept] == after[kept], kept
    assert (0, 0, 0, 0) == (
        after["job_archive"],
        after["job_results"],
        after["published"],
        after["applied"],
    )
    assert 1 == scalar(shop, "SELECT count(*) FROM jobs WHERE state = 'failed'")  # dead letter
    report = verify(shop)
    broken = [i.name for i in report.invariants if i.problems and i.name != "liveness"]
    assert [] == broken


def test_a_message_with_a_recorded_conflict_is_kept_as_evidence(shop):
    """The original of a conflicting message is not pruned, nor its conflict."""
    (saga_id, _) = history(shop)
    clash = Message(
        source="shop",
        event_id=f"pay-{saga_id}",
        type="payment.received",
        payload={"order": saga_id, "amount": 999},
    )
    shop.messages.deliver(clash)
    Pruner(shop.db, older_than_s=0).run()
    assert 1 == counts(shop)["conflicts"]
    kept = "SELECT count(*) FROM inbox_messages WHERE event_id = :e"
    assert 1 == scalar(shop, kept, e=f"pay-{saga_id}")


def test_rows_younger_than_the_window_are_kept(shop):
    """A day's window removes nothing that finished a moment ago."""
    history(shop)
    before = counts(shop)
    report = Pruner(shop.db, older_than_s=86400).run()
    assert {"jobs": 0, "inbox": 0, "outbox": 0, "refusals": 0, "sign_ins": 0} == report.pruned
    assert before == counts(shop)


def test_a_dry_run_counts_and_changes_nothing(shop, db_url, capsys):
    """--dry-run reports what would go; the tables and the horizons are untouched."""
    history(shop)
    before = counts(shop)
    horizons = rows(shop, "SELECT target, horizon FROM prune_horizons")
    capsys.readouterr()
    code = main(
        [
            "prune",
            "--older-than",
            "0s",
            "--dry-run",
            "--db",
            db_url,
            "--app",
            "tests.outbox_app:orders",
            "--json",
        ]
    )
    assert 0 == code
    report = json.loads(capsys.readouterr().out)
    assert (True, {"jobs": 2, "inbox": 2, "outbox": 4, "refusals": 0, "sign_ins": 0}) == (
        report["dry_run"],
        report["pruned"],
    )
    assert before == counts(shop)
    assert horizons == rows(shop, "SELECT target, horizon FROM prune_horizons")


def test_a_bad_window_is_refused_naming_the_flag(shop, db_url, capsys):
    """--older-than 3x is bad input (exit 2) and prunes nothing."""
    history(shop)
    before = counts(shop)
    code = main(["prune", "--older-than", "3x", "--db", db_url, "--app", "tests.outbox_app:orders"])
    assert 2 == code
    assert "--older-than" in capsys.readouterr().err
    assert before == counts(shop)


def test_durations_read_like_the_help_says():
    """30d, 12h, 90m, 45s and 2w, nothing else."""
    assert [2592000, 43200, 5400, 45, 1209600] == [
        parse_duration(text) for text in ("30d", "12h", "90m", "45s", "2w")
    ]
    for bad in ("", "-1d", "d", "1y", "1 d"):
        with pytest.raises(InvalidInput):
            parse_duration(bad)


def test_verify_still_asks_for_the_events_of_transitions_after_the_horizon(shop):
    """Deleting an event written after the last prune is caught: the horizon is no blanket."""
    Pruner(shop.db, older_than_s=0).run()
    saga_id = shop.sagas.start(
        "order", operation_id="after", request={"customer_id": "c", "total": 1}
    ).saga.id
    execute(shop, "DELETE FROM outbox WHERE saga_id = :s", s=saga_id)
    (rule,) = [r for r in verify(shop).invariants if r.name == "outbox"]
    assert 1 == len(rule.problems)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_prune_interleaved_with_live_work_removes_only_what_it_may(shop, seed):
    """
    A seeded interleaving of starts, payments, relay batches, prune batches and
    new cut-offs: no unpublished event, live job or record is ever removed.
    """
    rng = random.Random(seed)
    got = Collect()
    relay = relay_to(shop, got, batch=2)
    pruner = Pruner(shop.db, older_than_s=0, batch=1)
    pruner.start()
    started: list[str] = []
    emitted: set[str] = set()
    for step in range(120):
        action = rng.choice(["start", "pay", "relay", "prune", "cutoff"])
        if action == "start":
            started.append(
                shop.sagas.start(
                    "order",
                    operation_id=f"s{seed}-{step}",
                    request={"customer_id": "c", "total": 1},
                ).saga.id
            )
        elif action == "pay" and started:
            saga_id = rng.choice(started)
            if shop.sagas.get(saga_id).state == "placed":
                shop.sagas.fire(saga_id, "pay", actor="test")
        elif action == "relay":
            relay.poll()
        elif action == "prune":
            pruner.step(rng.choice(["outbox", "inbox", "jobs"]))
        else:
            pruner.start()
        present = {row["event_id"]: row["published_at"] for row in outbox(shop)}
        emitted |= set(present)
        published = {event.id for event in got.events}
        # Whatever is gone from the outbox had been published first.
        assert emitted - set(present) <= published
        assert all(present[i] is not None for i in set(present) & published)
    assert len(started) == scalar(shop, "SELECT count(*) FROM sagas")
    relay.run(burst=True)
    emitted |= {row["event_id"] for row in outbox(shop)}
    # Every event ever written reached the subscriber, pruned or not.
    assert emitted == {event.id for event in got.events}
    assert verify(shop).ok
