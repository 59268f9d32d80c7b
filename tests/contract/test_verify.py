"""
Every invariant of `saga verify` can fail: each test breaks one on purpose.

A small settled world (a confirmed purchase, a refunded one, a declined one)
verifies green; then one row is tampered with the way a bug would, and
`saga verify` must exit 1 naming the invariant that broke.  On SQLite and on
PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql as psql

from saga.core.ops.verify import verify
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.purchase.inbox import ProviderEvent
from saga.testing import SagaClock
from tests.helpers import execute, scalar
from tests.purchases import cli_json


def work(engine):
    """Run everything due now, in this process (jobs, timers, sandbox webhooks)."""
    worker = Worker(engine.db, builtin_handlers(engine), pollers=engine.pollers(), listen=False)
    worker.run(burst=True)


@pytest.fixture
def world(engine):
    engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
    ids = {}
    for name, method in (("kept", "pm_ok"), ("returned", "pm_ok"), ("declined", "pm_declined")):
        ids[name] = engine.services.purchases.start(
            operation_id=f"op-{name}",
            intensive_id="js",
            student_id=name,
            payment_method=method,
            hold_seconds=600,
        ).purchase.id
    work(engine)
    engine.services.purchases.cancel(ids["returned"], reason="student asked")
    work(engine)
    states = {name: engine.services.purchases.get(saga_id).state for name, saga_id in ids.items()}
    assert {"kept": "confirmed", "returned": "refunded", "declined": "cancelled"} == states
    assert [] == [i.name for i in verify(engine).invariants if i.problems]
    engine.ids = ids
    return engine


def broken(engine):
    return {i.name for i in verify(engine).invariants if i.problems}


def sandbox(engine, sql, **params):
    with engine.services.sandbox.db.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def unlock_audit(engine):
    """Lift the append-only guard of the audit trail, as a tampering hand would."""
    if engine.db.dialect == "postgres":
        execute(engine, "ALTER TABLE saga_transitions DISABLE TRIGGER USER")
    else:
        execute(engine, "DROP TRIGGER saga_transitions_no_update")


def test_verify_exits_1_naming_the_broken_invariant(world, db_url, capsys):
    """The command line: exit 0 on the green world, exit 1 naming what broke."""
    assert 0 == cli_json(capsys, "verify", "--db", db_url)[0]
    execute(world, "UPDATE intensives SET held = held + 1")
    code, verdict = cli_json(capsys, "verify", "--db", db_url)
    assert (1, False) == (code, verdict["ok"])
    assert "seats" in {i["name"] for i in verdict["invariants"] if i["violations"]}


def test_seats(world):
    execute(world, "UPDATE intensives SET taken = taken + 1")
    assert "seats" in broken(world)


def test_seat_follows_state(world):
    execute(
        world, "UPDATE purchases SET seat = 'taken' WHERE saga_id = :id", id=world.ids["declined"]
    )
    assert "seat_follows_state" in broken(world)


def test_one_charge_per_purchase(world):
    sandbox(
        world,
        "INSERT INTO sandbox_charges (payment_id, key, params_digest, reference, method, "
        "amount_minor, charged_minor, currency, status) VALUES ('pay_twice', 'pay:again', 'x', "
        ":ref, 'pm_ok', 4900, 4900, 'EUR', 'succeeded')",
        ref=world.ids["kept"],
    )
    assert "one_charge_per_purchase" in broken(world)


def test_one_refund_per_payment(world):
    payment_id = world.services.purchases.get(world.ids["returned"]).payment["payment_id"]
    sandbox(
        world,
        "INSERT INTO sandbox_refunds (refund_id, key, params_digest, payment_id, amount_minor, "
        "status) VALUES ('re_twice', 'refund:again', 'x', :payment_id, 4900, 'succeeded')",
        payment_id=payment_id,
    )
    assert "one_refund_per_payment" in broken(world)


def test_money_matches_state(world):
    execute(
        world, "UPDATE payments SET charged_minor = 1200 WHERE saga_id = :id", id=world.ids["kept"]
    )
    assert {"money_matches_state", "records_match_provider"} <= broken(world)


def test_refunded_within_charged(world):
    execute(world, "UPDATE refunds SET amount_minor = 9800")
    assert "refunded_within_charged" in broken(world)


def test_records_match_provider(world):
    """The provider's side changed (a charge reversed): the record no longer matches it."""
    sandbox(
        world,
        "UPDATE sandbox_charges SET status = 'failed' WHERE reference = :ref",
        ref=world.ids["kept"],
    )
    assert broken(world) == {"records_match_provider"}


def test_access_follows_state(world):
    execute(world, "DELETE FROM access_grants WHERE saga_id = :id", id=world.ids["kept"])
    assert broken(world) == {"access_follows_state"}


def test_access_of_a_refunded_purchase_is_revoked(world):
    execute(world, "UPDATE access_grants SET revoked_at = NULL")
    assert broken(world) == {"access_follows_state"}


def test_no_lost_intent(world):
    execute(world, "DELETE FROM job_archive WHERE kind = 'purchase.request_payment'")
    assert "no_lost_intent" in broken(world)


def test_reconciliation_visible(world):
    """A confirmed purchase with an open outcome item: something holds what is not held."""
    execute(
        world,
        "INSERT INTO recon_items (id, saga_id, kind, subject, reason, evidence, owner, "
        "next_check_at, max_attempts, deadline) VALUES ('rec_x', :id, 'outcome', 'payment', "
        "'made up', '{}', 'checker', '2999-01-01T00:00:00.000Z', 5, '2999-01-01T00:00:00.000Z')",
        id=world.ids["kept"],
    )
    assert "reconciliation_visible" in broken(world)


def test_fencing_of_a_money_write(world):
    execute(world, "UPDATE payments SET stale_writes = 1 WHERE saga_id = :id", id=world.ids["kept"])
    assert broken(world) == {"money_fencing"}


def test_fencing_of_an_audit_row(world):
    unlock_audit(world)
    false = "false" if world.db.dialect == "postgres" else "0"
    execute(
        world,
        f"UPDATE saga_transitions SET lease_valid = {false} WHERE job_id IS NOT NULL",
    )
    assert broken(world) == {"fencing"}


def test_audit(world):
    unlock_audit(world)
    execute(
        world,
        "UPDATE saga_transitions SET version = version + 10 WHERE saga_id = :id AND version = 1",
        id=world.ids["kept"],
    )
    assert "audit" in broken(world)


def test_transitions_declared(world):
    unlock_audit(world)
    execute(
        world,
        "UPDATE saga_transitions SET event = 'teleport' WHERE saga_id = :id AND version = 2",
        id=world.ids["kept"],
    )
    assert broken(world) == {"transitions_declared"}


def test_one_effect_per_event(world):
    """Two transitions claim to be the effect of one provider event."""
    unlock_audit(world)
    payload = (
        'CAST(\'{"event_id": "evt-1"}\' AS jsonb)'
        if world.db.dialect == "postgres"
        else '\'{"event_id": "evt-1"}\''
    )
    execute(
        world,
        f"UPDATE saga_transitions SET payload = {payload} WHERE event = 'payment_succeeded'",
    )
    assert broken(world) == {"one_effect_per_event"}


def test_liveness_names_a_dead_letter(world):
    execute(
        world,
        "INSERT INTO jobs (id, queue, kind, digest, state, attempts, max_attempts, last_error, "
        "error_class, finished_at) VALUES ('job-x', 'purchase', 'purchase.refund', 'd', "
        "'failed', 3, 3, 'boom', 'transient', '2026-01-01T00:00:00.000Z')",
    )
    assert broken(world) == {"liveness"}


def test_liveness_names_an_overdue_item_nobody_escalated(world):
    execute(
        world,
        "INSERT INTO recon_items (id, saga_id, kind, subject, reason, evidence, owner, "
        "next_check_at, max_attempts, deadline) VALUES ('rec_y', :id, 'review', 'payment', "
        "'made up', '{}', 'operators', '2999-01-01T00:00:00.000Z', 5, "
        "'2000-01-01T00:00:00.000Z')",
        id=world.ids["kept"],
    )
    assert broken(world) == {"liveness"}


def test_provider_reachable_names_the_missing_ledger(world, db_url, capsys):
    """The provider's database is gone: verify says so, instead of money violations."""
    sandbox_db = world.services.sandbox.db
    world.close()
    if world.db.dialect == "postgres":
        drop = psql.SQL("DROP SCHEMA {} CASCADE").format(
            psql.Identifier(sandbox_db.search_path_schema)
        )
        conninfo = sandbox_db.url.set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(drop)
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sandbox_db.sqlite_path}{suffix}").unlink(missing_ok=True)
    code, verdict = cli_json(capsys, "verify", "--db", db_url)
    failing = {i["name"]: i for i in verdict["invariants"] if i["violations"]}
    assert (1, ["provider_reachable"]) == (code, sorted(failing))
    assert "sandbox" in failing["provider_reachable"]["examples"][0]
    assert 0 == scalar(world, "SELECT count(*) FROM external_movements")


def forged_success(world):
    """A success event with another amount: the provider contradicts it, a review opens."""
    payment_id = world.services.purchases.get(world.ids["kept"]).payment["payment_id"]
    event = ProviderEvent(
        event_id="evt-forged",
        type="payment.succeeded",
        payment_id=payment_id,
        amount_minor=1200,
        currency="USD",
    )
    return world.services.inbox.deliver(event, source="sandbox")


def test_one_review_per_event_holds_when_the_inbox_takes_a_redelivery(world):
    """The same contradicting event twice: the inbox knows it, one review."""
    first, again = forged_success(world), forged_success(world)
    assert (first.review_item, True) == (again.review_item or first.review_item, again.duplicate)
    assert set() == broken(world)


def test_one_review_per_event(world):
    """A contradicting event put before operators twice (an inbox that forgot it)."""
    forged_success(world)
    execute(
        world,
        "INSERT INTO recon_items (id, saga_id, kind, subject, reason, evidence, owner, "
        "next_check_at, max_attempts, deadline) SELECT 'rec_again', saga_id, kind, subject, "
        "reason, evidence, owner, next_check_at, max_attempts, deadline FROM recon_items "
        "WHERE reason = 'event_contradicts_provider'",
    )
    assert broken(world) == {"one_review_per_event"}


def expired_after_asking(world):
    """A purchase whose hold ran out while its payment was pending: the provider was asked."""
    saga_id = world.services.purchases.start(
        operation_id="op-late",
        intensive_id="js",
        student_id="late",
        payment_method="pm_stale_failure_first",
        hold_seconds=600,
    ).purchase.id
    work(world)
    # The charge settles a second after it was made, by the sandbox's clock:
    # moved far ahead, it is still pending when the hold runs out, however slow
    # the machine.
    later = (
        "2999-01-01T00:00:00.000Z"
        if world.services.sandbox.db.dialect == "sqlite"
        else "2999-01-01"
    )
    with world.services.sandbox.db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sandbox_charges SET created_at = :later WHERE status = 'pending'"),
            {"later": later},
        )
    SagaClock(world.db).advance(601)
    work(world)
    assert "expired" == world.services.purchases.get(saga_id).state
    return saga_id


def test_asked_before_expiry_holds_for_an_expiry_on_the_providers_answer(world):
    expired_after_asking(world)
    assert set() == broken(world)


def test_asked_before_expiry(world):
    """An expiry whose audit row has no answer from the provider: it expired blindly."""
    saga_id = expired_after_asking(world)
    unlock_audit(world)
    execute(
        world,
        "UPDATE saga_transitions SET payload = '{}' WHERE saga_id = :id AND event = 'hold_expired'",
        id=saga_id,
    )
    assert broken(world) == {"asked_before_expiry"}


def test_a_saga_in_a_state_its_kind_lacks_is_reported_not_a_crash(world):
    execute(world, "UPDATE sagas SET state = 'nowhere' WHERE id = :id", id=world.ids["kept"])
    assert "liveness" in broken(world)
